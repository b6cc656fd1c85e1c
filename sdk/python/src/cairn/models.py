"""Typed results of the REST API. Fields the server adds later are kept (``model_extra``), never refused."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Run",
    "RunPage",
    "AttentionStep",
    "BulkResult",
    "BulkOutcome",
    "Step",
    "Failure",
    "RunFailure",
    "Timer",
    "Event",
    "Diagnostic",
    "Validation",
    "ActionInfo",
    "Schedule",
    "ScheduleFire",
    "Draft",
    "RUN_FINAL",
    "STEP_FINAL",
]

#: Run statuses that are final.
RUN_FINAL = frozenset({"succeeded", "failed", "cancelled"})
#: Step statuses that are final (``outcome_unknown`` is not: it waits for an operator).
STEP_FINAL = frozenset({"succeeded", "failed", "skipped", "cancelled"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=False, protected_namespaces=())


def _at(ms: Optional[int]) -> Optional[_dt.datetime]:
    return None if ms is None else _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)


class Failure(_Model):
    """A failure record: how one attempt of a step failed."""

    run_id: Optional[str] = None
    step_id: Optional[str] = None
    attempt: Optional[int] = None
    action: Optional[str] = None
    worker_id: Optional[str] = None
    #: Stable code: ``action_error``, ``timeout``, ``heartbeat_timeout``, ``lease_lost``, ``invalid_output``, …
    code: str
    message: str = ""
    #: Structured details (plain JSON): for ``action_error`` from the Python SDK, ``exception`` and ``traceback``.
    details: Any = None
    retryable: bool = False
    #: The wait the action asked for before the next attempt (``Retryable(retry_after=…)``), in milliseconds.
    retry_after_ms: Optional[int] = None
    #: ``retry``, ``repair_args``, ``replan``, ``ask_user`` or ``skip``.
    suggestion: Optional[str] = None
    degraded: bool = False
    started_at_ms: Optional[int] = None
    ended_at_ms: Optional[int] = None
    #: RFC 3339 forms, as the step's ``error`` carries them.
    started_at: Optional[str] = None
    ended_at: Optional[str] = None

    @property
    def retry_after(self) -> Optional[float]:
        """``retry_after_ms`` in seconds."""
        return None if self.retry_after_ms is None else self.retry_after_ms / 1000

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class RunFailure(_Model):
    """The root cause of a failed run: its first failed step (plan order)."""

    step_id: Optional[str] = None
    code: Optional[str] = None
    message: Optional[str] = None
    suggestion: Optional[str] = None
    failed_steps: Optional[int] = None


class Timer(_Model):
    """A step's ``not_before`` timer."""

    not_before_at_ms: Optional[int] = None
    local: Optional[str] = None


class Step(_Model):
    """A step of a run, as ``GET /v1/runs/{id}`` shows it."""

    id: str
    action: Optional[str] = None
    #: ``pending``, ``ready``, ``running``, ``waiting_approval``, ``succeeded``, ``failed``, ``skipped``,
    #: ``cancelled`` or ``outcome_unknown``.
    status: str
    #: Attempts started so far.
    attempts: int = 0
    #: The output (plain JSON) once succeeded.
    output: Any = None
    #: The failure record of the attempt that ended the step, when it failed.
    error: Optional[Failure] = None
    #: Every failure record, oldest first.
    failures: list[Failure] = []
    timer: Optional[Timer] = None
    #: When the step may next be claimed (a retry's backoff or ``Retry-After``), ms since the epoch.
    available_at_ms: Optional[int] = None
    #: The last checkpoint saved (plain JSON).
    checkpoint: Any = None
    #: Its args as the run holds them (the plan's, or an operator's repair), placeholders unresolved.
    args: Any = None
    #: How many times an operator repaired its args (0: the plan's).
    args_revision: int = 0
    #: When its current (or last) attempt started, and when it became final, ms since the epoch.
    started_at_ms: Optional[int] = None
    finished_at_ms: Optional[int] = None

    @property
    def finished(self) -> bool:
        """Whether the step is in a final state."""
        return self.status in STEP_FINAL

    @property
    def available_at(self) -> Optional[_dt.datetime]:
        """``available_at_ms`` as a UTC datetime."""
        return _at(self.available_at_ms)


class AttentionStep(_Model):
    """A step that waits for an operator (``runs(attention=True)``)."""

    step_id: str
    #: ``outcome_unknown``, ``waiting_approval``, ``retrying`` or ``waiting_for_worker``.
    reason: str
    #: When a ready step is (or was) due, or an approval's deadline, ms since the epoch.
    available_at_ms: Optional[int] = None


