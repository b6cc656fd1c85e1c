//! Bulk operations over the runs a filter matches: `POST /v1/runs:cancel`, `:redrive` and `:retry-failed`.
//!
//! Body: `{"filter": {…}, "dry_run": false, "by": "…", "reason": "…"}` (the filter as in
//! [`super::run_query::FilterBody`]; an empty filter is refused). `dry_run: true` answers `{matched}` and changes
//! nothing. Otherwise the operation is applied to the matching runs newest first, at most [`MAX_RUNS`] per
//! request, each on its own (one run's refusal does not stop the others) and recorded in that run's history as
//! the single-run operation records it; the answer lists each run with its outcome, and `more: true` when
//! matching runs were left for another request.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use cairn_core::state::StepStatus;
use cairn_store::{PageStart, RunFilter};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::StrictJson;
use super::error::ApiError;
use super::run_query::FilterBody;
use crate::engine::RetryRequest;

/// Most runs one bulk request changes.
pub(super) const MAX_RUNS: i64 = 1000;

/// A bulk operation's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkBody {
    filter: FilterBody,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// Which bulk operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bulk {
    Cancel,
    Redrive,
    RetryFailed,
}

pub(super) async fn cancel(state: State<AppState>, body: StrictJson<BulkBody>) -> Result<Response, ApiError> {
    bulk(state, Bulk::Cancel, body).await
}

pub(super) async fn redrive(state: State<AppState>, body: StrictJson<BulkBody>) -> Result<Response, ApiError> {
    bulk(state, Bulk::Redrive, body).await
}

pub(super) async fn retry_failed(state: State<AppState>, body: StrictJson<BulkBody>) -> Result<Response, ApiError> {
    bulk(state, Bulk::RetryFailed, body).await
}

async fn bulk(
    State(state): State<AppState>,
    op: Bulk,
    StrictJson(body): StrictJson<BulkBody>,
) -> Result<Response, ApiError> {
    let by = super::runs::actor(body.by, body.reason.as_deref())?;
    let filter = body.filter.run_filter(state.engine.now_ms())?;
    let store = state.engine.store();
    let matched = store.runs_count(&filter).await?;
    if body.dry_run {
        return Ok(Json(json!({"matched": matched, "dry_run": true})).into_response());
    }
    let (ids, more) = matching(&state, &filter).await?;
    let mut outcomes = Vec::with_capacity(ids.len());
    for id in &ids {
        outcomes.push(apply(&state, op, id, &by, body.reason.as_deref()).await?);
    }
    let changed = outcomes.iter().filter(|o| o["changed"] == true).count();
    Ok(Json(json!({"matched": matched, "changed": changed, "runs": outcomes, "more": more})).into_response())
}

/// The ids of the first [`MAX_RUNS`] runs `filter` matches, newest first, and whether more match.
async fn matching(state: &AppState, filter: &RunFilter) -> Result<(Vec<String>, bool), ApiError> {
    let store = state.engine.store();
    let mut ids = Vec::new();
    let mut start = PageStart::Offset(0);
    loop {
        let left = MAX_RUNS - i64::try_from(ids.len()).unwrap_or(MAX_RUNS);
        let page = store.runs_page(filter, &start, left.min(super::run_query::MAX_LIMIT)).await?;
        ids.extend(page.runs.into_iter().map(|r| r.id));
        match page.next_cursor {
            Some(_) if i64::try_from(ids.len()).unwrap_or(MAX_RUNS) >= MAX_RUNS => return Ok((ids, true)),
            Some(cursor) => start = PageStart::After(cursor),
            None => return Ok((ids, false)),
        }
    }
}

/// Applies `op` to one run: `{id, changed, outcome, …}`. A refusal (the run is in the wrong state) is an
/// outcome; only a store failure fails the request.
async fn apply(state: &AppState, op: Bulk, id: &str, by: &str, reason: Option<&str>) -> Result<Value, ApiError> {
    let engine = &state.engine;
    let refused = |e: crate::engine::RetryError| match e {
        crate::engine::RetryError::Store(e) => Err(ApiError::from(e)),
        other => Ok(json!({"id": id, "changed": false, "outcome": "refused", "message": other.to_string()})),
    };
    match op {
        Bulk::Cancel => {
            let cancelled = engine.cancel_run_by(id, by, reason).await?;
            let outcome = if cancelled { "cancelled" } else { "already_finished" };
            Ok(json!({"id": id, "changed": cancelled, "outcome": outcome}))
        }
        Bulk::Redrive => match engine.redrive_run(id, by, reason).await {
            Ok(steps) => Ok(json!({"id": id, "changed": true, "outcome": "redriven", "steps": steps})),
            Err(e) => refused(e),
        },
        Bulk::RetryFailed => {
            let failed: Vec<String> = engine
                .store()
                .steps(id)
                .await?
                .into_iter()
                .filter(|s| s.status == StepStatus::Failed)
                .map(|s| s.id)
                .collect();
            let mut retried = Vec::new();
            for step_id in &failed {
                let req = RetryRequest { run_id: id, step_id, args: None, by, reason };
                match engine.retry_step(req).await {
                    Ok(_) => retried.push(step_id.clone()),
                    // A cancelled run, say: its other failed steps are refused the same way.
                    Err(e) => return refused(e),
                }
            }
            let outcome = if retried.is_empty() { "no_failed_steps" } else { "retried" };
            Ok(json!({"id": id, "changed": !retried.is_empty(), "outcome": outcome, "steps": retried}))
        }
    }
}
