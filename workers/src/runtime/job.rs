//! One leased attempt as an apalis task: what to run, until when, and where its progress goes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use apalis::prelude::{Task, TaskBuilder};
use cairn_core::delivery::{DeliveryRecord, DeliveryStatus};
use cairn_core::recipient::Recipient;
use cairn_proto::v1 as pb;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use super::client::OrchestratorClient;
use super::progress::{LeaseProgress, heartbeat_every};
use crate::context::{ActionContext, Deliveries};

/// An attempt handed to apalis. Built when the attempt arrives, so its deadline is measured on this worker's
/// clock from the moment it was received (`remaining_ms`), whatever the skew with the orchestrator.
#[derive(Debug)]
pub(crate) struct AttemptJob {
    /// The fencing token of every report and heartbeat.
    pub(crate) lease: pb::Lease,
    /// Action name.
    pub(crate) action: String,
    /// Resolved args as received (parsed by the handler, so a malformed payload becomes a failure record).
    pub(crate) args_json: String,
    /// W3C trace context of the attempt.
    pub(crate) traceparent: String,
    /// The step's start-to-close limit, for the failure message when it passes.
    pub(crate) timeout_ms: u64,
    /// The action's context: deadline, cancellation, last checkpoint, progress.
    pub(crate) ctx: ActionContext,
    /// The same progress sink as `ctx`'s, kept to learn when the lease is gone.
    pub(crate) progress: Arc<LeaseProgress>,
    /// How often the runtime heartbeats while the action runs.
    pub(crate) heartbeat_every: Duration,
    /// The worker slot this attempt occupies, released when the attempt (report included) is over, unless the
    /// report passed it on to an attempt claimed with the completion (see `super::handed`).
    pub(crate) slot: SlotCell,
}

/// An attempt's slot, shared by the slot-release layer and the reporter.
pub(crate) type SlotCell = Arc<Mutex<Option<OwnedSemaphorePermit>>>;

/// Takes the slot out of `cell` (`None` once taken).
pub(crate) fn take_slot(cell: &SlotCell) -> Option<OwnedSemaphorePermit> {
    cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
}

/// Task data the report layer reads: which lease to report under, and the slot a completion may pass on.
#[derive(Debug, Clone)]
pub(crate) struct LeaseInfo {
    pub(crate) lease: pb::Lease,
    pub(crate) slot: SlotCell,
}

impl AttemptJob {
    /// The task for `attempt`, occupying `slot`. `None` when the attempt carries no lease (a protocol error,
    /// logged): it cannot be reported, so it is not run.
    pub(crate) fn task(
        attempt: pb::Attempt,
        slot: OwnedSemaphorePermit,
        client: &OrchestratorClient,
        registered_heartbeat: Duration,
    ) -> Option<Task<AttemptJob>> {
        let Some(lease) = attempt.lease else {
            tracing::error!(action = %attempt.action, "received an attempt without a lease; ignoring it");
            return None;
        };
        let checkpoint =
            attempt.checkpoint_json.as_deref().and_then(|text| match serde_json::from_str::<Value>(text) {
                Ok(value) => Some(value),
                Err(e) => {
                    tracing::warn!(error = %e, "the last checkpoint is not JSON; starting without it");
                    None
                }
            });
        let remaining = Duration::from_millis(attempt.remaining_ms);
        let deadline = tokio::time::Instant::now() + remaining;
        let progress = Arc::new(LeaseProgress::new(client.clone(), lease.clone(), deadline));
        let mut ctx = ActionContext::new(
            lease.run_id.clone(),
            lease.step_id.clone(),
            lease.attempt,
            remaining,
            checkpoint,
            progress.clone(),
        )
        .with_deliveries(deliveries(attempt.recipients, attempt.deliveries));
        if !attempt.idempotency_key.is_empty() {
            ctx.idempotency_key = attempt.idempotency_key;
        }
        let slot: SlotCell = Arc::new(Mutex::new(Some(slot)));
        let info = LeaseInfo { lease: lease.clone(), slot: slot.clone() };
        let job = AttemptJob {
            lease,
            action: attempt.action,
            args_json: attempt.args_json,
            traceparent: attempt.traceparent,
            timeout_ms: attempt.timeout_ms,
            ctx,
            progress,
            heartbeat_every: heartbeat_every(registered_heartbeat, attempt.heartbeat_timeout_ms),
            slot,
        };
        Some(TaskBuilder::new(job).data(info).build())
    }
}

/// The recipients and the delivery ledger an attempt carries, in the action context's terms. A recipient or a
/// record the worker cannot read is dropped with a warning: the orchestrator checked both when it stored them.
fn deliveries(recipients: Vec<pb::AttemptRecipient>, ledger: Vec<pb::DeliveryRecord>) -> Deliveries {
    let recipients = recipients
        .into_iter()
        .map(|r| {
            let parsed = r.recipient_json.as_deref().and_then(|json| match serde_json::from_str::<Recipient>(json) {
                Ok(recipient) => Some(recipient),
                Err(e) => {
                    tracing::warn!(recipient = %r.id, error = %e, "the attempt's recipient is unreadable");
                    None
                }
            });
            (r.id, parsed)
        })
        .collect();
    let ledger = ledger
        .into_iter()
        .filter_map(|record| {
            let Ok(status) = record.status.parse::<DeliveryStatus>() else {
                tracing::warn!(status = %record.status, "the attempt's ledger holds an unknown delivery status");
                return None;
            };
            Some(DeliveryRecord {
                recipient_id: record.recipient_id,
                channel: record.channel,
                status,
                attempts: record.attempts,
                last_error: record.last_error,
                provider_message_id: record.provider_message_id,
            })
        })
        .collect();
    Deliveries { recipients, ledger }
}