class Run(_Model):
    """A run. From ``get``/``submit``/``wait`` it has its ``steps``; listed runs carry the summary only."""

    id: str
    #: ``pending``, ``running``, ``waiting``, ``paused``, ``succeeded``, ``failed`` or ``cancelled``.
    status: str
    plan_id: Optional[str] = None
    step_count: Optional[int] = None
    open_steps: Optional[int] = None
    failure: Optional[RunFailure] = None
    created_at_ms: Optional[int] = None
    finished_at_ms: Optional[int] = None
    #: The run this one reran from a step (:meth:`cairn.Client.rerun`), if any.
    rerun_of: Optional[str] = None
    #: The run's input (``get``/``submit``/``wait`` only).
    input: Any = None
    #: The plan's goal.
    goal: Optional[str] = None
    #: Labels set at submission (or by the schedule that started the run).
    labels: dict[str, str] = {}
    #: Listed with ``attention=True``: the steps that wait for an operator and why.
    attention: list[AttentionStep] = []
    steps: list[Step] = []

    @property
    def finished(self) -> bool:
        """Whether the run reached a final status."""
        return self.status in RUN_FINAL

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def step(self, step_id: str) -> Step:
        """The step with id ``step_id``; ``KeyError`` when the run has none (or was read as a summary)."""
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(f"run {self.id} has no step {step_id!r} (steps: {', '.join(s.id for s in self.steps)})")

    @property
    def outputs(self) -> dict[str, Any]:
        """Every succeeded step's output, by step id."""
        return {s.id: s.output for s in self.steps if s.status == "succeeded"}


class Event(_Model):
    """An entry of a run's history (``step_started``, ``step_succeeded``, ``run_succeeded``, …)."""

    id: int
    step_id: Optional[str] = None
    kind: str
    data: Any = None
    at_ms: Optional[int] = None


class Diagnostic(_Model):
    """A validation problem: stable ``code``, where (``step_id``, JSON ``pointer``), ``message`` and ``hint``."""

    severity: str = "error"
    code: str
    step_id: Optional[str] = None
    pointer: Optional[str] = None
    message: str = ""
    hint: Optional[str] = None

    def __str__(self) -> str:
        where = f" at {self.pointer}" if self.pointer else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{self.severity} {self.code}{where}: {self.message}{hint}"


class Validation(_Model):
    """The result of ``validate``: ``valid`` and every diagnostic (warnings included)."""

    valid: bool
    diagnostics: list[Diagnostic] = []

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


class ActionInfo(_Model):
    """An action the orchestrator accepts in plans (built-in or registered by a worker)."""

    name: str
    version: Optional[str] = None
    description: Optional[str] = None
    args_schema: Any = None
    output_schema: Any = None
    effect: Optional[str] = None
    grounded_args: list[str] = []


class Schedule(_Model):
    """A cron schedule that starts a run of its plan at each tick."""

    id: str
    cron: str
    timezone: Optional[str] = None
    plan: Any = None
    input: Any = None
    overlap: Optional[str] = None
    misfire: Optional[str] = None
    catch_up_max: Optional[int] = None
    paused: bool = False
    #: Labels put on every run the schedule starts.
    labels: dict[str, str] = {}
    next_fire_at_ms: Optional[int] = None
    last_fire_at_ms: Optional[int] = None
    last_run_id: Optional[str] = None
    created_at_ms: Optional[int] = None
    updated_at_ms: Optional[int] = None
    next_fire_at: Optional[str] = None
    next_fire_local: Optional[str] = None
    #: The most recent ticks (``get`` only).
    ticks: Optional[list[dict[str, Any]]] = None


class ScheduleFire(_Model):
    """A coming fire time of a schedule."""

    at: str
    at_ms: int
    local: Optional[str] = None


class Draft(_Model):
    """A plan drafted by the planner (``draft``), with every round's draft and diagnostics."""

    valid: bool
    plan: Any = None
    rounds: list[dict[str, Any]] = []


class RunPage(_Model):
    """One page of ``runs_page``: the runs, and the cursor of the next page (``None`` on the last)."""

    runs: list[Run] = []
    next_cursor: Optional[str] = None


class BulkOutcome(_Model):
    """What a bulk operation did to one run."""

    id: str
    changed: bool
    #: ``cancelled``, ``already_finished``, ``redriven``, ``retried``, ``no_failed_steps`` or ``refused``.
    outcome: str
    #: Why a run was refused.
    message: Optional[str] = None
    #: The steps redriven or retried.
    steps: list[str] = []


class BulkResult(_Model):
    """The answer of a bulk operation: how many runs matched, and (unless a dry run) what happened to each."""

    matched: int
    dry_run: bool = False
    changed: int = 0
    runs: list[BulkOutcome] = []
    #: More runs matched than one request changes (1,000): call again to go on.
    more: bool = False
