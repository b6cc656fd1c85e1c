//! Issue 6, first acceptance point: one run is one trace across processes. An orchestrator in this process and a
//! separate `cairn worker` process both export spans over OTLP/HTTP to a local collector (an axum server decoding
//! `ExportTraceServiceRequest`s); the plan's one step calls a local service that fails once (500) and then
//! succeeds, so the step has two attempts.
//!
//! The worker is started with a one-minute export delay and stopped with SIGTERM, so its spans can only arrive
//! through the flush on shutdown. Build the binary first: `cargo build -p cairn-cli`.
//!
//! A binary of its own, not a module of `e2e`: it installs this process's global tracing subscriber, which would
//! then see (and export) the spans of every other test's in-process orchestrator.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use cairn_core::clock::ManualClock;
use cairn_telemetry::{self as telemetry, OtlpConfig, OtlpProtocol, TelemetryConfig};
use cairn_tests::Backend;
use cairn_tests::http::{ALLOW_LOOPBACK, HttpApp, Stub, TempDir, cairn_bin, step, within};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message;
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";
/// Generous: the worker is a separate process on a busy machine.
const LIMIT: Duration = Duration::from_secs(60);

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct ExportedSpan {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: HashMap<String, String>,
}

impl ExportedSpan {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A local OTLP/HTTP collector: `POST /v1/traces` with a protobuf body.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<ExportedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

async fn receive(State(spans): State<Arc<Mutex<Vec<ExportedSpan>>>>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else { return StatusCode::BAD_REQUEST };
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            received.push(ExportedSpan {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                attributes: span.attributes.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect(),
            });
        }
    }
    spans.lock().unwrap().extend(received);
    StatusCode::OK
}

impl Collector {
    async fn start() -> Collector {
        let spans: Arc<Mutex<Vec<ExportedSpan>>> = Arc::default();
        let app = axum::Router::new().route("/v1/traces", axum::routing::post(receive)).with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Collector { url, spans, task }
    }

