//! `cairn-telemetry`: telemetry for every Cairn process (orchestrator, worker, CLI): logs, spans, and their
//! export over OTLP. A crate of its own so that the orchestrator and the workers share it without either
//! depending on the other.
//!
//! [`init`] installs the global `tracing` subscriber:
//! - a log layer on stderr, human-readable or JSON lines, filtered by `RUST_LOG` (default `warn`);
//! - when an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT`), an OpenTelemetry layer exporting spans
//!   in batches over HTTP/protobuf (default) or gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`), with its own filter
//!   (default `info` for Cairn, `warn` for the HTTP and database libraries, whose spans would be noise — and the
//!   exporter's own requests must never be traced). Without an endpoint nothing is exported and spans cost
//!   what plain `tracing` spans cost.
//!
//! The returned [`TelemetryGuard`] flushes buffered spans when dropped: keep it alive until the process ends.
//! The exporter's other settings (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION`, `OTEL_BSP_*`)
//! are read by the OpenTelemetry crates themselves. Only plain `http://` collectors are supported (no TLS
//! feature is built in); put a TLS-terminating collector next to the process for a remote `https` one.
//!
//! One run is one trace: [`ids`] derives the trace id from the run id and the attempt span ids from the
//! attempt, and [`propagation`] carries them to workers and on to the services actions call (`traceparent`).

mod ids;
mod propagation;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

pub use ids::{attempt_span_id, run_span_id, run_trace_id};
pub use propagation::{
    TRACEPARENT, attempt_traceparent, current_traceparent, set_remote_parent, start_attempt_span, start_run_span,
};

/// Log filter when `RUST_LOG` is unset.
pub const DEFAULT_LOG_FILTER: &str = "warn";

/// Filter of the exported spans unless configured otherwise: Cairn's spans and events at `info` and above; the
/// libraries that trace every request or query (including the exporter's own HTTP and gRPC clients) at `warn`.
pub const DEFAULT_EXPORT_FILTER: &str = "info,h2=warn,hyper=warn,hyper_util=warn,reqwest=warn,tonic=warn,\
     tower=warn,sqlx=warn,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry_otlp=warn";

/// Why telemetry could not start. None is retryable: fix the configuration.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol Cairn does not export with.
    #[error("unsupported OTLP protocol `{0}`: use `http/protobuf` (default) or `grpc`")]
    Protocol(String),
    /// A filter does not parse.
    #[error("invalid trace filter `{filter}`: {message}")]
    Filter {
        /// The filter as given.
        filter: String,
        /// The parser's complaint.
        message: String,
    },
    /// The exporter could not be built (a malformed endpoint, an HTTP client that cannot be built).
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// The gRPC exporter's runtime could not be started.
    #[error("cannot start the OTLP exporter's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A global subscriber is already installed (telemetry initialised twice in one process).
    #[error("telemetry is already initialised: {0}")]
    AlreadyInitialised(String),
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `http/protobuf`: `POST <endpoint>/v1/traces` (collectors listen on 4318).
    #[default]
    HttpProtobuf,
    /// `grpc` (collectors listen on 4317).
    Grpc,
}

/// Where spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// Base URL, `http://HOST:PORT` (`/v1/traces` is appended for HTTP).
    pub endpoint: String,
    /// Transport.
    pub protocol: OtlpProtocol,
}

/// How a process logs and traces.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// JSON lines instead of human-readable logs.
    pub json_logs: bool,
    /// `service.name` of the exported spans (`cairn-orchestrator`, `cairn-worker`, …).
    pub service_name: String,
    /// `RUST_LOG`-style directives for the logs.
    pub log_filter: String,
    /// Directives for the exported spans.
    pub export_filter: String,
    /// OTLP export; `None` exports nothing.
    pub otlp: Option<OtlpConfig>,
}

impl TelemetryConfig {
    /// Logs only (filter [`DEFAULT_LOG_FILTER`]), no export.
    pub fn new(json_logs: bool, service_name: impl Into<String>) -> Self {
        Self {
            json_logs,
            service_name: service_name.into(),
            log_filter: DEFAULT_LOG_FILTER.to_owned(),
            export_filter: DEFAULT_EXPORT_FILTER.to_owned(),
            otlp: None,
        }
    }

