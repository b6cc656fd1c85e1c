//! The delivery ledger in the database (migration `0017_recipients_deliveries`): one row per (run, step,
//! recipient, channel) of a step that delivers messages (`notify.send`), so a channel recorded as delivered is
//! never sent to again for that step, whichever attempt or worker comes next (`cairn_core::delivery`).
//!
//! Attempts report each channel as its outcome becomes known, with the tries made so far in that attempt
//! (cumulative, so a resent report repeats them). [`Store::delivery_record`] folds a report into the row
//! (`ledger_tx`): tries are counted once per step attempt, a report from an attempt older than the row's adds
//! nothing, and `delivered` is final. The rows are read back for the next attempt and for the API.

use cairn_core::delivery::{DeliveryRecord, DeliveryStatus};

use crate::error::StoreError;
// `tx`, `StoreResult` and `conflict_pause` are named by `in_tx!`.
use crate::{Store, StoreResult, conflict_pause, ledger_tx, tx};

/// Most rows [`Store::run_deliveries`] and [`Store::step_deliveries`] return: a step has at most
/// `MAX_RECIPIENTS_PER_STEP` (100) recipients × 8 channel types, so this holds the ledgers of a dozen such steps;
/// a run with more gets its first rows in order, and a caller seeing this many knows the list was cut.
pub const MAX_LEDGER_ROWS: u32 = 10_000;

/// One report of a channel, as [`Store::delivery_record`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryWrite {
    /// The run.
    pub run_id: String,
    /// The step.
    pub step_id: String,
    /// The step attempt that reports (1 for the first).
    pub step_attempt: u32,
    /// The recipient, or `""` for a worker's own development channels.
    pub recipient_id: String,
    /// The channel type (`telegram`, `email`, …).
    pub channel: String,
    /// The outcome of this attempt's tries so far.
    pub status: DeliveryStatus,
    /// Tries this attempt made on the channel so far (cumulative: a resent report repeats the same number).
    pub tries: u32,
    /// Why the last try failed; cut to `MAX_ERROR_BYTES` when stored.
    pub last_error: Option<String>,
    /// The provider's id of the delivered message; cut to `MAX_PROVIDER_ID_BYTES`, kept only with `delivered`.
    pub provider_message_id: Option<String>,
    /// Epoch ms of the report.
    pub now_ms: i64,
}

/// A ledger row, as stored and served by the API.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveryRow {
    /// The run.
    pub run_id: String,
    /// The step.
    pub step_id: String,
    /// The recipient, or `""` for a worker's own development channels.
    pub recipient_id: String,
    /// The channel type.
    pub channel: String,
    /// Where the channel stands.
    pub status: DeliveryStatus,
    /// Tries over every attempt of the step.
    pub attempts: u32,
    /// The latest step attempt that reported.
    pub step_attempt: u32,
    /// Why the last failed try failed (kept after a later delivery: the row's history).
    pub last_error: Option<String>,
    /// The provider's id of the delivered message (the first delivery's).
    pub provider_message_id: Option<String>,
    /// Epoch ms of the first report.
    pub first_attempt_at: i64,
    /// Epoch ms of the last report that counted tries or delivered.
    pub last_attempt_at: i64,
    /// Epoch ms of the first report of a delivery.
    pub delivered_at: Option<i64>,
}

impl DeliveryRow {
    /// The row as the core's record, which attempts are handed.
    pub fn record(&self) -> DeliveryRecord {
        DeliveryRecord {
            recipient_id: self.recipient_id.clone(),
            channel: self.channel.clone(),
            status: self.status,
            attempts: self.attempts,
            last_error: self.last_error.clone(),
            provider_message_id: self.provider_message_id.clone(),
        }
    }
}

/// What [`Store::delivery_record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryRecorded {
    /// The run or step does not exist, or the step has not reached the attempt that reports (a report from a
    /// confused or forged sender): nothing was written.
    NoSuchAttempt,
    /// The report was folded into the row.
    Recorded {
        /// The row after the write.
        row: DeliveryRow,
        /// This write made the row delivered (false when it already was, or is still failed).
        newly_delivered: bool,
        /// The tries this write added to `attempts` (0 for a resent report or one from an older attempt).
        added_tries: u32,
    },
}

