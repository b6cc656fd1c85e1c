//! The `cairn/v1` plan model: what an agent, a person or a program submits.
//!
//! A plan is a DAG of [`Step`]s. Unknown fields are errors (they are usually typos), `step_id` is accepted as an
//! alias of `id`, and [`Plan::apply_defaults`] copies `defaults` into every step that leaves a field out.
//! [`plan_schema`] is the JSON Schema handed to planners (`cairn schema plan`).
//!
//! Shape rules that serde cannot express (id charset, ranges, graph shape) live in [`crate::validate`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::retry::RetryPolicy;

/// The only plan format version this crate reads.
pub const PLAN_VERSION: &str = "cairn/v1";

/// Step ids that may not be used because placeholders and conditions use them as roots.
pub const RESERVED_STEP_IDS: [&str; 4] = ["input", "context", "steps", "run"];

/// Default start-to-close limit of one attempt, in milliseconds (contract §2).
pub const DEFAULT_TIMEOUT_MS: u64 = 20_000;

/// A workflow plan: a goal, a context, the run's input and a DAG of steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Cairn plan (cairn/v1)")]
pub struct Plan {
    /// Format version; `cairn/v1` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// What the plan is for, in the requester's words or a summary of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// Where the plan came from and how to read local times in it.
    #[serde(default)]
    pub context: PlanContext,
    /// JSON the run starts with; placeholders read it as `$input…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Field values for every step that leaves them out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<StepDefaults>,
    /// The steps, at least one.
    pub steps: Vec<Step>,
}

/// Plan context: time zone and the request text the plan was derived from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanContext {
    /// IANA time zone (e.g. `Asia/Shanghai`) used to read local times such as `tomorrow 08:00`. UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The original request text; args an action marks as grounded must appear in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_text: Option<String>,
    /// RFC 3339 instant that relative times (`tomorrow`, `in 2h`) are measured from, for reproducible plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
}

/// One unit of work: an action with arguments, run when its dependencies allow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Unique id, `[A-Za-z_][A-Za-z0-9_-]{0,63}`; `input`, `context`, `steps` and `run` are reserved.
    #[serde(alias = "step_id")]
    pub id: String,
    /// Registered action name, e.g. `weather.forecast`.
    pub action: String,
    /// Action arguments; string leaves may hold placeholders such as `$weather.output.precipitation_probability`.
    #[serde(default = "empty_object")]
    pub args: Value,
    /// Ids of steps that must finish before this one becomes ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// CEL expression over `steps.<id>.output`, `steps.<id>.status` and `input`; false skips the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Which dependency outcomes let this step run; `all_success` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_rule: Option<TriggerRule>,
    /// Start-to-close limit of one attempt in milliseconds (1000 ≤ t ≤ the configured maximum; default 20000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// An attempt with no heartbeat for this many milliseconds is timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_ms: Option<u64>,
    /// Retry policy for failed attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Whether re-running the step is safe; defaults to the action's declared effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// Earliest start: RFC 3339 instant, `+2h` / `in 90m`, or a local time (`tomorrow 08:00`) in the plan's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// Wait for a human decision before executing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// Step fields that `defaults` may set for every step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepDefaults {
    /// Default `timeout_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Default `heartbeat_timeout_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_ms: Option<u64>,
    /// Default `retry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Default `trigger_rule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_rule: Option<TriggerRule>,
    /// Default `idempotent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
}

/// Which dependency outcomes let a step run (contract §5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TriggerRule {
    /// Every dependency succeeded; a skipped or failed dependency skips this step.
    #[default]
    AllSuccess,
    /// Every dependency reached a final state, whatever it was.
    AllDone,
    /// No dependency failed (skipped ones are fine).
    NoneFailed,
    /// At least one dependency succeeded.
    OneSuccess,
}

/// Human approval before a step executes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// Whether approval is required.
    pub required: bool,
    /// How long to wait for a decision, in milliseconds; waits forever when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What happens when the timeout passes; `fail` by default.
    #[serde(default)]
    pub on_timeout: ApprovalTimeout,
    /// What a rejection does; `fail` by default.
    #[serde(default)]
    pub on_reject: ApprovalReject,
}

/// Outcome of a rejected approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalReject {
    /// The step fails (failure code `approval_rejected`).
    #[default]
    Fail,
    /// The step is skipped.
    Skip,
}

/// Outcome of an approval that timed out.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ApprovalTimeout {
    /// The step fails.
    #[default]
    Fail,
    /// The step is skipped.
    Skip,
    /// The step runs as if approved.
    Proceed,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl ApprovalTimeout {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl TriggerRule {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerRule::AllSuccess => "all_success",
            TriggerRule::AllDone => "all_done",
            TriggerRule::NoneFailed => "none_failed",
            TriggerRule::OneSuccess => "one_success",
        }
    }
}

impl Plan {
    /// Copies `defaults` into every step field that is absent. Fields a step sets itself are kept.
    pub fn apply_defaults(&mut self) {
        let Some(defaults) = self.defaults.clone() else {
            return;
        };
        for step in &mut self.steps {
            step.timeout_ms = step.timeout_ms.or(defaults.timeout_ms);
            step.heartbeat_timeout_ms = step.heartbeat_timeout_ms.or(defaults.heartbeat_timeout_ms);
            if step.retry.is_none() {
                step.retry.clone_from(&defaults.retry);
            }
            step.trigger_rule = step.trigger_rule.or(defaults.trigger_rule);
            step.idempotent = step.idempotent.or(defaults.idempotent);
        }
    }

    /// The step with id `id`, if any.
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }
}

impl Step {
    /// The effective start-to-close timeout in milliseconds ([`DEFAULT_TIMEOUT_MS`] when unset).
    pub fn effective_timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)
    }

    /// The effective trigger rule (`all_success` when unset).
    pub fn effective_trigger_rule(&self) -> TriggerRule {
        self.trigger_rule.unwrap_or_default()
    }

    /// The effective trigger rule's stable name, e.g. `all_success`.
    pub fn effective_trigger_rule_name(&self) -> String {
        self.effective_trigger_rule().as_str().to_owned()
    }
}

/// The JSON Schema of [`Plan`] (draft 2020-12), as printed by `cairn schema plan`.
pub fn plan_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Plan)).unwrap_or(Value::Null)
}
