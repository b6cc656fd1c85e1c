//! Pass 6: actions — registered, args valid against the action's JSON Schema, grounded args present in the
//! request text.
//!
//! Args holding placeholders cannot be checked until they are resolved at dispatch, so schema violations at a
//! placeholder leaf (or inside a `{"$ref"}` object) are ignored here; everything around them is still checked.
//! Grounding compares literal strings only, case-insensitively after NFC normalisation: it stops a model from
//! inventing a city or a recipient the user never mentioned, not from paraphrasing.

use std::collections::HashSet;

use unicode_normalization::UnicodeNormalization;

use crate::catalog::ActionCatalog;
use crate::diagnostic::{Code, Diagnostic, did_you_mean};
use crate::placeholder;
use crate::pointer;
use crate::recipient;
use crate::validate::shape::Parsed;

pub(crate) fn check(parsed: &mut Parsed, catalog: &dyn ActionCatalog, out: &mut Vec<Diagnostic>) {
    let source_text = parsed.header.context.source_text.as_deref().map(fold);
    let default_idempotent = parsed.header.defaults.as_ref().and_then(|d| d.idempotent);
    for slot in &mut parsed.slots {
        let Some(step) = &mut slot.step else { continue };
        let Some(entry) = catalog.get(&step.action) else {
            let at = pointer::step_field(slot.index, "action");
            let msg = format!("step `{}` uses action `{}`, which is not registered", step.id, step.action);
            let d = Diagnostic::error(Code::UnknownAction, at, msg).step(&step.id);
            let names = catalog.names();
            out.push(match did_you_mean(&step.action, names.iter().copied()) {
                Some(s) => d.hint(format!("did you mean `{s}`?")),
                None => d.hint(format!("registered actions: {}", names.join(", "))),
            });
            continue;
        };
        let args_at = pointer::step_field(slot.index, "args");
        // A set: a leaf of n placeholders is found n times.
        let placeholder_leaves: HashSet<String> =
            placeholder::references(&step.args).into_iter().map(|f| f.pointer).collect();
        for problem in entry.check_args(&step.args) {
            // The problem's pointer or one of its prefixes (`/a/b` under the leaf `/a`) holds a placeholder.
            let mut prefixes = problem.pointer.match_indices('/').map(|(i, _)| &problem.pointer[..i]);
            let unresolved = placeholder_leaves.contains(&problem.pointer)
                || prefixes.any(|prefix| !prefix.is_empty() && placeholder_leaves.contains(prefix));
            if unresolved {
                continue;
            }
            let msg = format!("args of `{}` do not fit action `{}`: {}", step.id, step.action, problem.message);
            let hint = "see the action's args schema (`cairn schema actions`, or GET /v1/actions on the server)";
            out.push(
                Diagnostic::error(Code::ArgsSchema, format!("{args_at}{}", problem.pointer), msg)
                    .step(&step.id)
                    .hint(hint),
            );
        }
        if let Some(source) = &source_text {
            for grounded in &entry.spec().grounded_args {
                let Some(serde_json::Value::String(value)) = step.args.pointer(grounded) else {
                    continue;
                };
                if placeholder_leaves.contains(grounded) || source.contains(&fold(value)) {
                    continue;
                }
                let msg = format!("`{value}` (args{grounded} of `{}`) does not appear in context.source_text", step.id);
                let hint = "use a value the request actually mentions, or ask the user";
                out.push(
                    Diagnostic::error(Code::UngroundedArg, format!("{args_at}{grounded}"), msg)
                        .step(&step.id)
                        .hint(hint),
                );
            }
        }
        for at in &entry.spec().recipient_args {
            if let Some(to) = step.args.pointer(at) {
                let found = Found { to, at, args_at: &args_at, step_id: &step.id };
                recipients(&found, &placeholder_leaves, catalog, out);
            }
        }
        if step.idempotent.is_none() && default_idempotent.is_none() {
            step.idempotent = Some(entry.spec().effect.is_idempotent());
        }
    }
}

/// A step's recipient argument: its value, its pointer inside args, and where args are in the plan.
#[derive(Clone, Copy)]
struct Found<'a> {
    to: &'a serde_json::Value,
    at: &'a str,
    args_at: &'a str,
    step_id: &'a str,
}

/// Literal recipient ids at `at` (one id or a list) that break the id rules or do not exist. Placeholders are
/// resolved at dispatch, where an unknown recipient fails its delivery instead.
fn recipients(
    found: &Found<'_>,
    placeholder_leaves: &HashSet<String>,
    catalog: &dyn ActionCatalog,
    out: &mut Vec<Diagnostic>,
) {
    let Found { to, at, args_at, step_id } = *found;
    let Some(ids) = recipient::ids_of(to) else { return };
    if ids.len() > recipient::MAX_RECIPIENTS_PER_STEP {
        let limit = recipient::MAX_RECIPIENTS_PER_STEP;
        let msg = format!("step `{step_id}` names {} recipients; the limit is {limit}", ids.len());
        out.push(Diagnostic::error(Code::LimitExceeded, format!("{args_at}{at}"), msg).step(step_id));
        return;
    }
    for (index, id) in ids.into_iter().enumerate() {
        let leaf = if to.is_string() { at.to_owned() } else { format!("{at}/{index}") };
        if placeholder_leaves.contains(&leaf) {
            continue;
        }
        let pointer = format!("{args_at}{leaf}");
        let problem = match recipient::check_id(id) {
            Err(e) => {
                Some((e.to_string(), "recipient ids are 1 to 128 characters of A-Z, a-z, 0-9, `_.:@-`".to_owned()))
            }
            Ok(()) if catalog.recipient_exists(id) == Some(false) => Some((
                format!("step `{step_id}` sends to recipient `{id}`, which does not exist"),
                format!(
                    "create it first: `cairn recipient set {id} --channel telegram:chat_id=…` or PUT /v1/recipients/{id}"
                ),
            )),
            Ok(()) => None,
        };
        if let Some((msg, hint)) = problem {
            out.push(Diagnostic::error(Code::UnknownRecipient, pointer, msg).step(step_id).hint(hint));
        }
    }
}

/// NFC, lower case, whitespace collapsed: the form grounded values are compared in.
fn fold(text: &str) -> String {
    let lowered: String = text.nfc().flat_map(char::to_lowercase).collect();
    lowered.split_whitespace().collect::<Vec<_>>().join(" ")
}
