//! The delivery ledger seen from the engine: what an attempt of a delivering action (one with `recipient_args`,
//! such as `notify.send`) is handed — the recipients its resolved args name and the step's ledger — and the
//! recording of each channel's outcome as the worker reports it.
//!
//! A report is accepted from any attempt the step has had, current or not: a message a lost attempt delivered
//! was still delivered, and the ledger must say so, or the next attempt sends it again. Whether the reporting
//! attempt still counts is answered separately (its lease is extended as by a heartbeat).

use cairn_core::delivery::{DeliveryRecord, DeliveryReport, DeliveryStatus};
use cairn_core::recipient;
use cairn_store::{DeliveryRecorded, DeliveryWrite, HeartbeatOutcome, Lease, StoreResult};
use serde_json::Value;

use super::Engine;

/// What an attempt of a delivering action is handed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptDeliveries {
    /// Every recipient id the resolved args name, with its stored body (JSON text), `None` when none has the id.
    pub recipients: Vec<(String, Option<String>)>,
    /// The step's ledger records.
    pub ledger: Vec<DeliveryRecord>,
}

/// How a delivery report was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryAnswer {
    /// Recorded; `alive` says whether the reporting attempt still counts.
    Recorded {
        /// The attempt's lease is current (and was extended).
        alive: bool,
    },
    /// The step never had that attempt (or the run or step does not exist).
    NoSuchAttempt,
}

impl Engine {
    /// The `recipient_args` of `action` when it names recipients (it delivers messages), else `None`: the one
    /// question asked of every attempt handed out, so it reads the catalog's current view and nothing else.
    pub fn recipient_args_of(&self, action: &str) -> Option<Vec<String>> {
        let catalog = self.catalog().snapshot();
        let pointers = &cairn_core::catalog::ActionCatalog::get(&catalog, action)?.spec().recipient_args;
        (!pointers.is_empty()).then(|| pointers.clone())
    }

    /// The recipients and the ledger for an attempt of step `run_id/step_id` whose resolved `args` name
    /// recipients at `pointers` (its action's [`Engine::recipient_args_of`]).
    ///
    /// # Errors
    /// Store errors: the attempt must not run without its ledger, or it could send again what was delivered.
    pub async fn attempt_deliveries(
        &self,
        run_id: &str,
        step_id: &str,
        pointers: &[String],
        args: &Value,
    ) -> StoreResult<AttemptDeliveries> {
        let ids: Vec<String> = recipient::named_in(pointers, args)
            .into_iter()
            .take(recipient::MAX_RECIPIENTS_PER_STEP)
            .map(str::to_owned)
            .collect();
        let mut stored = if ids.is_empty() { Vec::new() } else { self.store().recipients_get(&ids).await? };
        let recipients = ids
            .into_iter()
            .map(|id| {
                let body = stored.iter().position(|r| r.id == id).map(|at| stored.swap_remove(at).body);
                (id, body)
            })
            .collect();
        let rows = self.store().step_deliveries(run_id, step_id).await?;
        Ok(AttemptDeliveries { recipients, ledger: rows.iter().map(|r| r.record()).collect() })
    }

    /// Records one channel's outcome reported under `lease`.
    ///
    /// # Errors
    /// Store errors (the worker resends).
    pub async fn report_delivery(&self, lease: &Lease, report: &DeliveryReport) -> StoreResult<DeliveryAnswer> {
        let write = DeliveryWrite {
            run_id: lease.run_id.clone(),
            step_id: lease.step_id.clone(),
            step_attempt: lease.attempt,
            recipient_id: report.recipient_id.clone(),
            channel: report.channel.clone(),
            status: report.status,
            tries: report.tries,
            last_error: report.last_error.clone(),
            provider_message_id: report.provider_message_id.clone(),
            now_ms: self.now_ms(),
        };
        match self.store().delivery_record(&write).await? {
            DeliveryRecorded::NoSuchAttempt => Ok(DeliveryAnswer::NoSuchAttempt),
            DeliveryRecorded::Recorded { newly_delivered, added_tries, .. } => {
                if newly_delivered {
                    tracing::info!(run_id = %lease.run_id, step_id = %lease.step_id, recipient = %report.recipient_id,
                        channel = %report.channel, "delivered");
                    self.metrics().delivery(&report.channel, "delivered");
                } else if report.status == DeliveryStatus::Failed && added_tries > 0 {
                    // A resent report adds no tries, so each attempt's failure on a channel counts once.
                    self.metrics().delivery(&report.channel, "failed");
                }
                let alive = matches!(self.heartbeat(lease, None).await?, HeartbeatOutcome::Extended { .. });
                Ok(DeliveryAnswer::Recorded { alive })
            }
        }
    }
}
