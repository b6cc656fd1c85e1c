//! Validation diagnostics: `{severity, code, step_id, pointer, message, hint}` (contract §4).
//!
//! Codes are stable: scripts, the planner's repair loop and the docs key on them. Add codes; never rename one.

use serde::{Deserialize, Serialize};

/// How bad a diagnostic is. Any `error` makes a plan invalid; warnings never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The plan cannot run as written.
    Error,
    /// The plan can run, but probably not as intended (e.g. a repeated dependency).
    Warning,
}

/// Stable diagnostic codes. The serialized form (snake_case) is the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// The document is not well-formed JSON or YAML (message carries line and column).
    ParseError,
    /// One JSON/YAML object repeats a key; keeping either value would silently lose the other.
    DuplicateKey,
    /// A field has the wrong type, or a required field is missing.
    InvalidField,
    /// A field is not part of the plan format (usually a typo).
    UnknownField,
    /// `version` is present and is not `cairn/v1`.
    UnsupportedVersion,
    /// The plan has no steps.
    NoSteps,
    /// More steps than the configured maximum.
    TooManySteps,
    /// A step id does not match `[A-Za-z_][A-Za-z0-9_-]{0,63}`.
    InvalidStepId,
    /// A step id is one of `input`, `context`, `steps`, `run`.
    ReservedStepId,
    /// Two steps share an id (also after Unicode NFC normalisation).
    DuplicateStepId,
    /// `depends_on` names a step that does not exist.
    UnknownDependency,
    /// A step depends on itself.
    SelfDependency,
    /// `depends_on` lists the same step twice (warning; deduplicated).
    DuplicateDependency,
    /// The dependency graph has a cycle; the message lists the cycle path in order.
    Cycle,
    /// The action is not registered.
    UnknownAction,
    /// `args` do not satisfy the action's args JSON Schema.
    ArgsSchema,
    /// A placeholder is malformed.
    PlaceholderSyntax,
    /// A placeholder names a step that does not exist.
    PlaceholderUnknownStep,
    /// A placeholder (or a `when` reference) names a step that is not a transitive dependency.
    PlaceholderNotAncestor,
    /// `when` is not a valid CEL expression, or references an unknown or non-ancestor step.
    InvalidWhen,
    /// `not_before` or `context.now` cannot be parsed or resolved.
    InvalidTime,
    /// `context.timezone` (or a zone inside a time spec) is not an IANA time zone.
    InvalidTimezone,
    /// `timeout_ms` or `heartbeat_timeout_ms` is outside the allowed range.
    TimeoutOutOfRange,
    /// The retry policy is invalid (coefficient < 1, non-finite, zero intervals, max < initial, …).
    RetryInvalid,
    /// The approval block is invalid.
    InvalidApproval,
    /// A grounded argument's literal value does not appear in `context.source_text`.
    UngroundedArg,
    /// A recipient argument names a recipient that does not exist (or an id that breaks the id rules).
    UnknownRecipient,
    /// A size or nesting limit is exceeded (an expression's length or depth, placeholders in a string,
    /// dependency edges, …); [`Diagnostic::limit`] names the limit, its value and what the plan has.
    LimitExceeded,
    /// A CEL expression in a built-in action's args (`condition.eval` `expr`, `event.wait` `filter`) is invalid.
    InvalidExpression,
}

impl Code {
    /// The stable snake_case name, e.g. `duplicate_step_id`.
    pub fn as_str(self) -> &'static str {
        CODE_NAMES.iter().find(|(code, _)| *code == self).map_or("unknown", |(_, name)| *name)
    }
}

