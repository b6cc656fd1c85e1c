//! Creating a run: plan (content-addressed), run, steps, edges and the first decisions, in one transaction.
//!
//! Roots (steps without dependencies) are decided right away by the same code that decides any step whose
//! dependencies finished, so a root with a false `when` is skipped and its skip propagates before the
//! transaction commits. A run-level idempotency key returns the existing run when plan and input match, and a
//! conflict otherwise.
//!
//! When no root needed a decision, the new run's state is exactly the rows inserted, so [`create_detailed`]
//! also returns it as a [`RunDetail`] built from them: the submission's answer then needs no read-back
//! transaction (measured on PostgreSQL: the read-back was about a third of a single-step run's statements).

use cairn_core::event::{EventKind, Progress};
use std::collections::HashMap;

use cairn_core::machine::{self, StepRules};
use cairn_core::state::{RunStatus, StepStatus};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::event;
use super::settle::{after_final, decide};
use crate::error::{StoreError, StoreResult};
use crate::model::{CreateOutcome, NewRun, RunDetail, RunSummary, StepSummary};
use crate::rows::{ChildRow, EventInsert, RunInsert, StepInsert};
use crate::runs_tx::RunsTx;
use crate::tx::StepTx;

/// Content hash of a plan body: lowercase hex SHA-256.
pub(crate) fn plan_id(body: &str) -> String {
    Sha256::digest(body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Creates the run (see the module docs) and returns the outcome.
pub(crate) async fn create<T: StepTx>(
    tx: &mut T,
    run: &NewRun,
    events: &mut Vec<EventInsert>,
) -> StoreResult<CreateOutcome> {
    Ok(create_detailed(tx, run, events).await?.0)
}

/// [`create`], also returning the created run as it will be committed when that is known without reading it
/// back: `Some` for a created run whose roots needed no decision (no `when`, no approval), `None` otherwise
/// (an existing run, a conflict, or decided roots, whose outcome and cascade only the database holds).
pub(crate) async fn create_detailed<T: StepTx>(
    tx: &mut T,
    run: &NewRun,
    events: &mut Vec<EventInsert>,
) -> StoreResult<(CreateOutcome, Option<RunDetail>)> {
    let rows = Rows::of(run)?;
    if let Some(existing) = by_key(tx, run, &rows).await? {
        return Ok((existing, None));
    }
    tx.run_insert(&rows.run_insert(run)).await?;
    tx.steps_insert(&run.run_id, &rows.steps, run.now_ms).await?;
    tx.edges_insert(&run.run_id, &rows.edges).await?;
    inserted(tx, run, rows, events).await
}

/// [`create_detailed`] for each of `runs`, in order, with one plans-and-runs insert and one steps insert for all
/// the runs without an idempotency key ([`RunsTx::runs_insert`], [`RunsTx::runs_steps_insert`]). Runs with a key
/// are created one by one, in order, so that a later run with the same key finds the earlier one. Outcomes in
/// input order.
pub(crate) async fn create_all<T: StepTx + RunsTx>(
    tx: &mut T,
    runs: &[NewRun],
    events: &mut Vec<EventInsert>,
) -> StoreResult<Vec<(CreateOutcome, Option<RunDetail>)>> {
    if let [run] = runs {
        return Ok(vec![create_detailed(tx, run, events).await?]);
    }
    let mut out = vec![None; runs.len()];
    let mut together = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        if run.idempotency_key.is_some() {
            out[i] = Some(create_detailed(tx, run, events).await?);
        } else {
            together.push((run, Rows::of(run)?));
        }
    }
    if !together.is_empty() {
        let inserts: Vec<RunInsert<'_>> = together.iter().map(|(run, rows)| rows.run_insert(run)).collect();
        tx.runs_insert(&inserts).await?;
        let steps: Vec<(&str, &[StepInsert], i64)> =
            together.iter().map(|(run, rows)| (run.run_id.as_str(), rows.steps.as_slice(), run.now_ms)).collect();
        tx.runs_steps_insert(&steps).await?;
    }
    let mut created = together.into_iter();
    for slot in &mut out {
        if slot.is_none() {
            let (run, rows) = created.next().ok_or_else(|| StoreError::corrupt("batch", "a run went missing"))?;
            tx.edges_insert(&run.run_id, &rows.edges).await?;
            *slot = Some(inserted(tx, run, rows, events).await?);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// A new run's rows, built before anything is written.
struct Rows {
    plan_id: String,
    body: String,
    input: String,
    context: String,
    steps: Vec<StepInsert>,
    edges: Vec<(String, String)>,
    goal_search: Option<String>,
    labels: String,
    label_rows: Vec<(String, String)>,
    actions: Vec<String>,
}

impl Rows {
    fn of(run: &NewRun) -> StoreResult<Rows> {
        let body = serde_json::to_string(&run.plan).map_err(|e| StoreError::corrupt("plan", e))?;
        let context = serde_json::to_string(&run.plan.context).map_err(|e| StoreError::corrupt("plan.context", e))?;
        let mut steps = step_rows(run)?;
        // A root that starts by itself is ready at once (it has no parents, so "every dependency succeeded"
        // holds): inserted as ready, it needs no decision statement, which keeps a 10,000-step submission to a
        // few statements.
        for r in steps.iter_mut().filter(|r| r.dep_count == 0 && r.starts_itself == 1) {
            r.status = StepStatus::Ready;
        }
        let mut actions: Vec<String> = run.plan.steps.iter().map(|s| s.action.clone()).collect();
        actions.sort_unstable();
        actions.dedup();
        Ok(Rows {
            plan_id: plan_id(&body),
            body,
            input: run.input.to_string(),
            context,
            steps,
            edges: edges(run),
            goal_search: run.plan.goal.as_deref().map(str::to_lowercase),
            labels: serde_json::to_string(&run.labels).map_err(|e| StoreError::corrupt("labels", e))?,
            label_rows: run.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            actions,
        })
    }

    fn run_insert<'a>(&'a self, run: &'a NewRun) -> RunInsert<'a> {
        RunInsert {
            run_id: &run.run_id,
            plan_id: &self.plan_id,
            plan_body: &self.body,
            input: &self.input,
            context: &self.context,
            idempotency_key: run.idempotency_key.as_deref(),
            steps: i64::try_from(run.plan.steps.len()).unwrap_or(i64::MAX),
            now: run.now_ms,
            goal: run.plan.goal.as_deref(),
            goal_search: self.goal_search.as_deref(),
            labels: &self.labels,
            label_rows: &self.label_rows,
            actions: &self.actions,
        }
    }
}

/// The run already holding `run`'s idempotency key, as the outcome for `run`: `Existing` when plan and input
/// match, `Conflict` otherwise; `None` for no key or a key not taken.
async fn by_key<T: StepTx>(tx: &mut T, run: &NewRun, rows: &Rows) -> StoreResult<Option<CreateOutcome>> {
    let Some(key) = &run.idempotency_key else { return Ok(None) };
    let Some(existing) = tx.run_by_key(key).await? else { return Ok(None) };
    let same_plan = existing.plan_id == rows.plan_id || same_json(&existing.body, &rows.body);
    let same_input = existing.input == rows.input || same_json(&existing.input, &rows.input);
    Ok(Some(if same_plan && same_input {
        CreateOutcome::Existing(existing.id)
    } else {
        CreateOutcome::Conflict(existing.id)
    }))
}

/// Whether two JSON texts hold the same value, whatever the order of object keys and the whitespace (case D12 b:
/// a client resubmitting the same plan re-serialised). `serde_json`'s objects compare as maps, key order aside.
/// The stored texts keep the order they were written in; only this comparison ignores it.
fn same_json(a: &str, b: &str) -> bool {
    matches!((serde_json::from_str::<Value>(a), serde_json::from_str::<Value>(b)), (Ok(a), Ok(b)) if a == b)
}

/// After a run's rows were inserted: its `run_created` and `step_ready` events, then the decisions its roots
/// need (see the module docs).
async fn inserted<T: StepTx>(
    tx: &mut T,
    run: &NewRun,
    rows: Rows,
    events: &mut Vec<EventInsert>,
) -> StoreResult<(CreateOutcome, Option<RunDetail>)> {
    let now = run.now_ms;
    let steps = i64::try_from(run.plan.steps.len()).unwrap_or(i64::MAX);
    events.push(event(&run.run_id, None, EventKind::RunCreated, json!({"plan_id": rows.plan_id, "steps": steps}), now));
    for (r, available_at) in rows.steps.iter().filter_map(|r| r.ready_at(now).map(|at| (r, at))) {
        let ready = Progress::Ready { available_at: Some(available_at) };
        events.push(EventInsert::progress(&run.run_id, Some(&r.step_id), ready, now));
    }
    let roots: Vec<ChildRow> = rows
        .steps
        .iter()
        .filter(|r| r.dep_count == 0 && r.status == StepStatus::Pending)
        .map(|r| ChildRow {
            step_id: r.step_id.clone(),
            dep_count: 0,
            pending_deps: 0,
            trigger_rule: r.trigger_rule.as_str().to_owned(),
            when_expr: r.when_expr.clone(),
            approval: r.approval.clone(),
            not_before_at: r.not_before_at,
            status: r.status.as_str().to_owned(),
            available_at: None,
        })
        .collect();
    if roots.is_empty() {
        let detail = inserted_detail(run, rows.plan_id, &rows.steps);
        return Ok((CreateOutcome::Created(run.run_id.clone()), Some(detail)));
    }
    let finals = decide(tx, &run.run_id, roots, None, now, events).await?;
    if !finals.is_empty() {
        // Skipped or failed roots cascade like any finished step.
        after_final(tx, &run.run_id, finals, now, events).await?;
    }
    Ok((CreateOutcome::Created(run.run_id.clone()), None))
}

/// The run as the inserts above leave it, field for field what [`crate::Store::run_detail`] reads back: a
/// pending run with every step open, steps in plan order with no attempt, ready roots available from their
/// timer or now (the `available_at` that `steps_insert` writes).
fn inserted_detail(run: &NewRun, plan_id: String, rows: &[StepInsert]) -> RunDetail {
    let now = run.now_ms;
    let step_count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    let steps = rows
        .iter()
        .map(|r| StepSummary {
            id: r.step_id.clone(),
            action: r.action.clone(),
            status: r.status,
            attempts: 0,
            output: None,
            error: None,
            available_at_ms: r.ready_at(now),
            not_before_at_ms: r.not_before_at,
            not_before_local: r.not_before_local.clone(),
            checkpoint: None,
            args_revision: 0,
            args: serde_json::from_str(&r.args).unwrap_or_default(),
            started_at_ms: None,
            finished_at_ms: None,
        })
        .collect();
    RunDetail {
        input: run.input.clone(),
        run: RunSummary {
            id: run.run_id.clone(),
            status: RunStatus::Pending,
            plan_id,
            step_count,
            open_steps: step_count,
            failure: None,
            created_at_ms: now,
            finished_at_ms: None,
            rerun_of: None,
            goal: run.plan.goal.clone(),
            labels: run.labels.clone(),
        },
        steps,
        attempts: Vec::new(),
    }
}

fn step_rows(run: &NewRun) -> StoreResult<Vec<StepInsert>> {
    let mut children: HashMap<String, i64> = HashMap::new();
    for (parent, _) in edges(run) {
        *children.entry(parent).or_default() += 1;
    }
    let mut rows = Vec::with_capacity(run.plan.steps.len());
    for (i, step) in run.plan.steps.iter().enumerate() {
        let mut deps = step.depends_on.clone();
        deps.sort();
        deps.dedup();
        let timer = run.timers.get(i).cloned().flatten();
        let retry = step.retry.clone().unwrap_or_default();
        let starts_itself = machine::starts_itself(&StepRules::of(step, timer.as_ref().map(|t| t.0)), deps.len());
        rows.push(StepInsert {
            step_id: step.id.clone(),
            position: i64::try_from(i).unwrap_or(i64::MAX),
            action: step.action.clone(),
            status: StepStatus::Pending,
            args: step.args.to_string(),
            when_expr: step.when.clone(),
            trigger_rule: step.effective_trigger_rule(),
            idempotent: i64::from(step.idempotent.unwrap_or(false)),
            timeout_ms: i64::try_from(step.effective_timeout_ms()).unwrap_or(i64::MAX),
            heartbeat_timeout_ms: step.heartbeat_timeout_ms.and_then(|ms| i64::try_from(ms).ok()),
            retry: serde_json::to_string(&retry).map_err(|e| StoreError::corrupt("retry", e))?,
            approval: step.approval.as_ref().map(|a| json!(a).to_string()),
            dep_count: i64::try_from(deps.len()).unwrap_or(i64::MAX),
            starts_itself: i64::from(starts_itself),
            child_count: children.get(&step.id).copied().unwrap_or(0),
            successor_action: None,
            not_before_at: timer.as_ref().map(|t| t.0),
            not_before_local: timer.map(|t| t.1),
        });
    }
    set_successors(&mut rows, &edges(run));
    Ok(rows)
}

/// Sets `successor_action` on each row whose one dependent the completion may lease in the same call: that
/// dependent depends on nothing else, starts by itself (the fact the release and `cairn_complete_and_claim`
/// compare, so its trigger rule, `when` and approval are `cairn_core::machine`'s business alone), and has no
/// `not_before` timer or `$` in its args (no placeholder to resolve, which could fail it). The function checks
/// the counters and flag again, with the dynamic conditions.
fn set_successors(rows: &mut [StepInsert], edges: &[(String, String)]) {
    let mut only_child: HashMap<&str, Option<&str>> = HashMap::new();
    for (parent, child) in edges {
        only_child.entry(parent.as_str()).and_modify(|c| *c = None).or_insert(Some(child.as_str()));
    }
    let index: HashMap<&str, usize> = rows.iter().enumerate().map(|(i, r)| (r.step_id.as_str(), i)).collect();
    let successors: Vec<(usize, String)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let child = &rows[*index.get(only_child.get(r.step_id.as_str()).copied().flatten()?)?];
            let simple = child.dep_count == 1
                && child.starts_itself == 1
                && child.not_before_at.is_none()
                && !child.args.contains('$');
            simple.then(|| (i, child.action.clone()))
        })
        .collect();
    for (i, action) in successors {
        rows[i].successor_action = Some(action);
    }
}

fn edges(run: &NewRun) -> Vec<(String, String)> {
    let known: HashMap<&str, ()> = run.plan.steps.iter().map(|s| (s.id.as_str(), ())).collect();
    let mut out = Vec::new();
    for step in &run.plan.steps {
        let mut deps: Vec<&String> = step.depends_on.iter().filter(|d| known.contains_key(d.as_str())).collect();
        deps.sort();
        deps.dedup();
        out.extend(deps.into_iter().map(|d| (d.clone(), step.id.clone())));
    }
    out
}
