package streamhouse.paimon;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.stream.Stream;

import org.apache.paimon.Snapshot;
import org.apache.paimon.catalog.Catalog;
import org.apache.paimon.catalog.CatalogContext;
import org.apache.paimon.catalog.CatalogFactory;
import org.apache.paimon.catalog.Identifier;
import org.apache.paimon.data.BinaryRow;
import org.apache.paimon.data.BinaryString;
import org.apache.paimon.data.Decimal;
import org.apache.paimon.data.GenericRow;
import org.apache.paimon.data.InternalRow;
import org.apache.paimon.disk.IOManager;
import org.apache.paimon.fs.Path;
import org.apache.paimon.fs.local.LocalFileIO;
import org.apache.paimon.io.DataFileMeta;
import org.apache.paimon.reader.RecordReader;
import org.apache.paimon.schema.Schema;
import org.apache.paimon.schema.SchemaChange;
import org.apache.paimon.shade.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.paimon.shade.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.paimon.shade.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.paimon.shade.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.paimon.table.FileStoreTable;
import org.apache.paimon.table.FileStoreTableFactory;
import org.apache.paimon.table.sink.BatchTableCommit;
import org.apache.paimon.table.sink.BatchTableWrite;
import org.apache.paimon.table.sink.BatchWriteBuilder;
import org.apache.paimon.table.sink.SinkRecord;
import org.apache.paimon.table.sink.StreamTableCommit;
import org.apache.paimon.table.sink.StreamTableWrite;
import org.apache.paimon.table.sink.StreamWriteBuilder;
import org.apache.paimon.table.sink.TableWrite;
import org.apache.paimon.table.sink.TableWriteImpl;
import org.apache.paimon.table.source.DataSplit;
import org.apache.paimon.table.source.ReadBuilder;
import org.apache.paimon.table.source.Split;
import org.apache.paimon.table.source.StreamTableScan;
import org.apache.paimon.table.source.TableRead;
import org.apache.paimon.types.DataField;
import org.apache.paimon.types.DataType;
import org.apache.paimon.types.DataTypeJsonParser;
import org.apache.paimon.types.DecimalType;
import org.apache.paimon.types.RowKind;

/**
 * Java Paimon (Paimon's own Java API, paimon-bundle) as a writer and a reader of the lake tests'
 * tables, driven by the Python tests (test/python/support/java_paimon.py) in one JVM.
 *
 * <p>Protocol: one JSON request per line on stdin, one JSON answer per line on stdout ({@code
 * {"ok":true,...}} or {@code {"ok":false,"error":"..."}}; Paimon's own output goes to stderr:
 * System.out is redirected there). Tables are {@code <warehouse>/db.db/<table>} of a filesystem
 * catalog. Values are JSON: numbers, strings, booleans, null; DATE as {@code "YYYY-MM-DD"},
 * DECIMAL as a decimal string. A row is {@code [row kind, values in the table's column order]}.
 *
 * <ul>
 *   <li>{@code create}: {@code warehouse, table, fields [[name, SQL type]], primaryKeys,
 *       partitionKeys, options}.
 *   <li>{@code write}: {@code warehouse, table, rows, writer ("stream": one StreamTableWrite kept
 *       across commits, committed with increasing commit identifiers; "batch": a BatchTableWrite
 *       per commit), writeOnly (the writer's 'write-only'), compact (null, "minor" or "full": the
 *       writer compacts every bucket of the table before its commit)}. One commit; Paimon's own
 *       automatic compaction runs as configured, awaited at the commit (deterministic tables).
 *       Answer: {@code snapshot} (the latest afterwards).
 *   <li>{@code compact}: {@code warehouse, table, full}: a dedicated compaction job (a writer of
 *       its own) compacts every bucket and commits. An open stream writer of the table is closed
 *       first and reopened by the next write (it restores from the new files).
 *   <li>{@code add_column}: {@code warehouse, table, name, type}.
 *   <li>{@code read}: {@code warehouse, table, [snapshot], [compactedCopy]}: Paimon's batch read
 *       (ReadBuilder), every column; with {@code compactedCopy} (a directory) the table is copied
 *       there, fully compacted by Paimon and the copy is read. Answer: {@code fields}, {@code
 *       rows} (row kinds included), {@code level0Files} (of the latest snapshot: Paimon's batch
 *       scan skips level-0 files of deletion-vector and first-row tables), {@code nonZeroLevels}
 *       (the most distinct non-zero levels in one bucket of the splits read).
 *   <li>{@code changelog}: {@code warehouse, table, from}: Paimon's streaming read from snapshot
 *       {@code from} (scan.mode = from-snapshot) to the latest snapshot: {@code rows}, each {@code
 *       [snapshot id, row kind, values...]}.
 *   <li>{@code quit}.
 * </ul>
 */
