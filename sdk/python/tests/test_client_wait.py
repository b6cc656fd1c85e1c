"""``Client.wait`` honours its timeout even when the run's live stream carries only keep-alive comments (the
orchestrator sends one every 15 s, and each one used to reset the read timeout, so a ``wait(timeout=60)`` on a
stalled run blocked for good). A local HTTP server stands in for the orchestrator: the run stays ``running`` and
its stream says nothing but keep-alives."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

import cairn

RUN = {"id": "r1", "status": "running", "plan_id": "p", "step_count": 1, "open_steps": 1, "failure": None,
       "created_at_ms": 1, "finished_at_ms": None}


class _Stalled(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path.startswith("/v1/runs/r1/events"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for _ in range(200):
                    self.wfile.write(b":\n\n")
                    self.wfile.flush()
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        body = json.dumps(dict(RUN, steps=[])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def stalled_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stalled)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_wait_times_out_although_keep_alives_keep_the_stream_busy(stalled_server: str) -> None:
    client = cairn.Client(stalled_server)
    outcome: dict[str, BaseException | None] = {}

    def wait() -> None:
        try:
            client.wait("r1", timeout=1.0)
            outcome["error"] = None
        except BaseException as e:  # noqa: BLE001 (the outcome is what the test asserts)
            outcome["error"] = e

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(timeout=15)

    assert not waiter.is_alive(), "wait(timeout=1) must return, not block on a stream of keep-alives"
    assert isinstance(outcome["error"], TimeoutError), outcome
    client.close()
