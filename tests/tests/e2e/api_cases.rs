//! Failure cases from `../shared/cases/cases.md` whose expected outcome is "rejected at validation", checked
//! where users meet them: `POST /v1/runs` on a real server. C01 (a, b, c), C02 (a, b, c, and d accepted), C03 a,
//! C06 b, C10 c, C26 b and c. "Rejected at validation" is asserted as the cases define it: the answer is a 4xx
//! error whose diagnostic names the offending step and field (its JSON pointer, into the plan as the validator
//! and `cairn validate` report it); no run (nor any row of one) is
//! stored; nothing is dispatched to a worker. `cases_validation.rs` checks the same plans against the validator
//! alone. Case plans map to the contract as there: `weather.lookup` → `weather.forecast`, `reminder.create` →
//! `notify.send` with `not_before`, retry fields → `initial_interval_ms`/`backoff_coefficient`/
//! `max_interval_ms`.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{HttpApp, step};
use cairn_tests::{Backend, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

/// Every action a worker could serve: a claim for all of them returning nothing proves nothing was dispatched.
const ALL_ACTIONS: [&str; 7] =
    ["noop", "sleep", "condition.eval", "http.request", "weather.forecast", "notify.send", "llm.chat"];

async fn app(backend: cairn_tests::Backend) -> HttpApp {
    HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await
}

/// Submits `body` (raw JSON text) and asserts the case's "rejected at validation": `status` with error `code`;
/// nothing stored; nothing claimable. Returns the error body.
async fn assert_rejected(app: &HttpApp, case: &str, body: &str, status: u16, code: &str) -> Value {
    let (got, answer) = app.post_bytes("/v1/runs", Some("application/json"), body.as_bytes().to_vec()).await;
    assert_eq!(got, status, "{case}: refused with {status}: {answer:#}");
    assert_eq!(answer["code"], code, "{case}: error code: {answer:#}");
    assert!(app.runs().await.is_empty(), "{case}: no run is persisted");
    assert_eq!(app.stored_rows().await, 0, "{case}: no row of a run is persisted");
    let actions: Vec<String> = ALL_ACTIONS.iter().map(|a| (*a).to_owned()).collect();
    let claimed = app.engine().claim("probe", &actions, 10).await.unwrap();
    assert!(claimed.is_empty(), "{case}: nothing is dispatched to a worker");
    answer
}

/// The error diagnostics with `code`.
fn diagnostics<'a>(answer: &'a Value, code: &str) -> Vec<&'a Value> {
    answer["details"]["diagnostics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["code"] == code && d["severity"] == "error")
        .collect()
}

/// Exactly one error diagnostic with `code`, naming `step_id` at `pointer`.
fn assert_names(case: &str, answer: &Value, code: &str, step_id: &str, pointer: &str) -> Value {
    let found = diagnostics(answer, code);
    assert_eq!(found.len(), 1, "{case}: one `{code}` error: {answer:#}");
    assert_eq!(found[0]["step_id"], step_id, "{case}: the error names the step: {:#}", found[0]);
    assert_eq!(found[0]["pointer"], pointer, "{case}: the error names the field: {:#}", found[0]);
    found[0].clone()
}

fn plan_body(plan: &str) -> String {
    format!(r#"{{"plan": {plan}}}"#)
}

on_both_backends!(c01_duplicate_step_ids_are_rejected_at_submit_and_nothing_runs);
/// C01: non-adjacent duplicate ids, look-alike ids (NFC/NFD), and a key repeated inside one step are refused.
async fn c01_duplicate_step_ids_are_rejected_at_submit_and_nothing_runs(backend: Backend) {
    let app = app(backend).await;
    let plan = r#"{"steps":[
          {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"},"depends_on":[]},
          {"id":"notify","action":"notify.send","args":{"text":"rain $weather.output.precip_prob"},"depends_on":["weather"]},
          {"id":"log","action":"noop","args":{},"depends_on":["notify"]},
          {"id":"notify","action":"notify.send","args":{"text":"second"},"depends_on":[]}
        ]}"#;
    let answer = assert_rejected(&app, "C01", &plan_body(plan), 422, "invalid_plan").await;
    let dup = assert_names("C01", &answer, "duplicate_step_id", "notify", "/steps/3/id");
    let message = dup["message"].as_str().unwrap();
    assert!(message.contains("index 1") && message.contains("index 3"), "C01: both positions: {message}");

    let plan = r#"{"steps":[{"id":"caf\u00e9","action":"noop"},{"id":"cafe\u0301","action":"noop"}]}"#;
    let answer = assert_rejected(&app, "C01 b", &plan_body(plan), 422, "invalid_plan").await;
    assert!(
        !diagnostics(&answer, "duplicate_step_id").is_empty() || !diagnostics(&answer, "invalid_step_id").is_empty(),
        "C01 b: refused as a duplicate or by the id charset, never one shadowing the other: {answer:#}"
    );

    let plan = r#"{"steps":[{"id":"a","action":"noop","id":"b","args":{}}]}"#;
    let answer = assert_rejected(&app, "C01 c", &plan_body(plan), 400, "duplicate_key").await;
    assert!(answer["message"].as_str().unwrap().contains("id"), "C01 c: names the repeated key: {answer:#}");
}

