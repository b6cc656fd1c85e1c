"""JSON Schemas from type hints, conversion of return values to JSON, and a JSON Schema validator.

Schemas come from pydantic v2 (``model_json_schema`` for models, ``TypeAdapter.json_schema`` for dataclasses,
TypedDicts and other types) and are then *closed*: every object schema that lists ``properties`` and says nothing
about ``additionalProperties`` gets ``additionalProperties: false``, so a plan with a misspelt argument is refused
at submit rather than silently ignored.

The validator covers the JSON Schema (draft 2020-12) keywords that derived and hand-written action schemas use:
types, ``enum``/``const``, object, array, string and number constraints, ``$ref`` within the document
(``#/$defs/…``, ``#/definitions/…``), ``allOf``/``anyOf``/``oneOf``/``not``, ``if``/``then``/``else``. ``format``
is an annotation only, as the 2020-12 default says. Unknown keywords are ignored.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
import typing
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import pydantic

__all__ = [
    "schema_for",
    "close_schema",
    "validate",
    "to_json_value",
    "NotJSONSerializable",
    "SchemaError",
]

# Keywords whose value is a subschema / a map of subschemas / a list of subschemas.
_ONE = ("additionalProperties", "items", "additionalItems", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")


class SchemaError(TypeError):
    """A type hint has no JSON Schema (pydantic cannot describe it)."""


class NotJSONSerializable(TypeError):
    """A value cannot be turned into JSON; ``path`` is a JSON pointer to the offending part."""

    def __init__(self, path: str, type_name: str, reason: str | None = None) -> None:
        where = path or "/"
        super().__init__(reason or f"a value of type {type_name} at {where} is not JSON-serialisable")
        self.path = where
        self.type_name = type_name


def _is_untyped(tp: Any) -> bool:
    return tp is None or tp is inspect.Parameter.empty or tp is Any or tp is object


def _is_plain_mapping(tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    return origin in (dict, Mapping) or (isinstance(origin, type) and issubclass(origin, Mapping)
                                          and not _is_typeddict(tp))


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def is_model(tp: Any) -> bool:
    """Whether ``tp`` is a pydantic model class."""
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


@lru_cache(maxsize=512)
def _adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(tp)


def adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    """A cached ``TypeAdapter`` (types that cannot be hashed get a fresh one)."""
    try:
        return _adapter(tp)
    except TypeError:
        return pydantic.TypeAdapter(tp)


def schema_for(tp: Any, mode: str = "validation") -> dict[str, Any] | None:
    """The closed JSON Schema of type hint ``tp``; ``None`` when the hint says nothing (missing, ``Any``).

    ``mode`` is pydantic's: ``"validation"`` for args (what is accepted), ``"serialization"`` for outputs (what is
    produced). A bare ``dict`` gives ``{"type": "object"}``.
    """
    if _is_untyped(tp):
        return None
    if _is_plain_mapping(tp) and not typing.get_args(tp):
        return {"type": "object"}
    try:
        if is_model(tp):
            schema = tp.model_json_schema(mode=mode)  # type: ignore[arg-type]
        else:
            schema = adapter(tp).json_schema(mode=mode)  # type: ignore[arg-type]
    except pydantic.PydanticUserError as e:  # pragma: no cover - depends on the type
        raise SchemaError(f"no JSON Schema for {tp!r}: {e}") from e
    except pydantic.errors.PydanticInvalidForJsonSchema as e:
        raise SchemaError(f"no JSON Schema for {tp!r}: {e}") from e
    return close_schema(schema)


def close_schema(schema: Any) -> Any:
    """Returns ``schema`` with ``additionalProperties: false`` on every object schema that lists ``properties``
    and leaves ``additionalProperties`` unsaid (a copy; the argument is not changed)."""
    if isinstance(schema, list):
        return [close_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ONE:
            out[key] = close_schema(value)
        elif key in _MAP and isinstance(value, dict):
            out[key] = {k: close_schema(v) for k, v in value.items()}
        elif key in _LIST and isinstance(value, list):
            out[key] = [close_schema(v) for v in value]
        else:
            out[key] = value
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


# --- values to JSON ---------------------------------------------------------------------------------------------


def to_json_value(value: Any, path: str = "") -> Any:
    """``value`` as plain JSON (dicts with string keys, lists, str, int, float, bool, None).

    Pydantic models are dumped with ``model_dump(mode="json", by_alias=True)`` and dataclasses through pydantic,
    so their ``datetime``, ``UUID``, ``Enum`` … fields become JSON; tuples become lists. Anything else (a bare
    ``datetime``, a set, bytes, an object) raises :class:`NotJSONSerializable` naming where it is, as does a
    NaN or an infinity (JSON has neither).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSONSerializable(path, "float", f"the number at {path or '/'} is {value}: JSON has no NaN or "
                                                    "infinity")
        return float(value)
    if isinstance(value, pydantic.BaseModel):
        try:
            return to_json_value(value.model_dump(mode="json", by_alias=True), path)
        except pydantic.PydanticSerializationError as e:
            raise NotJSONSerializable(path, type(value).__name__, f"{type(value).__name__} at {path or '/'}: {e}")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            dumped = adapter(type(value)).dump_python(value, mode="json")
        except (pydantic.PydanticSerializationError, pydantic.PydanticSchemaGenerationError) as e:
            raise NotJSONSerializable(path, type(value).__name__, f"{type(value).__name__} at {path or '/'}: {e}")
        return to_json_value(dumped, path)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJSONSerializable(f"{path}/{key}", type(key).__name__,
                                          f"the key {key!r} at {path or '/'} is a {type(key).__name__}; JSON object "
                                          "keys are strings")
            out[key] = to_json_value(item, f"{path}/{_escape(key)}")
        return out
    if isinstance(value, (list, tuple)):
        return [to_json_value(item, f"{path}/{i}") for i, item in enumerate(value)]
    raise NotJSONSerializable(path, type(value).__name__)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def dumps(value: Any) -> str:
    """Compact JSON text of a plain JSON value."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


# --- validation -------------------------------------------------------------------------------------------------


def validate(instance: Any, schema: Any) -> list[str]:
    """Every way ``instance`` (plain JSON) breaks ``schema``, as ``"<pointer>: <reason>"``; empty when it
    conforms. ``None`` or ``{}`` as the schema accepts anything."""
    if schema is None:
        return []
    errors: list[str] = []
    _Validator(schema).check(instance, schema, "", errors)
    return errors


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Validator:
    def __init__(self, root: Any) -> None:
        self.root = root

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise ValueError(f"only local $ref is supported, got {ref!r}")
        node = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def ok(self, instance: Any, schema: Any) -> bool:
        errors: list[str] = []
        self.check(instance, schema, "", errors)
        return not errors

    def check(self, v: Any, s: Any, at: str, errors: list[str]) -> None:  # noqa: C901 - one keyword per branch
        if s is True or s is None:
            return
        if s is False:
            errors.append(f"{at or '/'}: no value is allowed here")
            return
        if not isinstance(s, dict):
            return
        if "$ref" in s:
            try:
                target = self.resolve(s["$ref"])
            except (KeyError, IndexError, ValueError) as e:
                errors.append(f"{at or '/'}: the schema's $ref {s['$ref']!r} cannot be resolved ({e})")
            else:
                self.check(v, target, at, errors)
        where = at or "/"
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(_TYPES.get(t, lambda _v: True)(v) for t in types):
                errors.append(f"{where}: {_short(v)} is not of type {' or '.join(map(str, types))}")
                return
        if "enum" in s and not any(_json_equal(v, e) for e in s["enum"]):
            errors.append(f"{where}: {_short(v)} is not one of {_short(s['enum'])}")
        if "const" in s and not _json_equal(v, s["const"]):
            errors.append(f"{where}: {_short(v)} is not {_short(s['const'])}")
        for sub in s.get("allOf", []):
            self.check(v, sub, at, errors)
        if "anyOf" in s and not any(self.ok(v, sub) for sub in s["anyOf"]):
            errors.append(f"{where}: {_short(v)} matches none of the allowed schemas (anyOf)")
        if "oneOf" in s:
            matched = sum(1 for sub in s["oneOf"] if self.ok(v, sub))
            if matched != 1:
                errors.append(f"{where}: {_short(v)} matches {matched} of the oneOf schemas, not exactly one")
        if "not" in s and self.ok(v, s["not"]):
            errors.append(f"{where}: {_short(v)} matches a schema it must not (not)")
        if "if" in s:
            branch = s.get("then") if self.ok(v, s["if"]) else s.get("else")
            if branch is not None:
                self.check(v, branch, at, errors)
        if isinstance(v, dict):
            self.check_object(v, s, at, errors)
        elif isinstance(v, list):
            self.check_array(v, s, at, errors)
        elif isinstance(v, str):
            self.check_string(v, s, where, errors)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            self.check_number(v, s, where, errors)

    def check_object(self, v: dict[str, Any], s: dict[str, Any], at: str, errors: list[str]) -> None:
        where = at or "/"
        for name in s.get("required", []):
            if name not in v:
                errors.append(f"{where}: the required property {name!r} is missing")
        for name, deps in s.get("dependentRequired", {}).items():
            if name in v:
                for dep in deps:
                    if dep not in v:
                        errors.append(f"{where}: {dep!r} is required when {name!r} is present")
        if "minProperties" in s and len(v) < s["minProperties"]:
            errors.append(f"{where}: fewer than {s['minProperties']} properties")
        if "maxProperties" in s and len(v) > s["maxProperties"]:
            errors.append(f"{where}: more than {s['maxProperties']} properties")
        props = s.get("properties", {})
        patterns = s.get("patternProperties", {})
        for key, item in v.items():
            child = f"{at}/{_escape(key)}"
            matched = False
            if key in props:
                matched = True
                self.check(item, props[key], child, errors)
            for pattern, sub in patterns.items():
                if re.search(pattern, key):
                    matched = True
                    self.check(item, sub, child, errors)
            if not matched and "additionalProperties" in s:
                extra = s["additionalProperties"]
                if extra is False:
                    errors.append(f"{where}: the property {key!r} is not allowed (additionalProperties: false)")
                else:
                    self.check(item, extra, child, errors)
            if "propertyNames" in s:
                self.check(key, s["propertyNames"], child, errors)
        for name, sub in s.get("dependentSchemas", {}).items():
            if name in v:
                self.check(v, sub, at, errors)

    def check_array(self, v: list[Any], s: dict[str, Any], at: str, errors: list[str]) -> None:
        where = at or "/"
        if "minItems" in s and len(v) < s["minItems"]:
            errors.append(f"{where}: fewer than {s['minItems']} items")
        if "maxItems" in s and len(v) > s["maxItems"]:
            errors.append(f"{where}: more than {s['maxItems']} items")
        prefix = s.get("prefixItems")
        items = s.get("items")
        if isinstance(items, list):  # draft 7 tuple form
            prefix, items = items, s.get("additionalItems")
        prefix = prefix or []
        for i, item in enumerate(v):
            if i < len(prefix):
                self.check(item, prefix[i], f"{at}/{i}", errors)
            elif items is not None:
                self.check(item, items, f"{at}/{i}", errors)
        if "contains" in s:
            count = sum(1 for item in v if self.ok(item, s["contains"]))
            low, high = s.get("minContains", 1), s.get("maxContains")
            if count < low or (high is not None and count > high):
                errors.append(f"{where}: {count} items match `contains`")
        if s.get("uniqueItems"):
            for i in range(len(v)):
                if any(_json_equal(v[i], v[j]) for j in range(i)):
                    errors.append(f"{where}: the items are not unique")
                    break

    @staticmethod
    def check_string(v: str, s: dict[str, Any], where: str, errors: list[str]) -> None:
        if "minLength" in s and len(v) < s["minLength"]:
            errors.append(f"{where}: {_short(v)} is shorter than {s['minLength']} characters")
        if "maxLength" in s and len(v) > s["maxLength"]:
            errors.append(f"{where}: {_short(v)} is longer than {s['maxLength']} characters")
        if "pattern" in s and not re.search(s["pattern"], v):
            errors.append(f"{where}: {_short(v)} does not match {s['pattern']!r}")

    @staticmethod
    def check_number(v: float, s: dict[str, Any], where: str, errors: list[str]) -> None:
        if "minimum" in s and v < s["minimum"]:
            errors.append(f"{where}: {v} is less than {s['minimum']}")
        if "maximum" in s and v > s["maximum"]:
            errors.append(f"{where}: {v} is greater than {s['maximum']}")
        low, high = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
        if isinstance(low, (int, float)) and not isinstance(low, bool) and v <= low:
            errors.append(f"{where}: {v} is not greater than {low}")
        if isinstance(high, (int, float)) and not isinstance(high, bool) and v >= high:
            errors.append(f"{where}: {v} is not less than {high}")
        step = s.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            q = v / step
            if not math.isclose(q, round(q), rel_tol=0, abs_tol=1e-9):
                errors.append(f"{where}: {v} is not a multiple of {step}")
