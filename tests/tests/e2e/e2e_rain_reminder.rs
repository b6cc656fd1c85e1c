//! The main job end to end (issue 5 acceptance), on SQLite and on PostgreSQL: the rain reminder submitted
//! through the real REST API, run by a real `cairn worker` process, with Open-Meteo replaced by a local stub,
//! `notify.send` delivering to a file and to a local recording webhook, and the orchestrator on a manual clock.
//!
//! The plan's zone is Asia/Shanghai and the clock starts at 2027-03-14T12:00Z (20:00 local), so
//! `not_before: "tomorrow 08:00"` is 2027-03-15T00:00Z. The worker's own clock is real, so the forecast day is
//! given explicitly (`2027-03-15`) instead of `tomorrow`. After moving the clock the test wakes the engine, as
//! the worker long-polls. Each scenario waits on conditions with bounded deadlines.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{CairnProcess, HttpApp, Stub, TempDir, cairn, holds_for, step, within_or};
use cairn_tests::{Backend, on_both_backends};
use jiff::Timestamp;
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";
/// 08:00 on 2027-03-15 in Asia/Shanghai.
const EIGHT_LOCAL: &str = "2027-03-15T00:00:00Z";
/// Generous: the worker is a separate process on a busy machine.
const LIMIT: Duration = Duration::from_secs(60);

fn ms(at: &str) -> i64 {
    at.parse::<Timestamp>().unwrap().as_millisecond()
}

/// What the weather stub answers.
#[derive(Debug, Clone, Copy)]
enum Forecast {
    /// Precipitation probability (%) for every day asked.
    Rain(u32),
    /// 503 to every request.
    Down,
}

/// Open-Meteo's geocoding (`/v1/search`) and forecast (`/v1/forecast`) response shapes.
fn open_meteo(forecast: Forecast) -> impl Fn(&cairn_tests::http::Recorded) -> (u16, Value) + Send + Sync {
    move |request| match (forecast, request.path.as_str()) {
        (Forecast::Down, _) => (503, json!({"error": true, "reason": "service unavailable"})),
        (_, "/v1/search") => (
            200,
            json!({"results": [{"name": "Wuhan", "latitude": 30.5928, "longitude": 114.3055,
                "timezone": "Asia/Shanghai", "country": "China"}]}),
        ),
        (Forecast::Rain(percent), "/v1/forecast") => {
            let day = request.param("start_date").unwrap_or("1970-01-01").to_owned();
            let code = if percent >= 50 { 61 } else { 1 };
            (
                200,
                json!({"timezone": "Asia/Shanghai", "daily": {"time": [day],
                    "precipitation_probability_max": [percent], "temperature_2m_max": [12.5],
                    "temperature_2m_min": [6.1], "weather_code": [code]}}),
            )
        }
        _ => (404, json!({"error": true, "reason": "no such endpoint"})),
    }
}

fn rain_reminder() -> Value {
    json!({
        "goal": "If it rains in Wuhan tomorrow, remind me at 08:00 to take an umbrella",
        "context": {"timezone": "Asia/Shanghai",
            "source_text": "If it rains in Wuhan tomorrow, remind me at 8 to take an umbrella"},
        "steps": [
            {"id": "weather", "action": "weather.forecast", "args": {"city": "Wuhan", "date": "2027-03-15"},
             "timeout_ms": 10000,
             "retry": {"max_attempts": 3, "initial_interval_ms": 1000, "backoff_coefficient": 2.0,
                "max_interval_ms": 30000, "jitter": "none"}},
            {"id": "rainy", "action": "condition.eval", "depends_on": ["weather"],
             "args": {"expr": "input.p >= 50", "vars": {"p": "$weather.output.precipitation_probability"}}},
            {"id": "remind", "action": "notify.send", "depends_on": ["rainy"],
             "when": "steps.rainy.output.matched", "not_before": "tomorrow 08:00", "idempotent": false,
             "args": {"channels": ["file", "webhook"],
                "text": "Rain expected (${weather.output.precipitation_probability}%): take an umbrella"}}
        ]
    })
}

/// Orchestrator, weather stub, webhook receiver and one worker process.
struct Scene {
    app: HttpApp,
    weather: Stub,
    webhook: Stub,
    notify_file: PathBuf,
    worker: CairnProcess,
    dir: TempDir,
}

