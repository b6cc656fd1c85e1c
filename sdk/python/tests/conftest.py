"""Fixtures: real ``cairn serve`` processes (SQLite and PostgreSQL), real Python worker processes, and the helpers
the end-to-end tests wait with.

Nothing here mocks the orchestrator. Every process a test starts is killed at teardown, every PostgreSQL database
created is dropped, every temporary directory removed, pass or fail.

- ``CAIRN_BIN``: the ``cairn`` binary (default ``target/debug/cairn`` under the repository root).
- ``DATABASE_URL``: a PostgreSQL server URL (e.g. ``postgres://postgres@127.0.0.1:5432/postgres``); the
  PostgreSQL parametrisation is skipped without it. Each server gets a fresh database on it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional
from urllib.parse import urlparse, urlunparse

import httpx
import pytest

import cairn

SDK = Path(__file__).resolve().parent.parent
REPO = SDK.parent.parent
WORKER_SCRIPT = Path(__file__).resolve().parent / "workers" / "actions_worker.py"
#: Short lease TTL so a killed worker's lease expires within seconds (heartbeats every TTL/4 = 500 ms).
LEASE_TTL_MS = 2000
START_LIMIT = 30.0


def cairn_bin() -> Path:
    path = Path(os.environ.get("CAIRN_BIN") or REPO / "target" / "debug" / "cairn")
    if not path.is_absolute():
        path = (REPO / path).resolve()
    return path


def eventually(probe: Callable[[], Any], what: str, timeout: float = 20.0, explain: Callable[[], str] = lambda: ""
               ) -> Any:
    """Polls ``probe`` every 25 ms until it returns something truthy; fails the test with ``what`` after
    ``timeout`` seconds (a bound, not a pause: tests never sleep-then-assert)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting until {what}{explain()}")
        time.sleep(0.025)