    fn spans(&self) -> Vec<ExportedSpan> {
        self.spans.lock().unwrap().clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `cairn worker` exporting to `collector`, stopped with SIGTERM (killed if it outlives the test).
struct WorkerProcess {
    child: Child,
    log: PathBuf,
}

impl WorkerProcess {
    fn spawn(grpc_url: &str, dir: &Path, collector: &str) -> WorkerProcess {
        let log = dir.join("worker.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(cairn_bin());
        command.args(["worker", "--server", grpc_url]).current_dir(dir);
        for (name, _) in std::env::vars_os() {
            let name_text = name.to_string_lossy();
            if name_text.starts_with("CAIRN_") || name_text.starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        let child = command
            .env("RUST_LOG", "info")
            .env("TMPDIR", dir)
            // The called stub is on 127.0.0.1.
            .env(ALLOW_LOOPBACK.0, ALLOW_LOOPBACK.1)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
            // Nothing is exported before shutdown: the spans must come from the flush on SIGTERM.
            .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", cairn_bin().display()));
        WorkerProcess { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits (bounded) for a clean exit.
    async fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "SIGTERM was delivered to the worker");
        let child = &mut self.child;
        let status =
            within(LIMIT, "the worker exits after SIGTERM", || std::future::ready(child.try_wait().unwrap())).await;
        assert!(status.success(), "the worker exits cleanly on SIGTERM ({status}):\n{}", self.log());
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn plan(service: &str) -> Value {
    json!({
        "goal": "Call a flaky service until it answers",
        "steps": [{"id": "call", "action": "http.request", "idempotent": true, "timeout_ms": 10000,
            "args": {"method": "GET", "url": format!("{service}/flaky")},
            "retry": {"max_attempts": 3, "initial_interval_ms": 1000, "backoff_coefficient": 2.0,
                "max_interval_ms": 30000, "jitter": "none"}}]
    })
}

/// The one span of `service` for attempt `attempt` of step `call`.
fn attempt_span<'a>(spans: &'a [ExportedSpan], service: &str, attempt: u32) -> &'a ExportedSpan {
    let matching: Vec<&ExportedSpan> = spans
        .iter()
        .filter(|s| s.service == service && s.attr("cairn.step_id") == Some("call"))
        .filter(|s| s.attr("cairn.attempt") == Some(attempt.to_string().as_str()))
        .collect();
    assert_eq!(matching.len(), 1, "{service} exports exactly one span for attempt {attempt}: {matching:#?}");
    matching[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_one_trace_from_the_orchestrator_through_the_worker_to_the_called_service() {
    // Arrange: a collector, this process's telemetry exporting to it, a service failing once, an orchestrator
    // and a worker process.
    let collector = Collector::start().await;
    let otlp = OtlpConfig { endpoint: collector.url.clone(), protocol: OtlpProtocol::HttpProtobuf };
    let config = TelemetryConfig { otlp: Some(otlp), ..TelemetryConfig::new(false, "cairn-orchestrator") };
    let telemetry = telemetry::init(config).expect("telemetry starts");
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let flaky = Stub::start(move |_| match counter.fetch_add(1, Ordering::SeqCst) {
        0 => (500, json!({"error": "try again"})),
        _ => (200, json!({"ok": true})),
    })
    .await;
    let app = HttpApp::start(Backend::Sqlite, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let dir = TempDir::new();
    let mut worker = WorkerProcess::spawn(&app.grpc_url, dir.path(), &collector.url);

    // Act: run the plan, letting the retry's backoff pass on the orchestrator's clock.
    let run_id = app.submit(plan(&flaky.url())).await;
    app.wait_run(&run_id, "the first attempt failed and a retry is scheduled", LIMIT, |run| {
        let call = step(run, "call");
        call["status"] == "ready" && call["attempts"] == 1
    })
    .await;
    app.set_time_ms(app.now_ms() + 60_000);
    let run = app.wait_run(&run_id, "the run finished", LIMIT, |run| run["status"] != "running").await;
    assert_eq!(run["status"], "succeeded", "the second attempt succeeds: {run:#}\n{}", worker.log());
    worker.stop().await;
    tokio::task::block_in_place(|| telemetry.flush());
    let spans = within(LIMIT, "both processes' attempt spans arrived", || async {
        let spans = collector.spans();
        let attempts = |service: &str| {
            spans.iter().filter(|s| s.service == service && s.attr("cairn.step_id") == Some("call")).count()
        };
        (attempts("cairn-orchestrator") >= 2 && attempts("cairn-worker") >= 2).then_some(spans)
    })
    .await;

    // Assert: one trace, derived from the run id.
    let trace_id: String = run_id.chars().filter(char::is_ascii_hexdigit).collect();
    let of_run: Vec<&ExportedSpan> = spans.iter().filter(|s| s.attr("cairn.run_id") == Some(run_id.as_str())).collect();
    assert!(of_run.len() >= 5, "the run's root and two attempt spans on each side are exported: {of_run:#?}");
    for span in &of_run {
        assert_eq!(span.trace_id, trace_id, "every span of the run is in the run's trace: {span:#?}");
    }
    let root = of_run.iter().find(|s| s.name == "run").expect("the orchestrator exports the run's root span");

    // Each attempt: one orchestrator span under the run's root, one worker span under it.
    for attempt in [1, 2] {
        let orchestrator = attempt_span(&spans, "cairn-orchestrator", attempt);
        let worker_span = attempt_span(&spans, "cairn-worker", attempt);
        assert_eq!(orchestrator.parent_span_id, root.span_id, "attempt {attempt}'s span is a child of the run");
        assert_eq!(
            worker_span.parent_span_id, orchestrator.span_id,
            "the worker's span of attempt {attempt} is a child of the orchestrator's"
        );
    }

    // The failed attempt carries its failure code on both sides; the successful one none.
    for service in ["cairn-orchestrator", "cairn-worker"] {
        let failed = attempt_span(&spans, service, 1);
        assert_eq!(failed.attr("cairn.failure_code"), Some("action_error"), "{service}: a 500 is an action_error");
        let succeeded = attempt_span(&spans, service, 2);
        assert_eq!(succeeded.attr("cairn.failure_code"), None, "{service}: attempt 2 did not fail");
    }

    // The called service was handed the worker's span as its parent.
    let requests = flaky.calls();
    assert_eq!(requests.len(), 2, "one request per attempt");
    for (attempt, request) in (1..).zip(&requests) {
        let header = request.headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let worker_span = attempt_span(&spans, "cairn-worker", attempt);
        assert_eq!(
            header,
            format!("00-{trace_id}-{}-01", worker_span.span_id),
            "request {attempt} carries the run's trace and the worker's attempt span"
        );
    }
}
