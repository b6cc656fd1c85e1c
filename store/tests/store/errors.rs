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

/// A value PostgreSQL refuses is not retryable: answered 503 "retry", the client would resend it forever. Each
/// class is decided once here; real errors from PostgreSQL.
#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn postgres_errors_are_classified_once_refused_data_is_not_retryable(pool: sqlx::PgPool) {
    use cairn_store::ErrorClass;
    sqlx::query("CREATE TABLE k (key TEXT PRIMARY KEY)").execute(&pool).await.expect("table");
    let classify = |e: sqlx::Error| {
        let e = StoreError::Database(e);
        (e.class(), e.is_retryable())
    };

    let nul = sqlx::query("INSERT INTO k VALUES ($1)").bind("a\0b").execute(&pool).await.expect_err("NUL in text");
    // Random hex (which compresses to about half) well past the b-tree limit of about 2,700 bytes.
    let long_key: String = (0..300).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
    let too_long = sqlx::query("INSERT INTO k VALUES ($1)")
        .bind(&long_key)
        .execute(&pool)
        .await
        .expect_err("an index row over the b-tree maximum");
    sqlx::query("INSERT INTO k VALUES ('x')").execute(&pool).await.expect("a key");
    let duplicate = sqlx::query("INSERT INTO k VALUES ('x')").execute(&pool).await.expect_err("unique");
    let broken = sqlx::query("SELECT * FROM no_such_table").execute(&pool).await.expect_err("undefined table");
    pool.close().await;
    let closed = sqlx::query("SELECT 1").execute(&pool).await.expect_err("the pool is closed");

    assert_eq!(classify(nul), (ErrorClass::Refused, false), "NUL in text is refused data");
    assert_eq!(classify(too_long), (ErrorClass::Refused, false), "an oversized key is refused data");
    assert_eq!(classify(duplicate), (ErrorClass::Refused, false), "a constraint violation is refused data");
    assert_eq!(classify(broken), (ErrorClass::Internal, false), "a broken statement is internal");
    assert_eq!(classify(closed), (ErrorClass::Unreachable, true), "a closed pool is an outage: retry");
}
