//! Run-time resolution of `args` against the run input and finished steps' outputs (contract §3, C04, C09).
//!
//! Resolution never invents a value: a missing key, an index out of range, a path through a scalar, or a
//! producer that was skipped, failed or has not finished is a [`ResolveError`], not `null` or `""`. The
//! orchestrator resolves a step's args only after deciding that the step will run (its `when` is true and no
//! ancestor was skipped), so a skipped producer normally skips its consumers before resolution is reached (C09).

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::parse::{RawPiece, scan};
use super::render::push_segment;
use super::{RefObject, Reference, Root, SyntaxError};

/// The failure code a step gets when its args cannot be resolved (contract §3). Resolution is deterministic, so
/// this failure is not retried.
pub const FAILURE_CODE: &str = "placeholder_unresolved";

/// What a step id stands for at resolution time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Producer<'a> {
    /// The step succeeded with this output.
    Output(&'a Value),
    /// The step was skipped (false `when`, or a skipped ancestor): it has no output.
    Skipped,
    /// The step failed, timed out or was cancelled: it has no output.
    Failed,
    /// The step has not finished, or no such step exists in the run.
    Pending,
}

impl<'a> Producer<'a> {
    /// A step's outcome as placeholders see it: its output once it succeeded (`null` when it has none), skipped,
    /// failed (failed or cancelled), and pending in every other status (`outcome_unknown` included).
    #[must_use]
    pub fn of(status: crate::state::StepStatus, output: Option<&'a Value>) -> Producer<'a> {
        use crate::state::StepStatus;
        static NULL: Value = Value::Null;
        match status {
            StepStatus::Succeeded => Producer::Output(output.unwrap_or(&NULL)),
            StepStatus::Skipped => Producer::Skipped,
            StepStatus::Failed | StepStatus::Cancelled => Producer::Failed,
            _ => Producer::Pending,
        }
    }
}

/// The values placeholders read: the run input and each step's outcome.
pub trait Scope {
    /// The run input (`$input…`); `null` when the run has none.
    fn input(&self) -> &Value;
    /// The outcome of step `step_id` (`$<step_id>…`).
    fn producer(&self, step_id: &str) -> Producer<'_>;
}

/// Why one placeholder could not be resolved, without saying where it was written (see [`ResolveError`]).
///
/// Serialises as an object tagged with its [`code`](ResolveErrorKind::code), e.g.
/// `{"code": "missing_key", "key": "precip", …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum ResolveErrorKind {
    /// An object along the path lacks the key.
    MissingKey {
        /// The key that is absent.
        key: String,
        /// The object that lacks it, rendered as a placeholder (e.g. `$weather.output`).
        at: String,
        /// The keys the object does have, in document order.
        available: Vec<String>,
        /// The closest available key when one is near (edit distance), as a hint.
        suggestion: Option<String>,
    },
    /// An index is at or past the end of an array (C04 chooses an error over AWS's `null`).
    IndexOutOfRange {
        /// The requested index.
        index: usize,
        /// The array's length.
        len: usize,
        /// The array, rendered as a placeholder.
        at: String,
    },
    /// A field was read from a non-object or an index from a non-array.
    NotAContainer {
        /// The value the segment was applied to, rendered as a placeholder.
        at: String,
        /// The segment as written canonically, e.g. `.value` or `[0]`.
        segment: String,
        /// `object` for a field, `array` for an index.
        expected: &'static str,
        /// The JSON type found: `null`, `boolean`, `number`, `string`, `array` or `object`.
        found: &'static str,
    },
    /// The producing step was skipped, so it has no output.
    ProducerSkipped {
        /// The producing step.
        step_id: String,
    },
    /// The producing step failed, so it has no output.
    ProducerFailed {
        /// The producing step.
        step_id: String,
    },
    /// The producing step has not finished (or does not exist): validation should have prevented this.
    ProducerPending {
        /// The producing step.
        step_id: String,
    },
    /// The placeholder is malformed.
    #[serde(rename = "placeholder_syntax")]
    Syntax(SyntaxError),
}

