//! `cairn-orchestrator`: turns validated plans into runs and drives every step to a final state.
//!
//! The orchestrator owns no state of its own: everything a run needs to resume lives in the store, so a
//! restarted (or second) orchestrator continues where another stopped. Module map:
//! - [`engine`]: the [`Engine`] — submit, claim (with long-poll wake-ups), complete, fail, heartbeat, cancel,
//!   operator actions.
//! - [`submit`]: validation and timer resolution that turn a plan document into a stored run.
//! - [`reaper`]: the background loop that fails attempts whose lease expired (crash, partition, timeout).
//! - [`api`]: the REST API (axum) and its one error type.
//! - [`auth`]: what a failed login on either API leaves behind (a counter and a log line, never the token).
//! - [`view`]: the run as shown by the API and the CLI.
//! - [`ui`]: the web dashboard at `/ui` (embedded assets, login, the session cookie and CSRF token).
//! - [`catalog`]: built-in plus registered actions, validated against at submit.
//! - [`grpc`]: the worker protocol service (register, long-poll, heartbeat, complete, complete batch, fail), its
//!   auth and its limits (message size, streams, connections).
//! - [`replies`]: answers to completions that handed out attempts, replayed to a resend of the same lease.
//! - [`server`]: one orchestrator process (engine + REST + gRPC + reaper) on its listeners.
//! - [`http_server`]: the REST API's accept loop: request head timeout, connection cap, graceful shutdown.
//! - [`scheduler`]: cron schedules (definitions, the tick pass) and the loop driving every durable wait.
//! - [`waits`]: approval decisions and timeouts, external events and `event.wait` steps.
//! - [`config`]: engine settings with units in their types.
//! - [`secret`]: the types of secrets in configuration (tokens, the database URL), which `Debug` never prints.
//! - [`clock`]: the system clock (tests inject `cairn_core::clock::ManualClock`).
//! - [`metrics`]: the Prometheus metrics at `/metrics` (database figures read per scrape, in-process histograms).
//! - `trace`: the run's root span and the attempt spans (claim to report) in the run's trace.
//! - [`planner`]: natural language → a validated plan through an OpenAI-compatible model, with a repair loop.

pub mod api;
pub mod auth;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod engine;
pub mod grpc;
pub mod http_server;
pub mod metrics;
pub mod planner;
pub mod reaper;
pub mod replies;
pub mod scheduler;
pub mod secret;
pub mod server;
pub mod submit;
mod trace;
pub mod ui;
pub mod view;
pub mod waits;

pub use config::EngineConfig;
pub use engine::Engine;
pub use submit::{SubmitError, SubmitRequest, Submitted};
