# Declares the extension for DuckDB's extension tooling. The artifact is built by cargo
# (see Makefile: `make release`); no C/C++ is compiled.
duckdb_extension_load(streamhouse
    SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}
    LOAD_TESTS
)
