//! The engine: the orchestrator's operations over the store, with the injected clock and in-process wake-ups.
//!
//! Every state change is one store transaction; the engine adds time (`now` from the [`Clock`]), randomness
//! (jitter samples), validation, and wake-ups: a worker long-polling in [`Engine::claim_wait`] is woken as soon as
//! something may have become claimable (a submission, a completion, a cancellation), and otherwise sleeps until
//! the next timer is due — no busy polling.
//!
//! Submodules: `commit` (group commit of reports and claims, with hand-off of released steps to waiting
//! polls), `waiters` (the waiting long polls) and `peers` (wake-ups to and from other orchestrators sharing a
//! PostgreSQL database).

mod commit;
mod deliveries;
mod peers;
mod reap_grace;
mod repair;
mod waiters;

pub use deliveries::{AttemptDeliveries, DeliveryAnswer};
pub use repair::{RetryError, RetryRequest};

use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::ActionCatalog;
use cairn_core::clock::Clock;
use cairn_core::failure::Failure;
use cairn_store::{
    ClaimRequest, Claimed, HeartbeatOutcome, Lease, OperatorAction, ReapRequest, Report, ReportItem, ReportKind,
    ReportLimits, Store, StoreResult,
};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::catalog::LiveCatalog;
use crate::config::EngineConfig;
use crate::metrics::Metrics;
use crate::submit::{self, SubmitError, SubmitRequest, Submitted};
use crate::trace::{self, AttemptSpans};

/// The orchestrator engine. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    clock: Arc<dyn Clock>,
    catalog: LiveCatalog,
    config: EngineConfig,
    wake: Notify,
    /// Wake-ups to and from other orchestrators sharing a PostgreSQL database.
    peers: Arc<peers::Peers>,
    /// Dropped with the engine: stops the peer channel's tasks.
    peers_stop: tokio::sync::watch::Sender<()>,
    /// In-process observations for `/metrics`.
    metrics: Metrics,
    /// Attempt spans between claim and report.
    spans: AttemptSpans,
    /// Long polls waiting for work (hand-off targets).
    waiters: waiters::Waiters,
    /// Reports and claims queued for the group-commit writer.
    commits: commit::CommitQueue,
    /// Held while this orchestrator starts `event.wait` steps, so a caller of
    /// [`Engine::start_event_waits`] returns only after any start already in flight (the waiting loop's) has
    /// committed: an event delivered next then finds the armed wait instead of racing its start.
    event_wait_start: tokio::sync::Mutex<()>,
    /// Cancelled when the process begins to shut down: long polls answer at once, live event streams end.
    stopping: CancellationToken,
    /// Which expired leases the reaper may fail (start-up grace, silences of the store).
    reap_grace: tokio::sync::Mutex<reap_grace::ReapGrace>,
    /// When each worker was last recorded as seen polling (`Engine::worker_seen`), to write that at most once
    /// per poll interval.
    seen: std::sync::Mutex<std::collections::HashMap<String, (tokio::time::Instant, Vec<String>)>>,
}

/// One completion and the claim sent with it ([`Engine::complete_and_claim_all`]).
#[derive(Debug, Clone, Copy)]
pub struct CompletionAndClaim<'a> {
    /// The attempt completed.
    pub lease: &'a Lease,
    /// Its output.
    pub output: &'a Value,
    /// Actions the worker's next attempts may run.
    pub actions: &'a [String],
    /// Most attempts to claim; 0: the completion alone.
    pub limit: u32,
}

/// The steps a claim answered with (none when it parked).
fn claimed_of(answer: commit::ClaimAnswer) -> Vec<Claimed> {
    match answer {
        commit::ClaimAnswer::Claimed(claimed) => claimed,
        commit::ClaimAnswer::Parked { .. } => Vec::new(),
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("store", &self.inner.store.backend()).finish_non_exhaustive()
    }
}

