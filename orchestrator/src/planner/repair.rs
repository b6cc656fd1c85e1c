//! One round's check of the model's output, treated as untrusted input: refuse it when it is over the size
//! limit, parse it strictly (duplicate keys and trailing content are errors, as for any submitted document),
//! overwrite `context.source_text` and `context.timezone` with what the user actually said, validate, and turn
//! the diagnostics into feedback for the next round.
//!
//! Grounding gets one check beyond the validator's: the validator skips grounded args that are placeholders
//! (their value is unknown before the run), so a model could move an invented city into `input` and write
//! `"city": "$input.city"`. Such an arg is checked here with the input's literal value instead.

use cairn_core::catalog::ActionCatalog;
use cairn_core::diagnostic::{Code, Diagnostic};
use cairn_core::document::{self, Format};
use cairn_core::placeholder::{Root, Segment, Template, parse_template};
use cairn_core::pointer::escape_token;
use cairn_core::validate::{Limits, validate_value};
use serde_json::{Value, json};

use super::{ModelOutput, Round, prompt};

/// How much of an oversized output a round keeps, so a user can see what the model was doing.
const PREVIEW_BYTES: usize = 2048;

/// What a round's output is checked against.
pub struct Check<'a> {
    /// The request text, set as `context.source_text`.
    pub source_text: &'a str,
    /// The time zone, set as `context.timezone`.
    pub timezone: &'a str,
    /// The actions a plan may use.
    pub catalog: &'a (dyn ActionCatalog + Sync),
    /// Plan limits.
    pub limits: &'a Limits,
    /// Largest output accepted, in bytes.
    pub max_output_bytes: usize,
}

/// What to do after a round.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The draft is valid: this is the plan.
    Valid(Value),
    /// Ask again: the model's `answer` goes back as the assistant message, `feedback` as the user's reply.
    Repair {
        /// The model's text, as it wrote it.
        answer: String,
        /// The repair message with the diagnostics.
        feedback: String,
    },
    /// Stop: another round would not help (the output is over the size limit).
    Abort(String),
}

/// Checks one model output. Never panics, whatever the model wrote.
pub fn check(output: ModelOutput, check: &Check<'_>) -> (Round, Verdict) {
    let Some(text) = output.content.filter(|c| !c.trim().is_empty()) else {
        let message = match output.refusal {
            Some(refusal) => format!("the model refused instead of writing a plan: {refusal}"),
            None => "the model's answer has no content".to_owned(),
        };
        let diagnostic =
            Diagnostic::error(Code::ParseError, "", message).hint("answer with the plan as one JSON object");
        return repair(Value::String(String::new()), String::new(), vec![diagnostic]);
    };
    if text.len() > check.max_output_bytes {
        let message =
            format!("the model's output is {} bytes, over the limit of {} bytes", text.len(), check.max_output_bytes);
        let diagnostics = vec![Diagnostic::error(Code::ParseError, "", message.clone())];
        return (Round { draft: Value::String(preview(&text)), diagnostics }, Verdict::Abort(message));
    }
    let value = match document::parse(unfenced(&text), Format::Json) {
        Ok(value) => value,
        Err(failure) => {
            let diagnostic = Diagnostic::from(failure);
            return repair(Value::String(text.clone()), text, vec![diagnostic]);
        }
    };
    let draft = with_context(value, check);
    let mut diagnostics = validate_value(&draft, check.catalog, check.limits).diagnostics;
    diagnostics.extend(grounded_through_input(&draft, check));
    if diagnostics.iter().any(Diagnostic::is_error) {
        return repair(draft, text, diagnostics);
    }
    (Round { draft: draft.clone(), diagnostics }, Verdict::Valid(draft))
}

fn repair(draft: Value, answer: String, diagnostics: Vec<Diagnostic>) -> (Round, Verdict) {
    let feedback = prompt::repair_message(&diagnostics);
    (Round { draft, diagnostics }, Verdict::Repair { answer, feedback })
}

