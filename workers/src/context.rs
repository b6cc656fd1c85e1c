//! The context an action runs in: who it is, until when, and how to report progress.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::delivery::{DeliveryRecord, DeliveryReport};
use cairn_core::recipient::Recipient;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where heartbeats and checkpoints go (the runtime implements it over the worker protocol; tests record).
pub trait ProgressSink: Send + Sync {
    /// Sends a heartbeat, optionally saving a checkpoint. Returns false when the attempt no longer counts
    /// (cancelled, timed out, reclaimed): the action should stop.
    fn heartbeat(&self, checkpoint: Option<Value>) -> futures::future::BoxFuture<'_, bool>;

    /// Records one channel's outcome in the orchestrator's delivery ledger, resending while the orchestrator is
    /// unreachable until the attempt's deadline. Returns false when it could not be recorded or the attempt no
    /// longer counts. The default records nothing (actions run outside a worker).
    fn delivery(&self, _report: DeliveryReport) -> futures::future::BoxFuture<'_, bool> {
        Box::pin(async { true })
    }
}

/// What the orchestrator handed an attempt of a step that delivers messages: the recipients its args name and
/// the step's delivery ledger.
#[derive(Debug, Clone, Default)]
pub struct Deliveries {
    /// Every recipient id the resolved args name; `None` for an id the orchestrator does not know.
    pub recipients: BTreeMap<String, Option<Recipient>>,
    /// The step's ledger records, from earlier attempts.
    pub ledger: Vec<DeliveryRecord>,
}

/// A sink that accepts everything (for running actions outside a worker, e.g. in tests).
#[derive(Debug, Default)]
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn heartbeat(&self, _checkpoint: Option<Value>) -> futures::future::BoxFuture<'_, bool> {
        Box::pin(async { true })
    }
}

/// Everything an action knows about its attempt.
#[derive(Clone)]
pub struct ActionContext {
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// Attempt number, 1-based.
    pub attempt: u32,
    /// `<run_id>/<step_id>`: stable across attempts; send it as `Idempotency-Key` or use it to deduplicate.
    pub idempotency_key: String,
    /// When the attempt must be finished (start + `timeout_ms`).
    pub deadline: Instant,
    cancel: CancellationToken,
    checkpoint: Arc<Mutex<Option<Value>>>,
    sink: Arc<dyn ProgressSink>,
    deliveries: Arc<Deliveries>,
}

impl std::fmt::Debug for ActionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionContext")
            .field("run_id", &self.run_id)
            .field("step_id", &self.step_id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl ActionContext {
    /// A context for one attempt.
    pub fn new(
        run_id: impl Into<String>,
        step_id: impl Into<String>,
        attempt: u32,
        timeout: Duration,
        last_checkpoint: Option<Value>,
        sink: Arc<dyn ProgressSink>,
    ) -> Self {
        let (run_id, step_id) = (run_id.into(), step_id.into());
        Self {
            idempotency_key: format!("{run_id}/{step_id}"),
            run_id,
            step_id,
            attempt,
            deadline: Instant::now() + timeout,
            cancel: CancellationToken::new(),
            checkpoint: Arc::new(Mutex::new(last_checkpoint)),
            sink,
            deliveries: Arc::default(),
        }
    }

    /// This context with the recipients and the delivery ledger the orchestrator handed the attempt.
    #[must_use]
    pub fn with_deliveries(mut self, deliveries: Deliveries) -> Self {
        self.deliveries = Arc::new(deliveries);
        self
    }

    /// The recipients the attempt's args name and the step's delivery ledger.
    pub fn deliveries(&self) -> &Deliveries {
        &self.deliveries
    }

    /// Records one channel's outcome in the delivery ledger (see [`ProgressSink::delivery`]). Returns false
    /// when it was not recorded: the action should stop rather than send more it cannot record.
    pub async fn report_delivery(&self, report: DeliveryReport) -> bool {
        self.sink.delivery(report).await
    }

    /// A context for running an action directly (tests, `cairn dev`), with no progress reporting.
    pub fn standalone(step_id: &str, timeout: Duration) -> Self {
        Self::new("local", step_id, 1, timeout, None, Arc::new(NoProgress))
    }

    /// The cancellation token: cancelled on timeout, run cancellation, or worker shutdown.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Resolves when the attempt is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// Time left until the deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The last saved checkpoint (from this attempt or an earlier one).
    pub fn last_checkpoint(&self) -> Option<Value> {
        self.checkpoint.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Tells the orchestrator the action is alive. Returns false when it should stop; the context is then
    /// cancelled too.
    pub async fn heartbeat(&self) -> bool {
        self.report(None).await
    }

    /// Saves progress; the next attempt receives it as its last checkpoint.
    pub async fn checkpoint(&self, value: Value) -> bool {
        *self.checkpoint.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(value.clone());
        self.report(Some(value)).await
    }

    async fn report(&self, checkpoint: Option<Value>) -> bool {
        let alive = self.sink.heartbeat(checkpoint).await;
        if !alive {
            self.cancel.cancel();
        }
        alive
    }
}
