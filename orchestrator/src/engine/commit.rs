//! Group commit of new runs, worker reports and claims (`docs/design/group-commit.md`).
//!
//! Submissions of small runs (at most [`MAX_BATCHED_RUN_STEPS`] steps), reports (`Complete`, `Fail`) and claims
//! (`Poll`) queue to one writer task, which applies whatever has
//! queued — up to [`MAX_BATCH`] operations, more only by the rest of the message that crosses it (a worker's
//! `CompleteBatch`, or a run, which counts one per step) — in a single transaction: one commit, one `fsync`, for
//! the whole
//! batch. An operation that arrives on its own is written at once, so an idle system adds no delay, and under
//! load batches grow by themselves while the previous commit is in flight. Each operation is answered only
//! after its batch committed (nothing is acknowledged, and no step handed out, before it is durable), and steps
//! the batch's new runs and reports made due are claimed, in the same transaction, for long polls already
//! waiting (see `waiters`): a chain step then costs one commit, not two, and so does a new run's first step
//! (its creation, then its claim). Why submissions share the writer: measured with `cairn bench dispatch` on
//! PostgreSQL, runs arriving as fast as the API accepted them (8 clients) each committed on their own, and the
//! commits' `fsync`s queued behind one another (hundreds of `COMMIT`s over 5 ms, up to 59 ms), which was the
//! tail of the dispatch latency.
//!
//! A failed batch's new runs are always created again one by one, off the writer task
//! (`Store::create_run_detailed`, which also settles an idempotency key a concurrent submission took
//! meanwhile), each answered with its own outcome; unless the database is unreachable, the batch's reports and
//! claims are then written again without them, since a run may be what failed the batch. A batch of reports and
//! claims that fails because the database is unreachable or turned it away for other work
//! ([`StoreError::is_unreachable`], [`StoreError::is_contended`]) answers every report and claim with a retryable
//! error (a worker resends its report; reports are fenced by their lease, so a repeated report changes nothing).
//! A batch that fails for another reason (a statement refused, stored data that cannot be decoded) is applied
//! again operation by operation, so one bad operation fails alone and cannot fail the others each time they are
//! resent together.

use std::sync::{Mutex, Weak};

use cairn_store::{
    BatchOutcome, BatchWriter, ClaimRequest, Claimed, CreateOutcome, NewRun, OneCallCounts, Report, ReportItem,
    ReportKind, RunDetail, StoreError, StoreResult,
};
use tokio::sync::{mpsc, oneshot};

use super::waiters::Waiter;
use super::{Engine, Inner};

/// Most operations written in one transaction.
pub(super) const MAX_BATCH: usize = 512;

/// Most steps a run may have to be created by the writer, in a batch; a larger run is created in a transaction of
/// its own, so that a 10,000-step submission (hundreds of ms) never holds up the workers' reports and claims.
pub(super) const MAX_BATCHED_RUN_STEPS: usize = 100;

/// What creating a run returns: [`cairn_store::Store::create_run_detailed`]'s answer.
pub(super) type Created = (CreateOutcome, Option<RunDetail>);

/// Operations waiting for the writer, bounded so a stalled database pushes back on workers and submitters.
const QUEUE: usize = 8192;

/// An operation and where its outcome goes.
pub(super) enum Pending {
    /// A new run (at most [`MAX_BATCHED_RUN_STEPS`] steps); it counts as one operation per step, three more with
    /// an idempotency key.
    Run(Box<NewRun>, oneshot::Sender<StoreResult<Created>>),
    Report(ReportItem, oneshot::Sender<StoreResult<Report>>),
    /// A claim; `park`: when nothing is claimable, register the claimer as a waiter instead of answering empty.
    Claim {
        request: ClaimRequest,
        park: bool,
        reply: oneshot::Sender<StoreResult<ClaimAnswer>>,
    },
    /// A report and the claim its worker sent with it, queued as one operation so that they always share a
    /// batch (the claim then sees what the report released, and the writer can take the pair in one call).
    ReportAndClaim {
        item: ReportItem,
        report_reply: oneshot::Sender<StoreResult<Report>>,
        request: ClaimRequest,
        claim_reply: oneshot::Sender<StoreResult<ClaimAnswer>>,
    },
    /// Operations queued as one message so that the writer takes them all or none: a worker's `CompleteBatch`,
    /// answered only when its last item is, would otherwise wait for a second batch whenever the writer woke
    /// between two of its items. The writer's [`MAX_BATCH`] counts a group's operations; the queue's bound
    /// ([`QUEUE`]) counts it as one message (a group holds at most 256 reports, each with its claim).
    Together(Vec<Pending>),
}

