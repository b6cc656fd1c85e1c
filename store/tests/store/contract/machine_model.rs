//! The stores make the decisions of the core's model (issue "One state machine"): random plans (trigger rules,
//! `when`, approvals, retries, fan-in, idempotent or not) driven by random completion, failure, approval and
//! operator orders (ambiguous failures park steps as `outcome_unknown`; an operator retries, skips or fails
//! them) and sometimes a cancel, through the store and through `cairn_core::machine::RunGraph` side by side,
//! end in the same step and run statuses and record the same transitions in the same order.
//!
//! Three drivers: the store's own calls one report at a time (the general path), and the batch writer with
//! several reports per batch and the claim riding on them, with PostgreSQL's fast path (the one-call functions
//! whenever they apply) and without it (`pg_fast_path = false`).
//! Seeds are fixed, so a failure names the seed that reproduces it; `CAIRN_MODEL_SEEDS` runs more.

use cairn_core::failure::Failure;
use cairn_core::machine::{Event, OperatorAction, RunGraph, Transition};
use cairn_core::state::{RunStatus, StepStatus};
use cairn_store::{ApprovalOutcome, BatchWriter, ClaimRequest, Claimed, Lease, Report, ReportItem, ReportKind, Store};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use super::support::{LIMITS, T0, TTL, batch, create, events, new_run, run, steps};

/// Seeds run by default per driver and backend.
const SEEDS: u64 = 12;

