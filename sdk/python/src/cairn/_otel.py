"""Optional OpenTelemetry: when ``opentelemetry-api`` is importable, each attempt runs in a span that joins the
run's trace through the attempt's W3C ``traceparent``. Without it (or without a configured tracer provider) the
spans cost nothing."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

try:  # pragma: no cover - exercised when the extra is installed
    from opentelemetry import trace as _trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
except ImportError:  # pragma: no cover
    _trace = None

AVAILABLE = _trace is not None


@contextlib.contextmanager
def attempt_span(action: str, run_id: str, step_id: str, attempt: int, traceparent: str) -> Iterator[Any]:
    """A span for one attempt, a child of the orchestrator's attempt span; ``None`` without OpenTelemetry."""
    if _trace is None:
        yield None
        return
    parent = _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
    tracer = _trace.get_tracer("cairn-sdk")
    attributes = {"cairn.run_id": run_id, "cairn.step_id": step_id, "cairn.attempt": attempt, "cairn.action": action}
    with tracer.start_as_current_span(f"attempt {action}", context=parent, kind=SpanKind.CONSUMER,
                                      attributes=attributes, record_exception=False,
                                      set_status_on_exception=False) as span:
        yield span


def record_failure(span: Any, code: str, message: str) -> None:
    """Marks ``span`` failed with the failure code."""
    if span is None or _trace is None:
        return
    span.set_attribute("cairn.failure_code", code)
    span.set_status(Status(StatusCode.ERROR, f"{code}: {message}"[:256]))
