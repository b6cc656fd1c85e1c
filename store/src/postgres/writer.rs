//! The batch writer on PostgreSQL (`crate::BatchWriter`; `docs/design/group-commit.md`): one task writes every
//! batch of reports and claims, so it keeps one pooled connection checked out between its transactions, and it
//! tries the fast path (the one-call functions of `store/sql/postgres/functions/`) where a batch allows.
//!
//! Why the held connection: a connection going back to sqlx's pool is pinged (one more round trip and a wake-up
//! of its server process, in a task of its own, at the moment the batch's answers go out), and the next
//! transaction then begins on another pooled connection, with another server process. Kept, the writer's
//! transactions run on one server process back to back, which shortens every chain step
//! (`bench/results/comparisons.csv`). The held connection counts against the pool's size (16): other
//! transactions share the other 15 (the listener to other orchestrators, `PeerListener`, has a connection of its
//! own).

use std::collections::{HashMap, HashSet};

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

use super::complete_and_claim::{Candidate, committed, complete_and_claim, outcome};
use super::complete_leaves::{self, LeafBatch, complete_leaves_and_claim};
use super::{deadline, lost_commit};
use crate::error::{StoreError, StoreResult};
use crate::flow::batch::{Batch, report_batch};
use crate::model::{BatchOutcome, Lease};
use crate::writer::OneCallCounts;
use crate::{conflict_pause, postgres, tx};

/// Writes batches for one task on PostgreSQL, holding its connection between them (see the module docs);
/// dropping it gives the connection back to the pool.
#[derive(Debug)]
pub(crate) struct PgWriter {
    pool: PgPool,
    held: Option<PoolConnection<Postgres>>,
    /// PostgreSQL: leases this writer handed out whose step has a successor (`CompletionHint::successor_action`), with
    /// that successor's action: the completions worth trying in one call (`cairn_complete_and_claim`). Each is
    /// forgotten when reported.
    successors: HashMap<Lease, String>,
    /// PostgreSQL: leases this writer handed out for steps nothing depends on (`CompletionHint::is_leaf`): batches of
    /// their completions are worth trying in one call (`cairn_complete_leaves_and_claim`). Each is forgotten
    /// when reported.
    leaves: HashSet<Lease>,
    /// Batches still to send the general way before trying the leaf call again, after it fell back.
    leaf_pause: u32,
    one_call: OneCallCounts,
    leaf_call: OneCallCounts,
    /// Whether the one-call functions may be tried (`pg_fast_path`); off, every batch takes the general path.
    fast_path: bool,
    /// When the last batch ended: the held connection is pinged before a batch that follows a pause, as the pool
    /// pings its idle ones (`postgres::connect`), so one cut while idle (a dropped NAT mapping) costs a ping's
    /// deadline, not a batch's.
    last_batch_at: Option<std::time::Instant>,
}

impl PgWriter {
    pub(crate) fn new(pool: PgPool) -> Self {
        PgWriter {
            pool,
            held: None,
            successors: HashMap::new(),
            leaves: HashSet::new(),
            leaf_pause: 0,
            one_call: OneCallCounts::default(),
            leaf_call: OneCallCounts::default(),
            fast_path: true,
            last_batch_at: None,
        }
    }

