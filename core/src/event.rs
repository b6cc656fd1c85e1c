//! What a run's history records: the kind of each event, in one enum whose names the stores write, and the
//! typed details of the events a run records as it makes progress.
//!
//! `EventKind`'s serde names and its `as_str` are the same snake_case strings (a test checks every variant):
//! serde gives the API's JSON, `as_str` the text bound into SQL. PL/pgSQL functions that write events must
//! spell kinds themselves; the store's tests check that every kind they spell is one of these.
//!
//! [`Progress`] is the payload of `step_ready`, `step_started`, `step_succeeded` and `run_succeeded`, the events
//! SQL writes on the PostgreSQL fast path: their fields are stored in columns of their own and the JSON the API
//! shows is this type's serde form, so no SQL ever builds JSON text.

use serde::{Deserialize, Serialize};

/// The kind of a run event (`run_events.kind`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum EventKind {
    /// A run was stored.
    RunCreated,
    /// Every step finished and none failed.
    RunSucceeded,
    /// Every step finished and one failed, or the run's rows were found inconsistent.
    RunFailed,
    /// An operator cancelled the run.
    RunCancelled,
    /// A finished run goes on: an operator retried one of its failed steps.
    RunReopened,
    /// An operator paused the run: no new attempt starts.
    RunPaused,
    /// An operator resumed a paused run.
    RunResumed,
    /// A step may be claimed (now or at `available_at`).
    StepReady,
    /// A worker leased a step.
    StepStarted,
    /// An attempt succeeded.
    StepSucceeded,
    /// A step failed for good.
    StepFailed,
    /// An attempt failed and another is scheduled.
    StepRetryScheduled,
    /// A non-idempotent attempt ended ambiguously.
    StepOutcomeUnknown,
    /// A step was cancelled with its run.
    StepCancelled,
    /// A step will not run (its `when`, its trigger rule, a rejection or a timeout).
    StepSkipped,
    /// A claim was undone before the worker got the step.
    StepUnclaimed,
    /// A step waits for a human decision.
    StepWaitingApproval,
    /// A person approved a step.
    StepApproved,
    /// A person rejected a step.
    StepRejected,
    /// A step's approval deadline passed.
    StepApprovalTimedOut,
    /// An `event.wait` step started waiting.
    StepWaitingEvent,
    /// An `event.wait` step got its event.
    StepEventReceived,
    /// An `event.wait` step's wait timed out.
    StepEventTimedOut,
    /// A skipped step will be decided again: a step it depends on was retried.
    StepReopened,
    /// An operator ran an `outcome_unknown` or `failed` step again (`by`, `reason`, `args_revision`).
    OperatorRetry,
    /// An operator skipped an `outcome_unknown` step.
    OperatorSkip,
    /// An operator failed an `outcome_unknown` step.
    OperatorFail,
}

impl EventKind {
    /// The stable snake_case name stored in `run_events.kind` and shown by the API.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

crate::state::compares_with_names!(EventKind);

/// The payload of an event a run records as it makes progress. Serialized untagged: the JSON is the variant's
/// fields alone (`{"attempt":1,"worker_id":"w1"}`; `{}` for `run_succeeded`), the kind being stored beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Progress {
    /// `step_ready`: the step may be claimed from `available_at`.
    Ready {
        /// Epoch ms from which it may be claimed.
        available_at: Option<i64>,
    },
    /// `step_started`: a worker leased attempt `attempt`.
    Started {
        /// The attempt number (1-based).
        attempt: u32,
        /// The worker holding the lease.
        worker_id: String,
    },
    /// `step_succeeded`: attempt `attempt` succeeded.
    Succeeded {
        /// The attempt number (1-based).
        attempt: u32,
    },
    /// `run_succeeded`: every step finished and none failed.
    RunSucceeded {},
}

impl Progress {
    /// The kinds whose payload is a `Progress`.
    pub const KINDS: [EventKind; 4] =
        [EventKind::StepReady, EventKind::StepStarted, EventKind::StepSucceeded, EventKind::RunSucceeded];

    /// The kind of the event this is the payload of.
    pub fn kind(&self) -> EventKind {
        match self {
            Progress::Ready { .. } => EventKind::StepReady,
            Progress::Started { .. } => EventKind::StepStarted,
            Progress::Succeeded { .. } => EventKind::StepSucceeded,
            Progress::RunSucceeded {} => EventKind::RunSucceeded,
        }
    }

    /// The payload as the API shows it.
    pub fn to_json(&self) -> serde_json::Value {
        // A derived `Serialize` of integers and strings into a `Value` cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use strum::VariantArray;

    use super::*;

    #[test]
    fn serde_and_as_str_name_every_kind_alike() {
        for kind in EventKind::VARIANTS {
            assert_eq!(serde_json::to_value(kind).ok(), Some(serde_json::json!(kind.as_str())));
            assert_eq!(serde_json::from_value::<EventKind>(serde_json::json!(kind.as_str())).ok(), Some(*kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
    }

    /// The JSON the stores wrote as text before these payloads had columns, byte for byte.
    #[test]
    fn progress_serializes_as_the_event_data_the_api_has_always_shown() {
        let cases = [
            (Progress::Ready { available_at: Some(7) }, r#"{"available_at":7}"#),
            (Progress::Ready { available_at: None }, r#"{"available_at":null}"#),
            (Progress::Started { attempt: 2, worker_id: "w\"1".into() }, r#"{"attempt":2,"worker_id":"w\"1"}"#),
            (Progress::Succeeded { attempt: 3 }, r#"{"attempt":3}"#),
            (Progress::RunSucceeded {}, "{}"),
        ];
        for (progress, text) in cases {
            assert_eq!(progress.to_json().to_string(), text, "{:?}", progress.kind());
        }
    }
}