impl Engine {
    /// Starts an engine over `store`: fails runs whose persisted state is inconsistent (case C03 b) so nothing
    /// waits forever, then is ready to serve. Background loops are started separately ([`crate::reaper::spawn`]).
    ///
    /// # Errors
    /// Store errors from the integrity check (retryable when the database is unreachable).
    pub async fn start(
        store: Store,
        clock: Arc<dyn Clock>,
        catalog: Arc<dyn ActionCatalog + Send + Sync>,
        config: EngineConfig,
    ) -> StoreResult<Engine> {
        let started_at_ms = clock.now().as_millisecond();
        let broken = store.integrity_check(started_at_ms).await?;
        for run_id in &broken {
            tracing::error!(run_id = %run_id, "run failed the integrity check: its step rows are incomplete");
        }
        // A silence: the store unheard from for a quarter of a lease TTL (a worker's heartbeat interval), or two
        // reaper intervals if longer; shorter silences cannot expire a heartbeating lease.
        let silence = (config.lease_ttl / 4).max(config.reap_interval * 2);
        let reap_grace = reap_grace::ReapGrace::new(
            started_at_ms,
            tokio::time::Instant::now(),
            config.startup_grace,
            config.lease_ttl,
            silence,
        );
        let catalog = LiveCatalog::new(catalog, store.clone());
        // The actions registered through any orchestrator, before a worker reconnects (cron ticks after a
        // restart validate against them).
        catalog.load().await?;
        let (queue, writer) = commit::queue();
        let (peers_stop, _) = tokio::sync::watch::channel(());
        let peers = Arc::new(peers::Peers::new(config.peer_hello_every));
        let inner = Arc::new(Inner {
            store,
            clock,
            catalog,
            config,
            wake: Notify::new(),
            peers,
            peers_stop,
            metrics: Metrics::new(),
            spans: AttemptSpans::default(),
            waiters: waiters::Waiters::default(),
            commits: queue,
            event_wait_start: tokio::sync::Mutex::new(()),
            stopping: CancellationToken::new(),
            reap_grace: tokio::sync::Mutex::new(reap_grace),
            seen: std::sync::Mutex::default(),
        });
        commit::spawn_writer(Arc::downgrade(&inner), writer);
        peers::spawn(&inner);
        Ok(Engine { inner })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The live action catalog (built-ins plus registered actions).
    pub fn catalog(&self) -> &LiveCatalog {
        &self.inner.catalog
    }

    /// In-process metrics (histograms, workers heard from), rendered with the database's figures at `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    fn lease_ttl_ms(&self) -> i64 {
        i64::try_from(self.inner.config.lease_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Current time in epoch milliseconds, from the injected clock.
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now().as_millisecond()
    }

    /// Wakes every long-polling claimer (after the clock moved in tests, or a timer came due), and those of the
    /// other orchestrators sharing a PostgreSQL database (`peers`).
    pub fn wake(&self) {
        self.inner.wake.notify_waiters();
        self.inner.peers.wake();
    }

    /// Begins shutting down: waiting long polls answer (with what they can claim at once, usually nothing) and
    /// new ones do not wait; live event streams end. Reports and other writes are still served, so work in flight
    /// can finish during the shutdown grace.
    pub fn stop_waiting(&self) {
        self.inner.stopping.cancel();
    }

    /// Resolves once [`Engine::stop_waiting`] was called.
    pub fn stopping(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.inner.stopping.cancelled()
    }

    /// Whether [`Engine::stop_waiting`] was called.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.is_cancelled()
    }

    /// Records that `worker_id` polls for `actions` (in the database, at most once per poll interval per worker
    /// unless its actions change), so every orchestrator can tell which actions a connected worker serves. A
    /// store error is logged: the poll goes on.
    pub async fn worker_seen(&self, worker_id: &str, actions: &[String]) {
        let every = self.inner.config.poll_wait_max();
        let now = tokio::time::Instant::now();
        {
            let mut seen = self.inner.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((at, known)) = seen.get(worker_id)
                && now.duration_since(*at) < every
                && known.as_slice() == actions
            {
                return;
            }
            seen.insert(worker_id.to_owned(), (now, actions.to_vec()));
        }
        if let Err(e) = self.inner.store.action_workers_seen(worker_id, actions, self.now_ms()).await {
            tracing::warn!(error = %e, worker_id, "could not record the worker as seen");
        }
    }

