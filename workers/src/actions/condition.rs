//! `condition.eval`: evaluates a CEL expression over the step's `vars` and outputs `{"matched": bool}`, so a
//! plan can branch on data (`when: "steps.rainy.output.matched"`).

use cairn_core::catalog::Effect;
use cairn_core::condition::{Condition, ConditionError, ConditionScope};
use cairn_core::failure::codes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// Args of `condition.eval`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConditionArgs {
    /// A CEL expression that must evaluate to a bool. `vars` are visible as `input.<name>`.
    pub expr: String,
    /// Values the expression reads, as `input.<name>` (e.g. `{"p": "$weather.precipitation_probability"}`
    /// with `expr: "input.p >= 50"`). Default `{}`.
    #[serde(default)]
    pub vars: Map<String, Value>,
}

/// Output of `condition.eval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConditionOutput {
    /// What the expression evaluated to.
    pub matched: bool,
}

/// `condition.eval` {expr, vars?} → {"matched": bool}.
///
/// The expression is compiled by [`Condition`] and evaluated with `input` bound to `vars` and `steps` bound to
/// an empty map: the action sees only its own args, never other steps directly. To read another step, let the
/// orchestrator substitute it first — either in `vars` (`{"p": "$weather.precipitation_probability"}`, then
/// `input.p >= 50`) or inline (`"$weather.precipitation_probability >= 50"` is interpolated to `"80 >= 50"`
/// before the worker sees it). `vars` are **not** bound as top-level names (the CEL scope has only `input`
/// and `steps`).
///
/// Errors (none retryable, evaluation is deterministic): `invalid_args` when `expr` is not valid CEL;
/// `condition_error` when evaluation fails (missing key, type mismatch) or the result is not a bool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConditionEval;

impl Action for ConditionEval {
    type Args = ConditionArgs;
    type Output = ConditionOutput;
    const NAME: &'static str = "condition.eval";
    const DESCRIPTION: &'static str =
        "Evaluate a CEL expression over `vars` (as `input.<name>`); output {\"matched\": bool}.";
    const EFFECT: Effect = Effect::Read;

    async fn run(&self, args: ConditionArgs, _ctx: &ActionContext) -> Result<ConditionOutput, ActionError> {
        let condition = Condition::compile(&args.expr)
            .map_err(|e| ActionError::permanent(codes::INVALID_ARGS, e.to_string()).did_not_take_effect())?;
        let scope = ConditionScope { input: Value::Object(args.vars), steps: Map::new() };
        match condition.evaluate(&scope) {
            Ok(matched) => Ok(ConditionOutput { matched }),
            Err(error @ ConditionError::Evaluation { .. }) if !condition.step_references().is_empty() => {
                Err(ActionError::permanent(
                    codes::CONDITION_ERROR,
                    format!(
                        "{error} (condition.eval sees only its `vars` as `input`; reference other steps with \
                         placeholders such as `$step.field` so they are substituted before the action runs)"
                    ),
                ))
            }
            Err(error) => Err(ActionError::permanent(codes::CONDITION_ERROR, error.to_string())),
        }
    }
}