/// The columns of [`LedgerRow`], in its order.
macro_rules! ledger_columns {
    () => {
        "run_id, step_id, recipient_id, channel, status, attempts, step_attempt, last_error, provider_message_id, \
         first_attempt_at, last_attempt_at, delivered_at"
    };
}
pub(crate) use ledger_columns;

/// A ledger row as the database holds it; [`DeliveryRow`] once checked.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct LedgerRow {
    run_id: String,
    step_id: String,
    recipient_id: String,
    channel: String,
    status: String,
    attempts: i64,
    step_attempt: i64,
    last_error: Option<String>,
    provider_message_id: Option<String>,
    first_attempt_at: i64,
    last_attempt_at: i64,
    delivered_at: Option<i64>,
}

impl TryFrom<LedgerRow> for DeliveryRow {
    type Error = StoreError;

    fn try_from(r: LedgerRow) -> StoreResult<DeliveryRow> {
        let count = |n: i64, what: &str| {
            u32::try_from(n).map_err(|_| StoreError::corrupt("deliveries", format!("{what} {n} out of range")))
        };
        Ok(DeliveryRow {
            status: r.status.parse().map_err(|_| StoreError::corrupt("deliveries", format!("status {}", r.status)))?,
            attempts: count(r.attempts, "attempts")?,
            step_attempt: count(r.step_attempt, "step_attempt")?,
            run_id: r.run_id,
            step_id: r.step_id,
            recipient_id: r.recipient_id,
            channel: r.channel,
            last_error: r.last_error,
            provider_message_id: r.provider_message_id,
            first_attempt_at: r.first_attempt_at,
            last_attempt_at: r.last_attempt_at,
            delivered_at: r.delivered_at,
        })
    }
}

/// One step's ledger, by recipient and channel (`LIMIT … + 0`: `tests/store/sqlite_limits.rs`). Index:
/// `deliveries` PK prefix.
const STEP_DELIVERIES: &str = concat!(
    "SELECT ",
    ledger_columns!(),
    " FROM deliveries WHERE run_id = $1 AND step_id = $2 ORDER BY step_id, recipient_id, channel LIMIT $3 + 0"
);

/// One run's ledger, by step, recipient and channel. Index: `deliveries` PK prefix.
const RUN_DELIVERIES: &str = concat!(
    "SELECT ",
    ledger_columns!(),
    " FROM deliveries WHERE run_id = $1 ORDER BY step_id, recipient_id, channel LIMIT $2 + 0"
);

fn checked(rows: Vec<LedgerRow>) -> StoreResult<Vec<DeliveryRow>> {
    rows.into_iter().map(DeliveryRow::try_from).collect()
}

impl Store {
    /// Folds one attempt's report of a channel into the step's ledger, in one transaction: the step is checked
    /// to have reached `write.step_attempt`, then the row is inserted or updated by one upsert (`ledger_tx`).
    ///
    /// # Errors
    /// Database errors (classified by [`crate::ErrorClass`]; retryable ones wrote nothing, and the same report
    /// may be sent again: it is counted once); [`StoreError::Corrupt`] for a row that cannot be read back.
    pub async fn delivery_record(&self, write: &DeliveryWrite) -> StoreResult<DeliveryRecorded> {
        in_tx!(self, |tx, _events| ledger_tx::record(&mut tx, write).await?)
    }

    /// The ledger of one step, by recipient then channel (at most [`MAX_LEDGER_ROWS`] rows).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable); [`StoreError::Corrupt`] for a row that cannot be read.
    pub async fn step_deliveries(&self, run_id: &str, step_id: &str) -> StoreResult<Vec<DeliveryRow>> {
        let rows = on_pool!(self, Db, pool => sqlx::query_as::<Db, LedgerRow>(STEP_DELIVERIES)
            .bind(run_id).bind(step_id).bind(i64::from(MAX_LEDGER_ROWS)).fetch_all(pool).await?);
        checked(rows)
    }

    /// The ledger of one run, by step, recipient then channel (at most [`MAX_LEDGER_ROWS`] rows).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable); [`StoreError::Corrupt`] for a row that cannot be read.
    pub async fn run_deliveries(&self, run_id: &str) -> StoreResult<Vec<DeliveryRow>> {
        let rows = on_pool!(self, Db, pool => sqlx::query_as::<Db, LedgerRow>(RUN_DELIVERIES)
            .bind(run_id).bind(i64::from(MAX_LEDGER_ROWS)).fetch_all(pool).await?);
        checked(rows)
    }
}
