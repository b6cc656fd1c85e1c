//! Recipients: `PUT /v1/recipients/{id}` (create or replace), `GET /v1/recipients/{id}`, `DELETE
//! /v1/recipients/{id}`, `GET /v1/recipients?after=&limit=` (by id); and a run's delivery ledger, `GET
//! /v1/runs/{id}/deliveries`.
//!
//! A recipient is `{"channels": {"telegram": {"chat_id": "42"}, …}, "timezone": "Asia/Shanghai"}`, checked by
//! [`cairn_core::recipient::parse`] before it is stored. Shown with `id`, `created_at` and `updated_at` (epoch
//! ms), and with every `secret` setting (the webhook and Feishu signing secrets) replaced by `"[REDACTED]"`:
//! only workers are handed them.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::recipient::{self, Recipient};
use cairn_store::StoredRecipient;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::StrictJson;
use super::error::ApiError;

/// Default and largest page of `GET /v1/recipients`.
const PAGE_DEFAULT: u32 = 100;
const PAGE_MAX: u32 = 500;

fn invalid(message: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_recipient", message)
}

fn checked_id(id: &str) -> Result<(), ApiError> {
    recipient::check_id(id).map_err(|e| invalid(e.to_string()))
}

/// The recipient as shown, secrets redacted.
fn view(stored: &StoredRecipient) -> Value {
    let mut body: Value = serde_json::from_str(&stored.body).unwrap_or(Value::Null);
    if let Some(channels) = body.get_mut("channels").and_then(Value::as_object_mut) {
        for settings in channels.values_mut() {
            if let Some(secret) = settings.get_mut("secret") {
                *secret = json!("[REDACTED]");
            }
        }
    }
    json!({"id": stored.id, "channels": body.get("channels"), "timezone": body.get("timezone"),
        "created_at": stored.created_at, "updated_at": stored.updated_at})
}

/// `PUT /v1/recipients/{id}`: 201 when created, 200 when replaced; 422 `invalid_recipient` naming what is wrong.
pub(super) async fn put(
    State(state): State<AppState>,
    Path(id): Path<String>,
    StrictJson(body): StrictJson<Value>,
) -> Result<Response, ApiError> {
    checked_id(&id)?;
    let parsed: Recipient = recipient::parse(&body).map_err(|e| invalid(e.to_string()))?;
    let text = serde_json::to_string(&parsed).map_err(|e| invalid(e.to_string()))?;
    let store = state.engine.store();
    let created = store.recipient_put(&id, &text, state.engine.now_ms()).await?;
    let stored = store.recipient_get(&id).await?.ok_or_else(|| ApiError::not_found("recipient"))?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(view(&stored))).into_response())
}

/// `GET /v1/recipients/{id}`.
pub(super) async fn show(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    checked_id(&id)?;
    let stored = state.engine.store().recipient_get(&id).await?.ok_or_else(|| ApiError::not_found("recipient"))?;
    Ok(Json(view(&stored)).into_response())
}

/// `DELETE /v1/recipients/{id}`: 204. The ledger keeps its records of deliveries to it.
pub(super) async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    checked_id(&id)?;
    if !state.engine.store().recipient_delete(&id).await? {
        return Err(ApiError::not_found("recipient"));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Paging of `GET /v1/recipients`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Page {
    after: Option<String>,
    limit: Option<u32>,
}

/// `GET /v1/recipients`: `{recipients, next_after}`; `next_after` is the `after` of the next page, `null` on the
/// last one. A `limit` outside 1 to 500 is refused.
pub(super) async fn list(State(state): State<AppState>, Query(page): Query<Page>) -> Result<Response, ApiError> {
    let limit = page.limit.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&limit) {
        return Err(ApiError::bad_request(format!("`limit` must be 1 to {PAGE_MAX}, not {limit}")));
    }
    if let Some(after) = &page.after {
        checked_id(after)?;
    }
    let rows = state.engine.store().recipients_page(page.after.as_deref(), limit + 1).await?;
    let more = rows.len() > limit as usize;
    let shown: Vec<Value> = rows.iter().take(limit as usize).map(view).collect();
    let next_after = more.then(|| rows[limit as usize - 1].id.clone());
    Ok(Json(json!({"recipients": shown, "next_after": next_after})).into_response())
}

/// `GET /v1/runs/{id}/deliveries`: the run's delivery ledger, one record per (step, recipient, channel).
pub(super) async fn of_run(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let store = state.engine.store();
    if store.run(&id).await?.is_none() {
        return Err(ApiError::not_found("run"));
    }
    let deliveries = store.run_deliveries(&id).await?;
    Ok(Json(json!({"deliveries": deliveries})).into_response())
}
