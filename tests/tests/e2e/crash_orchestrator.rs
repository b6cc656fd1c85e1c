//! Crash tests of the orchestrator with real processes (issue 4 acceptance; cases C14 and C26 a of
//! `../shared/cases/cases.md`): `cairn serve` is killed with `SIGKILL` mid-run and started again over the same
//! database (a SQLite file, and a fresh PostgreSQL database when `DATABASE_URL` is set) and ports, while real
//! `cairn worker` processes keep running. A local endpoint stands in for every external service (the step's
//! slow service, Open-Meteo, the webhook of `notify.send`) and records every call.
//!
//! The orchestrator runs with a 2 s lease TTL, so its start-up grace (one TTL) is 2 s: the tests show that a
//! worker that kept working while no orchestrator ran re-attaches and reports before the reaper acts.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_tests::http::{TempDir, step, within_or};
use cairn_tests::process::{Call, Endpoint, Orchestrator};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};
use tokio::time::Instant;

const TTL_MS: u64 = 2_000;
const LIMIT: Duration = Duration::from_secs(40);

fn finished(run: &Value) -> bool {
    ["succeeded", "failed", "cancelled"].contains(&run["status"].as_str().unwrap_or_default())
}

/// Waits until the endpoint satisfies `ready`.
async fn until(endpoint: &Endpoint, orchestrator: &Orchestrator, what: &str, ready: impl Fn(&[Call]) -> bool) {
    within_or(
        LIMIT,
        || async { ready(&endpoint.calls()).then_some(()) },
        || format!("waiting until {what}:{}", orchestrator.logs()),
    )
    .await;
}

fn count(calls: &[Call], path: &str) -> usize {
    calls.iter().filter(|c| c.path == path).count()
}

/// C14 with real processes (variant b, the one where a result could be lost): `batch`, a non-idempotent `POST`
/// to a slow service, is running in the worker when every orchestrator process is killed; the service answers
/// while the orchestrator is down, so the worker holds the result; the orchestrator is restarted ~3 s after the
/// kill over the same database. The worker re-attaches and delivers the held result: the service saw exactly
/// one call, `batch` has one attempt and no failure, `notify` runs once, the run succeeds, and `prep` (which
/// succeeded before the kill) is not executed again.
/// Runs the C14 scenario with the orchestrator down for at least `outage` (and until the service answered).
async fn c14(backend: Backend, outage: Duration) {
    let dir = TempDir::new();
    let endpoint = Endpoint::start(|_| (200, json!({"ok": true}))).await;
    let mut orchestrator = Orchestrator::start(backend, dir.path(), TTL_MS).await;
    let hook = format!("{}/hook", endpoint.url());
    let _worker = orchestrator.worker("worker", &[], &[("CAIRN_NOTIFY_WEBHOOK", hook)]);
    let plan = json!({"steps": [
        {"id": "prep", "action": "http.request", "args": {"method": "GET", "url": format!("{}/prep", endpoint.url())}},
        {"id": "batch", "action": "http.request", "depends_on": ["prep"], "idempotent": false,
         "timeout_ms": 300000,
         "args": {"method": "POST", "url": format!("{}/slow?ms=3000", endpoint.url()), "body": {"job": "batch"}}},
        {"id": "notify", "action": "notify.send", "depends_on": ["batch"],
         "args": {"text": "batch done", "channels": ["webhook"]}}
    ]});
    let run_id = orchestrator.submit(plan).await;
    until(&endpoint, &orchestrator, "batch is running", |calls| count(calls, "/slow") == 1).await;
    // Let a heartbeat or two through, then kill every orchestrator process.
    tokio::time::sleep(Duration::from_millis(600)).await;
    orchestrator.kill();
    let killed = Instant::now();

    until(&endpoint, &orchestrator, "the service answered batch", |calls| {
        calls.iter().any(|c| c.path == "/slow" && c.answered)
    })
    .await;
    let down = killed.elapsed();
    if down < outage {
        tokio::time::sleep(outage - down).await;
    }
    orchestrator.restart().await;

    let run = orchestrator
        .wait_run(&run_id, "it finishes", LIMIT, |run| {
            finished(run) || step(run, "batch")["status"] == "outcome_unknown"
        })
        .await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}\nlogs:{}", orchestrator.logs());
    let batch = step(&run, "batch");
    assert_eq!(batch["attempts"], 1, "{backend:?}: no new dispatch after the restart: {run:#}");
    assert_eq!(batch["failures"], json!([]), "{backend:?}: the attempt was never failed: {run:#}");
    assert_eq!(batch["output"]["body"]["slow_call"], 1, "{backend:?}: the held result was delivered");
    assert_eq!(step(&run, "notify")["attempts"], 1, "{backend:?}: {run:#}");
    assert_eq!(step(&run, "prep")["attempts"], 1, "{backend:?}: {run:#}");
    let calls = endpoint.calls();
    assert_eq!(count(&calls, "/slow"), 1, "{backend:?}: calls(batch) == 1");
    assert_eq!(count(&calls, "/prep"), 1, "{backend:?}: the succeeded step was not executed again");
    assert_eq!(count(&calls, "/hook"), 1, "{backend:?}: notify ran once");
}

