//! Dispatch under group commit (issue 8), through the real engine and store on every available backend: reports
//! and claims share transactions, steps released by a report go to a poll already waiting or to the completion
//! that asked for its slot's next attempt (over the real gRPC protocol), and concurrent workers still run every
//! step exactly once.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_proto::v1::{Attempt, CompleteRequest, FailRequest, Failure, PollRequest, ReportOutcome};
use cairn_tests::http::{HttpApp, step, within};
use cairn_tests::{Backend, TestApp, on_both_backends};
use serde_json::{Value, json};
use tonic::transport::Channel;

const START: &str = "2027-03-14T12:00:00Z";
const WORKER_ACTIONS: &[&str] = &["noop"];

fn actions() -> Vec<String> {
    WORKER_ACTIONS.iter().map(|a| (*a).to_owned()).collect()
}

on_both_backends!(a_waiting_poll_receives_the_dependent_released_by_a_report);
async fn a_waiting_poll_receives_the_dependent_released_by_a_report(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let run = app
        .submit(json!({"steps":[
            {"id":"a","action":"noop","args":{}},
            {"id":"b","action":"noop","args":{},"depends_on":["a"]}
        ]}))
        .await;
    let a = app.engine.claim("w1", &actions(), 1).await.unwrap();
    assert_eq!(a.len(), 1, "{backend:?}");
    let engine = app.engine.clone();
    let poll = tokio::spawn(async move { engine.claim_wait("w2", &actions(), 4, Duration::from_secs(20)).await });
    // The poll found nothing and waits, so the report below has to wake it.
    within(Duration::from_secs(10), "the poll waits", || async { (app.engine.waiting_polls() == 1).then_some(()) })
        .await;
    assert!(!poll.is_finished(), "{backend:?}: nothing is claimable before `a` completes");

    let report = app.engine.complete(&a[0].lease, &json!({"ok": true})).await.unwrap();

    assert_eq!(report, cairn_store::Report::Succeeded, "{backend:?}");
    let handed = tokio::time::timeout(Duration::from_secs(10), poll).await.unwrap().unwrap().unwrap();
    let ids: Vec<&str> = handed.iter().map(|c| c.lease.step_id.as_str()).collect();
    assert_eq!(ids, ["b"], "{backend:?}: the waiting poll gets the released dependent");
    assert_eq!(handed[0].lease.worker_id, "w2", "{backend:?}");
    assert_eq!(handed[0].args, json!({}), "{backend:?}: args are resolved as for any claim");
    assert_eq!(app.status(&run, "b").await, "running", "{backend:?}");
    let done = app.engine.complete(&handed[0].lease, &json!({})).await.unwrap();
    assert_eq!(done, cairn_store::Report::Succeeded, "{backend:?}");
    assert_eq!(app.run(&run).await.status, "succeeded", "{backend:?}");
}

on_both_backends!(a_waiting_poll_receives_a_new_runs_root_and_concurrent_keyed_submissions_share_one_run);
async fn a_waiting_poll_receives_a_new_runs_root_and_concurrent_keyed_submissions_share_one_run(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let engine = app.engine.clone();
    let poll = tokio::spawn(async move { engine.claim_wait("w1", &actions(), 4, Duration::from_secs(20)).await });
    within(Duration::from_secs(10), "the poll waits", || async { (app.engine.waiting_polls() == 1).then_some(()) })
        .await;
    assert!(!poll.is_finished(), "{backend:?}: nothing is claimable before the submission");

    let run = app.submit(json!({"steps":[{"id":"a","action":"noop","args":{}}]})).await;

    let handed = tokio::time::timeout(Duration::from_secs(10), poll).await.unwrap().unwrap().unwrap();
    let got: Vec<(&str, &str)> = handed.iter().map(|c| (c.lease.run_id.as_str(), c.lease.step_id.as_str())).collect();
    assert_eq!(got, [(run.as_str(), "a")], "{backend:?}: the waiting poll gets the new run's root");

    // Submitted together, so they share writer batches: one run, found by the others.
    let plan = json!({"steps":[{"id":"a","action":"noop","args":{}}]});
    let submissions = (0..8).map(|_| {
        let req = cairn_orchestrator::SubmitRequest {
            plan: plan.clone(),
            input: None,
            idempotency_key: Some("order-7".into()),
            labels: Default::default(),
        };
        let engine = app.engine.clone();
        async move { engine.submit(&req).await.unwrap() }
    });
    let submitted = futures::future::join_all(submissions).await;
    assert_eq!(submitted.iter().filter(|s| !s.existing).count(), 1, "{backend:?}: one run created");
    assert!(submitted.iter().all(|s| s.run_id == submitted[0].run_id), "{backend:?}: every answer names it");
}

