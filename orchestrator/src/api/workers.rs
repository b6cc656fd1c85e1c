//! `GET /v1/workers`: every worker seen in the last 24 hours, with the actions it serves, when it was last seen
//! and how many attempts it holds a lease on now (`{workers: [{worker_id, last_seen_at, connected, actions,
//! in_flight}]}`, most recently seen first).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::error::ApiError;

/// How far back a worker counts as known: the same day as `GET /v1/actions` shows.
const SEEN_WITHIN_MS: i64 = 24 * 3_600_000;

pub(super) async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let engine = &state.engine;
    let now = engine.now_ms();
    // Connected: seen within three poll intervals, as `GET /v1/actions` decides it.
    let window = i64::try_from((engine.config().poll_wait_max() * 3).as_millis()).unwrap_or(i64::MAX);
    let seen = engine.store().action_workers_since(now - SEEN_WITHIN_MS).await?;
    let loads = engine.store().worker_loads().await?;
    let mut workers: BTreeMap<&str, (i64, Vec<&str>)> = BTreeMap::new();
    for w in &seen {
        let entry = workers.entry(&w.worker_id).or_default();
        entry.0 = entry.0.max(w.last_seen_at);
        entry.1.push(&w.action);
    }
    let mut views: Vec<(i64, serde_json::Value)> = workers
        .into_iter()
        .map(|(id, (last_seen_at, mut actions))| {
            actions.sort_unstable();
            let in_flight = loads.iter().find(|l| l.worker_id == id).map_or(0, |l| l.in_flight);
            let view = json!({"worker_id": id, "last_seen_at": last_seen_at, "connected": last_seen_at >= now - window,
                "actions": actions, "in_flight": in_flight});
            (last_seen_at, view)
        })
        .collect();
    views.sort_by_key(|v| std::cmp::Reverse(v.0));
    let workers: Vec<serde_json::Value> = views.into_iter().map(|(_, v)| v).collect();
    Ok(Json(json!({"workers": workers})).into_response())
}
