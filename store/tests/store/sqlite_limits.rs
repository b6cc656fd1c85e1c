//! The SQLite this project bundles (3.51.3, through `libsqlite3-sys` 0.37; the system's 3.40 does not do this)
//! prepares a statement again every time it runs when its `LIMIT` is a bare bound parameter (`LIMIT $2`): the
//! planner reads the parameter's value (`sqlite3ExprIsInteger`), so each new binding expires the statement.
//! Preparing the claim again cost about 75 µs of its 165 µs per execution, measured through sqlx. Statements
//! that SQLite runs therefore write `LIMIT $2 + 0`, an expression the planner does not read, and `OFFSET $3 + 0`
//! the same way for consistency (a bare `OFFSET` is not read by the planner in these statements). This checks
//! that the store's SQL (every source file but the PostgreSQL-only one) keeps that rule, however the SQL is
//! spelled: any case, any spacing, parentheses, or the parameter on the next line of a `\`-continued string.

use std::path::{Path, PathBuf};

/// `(file, line number, SQL around the match)` of every bare bound `LIMIT`/`OFFSET` in `text`, outside `//`
/// comments.
fn bare_bound_limits(file: &Path, text: &str) -> Vec<(PathBuf, usize, String)> {
    let (sql, lines) = joined(text);
    let upper = sql.to_ascii_uppercase();
    let bytes = upper.as_bytes();
    let mut found = Vec::new();
    for keyword in ["LIMIT", "OFFSET"] {
        for (at, _) in upper.match_indices(keyword) {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
                continue;
            }
            let mut i = at + keyword.len();
            if i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                continue;
            }
            i = skip(bytes, i, |b| b.is_ascii_whitespace() || b == b'(');
            if i >= bytes.len() || !matches!(bytes[i], b'$' | b'?') {
                continue;
            }
            i = skip(bytes, i + 1, |b| b.is_ascii_alphanumeric() || b == b'_');
            i = skip(bytes, i, |b| b.is_ascii_whitespace() || b == b')');
            let plus_zero = bytes.get(i) == Some(&b'+') && {
                let j = skip(bytes, i + 1, |b| b.is_ascii_whitespace());
                bytes.get(j) == Some(&b'0') && !bytes.get(j + 1).is_some_and(u8::is_ascii_digit)
            };
            if !plus_zero {
                let end = (at + 40).min(sql.len());
                found.push((file.to_path_buf(), lines[at], sql[at..end].to_string()));
            }
        }
    }
    found
}

/// `text` without `//` comment lines and with `\`-newline continuations (and the next line's indentation)
/// removed, as Rust string literals read; with, per byte of the result, its 1-based line in `text`.
fn joined(text: &str) -> (String, Vec<usize>) {
    let (mut sql, mut lines) = (String::new(), Vec::new());
    let mut continued = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let line = if continued { line.trim_start() } else { line };
        continued = line.ends_with('\\');
        let kept = if continued { &line[..line.len() - 1] } else { line };
        sql.push_str(kept);
        lines.extend(std::iter::repeat_n(n + 1, kept.len()));
        if !continued {
            sql.push('\n');
            lines.push(n + 1);
        }
    }
    (sql, lines)
}

fn skip(bytes: &[u8], mut i: usize, what: impl Fn(u8) -> bool) -> usize {
    while i < bytes.len() && what(bytes[i]) {
        i += 1;
    }
    i
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("store/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("postgres.rs") {
            out.push(path);
        }
    }
}

#[test]
fn statements_sqlite_runs_bind_no_bare_limit_or_offset() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    assert!(files.len() > 10, "the store's sources were found: {files:?}");
    let found: Vec<_> =
        files.iter().flat_map(|f| bare_bound_limits(f, &std::fs::read_to_string(f).expect("readable"))).collect();
    assert!(found.is_empty(), "write `LIMIT $N + 0` (see this test's module docs): {found:#?}");
}

#[test]
fn the_check_finds_every_spelling_of_a_bare_limit_and_passes_the_expression() {
    let file = Path::new("x.rs");
    let bare = |sql: &str| bare_bound_limits(file, sql).len();
    assert_eq!(bare("SELECT 1 LIMIT $2"), 1);
    assert_eq!(bare("SELECT 1 LIMIT ?"), 1);
    assert_eq!(bare("SELECT 1 limit $2"), 1);
    assert_eq!(bare("SELECT 1 LIMIT  $2"), 1);
    assert_eq!(bare("SELECT 1 LIMIT\t$2"), 1);
    assert_eq!(bare("SELECT 1 LIMIT ($2)"), 1);
    assert_eq!(bare("SELECT 1 LIMIT $2 + 05"), 1);
    assert_eq!(bare("\"SELECT 1 ORDER BY x LIMIT \\\n     $2\";"), 1, "the parameter on a continued line");
    assert_eq!(bare("SELECT 1 LIMIT $2 + 0 OFFSET $3"), 1);
    assert_eq!(bare("SELECT 1 LIMIT $12 + 0 OFFSET ($3)+0"), 0);
    assert_eq!(bare("SELECT 1 LIMIT 1"), 0);
    assert_eq!(bare("SELECT delimited, offsets FROM t"), 0);
    assert_eq!(bare("    //! `LIMIT $5`"), 0, "comments are not SQL");
    let lines = bare_bound_limits(file, "a\nb\nSELECT 1 \\\n  LIMIT $2\n");
    assert_eq!(lines.iter().map(|(_, line, _)| *line).collect::<Vec<_>>(), vec![4]);
}
