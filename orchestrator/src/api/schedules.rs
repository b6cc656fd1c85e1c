//! Cron schedules: `POST /v1/schedules`, `GET /v1/schedules`, `GET|PATCH|DELETE /v1/schedules/{id}`,
//! `POST /v1/schedules/{id}:pause|:resume|:trigger`, `GET /v1/schedules/{id}/next?count=N`.
//!
//! A schedule is shown as the stored record plus `next_fire_at` (RFC 3339 UTC) and `next_fire_local` (in the
//! schedule's zone), and, on `GET /v1/schedules/{id}`, its most recent ticks.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::schedule::CronSchedule;
use cairn_store::{ScheduleRecord, ScheduleTick};
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::body::StrictJson;
use super::error::ApiError;
use crate::scheduler::{ScheduleOpError, SchedulePatch, ScheduleSpec, TriggerOutcome};

/// Most ticks shown with a schedule.
const TICKS_SHOWN: i64 = 20;

impl From<ScheduleOpError> for ApiError {
    fn from(e: ScheduleOpError) -> Self {
        match e {
            ScheduleOpError::Invalid(e) => {
                let code = if matches!(e, cairn_core::schedule::ScheduleError::NeverFires { .. }) {
                    "never_fires"
                } else {
                    "invalid_schedule"
                };
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, e.to_string())
            }
            ScheduleOpError::InvalidPlan(diagnostics) => {
                let errors = diagnostics.iter().filter(|d| d.is_error()).count();
                let mut err = ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_plan",
                    format!("the schedule's plan is invalid: {errors} error(s)"),
                );
                err.details = json!({"diagnostics": diagnostics});
                err
            }
            ScheduleOpError::Exists(id) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", format!("schedule `{id}` already exists"))
            }
            ScheduleOpError::NotFound => ApiError::not_found("schedule"),
            ScheduleOpError::Store(e) => e.into(),
        }
    }
}

fn rfc3339(ms: Option<i64>) -> Option<String> {
    ms.and_then(|ms| Timestamp::from_millisecond(ms).ok()).map(|t| t.to_string())
}

/// The schedule as shown.
fn view(s: &ScheduleRecord, ticks: Option<&[ScheduleTick]>) -> Value {
    let local = CronSchedule::parse(&s.cron, &s.timezone)
        .ok()
        .and_then(|cron| s.next_fire_at_ms.and_then(|ms| Timestamp::from_millisecond(ms).ok()).map(|t| cron.local(t)));
    let mut v = json!(s);
    v["next_fire_at"] = json!(rfc3339(s.next_fire_at_ms));
    v["next_fire_local"] = json!(local);
    if let Some(ticks) = ticks {
        let ticks: Vec<Value> = ticks
            .iter()
            .map(|t| {
                let mut v = json!(t);
                v["fire_at"] = json!(rfc3339(Some(t.fire_at_ms)));
                v
            })
            .collect();
        v["ticks"] = json!(ticks);
    }
    v
}

/// `POST /v1/schedules`: 201 with the schedule; 422 `invalid_schedule`, `never_fires` or `invalid_plan`; 409 when
/// the id is taken.
pub(super) async fn create(
    State(state): State<AppState>,
    StrictJson(spec): StrictJson<ScheduleSpec>,
) -> Result<Response, ApiError> {
    let s = state.engine.create_schedule(&spec).await?;
    Ok((StatusCode::CREATED, Json(view(&s, None))).into_response())
}

/// `GET /v1/schedules`.
pub(super) async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let all = state.engine.store().schedules().await?;
    let views: Vec<Value> = all.iter().map(|s| view(s, None)).collect();
    Ok(Json(json!({"schedules": views})).into_response())
}

/// `GET /v1/schedules/{id}`: the schedule with its most recent ticks.
pub(super) async fn show(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let s = state.engine.store().schedule(&id).await?.ok_or_else(|| ApiError::not_found("schedule"))?;
    let ticks = state.engine.store().schedule_ticks(&id, TICKS_SHOWN).await?;
    Ok(Json(view(&s, Some(&ticks))).into_response())
}

/// `PATCH /v1/schedules/{id}`: change fields; the next tick is recomputed from now.
pub(super) async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    StrictJson(patch): StrictJson<SchedulePatch>,
) -> Result<Response, ApiError> {
    let s = state.engine.update_schedule(&id, &patch).await?;
    Ok(Json(view(&s, None)).into_response())
}

/// `DELETE /v1/schedules/{id}`: 204; its runs stay.
pub(super) async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    if !state.engine.delete_schedule(&id).await? {
        return Err(ApiError::not_found("schedule"));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/schedules/{id}:pause|:resume|:trigger`.
pub(super) async fn action(State(state): State<AppState>, Path(id_verb): Path<String>) -> Result<Response, ApiError> {
    let Some((id, verb)) = id_verb.rsplit_once(':') else {
        return Err(ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "use GET, PATCH or DELETE"));
    };
    let s = match verb {
        "trigger" => return trigger(&state, id).await,
        "pause" => state.engine.pause_schedule(id).await?,
        "resume" => state.engine.resume_schedule(id).await?,
        _ => return Err(ApiError::not_found("route")),
    };
    Ok(Json(view(&s, None)).into_response())
}

/// `POST /v1/schedules/{id}:trigger` ("run now"): 201 `{run_id, cancelled}` with the run started, or 409
/// `overlap_skipped` when the overlap policy is `skip` and a run of the schedule is still open.
async fn trigger(state: &AppState, id: &str) -> Result<Response, ApiError> {
    match state.engine.trigger_schedule(id).await? {
        TriggerOutcome::Started { run_id, cancelled } => {
            Ok((StatusCode::CREATED, Json(json!({"run_id": run_id, "cancelled": cancelled}))).into_response())
        }
        TriggerOutcome::Skipped => Err(ApiError::new(
            StatusCode::CONFLICT,
            "overlap_skipped",
            format!("schedule `{id}` has a run still open and its overlap policy is skip; a skipped tick is recorded"),
        )),
    }
}

/// `GET /v1/schedules/{id}/next` query.
#[derive(Debug, Deserialize)]
pub(super) struct NextQuery {
    count: Option<usize>,
}

/// `GET /v1/schedules/{id}/next?count=N` (1–1000, default 5): the coming fire times, UTC and local.
pub(super) async fn next(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<NextQuery>,
) -> Result<Response, ApiError> {
    let count = q.count.unwrap_or(5).clamp(1, 1000);
    let s = state.engine.store().schedule(&id).await?.ok_or_else(|| ApiError::not_found("schedule"))?;
    let times = state.engine.schedule_upcoming(&id, count).await?;
    let cron = CronSchedule::parse(&s.cron, &s.timezone).map_err(|e| ApiError::from(ScheduleOpError::from(e)))?;
    let fires: Vec<Value> = times
        .iter()
        .map(|t| json!({"at": t.to_string(), "at_ms": t.as_millisecond(), "local": cron.local(*t)}))
        .collect();
    Ok(Json(json!({"id": s.id, "cron": s.cron, "timezone": s.timezone, "paused": s.paused, "next": fires}))
        .into_response())
}
