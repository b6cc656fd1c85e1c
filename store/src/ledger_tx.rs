//! The write of the delivery ledger ([`crate::Store::delivery_record`]): one report folded into its row by one
//! upsert whose `CASE`s hold every rule, the same text on both backends.
//!
//! The rules, comparing the report's step attempt with the row's `step_attempt`:
//! - tries: a newer attempt adds its `tries` and becomes the row's attempt; the same attempt adds what it tried
//!   beyond the tries already counted for it (`step_attempt_tries`: reports are cumulative, so a resent report
//!   adds nothing); an older attempt adds nothing.
//! - status: `delivered` is final. A `delivered` report from any attempt, even an older one, makes the row
//!   delivered (the message went out); `delivered_at` and `provider_message_id` keep their first values.
//! - `last_error`: replaced by a report of the row's attempt or a newer one that carries one, and kept after a
//!   delivery ("failed once, then delivered" still says why it failed).
//! - times: `first_attempt_at` at the insert; `last_attempt_at` moves to the report's time when it adds tries or
//!   delivers (never back); `delivered_at` when the row first becomes delivered.
//!
//! What a write changed (`newly_delivered`, `added_tries`) is the row after it compared with the row before,
//! read in the same transaction. SQLite's writers are serialised by `BEGIN IMMEDIATE`; on PostgreSQL two reports
//! of one row (a stale attempt's and the current one's) are serialised by a transaction-scoped advisory lock on
//! the row's key, taken before the row is read, so neither compares with a row the other is changing. The step
//! row itself is only read, never locked: the claim's `FOR UPDATE SKIP LOCKED` would otherwise skip a step whose
//! old attempt is still reporting.

use std::future::Future;

use cairn_core::delivery::{DeliveryStatus, MAX_ERROR_BYTES, MAX_PROVIDER_ID_BYTES, truncated};

use crate::StoreResult;
use crate::deliveries::{DeliveryRecorded, DeliveryRow, DeliveryWrite, LedgerRow, ledger_columns};

/// The report's attempt is newer than the row's.
macro_rules! newer {
    () => {
        "excluded.step_attempt > deliveries.step_attempt"
    };
}

/// The report's attempt is the row's and has tried more than the row counted for it.
macro_rules! more_of_same {
    () => {
        "(excluded.step_attempt = deliveries.step_attempt \
          AND excluded.step_attempt_tries > deliveries.step_attempt_tries)"
    };
}

/// The tries the report adds.
macro_rules! added {
    () => {
        concat!(
            "(CASE WHEN ",
            newer!(),
            " THEN excluded.step_attempt_tries WHEN ",
            more_of_same!(),
            " THEN excluded.step_attempt_tries - deliveries.step_attempt_tries ELSE 0 END)"
        )
    };
}

/// The report makes the row delivered.
macro_rules! delivers {
    () => {
        "(deliveries.status <> 'delivered' AND excluded.status = 'delivered')"
    };
}

/// Fold a report into its row: `$1` run, `$2` step, `$3` recipient, `$4` channel, `$5` status, `$6` tries, `$7`
/// step attempt, `$8` last error, `$9` provider id, `$10` now. The `SET` expressions all read the row as it was.
/// Locks the row. Index: `deliveries` PK.
const DELIVERY_UPSERT: &str = concat!(
    "INSERT INTO deliveries (run_id, step_id, recipient_id, channel, status, attempts, step_attempt, \
       step_attempt_tries, last_error, provider_message_id, first_attempt_at, last_attempt_at, delivered_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $6, $8, CASE WHEN $5 = 'delivered' THEN $9 END, $10, $10, \
       CASE WHEN $5 = 'delivered' THEN $10 END) \
     ON CONFLICT (run_id, step_id, recipient_id, channel) DO UPDATE SET \
       attempts = deliveries.attempts + ",
    added!(),
    ", step_attempt = CASE WHEN ",
    newer!(),
    " THEN excluded.step_attempt ELSE deliveries.step_attempt END, \
       step_attempt_tries = CASE WHEN ",
    newer!(),
    " OR ",
    more_of_same!(),
    " THEN excluded.step_attempt_tries ELSE deliveries.step_attempt_tries END, \
       status = CASE WHEN excluded.status = 'delivered' THEN 'delivered' ELSE deliveries.status END, \
       last_error = CASE WHEN excluded.step_attempt >= deliveries.step_attempt AND excluded.last_error IS NOT NULL \
         THEN excluded.last_error ELSE deliveries.last_error END, \
       provider_message_id = CASE WHEN deliveries.status = 'delivered' THEN deliveries.provider_message_id \
         ELSE excluded.provider_message_id END, \
       delivered_at = CASE WHEN deliveries.status = 'delivered' THEN deliveries.delivered_at \
         ELSE excluded.delivered_at END, \
       last_attempt_at = CASE WHEN (",
    added!(),
    " > 0 OR ",
    delivers!(),
    ") AND excluded.last_attempt_at > deliveries.last_attempt_at \
         THEN excluded.last_attempt_at ELSE deliveries.last_attempt_at END \
     RETURNING ",
    ledger_columns!()
);