class Proc:
    """A spawned process logging to ``<dir>/<name>.log``; killed (SIGKILL) at teardown if still running."""

    def __init__(self, name: str, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in kill()/wait()
        self.popen = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """``kill -9``: dies at once, running no shutdown code."""
        if self.alive():
            self.popen.kill()
        self.popen.wait()
        self._log.close()

    def wait(self, timeout: float) -> int:
        code = self.popen.wait(timeout=timeout)
        self._log.close()
        return code


def _tail(text: str, limit: int = 5000) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


class Procs:
    """Every process of one test (or session), killed at teardown."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.all: list[Proc] = []

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        proc = Proc(name, args, self.dir, env)
        self.all.append(proc)
        return proc

    def logs(self) -> str:
        return "".join(f"\n===== {p.name} =====\n{_tail(p.log())}" for p in self.all)

    def close(self) -> None:
        for proc in self.all:
            proc.kill()


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``cairn serve`` over a database that outlives the process (so it can be killed and started again on the
    same ports), with its tokens and a :class:`cairn.Client`."""

    def __init__(self, backend: str, db_url: str, directory: Path, procs: Procs) -> None:
        self.backend = backend
        self.db_url = db_url
        self.dir = directory
        self.procs = procs
        self.api_token = f"api-{uuid.uuid4().hex}"
        self.worker_token = f"worker-{uuid.uuid4().hex}"
        self.http_port = 0
        self.grpc_port = 0
        self.proc: Optional[Proc] = None
        self.starts = 0
        self.client: Optional[cairn.Client] = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    def start(self) -> "Server":
        assert self.proc is None or not self.proc.alive(), "already running"
        self.starts += 1
        args = [str(cairn_bin()), "serve", "--db", self.db_url, "--http", f"127.0.0.1:{self.http_port}",
                "--grpc", f"127.0.0.1:{self.grpc_port}"]
        env = _clean_env(CAIRN_API_TOKEN=self.api_token, CAIRN_WORKER_TOKEN=self.worker_token,
                         CAIRN_LEASE_TTL_MS=str(LEASE_TTL_MS), RUST_LOG="info", TMPDIR=str(self.dir))
        self.proc = self.procs.spawn(f"serve-{self.starts}", args, env)
        proc = self.proc
        if not self.http_port:
            # `serve` prints the addresses it bound: `API http://127.0.0.1:P  worker gRPC http://127.0.0.1:Q`.
            def bound() -> Optional[re.Match[str]]:
                assert proc.alive(), f"`cairn serve` exited at start-up:{self.procs.logs()}"
                return re.search(r"API http://127\.0\.0\.1:(\d+)\s+worker gRPC http://127\.0\.0\.1:(\d+)",
                                 proc.log())

            found = eventually(bound, "`cairn serve` prints its addresses", START_LIMIT)
            self.http_port, self.grpc_port = int(found.group(1)), int(found.group(2))

        def healthy() -> bool:
            assert proc.alive(), f"`cairn serve` exited at start-up:{self.procs.logs()}"
            try:
                return httpx.get(f"{self.api_url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        eventually(healthy, "`cairn serve` answers /healthz", START_LIMIT)
        if self.client is None:
            self.client = cairn.Client(self.api_url, token=self.api_token, timeout=30)
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc is not None:
            self.proc.kill()

    def worker(self, procs: Procs, prefix: str, name: Optional[str] = None, token: Optional[str] = None,
               **env: str) -> "WorkerProc":
        """Starts ``tests/workers/actions_worker.py`` serving the test actions under ``prefix``."""
        name = name or f"worker-{prefix}-{len(procs.all)}"
        marks = procs.dir / f"marks-{prefix}"
        marks.mkdir(exist_ok=True)
        full_env = _clean_env(
            CAIRN_TEST_GRPC=self.grpc_url, CAIRN_WORKER_TOKEN=self.worker_token if token is None else token,
            CAIRN_TEST_PREFIX=prefix, CAIRN_TEST_MARKS=str(marks), CAIRN_TEST_WORKER_ID=name,
            PYTHONUNBUFFERED="1", **env,
        )
        proc = procs.spawn(name, [sys.executable, str(WORKER_SCRIPT)], full_env)
        return WorkerProc(proc, prefix, marks)


class WorkerProc:
    """A test worker process and the marker files its handlers write."""

    def __init__(self, proc: Proc, prefix: str, marks: Path) -> None:
        self.proc = proc
        self.prefix = prefix
        self.marks = marks

    def a(self, name: str) -> str:
        """The full name of test action ``name``."""
        return f"{self.prefix}.{name}"

    def mark(self, name: str) -> Any:
        path = self.marks / name
        if not path.exists():
            return None
        return json.loads(path.read_text())

    def wait_mark(self, name: str, timeout: float = 20.0) -> Any:
        return eventually(lambda: (self.marks / name).exists() and [self.mark(name)],
                          f"marker {name!r} of {self.proc.name}", timeout,
                          lambda: f"\n===== {self.proc.name} =====\n{_tail(self.proc.log())}")[0]

    def wait_connected(self, timeout: float = 30.0) -> None:
        def connected() -> bool:
            assert self.proc.alive(), f"the worker exited:\n{self.proc.log()}"
            return " connected to " in self.proc.log()

        eventually(connected, f"{self.proc.name} connects", timeout)


def _pg_admin(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql], check=True, capture_output=True,
                   timeout=60)


def _pg_database(base: str, name: str) -> str:
    parsed = urlparse(base)
    return urlunparse(parsed._replace(path=f"/{name}"))


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres" and not os.environ.get("DATABASE_URL"):
        pytest.skip("PostgreSQL tests need DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/postgres)")
    return request.param


def _make_server(backend: str, directory: Path, procs: Procs) -> Iterator[Server]:
    if not cairn_bin().is_file():
        pytest.fail(f"no cairn binary at {cairn_bin()}: build it (cargo build -p cairn-cli) or set CAIRN_BIN")
    if backend == "sqlite":
        db_url, drop = f"sqlite:{directory / 'c.db'}", None
    else:
        base = os.environ["DATABASE_URL"]
        name = f"cairn_sdk_{uuid.uuid4().hex[:16]}"
        _pg_admin(base, f'CREATE DATABASE "{name}"')
        db_url, drop = _pg_database(base, name), (base, name)
    server = Server(backend, db_url, directory, procs)
    try:
        yield server.start()
    finally:
        server.close()
        procs.close()
        if drop is not None:
            _pg_admin(drop[0], f'DROP DATABASE IF EXISTS "{drop[1]}" WITH (FORCE)')


@pytest.fixture(scope="session")
def server(backend: str) -> Iterator[Server]:
    """One ``cairn serve`` per backend for the whole session (tests use distinct action names)."""
    directory = Path(tempfile.mkdtemp(prefix=f"cairn-sdk-{backend}-"))
    procs = Procs(directory)
    try:
        yield from _make_server(backend, directory, procs)
    finally:
        if os.environ.get("CAIRN_TEST_KEEP"):
            print(f"\nkept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def fresh_server(backend: str, tmp_path: Path) -> Iterator[Server]:
    """A ``cairn serve`` of the test's own (for tests that kill or restart the orchestrator)."""
    procs = Procs(tmp_path)
    yield from _make_server(backend, tmp_path, procs)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    """Processes of one test, killed at its end."""
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture(scope="session")
def general_worker(server: Server) -> Iterator[WorkerProc]:
    """One worker process per backend serving the test actions under the prefix ``gen``, for tests that do not
    kill or stop their worker."""
    directory = Path(tempfile.mkdtemp(prefix="cairn-sdk-worker-"))
    procs = Procs(directory)
    try:
        worker = server.worker(procs, "gen", name="general")
        worker.wait_connected()
        yield worker
    finally:
        procs.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def client(server: Server) -> cairn.Client:
    assert server.client is not None
    return server.client


def wait_run(client: cairn.Client, run_id: str, what: str, ready: Callable[[cairn.Run], bool],
             timeout: float = 20.0, logs: Callable[[], str] = lambda: "") -> cairn.Run:
    """Polls the run until ``ready(run)``; fails with the last state and the logs otherwise."""
    last: list[cairn.Run] = []

    def probe() -> Optional[cairn.Run]:
        run = client.get(run_id)
        last[:] = [run]
        return run if ready(run) else None

    return eventually(probe, what, timeout,
                      lambda: f"\nlast state: {last[0].model_dump_json(indent=1) if last else None}{logs()}")


def new_prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}"
