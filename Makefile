# streamhouse — the two commands a fresh machine needs: `make demo` and `make test`.
# Cargo's target dir lives outside the clone so repeat builds on one machine are fast.
SHELL := /bin/bash
CARGO_TARGET_DIR ?= $(HOME)/.cache/streamhouse-target
export CARGO_TARGET_DIR
# The 1.4 artifact resolves its own dependency graph (duckdb-rs 1.4, no Fluss client, other tokio
# features): a target dir of its own, so neither build invalidates the other's and both can run at once.
TARGET14 ?= $(CARGO_TARGET_DIR)-duckdb14
EXT := streamhouse.duckdb_extension
VENV := .venv
VENV15 := .venv-duckdb15
# The rest of the DuckDB version matrix (test/python/host/test_versions.py): one venv per version,
# each from scripts/requirements-duckdb-<version>.txt. 1.2.2 and 1.3.2 must refuse both artifacts.
MATRIX := 1.2.2 1.3.2 1.4.5 2.0.0
VENV20 := .venv-duckdb-2.0.0
VENV14 := .venv-duckdb-1.4.5
# The duckdb 1.4.4 CLI (no 1.4.5 CLI wheel exists): it must refuse both artifacts at LOAD.
VENVCLI14 := .venv-duckdb-cli-1.4.4
# The DuckDB 1.4 LTS artifact (compat/duckdb-1.4): the same source against duckdb-rs 1.4.4, pinned
# to DuckDB v1.4.5 by its footer (1.4 offers what we need only in its unstable C API).
DUCKDB14 := v1.4.5
EXT14 := build/release-duckdb-1.4/$(EXT)
PY := $(VENV)/bin/python
# Node lifecycle tests: @duckdb/node-api at the exact version in test/node/package-lock.json.
NODE_STAMP := test/node/node_modules/.installed

.PHONY: all release release-1.4 debug venv node-deps test unit sqllogictest pytest soak demo demo-fluss bench bench-strict clean fuzz wheel lint jvm fluss-up fluss-down
all: release

release:
	cargo build --release --locked
	@mkdir -p build/release
	python3 scripts/append_metadata.py $(CARGO_TARGET_DIR)/release/libstreamhouse.so build/release/$(EXT)

release-1.4:
	CARGO_TARGET_DIR=$(TARGET14) cargo build --release --locked --manifest-path compat/duckdb-1.4/Cargo.toml
	@mkdir -p $(dir $(EXT14))
	python3 scripts/append_metadata.py $(TARGET14)/release/libstreamhouse_duckdb14.so $(EXT14) \
		--capi-version $(DUCKDB14) --abi C_STRUCT_UNSTABLE

debug:
	cargo build --locked
	@mkdir -p build/debug
	python3 scripts/append_metadata.py $(CARGO_TARGET_DIR)/debug/libstreamhouse.so build/debug/$(EXT)

venv:
	scripts/venv.sh $(VENV) scripts/requirements.txt scripts/constraints.txt
	scripts/venv.sh $(VENV15) scripts/requirements-duckdb15.txt scripts/constraints-duckdb15.txt
	scripts/venv.sh .venv-duckdb-1.2.2 scripts/requirements-duckdb-1.2.2.txt
	scripts/venv.sh .venv-duckdb-1.3.2 scripts/requirements-duckdb-1.3.2.txt
	scripts/venv.sh $(VENV14) scripts/requirements-duckdb-1.4.5.txt scripts/constraints-duckdb-1.4.5.txt
	scripts/venv.sh $(VENV20) scripts/requirements-duckdb-2.0.0.txt
	scripts/venv.sh $(VENVCLI14) scripts/requirements-duckdb-cli-1.4.4.txt
	@# That wheel installs the CLI binary as plain data, without its execute bit.
	chmod +x $(VENVCLI14)/bin/duckdb

node-deps: $(NODE_STAMP)

# `npm install` with the lock file, not `npm ci`: the registry lacks the non-Linux platform
# packages of @duckdb/node-bindings 1.4.5-r.1, so the lock cannot list them and `npm ci` refuses it
# as out of sync. --no-save keeps the lock and package.json exactly as committed.
$(NODE_STAMP): test/node/package.json test/node/package-lock.json
	cd test/node && npm install --no-save --no-audit --no-fund
	touch $@

