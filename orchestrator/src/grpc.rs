//! The worker protocol service (`proto/cairn/v1/worker.proto`) over the [`Engine`].
//!
//! Errors map to gRPC codes once, here: invalid JSON or a missing lease is `INVALID_ARGUMENT` (not retryable);
//! a store failure is `UNAVAILABLE` (retryable: the worker resends the same report, which is safe because every
//! report is fenced by its lease); a bad token is `UNAUTHENTICATED` (logged with the client's address and the
//! method, never the token, and counted in `cairn_auth_failures_total{api="grpc"}`). Message, stream and
//! connection limits: [`GrpcLimits`].

use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::{ActionSpec, Effect};
use cairn_core::failure::Failure;
use cairn_core::text;
use cairn_proto::v1::worker_service_server::{WorkerService, WorkerServiceServer};
use cairn_proto::v1::{
    self as pb, Attempt, CompleteBatchRequest, CompleteBatchResponse, CompleteRequest, FailRequest, HeartbeatRequest,
    HeartbeatResponse, PollRequest, PollResponse, RegisterRequest, RegisterResponse, ReportDeliveryRequest,
    ReportDeliveryResponse, ReportOutcome, ReportResponse,
};
use cairn_store::{Claimed, ErrorClass, HeartbeatOutcome, Lease, Report, StoreError};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

use crate::auth::Api;
use crate::engine::Engine;
use crate::replies::HandedReplies;
use crate::secret::{ExposeSecret, SecretString};

mod completions;
mod deliveries;
mod limits;

pub use limits::GrpcLimits;
pub(crate) use limits::capped;

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct WorkerGrpc {
    engine: Engine,
    /// Answers to completions that handed out attempts, for a resend whose first answer was lost.
    replies: Arc<HandedReplies>,
}

/// The service wrapped with the token check.
pub type AuthenticatedService = InterceptedService<WorkerServiceServer<WorkerGrpc>, TokenCheck>;

impl WorkerGrpc {
    /// The service, requiring `Bearer <token>` when `token` is set, with the default message size limit
    /// ([`GrpcLimits::default`]).
    pub fn service(engine: Engine, token: Option<SecretString>) -> AuthenticatedService {
        Self::service_with_limit(engine, token, GrpcLimits::default().max_message_bytes)
    }

    /// As [`WorkerGrpc::service`], decoding and encoding messages of at most `max_message_bytes`.
    pub fn service_with_limit(
        engine: Engine,
        token: Option<SecretString>,
        max_message_bytes: usize,
    ) -> AuthenticatedService {
        let failures = engine.metrics().auth_failures(Api::Grpc);
        let server = WorkerServiceServer::new(WorkerGrpc { engine, replies: Arc::default() })
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes);
        InterceptedService::new(
            server,
            TokenCheck { expected: token.map(|t| format!("Bearer {}", t.expose_secret()).into()), failures },
        )
    }
}

/// The path of a call (`/cairn.v1.WorkerService/Poll`), put in the request's extensions before the token check
/// (tonic's interceptors see metadata and extensions, not the URI), so a failed login can name its method.
#[derive(Debug, Clone)]
pub struct CallPath(pub axum::http::uri::PathAndQuery);

/// Checks the `authorization` metadata against the configured worker token.
#[derive(Clone)]
pub struct TokenCheck {
    expected: Option<SecretString>,
    /// `cairn_auth_failures_total{api="grpc"}`.
    failures: prometheus::IntCounter,
}

impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("TokenCheck").field("required", &self.expected.is_some()).finish_non_exhaustive()
    }
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else { return Ok(request) };
        match request.metadata().get("authorization").and_then(|v| v.to_str().ok()) {
            Some(given) if given == expected.expose_secret() => Ok(request),
            _ => {
                let method = request.extensions().get::<CallPath>().map_or("unknown", |p| p.0.path());
                crate::auth::login_failed(Api::Grpc, &self.failures, request.remote_addr(), method);
                Err(Status::unauthenticated("missing or wrong worker token"))
            }
        }
    }
}

/// The status a store error answers: `UNAVAILABLE` (resend) when the database was unreachable or contended,
/// `INVALID_ARGUMENT` when it refused the data (resending the same report would be refused again), `INTERNAL`
/// otherwise. Workers resend only `UNAVAILABLE` (and transport failures).
fn unavailable(e: &StoreError) -> Status {
    let class = e.class();
    tracing::warn!(error = %e, ?class, "store error in worker protocol");
    match class {
        ErrorClass::Unreachable | ErrorClass::Contended => Status::unavailable(e.to_string()),
        ErrorClass::Refused => Status::invalid_argument(format!("the database refused the data: {e}")),
        ErrorClass::Internal => Status::internal("internal error"),
    }
}