on_both_backends!(concurrent_workers_run_every_step_of_a_fan_out_exactly_once);
async fn concurrent_workers_run_every_step_of_a_fan_out_exactly_once(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let mut steps: Vec<_> = (0..60).map(|i| json!({"id": format!("p{i}"), "action": "noop", "args": {}})).collect();
    let parents: Vec<String> = (0..60).map(|i| format!("p{i}")).collect();
    steps.push(json!({"id": "join", "action": "noop", "args": {}, "depends_on": parents}));
    let run = app.submit(json!({"steps": steps})).await;

    let mut workers = Vec::new();
    for w in 0..6 {
        let engine = app.engine.clone();
        workers.push(tokio::spawn(async move {
            let mut ran: Vec<String> = Vec::new();
            loop {
                let claimed =
                    engine.claim_wait(&format!("w{w}"), &actions(), 3, Duration::from_millis(300)).await.unwrap();
                if claimed.is_empty() {
                    return ran;
                }
                // Reports go out concurrently, so they share batches with other workers' claims.
                let output = json!({"by": w});
                let reports = claimed.iter().map(|c| engine.complete(&c.lease, &output));
                for report in futures::future::join_all(reports).await {
                    assert_eq!(report.unwrap(), cairn_store::Report::Succeeded);
                }
                ran.extend(claimed.into_iter().map(|c| c.lease.step_id));
            }
        }));
    }
    let mut times_run: HashMap<String, usize> = HashMap::new();
    for worker in workers {
        for id in worker.await.unwrap() {
            *times_run.entry(id).or_default() += 1;
        }
    }

    assert_eq!(times_run.len(), 61, "{backend:?}: every step ran");
    assert!(times_run.values().all(|n| *n == 1), "{backend:?}: no step ran twice: {times_run:?}");
    let summary = app.run(&run).await;
    assert_eq!(summary.status, "succeeded", "{backend:?}");
    let attempts = app.store().attempts(&run).await.unwrap();
    assert_eq!(attempts.len(), 61, "{backend:?}: one attempt per step, none lost or repeated");
}

fn step_ids(attempts: &[Attempt]) -> Vec<&str> {
    attempts.iter().map(|a| a.lease.as_ref().map_or("", |l| l.step_id.as_str())).collect()
}

fn completion(attempt: &Attempt, next_max_attempts: u32) -> CompleteRequest {
    CompleteRequest {
        worker_id: "w1".into(),
        lease: attempt.lease.clone(),
        output_json: "{}".into(),
        next_max_attempts,
        next_actions: actions(),
    }
}

