// Marks the build for DuckDB 1.4's C API (see Cargo.toml).
fn main() {
    println!("cargo::rustc-cfg=duckdb14");
}