# The JVM side, from jvm/pom.xml (the one pinned JVM build file; Java 17 + Maven): each class path it
# defines is copied into build/jvm/<id>/, from Maven Central into build/m2 (once; later runs need no
# network). The stamp makes a second `make jvm` instant until the pom changes.
JVM_CLASSPATHS := fluss-server lake-plugin tiering flink-sql
JVM_STAMP := build/jvm/.resolved
MVN := mvn -q -B -Dstyle.color=never -f jvm/pom.xml -Dmaven.repo.local=$(CURDIR)/build/m2

# The Flink SQL runner of the tests (test/python/flink), compiled against build/jvm/flink-sql.
FLINK_SQL_SRC := $(wildcard jvm/src/main/java/streamhouse/flink/*.java)
FLINK_SQL_RUNNER := build/jvm/flink-sql/classes/streamhouse/flink/FlinkSqlRunner.class

# Java Paimon's writer and reader of the lake tests (test/python/lake/test_java_paimon.py: Paimon's own
# Java API), compiled against paimon-bundle of build/jvm/tiering.
PAIMON_JAVA_SRC := $(wildcard jvm/src/main/java/streamhouse/paimon/*.java)
PAIMON_JAVA_RUNNER := build/jvm/paimon-java/classes/streamhouse/paimon/PaimonTableRunner.class

jvm: $(JVM_STAMP) $(FLINK_SQL_RUNNER) $(PAIMON_JAVA_RUNNER)

$(JVM_STAMP): jvm/pom.xml
	rm -rf build/jvm
	$(foreach id,$(JVM_CLASSPATHS),$(MVN) -P$(id) package &&) touch $@

$(PAIMON_JAVA_RUNNER): $(JVM_STAMP) $(PAIMON_JAVA_SRC)
	rm -rf build/jvm/paimon-java/classes
	javac --release 11 -nowarn -d build/jvm/paimon-java/classes -cp build/jvm/tiering/paimon-bundle-1.3.1.jar \
		$(PAIMON_JAVA_SRC)

$(FLINK_SQL_RUNNER): $(JVM_STAMP) $(FLINK_SQL_SRC)
	rm -rf build/jvm/flink-sql/classes
	javac --release 11 -nowarn -d build/jvm/flink-sql/classes -cp 'build/jvm/flink-sql/*' $(FLINK_SQL_SRC)

# A local Fluss cluster (scripts/fluss_cluster.py): ZooKeeper, coordinator, one tablet server and the
# lake tiering service into a Paimon warehouse, on 127.0.0.1; state, logs and data in build/fluss.
fluss-up: jvm
	python3 scripts/fluss_cluster.py up build/fluss

fluss-down:
	python3 scripts/fluss_cluster.py down build/fluss

unit:
	cargo test --release --locked

# The lake-fixture files in test/sql are gated by `require-env STREAMHOUSE_TEST_DATA`; here they must
# run, so the variable is set and --fail-on-skip makes any skipped record or file a failure.
SLT_ENV := STREAMHOUSE_TEST_DATA=build/test-data
SLT_ARGS := --fail-on-skip --extension build/release/$(EXT)

sqllogictest: release release-1.4 venv
	$(PY) scripts/make_lake_fixtures.py build/test-data
	$(SLT_ENV) $(PY) scripts/sqllogictest.py $(SLT_ARGS) test/sql
	$(SLT_ENV) $(VENV15)/bin/python scripts/sqllogictest.py $(SLT_ARGS) test/sql
	$(SLT_ENV) $(VENV20)/bin/python scripts/sqllogictest.py $(SLT_ARGS) test/sql
	$(SLT_ENV) $(VENV14)/bin/python scripts/sqllogictest.py --fail-on-skip --extension $(EXT14) test/sql

# The Python package: build/wheel/streamhouse-<version>-py3-none-<platform>.whl, the release artifact
# plus python/streamhouse; the platform tag is computed from what the artifact links.
wheel: release
	python3 scripts/build_wheel.py build/release/$(EXT) build/wheel

# The serving, lake, refresh and bad-input tests run on DuckDB 1.5.6 and, with the 1.4 artifact, on
# DuckDB 1.4.5 too (~1 min each): the same files, four of test_refresh_property's 40 random sequences.
PYTEST_SUBSET := test/python/serving/test_serving.py test/python/lake/test_lake.py \
	test/python/lake/test_lake_changelog.py test/python/serving/test_refresh_sources.py \
	test/python/serving/test_bad_input.py test/python/lake/test_from_paimon.py \
	test/python/serving/test_quarantine.py \
	test/python/serving/test_refresh_property.py::test_killer_cases \
	test/python/serving/test_refresh_property.py::test_failed_refresh_changes_nothing \
	$(foreach s,0 1 2 3,'test/python/serving/test_refresh_property.py::test_random_refresh_sequences[$(s)]')
# The 1.4 artifact reads the sandbox settings its own way (src/functions/glue/settings.rs) and runs under
# duckdb-rs 1.4's callback glue: its subset adds the sandbox tests and the hostile-argument fuzz.
PYTEST14 := $(PYTEST_SUBSET) test/python/lake/test_sandbox.py test/python/fuzz/test_fuzz.py

# The whole suite on DuckDB 2.0.1 in two passes (test/python/conftest.py): the independent tests
# on two pytest-xdist workers, a test file per worker at a time and the JVM tests on one worker in
# turn; then the tests marked serial alone (the reopen races with every core busy, the fuzz).
# The 1.4 subset's fuzz is a third of the corpus (a seeded sample; the sandbox lane whole) and 50
# random cases (the 2.0.1 run: the whole corpus and 300).
pytest: release release-1.4 venv node-deps wheel jvm
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not serial" test/python
	$(PY) -m pytest -q -m serial test/python
	$(VENV15)/bin/python -m pytest -q $(PYTEST_SUBSET)
	STREAMHOUSE_EXTENSION=$(CURDIR)/$(EXT14) FUZZ_CASES=50 FUZZ_CORPUS_FRACTION=0.33 $(VENV14)/bin/python -m pytest -q $(PYTEST14)

# The long reopen soak (test/python/host/test_reopen_strict.py): each scenario ten times as often
# as `make test` runs it (~3-4 minutes with both cores kept busy).
soak: release venv node-deps
	STREAMHOUSE_SOAK=1 $(PY) -m pytest -q test/python/host/test_reopen_strict.py

test: unit sqllogictest pytest

# Lint (.ci/run runs it before `make test`): Python with ruff (pinned in scripts/requirements.txt,
# configured in ruff.toml: checks, then formatting) and Rust formatting (rustfmt.toml).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	cargo fmt --check
	# --release shares build scripts (OpenSSL, aws-lc) with `make release` instead of rebuilding them.
	cargo clippy --release --all-targets --locked -- -D warnings
	CARGO_TARGET_DIR=$(TARGET14) cargo clippy --release --locked --manifest-path compat/duckdb-1.4/Cargo.toml -- -D warnings

demo: release venv
	$(PY) scripts/demo.py build/release/$(EXT)

# A dashboard following a local Fluss table while a writer writes (scripts/demo_fluss.py): the cluster
# runs in build/fluss-demo and is stopped however the demo ends.
demo-fluss: release venv jvm
	$(PY) scripts/demo_fluss.py build/release/$(EXT)

# Every benchmark's output also goes to build/bench.log; bench/summary.py then lists each missed
# target. `make bench` reports misses and exits 0; `make bench-strict` exits 1 on any miss.
bench: release venv jvm
	@mkdir -p build
	set -o pipefail; { $(PY) bench/bench.py build/release/$(EXT) && \
	  $(PY) bench/bench_lake.py build/release/$(EXT) && \
	  $(PY) bench/bench_live.py build/release/$(EXT) && \
	  $(PY) bench/bench_scale.py build/release/$(EXT) && \
	  $(PY) bench/bench_scaleout.py build/release/$(EXT) && \
	  $(PY) bench/bench_fluss.py build/release/$(EXT); } 2>&1 | tee build/bench.log
	$(PY) bench/summary.py build/bench.log

bench-strict: bench
	$(PY) bench/summary.py build/bench.log --strict

# The hostile-argument fuzz test with many more random cases than `make test` runs (FUZZ_SEED=1
# there), from a time-based seed it prints; FUZZ_SEED=<n> make fuzz replays a run.
fuzz: release venv
	@seed=$${FUZZ_SEED:-$$(date +%s)}; echo "make fuzz: FUZZ_SEED=$$seed (replay: FUZZ_SEED=$$seed make fuzz)"; \
	FUZZ_SEED=$$seed FUZZ_CASES=$${FUZZ_CASES:-10000} FUZZ_THREADS=$${FUZZ_THREADS:-0} \
	FUZZ_TEST_TIMEOUT=$${FUZZ_TEST_TIMEOUT:-14400} $(PY) -m pytest -q -s test/python/fuzz/test_fuzz.py

clean: fluss-down
	cargo clean
	rm -rf build $(VENV) $(VENV15) $(foreach v,$(MATRIX),.venv-duckdb-$(v)) $(VENVCLI14) test/node/node_modules