on_both_backends!(c02_self_dependencies_and_cycles_are_rejected_at_submit);
/// C02: a self-dependency, a self-reference through a placeholder, and a cycle behind a valid prefix are refused;
/// a repeated dependency entry is not a cycle and runs once.
async fn c02_self_dependencies_and_cycles_are_rejected_at_submit(backend: Backend) {
    let app = app(backend).await;
    let plan = r#"{"steps":[{"id":"a","action":"noop","args":{},"depends_on":["a"]}]}"#;
    let answer = assert_rejected(&app, "C02 a", &plan_body(plan), 422, "invalid_plan").await;
    assert_names("C02 a", &answer, "self_dependency", "a", "/steps/0/depends_on/0");

    let plan = r#"{"steps":[{"id":"a","action":"noop","args":{"x":"$a.output.y"},"depends_on":[]}]}"#;
    let answer = assert_rejected(&app, "C02 b", &plan_body(plan), 422, "invalid_plan").await;
    assert_names("C02 b", &answer, "placeholder_not_ancestor", "a", "/steps/0/args/x");

    let plan = r#"{"steps":[
          {"id":"root","action":"noop","args":{},"depends_on":[]},
          {"id":"b","action":"noop","args":{},"depends_on":["root","d"]},
          {"id":"c","action":"noop","args":{},"depends_on":["b"]},
          {"id":"d","action":"noop","args":{},"depends_on":["c"]}
        ]}"#;
    let answer = assert_rejected(&app, "C02 c", &plan_body(plan), 422, "invalid_plan").await;
    let cycle = diagnostics(&answer, "cycle");
    assert_eq!(cycle.len(), 1, "C02 c: one cycle: {answer:#}");
    assert_eq!(cycle[0]["cycle"], json!(["b", "c", "d", "b"]), "C02 c: the cycle path, in order");

    let plan = json!({"steps": [
      {"id": "root", "action": "noop", "args": {}, "depends_on": []},
      {"id": "x", "action": "noop", "args": {}, "depends_on": ["root", "root"]}
    ]});
    let (status, run) = app.post("/v1/runs", &json!({"plan": plan})).await;
    assert_eq!(status, 201, "C02 d: a repeated dependency is accepted: {run:#}");
    let run_id = run["id"].as_str().unwrap();
    let worker = TestWorker::new("w").echo("noop");
    worker.run_until_idle(app.engine()).await;
    let run = app.run(run_id).await;
    assert_eq!(run["status"], "succeeded", "C02 d: the run succeeds: {run:#}");
    assert_eq!(worker.calls_for("x").len(), 1, "C02 d: `x` runs exactly once");
    assert_eq!(step(&run, "x")["attempts"], 1);
}

on_both_backends!(c03a_an_unknown_dependency_is_rejected_at_submit_with_a_hint);
/// C03 a: an unknown dependency is refused naming the step and the missing id, with a did-you-mean hint.
async fn c03a_an_unknown_dependency_is_rejected_at_submit_with_a_hint(backend: Backend) {
    let app = app(backend).await;
    let plan = r#"{"context":{"timezone":"Asia/Shanghai"},"steps":[
          {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"},"depends_on":[]},
          {"id":"remind","action":"notify.send","args":{"text":"umbrella"},"not_before":"tomorrow 08:00",
           "depends_on":["wether"]}
        ]}"#;
    let answer = assert_rejected(&app, "C03 a", &plan_body(plan), 422, "invalid_plan").await;
    let error = assert_names("C03 a", &answer, "unknown_dependency", "remind", "/steps/1/depends_on/0");
    assert!(error["message"].as_str().unwrap().contains("wether"), "C03 a: names the missing id: {error:#}");
    assert_eq!(error["hint"], "did you mean `weather`?", "C03 a: suggests the near match");
}