/// The answer to a claim.
#[derive(Debug)]
pub(crate) enum ClaimAnswer {
    /// The steps leased (possibly none, when parking was not asked for).
    Claimed(Vec<Claimed>),
    /// Nothing was claimable; the claimer now waits as `ticket`, and released steps may arrive on `handoff`.
    Parked { ticket: u64, handoff: oneshot::Receiver<Vec<Claimed>> },
}

/// The queue's sending half, held by the engine.
pub(super) type CommitQueue = mpsc::Sender<Pending>;

/// Creates the queue; the receiving half goes to [`spawn_writer`] once the engine exists.
pub(super) fn queue() -> (CommitQueue, mpsc::Receiver<Pending>) {
    mpsc::channel(QUEUE)
}

/// Runs the writer until the engine is dropped (its queue then closes).
pub(super) fn spawn_writer(engine: Weak<Inner>, mut queue: mpsc::Receiver<Pending>) {
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        // Made with the first batch (the store lives in the engine); holds its connection between batches.
        let mut writer: Option<BatchWriter> = None;
        while let Some(first) = queue.recv().await {
            take_batch(first, &mut queue, &mut batch);
            let Some(inner) = engine.upgrade() else { break };
            let writer =
                writer.get_or_insert_with(|| inner.store.batch_writer().with_fast_path(inner.config.pg_fast_path));
            let before = writer.fast_path_counts();
            let engine = Engine { inner };
            engine.write(writer, std::mem::take(&mut batch)).await;
            let after = writer.fast_path_counts();
            engine.inner.metrics.one_call("chain", since(before.chain, after.chain));
            engine.inner.metrics.one_call("leaves", since(before.leaves, after.leaves));
        }
    });
}

/// `first` and what else is queued into `batch`, until it holds [`MAX_BATCH`] operations (a group counts its
/// operations, and is never split, so a batch may end up to one worker's `CompleteBatch` over the limit).
fn take_batch(first: Pending, queue: &mut mpsc::Receiver<Pending>, batch: &mut Vec<Pending>) {
    let mut operations = first.operations();
    batch.push(first);
    while operations < MAX_BATCH {
        let Ok(op) = queue.try_recv() else { break };
        operations += op.operations();
        batch.push(op);
    }
}

impl Pending {
    /// Operations in this message: 1, a run's steps, or a group's count.
    fn operations(&self) -> usize {
        match self {
            Pending::Together(ops) => ops.iter().map(Pending::operations).sum(),
            // A keyed run costs its key's lookup and its own inserts, where unkeyed runs share theirs.
            Pending::Run(run, _) => run.plan.steps.len().max(1) + if run.idempotency_key.is_some() { 3 } else { 0 },
            _ => 1,
        }
    }
}

/// The calls counted in `after` that `before` had not.
fn since(before: OneCallCounts, after: OneCallCounts) -> OneCallCounts {
    OneCallCounts {
        committed: after.committed - before.committed,
        fell_back: after.fell_back - before.fell_back,
        unknown: after.unknown - before.unknown,
    }
}

/// A batch split by kind, each with its callers.
#[derive(Default)]
struct Batch {
    runs: Vec<NewRun>,
    run_replies: Vec<oneshot::Sender<StoreResult<Created>>>,
    reports: Vec<ReportItem>,
    report_replies: Vec<oneshot::Sender<StoreResult<Report>>>,
    claims: Vec<ClaimRequest>,
    claim_replies: Vec<(bool, oneshot::Sender<StoreResult<ClaimAnswer>>)>,
}

impl Batch {
    fn split(pending: Vec<Pending>) -> Self {
        let mut batch = Batch::default();
        batch.add(pending);
        batch
    }