    /// The actions a connected worker serves: one seen registering or polling within three poll intervals
    /// ([`EngineConfig::poll_wait_max`]), through any orchestrator of the database.
    ///
    /// # Errors
    /// Store errors.
    pub async fn served_actions(&self) -> StoreResult<std::collections::HashSet<String>> {
        let window = i64::try_from((self.inner.config.poll_wait_max() * 3).as_millis()).unwrap_or(i64::MAX);
        let workers = self.inner.store.action_workers_since(self.now_ms().saturating_sub(window)).await?;
        Ok(workers.into_iter().map(|w| w.action).collect())
    }

    /// How many long polls wait here for work, registered and not yet handed steps.
    pub fn waiting_polls(&self) -> usize {
        self.inner.waiters.len()
    }

    /// Whether another orchestrator sharing the database was heard from lately (PostgreSQL; always false on
    /// SQLite): this one then tells the others when steps become claimable (`peers`).
    pub fn hears_other_orchestrators(&self) -> bool {
        self.inner.peers.present()
    }

    /// Validates and stores a run. Invalid plans store nothing.
    ///
    /// # Errors
    /// [`SubmitError::Invalid`] with every diagnostic; [`SubmitError::Conflict`] for a reused idempotency key;
    /// [`SubmitError::Store`].
    pub async fn submit(&self, req: &SubmitRequest) -> Result<Submitted, SubmitError> {
        let now = self.inner.clock.now();
        let run_id = new_run_id(now);
        let catalog = self.inner.catalog.snapshot_for(&req.plan).await;
        let run = submit::prepare(req, &catalog, &self.inner.config.limits, run_id, now)?;
        let event_wait = run.plan.steps.iter().any(|s| s.action == cairn_core::event_wait::ACTION);
        // A small run is created by the group-commit writer, which wakes the polls if its steps need it; a large
        // one in a transaction of its own (see `commit::MAX_BATCHED_RUN_STEPS`).
        let (created, detail) = if run.plan.steps.len() <= commit::MAX_BATCHED_RUN_STEPS {
            self.queue_run(run).await?
        } else {
            let created = self.inner.store.create_run_detailed(&run).await?;
            self.wake();
            created
        };
        let mut outcome = submit::outcome(created, detail)?;
        tracing::info!(run_id = %outcome.run_id, existing = outcome.existing, "run submitted");
        if !outcome.existing {
            trace::run_submitted(&outcome.run_id);
        }
        // An `event.wait` root starts now rather than at the waiting loop's next pass, so its lookback is
        // measured from the submission and an event sent right after the answer is matched. The run is stored
        // either way: a failed start is retried by the loop. Starting it changes the run after the commit, so
        // the committed detail no longer describes it.
        if !outcome.existing && event_wait {
            outcome.created = None;
            if let Err(e) = self.start_event_waits().await {
                tracing::warn!(run_id = %outcome.run_id, error = %e, "starting event waits after submit failed");
            }
        }
        Ok(outcome)
    }

    /// Leases up to `limit` due steps of `actions` for `worker_id`, with resolved args.
    ///
    /// # Errors
    /// Store errors (retryable when the database is unreachable).
    pub async fn claim(&self, worker_id: &str, actions: &[String], limit: u32) -> StoreResult<Vec<Claimed>> {
        let now_ms = self.now_ms();
        let req = ClaimRequest { worker_id: worker_id.to_owned(), actions: actions.to_vec(), limit, now_ms };
        // Group-committed with other claims and reports; observed (metrics, spans) by the writer.
        match self.queue_claim(req, false).await? {
            commit::ClaimAnswer::Claimed(claimed) => Ok(claimed),
            commit::ClaimAnswer::Parked { .. } => Ok(Vec::new()),
        }
    }

    /// Records claims (by a poll or a hand-off) in the metrics and opens their attempt spans.
    fn claims_observed(&self, worker_id: &str, claimed: &[Claimed], now_ms: i64) {
        self.inner.metrics.worker_seen(worker_id, now_ms);
        for c in claimed {
            self.inner.metrics.dispatched(&c.action, now_ms - c.due_at_ms);
            self.inner.spans.claimed(c, now_ms, self.lease_ttl_ms());
        }
        if !claimed.is_empty() {
            tracing::debug!(worker_id, count = claimed.len(), "steps claimed");
        }
    }

