//! `sleep`: waits for a duration in slices, checkpointing progress after each slice so an attempt that is
//! interrupted (worker crash, lease lost, shutdown) resumes where it stopped instead of starting over.

use std::time::Duration;

use cairn_core::catalog::Effect;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::cancelled;
use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// Args of `sleep`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SleepArgs {
    /// How long to wait in total across attempts, in milliseconds.
    pub duration_ms: u64,
}

/// Output of `sleep`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SleepOutput {
    /// Total time waited, in milliseconds (equals `duration_ms`).
    pub slept_ms: u64,
    /// Milliseconds already waited by earlier attempts when this one started (0 on a fresh start).
    pub resumed_from_ms: u64,
}

/// `sleep` {duration_ms} → {slept_ms, resumed_from_ms}.
///
/// After every slice it saves the checkpoint `{"elapsed_ms": n}`; an attempt that starts with such a
/// checkpoint only waits for the rest. Errors: `cancelled` (retryable) when the context is cancelled or a
/// heartbeat is refused; the partial slice in progress is not counted.
#[derive(Debug, Clone, Copy)]
pub struct Sleep {
    slice: Duration,
}

impl Default for Sleep {
    /// One-second slices: one checkpoint (and heartbeat) per second.
    fn default() -> Self {
        Self::with_slice(Duration::from_secs(1))
    }
}

impl Sleep {
    /// A `sleep` that checkpoints every `slice` (at least 1 ms).
    pub fn with_slice(slice: Duration) -> Self {
        Self { slice: slice.max(Duration::from_millis(1)) }
    }
}

/// `elapsed_ms` of a checkpoint written by [`Sleep`]; 0 for anything else.
fn resumed_from(checkpoint: Option<&serde_json::Value>) -> u64 {
    checkpoint.and_then(|c| c.get("elapsed_ms")).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

impl Action for Sleep {
    type Args = SleepArgs;
    type Output = SleepOutput;
    const NAME: &'static str = "sleep";
    const DESCRIPTION: &'static str = "Wait for a duration, checkpointing progress.";
    const EFFECT: Effect = Effect::Read;

    async fn run(&self, args: SleepArgs, ctx: &ActionContext) -> Result<SleepOutput, ActionError> {
        let resumed_from_ms = resumed_from(ctx.last_checkpoint().as_ref()).min(args.duration_ms);
        let slice_ms = u64::try_from(self.slice.as_millis()).unwrap_or(u64::MAX);
        let mut elapsed_ms = resumed_from_ms;
        while elapsed_ms < args.duration_ms {
            let step_ms = slice_ms.min(args.duration_ms - elapsed_ms);
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Err(cancelled()),
                () = tokio::time::sleep(Duration::from_millis(step_ms)) => {}
            }
            elapsed_ms += step_ms;
            if !ctx.checkpoint(json!({ "elapsed_ms": elapsed_ms })).await {
                return Err(cancelled());
            }
        }
        Ok(SleepOutput { slept_ms: args.duration_ms, resumed_from_ms })
    }
}
