//! `GET /metrics`: Prometheus text exposition (version 0.0.4) of the database's figures and this process's
//! observations ([`crate::metrics`]). Outside `/v1` and without auth, like the health checks: scrapers reach it
//! on the internal network. A database that cannot be read still yields 200 with `cairn_store_up 0`, so the
//! scrape itself says what is wrong.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::metrics::EngineGauges;

/// The Prometheus text format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Ready steps due whose action no connected worker serves, by action (empty when the database cannot be read).
async fn waiting_for_worker(engine: &crate::engine::Engine, now_ms: i64) -> Vec<(String, i64)> {
    let (ready, served) = match (engine.store().steps_ready_by_action(now_ms).await, engine.served_actions().await) {
        (Ok(ready), Ok(served)) => (ready, served),
        _ => return Vec::new(),
    };
    ready.into_iter().filter(|(action, _)| !served.contains(action)).collect()
}

pub(super) async fn scrape(State(state): State<AppState>) -> Response {
    let engine = &state.engine;
    let now_ms = engine.now_ms();
    let stats = match engine.store().stats(now_ms).await {
        Ok(stats) => Some(stats),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: reading the database failed");
            None
        }
    };
    let ttl_ms = i64::try_from(engine.config().lease_ttl.as_millis()).unwrap_or(i64::MAX);
    let gauges = EngineGauges {
        waiting_polls: engine.waiting_polls(),
        other_orchestrators_heard: engine.hears_other_orchestrators(),
        waiting_for_worker: waiting_for_worker(engine, now_ms).await,
    };
    let text = engine.metrics().render(stats.as_ref(), gauges, now_ms, ttl_ms);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}
