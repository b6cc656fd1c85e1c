//! The peer channel (`Store::peer_listener`, `Store::notify_peers`): messages between orchestrators sharing a
//! PostgreSQL database. A message reaches every listener on the database, its sender's included; closing the
//! store ends listening with `Stopped` (not an error to retry); SQLite has no channel and no one to tell.

use std::time::Duration;

use cairn_store::{Store, StoreError};

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_message_reaches_every_listener_and_closing_the_store_ends_listening(pool: sqlx::PgPool) {
    let store = Store::Postgres(pool.clone());
    let mut first = store.peer_listener().await.expect("listening").expect("a PostgreSQL listener");
    let mut second = store.peer_listener().await.expect("listening").expect("a PostgreSQL listener");

    store.notify_peers("wake 0a1b").await.expect("notify");

    for listener in [&mut first, &mut second] {
        let payload = tokio::time::timeout(Duration::from_secs(10), listener.next()).await.expect("delivered");
        assert_eq!(payload.expect("a message"), "wake 0a1b");
    }
    // Closing waits for every connection, a listener's included: `second` gives its back by going away, and
    // `first`'s wait ends with the close (dropping it, and its connection, with the task).
    drop(second);
    let waiting = tokio::spawn(async move { first.next().await });
    tokio::time::timeout(Duration::from_secs(10), pool.close()).await.expect("the pool closes");
    let next = waiting.await.expect("the listening task ends");
    assert!(matches!(next, Err(StoreError::Stopped)), "{next:?}");
    assert!(matches!(store.peer_listener().await, Err(StoreError::Stopped)));
    assert!(matches!(store.notify_peers("wake 0a1b").await, Err(StoreError::Stopped)));
}

#[tokio::test]
async fn sqlite_has_no_peer_channel() {
    // A directory of its own, removed whole: the file's `-wal` and `-shm` companions go with it.
    let dir = std::env::temp_dir().join(format!("cairn-store-peers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let store = Store::connect(&format!("sqlite:{}", dir.join("x.db").display())).await.expect("a SQLite store");

    assert!(store.peer_listener().await.expect("no error").is_none());
    store.notify_peers("wake 0a1b").await.expect("nothing to send, no error");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
