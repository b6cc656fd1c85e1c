//! The built-in `event.wait` action: its args, and the CEL filter an external event's payload must pass (contract §10, "Waiting").
//!
//! A step `{"action": "event.wait", "args": {"name": "payment.received", "key": "$input.order_id",
//! "filter": "payload.amount >= 100", "lookback_ms": 3600000, "timeout_ms": 86400000, "on_timeout": "fail"}}` is
//! run by the orchestrator, not a worker: it waits for `POST /v1/events {name, key, payload}`. An event matches
//! when its name is equal, its key is equal (any key when the step gives none), and `filter` (CEL, with
//! `payload`, `name` and `key` bound) is true. Events received up to `lookback_ms` before the wait started count
//! too; with no lookback (0, the default) only events received after it started, never one stored before it in
//! the same millisecond (such as the event that ended an earlier wait of the same run, case D10 b). The matched
//! payload is the step's output. When `timeout_ms` passes first, `on_timeout` ends the wait: `fail` (failure
//! code `event_timeout`, not retried), `skip`, or `succeed` with `timeout_output` as the output (default
//! `{"timed_out": true}`). An event sent with a dedupe `id` is delivered once per name and id.

use std::sync::{Arc, LazyLock};

use cel::{Context, Env, Program, Value as CelValue};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The action name.
pub const ACTION: &str = "event.wait";

/// Failure code of a wait that timed out with `on_timeout: fail`.
pub const TIMEOUT_CODE: &str = "event_timeout";

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// How a timed-out wait ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitTimeout {
    /// The step fails with `event_timeout` (not retried).
    #[default]
    Fail,
    /// The step is skipped (dependents follow their trigger rules).
    Skip,
    /// The step succeeds with `timeout_output`.
    Succeed,
}

impl WaitTimeout {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitTimeout::Fail => "fail",
            WaitTimeout::Skip => "skip",
            WaitTimeout::Succeed => "succeed",
        }
    }
}

/// The resolved args of an `event.wait` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// Event name to wait for.
    pub name: String,
    /// Correlation key; any key matches when absent.
    #[serde(default)]
    pub key: Option<String>,
    /// CEL over `payload` (and `name`, `key`); must be true for the event to match.
    #[serde(default)]
    pub filter: Option<String>,
    /// Events received this long before the wait started still match, in milliseconds (default 0).
    #[serde(default)]
    pub lookback_ms: u64,
    /// How long to wait, in milliseconds; forever when absent.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// What a timeout does.
    #[serde(default)]
    pub on_timeout: WaitTimeout,
    /// The output of a wait that times out with `on_timeout: succeed`.
    #[serde(default)]
    pub timeout_output: Option<Value>,
}

impl WaitArgs {
    /// Reads resolved args.
    ///
    /// # Errors
    /// A message naming the problem (unknown field, wrong type, invalid filter).
    pub fn from_value(args: &Value) -> Result<Self, String> {
        let parsed: WaitArgs = serde_json::from_value(args.clone()).map_err(|e| format!("event.wait args: {e}"))?;
        crate::text::EVENT_NAME.check(&parsed.name).map_err(|e| format!("event.wait args: {e}"))?;
        if let Some(key) = &parsed.key {
            crate::text::EVENT_KEY.check(key).map_err(|e| format!("event.wait args: {e}"))?;
        }
        if let Some(filter) = &parsed.filter {
            EventFilter::compile(filter)?;
        }
        Ok(parsed)
    }

    /// The output of a timed-out wait that succeeds.
    pub fn timeout_output(&self) -> Value {
        self.timeout_output.clone().unwrap_or_else(|| json!({"timed_out": true}))
    }
}

/// A compiled event filter.
#[derive(Debug)]
pub struct EventFilter {
    source: String,
    program: Program,
}

impl EventFilter {
    /// Checks a CEL filter against the bounds of [`crate::expression`], then compiles it.
    ///
    /// # Errors
    /// A message naming the bound exceeded, or the parser's complaint.
    pub fn compile(source: &str) -> Result<Self, String> {
        let quoted = crate::expression::excerpt(source, 120);
        crate::expression::check(source).map_err(|e| format!("event.wait filter `{quoted}` is too complex: {e}"))?;
        let program =
            Program::compile(source).map_err(|e| format!("event.wait filter `{quoted}` is not valid CEL: {e}"))?;
        Ok(Self { source: source.to_owned(), program })
    }

    /// Whether an event passes: true only when the filter evaluates to `true`. An evaluation error (a missing
    /// field, a type mismatch) or a non-bool result is "no match", with the reason.
    ///
    /// # Errors
    /// The reason the filter could not be evaluated.
    pub fn matches(&self, name: &str, key: Option<&str>, payload: &Value) -> Result<bool, String> {
        let mut context = Context::with_env(Arc::clone(&ENV));
        let payload = cel::to_value(payload).map_err(|e| e.to_string())?;
        context.add_variable_from_value("payload", payload);
        context.add_variable_from_value("name", CelValue::from(name.to_owned()));
        context.add_variable_from_value("key", key.map_or(CelValue::Null, |k| CelValue::from(k.to_owned())));
        match self.program.execute(&context) {
            Ok(CelValue::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("filter `{}` evaluated to a {}, not a bool", self.source, other.type_of())),
            Err(e) => Err(format!("filter `{}` could not be evaluated: {e}", self.source)),
        }
    }
}

/// The args JSON Schema of `event.wait` (for the built-in catalog).
pub fn args_schema() -> Value {
    json!({"type": "object", "required": ["name"], "additionalProperties": false, "properties": {
        "name": {"type": "string", "minLength": 1, "description": "event name to wait for"},
        "key": {"type": "string", "description": "correlation key; any key matches when absent"},
        "filter": {"type": "string", "description": "CEL over `payload` (also `name`, `key`)"},
        "lookback_ms": {"type": "integer", "minimum": 0,
            "description": "events received this long before the wait started still match"},
        "timeout_ms": {"type": "integer", "minimum": 1},
        "on_timeout": {"enum": ["fail", "skip", "succeed"]},
        "timeout_output": {"description": "output of a wait that times out with on_timeout = succeed"}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_read_with_defaults() {
        let args = WaitArgs::from_value(&json!({"name": "paid", "key": "o-1"})).expect("valid");
        assert_eq!((args.lookback_ms, args.timeout_ms, args.on_timeout), (0, None, WaitTimeout::Fail));
        assert!(WaitArgs::from_value(&json!({"name": ""})).is_err());
        assert!(WaitArgs::from_value(&json!({"name": "x", "filter": "payload.a >"})).is_err());
        assert!(WaitArgs::from_value(&json!({"name": "x", "extra": 1})).is_err());
        let deep = format!("payload.a{} == 1", ".b".repeat(5_000));
        let err = WaitArgs::from_value(&json!({"name": "x", "filter": deep})).expect_err("too deep");
        assert!(err.contains("too complex") && err.len() < 400, "{err}");
    }

    #[test]
    fn the_filter_sees_payload_name_and_key() {
        let f = EventFilter::compile("payload.amount >= 100 && key == 'o-1' && name == 'paid'").expect("valid");
        assert_eq!(f.matches("paid", Some("o-1"), &json!({"amount": 150})), Ok(true));
        assert_eq!(f.matches("paid", Some("o-1"), &json!({"amount": 50})), Ok(false));
        assert!(f.matches("paid", Some("o-1"), &json!({})).is_err(), "a missing field is no match");
    }
}
