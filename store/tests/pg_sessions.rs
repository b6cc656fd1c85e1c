//! PostgreSQL connections that die under the store: the pool does not ping a busy connection before each
//! transaction (`store/src/postgres.rs`), so a write transaction whose connection was closed by the server must
//! begin again on another one instead of failing.

use cairn_store::Store;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_write_right_after_the_server_ended_every_session_goes_through(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let database = options.get_database().expect("sqlx::test names the database").to_owned();
    let url = format!("postgres://{}@{}:{}/{database}", options.get_username(), options.get_host(), options.get_port());
    let store = Store::connect(&url).await.expect("the store connects");
    store.migrate().await.expect("migrations apply");
    for _ in 0..4 {
        assert!(!store.cancel_run("no-such-run", 1).await.expect("a write before"), "nothing to cancel");
    }
    let mut admin = options.connect().await.expect("a separate session");
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(&database)
    .fetch_one(&mut admin)
    .await
    .expect("sessions ended");
    assert!(ended >= 1, "the store's pooled connections were ended ({ended})");
    admin.close().await.expect("closed");

    let after = store.cancel_run("no-such-run", 2).await;

    assert!(matches!(after, Ok(false)), "the write began again on a new connection: {after:?}");
}