impl ResolveErrorKind {
    /// Stable code: `missing_key`, `index_out_of_range`, `not_a_container`, `producer_skipped`,
    /// `producer_failed`, `producer_pending` or `placeholder_syntax`.
    pub fn code(&self) -> &'static str {
        match self {
            ResolveErrorKind::MissingKey { .. } => "missing_key",
            ResolveErrorKind::IndexOutOfRange { .. } => "index_out_of_range",
            ResolveErrorKind::NotAContainer { .. } => "not_a_container",
            ResolveErrorKind::ProducerSkipped { .. } => "producer_skipped",
            ResolveErrorKind::ProducerFailed { .. } => "producer_failed",
            ResolveErrorKind::ProducerPending { .. } => "producer_pending",
            ResolveErrorKind::Syntax(_) => "placeholder_syntax",
        }
    }

    /// Whether the object form's `default` replaces the value on this error: missing key, index out of range,
    /// skipped or failed producer (not a type mismatch, a pending producer or bad syntax, which are plan bugs).
    pub fn default_applies(&self) -> bool {
        matches!(
            self,
            ResolveErrorKind::MissingKey { .. }
                | ResolveErrorKind::IndexOutOfRange { .. }
                | ResolveErrorKind::ProducerSkipped { .. }
                | ResolveErrorKind::ProducerFailed { .. }
        )
    }
}

impl fmt::Display for ResolveErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveErrorKind::MissingKey { key, at, available, suggestion } => {
                write!(f, "{at} has no key \"{key}\"")?;
                const SHOWN: usize = 20;
                if available.is_empty() {
                    f.write_str(" (it is an empty object)")?;
                } else {
                    let listed: Vec<&str> = available.iter().take(SHOWN).map(String::as_str).collect();
                    let more = if available.len() > SHOWN { ", …" } else { "" };
                    write!(f, " (keys: {}{more})", listed.join(", "))?;
                }
                if let Some(s) = suggestion {
                    write!(f, "; did you mean \"{s}\"?")?;
                }
                Ok(())
            }
            ResolveErrorKind::IndexOutOfRange { index, len, at } => {
                write!(f, "index {index} is out of range: {at} has {len} element(s)")
            }
            ResolveErrorKind::NotAContainer { at, segment, expected, found } => write!(
                f,
                "cannot read {segment} of {at}: it is {}, not {}",
                with_article(found),
                with_article(expected)
            ),
            ResolveErrorKind::ProducerSkipped { step_id } => {
                write!(f, "step \"{step_id}\" was skipped, so it has no output")
            }
            ResolveErrorKind::ProducerFailed { step_id } => {
                write!(f, "step \"{step_id}\" failed, so it has no output")
            }
            ResolveErrorKind::ProducerPending { step_id } => write!(
                f,
                "step \"{step_id}\" has not finished (a placeholder may only name an ancestor through depends_on)"
            ),
            ResolveErrorKind::Syntax(e) => write!(f, "{e}"),
        }
    }
}

/// A placeholder in `args` that could not be resolved: which one, where, and why.
///
/// Displays as `placeholder "$weather.output.precip" at /body/f: $weather.output has no key "precip" (keys:
/// summary, city)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("placeholder \"{placeholder}\" at {}: {kind}", if arg_path.is_empty() { "the args root" } else { arg_path })]
pub struct ResolveError {
    /// The placeholder as written (`$weather.output.precip`, `${w.a}`, the `$ref` string, or the whole leaf for
    /// a syntax error).
    pub placeholder: String,
    /// RFC 6901 pointer to the leaf relative to `args`, e.g. `/body/f` (empty for `args` itself).
    pub arg_path: String,
    /// What went wrong (boxed to keep `Result<Value, ResolveError>` small).
    pub kind: Box<ResolveErrorKind>,
}

/// Replaces every placeholder in `args` (rules: module docs) and returns the resolved copy.
///
/// Object keys and non-string scalars are copied unchanged. The first failing placeholder in document order is
/// returned as the error.
pub fn resolve_args(args: &Value, scope: &dyn Scope) -> Result<Value, ResolveError> {
    resolve_value(args, scope, &mut String::new())
}

