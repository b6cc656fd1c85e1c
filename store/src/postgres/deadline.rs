//! How long Cairn waits on PostgreSQL: the answer deadline.
//!
//! sqlx 0.9 sets no TCP keepalive on its sockets (transact-rs/sqlx#3540, open), so a connection whose server
//! vanished without closing it (a failover, a killed host or container, a dropped NAT mapping, a network cut)
//! never fails: the read of an answer that will never come waits forever. In the orchestrator's batch writer that
//! would stop every report, claim and submission for good. So every write transaction, every read and every
//! call of the batch writer gets an answer within the deadline or fails as a lost connection
//! ([`crate::postgres::lost_connection`]): retryable, the connection closed rather than reused.
//!
//! The server side of such a cut is the other half: a server process whose client vanished mid-transaction sits
//! idle in it, holding its row locks (a run's row, the steps it claimed), until TCP keepalive notices (by default
//! after two hours). Every Cairn session therefore sets `idle_in_transaction_session_timeout` to the same
//! deadline, unless the role, the database or the URL's `options` already set one. Cairn's transactions send
//! their statements back to back, so only a transaction whose client is gone is ever idle that long.
//!
//! The deadline is the pool's `acquire_timeout`: one figure for "how long to wait for the database", whether for
//! a connection or for an answer. Default [`DEFAULT_ANSWER_DEADLINE`]; the `db_answer_deadline_ms` setting.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};

use crate::error::StoreResult;

/// Default answer deadline. A batch or transaction of Cairn's takes milliseconds (a 10,000-step submission
/// about 0.5 s, `bench/results/`); 30 s leaves room for lock waits and a slow disk while still healing a cut
/// in well under a minute.
pub const DEFAULT_ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// The answer deadline of `pool`'s connections (its `acquire_timeout`, set by [`crate::postgres::connect`]).
pub(crate) fn answer_deadline(pool: &PgPool) -> Duration {
    pool.options().get_acquire_timeout()
}

/// `work`'s result, or, when PostgreSQL has not answered within `pool`'s deadline, [`no_answer`]. Dropping `work`
/// at the deadline drops what it holds, as after any cancelled query: a connection `work` took from the pool goes
/// back to it through a ping that, on a cut, waits until the kernel gives up. So work on pooled connections uses
/// [`on_connection`] or [`in_transaction`], which close theirs instead; this is for work on a connection the
/// caller discards itself after an error (the batch writer's held one, a listener's own pool).
pub(crate) async fn answered<T, E: From<sqlx::Error>>(
    pool: &PgPool,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let deadline = answer_deadline(pool);
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(no_answer(deadline).into()),
    }
}

/// `work` on a connection of `pool` (a read, or statements outside a transaction), within the deadline. Past it,
/// the connection is closed, not handed back to the pool: sqlx would ping it first, and on a cut that ping waits
/// until the kernel gives up (about 15 minutes with Linux's defaults, or for good behind a proxy that keeps
/// acknowledging), holding a pooled connection all that time.
pub(crate) async fn on_connection<T, E: From<sqlx::Error>>(
    pool: &PgPool,
    work: impl AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
) -> Result<T, E> {
    let deadline = answer_deadline(pool);
    let mut held = None;
    let timed = tokio::time::timeout(deadline, async {
        let connection = held.insert(pool.acquire().await?);
        work(connection).await
    })
    .await;
    timed.unwrap_or_else(|_| {
        discard(&mut held);
        Err(no_answer(deadline).into())
    })
}

/// `work` in a write transaction (see [`crate::postgres::BEGIN`]) on a connection of `pool`, within the deadline;
/// `work` commits it. Busy pooled connections are not pinged before use (a round trip per transaction: about 15 %
/// of a chain step here; see [`crate::postgres::connect`]). A connection that died anyway (the database restarted
/// under load, an administrator ended the session) fails at `BEGIN`, before anything was applied, so it is dropped
/// and `BEGIN` is sent on another, up to once per pooled connection.
/// Past the deadline the connection is closed, as in [`on_connection`]; this also keeps a `BEGIN` whose answer
/// came late from handing the pool a connection still inside a transaction on the server.
pub(crate) async fn in_transaction<T>(
    pool: &PgPool,
    work: impl AsyncFnOnce(Transaction<'_, Postgres>) -> StoreResult<T>,
) -> StoreResult<T> {
    let deadline = answer_deadline(pool);
    let mut held = None;
    let timed = tokio::time::timeout(deadline, async {
        let mut closed = 0;
        loop {
            let connection = held.insert(pool.acquire().await?);
            let error = match connection.begin_with(crate::postgres::BEGIN).await {
                Ok(tx) => return work(tx).await,
                Err(e) => e,
            };
            if closed == crate::postgres::MAX_CONNECTIONS || !crate::postgres::lost_connection(&error) {
                return Err(error.into());
            }
            tracing::debug!(error = %error, "a pooled connection was closed; trying another");
            closed += 1;
            discard(&mut held);
        }
    })
    .await;
    timed.unwrap_or_else(|_| {
        discard(&mut held);
        Err(no_answer(deadline).into())
    })
}

/// Closes the held connection instead of returning it to the pool (sqlx bounds the close at 5 s).
pub(crate) fn discard(held: &mut Option<PoolConnection<Postgres>>) {
    if let Some(mut connection) = held.take() {
        connection.close_on_drop();
    }
}

/// The error for a connection that gave no answer within `deadline`: an I/O timeout, which
/// [`crate::postgres::lost_connection`] and [`crate::StoreError::is_unreachable`] recognize, so it is handled as a
/// lost connection everywhere (retryable; the connection is not used again).
pub(crate) fn no_answer(deadline: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("PostgreSQL gave no answer within {} ms; the connection is treated as lost", deadline.as_millis()),
    ))
}

/// Whether `e` is [`no_answer`]'s error (or the system's own TCP timeout, which means the same).
pub(crate) fn is_no_answer(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

/// Sets `idle_in_transaction_session_timeout` to `deadline` on a new session unless it already has one (not
/// `0`): run once per connection, after it connects. One simple query, no prepared statement (so it also works
/// through PgBouncer, which refuses the `options` startup parameter).
pub(crate) fn idle_in_transaction_setting(deadline: Duration) -> String {
    format!(
        "SELECT set_config('idle_in_transaction_session_timeout', '{}ms', false) \
         WHERE current_setting('idle_in_transaction_session_timeout') = '0'",
        deadline.as_millis()
    )
}