fn seeds() -> u64 {
    std::env::var("CAIRN_MODEL_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS)
}

/// A random valid plan of 2–8 `noop` steps.
fn random_plan(rng: &mut SmallRng) -> Value {
    let n = rng.random_range(2..=8);
    let mut out = Vec::new();
    for i in 0..n {
        let id = format!("s{i}");
        let mut deps: Vec<String> = Vec::new();
        for j in 0..i {
            if rng.random_bool(0.35) && deps.len() < 3 {
                deps.push(format!("s{j}"));
            }
        }
        let mut step = json!({"id": id, "action": "noop", "depends_on": deps, "args": {}});
        if rng.random_bool(0.4) {
            let rules = ["all_success", "all_done", "none_failed", "one_success"];
            step["trigger_rule"] = json!(rules[rng.random_range(0..rules.len())]);
        }
        if rng.random_bool(0.35) {
            let dep = deps.first().cloned();
            let when = match (rng.random_range(0..4), dep) {
                (0, _) => "true".to_owned(),
                (1, _) => "false".to_owned(),
                (2, Some(dep)) => format!("steps.{dep}.status == \"succeeded\""),
                // Null when the dependency did not succeed: evaluating it fails the step (`condition_error`).
                (_, Some(dep)) => format!("steps.{dep}.output.v > 0"),
                (_, None) => "input.go == true".to_owned(),
            };
            step["when"] = json!(when);
        }
        if rng.random_bool(0.15) {
            let on_reject = if rng.random_bool(0.5) { "fail" } else { "skip" };
            step["approval"] = json!({"required": true, "on_reject": on_reject});
        }
        step["idempotent"] = json!(rng.random_bool(0.5));
        if rng.random_bool(0.3) {
            step["retry"] = json!({"max_attempts": 2, "initial_interval_ms": 1000, "jitter": "none"});
        } else {
            step["retry"] = json!({"max_attempts": 1});
        }
        out.push(step);
    }
    let mut doc = steps(out);
    doc["input"] = json!({"go": rng.random_bool(0.5)});
    doc
}

/// The store's events as the model's transitions (`run_created` and the run's start have no counterpart).
fn transitions_of(events: &[cairn_store::RunEvent]) -> Vec<Transition> {
    let step = |e: &cairn_store::RunEvent, to| Transition::Step { step: e.step_id.clone().unwrap_or_default(), to };
    let mut out = Vec::new();
    for e in events {
        match e.kind.as_str() {
            "run_created" => {}
            "step_ready" | "step_approved" => out.push(step(e, StepStatus::Ready)),
            "step_started" => out.push(step(e, StepStatus::Running)),
            "step_succeeded" => out.push(step(e, StepStatus::Succeeded)),
            "step_failed" => out.push(step(e, StepStatus::Failed)),
            "step_rejected" if e.data["outcome"] == "skipped" => out.push(step(e, StepStatus::Skipped)),
            "step_rejected" => out.push(step(e, StepStatus::Failed)),
            "step_skipped" => out.push(step(e, StepStatus::Skipped)),
            "step_waiting_approval" => out.push(step(e, StepStatus::WaitingApproval)),
            "step_outcome_unknown" => out.push(step(e, StepStatus::OutcomeUnknown)),
            "operator_retry" => out.push(step(e, StepStatus::Ready)),
            "operator_skip" => out.push(step(e, StepStatus::Skipped)),
            "operator_fail" => out.push(step(e, StepStatus::Failed)),
            "step_cancelled" => out.push(step(e, StepStatus::Cancelled)),
            "run_cancelled" => out.push(Transition::Run(RunStatus::Cancelled)),
            "step_retry_scheduled" => {
                out.push(step(e, StepStatus::Ready));
                out.push(Transition::RetryScheduled { step: e.step_id.clone().unwrap_or_default(), delay: ZERO });
            }
            "run_succeeded" => out.push(Transition::Run(RunStatus::Succeeded)),
            "run_failed" => out.push(Transition::Run(RunStatus::Failed)),
            other => out.push(Transition::Step { step: format!("unexpected event {other}"), to: StepStatus::Pending }),
        }
    }
    out
}

const ZERO: std::time::Duration = std::time::Duration::ZERO;

/// The model's transitions with retry delays dropped (the store's events give the instant, not the delay) and
/// the run's start removed.
fn comparable(transitions: Vec<Transition>) -> Vec<Transition> {
    transitions
        .into_iter()
        .filter(|t| *t != Transition::Run(RunStatus::Running))
        .map(|t| match t {
            Transition::RetryScheduled { step, .. } => Transition::RetryScheduled { step, delay: ZERO },
            other => other,
        })
        .collect()
}

/// What happens to a running step.
enum Outcome {
    Succeeded(Value),
    Failed(Failure),
}

/// How reports and claims reach the store.
enum Driver {
    /// `Store::complete` / `Store::fail` one by one, then `Store::claim`.
    Calls,
    /// One `BatchWriter::write_batch` per round: the reports, then the claim.
    Writer(Box<BatchWriter>),
}

impl Driver {
    /// The model's events for a round's reports, as the driver hands them to the store: one by one, or (the
    /// batch writer) two or more successes together first, as `Store::write_batch` applies them, then the rest
    /// in order.
    fn events_of(&self, reports: &[(Lease, Outcome)]) -> Vec<Event> {
        let one = |(lease, outcome): &(Lease, Outcome)| match outcome {
            Outcome::Succeeded(output) => Event::Succeeded(lease.step_id.clone(), output.clone()),
            Outcome::Failed(failure) => Event::Failed(lease.step_id.clone(), failure.clone()),
        };
        let successes: Vec<(String, Value)> = reports
            .iter()
            .filter_map(|(lease, outcome)| match outcome {
                Outcome::Succeeded(output) => Some((lease.step_id.clone(), output.clone())),
                Outcome::Failed(_) => None,
            })
            .collect();
        match self {
            Driver::Writer(_) if successes.len() >= 2 => std::iter::once(Event::SucceededTogether(successes))
                .chain(reports.iter().filter(|(_, o)| matches!(o, Outcome::Failed(_))).map(one))
                .collect(),
            _ => reports.iter().map(one).collect(),
        }
    }

    async fn round(&mut self, store: &Store, reports: Vec<(Lease, Outcome)>, now: i64) -> Vec<Claimed> {
        let claim = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 100, now_ms: now };
        match self {
            Driver::Calls => {
                for (lease, outcome) in reports {
                    let report = match outcome {
                        Outcome::Succeeded(output) => store.complete(&lease, &output, LIMITS, now).await,
                        Outcome::Failed(failure) => store.fail(&lease, &failure, 0.0, now).await,
                    };
                    assert_ne!(report.expect("the report is recorded"), Report::Stale, "a live lease");
                }
                store.claim(&claim, TTL).await.expect("claim")
            }
            Driver::Writer(writer) => {
                let items: Vec<ReportItem> = reports
                    .into_iter()
                    .map(|(lease, outcome)| ReportItem {
                        lease,
                        kind: match outcome {
                            Outcome::Succeeded(output) => ReportKind::Complete(output),
                            Outcome::Failed(failure) => ReportKind::Fail { failure, sample: 0.0 },
                        },
                    })
                    .collect();
                let nobody = |_: usize| Vec::new();
                let outcome = writer
                    .write_batch(&batch(&items, std::slice::from_ref(&claim), now, &nobody))
                    .await
                    .expect("the batch commits");
                assert!(outcome.reports.iter().all(|r| *r != Report::Stale), "live leases");
                outcome.claimed.into_iter().next().unwrap_or_default()
            }
        }
    }
}