/// Follows one reference to the value it names, borrowed from the scope.
///
/// Errors: the producer is skipped, failed or pending; or a segment meets a missing key, an index past the end,
/// or a value of the wrong type. A present `null` is a value like any other.
pub fn resolve_reference<'s>(reference: &Reference, scope: &'s dyn Scope) -> Result<&'s Value, ResolveErrorKind> {
    let mut current = match &reference.root {
        Root::Input => scope.input(),
        Root::Step(id) => match scope.producer(id) {
            Producer::Output(v) => v,
            Producer::Skipped => {
                return Err(ResolveErrorKind::ProducerSkipped { step_id: id.clone() });
            }
            Producer::Failed => {
                return Err(ResolveErrorKind::ProducerFailed { step_id: id.clone() });
            }
            Producer::Pending => {
                return Err(ResolveErrorKind::ProducerPending { step_id: id.clone() });
            }
        },
    };
    for (depth, segment) in reference.path.iter().enumerate() {
        let at = || Reference { root: reference.root.clone(), path: reference.path[..depth].to_vec() }.render();
        current = match (segment, current) {
            (super::Segment::Field(key), Value::Object(map)) => match map.get(key) {
                Some(v) => v,
                None => {
                    let available: Vec<String> = map.keys().cloned().collect();
                    return Err(ResolveErrorKind::MissingKey {
                        suggestion: suggest(key, &available),
                        key: key.clone(),
                        at: at(),
                        available,
                    });
                }
            },
            (super::Segment::Index(index), Value::Array(items)) => match items.get(*index) {
                Some(v) => v,
                None => {
                    return Err(ResolveErrorKind::IndexOutOfRange { index: *index, len: items.len(), at: at() });
                }
            },
            (segment, other) => {
                let mut text = String::new();
                push_segment(&mut text, segment);
                let expected = match segment {
                    super::Segment::Field(_) => "object",
                    super::Segment::Index(_) => "array",
                };
                return Err(ResolveErrorKind::NotAContainer {
                    at: at(),
                    segment: text,
                    expected,
                    found: type_name(other),
                });
            }
        };
    }
    Ok(current)
}

fn resolve_value(value: &Value, scope: &dyn Scope, pointer: &mut String) -> Result<Value, ResolveError> {
    match value {
        Value::String(s) => resolve_string(s, scope, pointer),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&i.to_string());
                out.push(resolve_value(item, scope, pointer)?);
                pointer.truncate(len);
            }
            Ok(Value::Array(out))
        }
        Value::Object(map) => {
            if let Some(form) = RefObject::of(map) {
                return resolve_ref_object(&form, scope, pointer);
            }
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, item) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&crate::pointer::escape_token(key));
                out.insert(key.clone(), resolve_value(item, scope, pointer)?);
                pointer.truncate(len);
            }
            Ok(Value::Object(out))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(value.clone()),
    }
}

fn resolve_string(s: &str, scope: &dyn Scope, pointer: &str) -> Result<Value, ResolveError> {
    let fail = |placeholder: &str, kind| ResolveError {
        placeholder: placeholder.to_owned(),
        arg_path: pointer.to_owned(),
        kind: Box::new(kind),
    };
    let pieces = scan(s).map_err(|e| fail(s, ResolveErrorKind::Syntax(e)))?;
    if let [RawPiece::Ref { reference, .. }] = pieces.as_slice() {
        return resolve_reference(reference, scope).cloned().map_err(|kind| fail(s, kind));
    }
    let mut out = String::with_capacity(s.len());
    for piece in &pieces {
        match piece {
            RawPiece::Text(text) => out.push_str(text),
            RawPiece::Ref { reference, span } => match resolve_reference(reference, scope) {
                Ok(Value::String(text)) => out.push_str(text),
                Ok(other) => out.push_str(&other.to_string()),
                Err(kind) => return Err(fail(s.get(span.clone()).unwrap_or(s), kind)),
            },
        }
    }
    Ok(Value::String(out))
}

fn resolve_ref_object(form: &RefObject<'_>, scope: &dyn Scope, pointer: &str) -> Result<Value, ResolveError> {
    let fail = |kind| ResolveError { placeholder: form.text(), arg_path: pointer.to_owned(), kind: Box::new(kind) };
    let reference = form.parse().map_err(|e| fail(ResolveErrorKind::Syntax(e)))?;
    match (resolve_reference(&reference, scope), form.default) {
        (Ok(v), _) => Ok(v.clone()),
        (Err(kind), Some(default)) if kind.default_applies() => Ok(default.clone()),
        (Err(kind), _) => Err(fail(kind)),
    }
}

/// The closest key to `key`, if it is within a third of the key's length in edits (at least one edit).
fn suggest(key: &str, available: &[String]) -> Option<String> {
    let limit = (key.chars().count() / 3).max(1);
    available
        .iter()
        .map(|k| (strsim::levenshtein(key, k), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

/// JSON type name of a value, for messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A JSON type name for a sentence: `null`, `a number`, `an object`.
fn with_article(type_name: &str) -> String {
    match type_name {
        "null" => "null".to_owned(),
        t if t.starts_with(['a', 'o']) => format!("an {t}"),
        t => format!("a {t}"),
    }
}
