from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Effect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EFFECT_UNSPECIFIED: _ClassVar[Effect]
    EFFECT_READ: _ClassVar[Effect]
    EFFECT_IDEMPOTENT_WRITE: _ClassVar[Effect]
    EFFECT_NON_IDEMPOTENT: _ClassVar[Effect]

class ReportOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORT_OUTCOME_UNSPECIFIED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_SUCCEEDED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_RETRY_SCHEDULED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_FAILED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_OUTCOME_UNKNOWN: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_STALE: _ClassVar[ReportOutcome]
EFFECT_UNSPECIFIED: Effect
EFFECT_READ: Effect
EFFECT_IDEMPOTENT_WRITE: Effect
EFFECT_NON_IDEMPOTENT: Effect
REPORT_OUTCOME_UNSPECIFIED: ReportOutcome
REPORT_OUTCOME_SUCCEEDED: ReportOutcome
REPORT_OUTCOME_RETRY_SCHEDULED: ReportOutcome
REPORT_OUTCOME_FAILED: ReportOutcome
REPORT_OUTCOME_OUTCOME_UNKNOWN: ReportOutcome
REPORT_OUTCOME_STALE: ReportOutcome

class ActionDescriptor(_message.Message):
    __slots__ = ("name", "version", "description", "args_schema_json", "output_schema_json", "effect", "grounded_args", "example_output_json", "recipient_args")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ARGS_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    GROUNDED_ARGS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_ARGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    args_schema_json: str
    output_schema_json: str
    effect: Effect
    grounded_args: _containers.RepeatedScalarFieldContainer[str]
    example_output_json: str
    recipient_args: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., args_schema_json: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., effect: _Optional[_Union[Effect, str]] = ..., grounded_args: _Optional[_Iterable[str]] = ..., example_output_json: _Optional[str] = ..., recipient_args: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("worker_id", "actions", "protocol_version")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    actions: _containers.RepeatedCompositeFieldContainer[ActionDescriptor]
    protocol_version: int
    def __init__(self, worker_id: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[ActionDescriptor, _Mapping]]] = ..., protocol_version: _Optional[int] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("lease_ttl_ms", "heartbeat_interval_ms", "protocol_version")
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    lease_ttl_ms: int
    heartbeat_interval_ms: int
    protocol_version: int
    def __init__(self, lease_ttl_ms: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., protocol_version: _Optional[int] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("run_id", "step_id", "attempt")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step_id: str
    attempt: int
    def __init__(self, run_id: _Optional[str] = ..., step_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("lease", "action", "args_json", "idempotency_key", "remaining_ms", "timeout_ms", "heartbeat_timeout_ms", "checkpoint_json", "traceparent", "recipients", "deliveries")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    RECIPIENTS_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    action: str
    args_json: str
    idempotency_key: str
    remaining_ms: int
    timeout_ms: int
    heartbeat_timeout_ms: int
    checkpoint_json: str
    traceparent: str
    recipients: _containers.RepeatedCompositeFieldContainer[AttemptRecipient]
    deliveries: _containers.RepeatedCompositeFieldContainer[DeliveryRecord]
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., action: _Optional[str] = ..., args_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., remaining_ms: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., heartbeat_timeout_ms: _Optional[int] = ..., checkpoint_json: _Optional[str] = ..., traceparent: _Optional[str] = ..., recipients: _Optional[_Iterable[_Union[AttemptRecipient, _Mapping]]] = ..., deliveries: _Optional[_Iterable[_Union[DeliveryRecord, _Mapping]]] = ...) -> None: ...

class AttemptRecipient(_message.Message):
    __slots__ = ("id", "recipient_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    recipient_json: str
    def __init__(self, id: _Optional[str] = ..., recipient_json: _Optional[str] = ...) -> None: ...

class DeliveryRecord(_message.Message):
    __slots__ = ("recipient_id", "channel", "status", "attempts", "last_error", "provider_message_id")
    RECIPIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    recipient_id: str
    channel: str
    status: str
    attempts: int
    last_error: str
    provider_message_id: str
    def __init__(self, recipient_id: _Optional[str] = ..., channel: _Optional[str] = ..., status: _Optional[str] = ..., attempts: _Optional[int] = ..., last_error: _Optional[str] = ..., provider_message_id: _Optional[str] = ...) -> None: ...

class ReportDeliveryRequest(_message.Message):
    __slots__ = ("worker_id", "lease", "recipient_id", "channel", "status", "tries", "last_error", "provider_message_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease: Lease
    recipient_id: str
    channel: str
    status: str
    tries: int
    last_error: str
    provider_message_id: str
    def __init__(self, worker_id: _Optional[str] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., recipient_id: _Optional[str] = ..., channel: _Optional[str] = ..., status: _Optional[str] = ..., tries: _Optional[int] = ..., last_error: _Optional[str] = ..., provider_message_id: _Optional[str] = ...) -> None: ...

class ReportDeliveryResponse(_message.Message):
    __slots__ = ("alive",)
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    alive: bool
    def __init__(self, alive: bool = ...) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("worker_id", "actions", "max_attempts", "wait_ms")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    max_attempts: int
    wait_ms: int
    def __init__(self, worker_id: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., max_attempts: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class PollResponse(_message.Message):
    __slots__ = ("attempts",)
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    def __init__(self, attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "lease", "checkpoint_json")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease: Lease
    checkpoint_json: str
    def __init__(self, worker_id: _Optional[str] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., checkpoint_json: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("alive",)
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    alive: bool
    def __init__(self, alive: bool = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("worker_id", "lease", "output_json", "next_max_attempts", "next_actions")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    NEXT_MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease: Lease
    output_json: str
    next_max_attempts: int
    next_actions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, worker_id: _Optional[str] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., output_json: _Optional[str] = ..., next_max_attempts: _Optional[int] = ..., next_actions: _Optional[_Iterable[str]] = ...) -> None: ...

class CompleteBatchRequest(_message.Message):
    __slots__ = ("worker_id", "items")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    items: _containers.RepeatedCompositeFieldContainer[CompleteRequest]
    def __init__(self, worker_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[CompleteRequest, _Mapping]]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class CompleteResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: ReportResponse
    error: ItemError
    def __init__(self, response: _Optional[_Union[ReportResponse, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class CompleteBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompleteResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CompleteResult, _Mapping]]] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("code", "message", "details_json", "retryable", "retry_after_ms", "did_not_take_effect", "degraded")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    DID_NOT_TAKE_EFFECT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    details_json: str
    retryable: bool
    retry_after_ms: int
    did_not_take_effect: bool
    degraded: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., details_json: _Optional[str] = ..., retryable: bool = ..., retry_after_ms: _Optional[int] = ..., did_not_take_effect: bool = ..., degraded: bool = ...) -> None: ...

class FailRequest(_message.Message):
    __slots__ = ("worker_id", "lease", "failure", "not_started")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    NOT_STARTED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease: Lease
    failure: Failure
    not_started: bool
    def __init__(self, worker_id: _Optional[str] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., not_started: bool = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ("outcome", "next")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    outcome: ReportOutcome
    next: _containers.RepeatedCompositeFieldContainer[Attempt]
    def __init__(self, outcome: _Optional[_Union[ReportOutcome, str]] = ..., next: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ...) -> None: ...
