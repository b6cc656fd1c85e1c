//! Starting an orchestrator process: engine, reaper, REST API and worker gRPC service on their listeners.
//!
//! `Application`-style (zero2prod): [`Server::start`] binds the listeners (port 0 picks a free port, which the
//! tests use) and spawns everything; [`Server::shutdown`] stops it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use cairn_core::catalog::StaticCatalog;
use cairn_core::clock::Clock;
use cairn_store::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiConfig};
use crate::clock::{ReferenceClock, SteadyClock, SystemClock};
use crate::config::EngineConfig;
use crate::engine::Engine;
use crate::grpc::{CallPath, GrpcLimits, WorkerGrpc};
use crate::http_server::{self, HttpLimits};
use crate::secret::{DatabaseUrl, ExposeSecret, SecretString};

/// Everything an orchestrator process needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `sqlite:PATH` or `postgres://…`; `Debug` masks its password.
    pub db_url: DatabaseUrl,
    /// PostgreSQL's answer deadline ([`Store::connect_with`]); default [`cairn_store::DEFAULT_ANSWER_DEADLINE`].
    pub db_answer_deadline: std::time::Duration,
    /// REST API listen address.
    pub http_addr: SocketAddr,
    /// Worker protocol (gRPC) listen address.
    pub grpc_addr: SocketAddr,
    /// REST API settings (token, body limit and read timeout, live stream cap).
    pub api: ApiConfig,
    /// The REST API's connection limits (request head timeout, connection cap).
    pub http: HttpLimits,
    /// The worker protocol's limits (message size, streams per connection, connection cap).
    pub grpc: GrpcLimits,
    /// Token workers must present; `None` only in `cairn dev`. `Debug` prints `[REDACTED]`.
    pub worker_token: Option<SecretString>,
    /// Engine settings.
    pub engine: EngineConfig,
    /// How long [`Server::shutdown`] lets requests in flight (reports, submissions) finish. Default 10 s.
    pub shutdown_grace: std::time::Duration,
}

/// A running orchestrator.
#[derive(Debug)]
pub struct Server {
    /// The engine.
    pub engine: Engine,
    /// Where the REST API listens.
    pub http_addr: SocketAddr,
    /// Where the worker protocol listens.
    pub grpc_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
    /// Tasks with nothing to finish (the database clock's sampler): aborted at shutdown, never waited for.
    helpers: Vec<JoinHandle<()>>,
    /// Cancelled by [`Server::shutdown`]: the listeners stop accepting, the background loops stop between passes.
    stop: CancellationToken,
    shutdown_grace: std::time::Duration,
}

impl Server {
    /// Connects to the database (applying migrations), starts the engine and serves.
    ///
    /// # Errors
    /// Database unreachable or migrations failing; a listen address in use.
    pub async fn start(config: ServerConfig, clock: Arc<dyn Clock>) -> anyhow::Result<Server> {
        let store = Self::connect(&config).await?;
        Self::start_on(store, config, clock, Vec::new()).await
    }

    /// As [`Server::start`], on the orchestrator's own clock: a [`SteadyClock`] whose reference is the database's
    /// clock on PostgreSQL (sampled every [`CLOCK_SAMPLE_EVERY`] by a background task) and the host's on SQLite,
    /// so a step of this host's clock never expires a lease or ends an attempt before it began.
    ///
    /// # Errors
    /// As [`Server::start`].
    pub async fn start_steady(config: ServerConfig) -> anyhow::Result<Server> {
        let store = Self::connect(&config).await?;
        let reference: Arc<dyn Clock> = match store.database_now_ms().await.context("reading the database's clock")? {
            Some(_) => {
                let reference = Arc::new(ReferenceClock::default());
                sample_database_clock(&store, &reference).await;
                let sampler = tokio::spawn(keep_sampling(store.clone(), reference.clone()));
                return Self::start_on(store, config, Arc::new(SteadyClock::new(reference)), vec![sampler]).await;
            }
            None => Arc::new(SystemClock),
        };
        Self::start_on(store, config, Arc::new(SteadyClock::new(reference)), Vec::new()).await
    }

    async fn connect(config: &ServerConfig) -> anyhow::Result<Store> {
        Store::connect_with(config.db_url.expose_secret(), config.db_answer_deadline)
            .await
            .with_context(|| format!("opening {}", config.db_url))
    }

