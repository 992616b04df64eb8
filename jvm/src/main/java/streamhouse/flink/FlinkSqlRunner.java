package streamhouse.flink;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.client.deployment.executors.PipelineExecutorUtils;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.PipelineExecutor;
import org.apache.flink.core.execution.PipelineExecutorFactory;
import org.apache.flink.core.execution.PipelineExecutorServiceLoader;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.runtime.minicluster.MiniClusterJobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.api.internal.TableEnvironmentInternal;
import org.apache.flink.table.operations.ModifyOperation;
import org.apache.flink.table.operations.Operation;
import org.apache.flink.table.operations.command.ResetOperation;
import org.apache.flink.table.operations.command.SetOperation;
import org.apache.flink.types.Row;
import org.apache.flink.util.CloseableIterator;

/**
 * Runs Flink SQL for the Python tests in one JVM: a Flink SQL session (as Flink's SQL client keeps
 * one) with a batch and a streaming table environment, whose jobs all run on one local MiniCluster
 * started with the JVM (starting one per job, Flink's local executor, costs about a second a job).
 *
 * <p>Protocol (stdin, UTF-8): a request is a header line {@code @@ <op> [key=value ...]}, then the
 * request's text (any number of lines), then the line {@code @@end}. Each request gets one JSON line
 * on stdout: {@code {"ok":true,...}} or {@code {"ok":false,"error":"..."}}. Flink's own output goes
 * to stderr (System.out is redirected there, so nothing can corrupt the answers).
 *
 * <ul>
 *   <li>{@code exec mode=batch|streaming [detach=true]}: the text is a script; it is split into
 *       statements at each {@code ;} outside quotes, backticks and comments, like Flink's SQL
 *       client does, and run in order. {@code SET 'k' = 'v'} changes the session as in the SQL
 *       client ({@code execution.runtime-mode} switches the session between its batch and
 *       streaming environments; any other key goes to both). Every other statement is run with
 *       {@code executeSql}'s semantics; its result rows are returned and its job awaited, except
 *       with {@code detach=true}, where a statement that starts a job leaves it running (the
 *       answer names the job; {@code cancel} stops it). Answer: {@code results}, one per
 *       statement: {@code statement}, {@code kind}, {@code columns}, {@code rows} (each row
 *       {@code [row kind, values...]}), {@code job}.
 *   <li>{@code stream consumer=<file> until=<snapshot id> [idle_ms=..] [timeout_ms=..]}: the
 *       text is one streaming SELECT over a Paimon table that names a {@code consumer-id}, in a
 *       session with a checkpoint interval; its rows are collected until the consumer file
 *       (Paimon's record of the next snapshot the source will read, written when a checkpoint
 *       completes) is past {@code until} and no row arrived for {@code idle_ms}; then the job is
 *       cancelled. Answer: {@code rows}.
 *   <li>{@code session}: cancels the detached jobs and starts a new session (no settings, no
 *       catalogs, batch mode). {@code RESET} is refused: a key once applied to the session's
 *       execution environment would stay.
 *   <li>{@code cancel}: cancels every detached job and waits until it ended.
 *   <li>{@code quit}: cancels the detached jobs and exits.
 * </ul>
 *
 * <p>Arguments: {@code --tmp DIR} (Flink's io.tmp.dirs), {@code --parallelism N} (default 1),
 * {@code --checkpoint-ms N} (every session's checkpoint interval; by default none is set, as in a
 * fresh SQL client session: Paimon's streaming sink commits only on checkpoints).
 */
public final class FlinkSqlRunner {
    /** Task slots of the MiniCluster: a streaming job and the statements beside it. */
    private static final int SLOTS = 4;

    private static final String EXECUTOR = "streamhouse-minicluster";
    private final PrintStream answers;
    private final Configuration base;
    private final MiniCluster cluster;
    private final Map<String, TableEnvironment> envs = new HashMap<>();
    private final List<JobClient> detached = new ArrayList<>();
    private String mode = "batch";

