//! Pass 1: the document against the plan model, one step at a time.
//!
//! The header (everything but `steps`) and each step are deserialized separately so a malformed step yields
//! its own diagnostic and the other steps are still checked. A malformed step keeps a [`Slot`] with the id and
//! `depends_on` read leniently from the raw JSON, so graph checks still see it.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::diagnostic::{Code, Diagnostic, did_you_mean};
use crate::plan::{PLAN_VERSION, Plan, Step};
use crate::pointer;
use crate::validate::Limits;

/// One entry of `steps`, typed when it deserialized.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// Position in `steps`.
    pub index: usize,
    /// The id, from the typed step or read leniently.
    pub id: Option<String>,
    /// `depends_on` entries, from the typed step or read leniently (non-strings dropped).
    pub depends_on: Vec<String>,
    /// The typed step, when it deserialized.
    pub step: Option<Step>,
}

/// The document split into a typed header and step slots.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub header: Plan,
    pub slots: Vec<Slot>,
}

impl Parsed {
    /// The plan, if every step deserialized; defaults applied.
    pub fn into_plan(self) -> Option<Plan> {
        let mut plan = self.header;
        plan.steps = self.slots.into_iter().map(|s| s.step).collect::<Option<Vec<_>>>()?;
        plan.apply_defaults();
        Some(plan)
    }
}

/// Reads the document; `None` when it is not a plan at all (not an object, or no usable `steps` array).
pub(crate) fn read(document: &Value, limits: &Limits, out: &mut Vec<Diagnostic>) -> Option<Parsed> {
    let Some(root) = document.as_object() else {
        out.push(Diagnostic::error(Code::InvalidField, "", "a plan must be a JSON object with a `steps` array"));
        return None;
    };
    let mut header_doc = root.clone();
    let steps_raw = header_doc.insert("steps".into(), Value::Array(Vec::new()));
    let header: Option<Plan> = typed(&Value::Object(header_doc), "", out);
    let steps_raw = match steps_raw {
        Some(Value::Array(items)) => items,
        Some(other) => {
            let msg = format!("`steps` must be an array of steps, found {}", type_name(&other));
            out.push(Diagnostic::error(Code::InvalidField, "/steps", msg));
            return None;
        }
        None => {
            out.push(
                Diagnostic::error(Code::InvalidField, "", "missing field `steps`")
                    .hint("add `\"steps\": [{\"id\": \"…\", \"action\": \"…\"}]`"),
            );
            return None;
        }
    };
    // A broken header is already reported; keep checking the steps against what of it still reads.
    let header = header.unwrap_or_else(|| lenient_header(root));
    check_version(&header, out);
    if steps_raw.is_empty() {
        out.push(Diagnostic::error(Code::NoSteps, "/steps", "a plan needs at least one step"));
    }
    if steps_raw.len() > limits.max_steps {
        let msg = format!("the plan has {} steps; the limit is {}", steps_raw.len(), limits.max_steps);
        let hint = "split the work into several plans, or raise the configured step limit";
        out.push(Diagnostic::error(Code::TooManySteps, "/steps", msg).hint(hint));
    }
    let slots = steps_raw.iter().enumerate().map(|(index, raw)| slot(index, raw, out)).collect();
    Some(Parsed { header, slots })
}

/// The header's fields that deserialize on their own (the others left at their defaults), so that one typo in
/// the header does not hide the steps' problems. Only used after the header's own diagnostic was reported.
fn lenient_header(root: &serde_json::Map<String, Value>) -> Plan {
    fn field<T: DeserializeOwned>(root: &serde_json::Map<String, Value>, name: &str) -> Option<T> {
        root.get(name).and_then(|v| serde_json::from_value(v.clone()).ok())
    }
    Plan {
        version: field(root, "version"),
        goal: field(root, "goal"),
        context: field(root, "context").unwrap_or_default(),
        input: root.get("input").cloned(),
        defaults: field(root, "defaults"),
        steps: Vec::new(),
    }
}

