//! The pure state machine (contract §5–6) without a database: `RunGraph` driven by events, and the decision
//! functions `after_failure`, `readiness` and `run_outcome` on their own (cases C07, C09).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_core::catalog::StaticCatalog;
use cairn_core::failure::{Failure, codes};
use cairn_core::machine::{
    AfterFailure, Event, FailedAttempt, OperatorAction, Readiness, RunGraph, Transition, after_failure, readiness,
    run_outcome,
};
use cairn_core::plan::{Plan, TriggerRule};
use cairn_core::retry::{Jitter, RetryPolicy};
use cairn_core::state::{RunStatus, StepStatus};
use cairn_core::validate::{Limits, validate_value};
use serde_json::{Value, json};

/// The plan after validation (defaults applied, `idempotent` filled from the action's effect).
fn validated(steps: Value) -> Plan {
    let report = validate_value(&json!({ "steps": steps }), &StaticCatalog::builtin(), &Limits::default());
    assert!(report.valid, "test plans must be valid: {:#?}", report.diagnostics);
    report.plan.unwrap()
}

fn start(steps: Value) -> (RunGraph, Vec<Transition>) {
    RunGraph::new(validated(steps), json!({}))
}

fn status(graph: &RunGraph, id: &str) -> StepStatus {
    graph.status(id).unwrap_or_else(|| panic!("no step `{id}`"))
}

/// Claims `id` and reports success with `output`.
fn run_ok(graph: &mut RunGraph, id: &str, output: Value) -> Vec<Transition> {
    let claimed = graph.apply(Event::Claimed(id.into()), 0.0);
    assert_eq!(claimed, [step(id, StepStatus::Running)], "a ready step `{id}` can be claimed");
    graph.apply(Event::Succeeded(id.into(), output), 0.0)
}

/// Claims `id` and reports `failure`.
fn run_fail(graph: &mut RunGraph, id: &str, failure: Failure) -> Vec<Transition> {
    graph.apply(Event::Claimed(id.into()), 0.0);
    graph.apply(Event::Failed(id.into(), failure), 0.0)
}

fn step(id: &str, to: StepStatus) -> Transition {
    Transition::Step { step: id.into(), to }
}

fn permanent(code: &str) -> Failure {
    Failure::new(code, "it broke", false)
}

fn transient() -> Failure {
    Failure::new(codes::ACTION_ERROR, "try again", true)
}

fn fixed_retry(max_attempts: u32) -> Value {
    json!({"max_attempts": max_attempts, "initial_interval_ms": 1000, "backoff_coefficient": 2.0,
           "max_interval_ms": 60000, "jitter": "none"})
}

fn no_failed_step(transitions: &[Transition]) -> bool {
    !transitions.iter().any(|t| matches!(t, Transition::Step { to: StepStatus::Failed, .. }))
}

// ---------------------------------------------------------------------------------------------------------------
// C07: skip propagation

fn c07_plan() -> Value {
    json!([
        {"id": "weather", "action": "noop"},
        {"id": "rainy", "action": "noop", "depends_on": ["weather"],
         "args": {"p": "$weather.output.precip_prob"}, "when": "$weather.output.precip_prob >= 0.5"},
        {"id": "remind", "action": "noop", "depends_on": ["rainy"]},
        {"id": "notify", "action": "notify.send", "depends_on": ["remind"], "args": {"text": "reminder set"}}
    ])
}

#[test]
fn false_when_skips_the_step_and_every_dependent_and_the_run_succeeds() {
    let (mut graph, started) = start(c07_plan());
    assert_eq!(
        started,
        [Transition::Run(RunStatus::Running), step("weather", StepStatus::Ready)],
        "only the root is ready at the start"
    );

    let transitions = run_ok(&mut graph, "weather", json!({"precip_prob": 0.1}));

    assert_eq!(
        transitions,
        [
            step("weather", StepStatus::Succeeded),
            step("rainy", StepStatus::Skipped),
            step("remind", StepStatus::Skipped),
            step("notify", StepStatus::Skipped),
            Transition::Run(RunStatus::Succeeded),
        ],
        "a false `when` skips the step and the skip propagates in the same transition (C07)"
    );
    assert_eq!(graph.run_status(), RunStatus::Succeeded, "a skip is not a failure");
    assert!(graph.ready().is_empty(), "nothing is left to dispatch after the skip");
}

