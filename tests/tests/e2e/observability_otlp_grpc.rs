//! OTLP over gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`): a real `cairn run` process (embedded orchestrator and
//! worker) exports its spans to a local collector, a tonic `TraceService` on 127.0.0.1, and flushes them when it
//! exits. The HTTP transport is covered by `observability_traces`; this is the other transport, whose exporter
//! runs on a runtime of its own. Build the binary first: `cargo build -p cairn-cli`.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};

use cairn_tests::http::{TempDir, cairn_bin};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value;
use serde_json::Value;

/// A span as the collector received it.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: String,
    attributes: HashMap<String, String>,
}

/// Keeps every span of every export request.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                let attributes = span
                    .attributes
                    .iter()
                    .filter_map(|kv| Some((kv.key.clone(), text(kv.value.as_ref()?.value.as_ref()?)?)))
                    .collect();
                spans.push(Received {
                    service: service.clone(),
                    name: span.name,
                    trace_id: span.trace_id.iter().map(|b| format!("{b:02x}")).collect(),
                    attributes,
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn text(value: &any_value::Value) -> Option<String> {
    match value {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_exporting_over_grpc_delivers_its_run_spans_when_it_exits() {
    // Arrange: a gRPC collector on a free port, a one-step plan.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let collector = Collector::default();
    let server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(collector.clone()))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    let server = tokio::spawn(server);
    let dir = TempDir::new();
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        r#"{"version": "cairn/v1", "goal": "otlp over grpc", "steps": [{"id": "only", "action": "noop", "args": {}}]}"#,
    )
    .unwrap();
    let db = format!("sqlite:{}", dir.path().join("cairn.db").display());

    // Act: run it to the end in a separate process exporting over gRPC.
    let out = tokio::task::spawn_blocking(move || {
        Command::new(cairn_bin())
            .args(["run", plan.to_str().unwrap(), "--json", "--db", &db])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    // Assert: the run succeeded, and its root span arrived before the process exited, in the run's trace.
    assert!(out.status.success(), "cairn run failed: {}", String::from_utf8_lossy(&out.stderr));
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["status"], "succeeded");
    let run_id = run["id"].as_str().unwrap();
    let spans = collector.spans.lock().unwrap().clone();
    let of_run: Vec<&Received> =
        spans.iter().filter(|s| s.attributes.get("cairn.run_id").map(String::as_str) == Some(run_id)).collect();
    let root = of_run.iter().find(|s| s.name == "run");
    assert!(root.is_some(), "the run's root span was exported over gRPC before exit: {spans:#?}");
    let trace_id: String = run_id.chars().filter(char::is_ascii_hexdigit).collect();
    for span in &of_run {
        assert_eq!(span.trace_id, trace_id, "every span of the run is in the run's trace: {span:#?}");
        assert_eq!(span.service, "cairn", "`cairn run` exports as service `cairn`: {span:#?}");
    }
    assert!(
        of_run.iter().any(|s| s.attributes.get("cairn.step_id").map(String::as_str) == Some("only")),
        "the step's attempt is exported too: {of_run:#?}"
    );
    server.abort();
}
