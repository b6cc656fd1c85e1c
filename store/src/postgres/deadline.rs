//! How long Cairn waits on PostgreSQL: the answer deadline.
//!
//! sqlx 0.9 sets no TCP keepalive on its sockets (transact-rs/sqlx#3540, open), so a connection whose server
//! vanished without closing it (a failover, a killed host or container, a dropped NAT mapping, a network cut)
//! never fails: the read of an answer that will never come waits forever. Before 2026-12-01 that stopped the
//! orchestrator's batch writer, and with it every report, claim and submission, for good. Now every write
//! transaction, every read and every call of the batch writer gets an answer within the deadline or fails as a
//! lost connection ([`crate::postgres::lost_connection`]): retryable, the connection closed rather than reused.
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

use sqlx::PgPool;

/// Default answer deadline. A batch or transaction of Cairn's takes milliseconds (a 10,000-step submission
/// about 0.5 s, docs/performance.md); 30 s leaves room for lock waits and a slow disk while still healing a cut
/// in well under a minute.
pub const DEFAULT_ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// The answer deadline of `pool`'s connections (its `acquire_timeout`, set by [`crate::postgres::connect`]).
pub(crate) fn answer_deadline(pool: &PgPool) -> Duration {
    pool.options().get_acquire_timeout()
}

/// `work`'s result, or, when PostgreSQL has not answered within `pool`'s deadline, [`no_answer`]. Dropping `work`
/// at the deadline drops the transaction or connection it holds: sqlx rolls back or closes it as it does after
/// any cancelled query.
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