    private FlinkSqlRunner(PrintStream answers, Configuration base) throws Exception {
        this.answers = answers;
        this.base = base;
        Configuration clusterConf = new Configuration(base);
        clusterConf.setString("rest.bind-address", "127.0.0.1");
        clusterConf.setString("rest.address", "127.0.0.1");
        clusterConf.setString("rest.bind-port", "0");
        cluster =
                new MiniCluster(
                        new MiniClusterConfiguration.Builder()
                                .setConfiguration(clusterConf)
                                .setNumTaskManagers(1)
                                .setNumSlotsPerTaskManager(SLOTS)
                                .build());
        cluster.start();
        newSession();
    }

    /** A fresh session (as a new SQL client): the session's settings and catalogs are gone. */
    private void newSession() {
        envs.put("batch", environment(RuntimeExecutionMode.BATCH));
        envs.put("streaming", environment(RuntimeExecutionMode.STREAMING));
        mode = "batch";
    }

    /** A table environment whose jobs run on the JVM's one MiniCluster. */
    private TableEnvironment environment(RuntimeExecutionMode runtimeMode) {
        Configuration conf = new Configuration(base);
        conf.set(ExecutionOptions.RUNTIME_MODE, runtimeMode);
        conf.setString("execution.target", EXECUTOR);
        StreamExecutionEnvironment env =
                new StreamExecutionEnvironment(
                        executors(), conf, FlinkSqlRunner.class.getClassLoader());
        EnvironmentSettings.Builder settings = EnvironmentSettings.newInstance().withConfiguration(base);
        if (runtimeMode == RuntimeExecutionMode.BATCH) {
            settings.inBatchMode();
        } else {
            settings.inStreamingMode();
        }
        return StreamTableEnvironment.create(env, settings.build());
    }

    private PipelineExecutorServiceLoader executors() {
        PipelineExecutor executor =
                (pipeline, conf, classLoader) -> {
                    JobGraph graph = PipelineExecutorUtils.getJobGraph(pipeline, conf, classLoader);
                    return cluster.submitJob(graph)
                            .thenApply(
                                    submitted ->
                                            new MiniClusterJobClient(
                                                    submitted.getJobID(),
                                                    cluster,
                                                    classLoader,
                                                    MiniClusterJobClient.JobFinalizationBehavior
                                                            .NOTHING));
                };
        PipelineExecutorFactory factory =
                new PipelineExecutorFactory() {
                    @Override
                    public String getName() {
                        return EXECUTOR;
                    }

                    @Override
                    public boolean isCompatibleWith(Configuration configuration) {
                        return true;
                    }

                    @Override
                    public PipelineExecutor getExecutor(Configuration configuration) {
                        return executor;
                    }
                };
        return new PipelineExecutorServiceLoader() {
            @Override
            public PipelineExecutorFactory getExecutorFactory(Configuration configuration) {
                return factory;
            }

            @Override
            public Stream<String> getExecutorNames() {
                return Stream.of(EXECUTOR);
            }
        };
    }

    public static void main(String[] args) throws Exception {
        PrintStream answers =
                new PrintStream(
                        new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Configuration base = new Configuration();
        base.setString("parallelism.default", "1");
        // Local MiniClusters: small managed and network memory (the JVM's heap is capped by -Xmx).
        base.setString("taskmanager.memory.managed.size", "64m");
        base.setString("taskmanager.memory.network.min", "32m");
        base.setString("taskmanager.memory.network.max", "32m");
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--tmp":
                    base.setString("io.tmp.dirs", args[i + 1]);
                    break;
                case "--parallelism":
                    base.setString("parallelism.default", args[i + 1]);
                    break;
                case "--checkpoint-ms":
                    base.setString("execution.checkpointing.interval", args[i + 1] + " ms");
                    break;
                default:
                    throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        FlinkSqlRunner runner = new FlinkSqlRunner(answers, base);
        answers.println("{\"ok\":true,\"ready\":true}");
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            runner.serve(in);
        } finally {
            runner.cancelDetached();
            runner.cluster.close();
        }
        System.exit(0);
    }

