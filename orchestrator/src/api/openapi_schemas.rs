//! The component schemas of the OpenAPI document (`super::openapi`): request bodies as the handlers accept them
//! (unknown fields refused where the handler refuses them) and the shapes of the answers.

use serde_json::{Map, Value, json};

/// An object with these `properties`, of which `required` are required.
fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

/// [`object`] refusing unknown fields.
fn strict(required: &[&str], properties: Value) -> Value {
    let mut schema = object(required, properties);
    schema["additionalProperties"] = json!(false);
    schema
}

fn text() -> Value {
    json!({"type": "string"})
}

fn integer() -> Value {
    json!({"type": "integer"})
}

fn nullable(kind: &str) -> Value {
    json!({"type": [kind, "null"]})
}

fn list_of(key: &str, item: Value) -> Value {
    object(&[key], json!({key: {"type": "array", "items": item}}))
}

fn run_status() -> Value {
    json!({"type": "string", "enum": ["pending", "running", "paused", "succeeded", "failed", "cancelled"]})
}

fn run_summary() -> Value {
    json!({
        "id": text(), "status": run_status(), "plan_id": text(), "step_count": integer(), "open_steps": integer(),
        "failure": {"description": "root cause when failed: {step_id, code, message, suggestion, failed_steps}"},
        "created_at_ms": integer(), "finished_at_ms": nullable("integer"), "rerun_of": nullable("string"),
        "goal": nullable("string"), "labels": labels(),
        "attention": {"type": "array", "description": "listed with attention=true: the steps waiting for an operator",
            "items": object(&["step_id", "reason"], json!({"step_id": text(), "available_at_ms": nullable("integer"),
                "reason": {"type": "string", "enum": ["outcome_unknown", "waiting_approval", "retrying", "waiting_for_worker"]}}))},
    })
}

/// Run labels: at most 16; keys `[a-z0-9_.-]{1,63}`, values up to 256 characters.
fn labels() -> Value {
    json!({"type": "object", "maxProperties": 16, "propertyNames": {"pattern": "^[a-z0-9_.-]{1,63}$"},
        "additionalProperties": {"type": "string", "maxLength": 256}})
}

/// The filter of a bulk operation (the listing's filters, with JSON types).
fn run_filter() -> Value {
    strict(
        &[],
        json!({
            "status": {"oneOf": [run_status(), {"type": "array", "items": run_status()}]}, "labels": labels(),
            "q": text(), "action": text(), "created_after": integer(), "created_before": integer(),
            "idempotency_key": text(), "attention": {"type": "boolean"},
        }),
    )
}

fn run() -> Value {
    let mut properties = run_summary();
    properties["steps"] = json!({"type": "array", "items": {"type": "object", "required": ["id", "status"],
        "properties": {"id": text(), "action": text(), "status": text(), "attempts": integer(), "output": {},
            "error": {}, "failures": {"type": "array", "items": {"type": "object"}}, "timer": {}, "waiting_for": {},
            "args": {}, "resolved_args": {"description": "the args with placeholders resolved against the run as it stands; null while a producer has not succeeded"},
            "args_revision": integer(), "started_at_ms": nullable("integer"),
            "finished_at_ms": nullable("integer")}}});
    properties["input"] = json!({});
    object(&["id", "status"], properties)
}

fn schedule_fields() -> Value {
    json!({
        "cron": text(), "timezone": text(), "plan": {"$ref": "#/components/schemas/Plan"}, "input": {},
        "overlap": {"type": "string", "enum": ["skip", "allow", "cancel_previous"]},
        "misfire": {"type": "string", "enum": ["skip", "fire_once", "catch_up"]}, "catch_up_max": integer(),
    })
}

/// The plan's JSON Schema as components: its `$defs` become component schemas of their own (their `#/$defs/…`
/// references resolve against the document's root, which has no `$defs`) and the plan refers to them there.
fn plan_components() -> Map<String, Value> {
    let mut plan = cairn_core::plan::plan_schema();
    let defs = plan.as_object_mut().and_then(|p| p.remove("$defs"));
    if let Some(p) = plan.as_object_mut() {
        p.remove("$schema");
    }
    let mut out = Map::new();
    out.insert("Plan".into(), plan);
    if let Some(Value::Object(defs)) = defs {
        out.extend(defs);
    }
    for schema in out.values_mut() {
        relink(schema);
    }
    out
}

/// Rewrites `#/$defs/X` references to `#/components/schemas/X`, iteratively (a generated schema may nest deep).
fn relink(schema: &mut Value) {
    let mut stack = vec![schema];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get_mut("$ref")
                    && let Some(name) = target.strip_prefix("#/$defs/")
                {
                    *target = format!("#/components/schemas/{name}");
                }
                stack.extend(map.values_mut());
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
}