/// Checks an identifier the worker sent (`cairn_core::text`): `INVALID_ARGUMENT` naming the rule broken.
fn identifier(field: cairn_core::text::Field, value: &str) -> Result<(), Status> {
    field.check(value).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn lease(worker_id: &str, lease: Option<pb::Lease>) -> Result<Lease, Status> {
    let l = lease.ok_or_else(|| Status::invalid_argument("missing lease"))?;
    identifier(text::WORKER_ID, worker_id)?;
    identifier(text::RUN_ID, &l.run_id)?;
    identifier(text::STEP_ID, &l.step_id)?;
    Ok(Lease { run_id: l.run_id, step_id: l.step_id, attempt: l.attempt, worker_id: worker_id.to_owned() })
}

fn json(field: &str, text: &str) -> Result<serde_json::Value, Status> {
    if text.is_empty() {
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_str(text).map_err(|e| Status::invalid_argument(format!("{field} is not JSON: {e}")))
}

fn spec(d: pb::ActionDescriptor) -> Result<ActionSpec, Status> {
    let effect = match pb::Effect::try_from(d.effect).unwrap_or(pb::Effect::Unspecified) {
        pb::Effect::Read => Effect::Read,
        pb::Effect::IdempotentWrite => Effect::IdempotentWrite,
        // Unspecified is treated as the safe choice: never re-executed blindly.
        pb::Effect::NonIdempotent | pb::Effect::Unspecified => Effect::NonIdempotent,
    };
    Ok(ActionSpec {
        args_schema: json("args_schema_json", &d.args_schema_json)?,
        output_schema: json("output_schema_json", &d.output_schema_json)?,
        name: d.name,
        version: d.version,
        description: d.description,
        effect,
        grounded_args: d.grounded_args,
        recipient_args: d.recipient_args,
        example_output: d.example_output_json.as_deref().map(|t| json("example_output_json", t)).transpose()?,
    })
}

fn attempt(c: Claimed, now_ms: i64) -> Attempt {
    let traceparent = crate::grpc::traceparent(&c.lease);
    Attempt {
        lease: Some(pb::Lease { run_id: c.lease.run_id, step_id: c.lease.step_id, attempt: c.lease.attempt }),
        action: c.action,
        args_json: c.args.to_string(),
        idempotency_key: c.idempotency_key,
        remaining_ms: u64::try_from(c.deadline_ms - now_ms).unwrap_or(0),
        timeout_ms: u64::try_from(c.timeout_ms).unwrap_or(0),
        heartbeat_timeout_ms: c.heartbeat_timeout_ms.and_then(|ms| u64::try_from(ms).ok()),
        checkpoint_json: c.checkpoint.map(|v| v.to_string()),
        traceparent,
        recipients: Vec::new(),
        deliveries: Vec::new(),
    }
}

/// W3C `traceparent` for an attempt: the run's trace (its id derived from the run id, so a run keeps one trace
/// across restarts) and the orchestrator's attempt span (its id derived from the attempt), so the worker's span
/// is a child of the orchestrator's.
pub fn traceparent(lease: &Lease) -> String {
    cairn_telemetry::attempt_traceparent(&lease.run_id, &lease.step_id, lease.attempt)
}

fn outcome(report: Report) -> ReportResponse {
    let outcome = match report {
        Report::Succeeded => ReportOutcome::Succeeded,
        Report::RetryScheduled => ReportOutcome::RetryScheduled,
        Report::Failed => ReportOutcome::Failed,
        Report::OutcomeUnknown => ReportOutcome::OutcomeUnknown,
        Report::Stale => ReportOutcome::Stale,
    };
    ReportResponse { outcome: outcome.into(), next: Vec::new() }
}

#[tonic::async_trait]
impl WorkerService for WorkerGrpc {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<RegisterResponse>, Status> {
        let req = request.into_inner();
        if !matches!(req.protocol_version, 0 | cairn_proto::PROTOCOL_VERSION) {
            return Err(Status::failed_precondition(format!(
                "worker {} speaks worker protocol version {}; this orchestrator speaks version {}: upgrade the one \
                 that is older",
                req.worker_id.escape_debug(),
                req.protocol_version,
                cairn_proto::PROTOCOL_VERSION
            )));
        }
        identifier(text::WORKER_ID, &req.worker_id)?;
        for action in &req.actions {
            identifier(text::ACTION_NAME, &action.name)?;
        }
        let specs = req.actions.into_iter().map(spec).collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        let now_ms = self.engine.now_ms();
        self.engine.catalog().register(&req.worker_id, specs, now_ms).await.map_err(|e| match e {
            crate::catalog::RegisterError::Schema(e) => Status::invalid_argument(e.to_string()),
            crate::catalog::RegisterError::Store(e) => unavailable(&e),
        })?;
        self.engine
            .store()
            .worker_upsert(&req.worker_id, &names, self.engine.now_ms())
            .await
            .map_err(|e| unavailable(&e))?;
        tracing::info!(worker_id = %req.worker_id, actions = ?names, "worker registered");
        let ttl = u64::try_from(self.engine.config().lease_ttl.as_millis()).unwrap_or(u64::MAX);
        Ok(Response::new(RegisterResponse {
            lease_ttl_ms: ttl,
            heartbeat_interval_ms: (ttl / 4).max(100),
            protocol_version: cairn_proto::PROTOCOL_VERSION,
        }))
    }

    async fn poll(&self, request: Request<PollRequest>) -> Result<Response<PollResponse>, Status> {
        let req = request.into_inner();
        identifier(text::WORKER_ID, &req.worker_id)?;
        for action in &req.actions {
            identifier(text::ACTION_NAME, action)?;
        }
        // At most half a lease TTL: a worker frozen or cut off while its poll is pending has its leases reaped
        // no sooner than 3/4 TTL after that (it heartbeats every TTL/4), so by then the poll has ended and cannot
        // hand the reclaimed step straight back to the lost worker (case C12 b).
        let wait = Duration::from_millis(req.wait_ms).min(self.engine.config().poll_wait_max());
        self.engine.worker_seen(&req.worker_id, &req.actions).await;
        let limit = req.max_attempts.clamp(1, 256);
        let claimed =
            self.engine.claim_wait(&req.worker_id, &req.actions, limit, wait).await.map_err(|e| unavailable(&e))?;
        let now = self.engine.now_ms();
        let mut attempts: Vec<Attempt> = claimed.into_iter().map(|c| attempt(c, now)).collect();
        self.add_deliveries(&req.worker_id, &mut attempts).await;
        Ok(Response::new(PollResponse { attempts }))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<HeartbeatResponse>, Status> {
        let req = request.into_inner();
        let lease = lease(&req.worker_id, req.lease)?;
        let checkpoint = req.checkpoint_json.as_deref().map(|t| json("checkpoint_json", t)).transpose()?;
        let outcome = self.engine.heartbeat(&lease, checkpoint.as_ref()).await.map_err(|e| unavailable(&e))?;
        Ok(Response::new(HeartbeatResponse { alive: matches!(outcome, HeartbeatOutcome::Extended { .. }) }))
    }

    async fn complete(&self, request: Request<CompleteRequest>) -> Result<Response<ReportResponse>, Status> {
        self.engine.metrics().completions_received("complete", 1);
        Ok(Response::new(self.complete_one(request.into_inner()).await?))
    }

    async fn complete_batch(
        &self,
        request: Request<CompleteBatchRequest>,
    ) -> Result<Response<CompleteBatchResponse>, Status> {
        let req = request.into_inner();
        let items = req.items.len();
        let answer = self.complete_all(req).await?;
        self.engine.metrics().completions_received("complete_batch", items);
        Ok(Response::new(answer))
    }

    async fn fail(&self, request: Request<FailRequest>) -> Result<Response<ReportResponse>, Status> {
        let req = request.into_inner();
        let lease = lease(&req.worker_id, req.lease)?;
        if req.not_started {
            let report = self.engine.return_unstarted(&lease).await.map_err(|e| unavailable(&e))?;
            return Ok(Response::new(outcome(report)));
        }
        let f = req.failure.ok_or_else(|| Status::invalid_argument("missing failure"))?;
        let failure = Failure {
            details: json("details_json", &f.details_json)?,
            code: if f.code.is_empty() { "action_error".into() } else { f.code },
            message: f.message,
            retryable: f.retryable,
            retry_after_ms: f.retry_after_ms,
            did_not_take_effect: f.did_not_take_effect,
            degraded: f.degraded,
        };
        let report = self.engine.fail(&lease, &failure).await.map_err(|e| unavailable(&e))?;
        Ok(Response::new(outcome(report)))
    }

    async fn report_delivery(
        &self,
        request: Request<ReportDeliveryRequest>,
    ) -> Result<Response<ReportDeliveryResponse>, Status> {
        Ok(Response::new(self.delivery(request.into_inner()).await?))
    }
}