/// The text without a surrounding Markdown code fence, which some models add even when asked for JSON only.
/// Only the fence is removed; the JSON inside is parsed as strictly as any document.
fn unfenced(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else { return trimmed };
    let Some(body) = rest.strip_suffix("```") else { return trimmed };
    // Drop the info string (`json`) on the opening line.
    body.split_once('\n').map_or(body, |(_, inner)| inner).trim()
}

/// The first [`PREVIEW_BYTES`] of `text` (on a character boundary) and an ellipsis.
fn preview(text: &str) -> String {
    let mut end = PREVIEW_BYTES.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The draft with `context.source_text` and `context.timezone` set to the request's, whatever the model wrote:
/// grounding must be checked against what the user said, not what the model claims the user said.
fn with_context(mut value: Value, check: &Check<'_>) -> Value {
    if let Some(plan) = value.as_object_mut() {
        let context = plan.entry("context").or_insert_with(|| json!({}));
        if !context.is_object() {
            *context = json!({});
        }
        context["source_text"] = json!(check.source_text);
        context["timezone"] = json!(check.timezone);
    }
    value
}

/// `ungrounded_arg` for grounded args written as a whole `$input…` placeholder whose input value is a string
/// the request never mentions. The validator is asked again with those values in place, so the comparison
/// (case, Unicode normalisation, whitespace) is exactly the validator's.
fn grounded_through_input(draft: &Value, check: &Check<'_>) -> Vec<Diagnostic> {
    let (Some(steps), Some(input)) = (draft.get("steps").and_then(Value::as_array), draft.get("input")) else {
        return Vec::new();
    };
    let mut probe = draft.clone();
    let mut replaced: Vec<(String, String)> = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let action = step.get("action").and_then(Value::as_str).unwrap_or_default();
        let Some(entry) = check.catalog.get(action) else { continue };
        for grounded in &entry.spec().grounded_args {
            let at = format!("/steps/{index}/args{grounded}");
            let Some(Value::String(text)) = draft.pointer(&at) else { continue };
            let Ok(Template::Whole(reference)) = parse_template(text) else { continue };
            if reference.root != Root::Input {
                continue;
            }
            let Some(value @ Value::String(_)) = input.pointer(&input_pointer(&reference.path)) else { continue };
            if let Some(slot) = probe.pointer_mut(&at) {
                *slot = value.clone();
                replaced.push((at, text.clone()));
            }
        }
    }
    if replaced.is_empty() {
        return Vec::new();
    }
    validate_value(&probe, check.catalog, check.limits)
        .diagnostics
        .into_iter()
        .filter(|d| d.code == Code::UngroundedArg)
        .filter_map(|mut d| {
            let (_, placeholder) = replaced.iter().find(|(at, _)| *at == d.pointer)?;
            d.message = format!("{} (passed as `{placeholder}` from `input`)", d.message);
            Some(d)
        })
        .collect()
}

/// The JSON pointer into `input` of a placeholder path.
fn input_pointer(path: &[Segment]) -> String {
    path.iter()
        .map(|segment| match segment {
            Segment::Field(field) => format!("/{}", escape_token(field)),
            Segment::Index(index) => format!("/{index}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_answer_is_unwrapped_and_nothing_else_is_touched() {
        assert_eq!(unfenced("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(unfenced("  {\"a\":1} "), "{\"a\":1}");
        assert_eq!(unfenced("```{\"a\":1}"), "```{\"a\":1}", "an unclosed fence stays (and fails to parse)");
    }

    #[test]
    fn a_preview_cuts_on_a_character_boundary() {
        let text = "雨".repeat(PREVIEW_BYTES);
        let cut = preview(&text);
        assert!(cut.len() <= PREVIEW_BYTES + '…'.len_utf8(), "the preview is bounded");
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn input_paths_become_escaped_pointers() {
        let path = [Segment::Field("a/b".into()), Segment::Index(2)];
        assert_eq!(input_pointer(&path), "/a~1b/2");
    }
}
