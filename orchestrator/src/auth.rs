//! Failed logins: the one place that decides what is recorded when a request on either API (the REST bearer
//! token in `api::require_token`, the worker token in `grpc::TokenCheck`) carries no token or a wrong one. The
//! check itself stays with each API; what a failure leaves behind (a counter, a log line with the client's
//! address and the route, never what the client sent) is decided here once.

use std::net::SocketAddr;

use prometheus::IntCounter;

/// The API a client failed to log in to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The REST API's bearer token (`CAIRN_API_TOKEN`).
    Rest,
    /// The worker protocol's token (`CAIRN_WORKER_TOKEN`).
    Grpc,
}

impl Api {
    /// The `api` label: `rest` or `grpc`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Rest => "rest",
            Api::Grpc => "grpc",
        }
    }
}

/// A request on `api` carried no token or a wrong one: counts it on `failures` (the API's
/// `cairn_auth_failures_total` counter, [`crate::metrics::Metrics::auth_failures`]) and logs a warning with the
/// client's address (`peer`, `unknown` when the transport has none) and the `route` (the REST method and route
/// template, or the gRPC method), never what the client sent. The log target is this module's,
/// `cairn_orchestrator::auth`, so `RUST_LOG` can quiet a flood of them without hiding anything else.
pub fn login_failed(api: Api, failures: &IntCounter, peer: Option<SocketAddr>, route: &str) {
    failures.inc();
    let peer = peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string());
    tracing::warn!(api = api.as_str(), %peer, route, "authentication failed: missing or wrong token");
}
