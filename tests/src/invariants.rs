//! The invariant sweep of the cases' Conventions (`cases2.md`): after a scenario, every step that is not final
//! has exactly one reason to progress, every final step holds nothing that could still act on it, and every
//! run's state agrees with its steps'. Most "stuck forever" bugs (a wait without its timeout, a ready step no
//! claim can see, a lease left on a finished step) break one of these. [`assert_hold`] runs it and panics with
//! every violation at once; [`violations`] returns them.
//!
//! Read with plain `SELECT`s on the engine's own pool (the same text for both backends), and judged here in
//! Rust, so the rules are written once. What each status's reason is, in the store's columns:
//!
//! | status | its one reason to progress |
//! |---|---|
//! | `pending` | unfinished dependencies: `pending_deps > 0` |
//! | `ready` | a timer: `available_at` set (the claim takes steps with `available_at <= now`; NULL is never due) |
//! | `running`, a worker's | a lease: `lease_id`, `lease_owner` and `lease_expires_at` set, no `event_waits` row |
//! | `running`, `event.wait` | an event wait: one `event_waits` row for the attempt, the lease without expiry held by [`WAIT_OWNER`]; with a literal `timeout_ms` in its args, a deadline on both the row and the step |
//! | `waiting_approval` | a pending approval, with its deadline in `available_at` exactly when `approval.timeout_ms` is set |
//! | `outcome_unknown` | an operator decision (`retry`, `skip`, `fail`; the contract keeps it open until then) |
//!
//! Neither a lease nor a wait may accompany another reason: a `pending` or `ready` step holding a lease, or a
//! worker's lease next to an `event_waits` row, is two reasons, and a violation. A running step has exactly
//! one open (`running`) attempt row, the one of its attempt; no other step has any. Final steps (`succeeded`,
//! `failed`, `skipped`, `cancelled`) hold no lease and no `event_waits` row (whose deadline the timeout pass
//! would act on). A final step's `available_at` is not a timer: it is the time the step was last due, kept as
//! history, and every pass that reads the column filters on `ready` or `waiting_approval` first.
//!
//! Runs: an open run (`pending`, `running`) counts in `open_steps` exactly its steps that are not final, at least
//! one; a finished run (`succeeded`, `failed`, `cancelled`) has no step that is not final. Concurrency and
//! rate-limit waits are not in Cairn yet, so neither is their rule.

use std::collections::{HashMap, HashSet};

use cairn_store::{Store, WAIT_OWNER};
use serde_json::Value;

use crate::raw;

const FINAL: [&str; 4] = ["succeeded", "failed", "skipped", "cancelled"];

#[derive(Debug, sqlx::FromRow)]
struct StepRow {
    run_id: String,
    step_id: String,
    action: String,
    status: String,
    args: String,
    approval: Option<String>,
    pending_deps: i64,
    attempt: i64,
    available_at: Option<i64>,
    lease_id: Option<String>,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
    deadline_at: Option<i64>,
}

#[derive(Debug, sqlx::FromRow)]
struct RunRow {
    id: String,
    status: String,
    open_steps: i64,
}

#[derive(Debug, sqlx::FromRow)]
struct WaitRow {
    run_id: String,
    step_id: String,
    attempt: i64,
    deadline_at: Option<i64>,
}

#[derive(Debug, sqlx::FromRow)]
struct OpenAttempt {
    run_id: String,
    step_id: String,
    attempt: i64,
}

const STEPS: &str = "SELECT run_id, step_id, action, status, args, approval, pending_deps, attempt, available_at, \
     lease_id, lease_owner, lease_expires_at, deadline_at FROM steps ORDER BY run_id, position";
const RUNS: &str = "SELECT id, status, open_steps FROM runs ORDER BY id";
const WAITS: &str = "SELECT run_id, step_id, attempt, deadline_at FROM event_waits";
const OPEN_ATTEMPTS: &str = "SELECT run_id, step_id, attempt FROM attempts WHERE status = 'running'";