    /// Whether the one-call functions may be tried (`pg_fast_path`).
    pub(crate) fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }

    /// [`Store::write_batch`], on the writer's own connection: the same semantics, errors and retries (a
    /// deadlock or serialization failure, after which the transaction was rolled back, runs it again on the same
    /// connection: five tries in all).
    ///
    /// A held connection that the server closed while the writer was idle (a database restart, a terminated
    /// session) fails at `BEGIN`, before anything was applied: it is dropped and the transaction begins on a
    /// fresh one from the pool, up to once per pooled connection. After any other error the connection is closed,
    /// not returned to the pool, so a connection left in an unknown state is never reused by anyone. When the
    /// connection is lost while `COMMIT` is under way, the steps the batch leased are read back on a fresh
    /// connection ([`lost_commit`]): found, the batch is answered as committed, leases and all; not found, it is
    /// written again (within the same once-per-pooled-connection budget as a connection closed at `BEGIN`); with
    /// nothing leased to read it by, it fails with the retryable `Database` error as before
    /// (reports are fenced by their lease, so a worker's resent report changes nothing).
    ///
    /// A batch with new runs always takes the general path: the one-call functions know only reports and claims.
    ///
    /// # Errors
    /// As [`Store::write_batch`].
    pub(crate) async fn write_batch(&mut self, batch: &Batch<'_>) -> StoreResult<BatchOutcome> {
        let Batch { runs, reports: items, claims, limits, lease_ttl_ms, now_ms, .. } = *batch;
        let pool = &self.pool;
        if self.last_batch_at.is_some_and(|at| at.elapsed() > postgres::PING_AFTER_IDLE)
            && let Some(connection) = self.held.as_mut()
            && let Err(e) = postgres::ping_within_deadline(connection, pool).await
        {
            tracing::debug!(error = %e, "the writer's idle connection did not answer a ping; taking another");
            deadline::discard(&mut self.held);
        }
        self.last_batch_at = Some(std::time::Instant::now());
        // Tried in one call only for a lease this writer handed out for a step with a successor
        // (`CompletionHint::successor_action`) that the riding claim serves: otherwise the call would fall back, a round
        // trip for nothing.
        let successors = &self.successors;
        let only_reports = runs.is_empty() && self.fast_path;
        let candidate = only_reports
            .then(|| {
                Candidate::of(items, claims, limits, |lease, claim| {
                    successors.get(lease).is_some_and(|action| claim.actions.contains(action))
                })
            })
            .flatten();
        // Leaf completions with their claims, when no chain step is: after a fallback (a leased step with a
        // placeholder, a run ending), the next batches go the general way without asking, or even looking.
        let leaf_batch = if !only_reports || candidate.is_some() {
            None
        } else if self.leaf_pause > 0 {
            self.leaf_pause -= 1;
            None
        } else {
            LeafBatch::of(items, claims, limits, |lease| self.leaves.contains(lease))
        };
        for item in items {
            self.successors.remove(&item.lease);
            self.leaves.remove(&item.lease);
        }
        let in_one = match (candidate, leaf_batch) {
            (Some(candidate), _) => {
                let tried = one_call(
                    &mut self.held,
                    pool,
                    async |connection| complete_and_claim(connection, &candidate, lease_ttl_ms, now_ms).await,
                    async || committed(pool, &candidate, now_ms).await,
                )
                .await;
                self.one_call.count(&tried);
                tried.outcome(|row| outcome(row, &candidate, now_ms))
            }
            (None, Some(batch)) => {
                let tried = one_call(
                    &mut self.held,
                    pool,
                    async |connection| complete_leaves_and_claim(connection, &batch, lease_ttl_ms, now_ms).await,
                    async || complete_leaves::committed(pool, &batch, now_ms).await,
                )
                .await;
                self.leaf_call.count(&tried);
                if matches!(tried, OneCall::FellBack) {
                    self.leaf_pause = LEAF_PAUSE_BATCHES;
                }
                tried.outcome(|rows| complete_leaves::outcome(rows, &batch, now_ms))
            }
            (None, None) => None,
        };
        let outcome = match in_one {
            Some(outcome) => outcome,
            None => write_general(&mut self.held, pool, batch).await,
        };
        if let Ok(outcome) = &outcome {
            self.remember(outcome);
        }
        outcome
    }

    /// How the chain steps this writer tried in one call (`cairn_complete_and_claim`) ended (for tests and
    /// metrics).
    pub(crate) fn one_call_counts(&self) -> OneCallCounts {
        self.one_call
    }

    /// How the leaf batches this writer tried in one call (`cairn_complete_leaves_and_claim`) ended (for tests
    /// and metrics).
    pub(crate) fn leaf_call_counts(&self) -> OneCallCounts {
        self.leaf_call
    }

    /// Remembers the leases of the outcome's claimed steps that have a successor, with its action. Leases that
    /// are never reported (their worker vanished) would stay: past [`MAX_REMEMBERED`] the map starts again
    /// empty, which only sends completions the general way.
    fn remember(&mut self, outcome: &BatchOutcome) {
        for step in outcome.claimed.iter().chain(&outcome.handed).flatten() {
            if step.completion.is_leaf() {
                if self.leaves.len() >= MAX_REMEMBERED {
                    self.leaves.clear();
                }
                self.leaves.insert(step.lease.clone());
            }
            let Some(action) = step.completion.successor_action() else { continue };
            if self.successors.len() >= MAX_REMEMBERED {
                self.successors.clear();
            }
            self.successors.insert(step.lease.clone(), action.to_owned());
        }
    }
}

#[cfg(test)]
impl PgWriter {
    /// The successor's action remembered for `lease`, if any.
    pub(crate) fn successor_of(&self, lease: &Lease) -> Option<&str> {
        self.successors.get(lease).map(String::as_str)
    }
}

/// Most leases [`PgWriter`] remembers as worth a one-call completion, per kind (about 150 bytes each).
const MAX_REMEMBERED: usize = 65_536;

