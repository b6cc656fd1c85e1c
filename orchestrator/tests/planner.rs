//! The planner against a local mock of `POST /v1/chat/completions` (no network): the repair loop, grounding,
//! untrusted output, and `POST /v1/plans:draft`.
#![allow(missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use cairn_core::catalog::{StaticCatalog, builtin_specs};
use cairn_core::validate::Limits;
use cairn_llm::LlmConfig;
use cairn_orchestrator::api::ApiConfig;
use cairn_orchestrator::clock::SystemClock;
use cairn_orchestrator::planner::{DraftRequest, Drafted, Planner, PlannerError};
use cairn_orchestrator::server::{Server, ServerConfig};
use serde_json::{Value, json};

const REQUEST: &str = "如果明天武汉下雨，早上 8 点提醒我带伞";
const ZONE: &str = "Asia/Shanghai";

/// What the mock answers, per request in order (the last one repeats).
#[derive(Clone)]
enum Answer {
    /// A `chat.completion` whose first message has this content.
    Content(Option<String>),
    /// An error status with an OpenAI error body.
    Status(StatusCode),
    /// A 200 whose body is this text (not a chat completion).
    Raw(&'static str),
}

struct Mock {
    answers: Vec<Answer>,
    requests: Mutex<Vec<Value>>,
}

impl Mock {
    fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("not poisoned").clone()
    }
}

async fn completions(State(mock): State<Arc<Mock>>, Json(body): Json<Value>) -> Response {
    let n = {
        let mut requests = mock.requests.lock().expect("not poisoned");
        requests.push(body.clone());
        requests.len()
    };
    let answer = mock.answers[(n - 1).min(mock.answers.len() - 1)].clone();
    match answer {
        Answer::Content(content) => Json(json!({
            "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 1_741_000_000,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
        }))
        .into_response(),
        Answer::Status(status) => {
            let error =
                json!({"error": {"message": "mock says no", "type": "server_error", "param": null, "code": null}});
            (status, Json(error)).into_response()
        }
        Answer::Raw(text) => (StatusCode::OK, [("content-type", "application/json")], text).into_response(),
    }
}

/// Starts the mock on 127.0.0.1:0 and a planner pointed at it.
async fn start_mock(answers: Vec<Answer>) -> (Planner, Arc<Mock>) {
    let mock = Arc::new(Mock { answers, requests: Mutex::new(Vec::new()) });
    let router = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(Arc::clone(&mock));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr: SocketAddr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("serve") });
    let config =
        LlmConfig { base_url: format!("http://{addr}/v1"), api_key: Some("sk-test".into()), model: "mock-1".into() };
    (Planner::new(&config, Limits::default()).expect("a planner"), mock)
}

fn content(plan: &Value) -> Answer {
    Answer::Content(Some(plan.to_string()))
}

async fn draft(planner: &Planner, text: &str) -> Result<Drafted, PlannerError> {
    let request = DraftRequest { text, timezone: ZONE, max_rounds: None };
    planner.draft(&request, &StaticCatalog::builtin(), &builtin_specs()).await
}

/// The seed plan, with a `context` the planner must overwrite.
fn umbrella_plan(city: &str) -> Value {
    json!({
        "goal": "明天武汉下雨就提醒带伞",
        "context": {"timezone": "UTC", "source_text": "the model's paraphrase"},
        "steps": [
            {"id": "weather", "action": "weather.forecast", "args": {"city": city, "date": "tomorrow"}},
            {"id": "rainy", "action": "condition.eval", "depends_on": ["weather"],
             "args": {"expr": "steps.weather.output.precipitation_probability >= 50"}},
            {"id": "remind", "action": "notify.send", "depends_on": ["rainy"], "when": "steps.rainy.output.matched",
             "not_before": "tomorrow 08:00",
             "args": {"text": "明天有雨 (${weather.output.precipitation_probability}%)，记得带伞"}}
        ]
    })
}