#[test]
fn true_when_runs_the_whole_chain() {
    let (mut graph, _) = start(c07_plan());

    run_ok(&mut graph, "weather", json!({"precip_prob": 0.7}));
    assert_eq!(graph.ready(), ["rainy"], "a true `when` makes the step ready");
    run_ok(&mut graph, "rainy", json!({}));
    run_ok(&mut graph, "remind", json!({}));
    let last = run_ok(&mut graph, "notify", json!({}));

    assert_eq!(last.last(), Some(&Transition::Run(RunStatus::Succeeded)), "the run finishes with its last step");
    for id in ["weather", "rainy", "remind", "notify"] {
        assert_eq!(status(&graph, id), StepStatus::Succeeded, "`{id}` runs when the gate is open");
        assert_eq!(graph.attempts(id), 1, "`{id}` runs exactly once");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// C09: skip is decided before placeholders or the consumer's own `when`

#[test]
fn consumers_of_a_skipped_producer_are_skipped_not_failed() {
    let (mut graph, _) = start(json!([
        {"id": "weather", "action": "noop"},
        {"id": "summarize", "action": "llm.chat", "depends_on": ["weather"],
         "args": {"prompt": "summarize ${weather.output.alerts}"}, "when": "$weather.output.has_alerts == true"},
        {"id": "send", "action": "notify.send", "depends_on": ["summarize"],
         "args": {"text": "$summarize.output.text"}, "when": "$weather.output.has_alerts == true"},
        {"id": "audit", "action": "noop", "depends_on": ["summarize"], "args": {"s": "$summarize.output.text"}}
    ]));

    let transitions = run_ok(&mut graph, "weather", json!({"has_alerts": false, "alerts": []}));

    for id in ["summarize", "send", "audit"] {
        assert_eq!(status(&graph, id), StepStatus::Skipped, "`{id}` is skipped (C09)");
    }
    assert!(no_failed_step(&transitions), "a skipped producer never fails its consumers: {transitions:?}");
    assert_eq!(graph.run_status(), RunStatus::Succeeded, "skips leave the run succeeded");
}

// ---------------------------------------------------------------------------------------------------------------
// Trigger rules

/// `a` and `b` are roots; `join` depends on both with `rule`.
fn join_plan(rule: &str) -> Value {
    json!([
        {"id": "a", "action": "noop"},
        {"id": "b", "action": "noop", "when": "input.run_b"},
        {"id": "join", "action": "noop", "depends_on": ["a", "b"], "trigger_rule": rule}
    ])
}

fn start_join(rule: &str, run_b: bool) -> RunGraph {
    RunGraph::new(validated(join_plan(rule)), json!({"run_b": run_b})).0
}

#[test]
fn all_done_runs_after_a_failed_dependency() {
    let mut graph = start_join("all_done", true);

    run_fail(&mut graph, "a", permanent(codes::NOT_FOUND));
    run_ok(&mut graph, "b", json!({}));

    assert_eq!(status(&graph, "join"), StepStatus::Ready, "all_done only needs every dependency final");
}

#[test]
fn all_done_waits_for_every_dependency() {
    let mut graph = start_join("all_done", true);

    run_ok(&mut graph, "a", json!({}));

    assert_eq!(status(&graph, "join"), StepStatus::Pending, "all_done waits while `b` is open");
}

#[test]
fn none_failed_runs_after_a_skipped_dependency() {
    let mut graph = start_join("none_failed", false);
    assert_eq!(status(&graph, "b"), StepStatus::Skipped, "`b`'s false when skips it");

    run_ok(&mut graph, "a", json!({}));

    assert_eq!(status(&graph, "join"), StepStatus::Ready, "none_failed accepts a skipped dependency");
}

#[test]
fn none_failed_is_skipped_after_a_failed_dependency() {
    let mut graph = start_join("none_failed", true);

    run_ok(&mut graph, "b", json!({}));
    let transitions = run_fail(&mut graph, "a", permanent(codes::NOT_FOUND));

    assert_eq!(status(&graph, "join"), StepStatus::Skipped, "none_failed cannot hold once a dependency failed");
    assert_eq!(transitions.last(), Some(&Transition::Run(RunStatus::Failed)), "the failed step fails the run");
}

#[test]
fn one_success_runs_when_one_dependency_succeeded_and_the_other_failed() {
    let mut graph = start_join("one_success", true);

    run_fail(&mut graph, "a", permanent(codes::NOT_FOUND));
    run_ok(&mut graph, "b", json!({}));

    assert_eq!(status(&graph, "join"), StepStatus::Ready, "one success is enough");
}

#[test]
fn one_success_is_skipped_when_nothing_succeeded() {
    let mut graph = start_join("one_success", false);

    run_fail(&mut graph, "a", permanent(codes::NOT_FOUND));

    assert_eq!(status(&graph, "join"), StepStatus::Skipped, "no dependency succeeded");
    assert_eq!(graph.run_status(), RunStatus::Failed, "the failed dependency fails the run");
}

#[test]
fn all_success_is_the_default_and_skips_after_a_skipped_dependency() {
    let mut graph = RunGraph::new(
        validated(json!([
            {"id": "a", "action": "noop"},
            {"id": "b", "action": "noop", "when": "input.run_b"},
            {"id": "join", "action": "noop", "depends_on": ["a", "b"]}
        ])),
        json!({"run_b": false}),
    )
    .0;

    run_ok(&mut graph, "a", json!({}));

    assert_eq!(status(&graph, "join"), StepStatus::Skipped, "all_success needs every dependency to succeed");
    assert_eq!(graph.run_status(), RunStatus::Succeeded, "skips leave the run succeeded");
}

// ---------------------------------------------------------------------------------------------------------------
// Retries and failures

#[test]
fn failed_attempt_is_retried_with_backoff_then_succeeds() {
    let (mut graph, _) = start(json!([
        {"id": "w", "action": "weather.forecast", "args": {"city": "Wuhan"}, "retry": fixed_retry(3)},
        {"id": "after", "action": "noop", "depends_on": ["w"]}
    ]));

    let first = run_fail(&mut graph, "w", transient());
    let second = run_fail(&mut graph, "w", transient());
    let third = run_ok(&mut graph, "w", json!({"precipitation_probability": 80}));

    let retried = |delay_ms| {
        vec![
            step("w", StepStatus::Ready),
            Transition::RetryScheduled { step: "w".into(), delay: Duration::from_millis(delay_ms) },
        ]
    };
    assert_eq!(first, retried(1000), "the first retry waits initial_interval_ms");
    assert_eq!(second, retried(2000), "the second retry waits twice as long");
    assert_eq!(
        third,
        [step("w", StepStatus::Succeeded), step("after", StepStatus::Ready)],
        "success finishes the step and readies its dependent in one transition"
    );
    assert_eq!(graph.attempts("w"), 3, "three attempts were started");
}

#[test]
fn exhausted_retries_fail_the_step_skip_dependents_and_fail_the_run() {
    let (mut graph, _) = start(json!([
        {"id": "w", "action": "weather.forecast", "args": {"city": "Wuhan"}, "retry": fixed_retry(2)},
        {"id": "mid", "action": "noop", "depends_on": ["w"]},
        {"id": "end", "action": "noop", "depends_on": ["mid"]}
    ]));

    run_fail(&mut graph, "w", transient());
    let last = run_fail(&mut graph, "w", transient());

    assert_eq!(
        last,
        [
            step("w", StepStatus::Failed),
            step("mid", StepStatus::Skipped),
            step("end", StepStatus::Skipped),
            Transition::Run(RunStatus::Failed),
        ],
        "the last allowed attempt fails the step; dependents are skipped; the run fails"
    );
    assert_eq!(graph.attempts("w"), 2, "no attempt beyond max_attempts");
}

#[test]
fn non_retryable_failure_fails_at_once() {
    let (mut graph, _) = start(json!([
        {"id": "w", "action": "weather.forecast", "args": {"city": "Wuhan"}, "retry": fixed_retry(5)}
    ]));

    run_fail(&mut graph, "w", permanent(codes::UNAUTHORIZED));

    assert_eq!(status(&graph, "w"), StepStatus::Failed, "a non-retryable failure is final");
    assert_eq!(graph.attempts("w"), 1, "and is not retried");
}

#[test]
fn ambiguous_failure_of_a_non_idempotent_step_is_outcome_unknown_and_never_retried() {
    for code in [codes::TIMEOUT, codes::LEASE_LOST, codes::HEARTBEAT_TIMEOUT, codes::TRANSPORT_ERROR] {
        let (mut graph, _) = start(json!([
            {"id": "send", "action": "notify.send", "args": {"text": "hi"}, "retry": fixed_retry(5)},
            {"id": "after", "action": "noop", "depends_on": ["send"]}
        ]));

        let transitions = run_fail(&mut graph, "send", Failure::new(code, "no answer", true));

        assert_eq!(
            transitions,
            [step("send", StepStatus::OutcomeUnknown)],
            "a `{code}` of a non-idempotent step parks it for an operator"
        );
        assert!(graph.ready().is_empty(), "nothing is re-dispatched after `{code}`");
        assert_eq!(status(&graph, "after"), StepStatus::Pending, "dependents wait for the operator");
        assert_eq!(graph.run_status(), RunStatus::Running, "the run is not finished");
        assert_eq!(graph.attempts("send"), 1, "only one attempt ran");
    }
}

/// A step parked as `outcome_unknown` after a timeout, with one dependent.
fn parked() -> RunGraph {
    let (mut graph, _) = start(json!([
        {"id": "send", "action": "notify.send", "args": {"text": "hi"}},
        {"id": "after", "action": "noop", "depends_on": ["send"]}
    ]));
    run_fail(&mut graph, "send", Failure::new(codes::TIMEOUT, "no answer", true));
    assert_eq!(status(&graph, "send"), StepStatus::OutcomeUnknown);
    graph
}

#[test]
fn an_operator_retry_of_a_parked_step_makes_it_ready_for_a_new_attempt() {
    let mut graph = parked();
    let transitions = graph.apply(Event::Operator("send".into(), OperatorAction::Retry), 0.0);
    assert_eq!(transitions, [step("send", StepStatus::Ready)]);
    run_ok(&mut graph, "send", json!({}));
    assert_eq!(graph.attempts("send"), 2, "the retry is a second attempt");
    run_ok(&mut graph, "after", json!({}));
    assert_eq!(graph.run_status(), RunStatus::Succeeded);
}

#[test]
fn an_operator_skip_or_fail_of_a_parked_step_releases_its_dependents() {
    let mut graph = parked();
    let transitions = graph.apply(Event::Operator("send".into(), OperatorAction::Skip), 0.0);
    assert_eq!(
        transitions,
        [step("send", StepStatus::Skipped), step("after", StepStatus::Skipped), Transition::Run(RunStatus::Succeeded)],
        "skipped steps do not fail the run"
    );

    let mut graph = parked();
    let transitions = graph.apply(Event::Operator("send".into(), OperatorAction::Fail), 0.0);
    assert_eq!(
        transitions,
        [step("send", StepStatus::Failed), step("after", StepStatus::Skipped), Transition::Run(RunStatus::Failed)]
    );
}

#[test]
fn operator_actions_apply_only_to_a_parked_step() {
    let (mut graph, _) = start(json!([{"id": "a", "action": "noop"}]));
    for action in [OperatorAction::Retry, OperatorAction::Skip, OperatorAction::Fail] {
        assert!(graph.apply(Event::Operator("a".into(), action), 0.0).is_empty(), "{action:?} of a ready step");
    }
    assert_eq!(status(&graph, "a"), StepStatus::Ready);
}

#[test]
fn ambiguous_failure_of_an_idempotent_step_is_retried() {
    let (mut graph, _) = start(json!([
        {"id": "w", "action": "weather.forecast", "args": {"city": "Wuhan"}, "retry": fixed_retry(3)}
    ]));

    run_fail(&mut graph, "w", Failure::new(codes::TIMEOUT, "slow", false));

    assert_eq!(graph.ready(), ["w"], "an idempotent step is re-executed after a timeout");
}

#[test]
fn non_idempotent_step_that_certainly_did_not_take_effect_is_retried() {
    let (mut graph, _) = start(json!([
        {"id": "send", "action": "notify.send", "args": {"text": "hi"}, "retry": fixed_retry(3)}
    ]));
    let failure =
        Failure { did_not_take_effect: true, ..Failure::new(codes::ACTION_ERROR, "connection refused", true) };

    let transitions = run_fail(&mut graph, "send", failure);

    assert_eq!(
        transitions,
        [
            step("send", StepStatus::Ready),
            Transition::RetryScheduled { step: "send".into(), delay: Duration::from_millis(1000) },
        ],
        "a failure that certainly had no effect is safe to retry"
    );
}

#[test]
fn non_idempotent_step_with_a_plain_error_fails_without_retry() {
    let (mut graph, _) = start(json!([
        {"id": "send", "action": "notify.send", "args": {"text": "hi"}, "retry": fixed_retry(3)}
    ]));

    run_fail(&mut graph, "send", transient());

    assert_eq!(status(&graph, "send"), StepStatus::Failed, "a non-idempotent step is never re-executed blindly");
}

// ---------------------------------------------------------------------------------------------------------------
// Approval, cancellation, late events

fn approval_plan() -> Value {
    json!([
        {"id": "pay", "action": "noop", "approval": {"required": true}},
        {"id": "after", "action": "noop", "depends_on": ["pay"]}
    ])
}

#[test]
fn step_requiring_approval_waits_then_becomes_ready_when_approved() {
    let (mut graph, started) = start(approval_plan());
    assert!(
        started.contains(&step("pay", StepStatus::WaitingApproval)),
        "a step requiring approval waits instead of becoming ready"
    );
    assert!(graph.apply(Event::Claimed("pay".into()), 0.0).is_empty(), "a waiting step cannot be claimed");

    let approved = graph.apply(Event::Approved("pay".into()), 0.0);

    assert_eq!(approved, [step("pay", StepStatus::Ready)], "approval makes it ready");
    run_ok(&mut graph, "pay", json!({}));
    assert_eq!(status(&graph, "after"), StepStatus::Ready, "the approved step runs and its dependent follows");
}

#[test]
fn rejected_step_fails_and_fails_the_run() {
    let (mut graph, _) = start(approval_plan());

    let rejected = graph.apply(Event::Rejected("pay".into()), 0.0);

    assert_eq!(
        rejected,
        [step("pay", StepStatus::Failed), step("after", StepStatus::Skipped), Transition::Run(RunStatus::Failed),],
        "a rejection fails the step, skips its dependents and fails the run"
    );
}

#[test]
fn approval_events_for_a_step_not_waiting_change_nothing() {
    let (mut graph, _) = start(json!([{"id": "a", "action": "noop"}]));

    assert!(graph.apply(Event::Approved("a".into()), 0.0).is_empty(), "approving a ready step changes nothing");
    assert!(graph.apply(Event::Rejected("a".into()), 0.0).is_empty(), "rejecting a ready step changes nothing");
    assert_eq!(status(&graph, "a"), StepStatus::Ready, "the step is still ready");
}

#[test]
fn cancelling_the_run_cancels_every_open_step_and_keeps_finished_ones() {
    let (mut graph, _) = start(json!([
        {"id": "done", "action": "noop"},
        {"id": "busy", "action": "noop"},
        {"id": "queued", "action": "noop"},
        {"id": "later", "action": "noop", "depends_on": ["busy"]},
        {"id": "gate", "action": "noop", "approval": {"required": true}}
    ]));
    run_ok(&mut graph, "done", json!({}));
    graph.apply(Event::Claimed("busy".into()), 0.0);

    let transitions = graph.apply(Event::RunCancelled, 0.0);

    assert_eq!(
        transitions,
        [
            step("busy", StepStatus::Cancelled),
            step("queued", StepStatus::Cancelled),
            step("later", StepStatus::Cancelled),
            step("gate", StepStatus::Cancelled),
            Transition::Run(RunStatus::Cancelled),
        ],
        "running, ready, pending and waiting steps are cancelled; finished ones are kept"
    );
    assert_eq!(status(&graph, "done"), StepStatus::Succeeded, "a finished step stays finished");
    assert!(
        graph.apply(Event::Succeeded("busy".into(), json!({})), 0.0).is_empty(),
        "a completion after cancellation changes nothing"
    );
    assert_eq!(graph.run_status(), RunStatus::Cancelled, "the run stays cancelled");
}

#[test]
fn cancelling_reaches_a_step_waiting_in_retry_backoff() {
    let (mut graph, _) = start(json!([
        {"id": "w", "action": "weather.forecast", "args": {"city": "Wuhan"}, "retry": fixed_retry(3)}
    ]));
    run_fail(&mut graph, "w", transient());

    graph.apply(Event::RunCancelled, 0.0);

    assert_eq!(status(&graph, "w"), StepStatus::Cancelled, "a step waiting for its retry is cancelled (C17)");
    assert!(graph.apply(Event::Claimed("w".into()), 0.0).is_empty(), "and can no longer be claimed");
}

#[test]
fn replayed_or_late_completion_after_the_step_finished_changes_nothing() {
    let (mut graph, _) = start(json!([
        {"id": "a", "action": "noop"},
        {"id": "b", "action": "noop", "depends_on": ["a"]}
    ]));
    run_ok(&mut graph, "a", json!({"v": 1}));

    let replayed = graph.apply(Event::Succeeded("a".into(), json!({"v": 2})), 0.0);
    let late_failure = graph.apply(Event::Failed("a".into(), transient()), 0.0);

    assert!(replayed.is_empty(), "a replayed success changes nothing");
    assert!(late_failure.is_empty(), "a late failure changes nothing");
    assert_eq!(status(&graph, "a"), StepStatus::Succeeded, "the first completion stands");
    assert_eq!(graph.ready(), ["b"], "the dependent was readied once and is still just ready");
    assert_eq!(graph.attempts("a"), 1, "no attempt was added");
}

#[test]
fn completion_for_a_step_that_was_never_claimed_changes_nothing() {
    let (mut graph, _) = start(json!([{"id": "a", "action": "noop"}]));

    let transitions = graph.apply(Event::Succeeded("a".into(), json!({})), 0.0);

    assert!(transitions.is_empty(), "only a running step can complete");
    assert!(graph.apply(Event::Claimed("nope".into()), 0.0).is_empty(), "an unknown step id changes nothing");
}

#[test]
fn events_after_the_run_finished_change_nothing() {
    let (mut graph, _) = start(json!([{"id": "a", "action": "noop"}]));
    run_ok(&mut graph, "a", json!({}));

    assert!(graph.apply(Event::RunCancelled, 0.0).is_empty(), "a finished run cannot be cancelled");
    assert_eq!(graph.run_status(), RunStatus::Succeeded, "the run keeps its outcome");
}

// ---------------------------------------------------------------------------------------------------------------
// after_failure

fn policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_interval_ms: 1_000,
        backoff_coefficient: 2.0,
        max_interval_ms: 10_000,
        jitter: Jitter::None,
        non_retryable_errors: vec![codes::NOT_FOUND.into()],
    }
}

