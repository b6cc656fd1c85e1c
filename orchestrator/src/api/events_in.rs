//! External events and approvals across runs: `POST /v1/events {name, key?, id?, payload?}` (stores the event and
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

/// `POST /v1/events {name, key?, id?, payload?}`: 202 with `{id, duplicate, matched: [{run_id, step_id}]}`. With
/// a dedupe `id`, an event of the same name and id already received is answered `duplicate: true` with the
/// first event's id, and delivered to nothing (case D10).
pub(super) async fn deliver(
    State(state): State<AppState>,
    StrictJson(event): StrictJson<EventIn>,
) -> Result<Response, ApiError> {
    cairn_core::text::EVENT_NAME.check(&event.name)?;
    if let Some(key) = &event.key {
        cairn_core::text::EVENT_KEY.check(key)?;
    }
    // An empty id is refused rather than taken as a key every id-less event would share (case D10 d).
    if let Some(id) = &event.id {
        cairn_core::text::EVENT_ID.check(id)?;
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
