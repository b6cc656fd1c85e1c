"""examples/python end to end, exactly as its README says: `cairn dev`, the stand-in shop, the tools worker, then
the submit script; and the hello world."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import pytest

import cairn

from conftest import REPO, Procs, _clean_env, cairn_bin, eventually, free_port

EXAMPLE = REPO / "examples" / "python"


@pytest.fixture
def dev(procs: Procs, tmp_path: Path) -> dict[str, str]:
    """`cairn dev` (no auth) on free ports, over a SQLite file of the test's own."""
    if not cairn_bin().is_file():
        pytest.fail(f"no cairn binary at {cairn_bin()}: build it or set CAIRN_BIN")
    http, grpc = free_port(), free_port()
    server = procs.spawn("dev", [str(cairn_bin()), "dev", "--db", f"sqlite:{tmp_path / 'dev.db'}", "--http",
                                 f"127.0.0.1:{http}", "--grpc", f"127.0.0.1:{grpc}"],
                         _clean_env(RUST_LOG="info", TMPDIR=str(tmp_path)))

    def up() -> bool:
        assert server.alive(), server.log()
        try:
            return httpx.get(f"http://127.0.0.1:{http}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    eventually(up, "`cairn dev` answers", 30)
    return {"CAIRN_SERVER": f"http://127.0.0.1:{http}", "CAIRN_WORKER_URL": f"http://127.0.0.1:{grpc}"}


def test_the_agent_tools_example(dev: dict[str, str], procs: Procs) -> None:
    shop_port = free_port()
    shop_url = f"http://127.0.0.1:{shop_port}"
    env = _clean_env(SHOP_URL=shop_url, PYTHONUNBUFFERED="1", **dev)
    shop = procs.spawn("shop", [sys.executable, str(EXAMPLE / "shop_service.py"), "--port", str(shop_port)], env)
    eventually(lambda: "listening" in shop.log(), "the shop listens", 20)
    worker = procs.spawn("support_worker", [sys.executable, str(EXAMPLE / "support_worker.py")], env)
    eventually(lambda: " connected to " in worker.log(), "the tools worker connects", 30, procs.logs)

    damaged = procs.spawn("run_refund", [sys.executable, str(EXAMPLE / "run_refund.py")], env)
    assert damaged.wait(timeout=90) == 0, procs.logs()
    out = damaged.log()
    assert ": succeeded" in out and "refund   succeeded" in out and "'repeated': False" in out
    run_id = out.split()[1].rstrip(":")
    refunds = httpx.get(f"{shop_url}/refunds", timeout=5).json()
    assert len(refunds) == 1
    assert refunds[0]["order_id"] == "A-1001" and refunds[0]["amount_cents"] == 4599
    assert refunds[0]["idempotency_key"] == f"{run_id}/refund", "the step's idempotency key reached the shop"

    intact = procs.spawn("run_refund_intact", [sys.executable, str(EXAMPLE / "run_refund.py"), "A-1002"], env)
    assert intact.wait(timeout=90) == 0, procs.logs()
    assert "refund   skipped" in intact.log()
    assert len(httpx.get(f"{shop_url}/refunds", timeout=5).json()) == 1


def test_hello_world(dev: dict[str, str], procs: Procs) -> None:
    assert len((EXAMPLE / "hello.py").read_text().splitlines()) <= 15
    hello = procs.spawn("hello", [sys.executable, str(EXAMPLE / "hello.py")],
                        _clean_env(PYTHONUNBUFFERED="1", **dev))
    eventually(lambda: " connected to " in hello.log(), "hello.py connects", 30, procs.logs)
    assert "serving hello.greet" in hello.log()
    with cairn.Client(dev["CAIRN_SERVER"]) as client:
        run = client.run({"steps": [{"id": "hi", "action": "hello.greet", "args": {"name": "Ada"}}]}, timeout=30)
    assert run.step("hi").output == {"greeting": "Hello, Ada!"}
    hello.signal(signal.SIGINT)
    assert hello.wait(timeout=30) == 0, hello.log()
