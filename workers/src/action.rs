//! Actions: what a step runs. Outcomes are types, so the orchestrator can decide retries without parsing text.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use cairn_core::catalog::{ActionSpec, Effect};
use cairn_core::failure::{Failure, codes};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::ActionContext;

/// Why an action did not produce an output.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ActionError {
    /// Stable failure code (`action_error`, `rate_limited`, `not_found`, …).
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Structured details.
    pub details: Value,
    /// Whether another attempt may succeed.
    pub retryable: bool,
    /// Wait at least this long before retrying (e.g. from `Retry-After`).
    pub retry_after: Option<Duration>,
    /// The action certainly had no effect (safe to retry even when not idempotent).
    pub did_not_take_effect: bool,
    /// The action partly succeeded.
    pub degraded: bool,
}

impl ActionError {
    /// A transient failure: retry per policy.
    pub fn retryable(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: Value::Null,
            retryable: true,
            retry_after: None,
            did_not_take_effect: false,
            degraded: false,
        }
    }

    /// A failure retrying will not fix.
    pub fn permanent(code: &str, message: impl Into<String>) -> Self {
        Self { retryable: false, ..Self::retryable(code, message) }
    }

    /// Marks that the action had no effect (e.g. the connection was refused before anything was sent).
    pub fn did_not_take_effect(mut self) -> Self {
        self.did_not_take_effect = true;
        self
    }

    /// Sets a minimum wait before retrying.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Attaches details.
    pub fn details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// The failure reported to the orchestrator.
    pub fn into_failure(self) -> Failure {
        Failure {
            code: self.code,
            message: self.message,
            details: self.details,
            retryable: self.retryable,
            retry_after_ms: self.retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            did_not_take_effect: self.did_not_take_effect,
            degraded: self.degraded,
        }
    }
}

/// A typed action. Implement this; the runtime calls it through [`DynAction`].
pub trait Action: Send + Sync + 'static {
    /// Args, deserialized from the step's resolved args (a mismatch fails the attempt with `invalid_args`).
    type Args: DeserializeOwned + JsonSchema + Send;
    /// Output, serialized as the step's output.
    type Output: Serialize + JsonSchema;
    /// Registered name, e.g. `weather.forecast`.
    const NAME: &'static str;
    /// Implementation version.
    const VERSION: &'static str = "1";
    /// One-line description for planners.
    const DESCRIPTION: &'static str;
    /// Declared effect.
    const EFFECT: Effect;
    /// JSON pointers into args that must be grounded in the request text.
    fn grounded_args(&self) -> Vec<String> {
        Vec::new()
    }
    /// JSON pointers into args that name recipients (one id or a list): the orchestrator checks literal ids at
    /// submit and hands each attempt those recipients and the step's delivery ledger
    /// ([`ActionContext::deliveries`]).
    fn recipient_args(&self) -> Vec<String> {
        Vec::new()
    }
    /// The args schema the orchestrator validates plans against; `None` derives it from `Self::Args`. A built-in
    /// whose spec Cairn's core also carries returns that one, so a plan is judged (and its errors worded) the same
    /// whether the orchestrator has heard from a worker yet or not.
    fn args_schema(&self) -> Option<Value> {
        None
    }
    /// An example output, shown to planners and plan previews.
    fn example_output(&self) -> Option<Self::Output> {
        None
    }
    /// Runs one attempt. Must stop promptly when `ctx.cancelled()` fires.
    fn run(
        &self,
        args: Self::Args,
        ctx: &ActionContext,
    ) -> impl Future<Output = Result<Self::Output, ActionError>> + Send;
}

/// A boxed future of an action outcome.
pub type BoxOutcome<'a> = Pin<Box<dyn Future<Output = Result<Value, ActionError>> + Send + 'a>>;

/// A type-erased action: JSON in, JSON out.
pub trait DynAction: Send + Sync {
    /// Name, schemas, effect.
    fn spec(&self) -> ActionSpec;
    /// Runs one attempt on JSON args.
    fn call<'a>(&'a self, args: Value, ctx: &'a ActionContext) -> BoxOutcome<'a>;
}

impl<A: Action> DynAction for A {
    fn spec(&self) -> ActionSpec {
        ActionSpec {
            name: A::NAME.into(),
            version: A::VERSION.into(),
            description: A::DESCRIPTION.into(),
            args_schema: self
                .args_schema()
                .unwrap_or_else(|| serde_json::to_value(schemars::schema_for!(A::Args)).unwrap_or(Value::Bool(true))),
            output_schema: serde_json::to_value(schemars::schema_for!(A::Output)).unwrap_or(Value::Bool(true)),
            effect: A::EFFECT,
            grounded_args: self.grounded_args(),
            recipient_args: self.recipient_args(),
            example_output: self.example_output().and_then(|o| serde_json::to_value(o).ok()),
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ActionContext) -> BoxOutcome<'a> {
        Box::pin(async move {
            let args: A::Args = serde_json::from_value(args).map_err(|e| {
                ActionError::permanent(codes::INVALID_ARGS, format!("args do not fit `{}`: {e}", A::NAME))
                    .did_not_take_effect()
            })?;
            let output = self.run(args, ctx).await?;
            serde_json::to_value(output)
                .map_err(|e| ActionError::permanent(codes::ACTION_ERROR, format!("output is not JSON: {e}")))
        })
    }
}