/// A recipient's fields: its channels keyed by type, each with that type's settings, and its time zone.
fn recipient_fields() -> Value {
    json!({
        "channels": {"type": "object", "propertyNames": {"enum": cairn_core::recipient::ChannelType::names()},
            "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
            "description": "telegram {chat_id}, email {address}, slack {webhook_url}, feishu {webhook_url, secret?}, \
                webhook {url, secret?}, ntfy {topic, server?}, stdout {}, file {}"},
        "timezone": text(),
    })
}

/// Every component schema, by name.
pub(super) fn schemas() -> Value {
    let mut schedule_request = schedule_fields();
    schedule_request["id"] = text();
    schedule_request["paused"] = json!({"type": "boolean"});
    let mut schedule = schedule_fields();
    schedule["id"] = text();
    schedule["paused"] = json!({"type": "boolean"});
    schedule["next_fire_at"] = nullable("string");
    schedule["ticks"] = json!({"type": "array", "items": {"type": "object"}});
    let mut all = plan_components();
    let own = json!({
        "Object": {"type": "object"},
        "Error": object(&["code", "message"], json!({"code": text(), "message": text(), "details": {}})),
        "Diagnostic": object(&["code", "message"], json!({"code": text(), "severity": text(), "message": text(),
            "step_id": nullable("string"), "pointer": text(), "hint": nullable("string")})),
        "Validation": object(&["valid", "diagnostics"], json!({"valid": {"type": "boolean"},
            "diagnostics": {"type": "array", "items": {"$ref": "#/components/schemas/Diagnostic"}}})),
        "DraftRequest": strict(&["text"], json!({"text": text(), "timezone": text(), "max_rounds": integer()})),
        "SubmitRequest": strict(&["plan"], json!({"plan": {"$ref": "#/components/schemas/Plan"}, "input": {},
            "idempotency_key": text(), "labels": labels()})),
        "BulkRequest": strict(&["filter"], json!({"filter": run_filter(), "dry_run": {"type": "boolean"},
            "by": text(), "reason": text()})),
        "BulkResult": object(&["matched"], json!({"matched": integer(), "dry_run": {"type": "boolean"},
            "changed": integer(), "more": {"type": "boolean"}, "runs": {"type": "array", "items": object(&["id", "outcome"],
                json!({"id": text(), "changed": {"type": "boolean"}, "outcome": text(), "message": text(),
                    "steps": {"type": "array", "items": text()}}))}})),
        "Run": run(),
        "RunList": object(&["runs"], json!({"runs": {"type": "array", "items": object(&["id", "status"], run_summary())},
            "limit": integer(), "offset": integer(), "next_cursor": nullable("string")})),
        "Decision": strict(&[], json!({"by": text(), "reason": text()})),
        "Actor": strict(&[], json!({"by": text()})),
        "RetryRequest": strict(&[], json!({"by": text(), "reason": text(),
            "args": {"type": "object", "description": "repaired args; the step then gets a new idempotency key"}})),
        "RerunRequest": strict(&["from"], json!({"from": text(), "by": text(), "reason": text()})),
        "EventList": list_of("events", object(&["id", "kind"], json!({"id": integer(), "step_id": nullable("string"),
            "kind": text(), "data": {}, "at_ms": integer()}))),
        "ActionList": list_of("actions", json!({"type": "object"})),
        "ScheduleRequest": strict(&["cron", "plan"], schedule_request),
        "SchedulePatch": strict(&[], schedule_fields()),
        "Schedule": object(&["id", "cron"], schedule),
        "ScheduleList": list_of("schedules", json!({"$ref": "#/components/schemas/Schedule"})),
        "RecipientRequest": strict(&["channels"], recipient_fields()),
        "Recipient": object(&["id", "channels"], {
            let mut fields = recipient_fields();
            fields["id"] = text();
            fields["created_at"] = integer();
            fields["updated_at"] = integer();
            fields
        }),
        "RecipientList": object(&["recipients"], json!({
            "recipients": {"type": "array", "items": {"$ref": "#/components/schemas/Recipient"}},
            "next_after": nullable("string")})),
        "DeliveryList": list_of("deliveries", object(&["step_id", "recipient_id", "channel", "status", "attempts"],
            json!({"run_id": text(), "step_id": text(), "recipient_id": text(), "channel": text(),
                "status": {"enum": ["delivered", "failed"]}, "attempts": integer(), "step_attempt": integer(),
                "last_error": nullable("string"), "provider_message_id": nullable("string"),
                "first_attempt_at": integer(), "last_attempt_at": integer(), "delivered_at": nullable("integer")}))),
        "Triggered": object(&["run_id"], json!({"run_id": text(), "cancelled": {"type": "array", "items": text()}})),
        "EventRequest": strict(&["name"], json!({"name": text(), "key": text(), "id": text(), "payload": {}})),
        "EventAccepted": object(&["id", "matched"], json!({"id": text(), "duplicate": {"type": "boolean"},
            "matched": {"type": "array", "items": object(&["run_id", "step_id"], json!({"run_id": text(), "step_id": text()}))}})),
    });
    if let Value::Object(own) = own {
        all.extend(own);
    }
    Value::Object(all)
}
