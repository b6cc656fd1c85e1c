//! Plan validation, run submission, listing, inspection, cancellation and step decisions.

use axum::Json;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::validate::validate_value;
use cairn_store::OperatorAction;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::StrictJson;
use super::error::ApiError;
use crate::engine::RetryRequest;
use crate::submit::SubmitRequest;
use crate::view::{detail_view, run_view};

/// `POST /v1/plans:validate` body: the plan itself, or `{"plan": …}`.
pub(super) async fn validate(State(state): State<AppState>, StrictJson(body): StrictJson<Value>) -> Response {
    let plan = match body.get("plan") {
        Some(plan) if body.get("steps").is_none() => plan.clone(),
        _ => body,
    };
    let catalog = state.engine.catalog().snapshot_for(&plan).await;
    let report = validate_value(&plan, &catalog, &state.engine.config().limits);
    Json(json!({"valid": report.valid, "diagnostics": report.diagnostics})).into_response()
}

/// `POST /v1/runs` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitBody {
    plan: Value,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    idempotency_key: Option<String>,
    /// Labels to find the run by (`GET /v1/runs?label=key:value`).
    #[serde(default)]
    labels: cairn_core::labels::Labels,
}

/// `POST /v1/runs`: 201 with the run, 200 when the idempotency key matched an existing run, 422 with
/// diagnostics for an invalid plan (nothing stored), 409 for a conflicting key.
pub(super) async fn submit(
    State(state): State<AppState>,
    StrictJson(body): StrictJson<SubmitBody>,
) -> Result<Response, ApiError> {
    if let Some(key) = &body.idempotency_key {
        cairn_core::text::IDEMPOTENCY_KEY.check(key)?;
    }
    cairn_core::labels::check(&body.labels)?;
    let req = SubmitRequest {
        plan: body.plan,
        input: body.input,
        idempotency_key: body.idempotency_key,
        labels: body.labels,
    };
    let submitted = state.engine.submit(&req).await?;
    // A new run's answer is the state it was committed in when that is known (no read-back transaction);
    // otherwise it is read.
    let view = match submitted.created {
        Some(detail) => detail_view(detail, &state.engine.served_actions().await?),
        None => run_view(&state.engine, &submitted.run_id).await?.ok_or_else(|| ApiError::not_found("run"))?,
    };
    let status = if submitted.existing { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(view)).into_response())
}

/// `GET /v1/runs?…`: the runs the filters match ([`super::run_query::list_query`]), newest first, `limit` 1–500
/// (default 50), with `next_cursor` when another page may follow. With `attention=true`, each run also lists
/// its steps that need attention and why.
pub(super) async fn list(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Result<Response, ApiError> {
    let now = state.engine.now_ms();
    let query = super::run_query::list_query(raw.as_deref(), now)?;
    let store = state.engine.store();
    let page = store.runs_page(&query.filter, &query.start, query.limit).await?;
    let mut runs: Vec<Value> = page.runs.iter().map(|r| json!(r)).collect();
    if query.filter.attention_at.is_some() {
        let ids: Vec<&str> = page.runs.iter().map(|r| r.id.as_str()).collect();
        let steps = store.attention_steps(&ids, now).await?;
        for (view, run) in runs.iter_mut().zip(&page.runs) {
            view["attention"] = json!(steps.iter().filter(|s| s.run_id == run.id).collect::<Vec<_>>());
        }
    }
    let mut answer =
        json!({"runs": runs, "limit": query.limit, "next_cursor": page.next_cursor.map(|c| c.to_string())});
    if let cairn_store::PageStart::Offset(offset) = query.start {
        answer["offset"] = json!(offset);
    }
    Ok(Json(answer).into_response())
}

/// `GET /v1/runs/{id}` query.
#[derive(Debug, Deserialize)]
pub(super) struct ShowQuery {
    view: Option<String>,
}

/// `GET /v1/runs/{id}?view=full|summary`: `full` (the default) is the run with its steps and failure records
/// ([`crate::view`]); `summary` is the run alone, as `GET /v1/runs` lists it (one key lookup, whatever the
/// number of steps: for pollers waiting for a large run to end). Another view is a 400 `invalid_view`.
pub(super) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Response, ApiError> {
    let store = state.engine.store();
    match q.view.as_deref() {
        None | Some("full") => {
            let view = run_view(&state.engine, &id).await?.ok_or_else(|| ApiError::not_found("run"))?;
            Ok(Json(view).into_response())
        }
        Some("summary") => {
            let run = store.run(&id).await?.ok_or_else(|| ApiError::not_found("run"))?;
            Ok(Json(run).into_response())
        }
        Some(other) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_view",
            format!("unknown view `{other}`: use `full` (the default) or `summary`"),
        )),
    }
}

