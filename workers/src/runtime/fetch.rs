//! The apalis backend's fetcher: long-polls the orchestrator for attempts, only ever for free slots.
//!
//! A slot is a permit of one semaphore sized to the worker's concurrency. The fetcher waits for a free slot,
//! takes every other free one, and asks `Poll` for exactly that many attempts (`max_attempts`); each attempt
//! received carries its slot until its report is done ([`SlotReleaseLayer`]), unused slots are given back at
//! once. So every attempt fetched can start immediately: none waits in a local queue while its lease runs.
//!
//! Errors never reach apalis (a backend error would stop the worker): most are logged and the next poll waits
//! with exponential backoff (so a dead orchestrator is not hammered) and registers again first (a restarted
//! orchestrator has forgotten the registered actions); a refusal (`UNAUTHENTICATED`, `PERMISSION_DENIED`,
//! `UNIMPLEMENTED`) is recorded and stops the worker, and [`super::run`] returns it.
//!
//! On shutdown the in-flight poll is abandoned at once (the orchestrator then claims nothing for it: the
//! request is reset). Attempts that still arrived and cannot start — a poll answered in the same instant, or
//! attempts received but not yet handed to apalis — are returned with `FailRequest.not_started`: the
//! orchestrator undoes the claim (ready at once, the attempt not counted) instead of waiting for the lease to
//! expire. So are surplus or late attempts handed over with a completion's answer.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use apalis::prelude::{Task, WorkerContext};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use cairn_proto::v1 as pb;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::{Layer, Service};

use super::client::OrchestratorClient;
use super::job::{AttemptJob, take_slot};
use super::{RuntimeError, Session};

/// The failure code carried by an attempt returned unstarted (at shutdown, or a surplus or late hand-off); only
/// an orchestrator that predates `FailRequest.not_started` records it.
pub const WORKER_SHUTDOWN: &str = "worker_shutdown";

/// What the backend is built over: the session and the slots.
#[derive(Debug, Clone)]
pub(crate) struct FetchSource {
    pub(crate) session: Arc<Session>,
    pub(crate) slots: Arc<Semaphore>,
}

/// The fetcher stream apalis' custom backend polls. It never ends and never fails (see the module docs).
pub(crate) fn attempts(
    source: FetchSource,
    worker: WorkerContext,
) -> BoxStream<'static, Result<Option<Task<AttemptJob>>, Infallible>> {
    let fetcher = Fetcher {
        session: source.session,
        slots: source.slots,
        worker,
        buffer: VecDeque::new(),
        in_flight: None,
        backoff: poll_backoff(),
        register_first: false,
    };
    Box::pin(futures::stream::unfold(fetcher, |mut fetcher| async move {
        let task = fetcher.next().await;
        Some((Ok(Some(task)), fetcher))
    }))
}

/// A poll running in its own task, so it can be abandoned even while apalis is not polling the stream.
struct InFlightPoll {
    handle: JoinHandle<Option<Result<Vec<pb::Attempt>, tonic::Status>>>,
    abandon: CancellationToken,
    slots: Vec<OwnedSemaphorePermit>,
}

struct Fetcher {
    session: Arc<Session>,
    slots: Arc<Semaphore>,
    worker: WorkerContext,
    /// Attempts received, each with its slot, not yet handed to apalis.
    buffer: VecDeque<(pb::Attempt, OwnedSemaphorePermit)>,
    in_flight: Option<InFlightPoll>,
    backoff: ExponentialBackoff,
    /// Set after a failed call: the orchestrator may have restarted and forgotten our actions.
    register_first: bool,
}