    /// Gives back claims that will never reach a worker (a poll that ended before its hand-off arrived, a
    /// completion answered with an error): each step is ready again at once, its attempt not counted; `reason`
    /// goes into each `step_unclaimed` event.
    pub(crate) async fn give_back(&self, claimed: Vec<Claimed>, reason: &str) {
        if claimed.is_empty() {
            return;
        }
        let leases: Vec<Lease> = claimed.into_iter().map(|c| c.lease).collect();
        match self.undo_claims(&leases, "undelivered", reason).await {
            Ok(undone) => tracing::info!(undone, "claims that never reached a worker were given back"),
            Err(e) => tracing::warn!(error = %e, "claims that never reached a worker could not be given back; \
                their leases will expire"),
        }
    }

    /// Undoes the claims of attempts that never started (store `unclaim`), closes their spans with `outcome`,
    /// and wakes polls when a step became ready again. Returns how many were undone.
    async fn undo_claims(&self, leases: &[Lease], outcome: &str, reason: &str) -> StoreResult<usize> {
        let undone = self.inner.store.unclaim(leases, reason, self.now_ms()).await?;
        for lease in leases {
            self.inner.spans.closed(lease, outcome, None);
        }
        if undone > 0 {
            self.wake();
        }
        Ok(undone)
    }

