//! Carrying a run's trace across processes as W3C `traceparent` (`00-<trace>-<span>-01`): from the orchestrator's
//! attempt span to the worker's, and from the worker's span to the HTTP services its actions call.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
use opentelemetry::{Context, trace::SpanId, trace::TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::ids::{attempt_span_id, run_span_id, run_trace_id, start_with_ids};

/// The header (and protocol field) name.
pub const TRACEPARENT: &str = "traceparent";

fn header(trace_id: TraceId, span_id: SpanId) -> String {
    format!("00-{trace_id}-{span_id}-01")
}

/// The `traceparent` of attempt `attempt` of `step_id` in `run_id`: the run's trace, the orchestrator's attempt
/// span. What the orchestrator sends with each attempt; recomputable by any orchestrator.
pub fn attempt_traceparent(run_id: &str, step_id: &str, attempt: u32) -> String {
    header(run_trace_id(run_id), attempt_span_id(run_id, step_id, attempt))
}

/// The run's synthetic root, as a remote sampled parent.
fn run_context(run_id: &str) -> Context {
    let root =
        SpanContext::new(run_trace_id(run_id), run_span_id(run_id), TraceFlags::SAMPLED, true, TraceState::default());
    Context::new().with_remote_span_context(root)
}

/// Makes the fresh `span` run `run_id`'s root span (the run's trace id and root span id). Call before the span
/// is first entered; a no-op when spans are not exported.
pub fn start_run_span(span: &Span, run_id: &str) {
    start_with_ids(span, Some(run_trace_id(run_id)), run_span_id(run_id));
}

/// Makes the fresh `span` the orchestrator's span of an attempt: a child of the run's root, with the id that
/// [`attempt_traceparent`] names. Call before the span is first entered; a no-op when spans are not exported.
pub fn start_attempt_span(span: &Span, run_id: &str, step_id: &str, attempt: u32) {
    // `Err` only when no OpenTelemetry layer is installed (or the span is filtered out): nothing to parent.
    let _ = span.set_parent(run_context(run_id));
    start_with_ids(span, None, attempt_span_id(run_id, step_id, attempt));
}

/// Makes `span` a child of the remote span named by `traceparent` (the worker's attempt span under the
/// orchestrator's). Returns whether a parent was set: `false` for a malformed or empty `traceparent`, when spans
/// are not exported, or once `span` has been entered.
pub fn set_remote_parent(span: &Span, traceparent: &str) -> bool {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    if !parent.span().span_context().is_valid() {
        return false;
    }
    span.set_parent(parent).is_ok()
}

/// The `traceparent` of the current span, for an outgoing request; `None` when spans are not exported.
pub fn current_traceparent() -> Option<String> {
    let context = Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_traceparent_carries_the_run_trace_and_the_attempt_span() {
        let run = "0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d";
        let header = attempt_traceparent(run, "fetch", 2);
        let expected = format!("00-0190a3c45e6f7a8b9c0d1e2f3a4b5c6d-{}-01", attempt_span_id(run, "fetch", 2));
        assert_eq!(header, expected, "trace from the run id, span from the attempt, sampled");
    }

    #[test]
    fn a_malformed_traceparent_sets_no_parent() {
        let span = tracing::info_span!("attempt");
        assert!(!set_remote_parent(&span, "not-a-traceparent"), "garbage is ignored");
    }
}