/// What the seeds of one driver exercised beyond completions and failures (so the test shows they were covered).
#[derive(Debug, Default)]
struct Covered {
    operator_actions: usize,
    cancels: usize,
}

/// Drives one random run through the store and the model; panics naming the seed on any difference.
async fn one_seed(store: &Store, driver: &mut Driver, seed: u64, covered: &mut Covered) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let doc = random_plan(&mut rng);
    let run_id = format!("model-{seed}");
    let new = new_run(&run_id, &doc);
    let (mut model, mut expected) = RunGraph::new(new.plan.clone(), new.input.clone());
    create(store, &new).await;

    let mut now = T0;
    let mut running: Vec<Lease> = Vec::new();
    let mut reports = Vec::new();
    for _round in 0..200 {
        for claimed in driver.round(store, std::mem::take(&mut reports), now).await {
            expected.extend(model.apply(Event::Claimed(claimed.lease.step_id.clone()), 0.0));
            running.push(claimed.lease);
        }
        now += 3_600_000;
        let in_status = |status| -> Vec<String> {
            new.plan.steps.iter().map(|s| s.id.clone()).filter(|id| model.status(id) == Some(status)).collect()
        };
        let waiting = in_status(StepStatus::WaitingApproval);
        let parked = in_status(StepStatus::OutcomeUnknown);
        if running.is_empty() && waiting.is_empty() && parked.is_empty() {
            if model.ready().is_empty() {
                break;
            }
            // A retry in backoff: due by the next round's claim.
            continue;
        }
        if rng.random_bool(0.03) {
            // A cancel ends the run whatever is open: running leases end, later reports would be stale.
            assert!(store.cancel_run(&run_id, now).await.expect("cancel"), "seed {seed}: the run is open");
            expected.extend(model.apply(Event::RunCancelled, 0.0));
            covered.cancels += 1;
            break;
        }
        if !parked.is_empty() && (running.is_empty() || rng.random_bool(0.3)) {
            let id = &parked[rng.random_range(0..parked.len())];
            let actions = [OperatorAction::Retry, OperatorAction::Skip, OperatorAction::Fail];
            let action = actions[rng.random_range(0..actions.len())];
            let applied = store.operate(&run_id, id, action, "tester", None, now).await.expect("operate");
            assert!(applied, "seed {seed}: {id} is parked as outcome_unknown");
            expected.extend(model.apply(Event::Operator(id.clone(), action), 0.0));
            covered.operator_actions += 1;
            continue;
        }
        if !waiting.is_empty() && (running.is_empty() || rng.random_bool(0.3)) {
            let id = &waiting[rng.random_range(0..waiting.len())];
            let approve = rng.random_bool(0.7);
            let decided = store.decide_approval(&run_id, id, approve, "tester", now).await.expect("decide");
            assert_eq!(decided, ApprovalOutcome::Decided, "seed {seed}: {id} waits for approval");
            let event = if approve { Event::Approved(id.clone()) } else { Event::Rejected(id.clone()) };
            expected.extend(model.apply(event, 0.0));
            continue;
        }
        // Up to three running steps report together, in random order.
        let count = rng.random_range(1..=running.len().min(3));
        for _ in 0..count {
            let lease = running.swap_remove(rng.random_range(0..running.len()));
            let outcome = match rng.random_range(0..12) {
                0..6 => Outcome::Succeeded(json!({"v": rng.random_range(0..3)})),
                6..8 => Outcome::Failed(Failure::new("action_error", "try again", true)),
                // Ambiguous: a non-idempotent step is parked as `outcome_unknown`, an idempotent one retried.
                8..10 => Outcome::Failed(Failure::new("timeout", "no answer in time", true)),
                _ => Outcome::Failed(Failure::new("bad_request", "never works", false)),
            };
            reports.push((lease, outcome));
        }
        for event in driver.events_of(&reports) {
            expected.extend(model.apply(event, 0.0));
        }
    }

    let plan_text = serde_json::to_string(&doc).unwrap_or_default();
    assert!(model.run_status().is_final(), "seed {seed}: the model's run ends: {plan_text}");
    let summary = run(store, &run_id).await;
    assert_eq!(summary.status, model.run_status().as_str(), "seed {seed}: run status; plan {plan_text}");
    for step in store.steps(&run_id).await.expect("steps") {
        let modelled = model.status(&step.id).map(StepStatus::as_str);
        assert_eq!(Some(step.status.as_str()), modelled, "seed {seed}: step {}; plan {plan_text}", step.id);
    }
    let recorded = transitions_of(&events(store, &run_id).await);
    assert_eq!(recorded, comparable(expected), "seed {seed}: the same transitions in order; plan {plan_text}");
}

