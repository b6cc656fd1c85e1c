//! `cairn-orchestrator`: turns validated plans into runs and drives every step to a final state.
//!
//! The orchestrator owns no state of its own: everything a run needs to resume lives in the store, so a
//! restarted (or second) orchestrator continues where another stopped. Module map:
//! - [`engine`]: the [`Engine`] — submit, claim (with long-poll wake-ups), complete, fail, heartbeat, cancel,
//!   operator actions.
//! - [`submit`]: validation and timer resolution that turn a plan document into a stored run.
//! - [`reaper`]: the background loop that fails attempts whose lease expired (crash, partition, timeout).
//! - [`config`]: engine settings with units in their types.
//! - [`clock`]: the system clock (tests inject `cairn_core::clock::ManualClock`).

pub mod clock;
pub mod config;
pub mod engine;
pub mod reaper;
pub mod submit;

pub use config::EngineConfig;
pub use engine::Engine;
pub use submit::{SubmitError, SubmitRequest, Submitted};
