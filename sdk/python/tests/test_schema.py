"""Schemas derived from type hints, the validator, JSON conversion, and how actions are declared."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from typing import Any, Literal, Optional

import pytest
import typing_extensions
from pydantic import BaseModel, ConfigDict, Field

import cairn
from cairn.schema import NotJSONSerializable, close_schema, schema_for, to_json_value, validate


class Address(BaseModel):
    city: str
    zip: Optional[str] = None


class Customer(BaseModel):
    id: int = Field(gt=0)
    name: str
    tier: Literal["free", "pro"] = "free"
    address: Address
    tags: list[str] = []


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int


@dataclasses.dataclass
class Refund:
    order_id: str
    amount: float
    note: Optional[str] = None


class Lookup(typing_extensions.TypedDict):
    email: str
    limit: typing_extensions.NotRequired[int]


def test_pydantic_models_are_closed_all_the_way_down() -> None:
    s = schema_for(Customer)
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert s["required"] == ["id", "name", "address"]
    assert s["$defs"]["Address"]["additionalProperties"] is False
    assert s["properties"]["id"]["exclusiveMinimum"] == 0
    assert s["properties"]["tier"]["enum"] == ["free", "pro"]


def test_a_model_that_allows_extra_fields_stays_open() -> None:
    assert schema_for(Open)["additionalProperties"] is True


def test_dataclasses_and_typeddicts() -> None:
    d = schema_for(Refund)
    assert d["required"] == ["order_id", "amount"] and d["additionalProperties"] is False
    t = schema_for(Lookup)
    assert t["required"] == ["email"] and t["additionalProperties"] is False
    assert t["properties"]["limit"]["type"] == "integer"


def test_untyped_hints_say_nothing() -> None:
    assert schema_for(None) is None
    assert schema_for(Any) is None
    assert schema_for(dict) == {"type": "object"}
    assert schema_for(list[int]) == {"type": "array", "items": {"type": "integer"}}


def test_close_schema_leaves_the_argument_alone() -> None:
    given = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}}}
    closed = close_schema(given)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["a"]["additionalProperties"] is False
    assert "additionalProperties" not in given
    # A property *named* like a keyword is not mistaken for one.
    odd = close_schema({"type": "object", "properties": {"properties": {"type": "string"}}})
    assert odd["properties"]["properties"] == {"type": "string"}


@pytest.mark.parametrize(
    ("instance", "ok"),
    [
        ({"id": 1, "name": "Ada", "address": {"city": "Paris"}}, True),
        ({"id": 1.0, "name": "Ada", "address": {"city": "Paris", "zip": None}}, True),
        ({"id": 0, "name": "Ada", "address": {"city": "Paris"}}, False),
        ({"id": True, "name": "Ada", "address": {"city": "Paris"}}, False),
        ({"id": 1, "name": "Ada", "address": {"city": "Paris"}, "extra": 1}, False),
        ({"id": 1, "name": "Ada", "address": {"town": "Paris"}}, False),
        ({"id": 1, "name": "Ada", "address": {"city": "Paris"}, "tier": "gold"}, False),
        ({"id": 1, "name": "Ada", "address": {"city": "Paris"}, "tags": ["a", 2]}, False),
        ({"id": 1, "address": {"city": "Paris"}}, False),
    ],
)
def test_the_validator_on_a_derived_schema(instance: Any, ok: bool) -> None:
    assert (validate(instance, schema_for(Customer)) == []) is ok


def test_the_validator_names_where_and_why() -> None:
    errors = validate({"id": "7", "name": "Ada", "address": {"city": 3}}, schema_for(Customer))
    assert '/id: "7" is not of type integer' in errors
    assert "/address/city: 3 is not of type string" in errors


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^a"}, "ab", "ba"),
        ({"type": "number", "minimum": 0, "exclusiveMaximum": 1, "multipleOf": 0.25}, 0.5, 1),
        ({"type": "array", "minItems": 1, "uniqueItems": True}, [1, 2], [1, 1]),
        ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}}, [1, "a"], [1, 2]),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, None, "x"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1.5, 1),
        ({"not": {"type": "string"}}, 1, "s"),
        ({"const": {"a": [1]}}, {"a": [1.0]}, {"a": [True]}),
        ({"enum": [1, "x"]}, "x", 2),
        ({"type": ["string", "null"]}, None, 1),
        ({"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["v"]}}, {"k": "b"}, {"k": "a"}),
        ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
         {"x-a": 1}, {"y": 1}),
        ({"type": "object", "minProperties": 1, "propertyNames": {"pattern": "^[a-z]+$"}}, {"ab": 1}, {"A": 1}),
        ({"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}}, [1], ["1"]),
        (True, "anything", None),
        ({}, {"anything": 1}, None),
    ],
)
def test_validator_keywords(schema: Any, good: Any, bad: Any) -> None:
    assert validate(good, schema) == []
    if bad is not None:
        assert validate(bad, schema) != []


class Color(enum.Enum):
    RED = "red"


class Stamped(BaseModel):
    at: datetime.datetime
    id: uuid.UUID
    color: Color


def test_to_json_value() -> None:
    assert to_json_value({"a": (1, 2.5, None, True)}) == {"a": [1, 2.5, None, True]}
    stamped = Stamped(at=datetime.datetime(2027, 1, 2, 3, 4, 5), id=uuid.UUID(int=1), color=Color.RED)
    assert to_json_value([stamped]) == [{"at": "2027-01-02T03:04:05", "id": str(uuid.UUID(int=1)),
                                         "color": "red"}]
    assert to_json_value(Refund("o-1", 9.5)) == {"order_id": "o-1", "amount": 9.5, "note": None}
    with pytest.raises(NotJSONSerializable) as bare:
        to_json_value({"ok": [1, {"when": datetime.date(2027, 1, 1)}]})
    assert bare.value.path == "/ok/1/when" and bare.value.type_name == "date"
    for value in ({1: "int key"}, {"s": {1, 2}}, float("nan"), b"bytes", object()):
        with pytest.raises(NotJSONSerializable):
            to_json_value(value)


def test_actions_take_their_schemas_from_hints() -> None:
    @cairn.action("crm.lookup", "read", grounded_args=["email", "/name"])
    def lookup(args: Lookup, ctx: cairn.Context) -> Customer:
        """Looks a customer up.

        More text that is not the description."""
        raise NotImplementedError

    act = lookup.__cairn_action__
    assert isinstance(act, cairn.Action) and act.name == "crm.lookup" and act.effect == "read"
    assert act.args_schema == schema_for(Lookup)
    assert act.output_schema == schema_for(Customer, "serialization")
    assert act.grounded_args == ["/email", "/name"]
    assert act.description == "Looks a customer up."
    assert act.version == "1"


def test_explicit_schemas_win_and_untyped_handlers_take_any_object() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    @cairn.action("search", args_schema=schema, output_schema={"type": "array"}, version="2.1",
                  description="Search.")
    def search(args, ctx):  # type: ignore[no-untyped-def]
        return []

    act = search.__cairn_action__
    assert act.args_schema == schema and act.output_schema == {"type": "array"}
    assert act.version == "2.1" and act.description == "Search."

    @cairn.action("anything")
    def anything(args):  # type: ignore[no-untyped-def]
        return args

    assert anything.__cairn_action__.args_schema == {"type": "object"}
    assert anything.__cairn_action__.output_schema == {}


def test_declaration_errors_are_caught_early() -> None:
    with pytest.raises(ValueError, match="effect must be one of"):
        cairn.action("x", "write")(lambda args: args)
    with pytest.raises(ValueError, match="example_output"):
        cairn.action("x", example_output={"id": "not an int"})(_returns_customer)
    with pytest.raises(TypeError, match=r"takes \(args\) or \(args, ctx\)"):
        cairn.action("x")(lambda a, b, c: None)
    worker = cairn.Worker("http://127.0.0.1:1")
    worker.action("dup")(lambda args: args)
    with pytest.raises(ValueError, match="served twice"):
        worker.action("dup")(lambda args: args)
    with pytest.raises(ValueError):
        cairn.Worker("ftp://x:1")
    with pytest.raises(ValueError):
        cairn.Worker("http://127.0.0.1:1", concurrency=0)


def _returns_customer(args: dict) -> Customer:
    raise NotImplementedError


def test_the_worker_registers_what_the_orchestrator_needs() -> None:
    worker = cairn.Worker("http://127.0.0.1:7401", token="t", worker_id="w-1")

    @worker.action("refund.create", effect="non_idempotent", grounded_args=["/order_id"])
    def refund(args: Refund, ctx: cairn.Context) -> dict:
        return {}

    d = worker._descriptor(worker.actions["refund.create"])
    from cairn._proto.cairn.v1 import worker_pb2 as pb

    assert d.effect == pb.EFFECT_NON_IDEMPOTENT
    assert d.name == "refund.create" and list(d.grounded_args) == ["/order_id"]
    import json

    assert json.loads(d.args_schema_json) == schema_for(Refund)
    assert json.loads(d.output_schema_json) == {"type": "object"}
    assert worker._metadata == (("authorization", "Bearer t"),)
    assert "w-1" in repr(worker)


def test_handler_signatures() -> None:
    from cairn import testing

    def args_only(args: dict) -> dict:
        return {"args": args}

    def ctx_default(args: dict, ctx: cairn.Context = None) -> dict:  # type: ignore[assignment]
        return {"attempt": ctx.attempt}

    def extra_default(args: dict, flag: bool = True) -> dict:
        return {"flag": flag}

    def named_ctx_first(ctx, args):  # type: ignore[no-untyped-def]
        return {"step": ctx.step_id, "args": args}

    assert testing.run(args_only, {"a": 1}) == {"args": {"a": 1}}
    assert testing.run(ctx_default, {}, attempt=4) == {"attempt": 4}
    assert testing.run(extra_default, {}) == {"flag": True}
    assert testing.run(named_ctx_first, {"b": 2}, step_id="s") == {"step": "s", "args": {"b": 2}}
    with pytest.raises(TypeError):
        cairn.action("x")(lambda args, *, must: None)
