//! Bad input against the real REST API (issue 5 acceptance): malformed JSON, wrong content type, a 10 MB body, a
//! 100,000-step plan, deeply nested args, invalid UTF-8, unknown fields and duplicate keys each get a clear 4xx
//! JSON error `{code, message, details}`; after every one the server still serves and nothing was stored.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_tests::http::HttpApp;
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(START.parse().unwrap()))
}

/// The server answers `/healthz`, lists no runs, and no table a submission writes has a row.
async fn assert_still_serving_and_nothing_stored(app: &HttpApp, after: &str) {
    let (status, body) = app.get("/healthz").await;
    assert_eq!(status, 200, "after {after}: the server keeps serving ({body})");
    assert!(app.runs().await.is_empty(), "after {after}: no run is listed");
    assert_eq!(app.stored_rows().await, 0, "after {after}: no partial run is stored");
}

/// Checks an error answer: `status`, `code`, a non-empty message, and returns its details.
fn assert_error(what: &str, answer: &(u16, Value), status: u16, code: &str) -> Value {
    let (got, body) = answer;
    assert_eq!(*got, status, "{what}: status {status} expected, got {got}: {body:#}");
    assert_eq!(body["code"], code, "{what}: error code: {body:#}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: a message says why: {body:#}");
    body["details"].clone()
}