/// A draft with a cycle (weather ⇄ rainy) and an unknown action.
fn broken_plan() -> Value {
    json!({
        "goal": "rain reminder",
        "steps": [
            {"id": "weather", "action": "weather.forecast", "depends_on": ["rainy"], "args": {"city": "武汉"}},
            {"id": "rainy", "action": "condition.eval", "depends_on": ["weather"], "args": {"expr": "true"}},
            {"id": "remind", "action": "email.blast", "depends_on": ["rainy"], "args": {"text": "带伞"}}
        ]
    })
}

fn codes(drafted: &Drafted, round: usize) -> Vec<&str> {
    drafted.rounds[round].diagnostics.iter().map(|d| d.code.as_str()).collect()
}

#[tokio::test]
async fn a_valid_first_draft_is_accepted_in_one_round() {
    let (planner, mock) = start_mock(vec![content(&umbrella_plan("武汉"))]).await;

    let drafted = draft(&planner, REQUEST).await.expect("the draft completes");

    let plan = drafted.plan.expect("the first draft is valid");
    assert_eq!(drafted.rounds.len(), 1, "a valid first draft needs no repair");
    assert!(drafted.error.is_none());
    assert_eq!(plan["context"], json!({"timezone": ZONE, "source_text": REQUEST}), "context is the request's");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "one model call");
    let body = &requests[0];
    assert_eq!(body["model"], "mock-1");
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert!(body["response_format"]["json_schema"]["schema"]["properties"]["steps"].is_object(), "the plan schema");
    let system = body["messages"][0]["content"].as_str().expect("a system message");
    for needle in ["weather.forecast", "notify.send", "non_idempotent", "/city", ZONE, "Plan JSON Schema"] {
        assert!(system.contains(needle), "the system prompt mentions {needle}");
    }
    assert_eq!(body["messages"][1], json!({"role": "user", "content": REQUEST}), "the request is the user message");
}

#[tokio::test]
async fn a_cycle_and_an_unknown_action_are_repaired_in_round_two_with_their_diagnostics() {
    let broken = broken_plan();
    let (planner, mock) = start_mock(vec![content(&broken), content(&umbrella_plan("武汉"))]).await;

    let drafted = draft(&planner, REQUEST).await.expect("the draft completes");

    assert!(drafted.plan.is_some(), "the second draft is valid: {:?}", drafted.error);
    assert_eq!(drafted.rounds.len(), 2);
    let first = codes(&drafted, 0);
    assert!(first.contains(&"cycle") && first.contains(&"unknown_action"), "round 1 found both: {first:?}");
    assert!(drafted.rounds[1].diagnostics.iter().all(|d| !d.is_error()), "round 2 is clean");

    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "one repair call");
    let messages = requests[1]["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4, "system, request, the draft, the diagnostics");
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[2]["content"], broken.to_string(), "the model sees its own draft");
    let feedback = messages[3]["content"].as_str().expect("a repair message");
    for code in ["\"code\": \"cycle\"", "\"code\": \"unknown_action\"", "/steps/2/action", "email.blast"] {
        assert!(feedback.contains(code), "the second request carries the diagnostics ({code}): {feedback}");
    }
}

#[tokio::test]
async fn a_model_that_never_writes_a_valid_plan_fails_clearly_after_n_rounds() {
    let (planner, mock) = start_mock(vec![content(&broken_plan())]).await;

    let drafted = draft(&planner, REQUEST).await.expect("the draft completes");

    assert!(drafted.plan.is_none(), "no invalid plan is ever returned as the plan");
    assert_eq!(drafted.rounds.len(), 3, "the default is three rounds");
    assert_eq!(mock.requests().len(), 3, "one model call per round, no more");
    let error = drafted.error.expect("an error");
    assert!(error.contains("no valid plan after 3 round(s)") && error.contains("cycle"), "{error}");

    let request = DraftRequest { text: REQUEST, timezone: ZONE, max_rounds: Some(2) };
    let (planner, mock) = start_mock(vec![content(&broken_plan())]).await;
    let drafted = planner.draft(&request, &StaticCatalog::builtin(), &builtin_specs()).await.expect("completes");
    assert_eq!((drafted.rounds.len(), mock.requests().len()), (2, 2), "max_rounds is honoured");
}

