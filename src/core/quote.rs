//! Quoting of SQL identifiers and string literals. Every user-supplied value that reaches SQL
//! text goes through here (or is bound as a prepared-statement parameter).

/// `"name"` with embedded double quotes doubled (DuckDB identifier).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'` with embedded single quotes doubled (DuckDB string literal).
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A Flink SQL identifier: backticks, with embedded backticks doubled.
pub fn flink_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled() {
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(literal("O'Reilly"), "'O''Reilly'");
        assert_eq!(literal("x' OR '1'='1"), "'x'' OR ''1''=''1'");
        assert_eq!(flink_ident("we`ird"), "`we``ird`");
    }
}
