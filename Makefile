# streamhouse — the two commands a fresh machine needs: `make demo` and `make test`.
# Cargo's target dir lives outside the clone so repeat builds on one machine are fast.
CARGO_TARGET_DIR ?= $(HOME)/.cache/streamhouse-target
export CARGO_TARGET_DIR
EXT := streamhouse.duckdb_extension
VENV := .venv
VENV15 := .venv-duckdb15
PY := $(VENV)/bin/python

.PHONY: all release debug venv test unit sqllogictest pytest demo bench clean
all: release

release:
	cargo build --release --locked
	@mkdir -p build/release
	python3 scripts/append_metadata.py $(CARGO_TARGET_DIR)/release/libstreamhouse.so build/release/$(EXT)

debug:
	cargo build --locked
	@mkdir -p build/debug
	python3 scripts/append_metadata.py $(CARGO_TARGET_DIR)/debug/libstreamhouse.so build/debug/$(EXT)

venv:
	scripts/venv.sh $(VENV) scripts/requirements.txt scripts/constraints.txt
	scripts/venv.sh $(VENV15) scripts/requirements-duckdb15.txt

unit:
	cargo test --release --locked

sqllogictest: release venv
	$(PY) scripts/make_lake_fixtures.py build/test-data
	$(PY) scripts/sqllogictest.py --extension build/release/$(EXT) test/sql
	$(VENV15)/bin/python scripts/sqllogictest.py --extension build/release/$(EXT) test/sql

pytest: release venv
	$(PY) -m pytest -q test/python

test: unit sqllogictest pytest

demo: release venv
	$(PY) scripts/demo.py build/release/$(EXT)

bench: release venv
	$(PY) bench/bench.py build/release/$(EXT)
	$(PY) bench/bench_lake.py build/release/$(EXT)

clean:
	cargo clean
	rm -rf build $(VENV) $(VENV15)
