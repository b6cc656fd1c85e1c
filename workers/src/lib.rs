//! `cairn-workers`: the worker runtime and Cairn's built-in actions. Workers never touch the database; they
//! receive attempts and report results over the worker protocol.
//!
//! Module map:
//! - [`action`]: the [`action::Action`] trait (typed args and output, declared effect, JSON Schemas), outcomes as
//!   types ([`action::ActionError`]: retryable with optional retry-after, permanent, did-not-take-effect), and
//!   the type-erased [`action::DynAction`] the runtime calls.
//! - [`context`]: [`context::ActionContext`] — idempotency key, deadline, cancellation, heartbeat, checkpoint.
//! - [`actions`]: built-ins: `noop`, `sleep`, `condition.eval`, `http.request`, `weather.forecast`,
//!   `notify.send`, `llm.chat`, and [`actions::registry`] to build the set a worker serves.
//! - [`runtime`]: the worker process on apalis — registers actions, long-polls attempts for free slots, runs
//!   them under tower layers (concurrency, tracing, panic capture, deadline), heartbeats, reports with retries,
//!   drains on shutdown ([`runtime::run`], [`runtime::WorkerConfig`]).
//!
//! Logs, spans and the run's trace across processes are `cairn-telemetry`'s; the OpenAI-compatible client behind
//! `llm.chat` is `cairn-llm`'s, shared with the orchestrator's planner.
//!
//! **Writing a worker of your own**: everything it touches is in [`prelude`] (`use cairn_workers::prelude::*`):
//! implement [`action::Action`] for a type (its typed args and output with JSON Schemas from `schemars`, its
//! [`prelude::Effect`], its errors as [`action::ActionError`]), then run [`runtime::run`] with a
//! [`runtime::WorkerConfig`] listing it. `examples/custom-worker/` is a complete one.

pub mod action;
pub mod actions;
pub mod context;
pub mod runtime;

/// The public API of a worker of your own, in one import: the [`Action`](action::Action) trait and its
/// outcomes, the attempt's [`ActionContext`](context::ActionContext), the runtime's [`run`](runtime::run) and
/// [`WorkerConfig`](runtime::WorkerConfig), logging set-up ([`cairn_telemetry::init`]), and the types they take.
pub mod prelude {
    pub use crate::action::{Action, ActionError, DynAction};
    pub use crate::context::ActionContext;
    pub use crate::runtime::{WorkerConfig, default_worker_id, run};
    pub use cairn_core::catalog::Effect;
    pub use cairn_core::failure::codes;
    pub use cairn_telemetry::{TelemetryConfig, TelemetryGuard, init as init_telemetry};
    pub use secrecy::SecretString;
}
