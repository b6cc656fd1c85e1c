//! The actions a plan may call: their names, argument schemas, declared effects and grounded arguments.
//!
//! The validator asks an [`ActionCatalog`] whether an action exists and whether a step's args satisfy its
//! args JSON Schema. [`StaticCatalog::builtin`] describes Cairn's built-in actions; the orchestrator later builds a
//! catalog from what registered workers serve.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What running an action does to the world; decides whether a step may be re-executed automatically (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Reads only; always safe to repeat.
    Read,
    /// Writes, but repeating with the same idempotency key has no further effect.
    IdempotentWrite,
    /// Writes that may happen twice if repeated; never re-executed blindly.
    NonIdempotent,
}

impl Effect {
    /// Whether a step of this effect is idempotent when the plan does not say.
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Effect::NonIdempotent)
    }
}

/// Everything the validator and the planner need to know about one action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionSpec {
    /// Action name, e.g. `weather.forecast`.
    pub name: String,
    /// Version of the action implementation.
    pub version: String,
    /// One-line description for planners.
    pub description: String,
    /// JSON Schema (draft 2020-12) the args must satisfy (placeholders are checked after resolution).
    pub args_schema: Value,
    /// JSON Schema of the output.
    pub output_schema: Value,
    /// Declared effect.
    pub effect: Effect,
    /// JSON pointers into args whose literal values must appear in `context.source_text` (e.g. `/city`).
    #[serde(default)]
    pub grounded_args: Vec<String>,
    /// JSON pointers into args that name recipients (one id or a list of ids, e.g. `/to`): literal ids must
    /// exist when the plan is submitted, and each attempt is handed the recipients its resolved args name and
    /// the step's delivery ledger.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recipient_args: Vec<String>,
    /// An example output (valid against the output schema), for planners and plan previews.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example_output: Option<Value>,
}

/// One problem found by an args schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgsProblem {
    /// Pointer inside args, e.g. `/channels/0` (`""` for args itself).
    pub pointer: String,
    /// The schema's complaint.
    pub message: String,
}

/// A catalog entry: the spec and its compiled args validator.
pub struct CatalogEntry {
    spec: ActionSpec,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for CatalogEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogEntry").field("spec", &self.spec).finish_non_exhaustive()
    }
}

/// Why an action's args schema could not be compiled.
#[derive(Debug, thiserror::Error)]
#[error("args schema of action `{action}` is not a valid JSON Schema: {message}")]
pub struct SchemaError {
    /// The action.
    pub action: String,
    /// The compiler's message.
    pub message: String,
}

impl CatalogEntry {
    /// Compiles the spec's args schema.
    ///
    /// # Errors
    /// [`SchemaError`] when the args schema is not a valid JSON Schema.
    pub fn new(spec: ActionSpec) -> Result<Self, SchemaError> {
        let validator = jsonschema::validator_for(&spec.args_schema)
            .map_err(|e| SchemaError { action: spec.name.clone(), message: e.to_string() })?;
        Ok(Self { spec, validator })
    }

    /// The spec.
    pub fn spec(&self) -> &ActionSpec {
        &self.spec
    }

    /// Every schema violation of `args`, in the validator's order.
    pub fn check_args(&self, args: &Value) -> Vec<ArgsProblem> {
        self.validator
            .iter_errors(args)
            .map(|e| ArgsProblem { pointer: e.instance_path().to_string(), message: e.to_string() })
            .collect()
    }
}

/// Where the validator looks actions up.
pub trait ActionCatalog {
    /// The entry for `name`, if registered.
    fn get(&self, name: &str) -> Option<&CatalogEntry>;
    /// Every registered name, sorted (used for did-you-mean hints).
    fn names(&self) -> Vec<&str>;
    /// Whether recipient `id` exists: `None` when this catalog does not know the recipients (offline
    /// validation), so the validator does not check them.
    fn recipient_exists(&self, _id: &str) -> Option<bool> {
        None
    }
}

/// A fixed set of actions.
#[derive(Debug, Default)]
pub struct StaticCatalog {
    entries: BTreeMap<String, CatalogEntry>,
}

impl StaticCatalog {
    /// A catalog of the given specs.
    ///
    /// # Errors
    /// [`SchemaError`] for the first spec whose args schema does not compile.
    pub fn new(specs: impl IntoIterator<Item = ActionSpec>) -> Result<Self, SchemaError> {
        let mut entries = BTreeMap::new();
        for spec in specs {
            entries.insert(spec.name.clone(), CatalogEntry::new(spec)?);
        }
        Ok(Self { entries })
    }

    /// Cairn's built-in actions: `noop`, `sleep`, `condition.eval`, `http.request`, `weather.forecast`,
    /// `notify.send`, `llm.chat`, `event.wait`.
    pub fn builtin() -> Self {
        // The built-in schemas are constants checked by the tests below, so compilation cannot fail at run time.
        Self::new(builtin_specs()).unwrap_or_default()
    }
}

impl ActionCatalog for StaticCatalog {
    fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.entries.get(name)
    }
    fn names(&self) -> Vec<&str> {
        self.entries.keys().map(String::as_str).collect()
    }
}