fn decide(policy: &RetryPolicy, attempt: u32, idempotent: bool, failure: &Failure) -> AfterFailure {
    after_failure(FailedAttempt { policy, attempt, idempotent, failure }, 0.5)
}

fn retry_in(ms: u64) -> AfterFailure {
    AfterFailure::Retry { delay: Duration::from_millis(ms) }
}

#[test]
fn retry_after_is_a_lower_bound_on_the_delay() {
    let p = policy(5);
    let limited = Failure { retry_after_ms: Some(5_000), ..Failure::new(codes::RATE_LIMITED, "slow down", true) };
    let short = Failure { retry_after_ms: Some(10), ..Failure::new(codes::RATE_LIMITED, "slow down", true) };

    assert_eq!(
        decide(&p, 1, true, &limited),
        retry_in(5_000),
        "the server's retry_after_ms wins over a shorter backoff"
    );
    assert_eq!(decide(&p, 3, true, &short), retry_in(4_000), "a longer backoff wins over a short retry_after_ms");
}

#[test]
fn backoff_is_capped_at_max_interval() {
    let p = policy(100);

    assert_eq!(decide(&p, 4, true, &transient()), retry_in(8_000), "below the cap the delay doubles");
    assert_eq!(decide(&p, 5, true, &transient()), retry_in(10_000), "the delay stops at max_interval_ms");
    assert_eq!(decide(&p, 99, true, &transient()), retry_in(10_000), "and stays there");
}

