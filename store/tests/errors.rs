//! Which database errors the store calls contended (`StoreError::is_contended`: the transaction was turned away
//! because of other work, so the group-commit writer answers a failed batch's operations "retry later") and which
//! it does not (a statement refused for its data: the writer applies the batch again operation by operation, so
//! the operation at fault fails alone). Real lock conflicts on both backends, no constructed errors.

use std::time::Duration;

use cairn_store::StoreError;
use sqlx::ConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;

#[tokio::test]
async fn sqlite_busy_is_contended_and_a_refused_statement_is_not() {
    let path = std::env::temp_dir().join(format!("cairn-store-errors-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let options = SqliteConnectOptions::new().filename(&path).create_if_missing(true).busy_timeout(Duration::ZERO);
    let mut holder = options.connect().await.expect("a SQLite file opens");
    let mut other = options.connect().await.expect("a second connection opens");
    sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)").execute(&mut holder).await.expect("table");
    sqlx::query("BEGIN IMMEDIATE").execute(&mut holder).await.expect("the first connection takes the write lock");

    let busy = sqlx::query("INSERT INTO t VALUES (1, 'x')").execute(&mut other).await.expect_err("busy");

    let busy = StoreError::Database(busy);
    assert!(busy.is_contended(), "SQLite busy is contention: {busy}");
    sqlx::query("ROLLBACK").execute(&mut holder).await.expect("the lock is released");
    let refused = sqlx::query("INSERT INTO t VALUES (1, NULL)").execute(&mut other).await.expect_err("NOT NULL");
    let refused = StoreError::Database(refused);
    assert!(!refused.is_contended(), "a refused statement is not contention: {refused}");
    assert!(!refused.is_unreachable(), "nor an outage: {refused}");
    drop((holder, other));
    let _ = std::fs::remove_file(&path);
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn postgres_lock_timeout_is_contended_and_a_refused_statement_is_not(pool: sqlx::PgPool) {
    sqlx::query("CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT NOT NULL)").execute(&pool).await.expect("table");
    sqlx::query("INSERT INTO t VALUES (1, 'x')").execute(&pool).await.expect("row");
    let mut holder = pool.begin().await.expect("a transaction");
    sqlx::query("SELECT v FROM t WHERE id = 1 FOR UPDATE").execute(&mut *holder).await.expect("the row is locked");
    let mut other = pool.begin().await.expect("a second transaction");
    sqlx::query("SET LOCAL lock_timeout = '20ms'").execute(&mut *other).await.expect("lock timeout");

    let timed_out = sqlx::query("UPDATE t SET v = 'y' WHERE id = 1").execute(&mut *other).await.expect_err("55P03");

    let timed_out = StoreError::Database(timed_out);
    assert!(timed_out.is_contended(), "a lock timeout is contention: {timed_out}");
    drop(other);
    holder.rollback().await.expect("the lock is released");
    let refused = sqlx::query("INSERT INTO t VALUES (2, NULL)").execute(&pool).await.expect_err("NOT NULL");
    let refused = StoreError::Database(refused);
    assert!(!refused.is_contended(), "a refused statement is not contention: {refused}");
    assert!(!refused.is_unreachable(), "nor an outage: {refused}");
}