    async fn start_on(
        store: Store,
        config: ServerConfig,
        clock: Arc<dyn Clock>,
        helpers: Vec<JoinHandle<()>>,
    ) -> anyhow::Result<Server> {
        let engine = Engine::start(store, clock, Arc::new(StaticCatalog::builtin()), config.engine.clone())
            .await
            .context("starting the engine")?;
        let http =
            TcpListener::bind(config.http_addr).await.with_context(|| format!("binding {}", config.http_addr))?;
        let grpc =
            TcpListener::bind(config.grpc_addr).await.with_context(|| format!("binding {}", config.grpc_addr))?;
        let (http_addr, grpc_addr) = (http.local_addr()?, grpc.local_addr()?);
        let router = api::router(engine.clone(), config.api.clone());
        let stop = CancellationToken::new();
        let http_stop = stop.clone();
        let http_task = tokio::spawn(http_server::serve(http, router, config.http, http_stop));
        let service =
            WorkerGrpc::service_with_limit(engine.clone(), config.worker_token.clone(), config.grpc.max_message_bytes);
        let grpc_stop = stop.clone();
        let grpc_limits = config.grpc;
        let grpc_task = tokio::spawn(async move {
            // Without TCP_NODELAY small HTTP/2 frames (a report, a poll answer) wait for the peer's delayed ACK:
            // about 40 ms per exchange, which dominated every step's overhead.
            let incoming = tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true));
            let served = tonic::transport::Server::builder()
                .trace_fn(grpc_span)
                .max_concurrent_streams(grpc_limits.max_concurrent_streams)
                .layer(tower::util::MapRequestLayer::new(with_call_path::<tonic::body::Body>))
                .add_service(service)
                .serve_with_incoming_shutdown(
                    crate::grpc::capped(incoming, grpc_limits.max_connections),
                    grpc_stop.cancelled_owned(),
                );
            if let Err(e) = served.await {
                tracing::error!(error = %e, "gRPC server stopped");
            }
        });
        let reaper = crate::reaper::spawn(engine.clone(), stop.clone());
        let waiting = crate::scheduler::spawn(engine.clone(), stop.clone());
        tracing::info!(%http_addr, %grpc_addr, backend = engine.store().backend(), "orchestrator started");
        let tasks = vec![http_task, grpc_task, reaper, waiting];
        Ok(Server { engine, http_addr, grpc_addr, tasks, helpers, stop, shutdown_grace: config.shutdown_grace })
    }

    /// Stops gracefully (SIGTERM, ctrl-c): the listeners stop accepting connections, long polls answer and live
    /// event streams end at once, the reaper and the waiting loop stop after their current pass, and requests in
    /// flight (reports, heartbeats, submissions, operator actions) are served to the end, for up to the shutdown
    /// grace. Whatever is still running then is dropped: every change acknowledged to a client is committed
    /// already, and an unanswered one is resent by its client (workers resend reports) to another orchestrator
    /// or to this one restarted.
    ///
    /// Returns whether everything finished within the grace.
    pub async fn shutdown(mut self) -> bool {
        self.stop.cancel();
        self.engine.stop_waiting();
        for helper in &self.helpers {
            helper.abort();
        }
        let all = futures::future::join_all(self.tasks.iter_mut());
        let finished = tokio::time::timeout(self.shutdown_grace, all).await.is_ok();
        if !finished {
            tracing::warn!(grace_ms = self.shutdown_grace.as_millis(), "shutdown grace over; dropping what is left");
        }
        for task in &self.tasks {
            task.abort();
        }
        tracing::info!(finished, "orchestrator stopped");
        finished
    }

    /// Stops at once (tests, and a second signal): in-flight requests are dropped; every change acknowledged to a
    /// client is already committed.
    pub fn abort(self) {
        self.stop.cancel();
        self.engine.stop_waiting();
        for task in self.tasks.into_iter().chain(self.helpers) {
            task.abort();
        }
    }
}

/// How often an orchestrator on PostgreSQL samples the database's clock.
pub const CLOCK_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Samples the database's clock into `reference` (a failed sample keeps the last one; the clock then runs on).
async fn sample_database_clock(store: &Store, reference: &ReferenceClock) {
    let asked = std::time::Instant::now();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(2), store.database_now_ms()).await;
    match answer {
        Ok(Ok(Some(ms))) => reference.sample(ms, asked.elapsed()),
        Ok(Ok(None)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not sample the database's clock"),
        Err(_) => tracing::debug!("the database's clock did not answer"),
    }
}

async fn keep_sampling(store: Store, reference: Arc<ReferenceClock>) {
    let mut tick = tokio::time::interval(CLOCK_SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sample_database_clock(&store, &reference).await;
    }
}

/// A span per worker protocol call, named by its method. Polls are `debug`: every idle worker makes one each
/// long-poll period, which would bury the calls that matter (reports, heartbeats) in exported traces.
fn grpc_span(request: &axum::http::Request<()>) -> tracing::Span {
    let method = request.uri().path().rsplit('/').next().unwrap_or_default().to_owned();
    if method == "Poll" {
        tracing::debug_span!("grpc.request", otel.kind = "server", rpc.system = "grpc", rpc.method = %method)
    } else {
        tracing::info_span!("grpc.request", otel.name = %format!("cairn.v1.WorkerService/{method}"),
            otel.kind = "server", rpc.system = "grpc", rpc.method = %method)
    }
}

/// Puts the call's path in its extensions, for the token check to name the method of a failed login.
fn with_call_path<B>(mut request: axum::http::Request<B>) -> axum::http::Request<B> {
    if let Some(path) = request.uri().path_and_query().cloned() {
        request.extensions_mut().insert(CallPath(path));
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neither_the_database_password_nor_a_token_appears_in_debug_output() {
        let config = ServerConfig {
            db_url: "postgres://cairn:db-pw-31f4@db.internal:5432/cairn".into(),
            db_answer_deadline: cairn_store::DEFAULT_ANSWER_DEADLINE,
            http_addr: SocketAddr::from(([127, 0, 0, 1], 7400)),
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 7401)),
            api: ApiConfig { token: Some("api-token-5d2a".into()), ..ApiConfig::default() },
            http: HttpLimits::default(),
            grpc: GrpcLimits::default(),
            worker_token: Some("worker-token-8e0b".into()),
            engine: EngineConfig::default(),
            shutdown_grace: std::time::Duration::from_secs(10),
        };

        let printed = format!("{config:?}");

        for secret in ["db-pw-31f4", "api-token-5d2a", "worker-token-8e0b"] {
            assert!(!printed.contains(secret), "`{secret}` is printed: {printed}");
        }
        assert!(printed.contains("postgres://cairn:***@db.internal:5432/cairn"), "which database shows: {printed}");
    }
}