/// Panics listing every violation of the sweep's rules (module docs) in `store`; `context` names the scenario.
pub async fn assert_hold(store: &Store, context: &str) {
    let found = violations(store).await;
    assert!(
        found.is_empty(),
        "{context}: the invariant sweep found {} violation(s):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// Every violation of the sweep's rules (module docs) in `store`, one line each naming the run and step.
pub async fn violations(store: &Store) -> Vec<String> {
    let steps: Vec<StepRow> = raw::fetch_all(store, STEPS).await;
    let runs: Vec<RunRow> = raw::fetch_all(store, RUNS).await;
    let waits: Vec<WaitRow> = raw::fetch_all(store, WAITS).await;
    let open_attempts: Vec<OpenAttempt> = raw::fetch_all(store, OPEN_ATTEMPTS).await;

    let mut waits_of: HashMap<(&str, &str), Vec<&WaitRow>> = HashMap::new();
    for w in &waits {
        waits_of.entry((w.run_id.as_str(), w.step_id.as_str())).or_default().push(w);
    }
    let mut attempts_of: HashMap<(&str, &str), Vec<i64>> = HashMap::new();
    for a in &open_attempts {
        attempts_of.entry((a.run_id.as_str(), a.step_id.as_str())).or_default().push(a.attempt);
    }
    let mut found = Vec::new();
    let mut known = HashSet::new();
    for s in &steps {
        let key = (s.run_id.as_str(), s.step_id.as_str());
        known.insert(key);
        let waits = waits_of.get(&key).map_or(&[][..], Vec::as_slice);
        let attempts = attempts_of.get(&key).map_or(&[][..], Vec::as_slice);
        for problem in step_problems(s, waits, attempts) {
            found.push(format!("run {} step {} ({}): {problem}", s.run_id, s.step_id, s.status));
        }
    }
    for w in &waits {
        if !known.contains(&(w.run_id.as_str(), w.step_id.as_str())) {
            found.push(format!(
                "run {} step {}: an event_waits row for a step that does not exist",
                w.run_id, w.step_id
            ));
        }
    }
    for run in &runs {
        let of_run: Vec<&StepRow> = steps.iter().filter(|s| s.run_id == run.id).collect();
        for problem in run_problems(run, &of_run) {
            found.push(format!("run {} ({}): {problem}", run.id, run.status));
        }
    }
    found
}

/// The rules for one step, given its `event_waits` rows and the attempt numbers of its open attempt rows.
fn step_problems(s: &StepRow, waits: &[&WaitRow], open_attempts: &[i64]) -> Vec<String> {
    let mut problems = Vec::new();
    let leased = s.lease_id.is_some() || s.lease_owner.is_some() || s.lease_expires_at.is_some();
    let running = s.status == "running";
    if !running && leased {
        problems.push(format!("holds a lease ({:?} by {:?}) though not running", s.lease_id, s.lease_owner));
    }
    if !running && !waits.is_empty() {
        problems.push(format!("holds {} event_waits row(s) though not running", waits.len()));
    }
    match (running, open_attempts) {
        (true, [only]) if *only == s.attempt => {}
        (true, _) => problems.push(format!("running attempt {} but open attempt rows {open_attempts:?}", s.attempt)),
        (false, []) => {}
        (false, _) => problems.push(format!("open attempt rows {open_attempts:?} though not running")),
    }
    match s.status.as_str() {
        "pending" if s.pending_deps <= 0 => problems.push("pending with no unfinished dependency".into()),
        "ready" if s.available_at.is_none() => problems.push("ready without available_at: never due".into()),
        "ready" if s.pending_deps != 0 => problems.push(format!("ready with {} dependencies open", s.pending_deps)),
        "running" if s.action == cairn_core::event_wait::ACTION => problems.extend(wait_problems(s, waits)),
        "running" => {
            if s.lease_id.is_none() || s.lease_owner.is_none() || s.lease_expires_at.is_none() {
                problems.push(format!(
                    "running without a whole lease (id {:?}, owner {:?}, expiry {:?})",
                    s.lease_id, s.lease_owner, s.lease_expires_at
                ));
            }
            if !waits.is_empty() {
                problems.push("a worker's lease and an event_waits row: two reasons".into());
            }
        }
        "waiting_approval" => {
            let timeout =
                s.approval.as_deref().and_then(json).and_then(|a| a.get("timeout_ms").and_then(Value::as_i64));
            match (timeout, s.available_at) {
                (Some(_), None) => problems.push("an approval with timeout_ms but no deadline".into()),
                (None, Some(at)) => problems.push(format!("an approval without timeout_ms has a deadline {at}")),
                _ => {}
            }
        }
        "pending" | "ready" | "outcome_unknown" => {}
        other if FINAL.contains(&other) => {}
        other => problems.push(format!("unknown step status `{other}`")),
    }
    problems
}

/// The rules for a running `event.wait` step: one wait row, for its attempt, under the orchestrator's lease
/// without expiry, and a deadline wherever the args give a literal timeout.
fn wait_problems(s: &StepRow, waits: &[&WaitRow]) -> Vec<String> {
    let mut problems = Vec::new();
    if s.lease_owner.as_deref() != Some(WAIT_OWNER) || s.lease_expires_at.is_some() {
        problems.push(format!(
            "an event.wait running under owner {:?} with lease expiry {:?} (expected {WAIT_OWNER}, none)",
            s.lease_owner, s.lease_expires_at
        ));
    }
    let [wait] = waits else {
        problems.push(format!("a running event.wait with {} event_waits rows, not one", waits.len()));
        return problems;
    };
    if wait.attempt != s.attempt {
        problems.push(format!("the event_waits row is for attempt {}, the step runs {}", wait.attempt, s.attempt));
    }
    let timeout = json(&s.args).and_then(|a| a.get("timeout_ms").and_then(Value::as_i64));
    if timeout.is_some() && (wait.deadline_at.is_none() || s.deadline_at.is_none()) {
        problems.push(format!(
            "a wait with timeout_ms but no timer (row deadline {:?}, step deadline {:?})",
            wait.deadline_at, s.deadline_at
        ));
    }
    if wait.deadline_at != s.deadline_at {
        problems.push(format!("wait deadline {:?} differs from the step's {:?}", wait.deadline_at, s.deadline_at));
    }
    problems
}

/// The rules for one run, given its steps.
fn run_problems(run: &RunRow, steps: &[&StepRow]) -> Vec<String> {
    let open = steps.iter().filter(|s| !FINAL.contains(&s.status.as_str())).count();
    let open = i64::try_from(open).unwrap_or(i64::MAX);
    match run.status.as_str() {
        "pending" | "running" | "paused" if open == 0 => {
            vec!["open with every step final: nothing will finish it".into()]
        }
        "pending" | "running" | "paused" if run.open_steps != open => {
            vec![format!("open_steps {} but {open} steps are not final", run.open_steps)]
        }
        "pending" | "running" | "paused" => Vec::new(),
        "succeeded" | "failed" | "cancelled" if open > 0 => vec![format!("finished with {open} steps not final")],
        "succeeded" | "failed" | "cancelled" if run.open_steps != 0 => {
            vec![format!("finished with open_steps {}", run.open_steps)]
        }
        "succeeded" | "failed" | "cancelled" => Vec::new(),
        other => vec![format!("unknown run status `{other}`")],
    }
}

fn json(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok()
}