fn spec(name: &str, description: &str, effect: Effect, args_schema: Value, output_schema: Value) -> ActionSpec {
    ActionSpec {
        name: name.into(),
        version: "1".into(),
        description: description.into(),
        args_schema,
        output_schema,
        effect,
        grounded_args: Vec::new(),
        recipient_args: Vec::new(),
        example_output: None,
    }
}

/// The args of `notify.send` as the validator knows them, without a worker or with one: its worker registers
/// this schema as it is.
pub fn notify_args_schema() -> Value {
    let channel = json!({"enum": crate::recipient::ChannelType::names()});
    json!({"type": "object", "required": ["text"], "properties": {
        "text": {"type": "string"}, "title": {"type": "string"},
        "to": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "channels": {"type": "array", "items": channel},
        "success_policy": {"anyOf": [{"enum": ["all", "any"]},
            {"type": "object", "required": ["min"], "additionalProperties": false,
             "properties": {"min": {"type": "integer", "minimum": 1}}}]},
        "channel_retry": {"type": "object", "additionalProperties": false, "properties": {
            "delays_ms": {"type": "array", "maxItems": 10, "items": {"type": "integer", "minimum": 0, "maximum": 60000}}}}}})
}

/// Specs of the built-in actions (the worker issue implements them).
pub fn builtin_specs() -> Vec<ActionSpec> {
    let any_object = json!({"type": "object"});
    let mut weather = spec(
        "weather.forecast",
        "Daily forecast for a city and date: precipitation probability (%), temperatures (°C) and conditions.",
        Effect::Read,
        json!({"type": "object", "required": ["city"], "additionalProperties": false, "properties": {
            "city": {"type": "string", "minLength": 1},
            "date": {"type": "string", "description": "today, tomorrow or YYYY-MM-DD in the plan's time zone"},
            "latitude": {"type": "number"}, "longitude": {"type": "number"}}}),
        json!({"type": "object", "properties": {
            "city": {"type": "string"}, "date": {"type": "string"},
            "precipitation_probability": {"type": "number"}, "temperature_max": {"type": "number"},
            "temperature_min": {"type": "number"}, "conditions": {"type": "string"}}}),
    );
    weather.grounded_args = vec!["/city".into()];
    let mut notify = spec(
        "notify.send",
        "Deliver a message to recipients over their bound channels (telegram, email, slack, feishu, webhook, ntfy; \
         stdout and file for development); one delivery record per recipient and channel.",
        Effect::NonIdempotent,
        notify_args_schema(),
        json!({"type": "object", "properties": {"deliveries": {"type": "array"}}}),
    );
    notify.recipient_args = vec!["/to".into()];
    vec![
        spec("noop", "Echo the args as the output.", Effect::Read, any_object.clone(), any_object.clone()),
        spec(
            "sleep",
            "Wait for a duration, checkpointing progress.",
            Effect::Read,
            json!({"type": "object", "required": ["duration_ms"], "additionalProperties": false,
                   "properties": {"duration_ms": {"type": "integer", "minimum": 0}}}),
            any_object.clone(),
        ),
        spec(
            "condition.eval",
            "Evaluate a CEL expression; output {\"matched\": bool}.",
            Effect::Read,
            json!({"type": "object", "required": ["expr"], "additionalProperties": false, "properties": {
                "expr": {"type": "string", "minLength": 1}, "vars": {"type": "object"}}}),
            json!({"type": "object", "properties": {"matched": {"type": "boolean"}}}),
        ),
        spec(
            "http.request",
            "Make an HTTP request; sends the idempotency key as Idempotency-Key.",
            Effect::NonIdempotent,
            json!({"type": "object", "required": ["url"], "additionalProperties": false, "properties": {
                "method": {"enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]},
                "url": {"type": "string", "minLength": 1},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "body": true,
                "timeout_ms": {"type": "integer", "minimum": 1}}}),
            json!({"type": "object", "properties": {"status": {"type": "integer"}, "headers": {"type": "object"}, "body": true}}),
        ),
        weather,
        notify,
        spec(
            "llm.chat",
            "Chat completion against an OpenAI-compatible endpoint; output text and usage.",
            Effect::Read,
            json!({"type": "object", "properties": {
                "prompt": {"type": "string"}, "system": {"type": "string"}, "model": {"type": "string"},
                "messages": {"type": "array"}, "max_tokens": {"type": "integer", "minimum": 1},
                "temperature": {"type": "number", "minimum": 0}}}),
            json!({"type": "object", "properties": {"text": {"type": "string"}, "usage": {"type": "object"}}}),
        ),
        // Run by the orchestrator itself (no worker serves it): waits for `POST /v1/events`.
        spec(
            crate::event_wait::ACTION,
            "Wait for an external event (POST /v1/events) by name, optional key and CEL filter over its payload; \
             output: the matched payload.",
            Effect::Read,
            crate::event_wait::args_schema(),
            json!({"description": "the matched event's payload"}),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_schema_compiles() {
        for spec in builtin_specs() {
            let name = spec.name.clone();
            assert!(CatalogEntry::new(spec).is_ok(), "builtin `{name}` must compile");
        }
        assert_eq!(StaticCatalog::builtin().names().len(), builtin_specs().len());
    }

    #[test]
    fn args_problems_carry_pointers() {
        let catalog = StaticCatalog::builtin();
        let entry = catalog.get("sleep").expect("builtin");
        let problems = entry.check_args(&json!({"duration_ms": "soon"}));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].pointer, "/duration_ms");
    }
}
