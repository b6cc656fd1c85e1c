//! A span per API request: method, route template (never the raw path, whose ids would make every span name
//! unique) and status. Health checks and metric scrapes get `debug` spans so a scraper does not flood traces.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing::field::Empty;

/// Routes polled by infrastructure.
const QUIET_ROUTES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

pub(super) async fn request_span(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_owned();
    let method = request.method().clone();
    let span = if QUIET_ROUTES.contains(&route.as_str()) {
        tracing::debug_span!("http.request", otel.kind = "server", http.request.method = %method,
            http.route = %route, http.response.status_code = Empty)
    } else {
        tracing::info_span!("http.request", otel.name = %format!("{method} {route}"), otel.kind = "server",
            http.request.method = %method, http.route = %route, http.response.status_code = Empty,
            otel.status_code = Empty)
    };
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}
