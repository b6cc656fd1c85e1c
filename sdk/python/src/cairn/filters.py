"""The run filter of ``GET /v1/runs`` and of the bulk operations, as keyword arguments.

``labels`` is a ``{key: value}`` mapping (every label must match); ``created_after`` and ``created_before`` take
milliseconds since the epoch or an aware :class:`datetime.datetime`; ``q`` is a case-insensitive substring of the
goal; ``attention=True`` keeps the runs with a step waiting for an operator.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Optional, Sequence, Union

Instant = Union[int, _dt.datetime]


def _ms(value: Instant) -> int:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise ValueError("created_after/created_before: give an aware datetime (with a time zone)")
        return int(value.timestamp() * 1000)
    return int(value)


def _statuses(status: Union[None, str, Sequence[str]]) -> list[str]:
    if status is None:
        return []
    return [status] if isinstance(status, str) else list(status)


def _labels(labels: Union[None, Mapping[str, str], Sequence[str]]) -> list[str]:
    """``{key: value}``, or ``["key:value", …]`` as the query string writes them."""
    if labels is None:
        return []
    if isinstance(labels, Mapping):
        return [f"{k}:{v}" for k, v in labels.items()]
    if isinstance(labels, str) or not all(isinstance(l, str) and ":" in l for l in labels):
        raise TypeError("labels: give a {key: value} mapping, or a list of 'key:value' strings")
    return list(labels)


def query(status: Union[None, str, Sequence[str]] = None, labels: Union[None, Mapping[str, str], Sequence[str]] = None,
          q: Optional[str] = None, action: Optional[str] = None, created_after: Optional[Instant] = None,
          created_before: Optional[Instant] = None, idempotency_key: Optional[str] = None,
          attention: bool = False) -> list[tuple[str, str]]:
    """The query string pairs of ``GET /v1/runs`` (``label`` and ``status`` repeat)."""
    pairs = [("status", s) for s in _statuses(status)]
    pairs += [("label", label) for label in _labels(labels)]
    single: dict[str, Any] = {"q": q, "action": action, "idempotency_key": idempotency_key}
    single["created_after"] = None if created_after is None else _ms(created_after)
    single["created_before"] = None if created_before is None else _ms(created_before)
    pairs += [(k, str(v)) for k, v in single.items() if v is not None]
    if attention:
        pairs.append(("attention", "true"))
    return pairs


def bulk_body(dry_run: bool, by: Optional[str], reason: Optional[str], **filters: Any) -> dict[str, Any]:
    """The body of ``POST /v1/runs:cancel|:redrive|:retry-failed``."""
    status = _statuses(filters.pop("status", None))
    if filters.get("labels") is not None and not isinstance(filters["labels"], Mapping):
        filters["labels"] = dict(label.split(":", 1) for label in _labels(filters["labels"]))
    chosen = {k: v for k, v in filters.items() if v not in (None, False, {})}
    for name in ("created_after", "created_before"):
        if name in chosen:
            chosen[name] = _ms(chosen[name])
    if status:
        chosen["status"] = status
    body: dict[str, Any] = {"filter": chosen, "dry_run": dry_run}
    body.update({k: v for k, v in {"by": by, "reason": reason}.items() if v is not None})
    return body