    private void serve(BufferedReader in) throws Exception {
        String header;
        while ((header = in.readLine()) != null) {
            if (header.isEmpty()) {
                continue;
            }
            if (!header.startsWith("@@ ")) {
                answer(error("bad request header: " + header));
                continue;
            }
            String[] parts = header.substring(3).trim().split("\\s+");
            String op = parts[0];
            Map<String, String> opts = new HashMap<>();
            for (int i = 1; i < parts.length; i++) {
                int eq = parts[i].indexOf('=');
                if (eq > 0) {
                    opts.put(parts[i].substring(0, eq), parts[i].substring(eq + 1));
                }
            }
            StringBuilder text = new StringBuilder();
            String line;
            while ((line = in.readLine()) != null && !line.equals("@@end")) {
                text.append(line).append('\n');
            }
            if (op.equals("quit")) {
                answer("{\"ok\":true}");
                return;
            }
            String reply;
            try {
                switch (op) {
                    case "exec":
                        reply = exec(text.toString(), opts);
                        break;
                    case "stream":
                        reply = stream(text.toString(), opts);
                        break;
                    case "cancel":
                        cancelDetached();
                        reply = "{\"ok\":true}";
                        break;
                    case "session":
                        cancelDetached();
                        newSession();
                        reply = "{\"ok\":true}";
                        break;
                    default:
                        reply = error("unknown op " + op);
                }
            } catch (Throwable t) {
                reply = error(describe(t));
            }
            answer(reply);
        }
    }

    private void answer(String json) {
        answers.println(json);
        answers.flush();
    }

    // ---------------------------------------------------------------- exec

    private String exec(String script, Map<String, String> opts) throws Exception {
        if (opts.containsKey("mode")) {
            mode = checkMode(opts.get("mode"));
        }
        boolean detach = "true".equals(opts.get("detach"));
        List<String> statements = split(script);
        StringBuilder results = new StringBuilder("[");
        for (int n = 0; n < statements.size(); n++) {
            String stmt = statements.get(n);
            StringBuilder one = new StringBuilder("{\"statement\":").append(n);
            try {
                runStatement(stmt, detach, one);
            } catch (Throwable t) {
                // Which statement failed, and Flink's whole message.
                return error("statement " + n + " failed: " + describe(t) + "\n-- statement:\n" + stmt);
            }
            one.append('}');
            if (n > 0) {
                results.append(',');
            }
            results.append(one);
        }
        results.append(']');
        return "{\"ok\":true,\"mode\":" + str(mode) + ",\"results\":" + results + "}";
    }

    private static String checkMode(String m) {
        String v = m.trim().toLowerCase();
        if (!v.equals("batch") && !v.equals("streaming")) {
            throw new IllegalArgumentException("execution.runtime-mode must be batch or streaming: " + m);
        }
        return v;
    }

    private void runStatement(String stmt, boolean detach, StringBuilder out) throws Exception {
        TableEnvironmentInternal env = (TableEnvironmentInternal) envs.get(mode);
        List<Operation> ops = env.getParser().parse(stmt);
        if (ops.size() != 1) {
            throw new IllegalArgumentException("expected one operation, got " + ops.size());
        }
        Operation op = ops.get(0);
        if (op instanceof SetOperation) {
            SetOperation set = (SetOperation) op;
            if (!set.getKey().isPresent()) {
                throw new IllegalArgumentException("SET without a key is not supported here");
            }
            String key = set.getKey().get();
            String value = set.getValue().orElse("");
            if (key.equals("execution.runtime-mode")) {
                mode = checkMode(value);
            } else {
                for (TableEnvironment e : envs.values()) {
                    e.getConfig().getConfiguration().setString(key, value);
                }
            }
            out.append(",\"kind\":\"SET\",\"key\":").append(str(key)).append(",\"value\":").append(str(value));
            return;
        }
        if (op instanceof ResetOperation) {
            // A reset key would stay applied to the session's execution environment: start a new
            // session instead (op `session`).
            throw new IllegalArgumentException("RESET is not supported here: start a new session");
        }
        TableResult result = env.executeInternal(op);
        out.append(",\"kind\":").append(str(result.getResultKind().name()));
        out.append(",\"columns\":[");
        List<String> names = result.getResolvedSchema().getColumnNames();
        for (int i = 0; i < names.size(); i++) {
            out.append(i > 0 ? "," : "").append(str(names.get(i)));
        }
        out.append(']');
        if (result.getJobClient().isPresent()) {
            out.append(",\"job\":").append(str(result.getJobClient().get().getJobID().toString()));
            if (detach) {
                detached.add(result.getJobClient().get());
                return;
            }
            if (op instanceof ModifyOperation) {
                // INSERT, DELETE, UPDATE: wait for the job (its MiniCluster goes away with it)
                result.await();
                return;
            }
        }
        out.append(",\"rows\":[");
        boolean first = true;
        try (CloseableIterator<Row> it = result.collect()) {
            while (it.hasNext()) {
                out.append(first ? "" : ",").append(row(it.next()));
                first = false;
            }
        }
        out.append(']');
    }

