//! The worker runtime: serves a set of actions to an orchestrator over the worker protocol, built on apalis.
//!
//! [`run`] registers the actions (`Register`), then runs one apalis `Worker` under an apalis `Monitor` until the
//! shutdown future resolves. The worker's backend is an apalis custom backend (`BackendBuilder`) whose fetcher
//! long-polls `Poll` for as many attempts as there are free slots (`fetch`). Each attempt then goes through
//! these tower layers, outermost first:
//!
//! | layer | from | does |
//! |---|---|---|
//! | concurrency limit | apalis (`concurrency`) | at most `concurrency` attempts at once; no fetching while full |
//! | slot release | ours (`fetch`) | gives the attempt's slot back to the fetcher once the attempt is over |
//! | tracing | apalis `TraceLayer` | a span per attempt: `cairn.run_id`, `cairn.step_id`, `cairn.attempt`, `cairn.action`, `cairn.failure_code` |
//! | report | apalis acknowledgement (`report`) | `Complete` (through `completions`, batched under load) / `Fail`, retried with backoff while the orchestrator is away |
//! | panic capture | apalis `CatchPanicLayer` | a panic becomes an `action_error` failure record |
//! | deadline | ours (`deadline`) | past `remaining_ms`: cancels the action's context, drops its future, fails with `timeout` |
//! | handler | ours (`handler`) | runs the action next to its heartbeat loop; stops it when the lease is gone |
//!
//! Shutdown (the future given to [`run`], e.g. SIGTERM or ctrl-c): polling stops at once (the in-flight long
//! poll is abandoned); attempts in flight may finish and report for up to `drain_timeout`; any still running
//! then are dropped (their contexts cancelled) and left to lease expiry. Since the fetcher only asks for free
//! slots, no attempt waits unstarted in the worker; the rare one that arrives as shutdown begins is returned to
//! the orchestrator as not started (`fetch`), which undoes its claim.
//!
//! Module map:
//! - `client`: the protocol client (token, worker id, call deadlines) and which errors are transient.
//! - `completions`: one queue per process for every `Complete`; what queues while 16 calls are out goes
//!   together as a `CompleteBatch`.
//! - `fetch`: the backend's fetcher (slots, long poll, backoff, re-registration, returning unstarted attempts).
//! - `job`: an attempt as an apalis task, with its [`crate::context::ActionContext`].
//! - `progress`: heartbeats and checkpoints over the protocol.
//! - `handler`, `deadline`, `report`, `outcome`: running, bounding, and reporting an attempt.

mod client;
mod completions;
mod deadline;
mod fetch;
mod handed;
mod handler;
mod job;
mod outcome;
mod progress;
mod report;

use std::any::Any;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use apalis::layers::catch_panic::CatchPanicLayer;
use apalis::layers::tracing::TraceLayer;
use apalis::prelude::{
    AcknowledgeLayer, BackendBuilder, BoxDynError, Monitor, Task, WorkerBuilder, WorkerBuilderExt, WorkerContext,
};
use backon::{ExponentialBuilder, Retryable};
use cairn_proto::v1 as pb;
use futures::sink::Drain;
use futures::stream::BoxStream;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Span;

use self::client::{OrchestratorClient, descriptor, transient};
use self::deadline::AttemptDeadlineLayer;
use self::fetch::{FatalError, FetchSource, SlotReleaseLayer};
use self::handler::AttemptHandler;
use self::job::AttemptJob;
use self::outcome::{AttemptError, panicked};
use self::report::Reporter;
use crate::action::DynAction;

pub use self::fetch::WORKER_SHUTDOWN;

/// How long [`run`] waits, after the worker stopped, for unstarted attempts to be returned.
const RETURN_WAIT: Duration = Duration::from_secs(10);

/// Why the runtime stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The configuration cannot work (no actions, zero concurrency, a bad address or token). Not retryable.
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// The orchestrator refused the worker: a wrong or missing token (`UNAUTHENTICATED`), or an action it
    /// rejects (`INVALID_ARGUMENT`). Not retryable without changing the configuration.
    #[error("the orchestrator refused the worker: {}: {}", .0.code(), .0.message())]
    Rejected(#[source] tonic::Status),
    /// apalis' monitor failed. Retryable by starting the worker again.
    #[error("the worker stopped unexpectedly: {0}")]
    Monitor(String),
}

/// How a worker runs. Build with [`WorkerConfig::new`] and adjust fields.
#[derive(Clone)]
pub struct WorkerConfig {
    /// The orchestrator's gRPC address, `http://HOST:PORT`.
    pub server: String,
    /// The shared worker token, sent as `authorization: Bearer <token>`. `Debug` prints `[REDACTED]`.
    pub token: Option<SecretString>,
    /// This worker's id, unique among the workers of one orchestrator (it is recorded on every attempt).
    pub worker_id: String,
    /// Most attempts run at once. Default 4.
    pub concurrency: usize,
    /// The actions served; names must be unique.
    pub actions: Vec<Arc<dyn DynAction>>,
    /// Longest one long poll waits for work (the orchestrator caps it at 30 s). Default 30 s.
    pub poll_wait: Duration,
    /// On shutdown, how long attempts in flight may still run and report. Default 30 s.
    pub drain_timeout: Duration,
    /// How long a finished attempt's report is retried while the orchestrator is unreachable. Default 10 min.
    pub report_give_up_after: Duration,
}