/// The row of one channel. Index: `deliveries` PK.
const DELIVERY_GET: &str = concat!(
    "SELECT ",
    ledger_columns!(),
    " FROM deliveries WHERE run_id = $1 AND step_id = $2 AND recipient_id = $3 AND channel = $4"
);

/// The step's current attempt number (0 before its first claim). Takes no lock. Index: `steps` PK.
const STEP_ATTEMPT: &str = "SELECT attempt FROM steps WHERE run_id = $1 AND step_id = $2";

/// The statements of [`record`], implemented for both backends' transactions by [`impl_ledger_tx!`].
pub(crate) trait LedgerTx: Send {
    /// Serialises the writes of one row until the commit (PostgreSQL; SQLite serialises every writer already).
    fn ledger_lock(&mut self, w: &DeliveryWrite) -> impl Future<Output = StoreResult<()>> + Send;
    fn step_attempt(&mut self, run_id: &str, step_id: &str) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
    fn delivery_get(&mut self, w: &DeliveryWrite) -> impl Future<Output = StoreResult<Option<LedgerRow>>> + Send;
    fn delivery_upsert(&mut self, w: &DeliveryWrite) -> impl Future<Output = StoreResult<LedgerRow>> + Send;
}

/// Implements [`LedgerTx`] for `sqlx::Transaction<'_, $db>`; `$lock` is the SQL of [`LedgerTx::ledger_lock`]
/// (`None`: no statement), taking the row's `(run \n step, recipient \n channel)` as `$1`, `$2`.
macro_rules! impl_ledger_tx {
    ($db:ty, $lock:expr) => {
        impl LedgerTx for sqlx::Transaction<'_, $db> {
            async fn ledger_lock(&mut self, w: &DeliveryWrite) -> StoreResult<()> {
                let lock: Option<&str> = $lock;
                if let Some(sql) = lock {
                    sqlx::query::<$db>(sql)
                        .bind(format!("{}\n{}", w.run_id, w.step_id))
                        .bind(format!("{}\n{}", w.recipient_id, w.channel))
                        .execute(&mut **self)
                        .await?;
                }
                Ok(())
            }
            async fn step_attempt(&mut self, run_id: &str, step_id: &str) -> StoreResult<Option<i64>> {
                Ok(sqlx::query_scalar::<$db, i64>(STEP_ATTEMPT)
                    .bind(run_id)
                    .bind(step_id)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn delivery_get(&mut self, w: &DeliveryWrite) -> StoreResult<Option<LedgerRow>> {
                Ok(sqlx::query_as::<$db, LedgerRow>(DELIVERY_GET)
                    .bind(&w.run_id)
                    .bind(&w.step_id)
                    .bind(&w.recipient_id)
                    .bind(&w.channel)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn delivery_upsert(&mut self, w: &DeliveryWrite) -> StoreResult<LedgerRow> {
                Ok(sqlx::query_as::<$db, LedgerRow>(DELIVERY_UPSERT)
                    .bind(&w.run_id)
                    .bind(&w.step_id)
                    .bind(&w.recipient_id)
                    .bind(&w.channel)
                    .bind(w.status.as_str())
                    .bind(i64::from(w.tries))
                    .bind(i64::from(w.step_attempt))
                    .bind(w.last_error.as_deref().map(|e| truncated(e, MAX_ERROR_BYTES)))
                    .bind(w.provider_message_id.as_deref().map(|id| truncated(id, MAX_PROVIDER_ID_BYTES)))
                    .bind(w.now_ms)
                    .fetch_one(&mut **self)
                    .await?)
            }
        }
    };
}

impl_ledger_tx!(sqlx::Sqlite, None);
// The two-key form: its key space is apart from the one-key locks of `wait_tx` (event names). `hashtext` maps
// each half to a key; a collision only serialises two rows' writes, never wrongly.
impl_ledger_tx!(sqlx::Postgres, Some("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))"));

/// Checks that the step reached the reporting attempt, then folds the report into its row (module docs).
pub(crate) async fn record(tx: &mut impl LedgerTx, w: &DeliveryWrite) -> StoreResult<DeliveryRecorded> {
    let current = tx.step_attempt(&w.run_id, &w.step_id).await?;
    // Attempts are numbered from 1: no report comes from attempt 0 or from one the step has not started.
    if current.is_none_or(|current| w.step_attempt == 0 || i64::from(w.step_attempt) > current) {
        return Ok(DeliveryRecorded::NoSuchAttempt);
    }
    tx.ledger_lock(w).await?;
    let before = tx.delivery_get(w).await?.map(DeliveryRow::try_from).transpose()?;
    let row = DeliveryRow::try_from(tx.delivery_upsert(w).await?)?;
    let delivered = |r: &DeliveryRow| r.status == DeliveryStatus::Delivered;
    let (was_delivered, counted) = before.map_or((false, 0), |b| (delivered(&b), b.attempts));
    Ok(DeliveryRecorded::Recorded {
        newly_delivered: delivered(&row) && !was_delivered,
        added_tries: row.attempts.saturating_sub(counted),
        row,
    })
}