async fn random_runs_through_the_stores_calls_make_the_models_decisions(store: Store) {
    let mut driver = Driver::Calls;
    let mut covered = Covered::default();
    for seed in 0..seeds() {
        one_seed(&store, &mut driver, seed, &mut covered).await;
    }
    assert!(covered.operator_actions > 0 && covered.cancels > 0, "operators and cancels took part: {covered:?}");
}

async fn random_runs_through_the_batch_writer_make_the_models_decisions(store: Store) {
    let mut driver = Driver::Writer(Box::new(store.batch_writer()));
    let mut covered = Covered::default();
    for seed in 1_000..1_000 + seeds() {
        one_seed(&store, &mut driver, seed, &mut covered).await;
    }
    assert!(covered.operator_actions > 0 && covered.cancels > 0, "operators and cancels took part: {covered:?}");
    let Driver::Writer(writer) = &driver else { unreachable!("the writer driver") };
    let (chain, leaves) = (writer.fast_path_counts().chain, writer.fast_path_counts().leaves);
    if matches!(store, Store::Postgres(_)) {
        // Leaf calls often fall back here (most random runs end with a failed step, which the call leaves to the
        // general path); a fallback writes nothing, so the comparison above covers what it tried too.
        let tried = leaves.committed + leaves.fell_back;
        assert!(chain.committed > 0 && tried > 0, "the one-call functions took part: {chain:?} {leaves:?}");
    }
}

async fn random_runs_through_the_batch_writer_without_the_fast_path_make_the_models_decisions(store: Store) {
    let mut driver = Driver::Writer(Box::new(store.batch_writer().with_fast_path(false)));
    let mut covered = Covered::default();
    for seed in 1_000..1_000 + seeds() {
        one_seed(&store, &mut driver, seed, &mut covered).await;
    }
    assert!(covered.operator_actions > 0 && covered.cancels > 0, "operators and cancels took part: {covered:?}");
    let Driver::Writer(writer) = &driver else { unreachable!("the writer driver") };
    let nothing = cairn_store::OneCallCounts::default();
    assert_eq!(
        (writer.fast_path_counts().chain, writer.fast_path_counts().leaves),
        (nothing, nothing),
        "no call was tried"
    );
}

contract_tests!(
    random_runs_through_the_stores_calls_make_the_models_decisions,
    random_runs_through_the_batch_writer_make_the_models_decisions,
    random_runs_through_the_batch_writer_without_the_fast_path_make_the_models_decisions,
);