/// Every code with its stable name, in documentation order.
pub const CODE_NAMES: [(Code, &str); 29] = [
    (Code::ParseError, "parse_error"),
    (Code::DuplicateKey, "duplicate_key"),
    (Code::InvalidField, "invalid_field"),
    (Code::UnknownField, "unknown_field"),
    (Code::UnsupportedVersion, "unsupported_version"),
    (Code::NoSteps, "no_steps"),
    (Code::TooManySteps, "too_many_steps"),
    (Code::InvalidStepId, "invalid_step_id"),
    (Code::ReservedStepId, "reserved_step_id"),
    (Code::DuplicateStepId, "duplicate_step_id"),
    (Code::UnknownDependency, "unknown_dependency"),
    (Code::SelfDependency, "self_dependency"),
    (Code::DuplicateDependency, "duplicate_dependency"),
    (Code::Cycle, "cycle"),
    (Code::UnknownAction, "unknown_action"),
    (Code::ArgsSchema, "args_schema"),
    (Code::PlaceholderSyntax, "placeholder_syntax"),
    (Code::PlaceholderUnknownStep, "placeholder_unknown_step"),
    (Code::PlaceholderNotAncestor, "placeholder_not_ancestor"),
    (Code::InvalidWhen, "invalid_when"),
    (Code::InvalidTime, "invalid_time"),
    (Code::InvalidTimezone, "invalid_timezone"),
    (Code::TimeoutOutOfRange, "timeout_out_of_range"),
    (Code::RetryInvalid, "retry_invalid"),
    (Code::InvalidApproval, "invalid_approval"),
    (Code::UngroundedArg, "ungrounded_arg"),
    (Code::UnknownRecipient, "unknown_recipient"),
    (Code::LimitExceeded, "limit_exceeded"),
    (Code::InvalidExpression, "invalid_expression"),
];

/// One finding about a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Stable code.
    pub code: Code,
    /// The step concerned, when there is one.
    pub step_id: Option<String>,
    /// JSON pointer (RFC 6901) into the submitted document, e.g. `/steps/3/depends_on/0`; `""` is the root.
    pub pointer: String,
    /// What is wrong, naming the values involved.
    pub message: String,
    /// How to fix it, when a fix can be suggested.
    pub hint: Option<String>,
    /// For `cycle`: the step ids along the cycle, first id repeated at the end (`["b","c","d","b"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<Vec<String>>,
    /// For `limit_exceeded`: the limit, its value and what was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Limit>,
}

/// A limit a plan exceeds, as `limit_exceeded` reports it: `{"name": "max_expression_depth", "max": 128,
/// "found": 10001}`. `found` is at least the value counted when the check stopped (checks stop at the first
/// excess, so as not to read the rest of an oversized input).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// The limit's name, as the settings and the docs spell it (`max_expression_bytes`, `max_edges`, …).
    pub name: String,
    /// Its value.
    pub max: u64,
    /// What the plan has.
    pub found: u64,
}

impl Diagnostic {
    /// A new error diagnostic without step or hint.
    pub fn error(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            code,
            step_id: None,
            pointer: pointer.into(),
            message: message.into(),
            hint: None,
            cycle: None,
            limit: None,
        }
    }

    /// A `limit_exceeded` error: `what` exceeds the limit `name` (`max`), with `found`.
    pub fn limit_exceeded(pointer: impl Into<String>, what: &str, name: &str, max: usize, found: usize) -> Self {
        let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let message = format!("{what}: {found} exceeds the limit {name} = {max}");
        Self {
            limit: Some(Limit { name: name.to_owned(), max: as_u64(max), found: as_u64(found) }),
            ..Self::error(Code::LimitExceeded, pointer, message)
        }
    }

    /// A new warning diagnostic without step or hint.
    pub fn warning(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self { severity: Severity::Warning, ..Self::error(code, pointer, message) }
    }

    /// Sets the step id.
    pub fn step(mut self, step_id: impl Into<String>) -> Self {
        self.step_id = Some(step_id.into());
        self
    }

    /// Sets the hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// The closest candidate to `wanted` by Jaro–Winkler similarity, when it is close enough to suggest.
pub fn did_you_mean<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(wanted, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_serialized_name_in_the_table() {
        for (code, name) in CODE_NAMES {
            assert_eq!(serde_json::to_value(code).ok(), Some(serde_json::json!(name)), "{code:?}");
            assert_eq!(code.as_str(), name);
        }
    }

    #[test]
    fn did_you_mean_suggests_close_ids_only() {
        assert_eq!(did_you_mean("wether", ["weather", "notify"]), Some("weather"));
        assert_eq!(did_you_mean("zzz", ["weather", "notify"]), None);
    }
}