    fn add(&mut self, pending: Vec<Pending>) {
        let batch = self;
        for op in pending {
            match op {
                Pending::Together(ops) => batch.add(ops),
                Pending::Run(run, reply) => {
                    batch.runs.push(*run);
                    batch.run_replies.push(reply);
                }
                Pending::Report(item, reply) => {
                    batch.reports.push(item);
                    batch.report_replies.push(reply);
                }
                Pending::Claim { request, park, reply } => {
                    batch.claims.push(request);
                    batch.claim_replies.push((park, reply));
                }
                Pending::ReportAndClaim { item, report_reply, request, claim_reply } => {
                    batch.reports.push(item);
                    batch.report_replies.push(report_reply);
                    batch.claims.push(request);
                    batch.claim_replies.push((false, claim_reply));
                }
            }
        }
    }

    /// Reports and claims (not runs).
    fn len(&self) -> usize {
        self.reports.len() + self.claims.len()
    }
}

impl Engine {
    /// Queues a new run (at most [`MAX_BATCHED_RUN_STEPS`] steps) and waits for its creation's outcome (after its
    /// batch committed; its ready roots may already be leased to waiting polls then).
    pub(super) async fn queue_run(&self, run: NewRun) -> StoreResult<Created> {
        let (reply, outcome) = oneshot::channel();
        self.enqueue(Pending::Run(Box::new(run), reply)).await?;
        outcome.await.map_err(|_| StoreError::Stopped)?
    }

    /// Queues a report and waits for its outcome (after its batch committed).
    pub(super) async fn queue_report(&self, item: ReportItem) -> StoreResult<Report> {
        let (reply, outcome) = oneshot::channel();
        self.enqueue(Pending::Report(item, reply)).await?;
        // The writer is gone only when the engine is shutting down: retryable, like a lost connection.
        outcome.await.map_err(|_| StoreError::Stopped)?
    }

    /// Queues a claim and waits for the leased steps (after its batch committed), or, with `park`, for the
    /// waiter it became when nothing was claimable.
    pub(super) async fn queue_claim(&self, request: ClaimRequest, park: bool) -> StoreResult<ClaimAnswer> {
        let (reply, outcome) = oneshot::channel();
        self.enqueue(Pending::Claim { request, park, reply }).await?;
        outcome.await.map_err(|_| StoreError::Stopped)?
    }

    /// Reports, each with the claim its worker sent with it (or alone where none is given), queued as one
    /// operation (a pair, or a [`Pending::Together`] of several) so that they always share a batch: each claim
    /// then sees what the reports released, and the writer can take them in one call. Their outcomes in the
    /// order given (`Ok` and no steps for a claim not given); nothing is queued for no reports.
    pub(super) async fn queue_reports_and_claims(
        &self,
        pairs: Vec<(ReportItem, Option<ClaimRequest>)>,
    ) -> Vec<(StoreResult<Report>, StoreResult<ClaimAnswer>)> {
        if pairs.is_empty() {
            return Vec::new();
        }
        let (mut ops, mut replies) = (Vec::with_capacity(pairs.len()), Vec::with_capacity(pairs.len()));
        for (item, request) in pairs {
            let (report_reply, report) = oneshot::channel();
            match request {
                Some(request) => {
                    let (claim_reply, claim) = oneshot::channel();
                    ops.push(Pending::ReportAndClaim { item, report_reply, request, claim_reply });
                    replies.push((report, Some(claim)));
                }
                None => {
                    ops.push(Pending::Report(item, report_reply));
                    replies.push((report, None));
                }
            }
        }
        let op = if ops.len() == 1 { ops.remove(0) } else { Pending::Together(ops) };
        let queued = self.enqueue(op).await.is_ok();
        let mut outcomes = Vec::with_capacity(replies.len());
        for (report, claim) in replies {
            if !queued {
                outcomes.push((Err(StoreError::Stopped), Err(StoreError::Stopped)));
                continue;
            }
            // The writer is gone only when the engine is shutting down: retryable, like a lost connection.
            let report = report.await.map_err(|_| StoreError::Stopped).and_then(|r| r);
            let claim = match claim {
                Some(claim) => claim.await.map_err(|_| StoreError::Stopped).and_then(|c| c),
                None => Ok(ClaimAnswer::Claimed(Vec::new())),
            };
            outcomes.push((report, claim));
        }
        outcomes
    }

    async fn enqueue(&self, op: Pending) -> StoreResult<()> {
        self.inner.commits.send(op).await.map_err(|_| StoreError::Stopped)
    }

