"""Plan files, and the attempt span joining the run's trace (OpenTelemetry, optional extra)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import cairn
from cairn import load_plan

from conftest import Server, new_prefix


def test_load_plan(tmp_path: Path) -> None:
    plan = {"steps": [{"id": "a", "action": "noop"}]}
    assert load_plan(plan) is plan
    (tmp_path / "p.json").write_text('{"steps": [{"id": "a", "action": "noop"}]}')
    assert load_plan(tmp_path / "p.json") == plan
    (tmp_path / "p.yml").write_text("steps:\n  - id: a\n    action: noop\n")
    assert load_plan(str(tmp_path / "p.yml")) == plan
    (tmp_path / "dup.yaml").write_text("steps: []\nsteps: []\n")
    with pytest.raises(ValueError, match="appears twice"):
        load_plan(tmp_path / "dup.yaml")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="not a plan object"):
        load_plan(tmp_path / "list.json")
    with pytest.raises(FileNotFoundError):
        load_plan(tmp_path / "nope.json")
    with pytest.raises(TypeError):
        load_plan(42)


otel = pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (the test extra)")


@pytest.fixture(scope="session")
def spans():  # type: ignore[no-untyped-def]
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def test_the_attempt_span_joins_the_run_trace(server: Server, spans) -> None:  # type: ignore[no-untyped-def]
    """An in-process worker against the real orchestrator: the handler runs inside a span whose parent is the
    orchestrator's attempt span named by the attempt's ``traceparent``."""
    from opentelemetry import trace

    prefix = new_prefix()
    worker = cairn.Worker(server.grpc_url, token=server.worker_token, concurrency=2, worker_id="in-process")

    @worker.action(f"{prefix}.traced")
    def traced(args: dict, ctx: cairn.Context) -> dict:
        span = trace.get_current_span().get_span_context()
        return {"traceparent": ctx.traceparent, "trace_id": f"{span.trace_id:032x}", "span_id": f"{span.span_id:016x}"}

    thread = threading.Thread(target=lambda: asyncio.run(worker.run_async()), daemon=True)
    thread.start()
    try:
        assert worker.wait_connected(timeout=30)
        assert server.client is not None
        run = server.client.run({"steps": [{"id": "t", "action": f"{prefix}.traced", "args": {}}]}, timeout=30)
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive(), "stop() ends run_async"
    out = run.step("t").output
    version, trace_id, parent_id, _flags = out["traceparent"].split("-")
    assert out["trace_id"] == trace_id, "the handler's span is in the run's trace"
    [span] = [s for s in spans.get_finished_spans() if s.name == f"attempt {prefix}.traced"]
    assert f"{span.parent.span_id:016x}" == parent_id
    assert f"{span.context.span_id:016x}" == out["span_id"]
    assert span.attributes["cairn.run_id"] == run.id and span.attributes["cairn.attempt"] == 1
