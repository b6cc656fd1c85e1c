//! `GET /openapi.json`: the OpenAPI 3.1 document of the REST API. Every operation has its path parameters (derived
//! from the path template, so none can be left unresolved), its query parameters, the schema of its request body
//! where it takes one, and its responses with the error shape. The plan schema is generated from the model
//! (schemars), so it cannot drift from what the server accepts. CI validates the document with
//! `openapi-spec-validator` and generates a client from it (`sdk/python/ci.sh`).

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::openapi_schemas::schemas;

/// A `$ref` to a component schema.
fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A JSON response with `schema`.
fn answer(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

/// An error response (`{code, message, details}`).
fn error(description: &str) -> Value {
    answer(description, schema("Error"))
}

/// One operation: `id` (its `operationId`), a summary, query parameters `(name, type, description)`, an
/// optional JSON request body `(schema, required)`, and its responses.
struct Op {
    id: &'static str,
    summary: &'static str,
    query: Vec<(&'static str, &'static str, &'static str)>,
    body: Option<(Value, bool)>,
    responses: Vec<(&'static str, Value)>,
}

impl Op {
    fn new(id: &'static str, summary: &'static str) -> Op {
        Op { id, summary, query: Vec::new(), body: None, responses: Vec::new() }
    }

    fn query(mut self, name: &'static str, kind: &'static str, description: &'static str) -> Op {
        self.query.push((name, kind, description));
        self
    }

    fn body(mut self, schema_name: &str, required: bool) -> Op {
        self.body = Some((schema(schema_name), required));
        self
    }

    fn answers(mut self, status: &'static str, response: Value) -> Op {
        self.responses.push((status, response));
        self
    }

    /// The operation object for a path whose template names `path_params`; every operation can answer 401 (the
    /// API token) and 500.
    fn build(self, path_params: &[&str], public: bool) -> Value {
        let mut parameters: Vec<Value> = path_params
            .iter()
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        // `array`: a parameter that repeats (`label=a:1&label=b:2`).
        parameters.extend(self.query.iter().map(|(name, kind, description)| {
            let schema = match *kind {
                "array" => json!({"type": "array", "items": {"type": "string"}}),
                kind => json!({"type": kind}),
            };
            json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema,
                   "style": "form", "explode": true})
        }));
        let mut responses = Map::new();
        for (status, response) in self.responses {
            responses.insert(status.to_owned(), response);
        }
        if !public {
            responses.insert("401".into(), error("missing or wrong API token"));
        }
        responses.insert("500".into(), error("server error (its text is not echoed)"));
        let mut op = json!({"operationId": self.id, "summary": self.summary, "responses": responses});
        if !parameters.is_empty() {
            op["parameters"] = json!(parameters);
        }
        if let Some((schema, required)) = self.body {
            op["requestBody"] = json!({"required": required, "content": {"application/json": {"schema": schema}}});
        }
        if public {
            op["security"] = json!([]);
        }
        op
    }
}

/// The names in a path template's `{…}`.
fn path_params(path: &str) -> Vec<&str> {
    path.split('{').skip(1).filter_map(|rest| rest.split_once('}').map(|(name, _)| name)).collect()
}

fn run() -> Value {
    answer("the run", schema("Run"))
}

/// Every route of `super::router` with its operations, in the router's order.
fn operations() -> Vec<(&'static str, &'static str, Op)> {
    let invalid = "invalid_request: the body does not match its schema";
    vec![
        ("/healthz", "get", Op::new("healthz", "liveness").answers("200", json!({"description": "ok"}))),
        ("/readyz", "get", Op::new("readyz", "readiness: the database is reachable")
            .answers("200", json!({"description": "ready"})).answers("503", json!({"description": "database unavailable"}))),
        ("/metrics", "get", Op::new("metrics", "Prometheus metrics (text exposition format)")
            .answers("200", json!({"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}))),
        ("/v1/plans:validate", "post", Op::new("validatePlan", "validate a plan; every diagnostic at once")
            .body("Plan", true).answers("200", answer("{valid, diagnostics}", schema("Validation")))
            .answers("400", error("malformed JSON")).answers("413", error("body too large")).answers("415", error("not JSON"))),
        ("/v1/plans:draft", "post", Op::new("draftPlan", "draft a plan from natural language with the configured model")
            .body("DraftRequest", true).answers("200", answer("{valid, plan, rounds}", schema("Object")))
            .answers("422", error("no valid plan; details.rounds")).answers("502", error("the model endpoint failed"))
            .answers("503", error("planner_unconfigured"))),
        ("/v1/runs", "post", Op::new("submitRun", "submit a run")
            .body("SubmitRequest", true)
            .answers("201", answer("the new run", schema("Run")))
            .answers("200", answer("the existing run of the idempotency key", schema("Run")))
            .answers("400", error("malformed JSON")).answers("409", error("idempotency key used with another plan or input"))
            .answers("413", error("body too large")).answers("415", error("not JSON"))
            .answers("422", error("invalid_plan; details.diagnostics"))),
        ("/v1/runs", "get", Op::new("listRuns", "list the runs the filters match, newest first")
            .query("status", "array", "any of: pending, running, paused, succeeded, failed, cancelled (repeat, or comma-separated)")
            .query("label", "array", "key:value the run carries (repeat: all must match)")
            .query("q", "string", "a case-insensitive substring of the goal (at most 256 characters)")
            .query("action", "string", "an action one of the run's steps uses")
            .query("created_after", "string", "created at or after: milliseconds since the epoch or RFC 3339")
            .query("created_before", "string", "created before: milliseconds since the epoch or RFC 3339")
            .query("idempotency_key", "string", "the run-level idempotency key")
            .query("attention", "boolean", "only runs with a step waiting for an operator (each run lists them)")
            .query("cursor", "string", "the next_cursor of the previous page (not with offset)")
            .query("limit", "integer", "1-500, default 50").query("offset", "integer", "default 0")
            .answers("200", answer("{runs, limit, next_cursor, offset}", schema("RunList")))
            .answers("400", error("an unknown parameter, or a value that is not valid for its parameter"))),
        ("/v1/runs:cancel", "post", Op::new("cancelRuns", "cancel every open run the filter matches (at most 1,000 a call)")
            .body("BulkRequest", true).answers("200", answer("{matched, changed, runs, more}", schema("BulkResult")))
            .answers("400", error("an empty or invalid filter")).answers("422", error(invalid))),
        ("/v1/runs:redrive", "post", Op::new("redriveRuns", "redrive every failed or cancelled run the filter matches")
            .body("BulkRequest", true).answers("200", answer("{matched, changed, runs, more}", schema("BulkResult")))
            .answers("400", error("an empty or invalid filter")).answers("422", error(invalid))),
        ("/v1/runs:retry-failed", "post", Op::new("retryFailedRuns", "retry every failed step of the runs the filter matches")
            .body("BulkRequest", true).answers("200", answer("{matched, changed, runs, more}", schema("BulkResult")))
            .answers("400", error("an empty or invalid filter")).answers("422", error(invalid))),
        ("/v1/runs/{id}", "get", Op::new("getRun", "a run with its steps, attempts and failure records")
            .query("view", "string", "`full` (default): with its steps; `summary`: the run alone")
            .answers("200", run()).answers("400", error("invalid_view")).answers("404", error("no such run"))),
        ("/v1/runs/{id}:cancel", "post", Op::new("cancelRun", "cancel a run and every open step")
            .body("Decision", false).answers("200", run()).answers("404", error("no such run")).answers("409", error("already_finished"))),
        ("/v1/runs/{id}:redrive", "post", Op::new("redriveRun", "run every failed and cancelled step of a failed or cancelled run again")
            .body("Decision", false).answers("200", run()).answers("400", error("`args` given: they apply to a retry")).answers("404", error("no such run"))
            .answers("409", error("wrong_state: neither failed nor cancelled")).answers("422", error(invalid))),
        ("/v1/runs/{id}:rerun", "post", Op::new("rerunRun", "a new run of a finished run from one step, reusing every other step's output")
            .body("RerunRequest", true).answers("201", answer("the new run", schema("Run")))
            .answers("400", error("`from` missing")).answers("404", error("no such run or step"))
            .answers("409", error("wrong_state: the run has not finished")).answers("422", error(invalid))),
        ("/v1/runs/{id}:pause", "post", Op::new("pauseRun", "pause a run: no new attempt starts, running ones finish")
            .body("Decision", false).answers("200", run()).answers("400", error("`args` given: they apply to a retry")).answers("404", error("no such run"))
            .answers("409", error("wrong_state: neither pending nor running")).answers("422", error(invalid))),
        ("/v1/runs/{id}:resume", "post", Op::new("resumeRun", "resume a paused run; what came due meanwhile happens now")
            .body("Decision", false).answers("200", run()).answers("400", error("`args` given: they apply to a retry")).answers("404", error("no such run"))
            .answers("409", error("wrong_state: not paused")).answers("422", error(invalid))),
        ("/v1/runs/{id}/events", "get", Op::new("runEvents", "the run's history; with Accept: text/event-stream, live")
            .query("after", "integer", "only events after this id").query("limit", "integer", "most events")
            .answers("200", json!({"description": "{events}, or an SSE stream of them", "content": {
                "application/json": {"schema": schema("EventList")}, "text/event-stream": {"schema": {"type": "string"}}}}))
            .answers("404", error("no such run"))),
        ("/v1/runs/{id}/steps/{step}:approve", "post", Op::new("approveStep", "approve a step waiting for approval")
            .body("Actor", false).answers("200", run()).answers("400", error("`args` or `reason` given: they apply to a retry"))
            .answers("404", error("no such run or step")).answers("409", error("wrong_state, or approval_timed_out")).answers("422", error(invalid))),
        ("/v1/runs/{id}/steps/{step}:reject", "post", Op::new("rejectStep", "reject a step waiting for approval")
            .body("Actor", false).answers("200", run()).answers("400", error("`args` or `reason` given: they apply to a retry"))
            .answers("404", error("no such run or step")).answers("409", error("wrong_state, or approval_timed_out")).answers("422", error(invalid))),
        ("/v1/runs/{id}/steps/{step}:retry", "post", Op::new("retryStep",
            "run a failed step again with a fresh attempt budget (the run reopens), or an outcome_unknown one")
            .body("RetryRequest", false).answers("200", run()).answers("404", error("no such run or step"))
            .answers("409", error("wrong_state: not failed or outcome_unknown, or the run was cancelled"))
            .answers("422", error("invalid_args (details.diagnostics) or invalid_request"))),
        ("/v1/runs/{id}/steps/{step}:skip", "post", Op::new("skipStep", "skip an outcome_unknown step")
            .body("Decision", false).answers("200", run()).answers("400", error("`args` given: they apply to a retry")).answers("404", error("no such run or step")).answers("409", error("wrong_state")).answers("422", error(invalid))),
        ("/v1/runs/{id}/steps/{step}:fail", "post", Op::new("failStep", "fail an outcome_unknown step")
            .body("Decision", false).answers("200", run()).answers("400", error("`args` given: they apply to a retry")).answers("404", error("no such run or step")).answers("409", error("wrong_state")).answers("422", error(invalid))),
        ("/v1/actions", "get", Op::new("listActions", "the actions the validator accepts, with schemas, effects and workers")
            .answers("200", answer("{actions}", schema("ActionList")))),
        ("/v1/runs/{id}/plan", "get", Op::new("getRunPlan", "the plan a run follows, as stored (validated, defaults applied)")
            .answers("200", answer("the plan", schema("Object"))).answers("404", error("no such run"))),
        ("/v1/workers", "get", Op::new("listWorkers",
            "workers seen in the last 24 hours: actions served, last seen, connected, attempts in flight")
            .answers("200", answer("{workers: [{worker_id, last_seen_at, connected, actions, in_flight}]}", schema("Object")))),
        ("/v1/runs/{id}/deliveries", "get", Op::new("listRunDeliveries",
            "the run's delivery ledger: one record per step, recipient and channel, with status, attempts, last error, \
             provider message id and times")
            .answers("200", answer("{deliveries}", schema("DeliveryList"))).answers("404", error("no such run"))),
        ("/v1/recipients", "get", Op::new("listRecipients", "recipients by id, a page at a time")
            .query("after", "string", "the `next_after` of the previous page")
            .query("limit", "integer", "1-500, default 100")
            .answers("200", answer("{recipients, next_after}", schema("RecipientList")))
            .answers("400", error("limit out of range"))),
        ("/v1/recipients/{id}", "put", Op::new("putRecipient", "create or replace a recipient and its bound channels")
            .body("RecipientRequest", true).answers("200", answer("replaced", schema("Recipient")))
            .answers("201", answer("created", schema("Recipient"))).answers("422", error("invalid_recipient"))),
        ("/v1/recipients/{id}", "get", Op::new("getRecipient", "a recipient (secrets redacted)")
            .answers("200", answer("the recipient", schema("Recipient"))).answers("404", error("no such recipient"))),
        ("/v1/recipients/{id}", "delete", Op::new("deleteRecipient", "delete a recipient (the ledger keeps its records)")
            .answers("204", json!({"description": "deleted"})).answers("404", error("no such recipient"))),
        ("/v1/schedules", "post", Op::new("createSchedule", "create a cron schedule")
            .body("ScheduleRequest", true).answers("201", answer("the schedule", schema("Schedule")))
            .answers("409", error("conflict: the id is taken"))
            .answers("422", error("invalid_schedule, never_fires or invalid_plan"))),
        ("/v1/schedules", "get", Op::new("listSchedules", "every schedule")
            .answers("200", answer("{schedules}", schema("ScheduleList")))),
        ("/v1/schedules/{id}", "get", Op::new("getSchedule", "a schedule with its recent ticks")
            .answers("200", answer("the schedule", schema("Schedule"))).answers("404", error("no such schedule"))),
        ("/v1/schedules/{id}", "patch", Op::new("updateSchedule", "change a schedule")
            .body("SchedulePatch", true).answers("200", answer("the schedule", schema("Schedule")))
            .answers("404", error("no such schedule")).answers("422", error("invalid_schedule or invalid_plan"))),
        ("/v1/schedules/{id}", "delete", Op::new("deleteSchedule", "delete a schedule (its runs stay)")
            .answers("204", json!({"description": "deleted"})).answers("404", error("no such schedule"))),
        ("/v1/schedules/{id}:pause", "post", Op::new("pauseSchedule", "stop the ticks until resumed")
            .answers("200", answer("the schedule", schema("Schedule"))).answers("404", error("no such schedule"))),
        ("/v1/schedules/{id}:resume", "post", Op::new("resumeSchedule", "resume from now")
            .answers("200", answer("the schedule", schema("Schedule"))).answers("404", error("no such schedule"))),
        ("/v1/schedules/{id}:trigger", "post", Op::new("triggerSchedule",
            "run now, under the schedule's overlap policy as a tick would (also while paused)")
            .answers("201", answer("{run_id, cancelled}", schema("Triggered"))).answers("404", error("no such schedule"))
            .answers("409", error("overlap_skipped: a run is still open and the policy is skip"))
            .answers("422", error("invalid_plan"))),
        ("/v1/schedules/{id}/next", "get", Op::new("nextFires", "the coming fire times, UTC and local")
            .query("count", "integer", "1-1000, default 5")
            .answers("200", answer("{id, cron, timezone, paused, next}", schema("Object")))
            .answers("404", error("no such schedule"))),
        ("/v1/events", "post", Op::new("deliverEvent", "deliver an external event to the event.wait steps it matches")
            .body("EventRequest", true).answers("202", answer("{id, duplicate, matched}", schema("EventAccepted")))
            .answers("422", error(invalid))),
        ("/v1/approvals", "get", Op::new("listApprovals", "steps waiting for approval across runs")
            .query("limit", "integer", "most approvals")
            .answers("200", answer("{approvals}", schema("Object")))),
    ]
}

pub(super) async fn document() -> Response {
    let mut paths = Map::new();
    for (path, method, op) in operations() {
        let public = matches!(path, "/healthz" | "/readyz" | "/metrics");
        let entry = paths.entry(path.to_owned()).or_insert_with(|| json!({}));
        entry[method] = op.build(&path_params(path), public);
    }
    Json(json!({
        "openapi": "3.1.0",
        "info": {"title": "Cairn API", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}, "schemas": schemas()},
        "security": [{"bearer": []}],
        "paths": paths,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_parameters_come_from_the_template() {
        assert_eq!(path_params("/v1/runs/{id}/steps/{step}:approve"), ["id", "step"]);
        assert!(path_params("/v1/runs").is_empty());
    }

    #[test]
    fn every_operation_id_is_unique_and_every_schema_it_names_exists() {
        let ops = operations();
        let mut ids: Vec<&str> = ops.iter().map(|(_, _, op)| op.id).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), before, "operationIds are unique");
        let text = serde_json::to_string(
            &ops.into_iter().map(|(p, _, op)| op.build(&path_params(p), false)).collect::<Vec<_>>(),
        )
        .expect("serializes");
        let defined = schemas();
        for name in text.split("#/components/schemas/").skip(1).map(|rest| rest.split('"').next().unwrap_or_default()) {
            assert!(defined.get(name).is_some(), "schema {name} is defined");
        }
    }
}
