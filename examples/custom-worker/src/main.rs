//! A worker of your own, in Rust: one typed action, `crm.export`, served to a Cairn orchestrator.
//!
//! It shows what a real action declares and does: typed args and output (their JSON Schemas come from
//! `schemars`, so the orchestrator checks plans against them), its effect (an idempotent write: it may be
//! repeated with the same idempotency key), its errors as types (retryable with a retry-after, permanent), a
//! heartbeat while it works, and checkpoints, so an attempt after a crash resumes where the last one stopped.
//!
//! ```sh
//! cairn dev &                                          # orchestrator on 127.0.0.1:7400, worker protocol :7401
//! cargo run -p cairn-example-custom-worker             # this worker (CAIRN_WORKER_URL, CAIRN_WORKER_TOKEN)
//! cairn run examples/custom-worker/plan.json --server http://127.0.0.1:7400
//! ```

use std::time::Duration;

use cairn_workers::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// What `crm.export` is asked to do.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExportArgs {
    /// The customer segment to export, e.g. `"vip"`.
    segment: String,
    /// How many pages of customers to export (each takes a moment).
    pages: u32,
}

/// What it reports.
#[derive(Debug, Serialize, JsonSchema)]
struct ExportOutput {
    /// Pages exported in all (across attempts).
    pages: u32,
    /// Where the export went, keyed by the step's idempotency key so a repeat overwrites it.
    location: String,
}

/// Exports a segment page by page to a (pretend) file store.
struct Export;

impl Action for Export {
    type Args = ExportArgs;
    type Output = ExportOutput;
    const NAME: &'static str = "crm.export";
    const DESCRIPTION: &'static str = "Export a customer segment, page by page, to the file store.";
    // Writing the same export again under the same key changes nothing: safe to retry after a crash.
    const EFFECT: Effect = Effect::IdempotentWrite;

    fn example_output(&self) -> Option<ExportOutput> {
        Some(ExportOutput { pages: 3, location: "exports/run-1/export.csv".into() })
    }

    async fn run(&self, args: ExportArgs, ctx: &ActionContext) -> Result<ExportOutput, ActionError> {
        if args.segment.is_empty() {
            // Repeating would fail the same way: permanent, and nothing was done.
            return Err(
                ActionError::permanent(codes::INVALID_ARGS, "`segment` must not be empty").did_not_take_effect()
            );
        }
        if args.segment == "busy" {
            // The store asks to come back later: retried after at least 30 s.
            return Err(ActionError::retryable(codes::RATE_LIMITED, "the file store is busy")
                .retry_after(Duration::from_secs(30)));
        }
        // Resume after the last page an earlier attempt checkpointed.
        let done = ctx.last_checkpoint().and_then(|c| c["pages"].as_u64()).map_or(0, |p| u32::try_from(p).unwrap_or(0));
        for page in done..args.pages {
            tokio::select! {
                () = ctx.cancelled() => {
                    return Err(ActionError::retryable(codes::CANCELLED, format!("stopped at page {page}")));
                }
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            tracing::info!(page = page + 1, segment = %args.segment, "page exported");
            // Saved with a heartbeat: the next attempt starts after this page.
            ctx.checkpoint(json!({"pages": page + 1})).await;
        }
        Ok(ExportOutput { pages: args.pages, location: format!("exports/{}/export.csv", ctx.idempotency_key) })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs to stderr (RUST_LOG filters; info by default here, so the worker says it connected and what it
    // serves), spans to OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set. Held to the end of `main`: dropping it
    // flushes what is buffered.
    let mut telemetry = TelemetryConfig::from_env(false, "crm-export-worker")?;
    if std::env::var_os("RUST_LOG").is_none() {
        telemetry.log_filter = "info".into();
    }
    let _telemetry = init_telemetry(telemetry)?;
    let url = std::env::var("CAIRN_WORKER_URL").unwrap_or_else(|_| "http://127.0.0.1:7401".into());
    let mut config = WorkerConfig::new(url, vec![std::sync::Arc::new(Export)]);
    config.token = std::env::var("CAIRN_WORKER_TOKEN").ok().map(Into::into);
    config.concurrency = 4;
    tracing::info!(server = %config.server, actions = ?["crm.export"], "worker starting");
    // Runs until SIGTERM (Docker, systemd) or ctrl-c; attempts in flight may finish (up to `drain_timeout`) and
    // report before it returns.
    run(config, stopped()).await?;
    Ok(())
}

/// Resolves on ctrl-c or SIGTERM.
async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(term) => term.recv().await,
                None => std::future::pending().await,
            }
        } => {}
    }
    tracing::info!("stopping: draining attempts in flight");
}
