//! Trace and span ids derived from what a run already has, so one run is one trace without storing anything.
//!
//! - A run's **trace id** is its id's 32 hex digits (run ids are UUID v7s); any other id is hashed.
//! - A run's **root span id** is a hash of the run id: the parent of every orchestrator span of the run.
//! - An attempt's **span id** is a hash of (run, step, attempt): the orchestrator gives its attempt span this id
//!   and sends it to the worker as the attempt's `traceparent`, so the worker's span is its child.
//!
//! Because the ids are recomputed rather than remembered, an orchestrator restarted mid-run, or a second one
//! sharing the database, continues the same trace.
//!
//! The OpenTelemetry SDK draws span ids from an [`IdGenerator`]; [`CairnIds`] hands out the id a caller asked
//! for through [`start_with_ids`] (a thread-local read during the synchronous span start) and random ids
//! otherwise.

use std::cell::Cell;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing_opentelemetry::OpenTelemetrySpanExt;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

thread_local! {
    /// The ids the next span started on this thread must take (set only inside [`start_with_ids`]).
    static NEXT_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
    static NEXT_SPAN_ID: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// FNV-1a over `parts`, each followed by a 0xff separator (so `("ab", "c")` and `("a", "bc")` differ).
fn fnv(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut hash = seed;
    for part in parts {
        for byte in part.iter().chain(&[0xff]) {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME);
        }
    }
    hash
}

/// Zero is the invalid id in W3C trace context; map it to one.
fn nonzero(id: u64) -> u64 {
    if id == 0 { 1 } else { id }
}

/// The trace of run `run_id`: its 32 hex digits when it is a UUID, else a 128-bit hash of it.
pub fn run_trace_id(run_id: &str) -> TraceId {
    let hex: String = run_id.chars().filter(char::is_ascii_hexdigit).collect();
    if hex.len() == 32
        && let Ok(value) = u128::from_str_radix(&hex, 16)
        && value != 0
    {
        return TraceId::from(value);
    }
    let high = fnv(FNV_OFFSET, &[b"trace", run_id.as_bytes()]);
    let low = nonzero(fnv(high, &[run_id.as_bytes()]));
    TraceId::from((u128::from(high) << 64) | u128::from(low))
}

/// The root span of run `run_id`: the parent of the run's orchestrator attempt spans.
pub fn run_span_id(run_id: &str) -> SpanId {
    SpanId::from(nonzero(fnv(FNV_OFFSET, &[b"run", run_id.as_bytes()])))
}

/// The orchestrator's span for attempt `attempt` of `step_id` in `run_id`.
pub fn attempt_span_id(run_id: &str, step_id: &str, attempt: u32) -> SpanId {
    let parts: [&[u8]; 4] = [b"attempt", run_id.as_bytes(), step_id.as_bytes(), &attempt.to_le_bytes()];
    SpanId::from(nonzero(fnv(FNV_OFFSET, &parts)))
}

/// Starts `span`'s OpenTelemetry span now with `span_id` (and `trace_id`, when the span has no parent).
/// Call right after creating the span and setting its parent, before it is first entered. A no-op without
/// an OpenTelemetry layer.
pub(super) fn start_with_ids(span: &tracing::Span, trace_id: Option<TraceId>, span_id: SpanId) {
    NEXT_TRACE_ID.with(|next| next.set(trace_id));
    NEXT_SPAN_ID.with(|next| next.set(Some(span_id)));
    // Asking for the context builds the OpenTelemetry span synchronously on this thread, drawing its ids.
    let _ = span.context();
    NEXT_TRACE_ID.with(|next| next.set(None));
    NEXT_SPAN_ID.with(|next| next.set(None));
}

/// The SDK's id generator: the ids [`start_with_ids`] asked for, random ones otherwise.
#[derive(Debug, Default)]
pub(super) struct CairnIds {
    random: RandomIdGenerator,
}

impl IdGenerator for CairnIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID.with(Cell::take).unwrap_or_else(|| self.random.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN_ID.with(Cell::take).unwrap_or_else(|| self.random.new_span_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_run_id_is_its_own_trace_id() {
        let trace = run_trace_id("0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d");
        assert_eq!(trace.to_string(), "0190a3c45e6f7a8b9c0d1e2f3a4b5c6d", "the UUID's digits are the trace id");
    }

    #[test]
    fn other_run_ids_hash_to_a_valid_trace_id() {
        assert_ne!(run_trace_id("run-1"), TraceId::INVALID, "a non-UUID run id still gets a valid trace");
        assert_ne!(run_trace_id("run-1"), run_trace_id("run-2"), "different runs get different traces");
    }

    #[test]
    fn attempt_span_ids_differ_by_step_and_attempt() {
        let run = "0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d";
        let first = attempt_span_id(run, "fetch", 1);
        assert_ne!(first, attempt_span_id(run, "fetch", 2), "each attempt has its own span");
        assert_ne!(first, attempt_span_id(run, "notify", 1), "each step has its own span");
        assert_ne!(first, run_span_id(run), "an attempt span is not the run's root");
        assert_eq!(first, attempt_span_id(run, "fetch", 1), "the id is recomputed, not remembered");
    }
}