impl Fetcher {
    async fn next(&mut self) -> Task<AttemptJob> {
        loop {
            if let Some(handed) = self.session.handed.pop() {
                self.buffer.push_back(handed);
            }
            if let Some((attempt, slot)) = self.buffer.pop_front() {
                let session = &self.session;
                match AttemptJob::task(attempt, slot, &session.client, session.heartbeat_every) {
                    Some(task) => return task,
                    None => continue,
                }
            }
            match self.fetch().await {
                Ok(()) => self.backoff = poll_backoff(),
                Err(status) if !refused(&status) => {
                    let wait = self.backoff.next().unwrap_or(std::time::Duration::from_secs(5));
                    tracing::warn!(code = ?status.code(), message = status.message(), retry_in_ms = wait.as_millis(),
                        "polling the orchestrator failed; retrying");
                    self.register_first = true;
                    // An attempt handed over with a completion meanwhile has a running lease: take it now.
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.session.handed.arrived() => {}
                    }
                }
                Err(status) => {
                    tracing::error!(code = ?status.code(), message = status.message(),
                        "the orchestrator refused the worker; stopping");
                    self.session.fatal.set(RuntimeError::Rejected(status));
                    let _ = self.worker.stop();
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Fills the buffer with attempts for the free slots (possibly none, after an empty long poll).
    async fn fetch(&mut self) -> Result<(), tonic::Status> {
        if self.register_first {
            self.session.client.register(&self.session.descriptors).await?;
            self.register_first = false;
            tracing::info!("registered again with the orchestrator");
        }
        // An attempt handed over with a completion's answer wins over starting or finishing a poll: it already
        // has its slot. Returning lets `next` take it from the queue.
        let in_flight = match &mut self.in_flight {
            Some(poll) => poll,
            None => tokio::select! {
                () = self.session.handed.arrived() => return Ok(()),
                poll = start_poll(&self.session, &self.slots) => self.in_flight.insert(poll),
            },
        };
        let outcome = tokio::select! {
            () = self.session.handed.arrived() => return Ok(()),
            outcome = &mut in_flight.handle => outcome,
        };
        let Some(InFlightPoll { slots, .. }) = self.in_flight.take() else { return Ok(()) };
        match outcome {
            Ok(Some(Ok(attempts))) => {
                let mut attempts = attempts.into_iter();
                // Slots first: a slot left without an attempt is released; an attempt is never left without one.
                self.buffer.extend(slots.into_iter().zip(attempts.by_ref()).map(|(slot, attempt)| (attempt, slot)));
                return_surplus(&self.session, attempts.collect());
                Ok(())
            }
            Ok(Some(Err(status))) => Err(status),
            // Abandoned: the worker is stopping and this stream will not be polled for long.
            Ok(None) => std::future::pending().await,
            Err(join) => Err(tonic::Status::unknown(format!("the poll task failed: {join}"))),
        }
    }
}

/// Waits for a free slot, takes all free slots, and starts a poll for that many attempts.
async fn start_poll(session: &Arc<Session>, free: &Arc<Semaphore>) -> InFlightPoll {
    let mut slots = Vec::new();
    // The semaphore is never closed, so acquiring only waits.
    if let Ok(first) = free.clone().acquire_owned().await {
        slots.push(first);
    }
    while let Ok(more) = free.clone().try_acquire_owned() {
        slots.push(more);
    }
    let abandon = session.stopping.child_token();
    let max = u32::try_from(slots.len()).unwrap_or(u32::MAX);
    tracing::trace!(slots = max, "polling for attempts");
    let (session, stop) = (session.clone(), abandon.clone());
    let handle = tokio::spawn(async move {
        tokio::select! {
            // A poll that was answered wins over a stop in the same instant: its attempts get returned.
            biased;
            polled = session.client.poll(&session.action_names, max, session.poll_wait) => Some(polled),
            () = stop.cancelled() => None,
        }
    });
    InFlightPoll { handle, abandon, slots }
}

impl Drop for Fetcher {
    /// Abandons the in-flight poll and returns every attempt received but not started.
    fn drop(&mut self) {
        let mut unstarted: Vec<pb::Attempt> = self.buffer.drain(..).map(|(attempt, _slot)| attempt).collect();
        unstarted.extend(self.session.handed.drain());
        let in_flight = self.in_flight.take();
        if let Some(poll) = &in_flight {
            poll.abandon.cancel();
        }
        if unstarted.is_empty() && in_flight.is_none() {
            return;
        }
        let client = self.session.client.clone();
        spawn_tracked(&self.session.returns, async move {
            let mut attempts = unstarted;
            if let Some(poll) = in_flight
                && let Ok(Some(Ok(late))) = poll.handle.await
            {
                attempts.extend(late);
            }
            for attempt in attempts {
                return_unstarted(&client, attempt).await;
            }
        });
    }
}

/// Returns attempts the orchestrator sent beyond what was asked (see [`give_back`]).
pub(crate) fn return_surplus(session: &Session, surplus: Vec<pb::Attempt>) {
    if !surplus.is_empty() {
        tracing::warn!(count = surplus.len(), "the orchestrator sent more attempts than asked; returning them");
        give_back(session, surplus);
    }
}

/// Returns `attempts` unstarted ([`return_unstarted`]) in tasks `run` waits for before it ends.
pub(crate) fn give_back(session: &Session, attempts: Vec<pb::Attempt>) {
    if attempts.is_empty() {
        return;
    }
    let client = session.client.clone();
    spawn_tracked(&session.returns, async move {
        for attempt in attempts {
            return_unstarted(&client, attempt).await;
        }
    });
}

fn spawn_tracked(tracker: &TaskTracker, task: impl std::future::Future<Output = ()> + Send + 'static) {
    // Dropped outside a runtime (a process exiting) there is nobody to report to; the leases expire instead.
    if tokio::runtime::Handle::try_current().is_ok() {
        tracker.spawn(task);
    }
}

/// Returns an attempt that never started (`not_started`): the orchestrator undoes the claim, so the step is ready
/// again at once and the attempt does not count. An orchestrator that predates the field records the failure
/// carried along instead: retryable and `did_not_take_effect`, so it is retried under the step's policy rather
/// than waiting for lease expiry (or going to `outcome_unknown` when the step is not idempotent).
pub(crate) async fn return_unstarted(client: &OrchestratorClient, attempt: pb::Attempt) {
    let Some(lease) = attempt.lease else { return };
    let failure = pb::Failure {
        code: WORKER_SHUTDOWN.into(),
        message: "the worker returned the attempt without starting it".into(),
        retryable: true,
        did_not_take_effect: true,
        ..pb::Failure::default()
    };
    match client.return_unstarted(&lease, failure).await {
        Ok(outcome) => tracing::info!(run_id = %lease.run_id, step_id = %lease.step_id, ?outcome,
            "returned an attempt that had not started"),
        Err(status) => tracing::warn!(run_id = %lease.run_id, step_id = %lease.step_id, code = ?status.code(),
            "could not return an unstarted attempt; its lease will expire"),
    }
}

/// Whether a failed poll means this worker is not welcome (wrong token, not a Cairn orchestrator): stop. Any
/// other error — transient, or a server-side fault such as `INTERNAL` — is waited out with backoff, since the
/// worker can do nothing about it and the orchestrator may recover.
fn refused(status: &tonic::Status) -> bool {
    matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied | tonic::Code::Unimplemented)
}

fn poll_backoff() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(100))
        .with_max_delay(std::time::Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Releases an attempt's slot when the attempt is over, report included (or dropped). Sits just inside apalis'
/// concurrency limit, so the fetcher's count of free slots and the limit agree.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SlotReleaseLayer;

impl<S> Layer<S> for SlotReleaseLayer {
    type Service = SlotRelease<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SlotRelease { inner }
    }
}

/// See [`SlotReleaseLayer`].
#[derive(Debug, Clone)]
pub(crate) struct SlotRelease<S> {
    inner: S,
}

impl<S> Service<Task<AttemptJob>> for SlotRelease<S>
where
    S: Service<Task<AttemptJob>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, task: Task<AttemptJob>) -> Self::Future {
        let slot = task.args.slot.clone();
        let attempt = self.inner.call(task);
        Box::pin(async move {
            let outcome = attempt.await;
            // Still here unless the report passed it on to an attempt claimed with the completion.
            drop(take_slot(&slot));
            outcome
        })
    }
}

/// A fatal error slot shared by the fetcher and [`super::run`].
#[derive(Debug, Default)]
pub(crate) struct FatalError(Mutex<Option<RuntimeError>>);

impl FatalError {
    pub(crate) fn set(&self, error: RuntimeError) {
        let mut slot = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.get_or_insert(error);
    }

    pub(crate) fn take(&self) -> Option<RuntimeError> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}
