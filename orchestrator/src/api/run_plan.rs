//! `GET /v1/runs/{id}/plan`: the plan a run follows, as stored (validated, defaults applied). Plans are
//! immutable, so a client reads it once per run (the dashboard draws the run's DAG from its `depends_on`) while
//! it re-reads the run view as the run moves.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;

/// 200 with the plan document, 404 `not_found` when there is no such run.
pub(super) async fn show(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let plan = state.engine.store().run_plan(&id).await?.ok_or_else(|| ApiError::not_found("run"))?;
    Ok(Json(plan).into_response())
}
