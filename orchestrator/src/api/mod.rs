//! The REST API (axum, JSON, versioned under `/v1`; OpenAPI at `/openapi.json`).
//!
//! Routes: `GET /healthz`, `GET /readyz`, `GET /metrics` (Prometheus; no auth), `POST /v1/plans:validate`,
//! `POST /v1/plans:draft`, `POST /v1/runs`, `GET /v1/runs`, `GET /v1/runs/{id}`, `GET /v1/runs/{id}/events` (JSON,
//! or `text/event-stream` for live updates),
//! `POST /v1/runs/{id}:cancel|:redrive|:rerun|:pause|:resume`, `POST /v1/runs/{id}/steps/{step}:approve|:reject|:retry|:skip|:fail`,
//! `GET /v1/actions`; recipients, `PUT|GET|DELETE /v1/recipients/{id}`, `GET /v1/recipients`, and a run's
//! delivery ledger, `GET /v1/runs/{id}/deliveries` ([`recipients`]); durable waiting: `/v1/schedules` (CRUD, `:pause`, `:resume`, `/{id}/next`), `POST /v1/events`,
//! `GET /v1/approvals`. The `:verb` suffixes are parsed in the handlers because the router does not match
//! suffixes after a path parameter.
//!
//! Bearer-token auth when a token is configured (always outside `cairn dev`; a failed login is logged with the
//! client's address and the route, never the token, and counted in `cairn_auth_failures_total{api="rest"}`);
//! bodies over the configured size are refused with 413 and bodies slower than the body read timeout with 408
//! ([`deadline`]); live event streams beyond `max_sse_subscribers` get 503; every error is JSON
//! `{code, message, details}` ([`error::ApiError`]). Connection-level limits (request heads, connections) are
//! the server's: [`crate::http_server`].
//!
//! The dashboard (issue 34): `/ui` ([`crate::ui`]) is merged into this router; `/v1` also accepts its session
//! cookie, with the CSRF token in `X-CSRF-Token` on state changes ([`crate::ui::session`]). `GET /v1/runs` with
//! `Accept: text/event-stream` is the run list, live ([`runs_live`]); `GET /v1/runs/{id}/plan` is a run's plan
//! ([`run_plan`]); `GET /v1/workers` lists workers with their attempts in flight ([`workers`]).

mod body;
mod bulk;
mod deadline;
pub mod error;
mod events;
mod events_in;
mod metrics;
mod openapi;
mod openapi_schemas;
mod plans;
mod recipients;
mod run_plan;
mod run_query;
mod runs;
mod runs_live;
mod schedules;
mod trace;
mod workers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::Semaphore;

use crate::auth::Api;
use crate::engine::Engine;
use crate::planner::Planner;
use crate::secret::{ExposeSecret, SecretString};
use crate::ui::session as ui_session;
use error::ApiError;

/// API settings.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Bearer token required on `/v1` routes; `None` disables auth (only `cairn dev`). `Debug` prints
    /// `[REDACTED]`.
    pub token: Option<SecretString>,
    /// Largest accepted request body, in bytes (default 8 MiB).
    pub max_body_bytes: usize,
    /// Longest a request body may take to arrive, counted from the end of its head; past it the request is
    /// answered 408 `body_timeout` and its connection closed (default 30 s).
    pub body_read_timeout: Duration,
    /// Most live event streams (`GET /v1/runs/{id}/events` as `text/event-stream`) open at once; the next one
    /// is answered 503 `too_many_subscribers` until one closes (default 256).
    pub max_sse_subscribers: usize,
    /// The planner behind `POST /v1/plans:draft`; `None` answers 503 `planner_unconfigured`.
    pub planner: Option<Arc<Planner>>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            token: None,
            max_body_bytes: 8 * 1024 * 1024,
            body_read_timeout: Duration::from_secs(30),
            max_sse_subscribers: 256,
            planner: None,
        }
    }
}

/// Shared handler state.
#[derive(Clone)]
pub struct AppState {
    /// The engine.
    pub engine: Engine,
    token: Option<SecretString>,
    planner: Option<Arc<Planner>>,
    /// One permit per live event stream that may be open ([`ApiConfig::max_sse_subscribers`]).
    subscribers: Arc<Semaphore>,
}