impl Scene {
    async fn start(backend: Backend, forecast: Forecast) -> Scene {
        let clock = Arc::new(ManualClock::new(START.parse().unwrap()));
        let app = HttpApp::start(backend, clock, None).await;
        let weather = Stub::start(open_meteo(forecast)).await;
        let webhook = Stub::start(|_| (200, json!({"ok": true}))).await;
        let dir = TempDir::new();
        let notify_file = dir.path().join("notifications.jsonl");
        let env = [
            ("CAIRN_WEATHER_GEOCODING_URL", weather.url()),
            ("CAIRN_WEATHER_FORECAST_URL", weather.url()),
            ("CAIRN_NOTIFY_FILE", notify_file.display().to_string()),
            ("CAIRN_NOTIFY_WEBHOOK", format!("{}/hook", webhook.url())),
        ];
        let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &[], &env);
        Scene { app, weather, webhook, notify_file, worker, dir }
    }

    /// The JSON lines the `file` channel wrote.
    fn file_lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.notify_file).unwrap_or_default();
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    /// Deliveries on both channels so far.
    fn deliveries(&self) -> usize {
        self.file_lines().len() + self.webhook.calls().len()
    }

    /// Waits until the run satisfies `ready`; on timeout, fails with the worker's log.
    async fn wait(&mut self, run_id: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let (app, worker) = (&self.app, &mut self.worker);
        within_or(
            LIMIT,
            || async {
                let run = app.run(run_id).await;
                ready(&run).then_some(run)
            },
            || {
                let exited = if worker.exited() { " (the worker process has exited)" } else { "" };
                format!("waiting until run {run_id}: {what}\nworker log{exited}:\n{}", worker.log())
            },
        )
        .await
    }
}

