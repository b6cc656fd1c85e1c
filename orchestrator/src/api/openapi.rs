//! `GET /openapi.json`: the OpenAPI 3.1 document of the REST API. The plan schema is generated from the
//! model (schemars), so it cannot drift from what the server accepts.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

pub(super) async fn document() -> Response {
    let run_ref = json!({"$ref": "#/components/schemas/Run"});
    let ok_run = json!({"description": "the run", "content": {"application/json": {"schema": run_ref}}});
    let submitted_run = "the new run: as its submission committed it when no root needed a decision, otherwise as \
        read right after (either way a ready root may already have been claimed)";
    let id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}});
    Json(json!({
        "openapi": "3.1.0",
        "info": {"title": "Cairn API", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Plan": cairn_core::plan::plan_schema(),
                "Error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}, "details": {}}},
                "Run": {"type": "object", "required": ["id", "status", "steps"], "properties": {
                    "id": {"type": "string"}, "status": {"enum": ["pending", "running", "succeeded", "failed", "cancelled"]},
                    "failure": {}, "steps": {"type": "array", "items": {"type": "object", "properties": {
                        "id": {"type": "string"}, "status": {"type": "string"}, "attempts": {"type": "integer"},
                        "output": {}, "failures": {"type": "array"}, "timer": {}}}}}},
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {"get": {"summary": "liveness", "security": [], "responses": {"200": {"description": "ok"}}}},
            "/readyz": {"get": {"summary": "readiness (database reachable)", "security": [],
                "responses": {"200": {"description": "ready"}, "503": {"description": "database unavailable"}}}},
            "/v1/plans:validate": {"post": {"summary": "validate a plan; every diagnostic at once",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Plan"}}}},
                "responses": {"200": {"description": "{valid, diagnostics}"}, "400": error_response("malformed JSON"),
                    "413": error_response("body too large"), "415": error_response("not JSON")}}},
            "/v1/plans:draft": {"post": {"summary": "draft a plan from natural language: {text, timezone?, max_rounds?}",
                "responses": {"200": {"description": "{valid, plan, rounds: [{draft, diagnostics}]}"},
                    "422": error_response("no valid plan; details.rounds"), "502": error_response("model endpoint failed"),
                    "503": error_response("planner_unconfigured")}}},
            "/v1/runs": {
                "post": {"summary": "submit a run: {plan, input?, idempotency_key?}",
                    "responses": {"201": {"description": submitted_run, "content": {"application/json": {"schema": run_ref}}},
                        "200": {"description": "existing run for the idempotency key"},
                        "400": error_response("malformed JSON"), "409": error_response("idempotency key conflict"),
                        "413": error_response("body too large"), "415": error_response("not JSON"),
                        "422": error_response("invalid plan; details.diagnostics")}},
                "get": {"summary": "list runs, newest first", "parameters": [
                    {"name": "status", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {"name": "offset", "in": "query", "schema": {"type": "integer"}}],
                    "responses": {"200": {"description": "{runs, limit, offset}"}}}},
            "/v1/runs/{id}": {"get": {"parameters": [id.clone(), {"name": "view", "in": "query", "required": false,
                    "description": "`full` (default): the run with its steps; `summary`: the run alone, as the list shows it",
                    "schema": {"type": "string", "enum": ["full", "summary"]}}],
                "responses": {"200": ok_run, "400": error_response("invalid_view"), "404": error_response("no such run")}}},
            "/v1/runs/{id}:cancel": {"post": {"parameters": [id.clone()], "responses": {"200": ok_run,
                "404": error_response("no such run"), "409": error_response("already finished")}}},
            "/v1/runs/{id}:redrive": {"post": {"parameters": [id.clone()],
                "summary": "run every failed and cancelled step of a failed or cancelled run again",
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object",
                    "additionalProperties": false, "properties": {"by": {"type": "string"}, "reason": {"type": "string"}}}}}},
                "responses": {"200": ok_run, "404": error_response("no such run"),
                    "409": error_response("wrong_state: the run is neither failed nor cancelled")}}},
            "/v1/runs/{id}:rerun": {"post": {"parameters": [id.clone()],
                "summary": "a new run of a finished run's plan and input from one step: it and its descendants run again, the other steps keep their outputs",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
                    "additionalProperties": false, "required": ["from"], "properties": {"from": {"type": "string"},
                    "by": {"type": "string"}, "reason": {"type": "string"}}}}}},
                "responses": {"201": ok_run, "400": error_response("from missing"), "404": error_response("no such run or step"),
                    "409": error_response("wrong_state: the run has not finished")}}},
            "/v1/runs/{id}/events": {"get": {"summary": "history; text/event-stream for live updates",
                "parameters": [id.clone()], "responses": {"200": {"description": "{events} or an SSE stream"}}}},
            "/v1/runs/{id}/steps/{step}:approve": {"post": {"responses": {"200": ok_run, "409": error_response("not waiting for approval, or approval_timed_out")}}},
            "/v1/runs/{id}/steps/{step}:reject": {"post": {"responses": {"200": ok_run, "409": error_response("not waiting for approval")}}},
            "/v1/runs/{id}/steps/{step}:retry": {"post": {
                "summary": "run a failed step again with a fresh attempt budget (the run reopens), or an outcome_unknown one",
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object",
                    "additionalProperties": false, "properties": {"by": {"type": "string"}, "reason": {"type": "string"},
                    "args": {"type": "object", "description": "repaired args (the step gets a new idempotency key)"}}}}}},
                "responses": {"200": ok_run, "404": error_response("no such run or step"),
                    "409": error_response("wrong_state: not failed or outcome_unknown, or the run was cancelled"),
                    "422": error_response("invalid_args, with diagnostics")}}},
            "/v1/runs/{id}/steps/{step}:skip": {"post": {"responses": {"200": ok_run, "409": error_response("not outcome_unknown")}}},
            "/v1/runs/{id}/steps/{step}:fail": {"post": {"responses": {"200": ok_run, "409": error_response("not outcome_unknown")}}},
            "/v1/actions": {"get": {"summary": "registered actions with schemas and effects", "responses": {"200": {"description": "{actions}"}}}},
            "/v1/schedules": {
                "post": {"summary": "create a cron schedule: {id?, cron, timezone?, plan, input?, overlap?, misfire?, catch_up_max?, paused?}",
                    "responses": {"201": {"description": "the schedule"}, "409": error_response("id taken"),
                        "422": error_response("invalid_schedule, never_fires or invalid_plan")}},
                "get": {"summary": "list schedules", "responses": {"200": {"description": "{schedules}"}}}},
            "/v1/schedules/{id}": {
                "get": {"parameters": [id.clone()], "responses": {"200": {"description": "the schedule with recent ticks"}, "404": error_response("no such schedule")}},
                "patch": {"parameters": [id.clone()], "responses": {"200": {"description": "the schedule"}, "404": error_response("no such schedule")}},
                "delete": {"parameters": [id.clone()], "responses": {"204": {"description": "deleted"}, "404": error_response("no such schedule")}}},
            "/v1/schedules/{id}:trigger": {"post": {"parameters": [id.clone()],
                "summary": "run now, under the schedule's overlap policy as a tick would (also while paused)",
                "responses": {"201": {"description": "{run_id, cancelled}: the run started and the runs cancel_previous cancelled"},
                    "404": error_response("no such schedule"),
                    "409": error_response("overlap_skipped: a run is still open and the policy is skip"),
                    "422": error_response("invalid_plan")}}},
            "/v1/schedules/{id}:pause": {"post": {"parameters": [id.clone()], "responses": {"200": {"description": "the schedule"}}}},
            "/v1/schedules/{id}:resume": {"post": {"parameters": [id.clone()], "responses": {"200": {"description": "the schedule"}}}},
            "/v1/schedules/{id}/next": {"get": {"summary": "coming fire times (?count=N)", "parameters": [id.clone()],
                "responses": {"200": {"description": "{next: [{at, at_ms, local}]}"}}}},
            "/v1/events": {"post": {"summary": "deliver an external event {name, key?, payload?} to event.wait steps",
                "responses": {"202": {"description": "{id, matched: [{run_id, step_id}]}"}}}},
            "/v1/approvals": {"get": {"summary": "steps waiting for approval across runs", "responses": {"200": {"description": "{approvals}"}}}},
        }
    }))
    .into_response()
}