#[tokio::test]
async fn an_invented_city_is_reported_as_ungrounded_and_never_accepted() {
    let (planner, _mock) = start_mock(vec![content(&umbrella_plan("Paris"))]).await;

    let drafted = draft(&planner, REQUEST).await.expect("the draft completes");

    assert!(drafted.plan.is_none(), "an ungrounded city is never auto-accepted");
    let ungrounded: Vec<_> =
        drafted.rounds[0].diagnostics.iter().filter(|d| d.code.as_str() == "ungrounded_arg").collect();
    assert_eq!(ungrounded.len(), 1, "{:?}", drafted.rounds[0].diagnostics);
    assert_eq!(ungrounded[0].pointer, "/steps/0/args/city");
    assert!(drafted.error.expect("an error").contains("ungrounded_arg"));
}

#[tokio::test]
async fn an_invented_city_passed_through_input_is_ungrounded_too() {
    let mut plan = umbrella_plan("$input.city");
    plan["input"] = json!({"city": "Paris"});
    let mut fixed = umbrella_plan("$input.city");
    fixed["input"] = json!({"city": "武汉"});
    let (planner, mock) = start_mock(vec![content(&plan), content(&fixed)]).await;

    let drafted = draft(&planner, REQUEST).await.expect("the draft completes");

    assert_eq!(codes(&drafted, 0), ["ungrounded_arg"], "the input's literal is checked");
    assert!(drafted.rounds[0].diagnostics[0].message.contains("$input.city"));
    assert!(drafted.plan.is_some(), "a city from the request is accepted through input");
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn oversize_output_stops_at_once_with_a_clear_error() {
    let huge = format!("{{\"goal\": \"{}\", \"steps\": []}}", "x".repeat(300 * 1024));
    let (planner, mock) = start_mock(vec![Answer::Content(Some(huge))]).await;

    let drafted = draft(&planner, REQUEST).await.expect("oversize output is a failed draft, not a panic");

    assert!(drafted.plan.is_none());
    assert_eq!(mock.requests().len(), 1, "no repair round for an oversize answer");
    assert!(drafted.error.expect("an error").contains("over the limit"), "the error names the limit");
    let kept = drafted.rounds[0].draft.as_str().expect("the raw text, cut");
    assert!(kept.len() < 4096, "only a preview of the output is kept");
}

#[tokio::test]
async fn malformed_output_is_repaired_like_any_diagnostic_and_fails_clearly() {
    let duplicate = r#"{"steps": [{"id": "a", "action": "noop", "id": "b"}]}"#;
    let answers = vec![
        Answer::Content(Some("Sure! Here is your plan: {".into())),
        Answer::Content(Some(duplicate.into())),
        Answer::Content(None),
    ];
    let (planner, mock) = start_mock(answers).await;

    let drafted = draft(&planner, REQUEST).await.expect("malformed output is a failed draft, not a panic");

    assert!(drafted.plan.is_none());
    assert_eq!(mock.requests().len(), 3);
    assert_eq!(codes(&drafted, 0), ["parse_error"]);
    assert_eq!(codes(&drafted, 1), ["duplicate_key"], "duplicate keys are refused, never merged");
    assert_eq!(codes(&drafted, 2), ["parse_error"], "an empty answer is a diagnostic too");
    assert_eq!(drafted.rounds[0].draft, json!("Sure! Here is your plan: {"), "the raw text is recorded");
    let feedback = mock.requests()[1]["messages"][3]["content"].as_str().map(str::to_owned).unwrap_or_default();
    assert!(feedback.contains("parse_error"), "the parse error goes back to the model");
}

#[tokio::test]
async fn endpoint_failures_are_planner_errors() {
    let (planner, _mock) = start_mock(vec![Answer::Status(StatusCode::INTERNAL_SERVER_ERROR)]).await;
    let err = draft(&planner, REQUEST).await.expect_err("a 500 fails the draft");
    assert!(matches!(err, PlannerError::Provider { retryable: true, .. }), "{err:?}");

    let (planner, _mock) = start_mock(vec![Answer::Status(StatusCode::UNAUTHORIZED)]).await;
    let err = draft(&planner, REQUEST).await.expect_err("a 401 fails the draft");
    assert!(matches!(err, PlannerError::Provider { retryable: false, .. }), "{err:?}");

    let (planner, _mock) = start_mock(vec![Answer::Raw("{\"not\": \"a completion\"}")]).await;
    let err = draft(&planner, REQUEST).await.expect_err("a non-completion fails the draft");
    assert!(err.to_string().contains("not a chat completion"), "{err}");

    let (planner, mock) = start_mock(vec![content(&umbrella_plan("武汉"))]).await;
    let request = DraftRequest { text: REQUEST, timezone: "Mars/Olympus", max_rounds: None };
    let err = planner.draft(&request, &StaticCatalog::builtin(), &builtin_specs()).await.expect_err("bad zone");
    assert!(matches!(err, PlannerError::InvalidRequest(_)), "{err:?}");
    assert!(mock.requests().is_empty(), "an invalid request costs no model call");
}

/// An orchestrator on an in-memory database serving `planner`.
async fn server(planner: Option<Planner>) -> Server {
    cairn_llm::install_crypto_provider();
    let local = SocketAddr::from(([127, 0, 0, 1], 0));
    let config = ServerConfig {
        db_url: "sqlite::memory:".into(),
        db_answer_deadline: cairn_store::DEFAULT_ANSWER_DEADLINE,
        http_addr: local,
        grpc_addr: local,
        api: ApiConfig { planner: planner.map(Arc::new), ..ApiConfig::default() },
        http: Default::default(),
        grpc: Default::default(),
        worker_token: None,
        engine: Default::default(),
        shutdown_grace: std::time::Duration::from_secs(1),
    };
    Server::start(config, Arc::new(SystemClock)).await.expect("the orchestrator starts")
}

async fn post_draft(server: &Server, body: &Value) -> (StatusCode, Value) {
    let url = format!("http://{}/v1/plans:draft", server.http_addr);
    let response = reqwest::Client::new().post(url).json(body).send().await.expect("the API answers");
    let status = StatusCode::from_u16(response.status().as_u16()).expect("a status");
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test]
async fn the_draft_route_answers_422_with_every_round_when_no_plan_is_valid() {
    let (planner, mock) = start_mock(vec![content(&broken_plan())]).await;
    let server = server(Some(planner)).await;

    let (status, body) = post_draft(&server, &json!({"text": REQUEST, "timezone": ZONE, "max_rounds": 2})).await;

    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "draft_failed");
    let rounds = body["details"]["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2);
    assert_eq!(mock.requests().len(), 2);
    assert!(rounds[0]["draft"]["steps"].is_array() && rounds[0]["diagnostics"][0]["code"].is_string());
    server.abort();
}

#[tokio::test]
async fn the_draft_route_returns_a_valid_plan_and_refuses_without_a_planner() {
    let (planner, _mock) = start_mock(vec![content(&umbrella_plan("武汉"))]).await;
    let server_with = server(Some(planner)).await;
    let (status, body) = post_draft(&server_with, &json!({"text": REQUEST, "timezone": ZONE})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["valid"], true);
    assert_eq!(body["plan"]["context"]["source_text"], REQUEST);
    assert_eq!(body["rounds"].as_array().map(Vec::len), Some(1));

    let (status, body) = post_draft(&server_with, &json!({"text": REQUEST, "max_rounds": 0})).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")));
    let (status, _) = post_draft(&server_with, &json!({"text": REQUEST, "temperature": 2})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "unknown body fields are refused");
    server_with.abort();

    let server_without = server(None).await;
    let (status, body) = post_draft(&server_without, &json!({"text": REQUEST})).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("planner_unconfigured")));
    server_without.abort();
}