    /// From the environment: `RUST_LOG` (logs), `OTEL_EXPORTER_OTLP_ENDPOINT` (export when set and non-empty),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf` by default, or `grpc`).
    ///
    /// # Errors
    /// [`TelemetryError::Protocol`] for another protocol (`http/json` is not built in).
    pub fn from_env(json_logs: bool, service_name: impl Into<String>) -> Result<Self, TelemetryError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut config = Self::new(json_logs, service_name);
        if let Some(filter) = var("RUST_LOG") {
            config.log_filter = filter;
        }
        if let Some(endpoint) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            let protocol = match var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref().map(str::trim) {
                None | Some("http/protobuf") => OtlpProtocol::HttpProtobuf,
                Some("grpc") => OtlpProtocol::Grpc,
                Some(other) => return Err(TelemetryError::Protocol(other.to_owned())),
            };
            config.otlp = Some(OtlpConfig { endpoint, protocol });
        }
        Ok(config)
    }
}

/// Keeps the exporter alive; flushes and stops it when dropped (or on [`TelemetryGuard::shutdown`]).
#[derive(Debug)]
#[must_use = "dropping the guard stops span export"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    /// The gRPC exporter's client lives on this runtime (the SDK exports from its own thread).
    runtime: Option<tokio::runtime::Runtime>,
}

impl TelemetryGuard {
    /// Whether spans are being exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports every finished span now. Blocks until the exporter answers (at most its timeout, 10 s by
    /// default); call from a blocking context (`spawn_blocking`) inside async code.
    pub fn flush(&self) {
        if let Some(provider) = &self.provider
            && let Err(e) = provider.force_flush()
        {
            tracing::warn!(error = %e, "flushing spans failed");
        }
    }

    /// Flushes and stops the exporter (what dropping the guard does).
    pub fn shutdown(self) {}
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: flushing spans at shutdown failed: {e}");
        }
        if let Some(runtime) = self.runtime.take() {
            // Never blocks, so the guard may be dropped inside another runtime.
            runtime.shutdown_background();
        }
    }
}

/// Installs the global subscriber described by `config`.
///
/// # Errors
/// [`TelemetryError::Filter`] for unparseable filters, [`TelemetryError::Exporter`] /
/// [`TelemetryError::Runtime`] when the exporter cannot start, [`TelemetryError::AlreadyInitialised`] when a
/// subscriber is already installed.
pub fn init(config: TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let log_filter = filter(&config.log_filter)?;
    // Colours only for a person at a terminal: a log file or a collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let log = if config.json_logs { log.json().boxed() } else { log.boxed() };
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = vec![log.with_filter(log_filter).boxed()];
    let mut guard = TelemetryGuard { provider: None, runtime: None };
    if let Some(otlp) = &config.otlp {
        let export_filter = filter(&config.export_filter)?;
        let (provider, runtime) = provider(&config.service_name, otlp)?;
        let tracer = provider.tracer("cairn");
        layers.push(tracing_opentelemetry::layer().with_tracer(tracer).with_filter(export_filter).boxed());
        guard = TelemetryGuard { provider: Some(provider), runtime };
    }
    tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .map_err(|e| TelemetryError::AlreadyInitialised(e.to_string()))?;
    if let Some(otlp) = &config.otlp {
        tracing::info!(endpoint = %otlp.endpoint, protocol = ?otlp.protocol, service = %config.service_name,
            "exporting spans over OTLP");
    }
    Ok(guard)
}

fn filter(directives: &str) -> Result<EnvFilter, TelemetryError> {
    EnvFilter::try_new(directives)
        .map_err(|e| TelemetryError::Filter { filter: directives.to_owned(), message: e.to_string() })
}

/// The tracer provider: batch export (from the SDK's own thread), Cairn's id generator, `service.name`.
fn provider(
    service_name: &str,
    otlp: &OtlpConfig,
) -> Result<(SdkTracerProvider, Option<tokio::runtime::Runtime>), TelemetryError> {
    let (exporter, runtime) = match otlp.protocol {
        OtlpProtocol::HttpProtobuf => {
            // reqwest is built without a rustls provider; the exporter's client needs one even for http://.
            // `Err` only means a provider is already installed, which is what we want.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let url = format!("{}/v1/traces", otlp.endpoint.trim_end_matches('/'));
            let exporter =
                SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary).with_endpoint(url).build()?;
            (exporter, None)
        }
        OtlpProtocol::Grpc => {
            // tonic's channel runs on the runtime it is created in, which must outlive every export.
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("cairn-otlp")
                .enable_all()
                .build()
                .map_err(TelemetryError::Runtime)?;
            let exporter = {
                let _entered = runtime.enter();
                SpanExporter::builder().with_tonic().with_endpoint(otlp.endpoint.clone()).build()?
            };
            (exporter, Some(runtime))
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_id_generator(ids::CairnIds::default())
        .with_resource(Resource::builder().with_service_name(service_name.to_owned()).build())
        .build();
    Ok((provider, runtime))
}