fn check_version(header: &Plan, out: &mut Vec<Diagnostic>) {
    if let Some(version) = &header.version
        && version != PLAN_VERSION
    {
        let msg = format!("unsupported plan version `{version}`");
        out.push(Diagnostic::error(Code::UnsupportedVersion, "/version", msg).hint(format!("use `{PLAN_VERSION}`")));
    }
}

fn slot(index: usize, raw: &Value, out: &mut Vec<Diagnostic>) -> Slot {
    let base = pointer::step(index);
    let step: Option<Step> = typed(raw, &base, out);
    let lenient_id = || {
        let obj = raw.as_object()?;
        obj.get("id").or_else(|| obj.get("step_id"))?.as_str().map(str::to_owned)
    };
    let lenient_deps = || {
        raw.get("depends_on")
            .and_then(Value::as_array)
            .map(|deps| deps.iter().filter_map(|d| d.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    match step {
        Some(step) => Slot { index, id: Some(step.id.clone()), depends_on: step.depends_on.clone(), step: Some(step) },
        None => Slot { index, id: lenient_id(), depends_on: lenient_deps(), step: None },
    }
}

/// Deserializes `value` as `T`, turning a serde error into one diagnostic under `base`.
fn typed<T: DeserializeOwned>(value: &Value, base: &str, out: &mut Vec<Diagnostic>) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(v) => Some(v),
        Err(err) => {
            let mut tokens: Vec<String> = err.path().iter().filter_map(segment_token).collect();
            let message = err.inner().to_string();
            let unknown = unknown_field(&message);
            // serde_path_to_error already ends the path with the unknown key; add it only when it does not.
            if let Some((field, _)) = &unknown
                && tokens.last() != Some(field)
            {
                tokens.push(field.clone());
            }
            let at = pointer::join(base, &tokens);
            out.push(serde_diagnostic(&at, &tokens, message, unknown, value));
            None
        }
    }
}

fn segment_token(segment: &serde_path_to_error::Segment) -> Option<String> {
    use serde_path_to_error::Segment;
    match segment {
        Segment::Seq { index } => Some(index.to_string()),
        Segment::Map { key } => Some(key.clone()),
        Segment::Enum { variant } => Some(variant.clone()),
        Segment::Unknown => None,
    }
}

/// `unknown field `x`, expected one of `a`, `b`` → (`x`, [`a`, `b`]).
fn unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let end = rest.find('`')?;
    let expected = rest[end..].split('`').skip(2).step_by(2).map(str::to_owned).collect();
    Some((rest[..end].to_owned(), expected))
}

fn serde_diagnostic(
    at: &str,
    tokens: &[String],
    message: String,
    unknown: Option<(String, Vec<String>)>,
    value: &Value,
) -> Diagnostic {
    let step_id = at.starts_with("/steps/").then(|| value.get("id").and_then(Value::as_str)).flatten();
    let diagnostic = if let Some((field, expected)) = unknown {
        let d = Diagnostic::error(Code::UnknownField, at, message);
        match did_you_mean(&field, expected.iter().map(String::as_str)) {
            Some(s) => d.hint(format!("did you mean `{s}`?")),
            None => d.hint("remove the field; unknown fields are errors because they are usually typos"),
        }
    } else {
        let code = tokens
            .iter()
            .find_map(|t| match t.as_str() {
                "retry" => Some(Code::RetryInvalid),
                "timeout_ms" | "heartbeat_timeout_ms" => Some(Code::TimeoutOutOfRange),
                "approval" => Some(Code::InvalidApproval),
                _ => None,
            })
            .unwrap_or(Code::InvalidField);
        Diagnostic::error(code, at, message)
    };
    match step_id {
        Some(id) => diagnostic.step(id),
        None => diagnostic,
    }
}

/// JSON type name for messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