on_both_backends!(a_completion_that_asks_for_its_slots_next_attempt_gets_the_dependent_it_released);
async fn a_completion_that_asks_for_its_slots_next_attempt_gets_the_dependent_it_released(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let run = app
        .submit(json!({"steps":[
            {"id":"a","action":"noop","args":{}},
            {"id":"b","action":"noop","args":{"from": "$a.output"},"depends_on":["a"]},
            {"id":"c","action":"noop","args":{},"depends_on":["b"]}
        ]}))
        .await;
    let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let poll = PollRequest { worker_id: "w1".into(), actions: actions(), max_attempts: 4, wait_ms: 1000 };
    let a = worker.poll(poll).await.unwrap().into_inner().attempts;
    assert_eq!(step_ids(&a), ["a"], "{backend:?}");

    let answer = worker.complete(completion(&a[0], 1)).await.unwrap().into_inner();

    assert_eq!(answer.outcome(), ReportOutcome::Succeeded, "{backend:?}");
    assert_eq!(step_ids(&answer.next), ["b"], "{backend:?}: the released dependent comes back with the answer");
    let b = &answer.next[0];
    assert_eq!(b.lease.as_ref().unwrap().attempt, 1, "{backend:?}");
    assert_eq!(b.args_json, r#"{"from":{}}"#, "{backend:?}: its placeholders are resolved as for a poll");
    assert_eq!(step(&app.run(&run).await, "b")["status"], "running", "{backend:?}: leased to w1");

    let answer = worker.complete(completion(b, 0)).await.unwrap().into_inner();
    assert_eq!(answer.outcome(), ReportOutcome::Succeeded, "{backend:?}");
    assert!(answer.next.is_empty(), "{backend:?}: a completion that asks for nothing gets nothing");
    assert_eq!(step(&app.run(&run).await, "c")["status"], "ready", "{backend:?}: c waits for a poll");
}

/// An orchestrator over `backend` with `plan` submitted, a gRPC client for worker `w1`, and the first poll's
/// attempts (at most one).
async fn one_worker(backend: Backend, plan: Value) -> (HttpApp, String, WorkerServiceClient<Channel>, Vec<Attempt>) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let run = app.submit(plan).await;
    let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let attempts = worker.poll(first_poll()).await.unwrap().into_inner().attempts;
    (app, run, worker, attempts)
}

fn first_poll() -> PollRequest {
    PollRequest { worker_id: "w1".into(), actions: actions(), max_attempts: 1, wait_ms: 1000 }
}

on_both_backends!(a_resent_completion_gets_the_attempts_its_lost_answer_handed_out);
/// A worker resends a `Complete` when its answer was lost on the way. The attempts that answer handed out are
/// leased to the worker, which never saw them: the resend gets the same answer and attempts, so a
/// non-idempotent step is neither run twice nor left to lease expiry (`outcome_unknown`).
async fn a_resent_completion_gets_the_attempts_its_lost_answer_handed_out(backend: Backend) {
    let plan = json!({"steps":[
        {"id":"a","action":"noop","args":{}},
        {"id":"b","action":"noop","args":{},"depends_on":["a"],"idempotent":false},
        {"id":"c","action":"noop","args":{},"depends_on":["b"]}
    ]});
    let (app, run, mut worker, a) = one_worker(backend, plan).await;
    let lost = worker.complete(completion(&a[0], 1)).await.unwrap().into_inner();
    assert_eq!(step_ids(&lost.next), ["b"], "{backend:?}");

    let resent = worker.complete(completion(&a[0], 1)).await.unwrap().into_inner();

    assert_eq!(resent.outcome(), ReportOutcome::Succeeded, "{backend:?}: answered as the first time");
    assert_eq!(step_ids(&resent.next), ["b"], "{backend:?}: the attempt the lost answer handed out");
    assert_eq!(resent.next[0].lease, lost.next[0].lease, "{backend:?}: the same lease, not a second attempt");
    let b = &resent.next[0];
    let done = worker.complete(completion(b, 0)).await.unwrap().into_inner();
    assert_eq!(done.outcome(), ReportOutcome::Succeeded, "{backend:?}: the replayed lease is current");
    let again = worker.complete(completion(b, 0)).await.unwrap().into_inner();
    assert_eq!(again.outcome(), ReportOutcome::Stale, "{backend:?}: an answer without attempts is not replayed");
    let attempts = app.engine().store().attempts(&run).await.unwrap();
    let of_b: Vec<_> = attempts.iter().filter(|t| t.step_id == "b").map(|t| t.status.as_str()).collect();
    assert_eq!(of_b, ["succeeded"], "{backend:?}: b ran once, in one attempt");
    assert_eq!(step(&app.run(&run).await, "c")["status"], "ready", "{backend:?}");
}