public final class PaimonTableRunner {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String DATABASE = "db";

    private final PrintStream answers;
    private final String tmp;
    private final Map<String, Catalog> catalogs = new HashMap<>();
    private final Map<String, StreamWriter> streamWriters = new HashMap<>();

    /** A stream writer kept open across commits, as a streaming job's. */
    private static final class StreamWriter {
        final boolean writeOnly;
        final StreamTableWrite write;
        final StreamTableCommit commit;

        StreamWriter(boolean writeOnly, StreamTableWrite write, StreamTableCommit commit) {
            this.writeOnly = writeOnly;
            this.write = write;
            this.commit = commit;
        }

        void close() throws Exception {
            write.close();
            commit.close();
        }
    }

    /** Per table: the next commit identifier of its stream writers, and their one commit user. */
    private final Map<String, long[]> nextIdentifier = new HashMap<>();

    private final Map<String, String> commitUsers = new HashMap<>();

    private PaimonTableRunner(PrintStream answers, String tmp) {
        this.answers = answers;
        this.tmp = tmp;
    }

    public static void main(String[] args) throws Exception {
        PrintStream answers =
                new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        String tmp = System.getProperty("java.io.tmpdir");
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (args[i].equals("--tmp")) {
                tmp = args[i + 1];
            } else {
                throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        PaimonTableRunner runner = new PaimonTableRunner(answers, tmp);
        answers.println("{\"ok\":true,\"ready\":true}");
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            runner.serve(in);
        } finally {
            runner.closeAll();
        }
        System.exit(0);
    }