fn diagnostic_codes(details: &Value) -> Vec<String> {
    details["diagnostics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["code"].as_str().map(str::to_owned))
        .collect()
}

fn valid_plan() -> Value {
    json!({"steps": [{"id": "a", "action": "noop", "args": {"x": 1}}]})
}

/// A `POST /v1/runs` body of about `size` bytes (a valid JSON document, too large to accept).
fn padded_body(size: usize) -> Vec<u8> {
    let mut body = br#"{"plan":{"steps":[{"id":"a","action":"noop","args":{"pad":""#.to_vec();
    body.resize(size, b'x');
    body.extend_from_slice(br#""}}]}}"#);
    body
}

/// `n` steps `s0`…, each depending on nothing: a small step costs about 30 bytes, so 100,000 fit in ~3.5 MB.
fn plan_with_steps(n: usize) -> Vec<u8> {
    let steps: Vec<Value> = (0..n).map(|i| json!({"id": format!("s{i}"), "action": "noop"})).collect();
    serde_json::to_vec(&json!({"plan": {"steps": steps}})).unwrap()
}

fn nested_args(depth: usize) -> Vec<u8> {
    let mut body = br#"{"plan":{"steps":[{"id":"a","action":"noop","args":{"deep":"#.to_vec();
    body.extend(std::iter::repeat_n(b'[', depth));
    body.extend(std::iter::repeat_n(b']', depth));
    body.extend_from_slice(b"}}]}}");
    body
}

on_both_backends!(bad_input_gets_a_clear_4xx_and_the_server_keeps_serving_with_nothing_stored);
async fn bad_input_gets_a_clear_4xx_and_the_server_keeps_serving_with_nothing_stored(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let json_type = Some("application/json");

    let malformed = "{\n  \"plan\": {\"steps\": [}\n}".as_bytes().to_vec();
    let answer = app.post_bytes("/v1/runs", json_type, malformed).await;
    let details = assert_error("malformed JSON", &answer, 400, "malformed_json");
    assert_eq!(details["line"], 2, "malformed JSON: the line of the error: {details}");
    assert!(details["column"].as_u64().is_some_and(|c| c > 0), "malformed JSON: a column: {details}");
    assert_still_serving_and_nothing_stored(&app, "malformed JSON").await;

    let body = serde_json::to_vec(&json!({"plan": valid_plan()})).unwrap();
    let answer = app.post_bytes("/v1/runs", Some("text/plain"), body.clone()).await;
    assert_error("text/plain", &answer, 415, "unsupported_media_type");
    let answer = app.post_bytes("/v1/runs", None, body).await;
    assert_error("no content type", &answer, 415, "unsupported_media_type");
    assert_still_serving_and_nothing_stored(&app, "wrong content type").await;

    let answer = app.post_bytes("/v1/runs", json_type, padded_body(10 * 1024 * 1024)).await;
    assert_error("a 10 MB body", &answer, 413, "payload_too_large");
    assert_still_serving_and_nothing_stored(&app, "a 10 MB body").await;

    let answer = app.post_bytes("/v1/runs", json_type, plan_with_steps(100_000)).await;
    let details = assert_error("a 100,000-step plan", &answer, 422, "invalid_plan");
    assert!(
        diagnostic_codes(&details).contains(&"too_many_steps".to_owned()),
        "a 100,000-step plan is refused for its size: {details:#}"
    );
    assert_still_serving_and_nothing_stored(&app, "a 100,000-step plan").await;

    for path in ["/v1/runs", "/v1/plans:validate"] {
        let answer = app.post_bytes(path, json_type, nested_args(10_000)).await;
        assert_error(&format!("args nested 10,000 deep on {path}"), &answer, 400, "malformed_json");
    }
    assert_still_serving_and_nothing_stored(&app, "deeply nested args").await;

    let answer = app.post_bytes("/v1/runs", json_type, b"{\"plan\": \"\xff\xfe\"}".to_vec()).await;
    assert_error("invalid UTF-8", &answer, 400, "invalid_utf8");
    assert_still_serving_and_nothing_stored(&app, "invalid UTF-8").await;

    let answer = app.post("/v1/runs", &json!({"plan": valid_plan(), "priority": 1})).await;
    let _ = assert_error("an unknown body field", &answer, 422, "invalid_request");
    assert!(answer.1["message"].as_str().unwrap().contains("priority"), "the unknown field is named: {}", answer.1);
    let plan = json!({"steps": [{"id": "a", "action": "noop", "dependson": []}], "stpes": []});
    let answer = app.post("/v1/runs", &json!({"plan": plan})).await;
    let details = assert_error("unknown plan fields", &answer, 422, "invalid_plan");
    let unknown: Vec<&str> = details["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "unknown_field")
        .filter_map(|d| d["pointer"].as_str())
        .collect();
    assert_eq!(unknown.len(), 2, "both unknown fields are reported, each at its place: {details:#}");
    assert_still_serving_and_nothing_stored(&app, "unknown fields").await;

    let duplicate = br#"{"plan": {"steps": [{"id": "a", "action": "noop", "id": "b"}]}}"#.to_vec();
    let answer = app.post_bytes("/v1/runs", json_type, duplicate).await;
    assert_error("a duplicate key", &answer, 400, "duplicate_key");
    let duplicate = br#"{"plan": {"steps": []}, "plan": {"steps": []}}"#.to_vec();
    let answer = app.post_bytes("/v1/runs", json_type, duplicate).await;
    assert_error("a duplicate top-level key", &answer, 400, "duplicate_key");
    assert_still_serving_and_nothing_stored(&app, "duplicate keys").await;

    let answer = app.post("/v1/runs", &json!({"plan": valid_plan()})).await;
    assert_eq!(answer.0, 201, "{backend:?}: after all that, a valid plan is still accepted: {:#}", answer.1);
}

/// A body just over a configured (smaller) limit is refused with 413 before it is parsed; one under it is not.
#[tokio::test]
async fn the_body_limit_is_configurable_and_enforced_at_its_edge() {
    let options = cairn_tests::http::HttpAppOptions { max_body_bytes: Some(64 * 1024), ..Default::default() };
    let app = HttpApp::start_with(cairn_tests::Backend::Sqlite, clock(), options).await;
    let answer = app.post_bytes("/v1/runs", Some("application/json"), padded_body(64 * 1024 + 1)).await;
    assert_error("a body over 64 KiB", &answer, 413, "payload_too_large");
    let answer = app.post_bytes("/v1/runs", Some("application/json"), padded_body(60 * 1024)).await;
    assert_eq!(answer.0, 201, "a body under the limit is accepted: {:#}", answer.1);
}

/// Every error is JSON `{code, message, details}`, also the ones axum produces before a handler runs: a query
/// string or path parameter that does not parse, and a method a route does not serve (which keeps `Allow`).
#[tokio::test]
async fn query_path_and_method_rejections_are_json_errors_too() {
    let app = HttpApp::start(cairn_tests::Backend::Sqlite, clock(), None).await;
    for path in
        ["/v1/runs?limit=abc", "/v1/runs?limit=99999999999999999999", "/v1/runs/%FF%FE", "/v1/runs/x/events?after=zz"]
    {
        let answer = app.get(path).await;
        let _ = assert_error(&format!("GET {path}"), &answer, 400, "bad_request");
    }
    let response = app.request(reqwest::Method::DELETE, "/v1/runs").send().await.unwrap();
    let allow = response.headers().get("allow").map(|v| v.to_str().unwrap().to_owned());
    let answer = (response.status().as_u16(), response.json::<Value>().await.unwrap());
    assert_error("DELETE /v1/runs", &answer, 405, "method_not_allowed");
    assert!(allow.is_some_and(|a| a.contains("POST")), "the Allow header is kept");
    assert_still_serving_and_nothing_stored(&app, "rejected queries and methods").await;
}

/// A plan whose `when` is `steps.b` + `tail`, behind a step `b`.
fn hostile_when(tail: &str) -> Value {
    json!({"goal": "g", "steps": [
        {"id": "b", "action": "noop", "args": {}},
        {"id": "a", "action": "noop", "args": {}, "depends_on": ["b"], "when": format!("steps.b{tail}")}
    ]})
}

on_both_backends!(expressions_too_long_or_too_deep_are_invalid_plans_and_the_server_keeps_serving);
/// Issue "Hardening" F1: a `when` of 10,000 `1 +` terms (40 KB), 5,000 chained `.x` or 20,000 `[0]` would
/// overflow a tokio worker's stack during validation and abort the server. Each is an invalid plan: 422 with a
/// `limit_exceeded` diagnostic (pointer, limit) from `/v1/runs`, `{valid: false}` from `/v1/plans:validate`.
async fn expressions_too_long_or_too_deep_are_invalid_plans_and_the_server_keeps_serving(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let plus = format!(".x + {} == 0", vec!["1"; 10_000].join(" + "));
    let (selectors, indexes) = (".x".repeat(5_000), "[0]".repeat(20_000));
    for (what, plan) in [
        ("10,000 terms", hostile_when(&plus)),
        ("5,000 selectors", hostile_when(&selectors)),
        ("20,000 indexes", hostile_when(&indexes)),
    ] {
        let answer = app.post("/v1/runs", &json!({"plan": plan})).await;
        let details = assert_error(what, &answer, 422, "invalid_plan");
        let d = &details["diagnostics"][0];
        assert_eq!(
            (d["code"].as_str(), d["pointer"].as_str()),
            (Some("limit_exceeded"), Some("/steps/1/when")),
            "{what}: {details:#}"
        );
        assert!(
            d["limit"]["name"].as_str().is_some_and(|n| n.starts_with("max_expression_")),
            "{what}: the limit is named: {d:#}"
        );
        assert!(
            d["limit"]["max"].as_u64().is_some() && d["limit"]["found"].as_u64() > d["limit"]["max"].as_u64(),
            "{d:#}"
        );
        let (status, report) = app.post("/v1/plans:validate", &plan).await;
        assert_eq!(
            (status, report["valid"].as_bool()),
            (200, Some(false)),
            "{what}: validate answers invalid: {report:#}"
        );
        assert_eq!(report["diagnostics"][0]["code"], "limit_exceeded", "{what}: {report:#}");
        assert_still_serving_and_nothing_stored(&app, what).await;
    }
}

on_both_backends!(values_a_database_would_refuse_get_the_same_4xx_on_both_backends);
/// Issue "Hardening" F6 (`pg_data_errors_503.sh`): on PostgreSQL, values the database refuses (a NUL in an id,
/// a key or an event name; a 2,700-character idempotency key) would be answered 503 "unavailable; retry"
/// forever, while SQLite accepts them. They are refused at the edge with a 4xx naming the field, identically on
/// both.
async fn values_a_database_would_refuse_get_the_same_4xx_on_both_backends(backend: Backend) {
    let app = HttpApp::start(backend, clock(), None).await;
    let long_key: String = (0..2700).map(|i| char::from(b'a' + u8::try_from(i % 26).unwrap())).collect();
    for (what, key) in [("a 2,700-byte idempotency key", long_key.as_str()), ("a NUL in the key", "a\u{0}b")] {
        let answer = app.post("/v1/runs", &json!({"plan": valid_plan(), "idempotency_key": key})).await;
        assert_error(&format!("{backend:?}: {what}"), &answer, 422, "invalid_request");
        assert!(answer.1["message"].as_str().unwrap().contains("idempotency_key"), "the field is named: {}", answer.1);
    }
    assert_error("a NUL in a run id", &app.get("/v1/runs/a%00b").await, 400, "invalid_request");
    assert_error("a NUL in a status filter", &app.get("/v1/runs?status=a%00b").await, 400, "invalid_request");
    let answer = app.post("/v1/events", &json!({"name": "a\u{0}b"})).await;
    assert_error(&format!("{backend:?}: a NUL in an event name"), &answer, 422, "invalid_request");
    let answer = app.post("/v1/events", &json!({"name": "paid", "key": "k\u{0}"})).await;
    assert_error(&format!("{backend:?}: a NUL in an event key"), &answer, 422, "invalid_request");
    assert_still_serving_and_nothing_stored(&app, "values a database refuses").await;
    let key = "k".repeat(255);
    let answer = app.post("/v1/runs", &json!({"plan": valid_plan(), "idempotency_key": key})).await;
    assert_eq!(answer.0, 201, "{backend:?}: a key at the limit is accepted: {:#}", answer.1);
}