    // ---------------------------------------------------------------- stream

    private static final Pattern NEXT_SNAPSHOT = Pattern.compile("\"nextSnapshot\"\\s*:\\s*(\\d+)");

    private String stream(String text, Map<String, String> opts) throws Exception {
        List<String> statements = split(text);
        if (statements.size() != 1) {
            throw new IllegalArgumentException("stream takes one SELECT, got " + statements.size());
        }
        Path consumer = Paths.get(required(opts, "consumer"));
        long until = Long.parseLong(required(opts, "until"));
        long idleMs = Long.parseLong(opts.getOrDefault("idle_ms", "1500"));
        long timeoutMs = Long.parseLong(opts.getOrDefault("timeout_ms", "90000"));
        TableEnvironment env = envs.get("streaming");
        if (!env.getConfig().getConfiguration().toMap().containsKey("execution.checkpointing.interval")) {
            // the consumer file is written when a checkpoint completes
            throw new IllegalStateException(
                    "stream needs a checkpoint interval: SET 'execution.checkpointing.interval'");
        }
        TableResult result = env.executeSql(statements.get(0));
        JobClient job = result.getJobClient().orElseThrow(() -> new IllegalStateException("no job"));
        List<String> rows = new ArrayList<>();
        long[] lastRowAt = {System.nanoTime()};
        Throwable[] failure = {null};
        CloseableIterator<Row> it = result.collect();
        Thread reader =
                new Thread(
                        () -> {
                            try {
                                while (it.hasNext()) {
                                    String r = row(it.next());
                                    synchronized (rows) {
                                        rows.add(r);
                                        lastRowAt[0] = System.nanoTime();
                                    }
                                }
                            } catch (Throwable t) {
                                synchronized (rows) {
                                    failure[0] = t;
                                }
                            }
                        },
                        "stream-collect");
        reader.setDaemon(true);
        reader.start();
        long start = System.nanoTime();
        long reachedAt = -1;
        String reason = null;
        try {
            while (true) {
                Thread.sleep(50);
                long now = System.nanoTime();
                synchronized (rows) {
                    if (failure[0] != null) {
                        reason = "the streaming read failed: " + describe(failure[0]);
                        break;
                    }
                }
                if (reachedAt < 0 && nextSnapshot(consumer) > until) {
                    reachedAt = now;
                }
                long idle;
                synchronized (rows) {
                    idle = now - Math.max(lastRowAt[0], reachedAt < 0 ? now : reachedAt);
                }
                if (reachedAt >= 0 && idle >= TimeUnit.MILLISECONDS.toNanos(idleMs)) {
                    break;
                }
                if (now - start > TimeUnit.MILLISECONDS.toNanos(timeoutMs)) {
                    reason =
                            "timed out after "
                                    + timeoutMs
                                    + " ms: consumer file "
                                    + consumer
                                    + " says next snapshot "
                                    + nextSnapshot(consumer)
                                    + ", waiting for > "
                                    + until;
                    break;
                }
            }
        } finally {
            try {
                job.cancel().get(30, TimeUnit.SECONDS);
            } catch (Exception ignored) {
                // the job may have failed or ended already
            }
            try {
                it.close();
            } catch (Exception ignored) {
                // closing a cancelled job's iterator may complain
            }
            reader.join(10_000);
        }
        if (reason != null) {
            return error(reason);
        }
        StringBuilder out = new StringBuilder("{\"ok\":true,\"rows\":[");
        synchronized (rows) {
            for (int i = 0; i < rows.size(); i++) {
                out.append(i > 0 ? "," : "").append(rows.get(i));
            }
        }
        return out.append("]}").toString();
    }

    private static long nextSnapshot(Path consumer) {
        try {
            if (!Files.exists(consumer)) {
                return -1;
            }
            Matcher m = NEXT_SNAPSHOT.matcher(Files.readString(consumer));
            return m.find() ? Long.parseLong(m.group(1)) : -1;
        } catch (Exception e) {
            return -1; // being rewritten: look again
        }
    }

