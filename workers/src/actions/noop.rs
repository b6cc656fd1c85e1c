//! `noop`: echoes its args as its output. Useful as a join point in a plan and as the smallest end-to-end check
//! of the worker protocol.

use cairn_core::catalog::Effect;
use serde_json::{Map, Value};

use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// `noop`: args (any JSON object) → the same object as output. Never fails once the args parse.
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

impl Action for Noop {
    type Args = Map<String, Value>;
    type Output = Map<String, Value>;
    const NAME: &'static str = "noop";
    const DESCRIPTION: &'static str = "Echo the args as the output.";
    const EFFECT: Effect = Effect::Read;

    async fn run(&self, args: Self::Args, _ctx: &ActionContext) -> Result<Self::Output, ActionError> {
        Ok(args)
    }
}