/// The router with every route, auth, the body limit and the body read timeout.
pub fn router(engine: Engine, config: ApiConfig) -> Router {
    let subscribers = Arc::new(Semaphore::new(config.max_sse_subscribers));
    let state = AppState { engine, token: config.token, planner: config.planner, subscribers };
    let v1 = Router::new()
        .route("/v1/plans:validate", post(runs::validate))
        .route("/v1/plans:draft", post(plans::draft))
        .route("/v1/runs", post(runs::submit).get(runs_live::list))
        .route("/v1/runs:cancel", post(bulk::cancel))
        .route("/v1/runs:redrive", post(bulk::redrive))
        .route("/v1/runs:retry-failed", post(bulk::retry_failed))
        .route("/v1/runs/{id}", get(runs::show).post(runs::run_action))
        .route("/v1/runs/{id}/events", get(events::events))
        .route("/v1/runs/{id}/plan", get(run_plan::show))
        .route("/v1/runs/{id}/deliveries", get(recipients::of_run))
        .route("/v1/recipients", get(recipients::list))
        .route("/v1/recipients/{id}", get(recipients::show).put(recipients::put).delete(recipients::delete))
        .route("/v1/runs/{id}/steps/{step}", post(runs::step_action))
        .route("/v1/actions", get(runs::actions))
        .route("/v1/workers", get(workers::list))
        .route("/v1/schedules", post(schedules::create).get(schedules::list))
        .route(
            "/v1/schedules/{id}",
            get(schedules::show).patch(schedules::update).delete(schedules::delete).post(schedules::action),
        )
        .route("/v1/schedules/{id}/next", get(schedules::next))
        .route("/v1/events", post(events_in::deliver))
        .route("/v1/approvals", get(events_in::approvals))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::scrape))
        .route("/openapi.json", get(openapi::document))
        // Opening the port in a browser is what a newcomer does first.
        .route("/", get(|| async { axum::response::Redirect::to("/ui") }))
        .merge(v1)
        .merge(crate::ui::router(state.engine.clone(), state.token.clone()))
        .fallback(|| async { ApiError::not_found("route") })
        .layer(middleware::from_fn(refuse_nul_in_path))
        .layer(middleware::map_response(error::json_errors))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(middleware::from_fn_with_state(config.body_read_timeout, deadline::body_deadline))
        .layer(middleware::from_fn(trace::request_span))
        .with_state(state)
}

/// A path holding U+0000 (`%00`) names nothing Cairn can store: 400 before any handler (and any database) sees
/// it, identically on both backends (PostgreSQL refuses NUL in text).
async fn refuse_nul_in_path(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path.as_bytes().windows(3).any(|w| w[0] == b'%' && w[1] == b'0' && w[2] == b'0') {
        return ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", "the path contains U+0000 (NUL)")
            .into_response();
    }
    next.run(request).await
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.engine.store().next_due().await {
        Ok(_) => "ready".into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}

/// `/v1` auth when a token is configured: the bearer token (scripts, the CLI), or the dashboard's session
/// cookie, with its CSRF token in `X-CSRF-Token` on anything but a read ([`crate::ui::session`]). A valid
/// session without the CSRF token is 403 `csrf_failed`, not counted as a failed login (it is the browser's
/// page, not a guess at the token).
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let token = token.expose_secret();
        let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let bearer = given
            .and_then(|g| g.strip_prefix("Bearer "))
            .is_some_and(|g| ui_session::same(g.as_bytes(), token.as_bytes()));
        if !bearer {
            let now = state.engine.now_ms();
            match ui_session::check(token, request.method(), request.headers(), now) {
                ui_session::SessionCheck::Valid => {}
                ui_session::SessionCheck::CsrfFailed => {
                    return ApiError::new(
                        StatusCode::FORBIDDEN,
                        "csrf_failed",
                        "a dashboard session changes state only with its CSRF token in X-CSRF-Token",
                    )
                    .into_response();
                }
                ui_session::SessionCheck::Absent => {
                    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
                    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str);
                    let route = format!("{} {route}", request.method());
                    let failures = state.engine.metrics().auth_failures(Api::Rest);
                    crate::auth::login_failed(Api::Rest, &failures, peer, &route);
                    return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "missing or wrong bearer token")
                        .into_response();
                }
            }
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_token_never_appears_in_debug_output() {
        let config = ApiConfig { token: Some("api-token-7c1e9b".into()), ..ApiConfig::default() };

        let printed = format!("{config:?}");

        assert!(!printed.contains("api-token-7c1e9b"), "the token is redacted: {printed}");
        assert!(printed.contains("max_body_bytes"), "the other settings show: {printed}");
    }
}