impl std::fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("server", &self.server)
            .field("token", &self.token)
            .field("worker_id", &self.worker_id)
            .field("concurrency", &self.concurrency)
            .field("actions", &self.actions.iter().map(|a| a.spec().name).collect::<Vec<_>>())
            .field("poll_wait", &self.poll_wait)
            .field("drain_timeout", &self.drain_timeout)
            .field("report_give_up_after", &self.report_give_up_after)
            .finish()
    }
}

impl WorkerConfig {
    /// Serves `actions` to the orchestrator at `server`, with no token, a default id
    /// ([`default_worker_id`]) and the defaults documented on each field.
    pub fn new(server: impl Into<String>, actions: Vec<Arc<dyn DynAction>>) -> Self {
        Self {
            server: server.into(),
            token: None,
            worker_id: default_worker_id(),
            concurrency: 4,
            actions,
            poll_wait: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            report_give_up_after: Duration::from_secs(600),
        }
    }

    fn validate(&self) -> Result<HashMap<String, Arc<dyn DynAction>>, RuntimeError> {
        if self.concurrency == 0 {
            return Err(RuntimeError::Config("concurrency must be at least 1".into()));
        }
        if self.worker_id.trim().is_empty() {
            return Err(RuntimeError::Config("the worker id is empty".into()));
        }
        if self.actions.is_empty() {
            return Err(RuntimeError::Config("the worker serves no actions".into()));
        }
        let mut actions = HashMap::new();
        for action in &self.actions {
            let name = action.spec().name;
            if actions.insert(name.clone(), action.clone()).is_some() {
                return Err(RuntimeError::Config(format!("action `{name}` is served twice")));
            }
        }
        Ok(actions)
    }
}

/// `<hostname>-<pid>`: distinct per process on a host, recognisable in failure records.
pub fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    format!("{host}-{}", std::process::id())
}

/// What the fetcher, the reporter and [`run`] share for one run of the worker.
#[derive(Debug)]
pub(crate) struct Session {
    client: OrchestratorClient,
    descriptors: Vec<pb::ActionDescriptor>,
    action_names: Vec<String>,
    /// The heartbeat interval the orchestrator asked for.
    heartbeat_every: Duration,
    poll_wait: Duration,
    /// Cancelled when shutdown begins: abandons the in-flight poll.
    stopping: CancellationToken,
    /// Tasks returning unstarted attempts, awaited (bounded) before [`run`] returns.
    returns: TaskTracker,
    fatal: FatalError,
    /// Attempts claimed with a completion, waiting for the fetcher.
    handed: handed::Handed,
}

