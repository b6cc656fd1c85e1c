//! The stored functions of the PostgreSQL fast path, defined from `store/sql/postgres/functions/*.sql` after the
//! migrations: each file is one `CREATE OR REPLACE FUNCTION`, so a function's current text is one file, changed
//! in place, instead of a chain of `ALTER FUNCTION`s across migrations. A migration still adds what the functions
//! read (columns, tables); one that changes a function's arguments or result type drops the old function, since
//! `CREATE OR REPLACE` cannot change them.
//!
//! Orchestrators starting together on one database take turns: the definitions are applied under a
//! transaction-scoped advisory lock, so concurrent `CREATE OR REPLACE`s of one function never race.

use sqlx::PgPool;

use crate::error::StoreResult;

/// Each function's file, in the order they are applied.
const FUNCTIONS: [(&str, &str); 3] = [
    ("cairn_complete_and_claim", include_str!("../../sql/postgres/functions/cairn_complete_and_claim.sql")),
    (
        "cairn_complete_leaves_and_claim",
        include_str!("../../sql/postgres/functions/cairn_complete_leaves_and_claim.sql"),
    ),
    ("cairn_runs_deleted", include_str!("../../sql/postgres/functions/cairn_runs_deleted.sql")),
];

/// The advisory lock key the definitions are applied under ("cairnfn" in ASCII).
const LOCK_KEY: i64 = 0x0063_6169_726e_666e;

/// Defines (or redefines) every stored function, in one transaction.
///
/// # Errors
/// A database error, or a definition PostgreSQL refuses (the transaction is rolled back: the previous
/// definitions stay).
pub(crate) async fn define(pool: &PgPool) -> StoreResult<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(LOCK_KEY).execute(&mut *tx).await?;
    for (_, text) in FUNCTIONS {
        sqlx::raw_sql(text).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use cairn_core::event::EventKind;

    use super::FUNCTIONS;

    /// The quoted literals of a SQL text outside `--` comments (which may hold apostrophes).
    fn literals(text: &str) -> Vec<&str> {
        let code: Vec<&str> = text.lines().map(|line| line.split("--").next().unwrap_or_default()).collect();
        let mut found = Vec::new();
        for line in code {
            found.extend(line.split('\'').skip(1).step_by(2));
        }
        found
    }

    /// A PL/pgSQL function is the one place that spells an event kind itself; every kind it spells must be
    /// `EventKind`'s, so the two cannot drift apart.
    #[test]
    fn every_event_kind_a_function_writes_is_an_event_kind() {
        let mut kinds = Vec::new();
        for (name, text) in FUNCTIONS {
            for literal in literals(text) {
                let named_like_a_kind = ["run_", "step_", "operator_"].iter().any(|p| literal.starts_with(p))
                    && literal.chars().all(|c| c.is_ascii_lowercase() || c == '_');
                if named_like_a_kind {
                    let kind = serde_json::from_value::<EventKind>(serde_json::json!(literal));
                    assert!(kind.is_ok(), "{name}.sql writes event kind `{literal}`, which EventKind does not name");
                    kinds.push(literal);
                }
            }
        }
        assert!(kinds.contains(&"step_started"), "the scan finds the kinds the functions write: {kinds:?}");
    }

    #[test]
    fn each_file_defines_the_function_it_is_named_for_and_nothing_else() {
        for (name, text) in FUNCTIONS {
            let definitions = text.matches("CREATE OR REPLACE FUNCTION ").count();
            assert_eq!(definitions, 1, "{name}.sql holds one definition");
            assert!(text.contains(&format!("CREATE OR REPLACE FUNCTION {name}(")), "{name}.sql defines {name}");
            assert!(!text.contains("ALTER FUNCTION"), "{name}.sql states its settings in its definition");
        }
    }
}