/// `POST /v1/runs/{id}:cancel|:redrive|:rerun|:pause|:resume`.
pub(super) async fn run_action(
    State(state): State<AppState>,
    Path(id_verb): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let (id, verb) = split_verb(&id_verb)?;
    match verb {
        "cancel" | "redrive" | "pause" | "resume" => {
            let decision: DecisionBody = decision_body(&body)?;
            if decision.args.is_some() {
                return Err(ApiError::bad_request(format!("`args` apply to a step's retry, not to {verb}")));
            }
            let by = actor(decision.by, decision.reason.as_deref())?;
            let reason = decision.reason.as_deref();
            match verb {
                "cancel" => cancel(&state, id, &by, reason).await?,
                "redrive" => state.engine.redrive_run(id, &by, reason).await.map(drop)?,
                _ => state.engine.pause_run(id, verb == "pause", &by, reason).await?,
            }
            let view = run_view(&state.engine, id).await?.ok_or_else(|| ApiError::not_found("run"))?;
            Ok(Json(view).into_response())
        }
        "rerun" => rerun(&state, id, decision_body(&body)?).await,
        _ => Err(ApiError::not_found("route")),
    }
}

/// Cancels run `id` for `by`: 404 when there is no such run, 409 `already_finished`.
async fn cancel(state: &AppState, id: &str, by: &str, reason: Option<&str>) -> Result<(), ApiError> {
    if state.engine.store().run(id).await?.is_none() {
        return Err(ApiError::not_found("run"));
    }
    if !state.engine.cancel_run_by(id, by, reason).await? {
        return Err(ApiError::new(StatusCode::CONFLICT, "already_finished", "the run has already finished"));
    }
    Ok(())
}