on_both_backends!(c14_an_orchestrator_killed_mid_step_loses_nothing_and_redispatches_nothing);
/// C14 with real processes (variant b, the one where a result could be lost): `batch`, a non-idempotent `POST`
/// to a slow service, is running in the worker when every orchestrator process is killed; the service answers
/// while the orchestrator is down, so the worker holds the result; the orchestrator is restarted ~3 s after the
/// kill over the same database. The worker re-attaches and delivers the held result: the service saw exactly
/// one call, `batch` has one attempt and no failure, `notify` runs once, the run succeeds, and `prep` (which
/// succeeded before the kill) is not executed again.
async fn c14_an_orchestrator_killed_mid_step_loses_nothing_and_redispatches_nothing(backend: Backend) {
    c14(backend, Duration::from_secs(3)).await;
}

on_both_backends!(c14_a_result_held_through_a_long_outage_is_delivered_within_the_startup_grace);
/// C14 b with an outage of several lease TTLs (the case's orchestrator is down for 60 s with a 10 s liveness
/// timeout): the worker's report retries must not have backed off so far that the restarted orchestrator's
/// start-up grace (one TTL) passes before the held result is delivered.
async fn c14_a_result_held_through_a_long_outage_is_delivered_within_the_startup_grace(backend: Backend) {
    c14(backend, Duration::from_millis(6 * TTL_MS)).await;
}

const SUMMARY: &str = "明天有雨 🌧️，记得带伞";

/// Open-Meteo (geocoding and forecast), the case's canned weather answer (`/summary`) and the webhook.
fn services(call: &Call) -> (u16, Value) {
    match call.path.as_str() {
        "/v1/search" => (
            200,
            json!({"results": [{"name": "上海", "latitude": 31.2304, "longitude": 121.4737,
                "timezone": "Asia/Shanghai", "country": "中国"}]}),
        ),
        "/v1/forecast" => {
            let day = call.param("start_date").unwrap_or("1970-01-01").to_owned();
            (
                200,
                json!({"timezone": "Asia/Shanghai", "daily": {"time": [day], "precipitation_probability_max": [80],
                    "temperature_2m_max": [12.5], "temperature_2m_min": [6.1], "weather_code": [61]}}),
            )
        }
        "/summary" => (200, json!({"summary": SUMMARY, "city": "上海"})),
        _ => (200, json!({"ok": true})),
    }
}

