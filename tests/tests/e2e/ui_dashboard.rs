//! The web dashboard in a real browser (headless chromium, [`super::ui_browser`]) against a real `cairn serve`
//! with an API token and a real `cairn worker`: the login and its CSRF protection, the run list, a run's DAG
//! and timeline, a step's delivery records, approving a waiting step and retrying a failed one from the page, and a phone-sized window
//! that never scrolls sideways. Screenshots of the main pages go to `target/ui-screenshots/`.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn_tests::Backend;
use cairn_tests::http::{TempDir, step};
use cairn_tests::process::{Endpoint, Orchestrator};
use serde_json::{Value, json};

use super::ui_browser::Dashboard;

const LIMIT: Duration = Duration::from_secs(60);

fn ended(run: &Value) -> bool {
    run["finished_at_ms"].is_i64()
}

/// A fan-out and join: `fetch` → (`parse`, `score`) → `report`.
fn diamond() -> Value {
    json!({"goal": "Nightly report for the ops team", "steps": [
        {"id": "fetch", "action": "noop", "args": {"source": "<img src=x onerror=alert(1)>"}},
        {"id": "parse", "action": "noop", "depends_on": ["fetch"], "args": {}},
        {"id": "score", "action": "noop", "depends_on": ["fetch"], "args": {}},
        {"id": "report", "action": "noop", "depends_on": ["parse", "score"], "args": {}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_list_shows_runs_and_a_run_page_draws_its_dag_and_timeline() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let run_id = orchestrator.submit(diamond()).await;
    orchestrator.wait_run(&run_id, "the diamond ends", LIMIT, ended).await;
    let mut hostile = diamond();
    hostile["goal"] = json!("<b id=injected>bold</b> goal");
    let (_, second) =
        orchestrator.post("/v1/runs", &json!({"plan": hostile, "labels": {"team": "ops", "env": "prod"}})).await;
    let second = second["id"].as_str().unwrap().to_owned();
    orchestrator.wait_run(&second, "the second run ends", LIMIT, ended).await;
    let waiting = json!({"goal": "Publish the weekly digest after review", "steps": [
        {"id": "draft", "action": "noop", "args": {}},
        {"id": "publish", "action": "noop", "depends_on": ["draft"], "approval": {"required": true}, "args": {}}]});
    let third = orchestrator.submit(waiting).await;
    orchestrator.wait_run(&third, "publish waits", LIMIT, |r| step(r, "publish")["status"] == "waiting_approval").await;
    let (status, _) = orchestrator.put("/v1/recipients/ops", &json!({"channels": {"stdout": {}}})).await;
    assert_eq!(status, 201, "the recipient is created");
    let remind =
        json!({"steps": [{"id": "remind", "action": "notify.send", "args": {"to": "ops", "text": "deployed"}}]});
    let reminded = orchestrator.submit(remind).await;
    orchestrator.wait_run(&reminded, "the reminder ends", LIMIT, ended).await;
    let dashboard = Dashboard::open(&orchestrator, 1280, 900).await;

    dashboard.wait_for(&format!("tr[data-run-id='{run_id}'][data-status='succeeded']")).await;
    let listed_goal = dashboard.text_of(&format!("tr[data-run-id='{second}'] td.goal")).await;
    dashboard.wait_for(&format!("tr[data-run-id='{third}'][data-status='running']")).await;
    dashboard.screenshot("run-list").await;
    dashboard.goto("/ui/attention").await;
    dashboard.wait_for(&format!("tr[data-run-id='{third}']")).await;
    let attention = dashboard.script("return document.querySelectorAll('#runs tbody tr').length;").await;
    let why = dashboard.text_of(&format!("tr[data-run-id='{third}'] td.why-list")).await;
    dashboard.screenshot("attention").await;
    dashboard.goto(&format!("/ui/runs/{second}")).await;
    let goal = dashboard.text_of("#run-goal").await;
    let injected = dashboard.script("return document.getElementById('injected') !== null;").await;
    dashboard.goto("/ui").await;
    dashboard.click(&format!("tr[data-run-id='{run_id}'] a.run-link")).await;
    dashboard.wait_for("#dag g[data-step-id='report'][data-status='succeeded']").await;
    let nodes = dashboard.script("return [...document.querySelectorAll('#dag g[data-step-id]')].map(g => [g.dataset.stepId, g.dataset.status]);").await;
    let edges = dashboard.script("return [...document.querySelectorAll('#dag path.edge')].map(p => p.dataset.from + '>' + p.dataset.to).sort();").await;
    let bars = dashboard.script("return document.querySelectorAll('#timeline .tl-bar').length;").await;
    let args = dashboard.text_of("#step-detail pre").await;
    dashboard.screenshot("run-page").await;
    dashboard.goto(&format!("/ui/runs/{reminded}")).await;
    dashboard.wait_for("#step-deliveries tr[data-channel='stdout'][data-recipient='ops']").await;
    let delivery = dashboard.text_of("#step-deliveries tbody tr").await;
    dashboard.close().await;

    assert_eq!(goal, "<b id=injected>bold</b> goal", "a goal is shown as text");
    assert_eq!(listed_goal, goal, "the run list shows the goal");
    assert_eq!(attention, json!(1), "only the run waiting for approval needs attention");
    assert_eq!(why, "publish waiting approval", "the inbox says which step needs what");
    assert_eq!(injected, json!(false), "markup in a goal is never parsed");
    let expected = ["fetch", "parse", "score", "report"].map(|s| json!([s, "succeeded"]));
    assert_eq!(nodes, json!(expected), "one node per step, with its status");
    assert_eq!(edges, json!(["fetch>parse", "fetch>score", "parse>report", "score>report"]), "one edge per dependency");
    assert_eq!(bars, json!(4), "one timeline bar per attempt");
    assert!(args.contains("<img src=x onerror=alert(1)>"), "args are shown verbatim: {args}");
    for shown in ["ops", "stdout", "delivered", "1"] {
        assert!(delivery.contains(shown), "the step's delivery record shows `{shown}`: {delivery}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_step_approved_from_the_page_lets_the_run_finish() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let plan = json!({"goal": "Ship the release once someone approves", "steps": [
        {"id": "build", "action": "noop", "args": {}},
        {"id": "ship", "action": "noop", "depends_on": ["build"], "approval": {"required": true}, "args": {}}]});
    let run_id = orchestrator.submit(plan).await;
    orchestrator
        .wait_run(&run_id, "ship waits for approval", LIMIT, |r| step(r, "ship")["status"] == "waiting_approval")
        .await;
    let dashboard = Dashboard::open(&orchestrator, 1280, 900).await;

    dashboard.goto("/ui/approvals").await;
    dashboard.wait_for(&format!("#approvals tr[data-run-id='{run_id}'][data-step-id='ship']")).await;
    dashboard.screenshot("approvals").await;
    dashboard.goto(&format!("/ui/runs/{run_id}")).await;
    dashboard.wait_for("#dag g[data-step-id='ship'][data-status='waiting_approval']").await;
    dashboard.wait_for("#why-waiting").await;
    dashboard.type_into("#op-by", "alice").await;
    dashboard.click("#step-approve").await;
    // The page follows the run through its event stream: no reload.
    dashboard.wait_for("#dag g[data-step-id='ship'][data-status='succeeded']").await;
    dashboard
        .wait_until(
            "the run shows as succeeded",
            "document.querySelector('.run-head .status').dataset.status === 'succeeded'",
        )
        .await;
    dashboard.close().await;

    let run = orchestrator.run(&run_id).await;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    let (_, history) = orchestrator.get(&format!("/v1/runs/{run_id}/events")).await;
    let approved = history["events"].as_array().unwrap().iter().find(|e| e["kind"] == "step_approved").cloned();
    assert_eq!(approved.map(|e| e["data"]["by"].clone()), Some(json!("alice")), "the decision names who took it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_retried_from_the_page_after_its_endpoint_recovers_finishes_the_run() {
    let dir = TempDir::new();
    let healthy = Arc::new(AtomicBool::new(false));
    let up = healthy.clone();
    let endpoint = Endpoint::start(move |call| match call.path.as_str() {
        "/flaky" if !up.load(Ordering::SeqCst) => (500, json!({"error": "down"})),
        _ => (200, json!({"ok": true})),
    })
    .await;
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let plan = json!({"goal": "Call the flaky service", "steps": [
        {"id": "first", "action": "http.request", "args": {"method": "GET", "url": format!("{}/first", endpoint.url())}},
        {"id": "call", "action": "http.request", "depends_on": ["first"], "idempotent": true,
         "retry": {"max_attempts": 1}, "args": {"method": "GET", "url": format!("{}/flaky", endpoint.url())}},
        {"id": "after", "action": "noop", "depends_on": ["call"], "args": {}}]});
    let run_id = orchestrator.submit(plan).await;
    let failed = orchestrator.wait_run(&run_id, "the run fails", LIMIT, ended).await;
    assert_eq!(failed["status"], "failed", "{failed:#}");
    let dashboard = Dashboard::open(&orchestrator, 1280, 1000).await;

    dashboard.goto(&format!("/ui/runs/{run_id}")).await;
    dashboard.wait_for("#dag g[data-step-id='call'][data-status='failed']").await;
    let record = dashboard.text_of("#step-detail .failure").await;
    healthy.store(true, Ordering::SeqCst);
    dashboard.click("#step-retry").await;
    dashboard.wait_for("#dag g[data-step-id='after'][data-status='succeeded']").await;
    dashboard.click("#dag g[data-step-id='call']").await;
    dashboard.wait_for("#step-detail[data-step-id='call']").await;
    dashboard
        .wait_until(
            "the call shows two attempts",
            "document.querySelectorAll(\"#timeline .tl-bar[data-step-id='call']\").length === 2",
        )
        .await;
    dashboard.screenshot("run-page-retried").await;
    dashboard.close().await;

    assert!(record.contains("suggestion"), "the failure record shows its code and suggestion: {record}");
    let run = orchestrator.run(&run_id).await;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert_eq!(endpoint.calls_to("/first").len(), 1, "the succeeded step never ran again");
    assert_eq!(endpoint.calls_to("/flaky").len(), 2, "the failed call and the retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_sets_a_session_that_changes_state_only_with_its_csrf_token() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let plan = json!({"goal": "wait", "steps": [{"id": "w", "action": "sleep", "args": {"duration_ms": 600_000}}]});
    let run_id = orchestrator.submit(plan).await;
    let browser = super::ui_browser::Browser::start(1280, 900).await;
    let dashboard = Dashboard { browser, base_url: orchestrator.base_url.clone() };

    // A link to a run, opened without a session: the login form, then that run.
    dashboard.goto(&format!("/ui/runs/{run_id}")).await;
    dashboard.wait_for("#token").await.send_keys("not-the-token").await.unwrap();
    dashboard.click("#login-submit").await;
    dashboard
        .wait_until(
            "the form says the token was refused",
            "document.getElementById('login-error').textContent.includes('not accepted')",
        )
        .await;
    dashboard.wait_for("#token").await.send_keys(orchestrator.api_token()).await.unwrap();
    dashboard.click("#login-submit").await;
    dashboard.wait_for("#dag g[data-step-id='w']").await;
    let cancel = format!("/v1/runs/{run_id}:cancel");
    let visible = dashboard.script("return document.cookie;").await;
    let without = dashboard
        .script(&format!(
            "return fetch('{cancel}', {{method: 'POST'}}).then(async r => [r.status, (await r.json()).code]);"
        ))
        .await;
    let still_open = orchestrator.run(&run_id).await["finished_at_ms"].is_null();
    let with = dashboard
        .script(&format!(
            "const csrf = document.cookie.split('; ').find(c => c.startsWith('cairn_csrf=')).slice(11);
             return fetch('{cancel}', {{method: 'POST', headers: {{'X-CSRF-Token': csrf}}}}).then(r => r.status);"
        ))
        .await;
    dashboard.close().await;

    let visible = visible.as_str().unwrap_or_default();
    assert!(
        visible.contains("cairn_csrf=") && !visible.contains("cairn_session"),
        "the session is HttpOnly: {visible}"
    );
    assert_eq!(without, json!([403, "csrf_failed"]), "a state change without the CSRF token is refused");
    assert!(still_open, "the refused cancel changed nothing");
    assert_eq!(with, json!(200), "the same request with the CSRF token is accepted");
    assert_eq!(orchestrator.run(&run_id).await["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_390_pixels_wide_no_page_scrolls_sideways() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let _worker = orchestrator.worker("w1", &[], &[]);
    let run_id = orchestrator.submit(diamond()).await;
    orchestrator.wait_run(&run_id, "the diamond ends", LIMIT, ended).await;
    let dashboard = Dashboard::open(&orchestrator, 390, 844).await;

    let mut widths = Vec::new();
    for (path, ready) in [
        ("/ui".to_owned(), format!("tr[data-run-id='{run_id}']")),
        (format!("/ui/runs/{run_id}"), "#dag g[data-step-id='report']".to_owned()),
        ("/ui/approvals".to_owned(), "main .panel .empty".to_owned()),
        ("/ui/schedules".to_owned(), "main .panel .empty".to_owned()),
        ("/ui/workers".to_owned(), "#workers".to_owned()),
    ] {
        dashboard.goto(&path).await;
        dashboard.wait_for(&ready).await;
        let width = dashboard.script("return [window.innerWidth, document.documentElement.scrollWidth];").await;
        if path.starts_with("/ui/runs/") {
            dashboard.screenshot("run-page-390").await;
        }
        widths.push((path, width));
    }
    dashboard.close().await;

    for (path, width) in widths {
        assert_eq!(width[0], 390, "{path}: the window is 390 CSS pixels wide");
        assert!(width[1].as_i64().unwrap() <= 390, "{path}: nothing is wider than the window: {width}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_api_token_the_dashboard_needs_no_login_and_no_csrf_token() {
    let clock = Arc::new(cairn_core::clock::ManualClock::new("2027-03-01T09:00:00Z".parse().unwrap()));
    let app = cairn_tests::http::HttpApp::start(Backend::Sqlite, clock, None).await;
    // No worker: the step stays ready, so the run is open until the page cancels it.
    let run_id = app.submit(json!({"goal": "cancel me", "steps": [{"id": "a", "action": "noop", "args": {}}]})).await;
    let browser = super::ui_browser::Browser::start(1280, 900).await;
    let dashboard = Dashboard { browser, base_url: app.base_url.clone() };

    dashboard.goto("/ui/login").await;
    dashboard.wait_for(&format!("tr[data-run-id='{run_id}']")).await;
    let logout_hidden = dashboard.script("return document.getElementById('logout').hidden;").await;
    dashboard.goto(&format!("/ui/runs/{run_id}")).await;
    dashboard.wait_for("#why-waiting").await;
    dashboard.click("#run-cancel").await;
    dashboard.wait_for("#dag g[data-step-id='a'][data-status='cancelled']").await;
    dashboard.close().await;

    assert_eq!(logout_hidden, json!(true), "there is no session to end");
    assert_eq!(app.run(&run_id).await["status"], "cancelled", "the page's cancel took effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_list_filters_by_label_and_shows_labels() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    let plan = json!({"goal": "labelled", "steps": [{"id": "a", "action": "noop", "args": {}}]});
    let (code, ops) = orchestrator.post("/v1/runs", &json!({"plan": plan, "labels": {"team": "ops"}})).await;
    assert_eq!(code, 201, "{ops:#}");
    let (code, web) = orchestrator.post("/v1/runs", &json!({"plan": plan, "labels": {"team": "web"}})).await;
    assert_eq!(code, 201, "{web:#}");
    let (ops, web) = (ops["id"].as_str().unwrap().to_owned(), web["id"].as_str().unwrap().to_owned());
    let dashboard = Dashboard::open(&orchestrator, 1280, 900).await;

    dashboard.wait_for(&format!("tr[data-run-id='{web}']")).await;
    dashboard.wait_for("#f-label").await.send_keys("team:ops").await.unwrap();
    dashboard.click("#apply").await;
    dashboard.wait_until("only the ops run is listed", &format!(
        "document.querySelector(\"tr[data-run-id='{ops}']\") && !document.querySelector(\"tr[data-run-id='{web}']\")"
    ))
    .await;
    let chips = dashboard
        .script(&format!("return document.querySelector(\"tr[data-run-id='{ops}'] .labels\").textContent;"))
        .await;
    let url = dashboard.client().current_url().await.unwrap();
    dashboard.screenshot("run-list-filtered").await;
    dashboard.close().await;

    assert_eq!(chips, json!("team=ops"), "the run's labels are shown");
    assert_eq!(url.query(), Some("label=team%3Aops"), "the filter is in the page's address");
}