    /// Like [`Engine::claim`], but waits up to `max_wait` (real time) for work. A claim that finds nothing
    /// leaves the poll waiting (registered by the group-commit writer before its next batch); steps released by
    /// reports are handed to the oldest waiting polls in the reports' own transaction; other changes
    /// (submissions, timers coming due, operator decisions) wake the polls to claim for themselves. Returns an
    /// empty list when nothing came.
    ///
    /// # Errors
    /// Store errors.
    pub async fn claim_wait(
        &self,
        worker_id: &str,
        actions: &[String],
        limit: u32,
        max_wait: Duration,
    ) -> StoreResult<Vec<Claimed>> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let notified = self.inner.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now_ms = self.now_ms();
            let request = ClaimRequest { worker_id: worker_id.to_owned(), actions: actions.to_vec(), limit, now_ms };
            // Parked by the writer itself when nothing was claimable, before it writes the next batch, so a
            // report in that batch can already hand its released steps to this poll.
            let wait_for_more = tokio::time::Instant::now() < deadline && !self.is_stopping();
            let (ticket, mut handoff) = match self.queue_claim(request, wait_for_more).await? {
                commit::ClaimAnswer::Claimed(claimed) => return Ok(claimed),
                commit::ClaimAnswer::Parked { ticket, handoff } => (ticket, handoff),
            };
            // Removes the waiter if this poll is dropped while it waits (the worker went away).
            let registration = Registration { waiters: &self.inner.waiters, ticket };
            let until_due = match self.inner.store.next_due().await? {
                Some(due) => Duration::from_millis(u64::try_from(due - self.now_ms()).unwrap_or(0)),
                None => self.inner.config.idle_recheck,
            };
            let now = tokio::time::Instant::now();
            let wait = until_due.min(self.inner.config.idle_recheck).min(deadline.saturating_duration_since(now));
            let handed = tokio::select! {
                // `Err`: the batch that took this waiter failed; claim again.
                handed = &mut handoff => handed.unwrap_or_default(),
                () = &mut notified => registration.woken(handoff).await,
                () = self.inner.stopping.cancelled() => registration.woken(handoff).await,
                () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => registration.woken(handoff).await,
            };
            if !handed.is_empty() {
                return Ok(handed);
            }
        }
    }

    /// Accepts a result under `lease` (group-committed with other reports). Stale reports (replayed, late,
    /// foreign) change nothing.
    ///
    /// # Errors
    /// Store errors (retryable: resend the report).
    pub async fn complete(&self, lease: &Lease, output: &Value) -> StoreResult<Report> {
        self.queue_report(ReportItem { lease: lease.clone(), kind: ReportKind::Complete(output.clone()) }).await
    }

    /// Completions, each with [`Engine::claim`] for its worker's next steps in the same batch (or
    /// [`Engine::complete`] alone where `limit` is 0), queued as one operation so that they share one batch of the
    /// writer (one `Complete`, or a worker's `CompleteBatch`): each claim sees what the completions released (the
    /// dependents they made ready can be leased to the worker in the same transaction). Returns each pair of
    /// outcomes in the order given, the completion's first (`Ok` and no steps for a claim not asked for).
    ///
    /// # Errors
    /// Store errors (retryable), for each part of each pair.
    pub async fn complete_and_claim_all(
        &self,
        completions: &[CompletionAndClaim<'_>],
    ) -> Vec<(StoreResult<Report>, StoreResult<Vec<Claimed>>)> {
        let now_ms = self.now_ms();
        let pairs = completions
            .iter()
            .map(|c| {
                let item = ReportItem { lease: c.lease.clone(), kind: ReportKind::Complete(c.output.clone()) };
                let request = (c.limit > 0).then(|| ClaimRequest {
                    worker_id: c.lease.worker_id.clone(),
                    actions: c.actions.to_vec(),
                    limit: c.limit,
                    now_ms,
                });
                (item, request)
            })
            .collect();
        let outcomes = self.queue_reports_and_claims(pairs).await;
        outcomes.into_iter().map(|(report, claim)| (report, claim.map(claimed_of))).collect()
    }

    /// Records a failed attempt under `lease`: retry with backoff, fail, or `outcome_unknown`.
    ///
    /// # Errors
    /// Store errors (retryable: resend the report).
    pub async fn fail(&self, lease: &Lease, failure: &Failure) -> StoreResult<Report> {
        let kind = ReportKind::Fail { failure: failure.clone(), sample: rand::random::<f64>() };
        self.queue_report(ReportItem { lease: lease.clone(), kind }).await
    }

    /// Undoes the claim of an attempt its worker returns without having started it: the step is ready again at
    /// once and the attempt does not count. [`Report::RetryScheduled`] when undone, [`Report::Stale`] when the
    /// lease had already ended (reaped, cancelled, or another worker's).
    ///
    /// # Errors
    /// Store errors (retryable: the worker resends).
    pub async fn return_unstarted(&self, lease: &Lease) -> StoreResult<Report> {
        let undone =
            self.undo_claims(std::slice::from_ref(lease), "returned", "returned unstarted by the worker").await?;
        if undone == 0 {
            return Ok(Report::Stale);
        }
        tracing::info!(run_id = %lease.run_id, step_id = %lease.step_id, attempt = lease.attempt,
            "an attempt returned unstarted was given back");
        Ok(Report::RetryScheduled)
    }

    /// The lock serialising this orchestrator's `event.wait` starts.
    pub(crate) fn event_wait_start(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.event_wait_start
    }

    /// Limits applied to reports (output size).
    pub(crate) fn report_limits(&self) -> ReportLimits {
        ReportLimits { max_output_bytes: self.inner.config.max_output_bytes }
    }

    /// Metrics and spans of a written report (wake-ups are decided per batch).
    fn after_report(&self, item: &ReportItem, report: Report) {
        let lease = &item.lease;
        tracing::debug!(run_id = %lease.run_id, step_id = %lease.step_id, attempt = lease.attempt, ?report, "report");
        let failure_code = match &item.kind {
            ReportKind::Fail { failure, .. } => Some(failure.code.as_str()),
            ReportKind::Complete(_) => None,
        };
        let now_ms = self.now_ms();
        self.inner.metrics.worker_seen(&lease.worker_id, now_ms);
        let outcome = report_name(report);
        if let Some(closed) = self.inner.spans.closed(lease, outcome, failure_code)
            && report != Report::Stale
        {
            self.inner.metrics.finished(&closed.action, outcome, now_ms - closed.claimed_at_ms);
        }
    }

    /// Extends `lease` and saves `checkpoint`. [`HeartbeatOutcome::Gone`] means: stop, the attempt no longer
    /// counts (cancelled, timed out, or reclaimed).
    ///
    /// # Errors
    /// Store errors.
    pub async fn heartbeat(&self, lease: &Lease, checkpoint: Option<&Value>) -> StoreResult<HeartbeatOutcome> {
        let now_ms = self.now_ms();
        let outcome = self.inner.store.heartbeat(lease, checkpoint, self.lease_ttl_ms(), now_ms).await?;
        self.inner.metrics.worker_seen(&lease.worker_id, now_ms);
        match outcome {
            HeartbeatOutcome::Extended { lease_expires_ms } => self.inner.spans.extended(lease, lease_expires_ms),
            HeartbeatOutcome::Gone => {
                self.inner.spans.closed(lease, "gone", None);
            }
        }
        Ok(outcome)
    }

    /// One reaper pass: fails attempts whose lease expired. Nothing is reaped during the start-up grace period
    /// (`startup_grace` after this engine started): a lease that expired while no orchestrator was running must
    /// not be failed before its worker has had time to reconnect and heartbeat or deliver a held result (case
    /// C14). A lease that expires within the grace is reaped when the grace ends, so right after a restart the
    /// liveness bound is `lease_ttl` + `startup_grace`.
    ///
    /// # Errors
    /// Store errors.
    pub async fn reap(&self) -> StoreResult<usize> {
        let (began_ms, began) = (self.now_ms(), tokio::time::Instant::now());
        let expired_by_ms = self.inner.reap_grace.lock().await.cutoff(began_ms, began);
        let request = ReapRequest {
            now_ms: began_ms,
            expired_by_ms,
            limit: self.inner.config.reap_batch,
            sample: rand::random::<f64>(),
        };
        let reaped = self.inner.store.reap(request).await?;
        self.inner.reap_grace.lock().await.heard(began_ms, began, self.now_ms(), tokio::time::Instant::now());
        self.inner.spans.expired(began_ms);
        if reaped > 0 {
            tracing::warn!(reaped, "expired leases reaped");
            self.wake();
        }
        Ok(reaped)
    }

    /// Cancels a run: every open step, including retries waiting in backoff and timers not yet due.
    ///
    /// # Errors
    /// Store errors.
    pub async fn cancel_run(&self, run_id: &str) -> StoreResult<bool> {
        let cancelled = self.inner.store.cancel_run(run_id, self.now_ms()).await?;
        if cancelled {
            tracing::info!(run_id, "run cancelled");
        }
        Ok(cancelled)
    }

    /// [`Engine::cancel_run`] by an operator, recording who and why in the run's history.
    ///
    /// # Errors
    /// Store errors.
    pub async fn cancel_run_by(&self, run_id: &str, by: &str, reason: Option<&str>) -> StoreResult<bool> {
        let cancelled = self.inner.store.cancel_run_by(run_id, by, reason, self.now_ms()).await?;
        if cancelled {
            tracing::info!(run_id, by, "run cancelled");
        }
        Ok(cancelled)
    }

    /// Applies an operator or approval decision to a step.
    ///
    /// # Errors
    /// Store errors.
    pub async fn operate(
        &self,
        run_id: &str,
        step_id: &str,
        action: OperatorAction,
        actor: &str,
        reason: Option<&str>,
    ) -> StoreResult<bool> {
        let done = self.inner.store.operate(run_id, step_id, action, actor, reason, self.now_ms()).await?;
        if done {
            self.wake();
        }
        Ok(done)
    }
}

