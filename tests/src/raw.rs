//! Raw SQL against the engine's own pool, for fault injection (deleting a row, as store corruption would) and for
//! measuring what is persisted (row sizes), and for reading the store's rows as they are (the invariant sweep,
//! [`crate::invariants`]). Statements are fixed strings from the tests; values are bound.

use cairn_store::Store;

/// Runs `sql` with `binds` (text, in order) and returns the rows affected.
pub async fn execute(store: &Store, sql: &'static str, binds: &[&str]) -> u64 {
    match store {
        Store::Sqlite(pool) => {
            let mut q = sqlx::query(sql);
            for b in binds {
                q = q.bind(*b);
            }
            q.execute(pool).await.unwrap().rows_affected()
        }
        Store::Postgres(pool) => {
            let mut q = sqlx::query(sql);
            for b in binds {
                q = q.bind(*b);
            }
            q.execute(pool).await.unwrap().rows_affected()
        }
    }
}

/// Runs a query returning one nullable `BIGINT` (`None` as 0), with the statement written per dialect (for
/// example `LENGTH(CAST(x AS BLOB))` on SQLite and `octet_length(x)` on PostgreSQL to count bytes).
pub async fn fetch_i64(store: &Store, sqlite: &'static str, postgres: &'static str, binds: &[&str]) -> i64 {
    let value: Option<i64> = match store {
        Store::Sqlite(pool) => {
            let mut q = sqlx::query_scalar(sqlite);
            for b in binds {
                q = q.bind(*b);
            }
            q.fetch_one(pool).await.unwrap()
        }
        Store::Postgres(pool) => {
            let mut q = sqlx::query_scalar(postgres);
            for b in binds {
                q = q.bind(*b);
            }
            q.fetch_one(pool).await.unwrap()
        }
    };
    value.unwrap_or(0)
}

/// Every row `sql` returns, as `T` (a `sqlx::FromRow` whose fields both backends decode: `BIGINT`s as `i64`,
/// text as `String`), for statements whose text both dialects accept.
pub async fn fetch_all<T>(store: &Store, sql: &'static str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    T: Send + Unpin,
{
    match store {
        Store::Sqlite(pool) => sqlx::query_as(sql).fetch_all(pool).await.unwrap(),
        Store::Postgres(pool) => sqlx::query_as(sql).fetch_all(pool).await.unwrap(),
    }
}