/// Registers `config.actions` with the orchestrator and runs attempts until `shutdown` resolves (then drains, see
/// the module docs) or the orchestrator refuses the worker. While the orchestrator is unreachable, registration
/// and polling retry with backoff, and finished attempts keep their results until they can be reported.
///
/// # Errors
/// [`RuntimeError::Config`] for an unusable configuration; [`RuntimeError::Rejected`] when the orchestrator
/// refuses the token or the actions (at start or later); [`RuntimeError::Monitor`] if apalis fails.
pub async fn run(
    config: WorkerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RuntimeError> {
    let actions = Arc::new(config.validate()?);
    let client = OrchestratorClient::new(
        &config.server,
        config.token.as_ref().map(ExposeSecret::expose_secret),
        &config.worker_id,
    )?;
    let descriptors: Vec<pb::ActionDescriptor> = config.actions.iter().map(|a| descriptor(a.spec())).collect();
    let mut shutdown = Box::pin(shutdown);
    let registered = tokio::select! {
        registered = register(&client, &descriptors) => registered?,
        () = &mut shutdown => return Ok(()),
    };
    let heartbeat_every = match registered.heartbeat_interval_ms {
        0 => Duration::from_secs(1),
        ms => Duration::from_millis(ms),
    };
    tracing::info!(worker_id = %config.worker_id, server = %config.server, concurrency = config.concurrency,
        actions = ?actions.keys().collect::<Vec<_>>(), heartbeat_ms = heartbeat_every.as_millis(), "worker registered");

    let session = Arc::new(Session {
        client: client.clone(),
        action_names: actions.keys().cloned().collect(),
        descriptors,
        heartbeat_every,
        poll_wait: config.poll_wait,
        stopping: CancellationToken::new(),
        returns: TaskTracker::new(),
        fatal: FatalError::default(),
        handed: handed::Handed::default(),
    });
    let source = FetchSource { session: session.clone(), slots: Arc::new(Semaphore::new(config.concurrency)) };
    let reporter = Reporter::new(session.clone(), config.report_give_up_after, heartbeat_every);
    let (worker_id, concurrency, drain_timeout) = (config.worker_id.clone(), config.concurrency, config.drain_timeout);

    let monitor = Monitor::new()
        .register(move |_restarts| {
            let backend = BackendBuilder::<AttemptJob, FetchSource, AttemptStream, Drain<Task<AttemptJob>>>::new()
                .database(source.clone())
                .fetcher(|source: &mut FetchSource, _: &(), worker: &WorkerContext| {
                    fetch::attempts(source.clone(), worker.clone())
                })
                .sink(|_, _| futures::sink::drain())
                .build()
                .expect("database, fetcher, sink and config are all set");
            WorkerBuilder::new(worker_id.clone())
                .backend(backend)
                .concurrency(concurrency)
                .layer(SlotReleaseLayer)
                .layer(
                    TraceLayer::new()
                        .make_span_with(attempt_span as fn(&Task<AttemptJob>) -> Span)
                        .on_request(attempt_started as fn(&Task<AttemptJob>, &Span))
                        .on_response(attempt_succeeded as fn(&Value, Duration, &Span))
                        .on_failure(attempt_failed as fn(&BoxDynError, Duration, &Span)),
                )
                .layer(AcknowledgeLayer::new(reporter.clone()))
                .layer(CatchPanicLayer::with_panic_handler(panicked as fn(&Box<dyn Any + Send>) -> AttemptError))
                .layer(AttemptDeadlineLayer)
                .build(AttemptHandler::new(actions.clone()))
        })
        // Polled only once shutdown has begun, so the drain timer starts then.
        .with_terminator(async move {
            tokio::time::sleep(drain_timeout).await;
            tracing::warn!(
                drain_ms = drain_timeout.as_millis(),
                "drain timeout passed: cancelling attempts still running; their leases will expire"
            );
        });

    let stopping = session.stopping.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: no new attempts; draining the ones in flight");
        stopping.cancel();
        Ok::<(), std::io::Error>(())
    };
    let outcome = monitor.run_with_signal(signal).await;

    session.stopping.cancel();
    // Attempts handed over with a completion after the fetcher stopped: returned like any unstarted attempt.
    fetch::give_back(&session, session.handed.drain());
    session.returns.close();
    if tokio::time::timeout(RETURN_WAIT, session.returns.wait()).await.is_err() {
        tracing::warn!("gave up returning unstarted attempts; their leases will expire");
    }
    if let Some(fatal) = session.fatal.take() {
        return Err(fatal);
    }
    outcome.map_err(|e| RuntimeError::Monitor(e.to_string()))?;
    tracing::info!("worker stopped");
    Ok(())
}

/// The fetcher stream's type (named for the backend builder).
type AttemptStream = BoxStream<'static, Result<Option<Task<AttemptJob>>, Infallible>>;

/// Registers, retrying transient errors with backoff for as long as it takes (the orchestrator may be
/// starting); the caller races this against shutdown.
async fn register(
    client: &OrchestratorClient,
    descriptors: &[pb::ActionDescriptor],
) -> Result<pb::RegisterResponse, RuntimeError> {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times();
    (|| client.register(descriptors))
        .retry(backoff)
        .when(transient)
        .notify(|status, wait| {
            tracing::warn!(worker_id = client.worker_id(), code = ?status.code(), message = status.message(),
                retry_in_ms = wait.as_millis(), "cannot register with the orchestrator yet; retrying");
        })
        .await
        .map_err(RuntimeError::Rejected)
}

fn attempt_span(task: &Task<AttemptJob>) -> Span {
    let job = &task.args;
    let span = tracing::info_span!(
        "attempt",
        cairn.run_id = %job.lease.run_id,
        cairn.step_id = %job.lease.step_id,
        cairn.attempt = job.lease.attempt,
        cairn.action = %job.action,
        cairn.failure_code = tracing::field::Empty,
        traceparent = %job.traceparent,
    );
    // A child of the orchestrator's attempt span, so the attempt joins its run's trace.
    cairn_telemetry::set_remote_parent(&span, &job.traceparent);
    span
}

fn attempt_started(_task: &Task<AttemptJob>, span: &Span) {
    tracing::debug!(parent: span, "attempt started");
}

fn attempt_succeeded(_output: &Value, took: Duration, span: &Span) {
    tracing::info!(parent: span, took_ms = took.as_millis(), "attempt succeeded");
}

fn attempt_failed(error: &BoxDynError, took: Duration, span: &Span) {
    tracing::warn!(parent: span, took_ms = took.as_millis(), error = %error, "attempt failed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_token_never_appears_in_debug_output() {
        let mut config = WorkerConfig::new("http://127.0.0.1:7401", Vec::new());
        config.token = Some("worker-token-2b7f".into());

        let printed = format!("{config:?}");

        assert!(!printed.contains("worker-token-2b7f"), "the token is redacted: {printed}");
        assert!(printed.contains("http://127.0.0.1:7401"), "the server shows: {printed}");
    }
}