    private static String required(Map<String, String> opts, String key) {
        String v = opts.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing " + key + "=");
        }
        return v;
    }

    // ---------------------------------------------------------------- jobs

    private void cancelDetached() {
        for (JobClient job : detached) {
            try {
                job.cancel().get(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                System.err.println("cancel " + job.getJobID() + ": " + describe(e));
            }
        }
        for (JobClient job : detached) {
            try {
                job.getJobExecutionResult().get(30, TimeUnit.SECONDS);
            } catch (Exception ignored) {
                // a cancelled job's result is an exception
            }
        }
        detached.clear();
    }

    // ---------------------------------------------------------------- statements

    /**
     * Splits a script at each {@code ;} that is outside a string literal ('...', '' doubles), a
     * quoted identifier (`...` or "..."), a line comment (--) and a block comment (including hints).
     * Empty statements are dropped; comments stay in the statement text.
     */
    static List<String> split(String script) {
        List<String> out = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        int i = 0;
        int n = script.length();
        while (i < n) {
            char c = script.charAt(i);
            if (c == '\'' || c == '`' || c == '"') {
                int j = i + 1;
                while (j < n) {
                    if (script.charAt(j) == c) {
                        if (j + 1 < n && script.charAt(j + 1) == c) {
                            j += 2;
                            continue;
                        }
                        break;
                    }
                    j++;
                }
                int end = Math.min(j + 1, n);
                cur.append(script, i, end);
                i = end;
            } else if (c == '-' && i + 1 < n && script.charAt(i + 1) == '-') {
                int j = script.indexOf('\n', i);
                int end = j < 0 ? n : j;
                cur.append(script, i, end);
                i = end;
            } else if (c == '/' && i + 1 < n && script.charAt(i + 1) == '*') {
                int j = script.indexOf("*/", i + 2);
                int end = j < 0 ? n : j + 2;
                cur.append(script, i, end);
                i = end;
            } else if (c == ';') {
                add(out, cur);
                cur.setLength(0);
                i++;
            } else {
                cur.append(c);
                i++;
            }
        }
        add(out, cur);
        return out;
    }

    private static void add(List<String> out, StringBuilder stmt) {
        String s = stmt.toString().trim();
        if (!s.isEmpty() && !onlyComments(s)) {
            out.add(s);
        }
    }

    private static boolean onlyComments(String s) {
        return s.replaceAll("(?m)--.*$", "").replaceAll("(?s)/\\*.*?\\*/", "").trim().isEmpty();
    }

    // ---------------------------------------------------------------- JSON

    private static String row(Row r) {
        StringBuilder b = new StringBuilder("[").append(str(r.getKind().shortString()));
        for (int i = 0; i < r.getArity(); i++) {
            b.append(',').append(value(r.getField(i)));
        }
        return b.append(']').toString();
    }

    private static String value(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
            return v.toString();
        }
        if (v instanceof Boolean) {
            return v.toString();
        }
        if (v instanceof BigDecimal) {
            // exact: as text
            return str(((BigDecimal) v).toPlainString());
        }
        if (v instanceof Row) {
            return row((Row) v);
        }
        return str(v.toString()); // strings, LocalDate (ISO), timestamps (ISO), doubles as text
    }

    static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    b.append("\\\"");
                    break;
                case '\\':
                    b.append("\\\\");
                    break;
                case '\n':
                    b.append("\\n");
                    break;
                case '\r':
                    b.append("\\r");
                    break;
                case '\t':
                    b.append("\\t");
                    break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    private static String error(String message) {
        return "{\"ok\":false,\"error\":" + str(message) + "}";
    }

    /** The exception's class and message, and every cause's, innermost last. */
    private static String describe(Throwable t) {
        Map<Throwable, Boolean> seen = new LinkedHashMap<>();
        StringBuilder b = new StringBuilder();
        for (Throwable c = t; c != null && !seen.containsKey(c); c = c.getCause()) {
            seen.put(c, true);
            if (b.length() > 0) {
                b.append("\nCaused by: ");
            }
            b.append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        if (System.getenv("FLINK_SQL_RUNNER_TRACES") != null) {
            StringWriter w = new StringWriter();
            t.printStackTrace(new PrintWriter(w));
            b.append('\n').append(w);
        }
        return b.toString();
    }
}
