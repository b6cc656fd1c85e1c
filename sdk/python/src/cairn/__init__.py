"""Cairn's Python SDK: serve your own actions to a Cairn orchestrator, and drive runs over its REST API.

Workers::

    import cairn

    worker = cairn.Worker("http://127.0.0.1:7401", token=os.environ.get("CAIRN_WORKER_TOKEN"))

    @worker.action("crm.lookup", effect="read")
    def lookup(args: LookupArgs, ctx: cairn.Context) -> Customer: ...

    worker.run()

Clients::

    with cairn.Client("http://127.0.0.1:7400", token=os.environ.get("CAIRN_API_TOKEN")) as client:
        run = client.run("plan.json", timeout=60)
        print(run.status, run.step("lookup").output)

Unit tests of handlers: :mod:`cairn.testing`.
"""

from .action import Action, FailureRecord, action
from .client import AsyncClient, Client
from .context import Cancelled, Context
from .errors import (
    ActionFailure,
    ApiError,
    Conflict,
    DidNotTakeEffect,
    InvalidPlan,
    NotFound,
    Permanent,
    Retryable,
    Unauthorized,
    Unavailable,
    WorkerRejected,
)
from .models import (
    ActionInfo,
    AttentionStep,
    BulkOutcome,
    BulkResult,
    RunPage,
    Diagnostic,
    Draft,
    Event,
    Failure,
    Run,
    RunFailure,
    Schedule,
    ScheduleFire,
    Step,
    Timer,
    Validation,
)
from .plan import load_plan
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "Worker",
    "Context",
    "Action",
    "action",
    "FailureRecord",
    "Cancelled",
    "ActionFailure",
    "Retryable",
    "Permanent",
    "DidNotTakeEffect",
    "WorkerRejected",
    "Client",
    "AsyncClient",
    "ApiError",
    "InvalidPlan",
    "Conflict",
    "NotFound",
    "Unauthorized",
    "Unavailable",
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
    "load_plan",
    "__version__",
]
