"""``cairn.Client`` and ``cairn.AsyncClient``: the REST API (``/v1``) with typed results and typed errors."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any, AsyncIterator, Iterator, Optional
from urllib.parse import quote

import httpx

from .errors import ApiError, Conflict, InvalidPlan, NotFound, Unauthorized, Unavailable
from . import filters as _filters
from .models import (
    ActionInfo,
    BulkResult,
    Draft,
    Event,
    Run,
    RunPage,
    Schedule,
    ScheduleFire,
    Validation,
)
from .plan import load_plan

__all__ = ["Client", "AsyncClient", "DEFAULT_URL"]

#: Where ``cairn dev`` and ``cairn serve`` listen by default.
DEFAULT_URL = "http://127.0.0.1:7400"
_FINAL_EVENTS = frozenset({"run_succeeded", "run_failed", "run_cancelled"})
# Longest a waiting client blocks on one read of a live stream before it checks the run and its deadline again.
_STREAM_READ_CAP = 5.0
_BY_STATUS: dict[int, type[ApiError]] = {401: Unauthorized, 404: NotFound, 409: Conflict, 503: Unavailable}


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "code" in body:
        code, message, details = str(body["code"]), str(body.get("message", "")), body.get("details")
    else:
        code, message, details = "http_error", response.text[:500] or response.reason_phrase, None
    if code == "invalid_plan":
        return InvalidPlan(response.status_code, code, message, details)
    cls = _BY_STATUS.get(response.status_code, ApiError)
    return cls(response.status_code, code, message, details)


def _unreachable(url: str, e: Exception) -> Unavailable:
    return Unavailable(0, "unreachable", f"cannot reach the Cairn API at {url}: {e}")


def _decision(by: Optional[str], **extra: Any) -> Optional[dict]:
    """The body of a step decision: ``by`` and any of ``extra`` given (``None`` values left out)."""
    body = {k: v for k, v in {"by": by, **extra}.items() if v is not None}
    return body or None


def _seg(value: str) -> str:
    return quote(value, safe="")


def _submit_body(plan: Any, input: Any, idempotency_key: Optional[str],
                 labels: Optional[dict[str, str]] = None) -> dict[str, Any]:
    body: dict[str, Any] = {"plan": load_plan(plan)}
    if labels:
        body["labels"] = dict(labels)
    if input is not None:
        body["input"] = input
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    return body


def _schedule_body(**fields: Any) -> dict[str, Any]:
    body = {k: v for k, v in fields.items() if v is not None}
    if "plan" in body:
        body["plan"] = load_plan(body["plan"])
    return body


class _Sse:
    """Incremental parser of a ``text/event-stream``."""

    def __init__(self) -> None:
        self.data: list[str] = []
        self.event_id: Optional[str] = None
        self.kind: Optional[str] = None

    def feed(self, line: str) -> Optional[Event]:
        if line == "":
            if not self.data:
                self.kind = None
                return None
            text = "\n".join(self.data)
            self.data, self.kind = [], None
            return Event.model_validate(json.loads(text))
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self.data.append(value)
        elif name == "id":
            self.event_id = value
        elif name == "event":
            self.kind = value
        return None


class _Common:
    def __init__(self, url: str, token: Optional[str]) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Accept": "application/json", "User-Agent": "cairn-sdk-python/0.1"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class Client(_Common):
    """A client of the REST API at ``url`` (``http://127.0.0.1:7400`` for ``cairn dev``).

    >>> client = cairn.Client("http://127.0.0.1:7400", token=os.environ.get("CAIRN_API_TOKEN"))
    >>> run = client.run("plan.json", input={"city": "Wuhan"}, timeout=60)
    >>> run.status, run.step("weather").output

    Every method raises :class:`cairn.ApiError` (or a subclass: :class:`cairn.InvalidPlan`,
    :class:`cairn.Conflict`, :class:`cairn.NotFound`, :class:`cairn.Unauthorized`, :class:`cairn.Unavailable`)
    for an error answer, and :class:`cairn.Unavailable` when the server cannot be reached. Use it as a context
    manager, or call :meth:`close`.
    """

    def __init__(self, url: str = DEFAULT_URL, token: Optional[str] = None, *, timeout: float = 30.0,
                 transport: Optional[httpx.BaseTransport] = None) -> None:
        super().__init__(url, token)
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=timeout, transport=transport)
        #: Cron schedules: ``create``, ``list``, ``get``, ``update``, ``pause``, ``resume``, ``trigger``, ``delete``,
        #: ``next``.
        self.schedules = Schedules(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._http.close()

    def _request(self, method: str, path: str, body: Any = None, params: Optional[dict[str, Any]] = None) -> Any:
        try:
            response = self._http.request(method, path, json=body, params=params)
        except httpx.TransportError as e:
            raise _unreachable(self.url, e) from e
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    # --- runs -------------------------------------------------------------------------------------------------

    def submit(self, plan: Any, input: Any = None, idempotency_key: Optional[str] = None,
               labels: Optional[dict[str, str]] = None) -> Run:
        """Submits ``plan`` (a dict, or the path of a JSON/YAML file) and returns the new run at once.

        With ``idempotency_key``, the same key and plan return the existing run; the same key with another plan
        raises :class:`cairn.Conflict`. An invalid plan raises :class:`cairn.InvalidPlan` with every diagnostic,
        and nothing is stored. ``labels`` (at most 16; keys ``[a-z0-9_.-]``) find the run again (:meth:`runs`).
        """
        body = _submit_body(plan, input, idempotency_key, labels)
        return Run.model_validate(self._request("POST", "/v1/runs", body))

    def run(self, plan: Any, input: Any = None, idempotency_key: Optional[str] = None,
            timeout: Optional[float] = None, labels: Optional[dict[str, str]] = None) -> Run:
        """Submits ``plan`` and waits until the run finishes (see :meth:`wait`); returns the final run."""
        submitted = self.submit(plan, input=input, idempotency_key=idempotency_key, labels=labels)
        return self.wait(submitted.id, timeout=timeout)

    def get(self, run_id: str) -> Run:
        """The run with its steps, their outputs and failure records (one consistent snapshot)."""
        return Run.model_validate(self._request("GET", f"/v1/runs/{_seg(run_id)}"))

    def summary(self, run_id: str) -> Run:
        """The run without its steps (one key lookup, however large the run)."""
        return Run.model_validate(self._request("GET", f"/v1/runs/{_seg(run_id)}", params={"view": "summary"}))

    def runs(self, status: Any = None, limit: int = 50, offset: int = 0, **filters: Any) -> list[Run]:
        """Runs, newest first (summaries), that match the filters (:mod:`cairn.filters`: ``status``, ``labels``,
        ``q``, ``action``, ``created_after``, ``created_before``, ``idempotency_key``, ``attention``)."""
        params = _filters.query(status, **filters) + [("limit", str(limit)), ("offset", str(offset))]
        return [Run.model_validate(r) for r in self._request("GET", "/v1/runs", params=params)["runs"]]

    def runs_page(self, limit: int = 50, cursor: Optional[str] = None, **filters: Any) -> RunPage:
        """One page of :meth:`runs`; pass its ``next_cursor`` as ``cursor`` for the next."""
        params = _filters.query(**filters) + [("limit", str(limit))]
        if cursor:
            params.append(("cursor", cursor))
        return RunPage.model_validate(self._request("GET", "/v1/runs", params=params))

    def iter_runs(self, page_size: int = 100, **filters: Any) -> Iterator[Run]:
        """Every run the filters match, newest first, page by page (a cursor: no run twice, none skipped)."""
        cursor: Optional[str] = None
        while True:
            page = self.runs_page(limit=page_size, cursor=cursor, **filters)
            yield from page.runs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel_runs(self, dry_run: bool = False, by: Optional[str] = None, reason: Optional[str] = None,
                    **filters: Any) -> BulkResult:
        """Cancels every open run the filters match (at most 1,000 a call; ``more`` says when others remain).
        ``dry_run=True`` only counts them. An empty filter is refused."""
        return self._bulk("cancel", dry_run, by, reason, filters)

    def redrive_runs(self, dry_run: bool = False, by: Optional[str] = None, reason: Optional[str] = None,
                     **filters: Any) -> BulkResult:
        """:meth:`redrive` for every failed or cancelled run the filters match (as :meth:`cancel_runs`)."""
        return self._bulk("redrive", dry_run, by, reason, filters)

    def retry_failed_runs(self, dry_run: bool = False, by: Optional[str] = None, reason: Optional[str] = None,
                          **filters: Any) -> BulkResult:
        """:meth:`retry` of every failed step of the runs the filters match (as :meth:`cancel_runs`)."""
        return self._bulk("retry-failed", dry_run, by, reason, filters)

    def _bulk(self, verb: str, dry_run: bool, by: Optional[str], reason: Optional[str], filters: dict) -> BulkResult:
        body = _filters.bulk_body(dry_run, by, reason, **filters)
        return BulkResult.model_validate(self._request("POST", f"/v1/runs:{verb}", body))

    def wait(self, run_id: str, timeout: Optional[float] = None) -> Run:
        """Waits until the run is ``succeeded``, ``failed`` or ``cancelled`` and returns it with its steps.

        Follows the run's event stream (SSE), falling back to polling with backoff if the stream breaks.
        Raises ``TimeoutError`` after ``timeout`` seconds. A step in ``outcome_unknown`` keeps its run open
        until an operator decides (:meth:`retry`, :meth:`skip`), so ``wait`` needs a timeout then.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        after = 0
        delay = 0.1
        while True:
            run = self.summary(run_id)
            if run.finished:
                return self.get(run_id)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"run {run_id} is still {run.status} after {timeout} s")
            try:
                for event in self._stream(run_id, after, deadline):
                    after = event.id
                    if event.kind in _FINAL_EVENTS:
                        return self.get(run_id)
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                else:
                    delay = 0.1
                    continue  # the stream ended: the run finished (checked at the top)
            except (httpx.TransportError, Unavailable):
                time.sleep(delay + random.uniform(0, delay))
                delay = min(delay * 2, 2.0)

    def events(self, run_id: str, after: int = 0) -> Iterator[Event]:
        """The run's history as it happens: every event after id ``after``, live, from ``GET
        /v1/runs/{id}/events`` with ``Accept: text/event-stream``. Ends once the run finished and everything was
        sent."""
        return self._stream(run_id, after, None)

    def _stream(self, run_id: str, after: int, deadline: Optional[float]) -> Iterator[Event]:
        """The live stream until it ends, or, with a ``deadline`` (``time.monotonic()``), until shortly after it:
        reads wait at most 5 s, so the server's keep-alive comments (every 15 s) cannot hold a wait past its
        timeout; the caller checks the run again and reconnects."""
        headers = {"Accept": "text/event-stream"}
        read = None if deadline is None else max(min(deadline - time.monotonic(), _STREAM_READ_CAP), 0.05)
        timeout = httpx.Timeout(self._http.timeout.connect or 30.0, read=read)
        params = {"after": after} if after else None
        try:
            with self._http.stream("GET", f"/v1/runs/{_seg(run_id)}/events", headers=headers, params=params,
                                   timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error(response)
                parser = _Sse()
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
                    if deadline is not None and time.monotonic() >= deadline:
                        return
        except httpx.ReadTimeout:
            return

    def history(self, run_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        """The run's history so far (JSON, no streaming), events after id ``after``."""
        body = self._request("GET", f"/v1/runs/{_seg(run_id)}/events", params={"after": after, "limit": limit})
        return [Event.model_validate(e) for e in body["events"]]

    def cancel(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """Cancels the run: open steps are cancelled, running handlers see ``ctx.cancelled``; ``by`` and ``reason``
        are recorded. Raises :class:`cairn.Conflict` (``already_finished``) for a finished run."""
        body = _decision(by, reason=reason)
        return Run.model_validate(self._request("POST", f"/v1/runs/{_seg(run_id)}:cancel", body))

    def _decide(self, run_id: str, step_id: str, verb: str, by: Optional[str],
                **extra: Any) -> Run:
        body = _decision(by, **extra)
        return Run.model_validate(
            self._request("POST", f"/v1/runs/{_seg(run_id)}/steps/{_seg(step_id)}:{verb}", body))

    def approve(self, run_id: str, step_id: str, by: Optional[str] = None) -> Run:
        """Approves a step in ``waiting_approval`` (``by`` is recorded in the history)."""
        return self._decide(run_id, step_id, "approve", by)

    def reject(self, run_id: str, step_id: str, by: Optional[str] = None) -> Run:
        """Rejects a step in ``waiting_approval``."""
        return self._decide(run_id, step_id, "reject", by)

    def retry(self, run_id: str, step_id: str, by: Optional[str] = None, *, args: Any = None,
              reason: Optional[str] = None) -> Run:
        """Runs a ``failed`` step again with a fresh attempt budget (its run reopens and the dependents it
        skipped are decided again; succeeded steps keep their outputs), or an ``outcome_unknown`` one.
        ``args`` replaces the step's args (validated like a plan; the step then gets a new idempotency key);
        ``reason`` is recorded in the history."""
        return self._decide(run_id, step_id, "retry", by, args=args, reason=reason)

    def redrive(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """Runs every failed and cancelled step of a failed or cancelled run again, each with a fresh attempt
        budget (succeeded steps keep their outputs; a non-idempotent step cancelled while it ran waits in
        ``outcome_unknown`` for a decision instead)."""
        return Run.model_validate(self._request("POST", f"/v1/runs/{_seg(run_id)}:redrive", _decision(by, reason=reason)))

    def pause(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """Pauses a pending or running run: no new attempt starts (running ones finish) until :meth:`resume`."""
        return Run.model_validate(self._request("POST", f"/v1/runs/{_seg(run_id)}:pause", _decision(by, reason=reason)))

    def resume(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """Resumes a paused run; timers, retries and deadlines that came due meanwhile happen now."""
        return Run.model_validate(self._request("POST", f"/v1/runs/{_seg(run_id)}:resume", _decision(by, reason=reason)))

    def rerun(self, run_id: str, from_step: str, by: Optional[str] = None, *,
              reason: Optional[str] = None) -> Run:
        """A new run of a finished run's plan and input from ``from_step``: it and every step that depends on it
        run again; every other step keeps the old run's status and output (``rerun_of`` links the two)."""
        body = _decision(by, reason=reason, **{"from": from_step})
        return Run.model_validate(self._request("POST", f"/v1/runs/{_seg(run_id)}:rerun", body))

    def skip(self, run_id: str, step_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """Skips an ``outcome_unknown`` step (``reason`` is recorded in the history)."""
        return self._decide(run_id, step_id, "skip", by, reason=reason)

    def fail(self, run_id: str, step_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """Fails an ``outcome_unknown`` step (``reason`` is recorded in the history)."""
        return self._decide(run_id, step_id, "fail", by, reason=reason)

    # --- plans, actions, events -------------------------------------------------------------------------------

    def validate(self, plan: Any) -> Validation:
        """Validates ``plan`` against the server's actions; every diagnostic at once, nothing stored."""
        return Validation.model_validate(self._request("POST", "/v1/plans:validate", {"plan": load_plan(plan)}))

    def draft(self, text: str, timezone: Optional[str] = None, max_rounds: Optional[int] = None) -> Draft:
        """Asks the server's planner for a plan for ``text`` (not submitted). Raises :class:`cairn.Unavailable`
        (``planner_unconfigured``) when the server has no model endpoint, :class:`cairn.ApiError`
        (``draft_failed``, with ``details['rounds']``) when no valid plan was reached."""
        body: dict[str, Any] = {"text": text}
        if timezone is not None:
            body["timezone"] = timezone
        if max_rounds is not None:
            body["max_rounds"] = max_rounds
        return Draft.model_validate(self._request("POST", "/v1/plans:draft", body))

    def actions(self) -> list[ActionInfo]:
        """Every action the server accepts in plans: built-ins and those registered by workers."""
        return [ActionInfo.model_validate(a) for a in self._request("GET", "/v1/actions")["actions"]]

    def send_event(self, name: str, key: Optional[str] = None, payload: Any = None) -> dict[str, Any]:
        """Delivers an external event (``POST /v1/events``) to the ``event.wait`` steps it matches; returns
        ``{id, matched: [{run_id, step_id}]}``."""
        body: dict[str, Any] = {"name": name, "payload": payload}
        if key is not None:
            body["key"] = key
        return self._request("POST", "/v1/events", body)

    def approvals(self, limit: int = 100) -> list[dict[str, Any]]:
        """Steps waiting for approval across runs, oldest first."""
        return self._request("GET", "/v1/approvals", params={"limit": limit})["approvals"]


class Schedules:
    """Cron schedules (``client.schedules``)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, cron: str, plan: Any, *, id: Optional[str] = None, timezone: Optional[str] = None,
               input: Any = None, overlap: Optional[str] = None, misfire: Optional[str] = None,
               catch_up_max: Optional[int] = None, paused: bool = False,
               labels: Optional[dict[str, str]] = None) -> Schedule:
        """Creates a schedule running ``plan`` at each tick of ``cron`` in ``timezone`` (UTC by default).
        ``overlap``: ``skip`` (default), ``allow``, ``cancel_previous``; ``misfire``: ``fire_once`` (default),
        ``skip``, ``catch_up``; ``labels`` go on every run it starts."""
        body = _schedule_body(id=id, cron=cron, timezone=timezone, plan=plan, input=input, overlap=overlap,
                              misfire=misfire, catch_up_max=catch_up_max, paused=paused or None,
                              labels=labels or None)
        return Schedule.model_validate(self._c._request("POST", "/v1/schedules", body))

    def list(self) -> list[Schedule]:
        """Every schedule."""
        return [Schedule.model_validate(s) for s in self._c._request("GET", "/v1/schedules")["schedules"]]

    def get(self, schedule_id: str) -> Schedule:
        """The schedule with its most recent ticks."""
        return Schedule.model_validate(self._c._request("GET", f"/v1/schedules/{_seg(schedule_id)}"))

    def update(self, schedule_id: str, **fields: Any) -> Schedule:
        """Changes ``cron``, ``timezone``, ``plan``, ``input``, ``overlap``, ``misfire`` or ``catch_up_max``."""
        body = _schedule_body(**fields)
        return Schedule.model_validate(self._c._request("PATCH", f"/v1/schedules/{_seg(schedule_id)}", body))

    def pause(self, schedule_id: str) -> Schedule:
        """Stops the ticks until :meth:`resume`."""
        return Schedule.model_validate(self._c._request("POST", f"/v1/schedules/{_seg(schedule_id)}:pause"))

    def resume(self, schedule_id: str) -> Schedule:
        """Resumes from now (ticks inside the pause never fire)."""
        return Schedule.model_validate(self._c._request("POST", f"/v1/schedules/{_seg(schedule_id)}:resume"))

    def trigger(self, schedule_id: str) -> str:
        """Starts a run now under the schedule's overlap policy, as a tick would (also while it is paused);
        returns the run id. Raises :class:`cairn.Conflict` (``overlap_skipped``) when the policy is ``skip`` and
        a run of the schedule is still open."""
        return self._c._request("POST", f"/v1/schedules/{_seg(schedule_id)}:trigger")["run_id"]

    def delete(self, schedule_id: str) -> None:
        """Deletes the schedule (its runs stay)."""
        self._c._request("DELETE", f"/v1/schedules/{_seg(schedule_id)}")

    def next(self, schedule_id: str, count: int = 5) -> list[ScheduleFire]:
        """The coming ``count`` fire times."""
        body = self._c._request("GET", f"/v1/schedules/{_seg(schedule_id)}/next", params={"count": count})
        return [ScheduleFire.model_validate(f) for f in body["next"]]


class AsyncClient(_Common):
    """:class:`Client` for asyncio code: the same methods, as coroutines (``events`` is an async iterator).

    >>> async with cairn.AsyncClient(url, token) as client:
    ...     run = await client.run(plan, timeout=60)
    """

    def __init__(self, url: str = DEFAULT_URL, token: Optional[str] = None, *, timeout: float = 30.0,
                 transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        super().__init__(url, token)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=timeout,
                                       transport=transport)
        #: Cron schedules, as in :class:`Client`.
        self.schedules = AsyncSchedules(self)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connections."""
        await self._http.aclose()

    async def _request(self, method: str, path: str, body: Any = None,
                       params: Optional[dict[str, Any]] = None) -> Any:
        try:
            response = await self._http.request(method, path, json=body, params=params)
        except httpx.TransportError as e:
            raise _unreachable(self.url, e) from e
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    async def submit(self, plan: Any, input: Any = None, idempotency_key: Optional[str] = None,
                     labels: Optional[dict[str, str]] = None) -> Run:
        """See :meth:`Client.submit`."""
        body = _submit_body(plan, input, idempotency_key, labels)
        return Run.model_validate(await self._request("POST", "/v1/runs", body))

    async def run(self, plan: Any, input: Any = None, idempotency_key: Optional[str] = None,
                  timeout: Optional[float] = None, labels: Optional[dict[str, str]] = None) -> Run:
        """See :meth:`Client.run`."""
        submitted = await self.submit(plan, input=input, idempotency_key=idempotency_key, labels=labels)
        return await self.wait(submitted.id, timeout=timeout)

    async def get(self, run_id: str) -> Run:
        """See :meth:`Client.get`."""
        return Run.model_validate(await self._request("GET", f"/v1/runs/{_seg(run_id)}"))

    async def summary(self, run_id: str) -> Run:
        """See :meth:`Client.summary`."""
        body = await self._request("GET", f"/v1/runs/{_seg(run_id)}", params={"view": "summary"})
        return Run.model_validate(body)

    async def runs(self, status: Any = None, limit: int = 50, offset: int = 0, **filters: Any) -> list[Run]:
        """See :meth:`Client.runs`."""
        params = _filters.query(status, **filters) + [("limit", str(limit)), ("offset", str(offset))]
        return [Run.model_validate(r) for r in (await self._request("GET", "/v1/runs", params=params))["runs"]]

    async def runs_page(self, limit: int = 50, cursor: Optional[str] = None, **filters: Any) -> RunPage:
        """See :meth:`Client.runs_page`."""
        params = _filters.query(**filters) + [("limit", str(limit))]
        if cursor:
            params.append(("cursor", cursor))
        return RunPage.model_validate(await self._request("GET", "/v1/runs", params=params))

    async def iter_runs(self, page_size: int = 100, **filters: Any) -> AsyncIterator[Run]:
        """See :meth:`Client.iter_runs`."""
        cursor: Optional[str] = None
        while True:
            page = await self.runs_page(limit=page_size, cursor=cursor, **filters)
            for run in page.runs:
                yield run
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def cancel_runs(self, dry_run: bool = False, by: Optional[str] = None, reason: Optional[str] = None,
                          **filters: Any) -> BulkResult:
        """See :meth:`Client.cancel_runs`."""
        return await self._bulk("cancel", dry_run, by, reason, filters)

    async def redrive_runs(self, dry_run: bool = False, by: Optional[str] = None, reason: Optional[str] = None,
                           **filters: Any) -> BulkResult:
        """See :meth:`Client.redrive_runs`."""
        return await self._bulk("redrive", dry_run, by, reason, filters)

    async def retry_failed_runs(self, dry_run: bool = False, by: Optional[str] = None,
                                reason: Optional[str] = None, **filters: Any) -> BulkResult:
        """See :meth:`Client.retry_failed_runs`."""
        return await self._bulk("retry-failed", dry_run, by, reason, filters)

    async def _bulk(self, verb: str, dry_run: bool, by: Optional[str], reason: Optional[str],
                    filters: dict) -> BulkResult:
        body = _filters.bulk_body(dry_run, by, reason, **filters)
        return BulkResult.model_validate(await self._request("POST", f"/v1/runs:{verb}", body))

    async def wait(self, run_id: str, timeout: Optional[float] = None) -> Run:
        """See :meth:`Client.wait`."""
        try:
            return await asyncio.wait_for(self._wait(run_id), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"run {run_id} did not finish within {timeout} s") from None

    async def _wait(self, run_id: str) -> Run:
        after, delay = 0, 0.1
        while True:
            run = await self.summary(run_id)
            if run.finished:
                return await self.get(run_id)
            try:
                async for event in self.events(run_id, after):
                    after = event.id
                    if event.kind in _FINAL_EVENTS:
                        return await self.get(run_id)
                delay = 0.1
            except (httpx.TransportError, Unavailable):
                await asyncio.sleep(delay + random.uniform(0, delay))
                delay = min(delay * 2, 2.0)

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[Event]:
        """See :meth:`Client.events`."""
        headers = {"Accept": "text/event-stream"}
        timeout = httpx.Timeout(self._http.timeout.connect or 30.0, read=None)
        params = {"after": after} if after else None
        async with self._http.stream("GET", f"/v1/runs/{_seg(run_id)}/events", headers=headers, params=params,
                                     timeout=timeout) as response:
            if response.status_code >= 400:
                await response.aread()
                raise _error(response)
            parser = _Sse()
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event

    async def history(self, run_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        """See :meth:`Client.history`."""
        body = await self._request("GET", f"/v1/runs/{_seg(run_id)}/events",
                                   params={"after": after, "limit": limit})
        return [Event.model_validate(e) for e in body["events"]]

    async def cancel(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """See :meth:`Client.cancel`."""
        body = _decision(by, reason=reason)
        return Run.model_validate(await self._request("POST", f"/v1/runs/{_seg(run_id)}:cancel", body))

    async def _decide(self, run_id: str, step_id: str, verb: str, by: Optional[str],
                      **extra: Any) -> Run:
        body = _decision(by, **extra)
        path = f"/v1/runs/{_seg(run_id)}/steps/{_seg(step_id)}:{verb}"
        return Run.model_validate(await self._request("POST", path, body))

    async def approve(self, run_id: str, step_id: str, by: Optional[str] = None) -> Run:
        """See :meth:`Client.approve`."""
        return await self._decide(run_id, step_id, "approve", by)

    async def reject(self, run_id: str, step_id: str, by: Optional[str] = None) -> Run:
        """See :meth:`Client.reject`."""
        return await self._decide(run_id, step_id, "reject", by)

    async def retry(self, run_id: str, step_id: str, by: Optional[str] = None, *, args: Any = None,
                    reason: Optional[str] = None) -> Run:
        """See :meth:`Client.retry`."""
        return await self._decide(run_id, step_id, "retry", by, args=args, reason=reason)

    async def redrive(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """See :meth:`Client.redrive`."""
        path = f"/v1/runs/{_seg(run_id)}:redrive"
        return Run.model_validate(await self._request("POST", path, _decision(by, reason=reason)))

    async def pause(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """See :meth:`Client.pause`."""
        path = f"/v1/runs/{_seg(run_id)}:pause"
        return Run.model_validate(await self._request("POST", path, _decision(by, reason=reason)))

    async def resume(self, run_id: str, by: Optional[str] = None, *, reason: Optional[str] = None) -> Run:
        """See :meth:`Client.resume`."""
        path = f"/v1/runs/{_seg(run_id)}:resume"
        return Run.model_validate(await self._request("POST", path, _decision(by, reason=reason)))

    async def rerun(self, run_id: str, from_step: str, by: Optional[str] = None, *,
                    reason: Optional[str] = None) -> Run:
        """See :meth:`Client.rerun`."""
        body = _decision(by, reason=reason, **{"from": from_step})
        return Run.model_validate(await self._request("POST", f"/v1/runs/{_seg(run_id)}:rerun", body))

    async def skip(self, run_id: str, step_id: str, by: Optional[str] = None, *,
                   reason: Optional[str] = None) -> Run:
        """See :meth:`Client.skip`."""
        return await self._decide(run_id, step_id, "skip", by, reason=reason)

    async def fail(self, run_id: str, step_id: str, by: Optional[str] = None, *,
                   reason: Optional[str] = None) -> Run:
        """See :meth:`Client.fail`."""
        return await self._decide(run_id, step_id, "fail", by, reason=reason)

    async def validate(self, plan: Any) -> Validation:
        """See :meth:`Client.validate`."""
        return Validation.model_validate(
            await self._request("POST", "/v1/plans:validate", {"plan": load_plan(plan)}))

    async def draft(self, text: str, timezone: Optional[str] = None, max_rounds: Optional[int] = None) -> Draft:
        """See :meth:`Client.draft`."""
        body: dict[str, Any] = {"text": text}
        if timezone is not None:
            body["timezone"] = timezone
        if max_rounds is not None:
            body["max_rounds"] = max_rounds
        return Draft.model_validate(await self._request("POST", "/v1/plans:draft", body))

    async def actions(self) -> list[ActionInfo]:
        """See :meth:`Client.actions`."""
        return [ActionInfo.model_validate(a) for a in (await self._request("GET", "/v1/actions"))["actions"]]

    async def send_event(self, name: str, key: Optional[str] = None, payload: Any = None) -> dict[str, Any]:
        """See :meth:`Client.send_event`."""
        body: dict[str, Any] = {"name": name, "payload": payload}
        if key is not None:
            body["key"] = key
        return await self._request("POST", "/v1/events", body)

    async def approvals(self, limit: int = 100) -> list[dict[str, Any]]:
        """See :meth:`Client.approvals`."""
        return (await self._request("GET", "/v1/approvals", params={"limit": limit}))["approvals"]


class AsyncSchedules:
    """Cron schedules (``async_client.schedules``); see :class:`Schedules`."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(self, cron: str, plan: Any, *, id: Optional[str] = None, timezone: Optional[str] = None,
                     input: Any = None, overlap: Optional[str] = None, misfire: Optional[str] = None,
                     catch_up_max: Optional[int] = None, paused: bool = False,
                     labels: Optional[dict[str, str]] = None) -> Schedule:
        """See :meth:`Schedules.create`."""
        body = _schedule_body(id=id, cron=cron, timezone=timezone, plan=plan, input=input, overlap=overlap,
                              misfire=misfire, catch_up_max=catch_up_max, paused=paused or None,
                              labels=labels or None)
        return Schedule.model_validate(await self._c._request("POST", "/v1/schedules", body))

    async def list(self) -> list[Schedule]:
        """See :meth:`Schedules.list`."""
        return [Schedule.model_validate(s) for s in (await self._c._request("GET", "/v1/schedules"))["schedules"]]

    async def get(self, schedule_id: str) -> Schedule:
        """See :meth:`Schedules.get`."""
        return Schedule.model_validate(await self._c._request("GET", f"/v1/schedules/{_seg(schedule_id)}"))

    async def update(self, schedule_id: str, **fields: Any) -> Schedule:
        """See :meth:`Schedules.update`."""
        body = _schedule_body(**fields)
        return Schedule.model_validate(await self._c._request("PATCH", f"/v1/schedules/{_seg(schedule_id)}", body))

    async def pause(self, schedule_id: str) -> Schedule:
        """See :meth:`Schedules.pause`."""
        return Schedule.model_validate(await self._c._request("POST", f"/v1/schedules/{_seg(schedule_id)}:pause"))

    async def trigger(self, schedule_id: str) -> str:
        """See :meth:`Schedules.trigger`."""
        return (await self._c._request("POST", f"/v1/schedules/{_seg(schedule_id)}:trigger"))["run_id"]

    async def resume(self, schedule_id: str) -> Schedule:
        """See :meth:`Schedules.resume`."""
        path = f"/v1/schedules/{_seg(schedule_id)}:resume"
        return Schedule.model_validate(await self._c._request("POST", path))

    async def delete(self, schedule_id: str) -> None:
        """See :meth:`Schedules.delete`."""
        await self._c._request("DELETE", f"/v1/schedules/{_seg(schedule_id)}")

    async def next(self, schedule_id: str, count: int = 5) -> list[ScheduleFire]:
        """See :meth:`Schedules.next`."""
        body = await self._c._request("GET", f"/v1/schedules/{_seg(schedule_id)}/next", params={"count": count})
        return [ScheduleFire.model_validate(f) for f in body["next"]]

