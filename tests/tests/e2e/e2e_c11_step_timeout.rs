//! Case C11 (`../shared/cases/cases.md`): a step timeout must be enforced even while heartbeats keep flowing,
//! and enforced **by the worker** (the action is aborted and its connection closed), not only in the
//! orchestrator's bookkeeping. Run end to end: REST API, a real `cairn worker` process with one slot, and a
//! local endpoint that streams a chunk every 200 ms and would need 10 s to finish.
//!
//! Mapping: `llm.chat` streaming → `http.request` to the streaming endpoint; `status(slow) == timed_out` →
//! `failed` with a `timeout` failure record per attempt; the retry fields → `initial_interval_ms`/
//! `backoff_coefficient`/`max_interval_ms`. The step sets `heartbeat_timeout_ms: 1000`, so the worker
//! heartbeats every ~333 ms during the 2 s attempt: exactly the situation where Temporal's worker let heartbeat
//! acknowledgements push its only local timer out. Times are measured at the endpoint with the real clock
//! (the worker enforces `timeout_ms` in real time; the orchestrator's manual clock only gates the retry, so the
//! test moves it to the retry's due time).

#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::routing::get;
use cairn_core::clock::ManualClock;
use cairn_tests::http::{CairnProcess, HttpApp, TempDir, step, within, within_or};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};
use tokio::time::Instant;

const START: &str = "2027-03-14T12:00:00Z";
const LIMIT: Duration = Duration::from_secs(60);
/// The case's bound: an attempt is stopped within `timeout_ms` + 500 ms of its start.
const STOPPED_WITHIN: Duration = Duration::from_millis(2_500);

/// One request the endpoint received: when it arrived and when the caller closed the connection.
#[derive(Debug, Clone)]
struct Call {
    path: &'static str,
    started: Instant,
    closed: Option<Instant>,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// Marks its call closed when dropped: the server drops a response body when the connection goes away.
struct CloseGuard(Calls, usize);

impl Drop for CloseGuard {
    fn drop(&mut self) {
        self.0.lock().unwrap()[self.1].closed = Some(Instant::now());
    }
}

fn record(calls: &Calls, path: &'static str) -> usize {
    let mut calls = calls.lock().unwrap();
    calls.push(Call { path, started: Instant::now(), closed: None });
    calls.len() - 1
}

/// `GET /stream`: a chunk every 200 ms for 10 s. `GET /quick`: answers at once.
async fn endpoint() -> (String, Calls) {
    async fn stream(State(calls): State<Calls>) -> Body {
        let guard = CloseGuard(calls.clone(), record(&calls, "/stream"));
        Body::from_stream(futures::stream::unfold((guard, 0), |(guard, sent)| async move {
            if sent == 50 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            Some((Ok::<_, Infallible>(Bytes::from_static(b"chunk\n")), (guard, sent + 1)))
        }))
    }
    async fn quick(State(calls): State<Calls>) -> &'static str {
        drop(CloseGuard(calls.clone(), record(&calls, "/quick")));
        "done"
    }
    let calls: Calls = Arc::default();
    let app = Router::new().route("/stream", get(stream)).route("/quick", get(quick)).with_state(calls.clone());
    // The endpoint stands for an outside service: it runs on its own thread and runtime, so the times it
    // records measure the worker alone, whatever the in-process orchestrator is doing on the test's runtime.
    let (bound, url) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            bound.send(format!("http://{}", listener.local_addr().unwrap())).unwrap();
            axum::serve(listener, app).await
        })
    });
    (url.await.unwrap(), calls)
}

fn slow_plan(url: &str, max_attempts: u32) -> Value {
    json!({"steps": [{"id": "slow", "action": "http.request", "args": {"method": "GET", "url": format!("{url}/stream")},
        "timeout_ms": 2000, "heartbeat_timeout_ms": 1000, "idempotent": true,
        "retry": {"max_attempts": max_attempts, "initial_interval_ms": 100, "backoff_coefficient": 1.0,
            "max_interval_ms": 100, "jitter": "none"}}]})
}

fn calls_to(calls: &Calls, path: &str) -> Vec<Call> {
    calls.lock().unwrap().iter().filter(|c| c.path == path).cloned().collect()
}

/// Waits until the `index`-th `/stream` call was closed by the worker and returns it.
async fn closed_stream(calls: &Calls, index: usize, worker: &CairnProcess) -> Call {
    within_or(
        LIMIT,
        || async { calls_to(calls, "/stream").get(index).filter(|c| c.closed.is_some()).cloned() },
        || {
            let seen = calls.lock().unwrap().clone();
            format!(
                "waiting until the worker closes /stream call {index}; calls {seen:?}; worker log:\n{}",
                worker.log()
            )
        },
    )
    .await
}

