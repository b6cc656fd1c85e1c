//! The store's transactional algorithms, written once against [`crate::tx::StepTx`] and run inside one
//! transaction each, so "step finished + dependents decided + events" commit together or not at all.
//!
//! - [`submit`]: create a run (plan, run, steps, edges, events) and decide its root steps.
//! - [`settle`]: the cascade after steps become final: release dependents, apply trigger rules and `when`,
//!   propagate skips, finish the run when nothing is open.
//! - [`finish`]: accept a completion or a failure under a lease (retry, fail, or `outcome_unknown`).
//! - [`claim`]: lease ready steps and resolve their placeholders; undo a claim whose attempt never started.
//! - [`batch`]: group commit of reports, with the released dependents claimed for waiting workers.
//! - [`control`]: cancellation, operator decisions, approvals, the lease reaper.
//! - [`schedule`], [`approval`], [`event_wait`]: durable waiting: schedule ticks, approval decisions and
//!   timeouts, `event.wait` steps.

pub(crate) mod approval;
pub(crate) mod batch;
pub(crate) mod claim;
pub(crate) mod control;
pub(crate) mod event_wait;
pub(crate) mod finish;
pub(crate) mod retry;
pub(crate) mod schedule;
pub(crate) mod settle;
pub(crate) mod submit;

use cairn_core::event::{EventKind, Progress};

use crate::rows::EventInsert;

/// Builds an event row whose payload is JSON text. The progress events (`step_ready`, `step_started`,
/// `step_succeeded`, `run_succeeded`) are built with [`EventInsert::progress`] instead, so that every path, SQL
/// included, stores them alike.
pub(crate) fn event(
    run_id: &str,
    step_id: Option<&str>,
    kind: EventKind,
    data: serde_json::Value,
    at: i64,
) -> EventInsert {
    debug_assert!(!Progress::KINDS.contains(&kind), "{kind} events are built with EventInsert::progress");
    EventInsert {
        run_id: run_id.into(),
        step_id: step_id.map(str::to_owned),
        kind,
        data: Some(data.to_string()),
        attempt: None,
        worker_id: None,
        available_at: None,
        at,
    }
}

/// RFC 3339 text of a millisecond timestamp, for failure records.
pub(crate) fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
}