/// A registered waiter of a poll in progress; dropping it (the poll was cancelled) removes the waiter.
struct Registration<'a> {
    waiters: &'a waiters::Waiters,
    ticket: u64,
}

impl Registration<'_> {
    /// The poll was woken or timed out: stops waiting for a hand-off, unless a batch already took this waiter,
    /// whose claims are then on the way and must be received (not dropped, which would give them back).
    async fn woken(&self, handoff: tokio::sync::oneshot::Receiver<Vec<Claimed>>) -> Vec<Claimed> {
        if self.waiters.remove(self.ticket) { Vec::new() } else { handoff.await.unwrap_or_default() }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiters.remove(self.ticket);
    }
}

/// How a report ended an attempt, as a span field and metric label.
fn report_name(report: Report) -> &'static str {
    match report {
        Report::Succeeded => "succeeded",
        Report::RetryScheduled => "retry_scheduled",
        Report::Failed => "failed",
        Report::OutcomeUnknown => "outcome_unknown",
        Report::Stale => "stale",
    }
}

/// A time-ordered run id (UUID v7 from the engine clock).
fn new_run_id(now: jiff::Timestamp) -> String {
    let secs = u64::try_from(now.as_second()).unwrap_or(0);
    let nanos = u32::try_from(now.subsec_nanosecond()).unwrap_or(0);
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, nanos)).to_string()
}
