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
//! - [`telemetry`]: logs, spans and OTLP export for every Cairn process, and the run-derived trace ids that make
//!   one run one trace across the orchestrator, the workers and the services actions call.

pub mod action;
pub mod actions;
pub mod context;
pub mod runtime;
pub mod telemetry;
