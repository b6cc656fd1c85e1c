//! Case C06 plan A (`../shared/cases/cases.md`) end to end: literal `$` text and the `$$` escape reach an
//! external service unchanged, through the REST API, a real `cairn worker` process and `http.request` to a local
//! recording stub; a whole-value placeholder arrives as a JSON number. (Plan B, an unknown reference, is refused
//! at submit: `api_cases.rs`.)
//!
//! Mapping: the `weather` stub returning `{"precip_prob":0.7}` → a `noop` step echoing `{"precip_prob":0.7}`
//! (the cases' convention that `noop` echoes its args), so the producer's output is exactly the case's.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{CairnProcess, HttpApp, Stub, TempDir, step, within_or};
use cairn_tests::{Backend, on_both_backends};
use serde_json::json;

const START: &str = "2027-03-14T12:00:00Z";
const LIMIT: Duration = Duration::from_secs(60);

on_both_backends!(c06a_literal_dollars_and_the_escape_reach_the_service_unchanged);
/// C06 A: `X-Price: $5.00`, `costs $5 today`, `US$`, `$`, `price $ 3` stay literal; `$$weather…` sends the
/// literal `$weather…`; `$weather.output.precip_prob` is the number 0.7. Never `""` or a dropped header.
async fn c06a_literal_dollars_and_the_escape_reach_the_service_unchanged(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let stub = Stub::start(|_| (200, json!({"ok": true}))).await;
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &[], &[]);
    let plan = json!({"steps": [
      {"id": "weather", "action": "noop", "args": {"precip_prob": 0.7}, "depends_on": []},
      {"id": "post", "action": "http.request", "args": {
          "method": "POST", "url": format!("{}/echo", stub.url()),
          "headers": {"X-Price": "$5.00"},
          "body": {"a": "costs $5 today", "b": "$$weather.output.precip_prob", "c": "US$",
                   "d": "$", "e": "price $ 3", "f": "$weather.output.precip_prob"}},
       "depends_on": ["weather"]}
    ]});
    let run_id = app.submit(plan).await;

    let run = within_or(
        LIMIT,
        || async {
            let run = app.run(&run_id).await;
            run["finished_at_ms"].is_i64().then_some(run)
        },
        || format!("waiting until run {run_id} finishes; worker log:\n{}", worker.log()),
    )
    .await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    assert_eq!(step(&run, "post")["attempts"], 1, "{backend:?}: one request");

    let calls = stub.calls_to("/echo");
    assert_eq!(calls.len(), 1, "{backend:?}: the stub got exactly one request");
    let price = calls[0].headers.get("x-price").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(price.as_deref(), Some("$5.00"), "{backend:?}: the header is sent literally, never blank");
    assert_eq!(
        calls[0].json(),
        json!({"a": "costs $5 today", "b": "$weather.output.precip_prob", "c": "US$", "d": "$",
                   "e": "price $ 3", "f": 0.7}),
        "{backend:?}: literal dollars unchanged, `$$` escapes, a whole placeholder keeps its number type"
    );
}