    /// Writes one batch and answers its callers and hand-offs.
    async fn write(&self, writer: &mut BatchWriter, pending: Vec<Pending>) {
        let mut batch = Batch::split(pending);
        let now = self.now_ms();
        let taken: Mutex<Option<Vec<Waiter>>> = Mutex::new(None);
        // Called inside the transaction once it knows how many steps became due; called again with the same
        // count if the transaction is retried, and must then name the same waiters.
        let handoff = |due: usize| -> Vec<ClaimRequest> {
            let mut slot = taken.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let waiters = slot.get_or_insert_with(|| self.inner.waiters.take(due));
            waiters.iter().map(|w| w.request.clone()).collect()
        };
        let (limits, ttl) = (self.report_limits(), self.lease_ttl_ms());
        let mut result = writer
            .write_batch(&cairn_store::Batch {
                runs: &batch.runs,
                reports: &batch.reports,
                claims: &batch.claims,
                limits,
                lease_ttl_ms: ttl,
                now_ms: now,
                handoff: &handoff,
            })
            .await;
        if let Err(error) = &result
            && !batch.runs.is_empty()
        {
            let (runs, replies) = (std::mem::take(&mut batch.runs), std::mem::take(&mut batch.run_replies));
            // Off the writer task, so that an outage does not hold up the operations queued behind this batch.
            let engine = self.clone();
            tokio::spawn(async move { engine.create_one_by_one(runs, replies).await });
            // A run may be what failed the batch (its idempotency key taken by a concurrent transaction): the
            // reports and claims are written again without the runs, unless the database is unreachable.
            if !error.is_unreachable() && batch.len() > 0 {
                result = writer
                    .write_batch(&cairn_store::Batch {
                        runs: &[],
                        reports: &batch.reports,
                        claims: &batch.claims,
                        limits,
                        lease_ttl_ms: ttl,
                        now_ms: now,
                        handoff: &handoff,
                    })
                    .await;
            }
        }
        let waiters = taken.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).unwrap_or_default();
        match result {
            Ok(outcome) => self.settled(batch, waiters, outcome, now).await,
            // Only runs, created again above.
            Err(_) if batch.len() == 0 => {}
            // Taken waiters are dropped unanswered: their polls see the hand-off end and claim for themselves.
            Err(error) if batch.len() == 1 => {
                tracing::warn!(error = %error, "operation not recorded");
                if let Some(reply) = batch.report_replies.into_iter().next() {
                    let _ = reply.send(Err(error));
                } else if let Some((_, reply)) = batch.claim_replies.into_iter().next() {
                    let _ = reply.send(Err(error));
                }
            }
            // The database unreachable, or turning the transaction away because of other work: writing the
            // operations one by one would wait out the same condition once per operation. Every caller gets a
            // retryable error and resends.
            Err(error) if error.is_unreachable() || error.is_contended() => {
                tracing::warn!(error = %error, operations = batch.len(), "batch not recorded");
                let message = error.to_string();
                for reply in batch.report_replies {
                    let _ = reply.send(Err(StoreError::Unavailable(message.clone())));
                }
                for (_, reply) in batch.claim_replies {
                    let _ = reply.send(Err(StoreError::Unavailable(message.clone())));
                }
            }
            // A statement refused (a value or constraint it could not take, a trigger): written one by one, the
            // operation that caused it fails alone, with its own error, and the others are recorded. Answering
            // all of them "retry" would have the caller resend the same mix and fail it again.
            Err(error) => {
                tracing::warn!(error = %error, operations = batch.len(), "batch not recorded; writing it one by one");
                for (item, reply) in batch.reports.iter().zip(batch.report_replies) {
                    let _ = reply.send(self.write_one(item).await);
                }
                for (request, (park, reply)) in batch.claims.iter().zip(batch.claim_replies) {
                    match self.claim_one(request).await {
                        Ok(claimed) => self.answer_claim(request, park, reply, claimed).await,
                        Err(error) => {
                            let _ = reply.send(Err(error));
                        }
                    }
                }
            }
        }
    }

    /// Answers a committed batch: reports and claims in order, then each taken waiter with its claims.
    async fn settled(&self, batch: Batch, waiters: Vec<Waiter>, outcome: BatchOutcome, now: i64) {
        // A new run's timer may come due before the time the waiting polls sleep to.
        let mut timer_set = false;
        for ((run, reply), created) in batch.runs.iter().zip(batch.run_replies).zip(outcome.created) {
            timer_set |= run.timers.iter().any(Option::is_some);
            let _ = reply.send(Ok(created));
        }
        let mut retry_scheduled = false;
        for ((item, reply), report) in batch.reports.iter().zip(batch.report_replies).zip(outcome.reports) {
            self.after_report(item, report);
            retry_scheduled |= report == Report::RetryScheduled;
            let _ = reply.send(Ok(report));
        }
        for ((request, (park, reply)), claimed) in batch.claims.iter().zip(batch.claim_replies).zip(outcome.claimed) {
            self.claims_observed(&request.worker_id, &claimed, now);
            self.answer_claim(request, park, reply, claimed).await;
        }
        let mut handed = 0;
        for (waiter, claimed) in waiters.into_iter().zip(outcome.handed) {
            handed += claimed.len();
            self.claims_observed(&waiter.request.worker_id, &claimed, now);
            if let Err(undelivered) = waiter.reply.send(claimed) {
                self.give_back(undelivered, "not delivered: the worker's poll had ended").await;
            }
        }
        // Pollers are woken only for what the hand-off did not cover, or for an earlier due time to sleep to.
        if outcome.ready_now > handed || retry_scheduled || timer_set {
            self.wake();
        }
    }

    /// Answers a committed claim: its steps, or (nothing claimed, parking asked) a waiter registered before the
    /// next batch. Steps whose claimer is gone are given back.
    async fn answer_claim(
        &self,
        request: &ClaimRequest,
        park: bool,
        reply: oneshot::Sender<StoreResult<ClaimAnswer>>,
        claimed: Vec<Claimed>,
    ) {
        if claimed.is_empty() && park {
            let (ticket, handoff) = self.inner.waiters.register(request.clone());
            if reply.send(Ok(ClaimAnswer::Parked { ticket, handoff })).is_err() {
                // The poll ended meanwhile; no batch ran since the registration, so nothing was handed to it.
                self.inner.waiters.remove(ticket);
            }
            return;
        }
        if let Err(Ok(ClaimAnswer::Claimed(undelivered))) = reply.send(Ok(ClaimAnswer::Claimed(claimed))) {
            self.give_back(undelivered, "not delivered: the worker's poll had ended").await;
        }
    }

    /// Creates each run in its own transaction (after their batch failed) and answers it. A run found stored
    /// under its own id was created by the failed batch after all (its `COMMIT` went through but the answer was
    /// lost): it is answered as created, with its detail read back, not as an error the client would answer
    /// with a second run.
    async fn create_one_by_one(&self, runs: Vec<NewRun>, replies: Vec<oneshot::Sender<StoreResult<Created>>>) {
        for (run, reply) in runs.iter().zip(replies) {
            let created = match self.inner.store.create_run_detailed(run).await {
                Ok((CreateOutcome::Existing(id), _)) if id == run.run_id => self.stored(run).await,
                Err(error) => self.stored(run).await.map_err(|_| error),
                created => created,
            };
            if created.is_ok() {
                self.wake();
            }
            let _ = reply.send(created);
        }
    }

    /// `run` as stored under its own id, as created.
    async fn stored(&self, run: &NewRun) -> StoreResult<Created> {
        match self.inner.store.run_detail(&run.run_id).await? {
            Some(detail) => Ok((CreateOutcome::Created(run.run_id.clone()), Some(detail))),
            None => Err(StoreError::Unavailable(format!("run {} was not stored", run.run_id))),
        }
    }

    /// One report in its own transaction (after a batch failed).
    async fn write_one(&self, item: &ReportItem) -> StoreResult<Report> {
        let now = self.now_ms();
        let report = match &item.kind {
            ReportKind::Complete(output) => {
                self.inner.store.complete(&item.lease, output, self.report_limits(), now).await?
            }
            ReportKind::Fail { failure, sample } => self.inner.store.fail(&item.lease, failure, *sample, now).await?,
        };
        self.after_report(item, report);
        if report != Report::Stale {
            self.wake();
        }
        Ok(report)
    }

    /// One claim in its own transaction (after a batch failed).
    async fn claim_one(&self, request: &ClaimRequest) -> StoreResult<Vec<Claimed>> {
        let now = self.now_ms();
        let request = ClaimRequest { now_ms: now, ..request.clone() };
        let claimed = self.inner.store.claim(&request, self.lease_ttl_ms()).await?;
        self.claims_observed(&request.worker_id, &claimed, now);
        Ok(claimed)
    }
}