#[test]
fn retry_after_does_not_extend_max_attempts() {
    let p = policy(3);
    let limited = Failure { retry_after_ms: Some(1_000), ..Failure::new(codes::RATE_LIMITED, "slow down", true) };

    assert_eq!(
        decide(&p, 3, true, &limited),
        AfterFailure::Fail,
        "the last allowed attempt fails even when the server says when to retry"
    );
}

#[test]
fn jitter_sample_picks_inside_the_backoff_range() {
    let p = RetryPolicy { jitter: Jitter::Full, ..policy(5) };

    let low = after_failure(FailedAttempt { policy: &p, attempt: 2, idempotent: true, failure: &transient() }, 0.0);
    let high =
        after_failure(FailedAttempt { policy: &p, attempt: 2, idempotent: true, failure: &transient() }, 0.999_999);

    assert_eq!(low, retry_in(0), "full jitter starts at zero");
    assert_eq!(high, retry_in(2_000), "and ends at the base delay");
}

#[test]
fn after_failure_decision_table() {
    let p = policy(3);
    let ambiguous = |code| Failure::new(code, "?", false);
    // The connection failed after the request was written: retryable, but it may have taken effect.
    let transport_error = || Failure::new(codes::TRANSPORT_ERROR, "connection reset after the request", true);
    let no_effect = Failure { did_not_take_effect: true, ..transient() };
    let cases: [(&str, u32, bool, Failure, AfterFailure); 11] = [
        ("idempotent transient", 1, true, transient(), retry_in(1_000)),
        ("idempotent permanent", 1, true, permanent(codes::ACTION_ERROR), AfterFailure::Fail),
        ("listed as non-retryable", 1, true, Failure::new(codes::NOT_FOUND, "gone", true), AfterFailure::Fail),
        ("idempotent timeout", 1, true, ambiguous(codes::TIMEOUT), retry_in(1_000)),
        ("idempotent, attempts used up", 3, true, transient(), AfterFailure::Fail),
        ("non-idempotent timeout", 1, false, ambiguous(codes::TIMEOUT), AfterFailure::OutcomeUnknown),
        ("non-idempotent lost lease", 3, false, ambiguous(codes::LEASE_LOST), AfterFailure::OutcomeUnknown),
        ("non-idempotent transport error", 1, false, transport_error(), AfterFailure::OutcomeUnknown),
        ("idempotent transport error", 1, true, transport_error(), retry_in(1_000)),
        ("non-idempotent plain error", 1, false, transient(), AfterFailure::Fail),
        ("non-idempotent, did not take effect", 1, false, no_effect, retry_in(1_000)),
    ];

    for (name, attempt, idempotent, failure, expected) in cases {
        assert_eq!(decide(&p, attempt, idempotent, &failure), expected, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// readiness and run_outcome

#[test]
fn any_open_dependency_means_wait_under_every_rule() {
    let open = [
        StepStatus::Pending,
        StepStatus::Ready,
        StepStatus::Running,
        StepStatus::WaitingApproval,
        StepStatus::OutcomeUnknown,
    ];
    let rules = [TriggerRule::AllSuccess, TriggerRule::AllDone, TriggerRule::NoneFailed, TriggerRule::OneSuccess];

    for rule in rules {
        for status in open {
            assert_eq!(
                readiness(rule, [StepStatus::Succeeded, status]),
                Readiness::Wait,
                "{rule:?} waits while a dependency is {status}"
            );
        }
    }
}

#[test]
fn readiness_table_for_final_dependencies() {
    use Readiness::{Run, Skip};
    use StepStatus::{Cancelled as C, Failed as F, Skipped as K, Succeeded as S};
    let table: [(&[StepStatus], [Readiness; 4]); 9] = [
        // parents            all_success all_done none_failed one_success
        (&[], [Run, Run, Run, Run]),
        (&[S], [Run, Run, Run, Run]),
        (&[S, S], [Run, Run, Run, Run]),
        (&[S, K], [Skip, Run, Run, Run]),
        (&[S, F], [Skip, Run, Skip, Run]),
        (&[S, C], [Skip, Run, Skip, Run]),
        (&[K, K], [Skip, Run, Run, Skip]),
        (&[F, K], [Skip, Run, Skip, Skip]),
        (&[F, C], [Skip, Run, Skip, Skip]),
    ];
    let rules = [TriggerRule::AllSuccess, TriggerRule::AllDone, TriggerRule::NoneFailed, TriggerRule::OneSuccess];

    for (parents, expected) in table {
        for (rule, want) in rules.into_iter().zip(expected) {
            assert_eq!(readiness(rule, parents.iter().copied()), want, "{rule:?} with dependencies {parents:?}");
        }
    }
}

#[test]
fn run_outcome_follows_cancellation_then_failures() {
    assert_eq!(run_outcome(false, 0), RunStatus::Succeeded, "no failed step: succeeded");
    assert_eq!(run_outcome(false, 2), RunStatus::Failed, "any failed step: failed");
    assert_eq!(run_outcome(true, 0), RunStatus::Cancelled, "cancellation wins");
    assert_eq!(run_outcome(true, 3), RunStatus::Cancelled, "cancellation wins over failures");
}

#[test]
fn a_long_chain_of_skips_settles_in_one_event() {
    let n = 1_000;
    let mut steps = vec![json!({"id": "s0", "action": "noop", "when": "input.go"})];
    steps.extend(
        (1..n).map(|i| json!({"id": format!("s{i}"), "action": "noop", "depends_on": [format!("s{}", i - 1)]})),
    );

    let (graph, started) = RunGraph::new(validated(Value::Array(steps)), json!({"go": false}));

    assert_eq!(started.len(), n + 2, "run started, every step skipped, run succeeded");
    assert_eq!(status(&graph, "s999"), StepStatus::Skipped, "the skip reaches the end of the chain");
    assert_eq!(graph.run_status(), RunStatus::Succeeded, "a run of skips succeeds");
}