on_both_backends!(
    c11_the_worker_aborts_an_attempt_at_its_timeout_even_while_heartbeating,
    flavor = "multi_thread",
    worker_threads = 2
);
/// C11: each attempt is aborted by the worker within 2 s + 500 ms of its start although heartbeats flow; the
/// retry starts only after the first attempt's connection closed (no overlap); both attempts end `timeout`.
async fn c11_the_worker_aborts_an_attempt_at_its_timeout_even_while_heartbeating(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let (url, calls) = endpoint().await;
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &["--concurrency", "1"], &[]);
    let run_id = app.submit(slow_plan(&url, 2)).await;

    let first = closed_stream(&calls, 0, &worker).await;
    let first_ran = first.closed.unwrap() - first.started;
    assert!(first_ran <= STOPPED_WITHIN, "{backend:?}: attempt 1 stopped after {first_ran:?}, not by 2.5 s");
    assert!(first_ran >= Duration::from_millis(1_900), "{backend:?}: not before its timeout ({first_ran:?})");

    let run = app
        .wait_run(&run_id, "attempt 1 failed and the retry is due", LIMIT, |run| {
            step(run, "slow")["failures"].as_array().is_some_and(|f| f.len() == 1)
        })
        .await;
    assert_eq!(step(&run, "slow")["failures"][0]["code"], "timeout", "{backend:?}: {run:#}");
    app.set_time_ms(step(&run, "slow")["available_at_ms"].as_i64().unwrap());

    let second = closed_stream(&calls, 1, &worker).await;
    assert!(second.started >= first.closed.unwrap(), "{backend:?}: the attempts never overlap at the endpoint");
    let second_ran = second.closed.unwrap() - second.started;
    assert!(second_ran <= STOPPED_WITHIN, "{backend:?}: attempt 2 stopped after {second_ran:?}, not by 2.5 s");

    let run = app.wait_run(&run_id, "the run fails", LIMIT, |run| run["status"] == "failed").await;
    let slow = step(&run, "slow");
    assert_eq!(slow["status"], "failed", "{backend:?}: {run:#}");
    assert_eq!(slow["attempts"], 2, "{backend:?}: exactly two attempts");
    let codes: Vec<&Value> = slow["failures"].as_array().unwrap().iter().map(|f| &f["code"]).collect();
    assert_eq!(codes, [&json!("timeout"), &json!("timeout")], "{backend:?}: each attempt timed out");
    assert_eq!(calls_to(&calls, "/stream").len(), 2, "{backend:?}: no third request");
}

on_both_backends!(c11_an_aborted_attempt_frees_the_workers_only_slot, flavor = "multi_thread", worker_threads = 2);
/// C11 slot variant: with one slot, a quick step of another run starts as soon as the slow attempt is aborted
/// (by 2.6 s after the slow attempt started), not when it would have finished (10 s).
async fn c11_an_aborted_attempt_frees_the_workers_only_slot(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let (url, calls) = endpoint().await;
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &["--concurrency", "1"], &[]);
    let slow_run = app.submit(slow_plan(&url, 1)).await;
    let started =
        within(LIMIT, "the slow attempt starts", || async { calls_to(&calls, "/stream").first().map(|c| c.started) })
            .await;

    let quick = json!({"steps": [{"id": "quick", "action": "http.request",
            "args": {"method": "GET", "url": format!("{url}/quick")}}]});
    let quick_run = app.submit(quick).await;
    let quick_at = within_or(
        LIMIT,
        || async { calls_to(&calls, "/quick").first().map(|c| c.started) },
        || format!("waiting until the quick step runs; worker log:\n{}", worker.log()),
    )
    .await;
    let slow = calls_to(&calls, "/stream")[0].clone();

    let waited = quick_at - started;
    assert!(waited <= Duration::from_millis(2_600), "{backend:?}: the slot was freed after {waited:?}, not 2.6 s");
    assert!(slow.closed.is_some_and(|closed| closed <= quick_at), "{backend:?}: only after the abort (one slot)");
    for (run_id, status) in [(&slow_run, "failed"), (&quick_run, "succeeded")] {
        app.wait_run(run_id, &format!("the run is {status}"), LIMIT, |run| run["status"] == status).await;
    }
}
