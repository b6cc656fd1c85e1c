//! Heartbeats and checkpoints of one attempt, over the worker protocol: the [`ProgressSink`] behind every
//! [`crate::context::ActionContext`] the runtime builds.
//!
//! Heartbeats of one attempt are sent one at a time (a lock is held across the call), so two checkpoints can
//! never reach the orchestrator out of order. A checkpoint whose heartbeat failed stays pending and rides on the
//! next heartbeat, so the periodic heartbeat always carries the latest unsaved checkpoint.
//!
//! A delivery report (one channel's outcome for the step's ledger) is resent while the orchestrator is
//! unreachable, until the attempt's deadline: a delivered channel the ledger does not know could be sent again by
//! a later attempt. Resending is safe, the ledger counts an attempt's tries once.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use cairn_core::delivery::DeliveryReport;
use cairn_proto::v1 as pb;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::client::{OrchestratorClient, transient};
use crate::context::ProgressSink;

/// Progress reporting for one leased attempt.
#[derive(Debug)]
pub(crate) struct LeaseProgress {
    client: OrchestratorClient,
    lease: pb::Lease,
    /// The latest checkpoint not yet acknowledged by the orchestrator.
    unsent: Mutex<Option<Value>>,
    /// Cancelled when the orchestrator answers `alive = false`: the lease is gone (run cancelled, attempt
    /// timed out or reclaimed), so the attempt must stop and report nothing.
    gone: CancellationToken,
    /// When the attempt must be finished: delivery reports are not resent past it.
    deadline: tokio::time::Instant,
}

impl LeaseProgress {
    pub(crate) fn new(client: OrchestratorClient, lease: pb::Lease, deadline: tokio::time::Instant) -> Self {
        Self { client, lease, unsent: Mutex::new(None), gone: CancellationToken::new(), deadline }
    }

    /// Resolves once the orchestrator said the lease is gone.
    pub(crate) fn gone(&self) -> WaitForCancellationFuture<'_> {
        self.gone.cancelled()
    }
}

impl ProgressSink for LeaseProgress {
    /// Returns false only when the orchestrator answered `alive = false`. A failed call returns true: the
    /// orchestrator may be restarting, and if the lease really expires a later heartbeat learns it.
    fn heartbeat(&self, checkpoint: Option<Value>) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let mut unsent = self.unsent.lock().await;
            if checkpoint.is_some() {
                *unsent = checkpoint;
            }
            if self.gone.is_cancelled() {
                return false;
            }
            match self.client.heartbeat(&self.lease, unsent.as_ref().map(Value::to_string)).await {
                Ok(alive) => {
                    *unsent = None;
                    if !alive {
                        tracing::info!("the orchestrator no longer counts this attempt; stopping it");
                        self.gone.cancel();
                    }
                    alive
                }
                Err(status) => {
                    tracing::warn!(code = ?status.code(), message = status.message(), "heartbeat failed");
                    true
                }
            }
        })
    }

    /// Returns false when the orchestrator refused the report, stayed unreachable until the deadline, or
    /// answered that the attempt no longer counts.
    fn delivery(&self, report: DeliveryReport) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.report_delivery(&report).await })
    }
}

impl LeaseProgress {
    async fn report_delivery(&self, report: &DeliveryReport) -> bool {
        if self.gone.is_cancelled() {
            return false;
        }
        let budget = self.deadline.saturating_duration_since(tokio::time::Instant::now());
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(2))
            .with_jitter()
            .without_max_times()
            .with_total_delay(Some(budget));
        let sent = (|| self.client.report_delivery(&self.lease, report)).retry(backoff).when(transient).await;
        match sent {
            Ok(true) => true,
            Ok(false) => {
                tracing::info!("the orchestrator no longer counts this attempt; stopping it");
                self.gone.cancel();
                false
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = status.message(), channel = %report.channel,
                    "the delivery could not be recorded; stopping the attempt");
                false
            }
        }
    }
}

/// How often to heartbeat an attempt: the orchestrator's interval, but at least three times per
/// `heartbeat_timeout_ms` when the step sets a shorter one.
pub(crate) fn heartbeat_every(registered: Duration, heartbeat_timeout_ms: Option<u64>) -> Duration {
    let from_step = heartbeat_timeout_ms.map_or(Duration::MAX, |ms| Duration::from_millis(ms / 3));
    registered.min(from_step).max(Duration::from_millis(50))
}
