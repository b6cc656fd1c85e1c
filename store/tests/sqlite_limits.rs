//! SQLite re-prepares a statement every time it runs when its `LIMIT` or `OFFSET` is a bare bound parameter
//! (`LIMIT $2`): the planner reads the parameter's value (`sqlite3ExprIsInteger`), so rebinding it expires the
//! statement. Re-preparing the claim cost about 75 µs per execution, a third of its time, measured through sqlx.
//! Statements that SQLite runs therefore write `LIMIT $2 + 0`, an expression the planner does not read. This
//! checks the store's SQL (every source file but the PostgreSQL-only one) keeps that rule.

use std::path::{Path, PathBuf};

/// `(file, line number, line)` of every bare bound `LIMIT`/`OFFSET` in `text`, outside comments.
fn bare_bound_limits(file: &Path, text: &str) -> Vec<(PathBuf, usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, line)| !line.trim_start().starts_with("//")) {
        for keyword in ["LIMIT ", "OFFSET "] {
            for (at, _) in line.match_indices(keyword) {
                let rest = &line[at + keyword.len()..];
                let Some(param) = rest.strip_prefix('$').or_else(|| rest.strip_prefix('?')) else { continue };
                let digits = param.chars().take_while(char::is_ascii_digit).count();
                if !param[digits..].starts_with(" + 0") {
                    found.push((file.to_path_buf(), n + 1, line.trim().to_string()));
                }
            }
        }
    }
    found
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
fn the_check_finds_a_bare_limit_and_passes_the_expression() {
    let file = Path::new("x.rs");
    assert_eq!(bare_bound_limits(file, "SELECT 1 LIMIT $2").len(), 1);
    assert_eq!(bare_bound_limits(file, "SELECT 1 LIMIT ?").len(), 1);
    assert_eq!(bare_bound_limits(file, "SELECT 1 LIMIT $2 + 0 OFFSET $3").len(), 1);
    assert!(bare_bound_limits(file, "SELECT 1 LIMIT $12 + 0 OFFSET $3 + 0").is_empty());
    assert!(bare_bound_limits(file, "SELECT 1 LIMIT 1").is_empty());
    assert!(bare_bound_limits(file, "    //! `LIMIT $5`").is_empty());
}