on_both_backends!(c06b_an_unknown_placeholder_is_rejected_at_submit_naming_it);
/// C06 b: a placeholder to a step that does not exist is refused naming it, never sent as `""`.
async fn c06b_an_unknown_placeholder_is_rejected_at_submit_naming_it(backend: Backend) {
    let app = app(backend).await;
    let plan =
        r#"{"steps":[{"id":"bad","action":"notify.send","args":{"text":"hello $nobody.output.x"},"depends_on":[]}]}"#;
    let answer = assert_rejected(&app, "C06 b", &plan_body(plan), 422, "invalid_plan").await;
    let error = assert_names("C06 b", &answer, "placeholder_unknown_step", "bad", "/steps/0/args/text");
    assert!(error["message"].as_str().unwrap().contains("nobody"), "C06 b: names the reference: {error:#}");
}

/// C10 c: invalid retry policies (zero attempts, coefficients below 1 or negative, a negative or inverted
/// interval) are refused at submit, each naming the step's `retry` field.
#[tokio::test]
async fn c10c_invalid_retry_policies_are_rejected_at_submit() {
    let app = app(cairn_tests::Backend::Sqlite).await;
    for retry in [
        r#"{"max_attempts":0}"#,
        r#"{"backoff_coefficient":-1}"#,
        r#"{"backoff_coefficient":0.5}"#,
        r#"{"initial_interval_ms":-5}"#,
        r#"{"initial_interval_ms":100,"max_interval_ms":50}"#,
    ] {
        let plan = format!(r#"{{"steps":[{{"id":"flaky","action":"noop","retry":{retry}}}]}}"#);
        let case = format!("C10 c {retry}");
        let answer = assert_rejected(&app, &case, &plan_body(&plan), 422, "invalid_plan").await;
        let errors = answer["details"]["diagnostics"].as_array().unwrap();
        assert!(
            errors
                .iter()
                .any(|d| d["step_id"] == "flaky"
                    && d["pointer"].as_str().is_some_and(|p| p.starts_with("/steps/0/retry"))),
            "{case}: an error names the step's retry field: {answer:#}"
        );
    }
}

/// C26 b: a lone surrogate escape is a parse error at submit (400), and the server keeps serving.
#[tokio::test]
async fn c26b_a_lone_surrogate_is_rejected_at_submit_with_a_parse_error() {
    let app = app(cairn_tests::Backend::Sqlite).await;
    let plan = r#"{"steps":[{"id":"n","action":"noop","args":{"text":"\ud800"}}]}"#;
    let answer = assert_rejected(&app, "C26 b", &plan_body(plan), 400, "malformed_json").await;
    assert!(answer["details"]["line"].is_u64(), "C26 b: the parse error has a position: {answer:#}");
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200, "C26 b: the process did not crash");
}

on_both_backends!(c26c_a_non_ascii_step_id_is_rejected_by_the_documented_charset);
/// C26 c: a non-ASCII step id is outside the documented id charset (`[A-Za-z_][A-Za-z0-9_-]{0,63}`), so it is
/// refused at submit — never accepted and then stuck.
async fn c26c_a_non_ascii_step_id_is_rejected_by_the_documented_charset(backend: Backend) {
    let app = app(backend).await;
    let plan = r#"{"steps":[
          {"id":"提醒","action":"noop","args":{"text":"带伞"}},
          {"id":"after","action":"noop","args":{"t":"$提醒.output.text"},"depends_on":["提醒"]}
        ]}"#;
    let answer = assert_rejected(&app, "C26 c", &plan_body(plan), 422, "invalid_plan").await;
    let ids = diagnostics(&answer, "invalid_step_id");
    assert!(ids.iter().any(|d| d["pointer"] == "/steps/0/id"), "C26 c: the id is refused at its field: {answer:#}");
}