on_both_backends!(rain_forecast_delivers_once_per_channel_at_eight_local_time);
/// Rain (80 %): nothing is delivered before 08:00 local; at 08:00 exactly one delivery per channel, with the
/// step's idempotency key; the run succeeds.
async fn rain_forecast_delivers_once_per_channel_at_eight_local_time(backend: Backend) {
    let mut scene = Scene::start(backend, Forecast::Rain(80)).await;
    let run_id = scene.app.submit(rain_reminder()).await;
    let key = format!("{run_id}/remind");

    let run = scene
        .wait(&run_id, "the forecast is checked and the reminder waits for its timer", |run| {
            step(run, "rainy")["status"] == "succeeded" && step(run, "remind")["status"] == "ready"
        })
        .await;
    assert_eq!(step(&run, "weather")["output"]["precipitation_probability"], 80.0, "{backend:?}: {run:#}");
    assert_eq!(step(&run, "rainy")["output"]["matched"], true, "{backend:?}: 80 % is rain");
    let timer = &step(&run, "remind")["timer"];
    assert_eq!(timer["not_before_at_ms"], ms(EIGHT_LOCAL), "{backend:?}: 08:00 Shanghai is 00:00Z: {timer}");
    let forecast_calls = scene.weather.calls_to("/v1/forecast");
    assert_eq!(forecast_calls.len(), 1, "{backend:?}: one forecast request");
    assert_eq!(forecast_calls[0].param("start_date"), Some("2027-03-15"), "{backend:?}: for the plan's day");

    scene.app.set_time("2027-03-14T23:59:59Z");
    let (waiting, id) = (&scene, run_id.as_str());
    holds_for(Duration::from_millis(600), "nothing is delivered one second before 08:00 local", || async move {
        waiting.deliveries() == 0 && step(&waiting.app.run(id).await, "remind")["status"] == "ready"
    })
    .await;

    scene.app.set_time(EIGHT_LOCAL);
    let run = scene.wait(&run_id, "the run succeeds at 08:00 local", |run| run["status"] == "succeeded").await;
    let remind = step(&run, "remind");
    assert_eq!(remind["status"], "succeeded", "{backend:?}: {run:#}");
    assert_eq!(remind["attempts"], 1, "{backend:?}: the reminder ran once");

    let lines = scene.file_lines();
    assert_eq!(lines.len(), 1, "{backend:?}: exactly one line in the notification file: {lines:#?}");
    assert!(lines[0]["text"].as_str().unwrap().starts_with("Rain expected (80"), "{backend:?}: {}", lines[0]);
    assert_eq!(lines[0]["idempotency_key"], key, "{backend:?}: the line carries the step's key");
    let hooks = scene.webhook.calls();
    assert_eq!(hooks.len(), 1, "{backend:?}: exactly one webhook request");
    assert_eq!(hooks[0].method, "POST");
    assert_eq!(hooks[0].path, "/hook");
    let header = hooks[0].headers.get("idempotency-key").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(header.as_deref(), Some(key.as_str()), "{backend:?}: the webhook gets the Idempotency-Key header");
    assert_eq!(hooks[0].json()["text"], lines[0]["text"], "{backend:?}: both channels got the same message");

    let (_, history) = scene.app.get(&format!("/v1/runs/{run_id}/events")).await;
    let started: Vec<i64> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step_id"] == "remind" && e["kind"] == "step_started")
        .map(|e| e["at_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(started, [ms(EIGHT_LOCAL)], "{backend:?}: the reminder started once, at 08:00 local");
}

on_both_backends!(no_rain_skips_the_reminder_and_delivers_nothing);
/// No rain (10 %): the reminder is `skipped`, nothing is delivered (not even after 08:00), the run succeeds.
async fn no_rain_skips_the_reminder_and_delivers_nothing(backend: Backend) {
    let mut scene = Scene::start(backend, Forecast::Rain(10)).await;
    let run_id = scene.app.submit(rain_reminder()).await;

    let run = scene.wait(&run_id, "the run finishes", |run| run["finished_at_ms"].is_i64()).await;
    assert_eq!(run["status"], "succeeded", "{backend:?}: a skip is not a failure: {run:#}");
    assert_eq!(step(&run, "rainy")["output"]["matched"], false, "{backend:?}: 10 % is not rain");
    assert_eq!(step(&run, "remind")["status"], "skipped", "{backend:?}: {run:#}");
    assert_eq!(step(&run, "remind")["attempts"], 0, "{backend:?}: the reminder never ran");

    scene.app.set_time("2027-03-15T00:00:01Z");
    let finished = &scene;
    holds_for(Duration::from_millis(300), "nothing is delivered, even after 08:00 local", || async move {
        finished.deliveries() == 0
    })
    .await;
}

on_both_backends!(weather_service_down_retries_with_backoff_then_fails_with_the_root_cause_shown);
/// Weather service down: each attempt fails retryably and the next is scheduled with exponential backoff
/// (1 s, 2 s; jitter off); after the third the step fails with failure records carrying a code and a
/// suggestion, dependents are skipped, the run is `failed`, and `cairn show` names the root cause.
async fn weather_service_down_retries_with_backoff_then_fails_with_the_root_cause_shown(backend: Backend) {
    let mut scene = Scene::start(backend, Forecast::Down).await;
    let run_id = scene.app.submit(rain_reminder()).await;

    for (attempt, backoff_ms) in [(1_usize, 1_000_i64), (2, 2_000)] {
        let what = format!("attempt {attempt} fails and a retry is scheduled");
        let run = scene
            .wait(&run_id, &what, |run| {
                let weather = step(run, "weather");
                weather["status"] == "ready" && weather["failures"].as_array().is_some_and(|f| f.len() == attempt)
            })
            .await;
        let weather = step(&run, "weather");
        let failure = &weather["failures"][attempt - 1];
        assert_eq!(failure["code"], "action_error", "{backend:?}: a 503 is an action error: {failure:#}");
        assert_eq!(failure["retryable"], true, "{backend:?}: a 503 is retryable: {failure:#}");
        let due = weather["available_at_ms"].as_i64().unwrap();
        assert_eq!(due, scene.app.now_ms() + backoff_ms, "{backend:?}: backoff after attempt {attempt}");
        assert_eq!(scene.weather.calls().len(), attempt, "{backend:?}: no retry before its time");
        scene.app.set_time_ms(due);
    }

    let run = scene.wait(&run_id, "the run fails", |run| run["status"] == "failed").await;
    let weather = step(&run, "weather");
    assert_eq!(weather["status"], "failed", "{backend:?}: {run:#}");
    assert_eq!(weather["attempts"], 3, "{backend:?}: exactly max_attempts attempts");
    let failures = weather["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 3, "{backend:?}: one failure record per attempt");
    for failure in failures {
        assert!(failure["code"].is_string(), "{backend:?}: a failure record has a code: {failure:#}");
        assert!(failure["suggestion"].is_string(), "{backend:?}: and a suggestion: {failure:#}");
    }
    for dependent in ["rainy", "remind"] {
        assert_eq!(step(&run, dependent)["status"], "skipped", "{backend:?}: {dependent} never ran");
    }
    assert_eq!(run["failure"]["step_id"], "weather", "{backend:?}: the root cause: {run:#}");
    assert_eq!(scene.deliveries(), 0, "{backend:?}: nothing delivered");
    assert_eq!(scene.weather.calls().len(), 3, "{backend:?}: three requests in all");

    let shown = cairn(scene.dir.path(), &["show", &run_id, "--server", &scene.app.base_url]).await;
    assert_eq!(shown.code, Some(0), "{backend:?}: cairn show works: {shown:#?}");
    assert!(shown.stdout.contains(&format!("run {run_id}: failed")), "{backend:?}: {}", shown.stdout);
    assert!(
        shown.stdout.contains("root cause: step `weather` action_error"),
        "{backend:?}: cairn show prints the root cause: {}",
        shown.stdout
    );
    assert!(shown.stdout.contains("suggestion"), "{backend:?}: and what to do: {}", shown.stdout);

    let shown = cairn(scene.dir.path(), &["show", &run_id, "--server", &scene.app.base_url, "--json"]).await;
    assert_eq!(shown.code, Some(0), "{backend:?}: {shown:#?}");
    let json: Value = serde_json::from_str(&shown.stdout).expect("cairn show --json prints JSON");
    assert_eq!(json["id"], run_id.as_str());
    assert_eq!(json["status"], "failed");
    let failures = step(&json, "weather")["failures"].as_array().unwrap().clone();
    assert_eq!(failures.len(), 3, "{backend:?}: steps[].failures has every record: {json:#}");
    assert!(failures.iter().all(|f| f["code"] == "action_error" && f["suggestion"].is_string()));
}