/// Body of `POST /v1/runs/{id}:rerun`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RerunBody {
    /// The step to run again from (it and its descendants run; the other steps keep their outputs).
    #[serde(default)]
    from: Option<String>,
    /// Who decided.
    #[serde(default)]
    by: Option<String>,
    /// Why.
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/runs/{id}:rerun`: 201 with the new run.
async fn rerun(state: &AppState, id: &str, body: RerunBody) -> Result<Response, ApiError> {
    let from = body.from.ok_or_else(|| ApiError::bad_request("`from` names the step to rerun from"))?;
    let by = actor(body.by, body.reason.as_deref())?;
    let new = state.engine.rerun_run(id, &from, &by, body.reason.as_deref()).await?;
    let view = run_view(&state.engine, &new).await?.ok_or_else(|| ApiError::not_found("run"))?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Body of a step decision. Unknown fields are refused (a typo such as `{"bye": …}` must not pass silently).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DecisionBody {
    /// Who decided (recorded in the run history).
    #[serde(default)]
    by: Option<String>,
    /// Why (recorded in the run history; `retry` and a run's `redrive` only).
    #[serde(default)]
    reason: Option<String>,
    /// Repaired args replacing the step's (`retry` only), validated against the action's schema and the plan's
    /// references.
    #[serde(default)]
    args: Option<Value>,
}

/// Who decided (`api` when the body does not say), with `by` and `reason` checked as operator notes.
pub(super) fn actor(by: Option<String>, reason: Option<&str>) -> Result<String, ApiError> {
    let by = by.unwrap_or_else(|| "api".into());
    cairn_core::text::OPERATOR_NOTE.check(&by)?;
    if let Some(reason) = reason {
        cairn_core::text::OPERATOR_NOTE.check(reason)?;
    }
    Ok(by)
}

/// The optional body of a decision: `{"by": "alice"}` records who decided.
fn decision_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Ok(T::default());
    }
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the body is not valid UTF-8"))?;
    let value = cairn_core::document::parse(text, cairn_core::document::Format::Json)
        .map_err(|f| ApiError::bad_request(f.message))?;
    super::body::typed(value)
}

/// `POST /v1/runs/{id}/steps/{step}:approve|:reject|:retry|:skip|:fail`.
pub(super) async fn step_action(
    State(state): State<AppState>,
    Path((id, step_verb)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let (step, verb) = split_verb(&step_verb)?;
    let action = match verb {
        "approve" => OperatorAction::Approve,
        "reject" => OperatorAction::Reject,
        "retry" => OperatorAction::Retry,
        "skip" => OperatorAction::Skip,
        "fail" => OperatorAction::Fail,
        _ => return Err(ApiError::not_found("route")),
    };
    let decision: DecisionBody = decision_body(&body)?;
    let by = actor(decision.by.clone(), decision.reason.as_deref())?;
    if action == OperatorAction::Retry {
        let retry = RetryRequest {
            run_id: &id,
            step_id: step,
            args: decision.args.as_ref(),
            by: &by,
            reason: decision.reason.as_deref(),
        };
        state.engine.retry_step(retry).await?;
        let view = run_view(&state.engine, &id).await?.ok_or_else(|| ApiError::not_found("run"))?;
        return Ok(Json(view).into_response());
    }
    if decision.args.is_some() {
        return Err(ApiError::bad_request(format!("`args` apply to retry only, not to {verb}")));
    }
    if decision.reason.is_some() && matches!(action, OperatorAction::Approve | OperatorAction::Reject) {
        return Err(ApiError::bad_request(format!("`reason` applies to retry, skip and fail, not to {verb}")));
    }
    if matches!(action, OperatorAction::Approve | OperatorAction::Reject) {
        // Approvals check the approval deadline (contract §10, "Waiting"): a decision after it is refused.
        let approve = action == OperatorAction::Approve;
        match state.engine.decide_approval(&id, step, approve, &by).await? {
            cairn_store::ApprovalOutcome::Decided => {}
            cairn_store::ApprovalOutcome::TimedOut => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "approval_timed_out",
                    format!("the approval of step `{step}` of run `{id}` timed out; its on_timeout outcome applied"),
                ));
            }
            cairn_store::ApprovalOutcome::WrongState => {
                let conflict = format!("step `{step}` of run `{id}` is not waiting_approval");
                return Err(refusal(&state, &id, step, conflict).await);
            }
        }
    } else if !state.engine.operate(&id, step, action, &by, decision.reason.as_deref()).await? {
        return Err(refusal(&state, &id, step, format!("step `{step}` of run `{id}` is not outcome_unknown")).await);
    }
    let view = run_view(&state.engine, &id).await?.ok_or_else(|| ApiError::not_found("run"))?;
    Ok(Json(view).into_response())
}

/// A refused step decision: 404 when the run or the step does not exist, else 409 `wrong_state` saying why.
async fn refusal(state: &AppState, run_id: &str, step_id: &str, conflict: String) -> ApiError {
    match state.engine.store().steps(run_id).await {
        Ok(steps) if steps.is_empty() => ApiError::not_found("run"),
        Ok(steps) if !steps.iter().any(|s| s.id == step_id) => ApiError::not_found("step"),
        Ok(_) => ApiError::new(StatusCode::CONFLICT, "wrong_state", conflict),
        Err(e) => e.into(),
    }
}

/// `GET /v1/actions`: every action the validator accepts, with schemas and effects, and, for each, the workers
/// seen serving it lately (`workers: [{worker_id, last_seen_at}]`, most recent first) and whether one is
/// connected (seen within three poll intervals, through any orchestrator).
pub(super) async fn actions(State(state): State<AppState>) -> Result<Response, ApiError> {
    let engine = &state.engine;
    let window = i64::try_from((engine.config().poll_wait_max() * 3).as_millis()).unwrap_or(i64::MAX);
    let now = engine.now_ms();
    let workers = engine.store().action_workers_since(now - 24 * 3_600_000).await?;
    let actions: Vec<Value> = engine
        .catalog()
        .specs()
        .into_iter()
        .map(|spec| {
            let serving: Vec<&cairn_store::ActionWorker> = workers.iter().filter(|w| w.action == spec.name).collect();
            let connected = serving.iter().any(|w| w.last_seen_at >= now - window);
            let mut view = json!(spec);
            view["workers"] = json!(
                serving
                    .iter()
                    .map(|w| json!({"worker_id": w.worker_id, "last_seen_at": w.last_seen_at}))
                    .collect::<Vec<_>>()
            );
            view["connected"] = json!(connected);
            view
        })
        .collect();
    Ok(Json(json!({"actions": actions})).into_response())
}

fn split_verb(segment: &str) -> Result<(&str, &str), ApiError> {
    segment
        .rsplit_once(':')
        .ok_or_else(|| ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "use GET"))
}
