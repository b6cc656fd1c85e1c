//! Messages between orchestrators sharing one PostgreSQL database, over `LISTEN`/`NOTIFY` on channel
//! [`PEER_CHANNEL`] (`docs/design/dispatcher.md`): an orchestrator wakes its own long polls in memory when steps
//! become claimable, and tells the others so that polls parked on them claim too, instead of finding the steps at
//! their next idle re-check. PostgreSQL delivers a notification to every session listening on the channel in the same database,
//! after the sending transaction commits, and drops those sent while a listener's connection was down (the
//! re-check covers that). SQLite serves one orchestrator process per database: there is no one to tell.

use sqlx::postgres::{PgListener, PgPoolOptions};

use crate::{Store, StoreError, StoreResult};

/// The channel orchestrators listen and notify on.
pub const PEER_CHANNEL: &str = "cairn_peers";

/// A session listening on [`PEER_CHANNEL`], on a connection of its own (not one of the store's pool), which it
/// makes again by itself when that connection is lost (closed; a cut is noticed by the engine: `engine/peers.rs`).
pub struct PeerListener {
    listener: PgListener,
    /// The store's pool: its closing ends listening.
    store: sqlx::PgPool,
}

impl std::fmt::Debug for PeerListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerListener")
    }
}

impl PeerListener {
    /// The next message's payload, waiting for it.
    ///
    /// # Errors
    /// Retryable [`StoreError::Database`] when the connection is lost and cannot be made again (the next call
    /// tries again); [`StoreError::Stopped`] once the store's pool is closed (listening is over).
    pub async fn next(&mut self) -> StoreResult<String> {
        let closed = self.store.close_event();
        tokio::select! {
            next = self.listener.recv() => Ok(next.map_err(stopped_when_closed)?.payload().to_owned()),
            () = closed => Err(StoreError::Stopped),
        }
    }
}

impl Store {
    /// Starts listening for other orchestrators' messages: `None` on SQLite.
    ///
    /// # Errors
    /// Store errors (retryable when the database is unreachable); [`StoreError::Stopped`] once the store's pool
    /// is closed.
    pub async fn peer_listener(&self) -> StoreResult<Option<PeerListener>> {
        match self {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(pool) if pool.is_closed() => Err(StoreError::Stopped),
            Store::Postgres(pool) => {
                // Within the answer deadline (`postgres/deadline.rs`): a cut during `LISTEN` fails it, to be tried
                // again, instead of leaving the caller waiting for good. On a pool of its own, of one connection:
                // a listener dropped after a cut sends `UNLISTEN *` and hands its connection back with a ping,
                // which wait until the kernel gives up on the socket, and must not hold one of the store's
                // pooled connections meanwhile.
                let own = PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(crate::postgres::deadline::answer_deadline(pool))
                    .connect_lazy_with((*pool.connect_options()).clone());
                let listener = crate::postgres::deadline::answered(pool, async {
                    let mut listener = PgListener::connect_with(&own).await?;
                    listener.listen(PEER_CHANNEL).await?;
                    Ok(listener)
                })
                .await
                .map_err(stopped_when_closed)?;
                Ok(Some(PeerListener { listener, store: pool.clone() }))
            }
        }
    }

    /// Sends `payload` to every orchestrator listening on the database (this one included); nothing on SQLite.
    /// One statement in a transaction of its own.
    ///
    /// # Errors
    /// Store errors (retryable when the database is unreachable); [`StoreError::Stopped`] once the store's pool
    /// is closed.
    pub async fn notify_peers(&self, payload: &str) -> StoreResult<()> {
        if let Store::Postgres(pool) = self {
            let notify = sqlx::query("SELECT pg_notify($1, $2)").bind(PEER_CHANNEL).bind(payload);
            crate::postgres::deadline::on_connection(pool, async |connection| notify.execute(connection).await)
                .await
                .map_err(stopped_when_closed)?;
        }
        Ok(())
    }
}

/// A closed pool ends listening for good: [`StoreError::Stopped`], not a database error to retry.
fn stopped_when_closed(error: sqlx::Error) -> StoreError {
    match error {
        sqlx::Error::PoolClosed => StoreError::Stopped,
        other => StoreError::Database(other),
    }
}
