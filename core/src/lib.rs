//! `cairn-core`: the pure heart of Cairn. No I/O, no async runtime, no clock reads.
//!
//! Everything here is a function of its inputs, so the orchestrator, the CLI, the planner and the tests share
//! one definition of what a plan is and whether it may run.
//!
//! Module map:
//! - [`plan`]: the `cairn/v1` plan model (serde + JSON Schema via schemars), defaults, limits.
//! - [`document`]: text → JSON value (JSON or YAML) that refuses duplicate keys and reports line/column.
//! - [`diagnostic`]: the `{severity, code, step_id, pointer, message, hint}` shape and its stable codes.
//! - [`validate`]: static validation of a plan; returns every diagnostic at once.
//! - [`catalog`]: the [`catalog::ActionCatalog`] trait the validator checks actions against, and the built-ins.
//! - [`event_wait`]: the built-in `event.wait` action: its args and the CEL filter over an event's payload.
//! - [`placeholder`]: the `$step.output.path` grammar: parsing, rendering and resolution against outputs.
//! - [`condition`]: `when` expressions (CEL): compilation, step references, evaluation.
//! - [`expression`]: the depth bounds every CEL expression is checked against before it is parsed.
//! - [`schedule`]: cron schedules in an IANA zone: DST-correct fire times, "never fires", misfire decisions.
//! - [`time_spec`]: `not_before` specs (`tomorrow 08:00`, `in 90m`, RFC 3339) resolved with a time zone.
//! - [`retry`]: retry policies and the backoff/jitter maths (`next_delay`).
//! - [`pointer`]: JSON pointer building (RFC 6901 escaping).
//! - [`clock`]: the injected [`clock::Clock`] and a manual clock for tests.
//! - [`state`]: run, step and attempt statuses; [`event`]: the kinds of a run's events; [`failure`]: failure records and codes.
//! - [`labels`]: run labels and their rules (`key → value`, at most 16).
//! - [`text`]: the identifiers requests carry (keys, names, ids): length limits and the NUL rule.
//! - [`machine`]: the pure state machine (retry/fail/outcome_unknown, trigger rules, skip propagation).

pub mod catalog;
pub mod clock;
pub mod condition;
pub mod delivery;
pub mod diagnostic;
pub mod document;
pub mod event;
pub mod event_wait;
pub mod expression;
pub mod failure;
pub mod labels;
pub mod machine;
pub mod placeholder;
pub mod plan;
pub mod pointer;
pub mod recipient;
pub mod retry;
pub mod schedule;
pub mod state;
pub mod text;
pub mod time_spec;
pub mod validate;