/// Batches sent the general way after the leaf call fell back, before it is tried again: a workload whose leaf
/// batches always fall back (leased steps with placeholders, say) then pays at most one wasted round trip in this
/// many batches.
const LEAF_PAUSE_BATCHES: u32 = 32;

/// The general path: the batch's transaction on the held connection, retried as [`PgWriter::write_batch`]
/// says.
async fn write_general(
    held: &mut Option<PoolConnection<Postgres>>,
    pool: &PgPool,
    batch: &Batch<'_>,
) -> StoreResult<BatchOutcome> {
    // `tries`: tries that reached past `BEGIN`; `silent`: `COMMIT`s that got no answer within the deadline.
    let (mut tries, mut closed, mut silent) = (0_u32, 0_u32, 0_u32);
    loop {
        match write_once(held, pool, batch).await {
            Attempt::Closed(e) if closed < postgres::MAX_CONNECTIONS => {
                tracing::debug!(error = %e, "the writer's connection was closed; beginning on another");
                closed += 1;
                deadline::discard(held);
            }
            Attempt::Closed(e) => {
                deadline::discard(held);
                return Err(e.into());
            }
            Attempt::Done(Ok(outcome)) => return Ok(outcome),
            Attempt::CommitLost(outcome, e) => {
                deadline::discard(held);
                match lost_commit::leases_committed(pool, &outcome, batch.now_ms).await {
                    Ok(Some(true)) => {
                        tracing::debug!(error = %e, "a batch's COMMIT answer was lost; its leases show it committed");
                        return Ok(outcome);
                    }
                    // A `COMMIT` without an answer may still be under way on a live but slow server, invisible to
                    // the read until it ends: written again once only, not once per pooled connection.
                    Ok(Some(false)) if closed < postgres::MAX_CONNECTIONS && silent == 0 => {
                        silent += u32::from(deadline::is_no_answer(&e));
                        tracing::debug!(error = %e, "a batch's COMMIT was lost before it committed; writing it again");
                        closed += 1;
                    }
                    // Nothing leased to read the outcome by, or the read failed: unknown, as a lost `COMMIT` is.
                    _ => return Err(e.into()),
                }
            }
            Attempt::Done(Err(e)) => {
                tries += 1;
                let Some(pause) = conflict_pause(&e, tries) else {
                    deadline::discard(held);
                    return Err(e);
                };
                tracing::debug!(error = %e, tries, "transaction conflict; retrying");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// How a one-call batch ([`in_one_call`], [`leaves_in_one_call`]) ended.
enum OneCall<T> {
    /// The call committed and returned this.
    Committed(T),
    /// Nothing was written: take the general path.
    FellBack,
    /// The connection was lost and what committed could not be read.
    Unknown(StoreError),
    /// No connection could be had for the call: take the general path (which reports the pool's error).
    NotTried,
}

impl<T> OneCall<T> {
    /// The batch's outcome, `of` what the call returned; `None` when the general path must write the batch.
    fn outcome(self, of: impl FnOnce(T) -> StoreResult<BatchOutcome>) -> Option<StoreResult<BatchOutcome>> {
        match self {
            OneCall::Committed(value) => Some(of(value)),
            OneCall::Unknown(e) => Some(Err(e)),
            OneCall::FellBack | OneCall::NotTried => None,
        }
    }
}

impl OneCallCounts {
    fn count<T>(&mut self, tried: &OneCall<T>) {
        match tried {
            OneCall::Committed(_) => self.committed += 1,
            OneCall::FellBack => self.fell_back += 1,
            OneCall::Unknown(_) => self.unknown += 1,
            OneCall::NotTried => {}
        }
    }
}

/// The held connection, taken from `pool` when none is held; `None` when the pool has none to give.
async fn held_connection<'c>(
    held: &'c mut Option<PoolConnection<Postgres>>,
    pool: &PgPool,
) -> Option<&'c mut PoolConnection<Postgres>> {
    match held {
        Some(connection) => Some(connection),
        None => pool.acquire().await.ok().map(|connection| held.insert(connection)),
    }
}

/// A batch in one `call` on the held connection (taken from `pool` when none is): the chain call
/// ([`complete_and_claim`]) or the leaf call ([`complete_leaves_and_claim`]), each `Ok(None)` when the function
/// left the batch to the general path.
///
/// After an error the connection is dropped; an error other than a lost connection rolled the call back. When
/// the connection was lost during the call, the call may have committed before its answer was lost, so
/// `read_back` reads on a fresh connection what it committed ([`committed`], [`complete_leaves::committed`]):
/// the batch is then answered from that, or goes the general way if nothing was found (the usual case: the
/// connection was already closed when the call was sent, after a database restart or a terminated session).
/// Either read-back also hands out the steps the call leased rather than leaving them to lease expiry (where a
/// non-idempotent step would be parked as `outcome_unknown` though it never started).
async fn one_call<T>(
    held: &mut Option<PoolConnection<Postgres>>,
    pool: &PgPool,
    call: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<Option<T>, sqlx::Error>,
    read_back: impl AsyncFnOnce() -> Result<Option<T>, sqlx::Error>,
) -> OneCall<T> {
    let Some(connection) = held_connection(held, pool).await else { return OneCall::NotTried };
    let error = match deadline::answered(pool, call(connection)).await {
        Ok(Some(value)) => return OneCall::Committed(value),
        Ok(None) => return OneCall::FellBack,
        Err(e) => e,
    };
    deadline::discard(held);
    if !postgres::lost_connection(&error) {
        tracing::debug!(error = %error, "a one-call batch failed; taking the general path");
        return OneCall::FellBack;
    }
    tracing::debug!(error = %error, "the connection was lost during a one-call batch; reading what committed");
    // Within the deadline, its connection closed past it (`postgres::on_a_live_connection`).
    match read_back().await {
        Ok(Some(value)) => OneCall::Committed(value),
        Ok(None) => OneCall::FellBack,
        Err(e) => OneCall::Unknown(e.into()),
    }
}

/// How one try at a batch's transaction ended.
enum Attempt {
    /// The connection was already closed at `BEGIN`: nothing was applied.
    Closed(sqlx::Error),
    /// The connection was lost while `COMMIT` was under way: the transaction, which would have had this
    /// outcome, may have committed or not ([`lost_commit`] tells).
    CommitLost(BatchOutcome, sqlx::Error),
    /// Committed, or failed after `BEGIN` (rolled back).
    Done(StoreResult<BatchOutcome>),
}

/// One transaction of [`PgWriter::write_batch`] on the held connection (taken from `pool` when none is).
async fn write_once(held: &mut Option<PoolConnection<Postgres>>, pool: &PgPool, batch: &Batch<'_>) -> Attempt {
    let mut tx = match deadline::answered(pool, postgres::begin_on(held, pool)).await {
        Ok(tx) => tx,
        // A connection that gives no answer is not a dead pooled one to replace at once: the next would likely
        // wait out the same deadline.
        Err(e) if postgres::lost_connection(&e) && !deadline::is_no_answer(&e) => return Attempt::Closed(e),
        Err(e) => return Attempt::Done(Err(e.into())),
    };
    let written = deadline::answered(pool, async {
        let mut events = Vec::new();
        let outcome = report_batch(&mut tx, batch, &mut events).await?;
        tx::StepTx::events_insert(&mut tx, &events).await?;
        Ok::<_, StoreError>(outcome)
    })
    .await;
    let outcome = match written {
        Ok(outcome) => outcome,
        Err(e) => return Attempt::Done(Err(e)),
    };
    match deadline::answered(pool, tx.commit()).await {
        Ok(()) => Attempt::Done(Ok(outcome)),
        Err(e) if postgres::lost_connection(&e) => Attempt::CommitLost(outcome, e),
        Err(e) => Attempt::Done(Err(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use sqlx::PgPool;

    use super::*;
    use crate::ReportLimits;
    use crate::Store;
    use crate::model::ClaimRequest;

    /// The server process behind the writer's held connection.
    async fn backend_of(writer: &mut PgWriter) -> i32 {
        let held = writer.held.as_mut().expect("the writer holds a connection");
        sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut **held).await.expect("pid")
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn the_writer_runs_its_batches_on_one_held_connection(pool: PgPool) {
        Store::Postgres(pool.clone()).migrate().await.expect("migrations apply");
        let mut writer = PgWriter::new(pool);
        let claim = [ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 4, now_ms: 1 }];
        let limits = ReportLimits { max_output_bytes: 1024 };
        let nobody = |_: usize| Vec::new();
        let batch = |now_ms| Batch {
            runs: &[],
            reports: &[],
            claims: &claim,
            limits,
            lease_ttl_ms: 30_000,
            now_ms,
            handoff: &nobody,
        };
        writer.write_batch(&batch(1)).await.expect("a first batch");
        let first = backend_of(&mut writer).await;

        writer.write_batch(&batch(2)).await.expect("a second batch");

        assert_eq!(backend_of(&mut writer).await, first, "the second batch ran on the connection the first left held");
    }
}