on_both_backends!(c26_unicode_reaches_the_webhook_byte_identical_across_an_orchestrator_restart);
/// C26 (a) with real processes: Chinese text, an emoji with U+FE0F, NFD, a ZWJ sequence, RTL text and 5,000 × '雨'
/// travel from the weather fixture and the plan through placeholders to the webhook of `notify.send`, and the
/// orchestrator is killed and restarted between the steps, so the producers' outputs are read back from storage.
/// The webhook receives the strings byte-identical (raw UTF-8, not escaped, not normalised). Mapping:
/// `weather.lookup` → `weather.forecast` (its geocoder names the city `上海`) plus `http.request` to `/summary` (the
/// case's canned answer; `weather.forecast` has no free-text summary); `reminder.create` → a `notify.send` with
/// `not_before`. Both notifications are held back by `not_before: "in 5s"` until after the restart.
async fn c26_unicode_reaches_the_webhook_byte_identical_across_an_orchestrator_restart(backend: Backend) {
    let long = "雨".repeat(5000);
    let dir = TempDir::new();
    let endpoint = Endpoint::start(services).await;
    let mut orchestrator = Orchestrator::start(backend, dir.path(), TTL_MS).await;
    let env = [
        ("CAIRN_WEATHER_GEOCODING_URL", endpoint.url()),
        ("CAIRN_WEATHER_FORECAST_URL", endpoint.url()),
        ("CAIRN_NOTIFY_WEBHOOK", format!("{}/hook", endpoint.url())),
    ];
    let _worker = orchestrator.worker("worker", &[], &env);
    let plan = json!({"context": {"timezone": "Asia/Shanghai"}, "steps": [
        {"id": "weather", "action": "weather.forecast", "args": {"city": "上海", "date": "tomorrow"}},
        {"id": "summary", "action": "http.request",
         "args": {"method": "GET", "url": format!("{}/summary", endpoint.url())}},
        {"id": "notify", "action": "notify.send", "depends_on": ["weather", "summary"], "not_before": "in 5s",
         "args": {"channels": ["webhook"], "text": "$summary.output.body.summary",
            "title": "天气：$weather.output.city ✅", "nfd": "e\u{301}", "rtl": "مطر", "zwj": "👩\u{200d}💻",
            "long": long}},
        {"id": "remind", "action": "notify.send", "depends_on": ["summary"], "not_before": "in 5s",
         "args": {"channels": ["webhook"], "text": "$summary.output.body.summary"}}
    ]});
    let run_id = orchestrator.submit(plan).await;
    let run = orchestrator
        .wait_run(&run_id, "weather and summary succeeded", LIMIT, |run| {
            step(run, "weather")["status"] == "succeeded" && step(run, "summary")["status"] == "succeeded"
        })
        .await;
    orchestrator.kill();
    assert_eq!(count(&endpoint.calls(), "/hook"), 0, "{backend:?}: killed before the notifications: {run:#}");
    orchestrator.restart().await;

    let run = orchestrator.wait_run(&run_id, "it finishes", LIMIT, finished).await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    assert_eq!(step(&run, "weather")["output"]["city"], "上海", "{backend:?}: read back from storage");
    assert_eq!(step(&run, "summary")["output"]["body"]["summary"], SUMMARY, "{backend:?}");
    let hooks: Vec<Call> = endpoint.calls_to("/hook");
    assert_eq!(hooks.len(), 2, "{backend:?}: one webhook call per notification");
    let by_step = |id: &str| {
        let key = format!("{run_id}/{id}");
        hooks.iter().find(|c| c.json()["idempotency_key"] == key.as_str()).cloned().unwrap()
    };
    let notify = by_step("notify");
    let raw = &notify.body[..];
    for text in [SUMMARY, "天气：上海 ✅", "e\u{301}", "مطر", "👩\u{200d}💻", long.as_str()] {
        let found = raw.windows(text.len()).any(|w| w == text.as_bytes());
        assert!(found, "{backend:?}: the webhook body carries {text:?} as raw UTF-8 bytes");
    }
    let body = notify.json();
    assert_eq!(body["text"].as_str().unwrap().as_bytes(), SUMMARY.as_bytes(), "{backend:?}: with U+FE0F");
    assert_eq!(body["title"], "天气：上海 ✅", "{backend:?}");
    assert_eq!(body["nfd"].as_str().unwrap().as_bytes(), "e\u{301}".as_bytes(), "{backend:?}: not normalised");
    assert_eq!(body["rtl"], "مطر", "{backend:?}");
    assert_eq!(body["zwj"], "👩\u{200d}💻", "{backend:?}");
    assert_eq!(body["long"].as_str(), Some(long.as_str()), "{backend:?}: intact");
    assert_eq!(by_step("remind").json()["text"], SUMMARY, "{backend:?}: the reminder text is identical");
}
