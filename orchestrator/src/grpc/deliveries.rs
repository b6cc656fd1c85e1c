//! The delivery ledger in the worker protocol: attempts of delivering actions carry their recipients and the
//! step's ledger, and `ReportDelivery` records each channel's outcome.

use cairn_core::delivery::{self, DeliveryReport, DeliveryStatus};
use cairn_proto::v1::{self as pb, Attempt, ReportDeliveryRequest, ReportDeliveryResponse};
use cairn_store::{Lease, StoreResult};
use tonic::Status;

use super::{WorkerGrpc, lease, unavailable};
use crate::engine::{AttemptDeliveries, DeliveryAnswer};

impl WorkerGrpc {
    /// Adds the recipients and the ledger to each attempt of a delivering action. An attempt whose ledger
    /// cannot be read is not handed out (it could send again what was delivered): it is given back unstarted,
    /// and failing that its lease expires and the reaper decides.
    pub(super) async fn add_deliveries(&self, worker_id: &str, attempts: &mut Vec<Attempt>) {
        let mut withheld = Vec::new();
        for (index, attempt) in attempts.iter_mut().enumerate() {
            if let Err(e) = self.add_to(attempt).await {
                tracing::warn!(error = %e, action = %attempt.action, "the attempt's delivery ledger is unreadable; \
                    giving the attempt back");
                withheld.push(index);
            }
        }
        for index in withheld.into_iter().rev() {
            let attempt = attempts.remove(index);
            let Some(l) = attempt.lease else { continue };
            let lease =
                Lease { run_id: l.run_id, step_id: l.step_id, attempt: l.attempt, worker_id: worker_id.to_owned() };
            if let Err(e) = self.engine.return_unstarted(&lease).await {
                tracing::warn!(error = %e, "could not give the attempt back; its lease will expire");
            }
        }
    }

    async fn add_to(&self, attempt: &mut Attempt) -> StoreResult<()> {
        let Some(l) = &attempt.lease else { return Ok(()) };
        // Most attempts deliver nothing: only those of an action with `recipient_args` have their args read.
        let Some(pointers) = self.engine.recipient_args_of(&attempt.action) else { return Ok(()) };
        let args = serde_json::from_str(&attempt.args_json).unwrap_or_default();
        let AttemptDeliveries { recipients, ledger } =
            self.engine.attempt_deliveries(&l.run_id, &l.step_id, &pointers, &args).await?;
        attempt.recipients =
            recipients.into_iter().map(|(id, recipient_json)| pb::AttemptRecipient { id, recipient_json }).collect();
        attempt.deliveries = ledger
            .into_iter()
            .map(|r| pb::DeliveryRecord {
                recipient_id: r.recipient_id,
                channel: r.channel,
                status: r.status.as_str().to_owned(),
                attempts: r.attempts,
                last_error: r.last_error,
                provider_message_id: r.provider_message_id,
            })
            .collect();
        Ok(())
    }

    /// `ReportDelivery` (see the protocol file).
    pub(super) async fn delivery(&self, req: ReportDeliveryRequest) -> Result<ReportDeliveryResponse, Status> {
        let lease = lease(&req.worker_id, req.lease)?;
        let report =
            report(req.recipient_id, req.channel, &req.status, req.tries, req.last_error, req.provider_message_id)?;
        match self.engine.report_delivery(&lease, &report).await.map_err(|e| unavailable(&e))? {
            DeliveryAnswer::Recorded { alive } => Ok(ReportDeliveryResponse { alive }),
            DeliveryAnswer::NoSuchAttempt => Err(Status::not_found(format!(
                "step {}/{} never had attempt {}",
                lease.run_id.escape_debug(),
                lease.step_id.escape_debug(),
                lease.attempt
            ))),
        }
    }
}

/// The report a request carries, checked: a known channel type, a recipient id by the id rules (or empty), a
/// known status; texts cut to the ledger's limits.
fn report(
    recipient_id: String,
    channel: String,
    status: &str,
    tries: u32,
    last_error: Option<String>,
    provider_message_id: Option<String>,
) -> Result<DeliveryReport, Status> {
    if !recipient_id.is_empty() {
        cairn_core::recipient::check_id(&recipient_id).map_err(|e| Status::invalid_argument(e.to_string()))?;
    }
    channel
        .parse::<cairn_core::recipient::ChannelType>()
        .map_err(|_| Status::invalid_argument(format!("unknown channel type `{}`", channel.escape_debug())))?;
    let status = status
        .parse::<DeliveryStatus>()
        .map_err(|_| Status::invalid_argument(format!("unknown delivery status `{}`", status.escape_debug())))?;
    let cut = |text: Option<String>, max| text.map(|t| delivery::truncated(&t, max).to_owned());
    Ok(DeliveryReport {
        recipient_id,
        channel,
        status,
        tries,
        last_error: cut(last_error, delivery::MAX_ERROR_BYTES),
        provider_message_id: cut(provider_message_id, delivery::MAX_PROVIDER_ID_BYTES),
    })
}