on_both_backends!(an_attempt_returned_unstarted_does_not_count_against_max_attempts);
/// An attempt the worker returns without having started it (`FailRequest.not_started`: handed to it with no
/// slot left, or after it stopped fetching) is given back: the step is ready again at once and the attempt does
/// not count, so a step allowed a single attempt still runs.
async fn an_attempt_returned_unstarted_does_not_count_against_max_attempts(backend: Backend) {
    let plan = json!({"steps":[{"id":"a","action":"noop","args":{},"idempotent":false,
            "retry":{"max_attempts":1}}]});
    let (app, run, mut worker, first) = one_worker(backend, plan).await;
    assert_eq!(step_ids(&first), ["a"], "{backend:?}");
    let failure =
        Failure { code: "worker_shutdown".into(), retryable: true, did_not_take_effect: true, ..Failure::default() };
    let returned = FailRequest {
        worker_id: "w1".into(),
        lease: first[0].lease.clone(),
        failure: Some(failure),
        not_started: true,
    };

    let answer = worker.fail(returned.clone()).await.unwrap().into_inner();

    assert_eq!(answer.outcome(), ReportOutcome::RetryScheduled, "{backend:?}: given back");
    assert_eq!(step(&app.run(&run).await, "a")["status"], "ready", "{backend:?}: ready again at once");
    let again = worker.fail(returned).await.unwrap().into_inner();
    assert_eq!(again.outcome(), ReportOutcome::Stale, "{backend:?}: a repeated return changes nothing");
    let second = worker.poll(first_poll()).await.unwrap().into_inner().attempts;
    assert_eq!(second[0].lease.as_ref().unwrap().attempt, 1, "{backend:?}: the attempt was not counted");
    let done = worker.complete(completion(&second[0], 0)).await.unwrap().into_inner();
    assert_eq!(done.outcome(), ReportOutcome::Succeeded, "{backend:?}");
    let events = app.engine().store().events(&run, 0, 100).await.unwrap();
    let unclaimed = events.iter().find(|e| e.kind == "step_unclaimed").expect("the return is recorded");
    assert_eq!(unclaimed.data["reason"], "returned unstarted by the worker", "{backend:?}");
}

on_both_backends!(a_resent_completion_leaves_out_attempts_whose_lease_ended);
/// A resent `Complete` is not handed an attempt whose lease ended meanwhile (here the run was cancelled): the
/// worker must never start it.
async fn a_resent_completion_leaves_out_attempts_whose_lease_ended(backend: Backend) {
    let plan = json!({"steps":[
        {"id":"a","action":"noop","args":{}},
        {"id":"b","action":"noop","args":{},"depends_on":["a"],"idempotent":false}
    ]});
    let (app, run, mut worker, a) = one_worker(backend, plan).await;
    let lost = worker.complete(completion(&a[0], 1)).await.unwrap().into_inner();
    assert_eq!(step_ids(&lost.next), ["b"], "{backend:?}");
    let (status, _) = app.post(&format!("/v1/runs/{run}:cancel"), &json!({})).await;
    assert!(status < 300, "{backend:?}: cancelled ({status})");

    let resent = worker.complete(completion(&a[0], 1)).await.unwrap().into_inner();

    assert_eq!(resent.outcome(), ReportOutcome::Succeeded, "{backend:?}: the outcome as the first time");
    assert!(resent.next.is_empty(), "{backend:?}: b's lease ended with the cancel; it is not handed out again");
}
