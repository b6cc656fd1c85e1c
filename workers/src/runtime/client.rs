//! The orchestrator's worker protocol as seen from a worker: one cheap-to-clone client carrying the worker id
//! and the bearer token, with a deadline on every call, and the one place that decides which gRPC errors are
//! worth retrying.
//!
//! The tonic [`Channel`] is created lazily and reconnects by itself: when the orchestrator restarts, the next
//! call dials again. Callers back off between failed calls (see [`transient`]), so a dead orchestrator is not
//! hammered.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cairn_core::catalog::{ActionSpec, Effect};
use cairn_core::delivery::DeliveryReport;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_proto::v1::{
    self as pb, CompleteRequest, FailRequest, HeartbeatRequest, PollRequest, RegisterRequest, RegisterResponse,
    ReportOutcome,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use super::RuntimeError;
use super::completions::Completions;

/// How long a unary call (register, heartbeat, complete, fail) may take before it counts as failed.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Added to a poll's own wait for its deadline: the server answers at the end of the wait, plus latency.
const POLL_SLACK: Duration = Duration::from_secs(10);
/// How long dialing the orchestrator may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Adds `authorization: Bearer <token>` to every call. `Debug` never prints the token.
#[derive(Clone)]
pub(crate) struct BearerToken(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BearerToken").field(&self.0.as_ref().map(|_| "<redacted>")).finish()
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// The generated client over the lazily dialled channel, with the token added to every call.
pub(crate) type Service = WorkerServiceClient<InterceptedService<Channel, BearerToken>>;

/// A client of the orchestrator's `WorkerService` for one worker id. Cheap to clone; clones share the channel
/// and the completion queue.
#[derive(Debug, Clone)]
pub(crate) struct OrchestratorClient {
    inner: Service,
    worker_id: Arc<str>,
    /// Started by the first completion (a Tokio runtime is running by then).
    completions: Arc<OnceLock<Completions>>,
}

impl OrchestratorClient {
    /// A client of `server` (`http://HOST:PORT`). Does not dial: the first call does.
    ///
    /// # Errors
    /// [`RuntimeError::Config`] when the address or the token cannot be used.
    pub(crate) fn new(server: &str, token: Option<&str>, worker_id: &str) -> Result<Self, RuntimeError> {
        let endpoint = Endpoint::from_shared(server.to_owned())
            .map_err(|e| RuntimeError::Config(format!("server address `{server}` is not a URI: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            // Detects a silently dead connection (a partition) while a long poll is open.
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        let token = token
            .map(|t| {
                let mut value = MetadataValue::try_from(format!("Bearer {t}"))
                    .map_err(|_| RuntimeError::Config("the worker token is not printable ASCII".into()))?;
                value.set_sensitive(true);
                Ok::<_, RuntimeError>(value)
            })
            .transpose()?;
        let inner = WorkerServiceClient::with_interceptor(endpoint.connect_lazy(), BearerToken(token));
        Ok(Self { inner, worker_id: worker_id.into(), completions: Arc::default() })
    }

    /// The worker id every call carries.
    pub(crate) fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The generated client, for calls made outside these methods (the completion queue's).
    pub(crate) fn service(&self) -> Service {
        self.inner.clone()
    }

    /// A client on the same channel and worker id with a completion queue of its own, not yet started: what the
    /// completion queue's task holds, so that the queue's last sender is a client's and the task ends with them.
    pub(crate) fn without_completions(&self) -> Self {
        Self { inner: self.inner.clone(), worker_id: Arc::clone(&self.worker_id), completions: Arc::default() }
    }

    /// Registers (or refreshes) the worker and its actions.
    pub(crate) async fn register(&self, actions: &[pb::ActionDescriptor]) -> Result<RegisterResponse, Status> {
        let req = RegisterRequest {
            worker_id: self.worker_id.to_string(),
            actions: actions.to_vec(),
            protocol_version: cairn_proto::PROTOCOL_VERSION,
        };
        Ok(self.inner.clone().register(timed(req, CALL_TIMEOUT)).await?.into_inner())
    }

    /// Long-polls for up to `max_attempts` attempts of `actions`, waiting up to `wait` for the first.
    pub(crate) async fn poll(
        &self,
        actions: &[String],
        max_attempts: u32,
        wait: Duration,
    ) -> Result<Vec<pb::Attempt>, Status> {
        let req = PollRequest {
            worker_id: self.worker_id.to_string(),
            actions: actions.to_vec(),
            max_attempts,
            wait_ms: millis(wait),
        };
        Ok(self.inner.clone().poll(timed(req, wait + POLL_SLACK)).await?.into_inner().attempts)
    }

    /// Extends `lease`, saving `checkpoint_json` when given. `Ok(false)`: the attempt no longer counts.
    pub(crate) async fn heartbeat(&self, lease: &pb::Lease, checkpoint_json: Option<String>) -> Result<bool, Status> {
        let req =
            HeartbeatRequest { worker_id: self.worker_id.to_string(), lease: Some(lease.clone()), checkpoint_json };
        Ok(self.inner.clone().heartbeat(timed(req, CALL_TIMEOUT)).await?.into_inner().alive)
    }

    /// Records one channel's outcome in the step's delivery ledger. `Ok(false)`: the attempt no longer counts.
    pub(crate) async fn report_delivery(&self, lease: &pb::Lease, report: &DeliveryReport) -> Result<bool, Status> {
        let req = pb::ReportDeliveryRequest {
            worker_id: self.worker_id.to_string(),
            lease: Some(lease.clone()),
            recipient_id: report.recipient_id.clone(),
            channel: report.channel.clone(),
            status: report.status.as_str().to_owned(),
            tries: report.tries,
            last_error: report.last_error.clone(),
            provider_message_id: report.provider_message_id.clone(),
        };
        Ok(self.inner.clone().report_delivery(timed(req, CALL_TIMEOUT)).await?.into_inner().alive)
    }

    /// Reports a successful attempt, asking for up to `next_max_attempts` attempts of `next_actions` in the same
    /// call (0: none), through the worker's completion queue (in a `CompleteBatch` with the completions queued
    /// alongside, see [`Completions`]). Returns the outcome and the attempts claimed for this worker.
    pub(crate) async fn complete(
        &self,
        lease: &pb::Lease,
        output_json: String,
        next_max_attempts: u32,
        next_actions: &[String],
    ) -> Result<(ReportOutcome, Vec<pb::Attempt>), Status> {
        let req = CompleteRequest {
            worker_id: self.worker_id.to_string(),
            lease: Some(lease.clone()),
            output_json,
            next_max_attempts,
            next_actions: next_actions.to_vec(),
        };
        let completions = self.completions.get_or_init(|| Completions::start(self));
        let response = completions.complete(req).await?;
        Ok((response.outcome(), response.next))
    }

    /// Reports a failed attempt.
    pub(crate) async fn fail(&self, lease: &pb::Lease, failure: pb::Failure) -> Result<ReportOutcome, Status> {
        self.fail_request(lease, failure, false).await
    }

    /// Returns an attempt this worker never started (`FailRequest.not_started`): the orchestrator undoes the
    /// claim; `failure` is what an orchestrator that predates the field records instead.
    pub(crate) async fn return_unstarted(
        &self,
        lease: &pb::Lease,
        failure: pb::Failure,
    ) -> Result<ReportOutcome, Status> {
        self.fail_request(lease, failure, true).await
    }

    async fn fail_request(
        &self,
        lease: &pb::Lease,
        failure: pb::Failure,
        not_started: bool,
    ) -> Result<ReportOutcome, Status> {
        let req = FailRequest {
            worker_id: self.worker_id.to_string(),
            lease: Some(lease.clone()),
            failure: Some(failure),
            not_started,
        };
        let response = self.inner.clone().fail(timed(req, CALL_TIMEOUT)).await?.into_inner();
        Ok(response.outcome())
    }
}

/// Whether a failed call may succeed if repeated: the orchestrator is unreachable or restarting
/// (`UNAVAILABLE`, which is also what a refused connection becomes), the call timed out or was cut, or the
/// orchestrator's store is briefly unavailable. `UNAUTHENTICATED`, `INVALID_ARGUMENT`, `INTERNAL` and the like
/// are not: repeating the same call gets the same answer.
pub(crate) fn transient(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Aborted
            | Code::ResourceExhausted
    )
}

/// The protocol form of an action's spec: schemas as JSON text, the effect as the protocol enum.
pub(crate) fn descriptor(spec: ActionSpec) -> pb::ActionDescriptor {
    let effect = match spec.effect {
        Effect::Read => pb::Effect::Read,
        Effect::IdempotentWrite => pb::Effect::IdempotentWrite,
        Effect::NonIdempotent => pb::Effect::NonIdempotent,
    };
    pb::ActionDescriptor {
        args_schema_json: spec.args_schema.to_string(),
        output_schema_json: spec.output_schema.to_string(),
        name: spec.name,
        version: spec.version,
        description: spec.description,
        effect: effect.into(),
        grounded_args: spec.grounded_args,
        recipient_args: spec.recipient_args,
        example_output_json: spec.example_output.map(|v| v.to_string()),
    }
}

/// Milliseconds of `d`, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `message` as a request that fails with `DEADLINE_EXCEEDED` after `timeout`.
pub(crate) fn timed<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}
