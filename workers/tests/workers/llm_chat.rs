//! `llm.chat` against a local mock of `POST /v1/chat/completions`.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use cairn_workers::action::{Action, ActionError};
use cairn_workers::actions::llm::{LlmArgs, LlmChat, LlmConfig, LlmOutput};
use serde_json::{Value, json};

/// The mock answers with `status`; 200 returns a standard `chat.completion` object.
struct Mock {
    status: StatusCode,
    requests: Mutex<Vec<(Option<String>, Value)>>,
}

async fn completions(State(mock): State<Arc<Mock>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    mock.requests.lock().expect("not poisoned").push((auth, body.clone()));
    if mock.status == StatusCode::OK {
        return Json(json!({
            "id": "chatcmpl-123", "object": "chat.completion", "created": 1_741_000_000, "model": body["model"],
            "system_fingerprint": "fp_1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Bring an umbrella.", "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}
        }))
        .into_response();
    }
    let kind = if mock.status == StatusCode::TOO_MANY_REQUESTS { "rate_limit_error" } else { "invalid_request_error" };
    let error = json!({"error": {"message": "mock says no", "type": kind, "param": null, "code": null}});
    (mock.status, [("retry-after", "1")], Json(error)).into_response()
}

async fn mock(status: StatusCode) -> (LlmChat, Arc<Mock>) {
    let mock = Arc::new(Mock { status, requests: Mutex::new(Vec::new()) });
    let router = axum::Router::new().route("/v1/chat/completions", post(completions)).with_state(Arc::clone(&mock));
    let addr = support::serve(router).await;
    let config =
        LlmConfig { base_url: format!("http://{addr}/v1"), api_key: Some("sk-test".into()), model: "mock-1".into() };
    (LlmChat::new(config), mock)
}

async fn chat(llm: &LlmChat, value: Value) -> Result<LlmOutput, ActionError> {
    let args: LlmArgs = serde_json::from_value(value).expect("args fit the schema");
    llm.run(args, &support::ctx("ask")).await
}

#[tokio::test]
async fn a_completion_returns_text_model_and_usage() {
    let (llm, mock) = mock(StatusCode::OK).await;
    let value = json!({"prompt": "Rain tomorrow?", "system": "Be brief.", "max_tokens": 50, "temperature": 0.2});
    let out = chat(&llm, value).await.expect("completion");
    assert_eq!(out.text, "Bring an umbrella.");
    assert_eq!(out.model, "mock-1", "the configured default model is used");
    assert_eq!((out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens), (12, 4, 16));
    assert_eq!(out.finish_reason.as_deref(), Some("stop"));

    let (auth, body) = mock.requests.lock().expect("not poisoned")[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Rain tomorrow?"}])
    );
    assert_eq!(body["max_completion_tokens"], 50);
}

#[tokio::test]
async fn messages_and_a_model_override_are_passed_through() {
    let (llm, mock) = mock(StatusCode::OK).await;
    let history = json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]);
    let value = json!({"model": "other", "messages": history, "prompt": "and now?"});
    assert_eq!(chat(&llm, value).await.expect("completion").model, "other");
    let body = mock.requests.lock().expect("not poisoned")[0].1.clone();
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(3), "messages, then the prompt");
}

#[tokio::test]
async fn http_failures_are_classified_and_not_retried_inside_the_attempt() {
    let cases = [
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited", true),
        (StatusCode::INTERNAL_SERVER_ERROR, "action_error", true),
        (StatusCode::UNAUTHORIZED, "unauthorized", false),
        (StatusCode::BAD_REQUEST, "action_error", false),
    ];
    for (status, code, retryable) in cases {
        let (llm, mock) = mock(status).await;
        let err = chat(&llm, json!({"prompt": "hi"})).await.expect_err("error status");
        assert_eq!((err.code.as_str(), err.retryable), (code, retryable), "HTTP {status}: {err:?}");
        assert_eq!(mock.requests.lock().expect("not poisoned").len(), 1, "the orchestrator retries, not the client");
    }
}

#[tokio::test]
async fn missing_prompt_and_messages_is_invalid_args_and_cancellation_aborts() {
    let (llm, mock) = mock(StatusCode::OK).await;
    let err = chat(&llm, json!({"system": "only a system message"})).await.expect_err("nothing to answer");
    assert_eq!(err.code, "invalid_args");
    assert!(mock.requests.lock().expect("not poisoned").is_empty());

    let ctx = support::ctx("ask");
    ctx.cancellation().cancel();
    let args: LlmArgs = serde_json::from_value(json!({"prompt": "hi"})).expect("args");
    let err = tokio::time::timeout(Duration::from_secs(5), llm.run(args, &ctx)).await.expect("prompt");
    assert_eq!(err.expect_err("cancelled").code, "cancelled");
}

fn llm_at(base_url: String) -> LlmChat {
    LlmChat::new(LlmConfig { base_url, api_key: None, model: "mock-1".into() })
}

#[tokio::test]
async fn a_connection_lost_after_the_request_is_ambiguous_and_a_refused_one_sent_nothing() {
    let (addr, requests) = support::raw_server(support::RawAnswer::Close).await;
    let err = chat(&llm_at(format!("http://{addr}/v1")), json!({"prompt": "hi"})).await.expect_err("no answer");
    assert_eq!(err.code, "transport_error", "{err:?}");
    assert!(err.retryable && !err.did_not_take_effect, "the server read the request: {err:?}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1);

    let closed = format!("http://127.0.0.1:{}/v1", support::closed_port());
    let err = chat(&llm_at(closed), json!({"prompt": "hi"})).await.expect_err("refused");
    assert!(err.retryable && err.did_not_take_effect, "nothing was sent: {err:?}");
}
