//! Pass 4b: CEL expressions — every `when`, and the literal expressions in built-in actions' args.
//!
//! Each expression is bounded in length (`Limits::max_expression_bytes`) before anything reads it, then in depth
//! ([`crate::expression`]) before it is parsed, then compiled. An expression in args is checked only when it is
//! literal: one built by interpolation (`"$w.p >= 50"`) is known only at run time, where the worker compiles it
//! under the same depth bounds and fails the step with `invalid_args` if it is invalid.

use crate::condition::{Condition, ConditionError};
use crate::diagnostic::{Code, Diagnostic};
use crate::event_wait::{self, EventFilter};
use crate::expression;
use crate::placeholder::{Template, parse_template};
use crate::pointer;
use crate::validate::Limits;
use crate::validate::shape::Slot;

/// How an action's expression argument is compiled.
#[derive(Clone, Copy)]
enum Dialect {
    /// `condition.eval` `expr`: a condition over `input` (its `vars`), placeholders rewritten.
    Condition,
    /// `event.wait` `filter`: plain CEL over `payload`, `name` and `key`.
    EventFilter,
}

/// The built-in actions' args that hold CEL: (action, arg, dialect).
const EXPRESSION_ARGS: [(&str, &str, Dialect); 2] =
    [("condition.eval", "expr", Dialect::Condition), (event_wait::ACTION, "filter", Dialect::EventFilter)];

pub(crate) fn check(slots: &[Slot], limits: &Limits, out: &mut Vec<Diagnostic>) {
    for slot in slots {
        let Some(step) = &slot.step else { continue };
        if let Some(when) = &step.when {
            let at = pointer::step_field(slot.index, "when");
            if let Some(d) = check_when(when, &at, limits) {
                out.push(d.step(&step.id));
            }
        }
        for (action, arg, dialect) in EXPRESSION_ARGS {
            if step.action != action {
                continue;
            }
            let Some(serde_json::Value::String(text)) = step.args.get(arg) else { continue };
            let at = format!("{}/{arg}", pointer::step_field(slot.index, "args"));
            if let Some(d) = check_arg(text, dialect, &at, limits) {
                out.push(d.step(&step.id));
            }
        }
    }
}

fn check_when(when: &str, at: &str, limits: &Limits) -> Option<Diagnostic> {
    if let Some(d) = too_long(when, at, "`when`", limits) {
        return Some(d);
    }
    match Condition::compile(when) {
        Ok(_) => None,
        Err(ConditionError::TooComplex { bound, .. }) => Some(too_deep(&bound, at, "`when`")),
        Err(e) => {
            let hint = "e.g. `steps.rainy.output.matched` or `steps.weather.output.precipitation_probability >= 50`";
            Some(
                Diagnostic::error(Code::InvalidWhen, at, format!("`when` is not a valid CEL expression: {e}"))
                    .hint(hint),
            )
        }
    }
}

fn check_arg(text: &str, dialect: Dialect, at: &str, limits: &Limits) -> Option<Diagnostic> {
    if let Some(d) = too_long(text, at, "the expression", limits) {
        return Some(d);
    }
    // Only a literal is known now; `$$` stands for `$` in it, as the worker will see it.
    let Ok(Template::Literal(expr)) = parse_template(text) else { return None };
    let problem = match dialect {
        Dialect::Condition => match Condition::compile(&expr) {
            Ok(_) => return None,
            Err(ConditionError::TooComplex { bound, .. }) => return Some(too_deep(&bound, at, "the expression")),
            Err(e) => e.to_string(),
        },
        Dialect::EventFilter => {
            if let Err(bound) = expression::check(&expr) {
                return Some(too_deep(&bound, at, "the filter"));
            }
            EventFilter::compile(&expr).err()?
        }
    };
    Some(Diagnostic::error(Code::InvalidExpression, at, problem).hint("fix the CEL syntax at the reported position"))
}

fn too_long(text: &str, at: &str, what: &str, limits: &Limits) -> Option<Diagnostic> {
    (text.len() > limits.max_expression_bytes).then(|| {
        Diagnostic::limit_exceeded(
            at,
            &format!("{what} is too long (bytes)"),
            "max_expression_bytes",
            limits.max_expression_bytes,
            text.len(),
        )
        .hint("move data into `vars` or the run input, and keep the expression short")
    })
}

fn too_deep(bound: &expression::BoundError, at: &str, what: &str) -> Diagnostic {
    let (max, found) = bound.values();
    Diagnostic::limit_exceeded(at, &format!("{what} nests too deeply"), bound.limit_name(), max, found)
        .hint("split the expression into several steps or simpler conditions")
}
