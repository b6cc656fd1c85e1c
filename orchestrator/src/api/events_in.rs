//! External events and approvals across runs: `POST /v1/events {name, key?, payload?}` (stores the event and
//! completes the `event.wait` steps it matches) and `GET /v1/approvals?limit=N` (steps waiting for approval,
//! oldest first, with their deadline and `on_timeout`).

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::body::StrictJson;
use super::error::ApiError;
use crate::waits::EventIn;

/// `POST /v1/events`: 202 with `{id, matched: [{run_id, step_id}]}`.
pub(super) async fn deliver(
    State(state): State<AppState>,
    StrictJson(event): StrictJson<EventIn>,
) -> Result<Response, ApiError> {
    cairn_core::text::EVENT_NAME.check(&event.name)?;
    if let Some(key) = &event.key {
        cairn_core::text::EVENT_KEY.check(key)?;
    }
    let delivered = state.engine.deliver_event(&event).await?;
    Ok((StatusCode::ACCEPTED, Json(delivered)).into_response())
}

/// `GET /v1/approvals` query.
#[derive(Debug, Deserialize)]
pub(super) struct ApprovalsQuery {
    limit: Option<i64>,
}

/// `GET /v1/approvals?limit=N` (1–1000, default 100).
pub(super) async fn approvals(
    State(state): State<AppState>,
    Query(q): Query<ApprovalsQuery>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let pending = state.engine.pending_approvals(limit).await?;
    Ok(Json(json!({"approvals": pending})).into_response())
}
