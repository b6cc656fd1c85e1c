//! `cairn serve` (orchestrator only) and `cairn dev` (orchestrator + in-process worker, no auth).

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::bail;
use cairn_orchestrator::api::ApiConfig;
use cairn_orchestrator::secret::DatabaseUrl;
use cairn_orchestrator::server::{Server, ServerConfig};

use crate::embedded;
use crate::settings::Settings;

/// Listen flags shared by `serve` and `dev`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Database: `sqlite:PATH` or `postgres://…` (default `sqlite:cairn.db`; `CAIRN_DB`).
    #[arg(long)]
    db: Option<DatabaseUrl>,
    /// REST API address (default 127.0.0.1:7400; `CAIRN_HTTP`).
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Worker protocol address (default 127.0.0.1:7401; `CAIRN_GRPC`).
    #[arg(long)]
    grpc: Option<SocketAddr>,
    /// `dev` only: serve the weather fixture on 127.0.0.1 and point the worker at it (offline demos).
    #[arg(long)]
    demo: bool,
}

impl Args {
    fn apply(&self, settings: &mut Settings) {
        if let Some(db) = &self.db {
            settings.db.clone_from(db);
        }
        settings.http = self.http.unwrap_or(settings.http);
        settings.grpc = self.grpc.unwrap_or(settings.grpc);
    }
}

/// Server settings from the loaded settings.
pub fn server_config(settings: &Settings, auth: bool) -> ServerConfig {
    ServerConfig {
        db_url: settings.db.clone(),
        db_answer_deadline: std::time::Duration::from_millis(settings.db_answer_deadline_ms),
        http_addr: settings.http,
        grpc_addr: settings.grpc,
        api: ApiConfig {
            token: if auth { settings.api_token.clone() } else { None },
            max_body_bytes: settings.max_body_bytes,
            body_read_timeout: std::time::Duration::from_millis(settings.http_body_read_timeout_ms),
            max_sse_subscribers: settings.max_sse_subscribers,
            planner: super::plan::server_planner(settings),
        },
        http: settings.http_limits(),
        grpc: settings.grpc_limits(),
        worker_token: if auth { settings.worker_token.clone() } else { None },
        engine: settings.engine(),
        shutdown_grace: std::time::Duration::from_millis(settings.shutdown_grace_ms),
    }
}

/// `cairn serve`: refuses to start without tokens (auth is off only in `cairn dev`).
pub async fn serve(args: &Args, mut settings: Settings) -> anyhow::Result<ExitCode> {
    let stop = crate::signal::Stop::install();
    args.apply(&mut settings);
    if settings.api_token.is_none() || settings.worker_token.is_none() {
        bail!("`cairn serve` needs CAIRN_API_TOKEN and CAIRN_WORKER_TOKEN (auth is off only in `cairn dev`)");
    }
    let server = Server::start_steady(server_config(&settings, true)).await?;
    out!("Cairn orchestrator: API http://{}  worker gRPC http://{}", server.http_addr, server.grpc_addr);
    stop.wait().await;
    tracing::info!("stopping: no new work; requests in flight may finish");
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// `cairn dev`: orchestrator on SQLite plus an in-process worker serving the built-in actions.
pub async fn dev(args: &Args, mut settings: Settings) -> anyhow::Result<ExitCode> {
    let stop = crate::signal::Stop::install();
    args.apply(&mut settings);
    let app = embedded::start(&settings, args.demo).await?;
    out!("Cairn dev: API {}  worker gRPC {}  (database {}, worker in-process)", app.url(), app.grpc_url(), settings.db);
    stop.wait().await;
    app.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