    private void serve(BufferedReader in) throws Exception {
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode reply;
            String op = "";
            try {
                JsonNode req = JSON.readTree(line);
                op = req.path("op").asText();
                if (op.equals("quit")) {
                    answers.println("{\"ok\":true}");
                    return;
                }
                reply = handle(op, req);
                reply.put("ok", true);
            } catch (Throwable t) {
                reply = JSON.createObjectNode();
                reply.put("ok", false);
                reply.put("error", op + ": " + describe(t));
                t.printStackTrace(System.err);
            }
            answers.println(JSON.writeValueAsString(reply));
        }
    }

    private ObjectNode handle(String op, JsonNode req) throws Exception {
        switch (op) {
            case "create":
                return create(req);
            case "write":
                return write(req);
            case "compact":
                return compactJob(req);
            case "add_column":
                return addColumn(req);
            case "read":
                return read(req);
            case "changelog":
                return changelog(req);
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    // ---------------------------------------------------------------- tables

    private Catalog catalog(String warehouse) throws Exception {
        Catalog catalog = catalogs.get(warehouse);
        if (catalog == null) {
            Map<String, String> options = new HashMap<>();
            options.put("warehouse", warehouse);
            options.put("cache-enabled", "false");
            catalog =
                    CatalogFactory.createCatalog(
                            CatalogContext.create(
                                    org.apache.paimon.options.Options.fromMap(options)));
            catalog.createDatabase(DATABASE, true);
            catalogs.put(warehouse, catalog);
        }
        return catalog;
    }

    private static String key(JsonNode req) {
        return req.path("warehouse").asText() + "\u0000" + req.path("table").asText();
    }

    private FileStoreTable table(JsonNode req) throws Exception {
        return (FileStoreTable)
                catalog(req.path("warehouse").asText())
                        .getTable(Identifier.create(DATABASE, req.path("table").asText()));
    }

    private ObjectNode create(JsonNode req) throws Exception {
        Schema.Builder schema = Schema.newBuilder();
        for (JsonNode f : req.path("fields")) {
            schema.column(f.get(0).asText(), DataTypeJsonParser.parseAtomicTypeSQLString(f.get(1).asText()));
        }
        List<String> pk = strings(req.path("primaryKeys"));
        if (!pk.isEmpty()) {
            schema.primaryKey(pk);
        }
        schema.partitionKeys(strings(req.path("partitionKeys")));
        Iterator<Map.Entry<String, JsonNode>> options = req.path("options").fields();
        while (options.hasNext()) {
            Map.Entry<String, JsonNode> o = options.next();
            schema.option(o.getKey(), o.getValue().asText());
        }
        catalog(req.path("warehouse").asText())
                .createTable(
                        Identifier.create(DATABASE, req.path("table").asText()),
                        schema.build(),
                        false);
        return JSON.createObjectNode();
    }

    private ObjectNode addColumn(JsonNode req) throws Exception {
        closeStreamWriter(key(req));
        catalog(req.path("warehouse").asText())
                .alterTable(
                        Identifier.create(DATABASE, req.path("table").asText()),
                        SchemaChange.addColumn(
                                req.path("name").asText(),
                                DataTypeJsonParser.parseAtomicTypeSQLString(req.path("type").asText())),
                        false);
        return JSON.createObjectNode();
    }

    // ---------------------------------------------------------------- writes

    private IOManager ioManager() {
        return IOManager.create(tmp);
    }

    private ObjectNode write(JsonNode req) throws Exception {
        String key = key(req);
        FileStoreTable table = table(req);
        boolean writeOnly = req.path("writeOnly").asBoolean(false);
        String compact = req.path("compact").isTextual() ? req.path("compact").asText() : null;
        if (compact != null && writeOnly) {
            throw new IllegalArgumentException("a write-only writer does not compact");
        }
        FileStoreTable writeTable =
                writeOnly ? table.copy(Map.of("write-only", "true")) : table;
        List<DataField> fields = table.rowType().getFields();
        List<GenericRow> rows = new ArrayList<>();
        for (JsonNode r : req.path("rows")) {
            rows.add(row(r, fields));
        }
        String writer = req.path("writer").asText("stream");
        long identifier;
        if (writer.equals("batch")) {
            closeStreamWriter(key);
            BatchWriteBuilder builder = writeTable.newBatchWriteBuilder();
            try (BatchTableWrite write = (BatchTableWrite) builder.newWrite().withIOManager(ioManager());
                    BatchTableCommit commit = builder.newCommit()) {
                Set<List<Object>> buckets = writeRows((TableWriteImpl<?>) write, rows);
                if (compact != null) {
                    compactBuckets(write, table, buckets, compact.equals("full"));
                }
                commit.commit(write.prepareCommit());
            }
            identifier = BatchWriteBuilder.COMMIT_IDENTIFIER;
        } else if (writer.equals("stream")) {
            StreamWriter sw = streamWriters.get(key);
            if (sw != null && sw.writeOnly != writeOnly) {
                closeStreamWriter(key);
                sw = null;
            }
            if (sw == null) {
                String user = commitUsers.computeIfAbsent(key, k -> UUID.randomUUID().toString());
                StreamWriteBuilder builder = writeTable.newStreamWriteBuilder().withCommitUser(user);
                StreamTableWrite write = (StreamTableWrite) builder.newWrite().withIOManager(ioManager());
                sw = new StreamWriter(writeOnly, write, builder.newCommit());
                streamWriters.put(key, sw);
            }
            long[] next = nextIdentifier.computeIfAbsent(key, k -> new long[] {1});
            identifier = next[0]++;
            Set<List<Object>> buckets = writeRows((TableWriteImpl<?>) sw.write, rows);
            if (compact != null) {
                compactBuckets(sw.write, table, buckets, compact.equals("full"));
            }
            sw.commit.commit(identifier, sw.write.prepareCommit(true, identifier));
        } else {
            throw new IllegalArgumentException("unknown writer " + writer);
        }
        ObjectNode out = JSON.createObjectNode();
        out.put("snapshot", latestSnapshot(table(req)));
        out.put("commitIdentifier", identifier);
        return out;
    }

    /** Writes the rows; returns every (partition, bucket) written, as [partition, bucket]. */
    private static Set<List<Object>> writeRows(TableWriteImpl<?> write, List<GenericRow> rows)
            throws Exception {
        Set<List<Object>> buckets = new LinkedHashSet<>();
        for (GenericRow row : rows) {
            SinkRecord record = write.writeAndReturn(row);
            if (record != null) {
                buckets.add(List.of(record.partition().copy(), record.bucket()));
            }
        }
        return buckets;
    }

    /** Every (partition, bucket) holding files in the latest snapshot, plus `extra`. */
    private static Set<List<Object>> allBuckets(FileStoreTable table, Set<List<Object>> extra) {
        Set<List<Object>> buckets = new LinkedHashSet<>();
        if (table.snapshotManager().latestSnapshot() != null) {
            for (DataSplit split : table.newSnapshotReader().read().dataSplits()) {
                buckets.add(List.of(split.partition().copy(), split.bucket()));
            }
        }
        buckets.addAll(extra);
        return buckets;
    }

    private static void compactBuckets(
            TableWrite write, FileStoreTable table, Set<List<Object>> written, boolean full)
            throws Exception {
        for (List<Object> pb : allBuckets(table, written)) {
            write.compact((BinaryRow) pb.get(0), (Integer) pb.get(1), full);
        }
    }

    /** A dedicated compaction job: a writer of its own compacts every bucket and commits. */
    private ObjectNode compactJob(JsonNode req) throws Exception {
        closeStreamWriter(key(req));
        FileStoreTable table = table(req);
        compactTable(table, req.path("full").asBoolean());
        ObjectNode out = JSON.createObjectNode();
        out.put("snapshot", latestSnapshot(table(req)));
        return out;
    }

    private void compactTable(FileStoreTable table, boolean full) throws Exception {
        StreamWriteBuilder builder =
                table.newStreamWriteBuilder().withCommitUser(UUID.randomUUID().toString());
        try (StreamTableWrite write = (StreamTableWrite) builder.newWrite().withIOManager(ioManager());
                StreamTableCommit commit = builder.newCommit()) {
            compactBuckets(write, table, Set.of(), full);
            commit.commit(1, write.prepareCommit(true, 1));
        }
    }

    private void closeStreamWriter(String key) throws Exception {
        StreamWriter sw = streamWriters.remove(key);
        if (sw != null) {
            sw.close();
        }
    }

    private void closeAll() {
        for (StreamWriter sw : streamWriters.values()) {
            try {
                sw.close();
            } catch (Exception e) {
                e.printStackTrace(System.err);
            }
        }
        streamWriters.clear();
    }

    private static long latestSnapshot(FileStoreTable table) {
        Snapshot s = table.snapshotManager().latestSnapshot();
        return s == null ? 0 : s.id();
    }

    // ---------------------------------------------------------------- reads

    private ObjectNode read(JsonNode req) throws Exception {
        FileStoreTable table = table(req);
        if (req.hasNonNull("compactedCopy")) {
            java.nio.file.Path to = Paths.get(req.path("compactedCopy").asText());
            copyTree(Paths.get(table.location().toUri().getPath()), to);
            table = FileStoreTableFactory.create(LocalFileIO.create(), new Path(to.toString()));
            compactTable(table, true);
            table = FileStoreTableFactory.create(LocalFileIO.create(), new Path(to.toString()));
        }
        if (req.hasNonNull("snapshot")) {
            table = table.copy(Map.of("scan.snapshot-id", req.path("snapshot").asText()));
        }
        ReadBuilder rb = table.newReadBuilder();
        List<Split> splits = rb.newScan().plan().splits();
        TableRead read = rb.newRead();
        List<DataField> fields = table.rowType().getFields();
        ArrayNode rows = JSON.createArrayNode();
        try (RecordReader<InternalRow> reader = read.createReader(splits)) {
            reader.forEachRemaining(row -> rows.add(toJson(row, fields, null)));
        }
        int level0 = 0;
        if (table.snapshotManager().latestSnapshot() != null) {
            for (DataSplit split : table.newSnapshotReader().read().dataSplits()) {
                for (DataFileMeta f : split.dataFiles()) {
                    if (f.level() == 0) {
                        level0++;
                    }
                }
            }
        }
        // The most distinct non-zero levels one bucket of the read holds (the lookup rule picks
        // a key's lowest one: a reader merging every level differs only where there are two).
        int nonZeroLevels = 0;
        for (Split split : splits) {
            if (split instanceof DataSplit) {
                nonZeroLevels =
                        Math.max(
                                nonZeroLevels,
                                (int)
                                        ((DataSplit) split)
                                                .dataFiles().stream()
                                                        .mapToInt(DataFileMeta::level)
                                                        .filter(l -> l > 0)
                                                        .distinct()
                                                        .count());
            }
        }
        ObjectNode out = JSON.createObjectNode();
        ArrayNode names = out.putArray("fields");
        fields.forEach(f -> names.add(f.name()));
        out.set("rows", rows);
        out.put("level0Files", level0);
        out.put("nonZeroLevels", nonZeroLevels);
        return out;
    }

    private ObjectNode changelog(JsonNode req) throws Exception {
        FileStoreTable table = table(req);
        long latest = latestSnapshot(table);
        Map<String, String> options = new LinkedHashMap<>();
        options.put("scan.mode", "from-snapshot");
        options.put("scan.snapshot-id", String.valueOf(req.path("from").asLong(1)));
        // the latest schema for every change (copy() would time-travel to the start's schema)
        FileStoreTable streaming = table.copyWithoutTimeTravel(options);
        ReadBuilder rb = streaming.newReadBuilder();
        StreamTableScan scan = rb.newStreamScan();
        TableRead read = rb.newRead();
        List<DataField> fields = streaming.rowType().getFields();
        ArrayNode rows = JSON.createArrayNode();
        for (int guard = 0; guard < 100_000; guard++) {
            for (Split split : scan.plan().splits()) {
                long snapshot = ((DataSplit) split).snapshotId();
                try (RecordReader<InternalRow> reader = read.createReader(split)) {
                    reader.forEachRemaining(row -> rows.add(toJson(row, fields, snapshot)));
                }
            }
            Long next = scan.checkpoint();
            if (next == null || next > latest) {
                break;
            }
        }
        ObjectNode out = JSON.createObjectNode();
        out.set("rows", rows);
        return out;
    }

    // ---------------------------------------------------------------- values

    private static GenericRow row(JsonNode r, List<DataField> fields) {
        RowKind kind = RowKind.fromShortString(r.get(0).asText());
        Object[] values = new Object[fields.size()];
        for (int i = 0; i < fields.size(); i++) {
            JsonNode v = r.get(i + 1);
            values[i] = v == null || v.isNull() ? null : toPaimon(v, fields.get(i).type());
        }
        return GenericRow.ofKind(kind, values);
    }

    private static Object toPaimon(JsonNode v, DataType type) {
        switch (type.getTypeRoot()) {
            case INTEGER:
                return v.asInt();
            case BIGINT:
                return v.asLong();
            case SMALLINT:
                return (short) v.asInt();
            case DOUBLE:
                return v.asDouble();
            case BOOLEAN:
                return v.asBoolean();
            case CHAR:
            case VARCHAR:
                return BinaryString.fromString(v.asText());
            case DATE:
                return (int) LocalDate.parse(v.asText()).toEpochDay();
            case DECIMAL:
                DecimalType d = (DecimalType) type;
                return Decimal.fromBigDecimal(new BigDecimal(v.asText()), d.getPrecision(), d.getScale());
            default:
                throw new IllegalArgumentException("type not supported by the runner: " + type);
        }
    }

    private static ArrayNode toJson(InternalRow row, List<DataField> fields, Long snapshot) {
        ArrayNode out = JSON.createArrayNode();
        if (snapshot != null) {
            out.add(snapshot);
        }
        out.add(row.getRowKind().shortString());
        for (int i = 0; i < fields.size(); i++) {
            if (row.isNullAt(i)) {
                out.addNull();
                continue;
            }
            DataType type = fields.get(i).type();
            switch (type.getTypeRoot()) {
                case INTEGER:
                    out.add(row.getInt(i));
                    break;
                case BIGINT:
                    out.add(row.getLong(i));
                    break;
                case SMALLINT:
                    out.add(row.getShort(i));
                    break;
                case DOUBLE:
                    out.add(row.getDouble(i));
                    break;
                case BOOLEAN:
                    out.add(row.getBoolean(i));
                    break;
                case CHAR:
                case VARCHAR:
                    out.add(row.getString(i).toString());
                    break;
                case DATE:
                    out.add(LocalDate.ofEpochDay(row.getInt(i)).toString());
                    break;
                case DECIMAL:
                    DecimalType d = (DecimalType) type;
                    out.add(row.getDecimal(i, d.getPrecision(), d.getScale()).toBigDecimal().toPlainString());
                    break;
                default:
                    throw new IllegalArgumentException("type not supported by the runner: " + type);
            }
        }
        return out;
    }

    // ---------------------------------------------------------------- helpers

    private static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    private static void copyTree(java.nio.file.Path from, java.nio.file.Path to) throws IOException {
        try (Stream<java.nio.file.Path> paths = Files.walk(from)) {
            for (java.nio.file.Path p : (Iterable<java.nio.file.Path>) paths::iterator) {
                java.nio.file.Path target = to.resolve(from.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(target);
                } else {
                    Files.copy(p, target, StandardCopyOption.REPLACE_EXISTING);
                }
            }
        }
    }

    /** The exception with every cause, one per line. */
    private static String describe(Throwable t) {
        StringBuilder out = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (out.length() > 0) {
                out.append("\ncaused by: ");
            }
            out.append(c.getClass().getName()).append(": ").append(c.getMessage());
            if (c.getCause() == c) {
                break;
            }
        }
        if (out.length() == 0) {
            StringWriter w = new StringWriter();
            t.printStackTrace(new PrintWriter(w));
            return w.toString();
        }
        return out.toString();
    }
}
