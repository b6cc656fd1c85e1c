//! `when` conditions in CEL (architecture §2 `when`, §5): compilation, step references, evaluation.
//!
//! A condition is a [CEL](https://cel.dev) expression (crate `cel`, standard library and macros such as `has`,
//! `exists`, `all`) over two variables:
//! - `input`: the run input (JSON);
//! - `steps`: a map from step id to `{"output": <JSON>, "status": "succeeded" | "skipped" | …}`.
//!
//! It must evaluate to a bool: `false` makes the step `skipped`. Reading a missing key is an error (CEL
//! semantics; guard with `has(...)`), never a silent `null`.
//!
//! **Placeholder shorthand.** Plans also use the placeholder grammar (architecture §3) in conditions, so before
//! compiling, [`rewrite_placeholders`] turns every `$` reference outside a string literal into CEL (`$` is not
//! valid CEL, so this is unambiguous):
//! - `$input.x` → `input.x`;
//! - `$weather.output.x` → `steps.weather.output.x`, and the shorthand `$w.x` → `steps.w.output.x`
//!   (so `$w.status` means the *output's* `status` field; write `steps.w.status` for the step status);
//! - `$w` → `steps.w.output`; `${w.x}` → `(steps.w.output.x)`;
//! - an id holding `-` becomes an index: `$fetch-data.n` → `steps["fetch-data"].output.n` (a trailing `-` is
//!   read as a minus sign: `$a-1` is step `a-1`, `$a- 1` is step `a` minus one).
//!
//! Text inside `'…'`, `"…"`, triple-quoted and raw string literals is never touched.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, MapExpr, StructExpr, operators};
use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value};

use crate::expression::{self, BoundError};

/// The standard CEL environment, built once and shared by every evaluation.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// How much of an expression errors quote.
pub const QUOTED_CHARS: usize = 200;

fn quoted(expr: &str) -> String {
    expression::excerpt(expr, QUOTED_CHARS).into_owned()
}

/// A compiled `when` expression.
#[derive(Debug)]
pub struct Condition {
    source: String,
    cel_source: String,
    program: Program,
}

/// The values a condition sees.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConditionScope {
    /// The run input, bound to `input`.
    pub input: serde_json::Value,
    /// Step id → `{"output": …, "status": "succeeded"}` (any JSON object), bound to `steps`.
    pub steps: serde_json::Map<String, serde_json::Value>,
}

/// Why a condition could not be compiled or evaluated. Every variant carries the expression as written (its first
/// [`QUOTED_CHARS`] characters, so a long expression never makes a long message). None is retryable: evaluation
/// is deterministic, so the same expression and scope always fail the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// The expression is not valid CEL; `line` and `column` (1-based, in the CEL text after the placeholder
    /// rewrite) locate the first problem when the parser reports it.
    #[error("invalid condition `{expr}`: {message}")]
    Syntax {
        /// The expression as written.
        expr: String,
        /// The parser's message, with its position.
        message: String,
        /// 1-based line of the first error, if known.
        line: Option<usize>,
        /// 1-based column of the first error, if known.
        column: Option<usize>,
    },
    /// Evaluation failed: a missing key or step, a type mismatch, a division by zero, …
    #[error("condition `{expr}` could not be evaluated: {message}")]
    Evaluation {
        /// The expression as written.
        expr: String,
        /// The CEL runtime error.
        message: String,
    },
    /// The expression exceeds a bound of [`crate::expression`] (depth, brackets, nested comprehensions) and was
    /// not parsed: parsing it could exhaust the stack.
    #[error("condition `{expr}` is too complex: {bound}")]
    TooComplex {
        /// The expression as written.
        expr: String,
        /// The bound exceeded.
        bound: BoundError,
    },
    /// The expression evaluated to something other than a bool.
    #[error("condition `{expr}` must be true or false, but evaluated to a {found}")]
    NotBool {
        /// The expression as written.
        expr: String,
        /// The CEL type it produced (`int`, `string`, `map`, …).
        found: String,
    },
}

impl Condition {
    /// Rewrites placeholders ([`rewrite_placeholders`]), checks the result against the bounds of
    /// [`crate::expression`], and compiles it as CEL.
    ///
    /// # Errors
    /// [`ConditionError::TooComplex`] before parsing an expression that nests too deeply;
    /// [`ConditionError::Syntax`] with the parser's message and, when known, the line and column.
    pub fn compile(expr: &str) -> Result<Self, ConditionError> {
        let cel_source = rewrite_placeholders(expr);
        expression::check(&cel_source).map_err(|bound| ConditionError::TooComplex { expr: quoted(expr), bound })?;
        let program = Program::compile(&cel_source).map_err(|errors| {
            let first = errors.errors.first();
            let position = |n: isize| usize::try_from(n).ok().filter(|n| *n > 0);
            let line = first.and_then(|e| position(e.pos.0));
            let column = first.and_then(|e| position(e.pos.1));
            let mut message = first.map_or_else(|| errors.to_string(), |e| e.msg.clone());
            if let (Some(line), Some(column)) = (line, column) {
                message.push_str(&format!(" at line {line}, column {column}"));
            }
            if cel_source != expr {
                message.push_str(&format!(" of `{}`", expression::excerpt(&cel_source, QUOTED_CHARS)));
            }
            ConditionError::Syntax { expr: quoted(expr), message, line, column }
        })?;
        Ok(Self { source: expr.to_owned(), cel_source, program })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The CEL text actually compiled (after [`rewrite_placeholders`]).
    pub fn cel_source(&self) -> &str {
        &self.cel_source
    }

    /// Ids of the steps the expression reads: `X` in `steps.X` and `steps["X"]` (including inside `has(…)`,
    /// macros and nested calls, and from rewritten placeholders), deduplicated, in order of first appearance.
    /// References inside a macro whose loop variable is itself named `steps` are not steps and are skipped.
    pub fn step_references(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_references(self.program.expression(), false, &mut out);
        out
    }

    /// Evaluates the condition with `input` and `steps` bound from `scope`.
    ///
    /// JSON maps to CEL as: integers → `int` (or `uint` above `i64::MAX`), other numbers → `double`, strings,
    /// bools, `null`, arrays → lists, objects → maps. CEL compares `int`, `uint` and `double` with each other,
    /// so `steps.w.output.p >= 0.5` works whether `p` is `1` or `0.7`.
    ///
    /// # Errors
    /// [`ConditionError::Evaluation`] when CEL fails (e.g. a missing key), [`ConditionError::NotBool`] when the
    /// result is not a bool.
    pub fn evaluate(&self, scope: &ConditionScope) -> Result<bool, ConditionError> {
        let mut context = Context::with_env(Arc::clone(&ENV));
        context.add_variable_from_value("input", json_to_cel(&scope.input));
        context.add_variable_from_value("steps", object_to_cel(&scope.steps));
        match self.program.execute(&context) {
            Ok(Value::Bool(value)) => Ok(value),
            Ok(other) => {
                Err(ConditionError::NotBool { expr: quoted(&self.source), found: other.type_of().to_string() })
            }
            Err(error) => Err(ConditionError::Evaluation { expr: quoted(&self.source), message: error.to_string() }),
        }
    }
}

/// Rewrites placeholder references (`$input.x`, `$step.output.x`, `$step.x`, `${step.x}`) outside string
/// literals into CEL, as described in the [module docs](self). Text that is not a placeholder (a lone `$`) is
/// left for the CEL parser to reject. Linear in the length of `expr`; never panics.
pub fn rewrite_placeholders(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len() + 16);
    // The next `}` at or after `at`, found once and reused: searching again for every `${` would make the
    // rewrite quadratic in a text of many `${`.
    let mut next_close: Option<usize> = None;
    let mut at = 0;
    while let Some(c) = expr[at..].chars().next() {
        let (replacement, len) = match c {
            '\'' | '"' => (None, expression::literal_len(expr, at)),
            '$' => {
                if next_close.is_none_or(|close| close < at) {
                    next_close = expr[at..].find('}').map(|i| at + i).or(Some(usize::MAX));
                }
                let close = next_close.filter(|&c| c != usize::MAX).map(|c| c - at);
                placeholder(&expr[at..], close).map_or((None, 1), |(cel, len)| (Some(cel), len))
            }
            _ => (None, c.len_utf8()),
        };
        out.push_str(replacement.as_deref().unwrap_or(&expr[at..at + len]));
        at += len;
    }
    out
}

/// The CEL for the placeholder at the start of `text` (which starts with `$`) and the bytes it replaces; `close`
/// is the offset in `text` of the first `}`, if any.
fn placeholder(text: &str, close: Option<usize>) -> Option<(String, usize)> {
    if let Some(inner) = text.strip_prefix("${") {
        let close = close?.checked_sub(2)?;
        let body = &inner[..close];
        if body.contains('$') {
            return None;
        }
        let (cel, used) = placeholder(&format!("${body}"), None)?;
        let path = body.get(used - 1..)?;
        let path_chars = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']');
        let valid = path.chars().all(path_chars);
        return valid.then(|| (format!("({cel}{path})"), close + 3));
    }
    let after_dollar = &text[1..];
    if !after_dollar.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    let id_len =
        after_dollar.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).unwrap_or(after_dollar.len());
    let id = after_dollar[..id_len].trim_end_matches('-');
    let mut used = 1 + id.len();
    if id == "input" {
        return Some(("input".to_owned(), used));
    }
    let rest = &text[used..];
    if let Some(after) = rest.strip_prefix(".output")
        && !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    {
        used += ".output".len();
    }
    let step = if id.contains('-') { format!("steps[\"{id}\"]") } else { format!("steps.{id}") };
    Some((format!("{step}.output"), used))
}

/// Depth-first walk collecting `steps.X` / `steps["X"]` ids; `shadowed` when a macro rebinds `steps`.
fn collect_references(node: &IdedExpr, shadowed: bool, out: &mut Vec<String>) {
    let mut push = |id: &str| {
        if !shadowed && !out.iter().any(|seen| seen == id) {
            out.push(id.to_owned());
        }
    };
    let is_steps = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(name) if name == "steps");
    match &node.expr {
        Expr::Select(select) => {
            if is_steps(&select.operand) {
                push(&select.field);
            }
            collect_references(&select.operand, shadowed, out);
        }
        Expr::Call(call) => {
            if (call.func_name == operators::INDEX || call.func_name == operators::OPT_INDEX)
                && let [base, key] = call.args.as_slice()
                && is_steps(base)
                && let Expr::Literal(LiteralValue::String(id)) = &key.expr
            {
                push(id.inner());
            }
            for child in call.target.iter().map(|t| &**t).chain(&call.args) {
                collect_references(child, shadowed, out);
            }
        }
        Expr::Comprehension(c) => {
            collect_references(&c.iter_range, shadowed, out);
            collect_references(&c.accu_init, shadowed, out);
            let binds = [Some(&c.iter_var), c.iter_var2.as_ref(), Some(&c.accu_var)];
            let inner = shadowed || binds.into_iter().flatten().any(|v| v == "steps");
            for child in [&c.loop_cond, &c.loop_step, &c.result] {
                collect_references(child, inner, out);
            }
        }
        Expr::List(list) => {
            for element in &list.elements {
                collect_references(element, shadowed, out);
            }
        }
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            for entry in entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        collect_references(&e.key, shadowed, out);
                        collect_references(&e.value, shadowed, out);
                    }
                    EntryExpr::StructField(f) => collect_references(&f.value, shadowed, out),
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// JSON → CEL value, as documented on [`Condition::evaluate`].
fn json_to_cel(value: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match value {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            (None, None) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::String(Arc::new(s.clone())),
        J::Array(items) => Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        J::Object(map) => object_to_cel(map),
    }
}

fn object_to_cel(map: &serde_json::Map<String, serde_json::Value>) -> Value {
    let entries: HashMap<Key, Value> =
        map.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), json_to_cel(v))).collect();
    Value::Map(Map { map: Arc::new(entries) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope() -> ConditionScope {
        let steps = json!({
            "weather": {"output": {"precip_prob": 0.7, "city": "Wuhan", "hourly": [1, 2]}, "status": "succeeded"},
            "rainy": {"output": {"matched": true}, "status": "succeeded"},
            "a": {"output": null, "status": "skipped"},
            "fetch-data": {"output": {"n": 3}, "status": "succeeded"},
        });
        let serde_json::Value::Object(steps) = steps else { unreachable!("an object literal") };
        ConditionScope { input: json!({"city": "Wuhan", "threshold": 50}), steps }
    }

    fn eval(expr: &str) -> Result<bool, ConditionError> {
        Condition::compile(expr)?.evaluate(&scope())
    }

    #[test]
    fn invalid_cel_is_a_syntax_error_with_a_position() {
        let err = Condition::compile("steps.a.output.x >= ").expect_err("incomplete");
        let ConditionError::Syntax { line, column, ref message, .. } = err else { panic!("{err:?}") };
        assert_eq!((line, column), (Some(1), Some(21)));
        assert!(message.contains("line 1, column 21"), "{message}");
        assert!(err.to_string().contains("steps.a.output.x >= "), "{err}");
        for bad in ["", "(", "a b", "$", "1 +\n(2", "'unclosed"] {
            assert!(matches!(Condition::compile(bad), Err(ConditionError::Syntax { .. })), "{bad:?}");
        }
    }

    #[test]
    fn step_references_are_found_everywhere_in_order_and_deduplicated() {
        let c = Condition::compile(
            r#"has(steps.b.output.x) && steps.a.status == "ok" && size(steps["c"].output.list) > 0
               && steps.a.output.y in [steps.d.output, {"k": steps.e}] && steps.b.output.z.exists(v, v > steps.f.n)
               && $g.h > 0 && [1].exists(steps, steps.not_a_step)"#,
        )
        .expect("valid");
        assert_eq!(c.step_references(), ["b", "a", "c", "d", "e", "f", "g"]);
        let hyphen = Condition::compile("$fetch-data.n > 2 && input.x == 'steps.fake'").expect("valid");
        assert_eq!(hyphen.step_references(), ["fetch-data"]);
    }

    #[test]
    fn evaluation_reads_input_outputs_and_statuses() {
        assert_eq!(eval("steps.rainy.output.matched"), Ok(true));
        assert_eq!(eval("steps.weather.output.precip_prob >= 0.5"), Ok(true));
        assert_eq!(eval("steps.weather.output.precip_prob * 100.0 >= double(input.threshold)"), Ok(true));
        assert_eq!(eval("input.threshold > 60"), Ok(false));
        assert_eq!(eval(r#"steps.a.status == "skipped""#), Ok(true));
        assert_eq!(eval("steps.weather.status == 'skipped'"), Ok(false));
        assert_eq!(eval("has(steps.weather.output.wind)"), Ok(false));
        assert_eq!(eval("size(steps.weather.output.hourly) == 2"), Ok(true));
    }

    #[test]
    fn a_non_bool_result_is_an_error_naming_the_type() {
        let err = eval("steps.weather.output.precip_prob").expect_err("double");
        let expr = "steps.weather.output.precip_prob".to_owned();
        assert_eq!(err, ConditionError::NotBool { expr, found: "float".to_owned() });
    }

    #[test]
    fn a_missing_key_is_an_evaluation_error_quoting_the_expression() {
        let err = eval("steps.weather.output.wind > 3").expect_err("missing key");
        assert!(matches!(err, ConditionError::Evaluation { .. }), "{err:?}");
        assert!(err.to_string().contains("steps.weather.output.wind > 3") && err.to_string().contains("wind"));
        assert!(matches!(eval("steps.nope.status == 'x'"), Err(ConditionError::Evaluation { .. })));
    }

    #[test]
    fn placeholders_are_rewritten_to_cel() {
        let cases = [
            ("$weather.output.precip_prob >= 0.5", "steps.weather.output.precip_prob >= 0.5"),
            ("$w.x", "steps.w.output.x"),
            ("$w.outputs", "steps.w.output.outputs"),
            ("$w", "steps.w.output"),
            ("$input.city == 'Wuhan'", "input.city == 'Wuhan'"),
            ("${w.x[0]} > 1", "(steps.w.output.x[0]) > 1"),
            ("$fetch-data.n", "steps[\"fetch-data\"].output.n"),
            ("$a- 1", "steps.a.output- 1"),
            ("$ 1 $$", "$ 1 $$"),
        ];
        for (input, expected) in cases {
            assert_eq!(rewrite_placeholders(input), expected, "{input}");
        }
        assert_eq!(eval("$weather.output.precip_prob >= 0.5 && $rainy.matched"), Ok(true));
        assert_eq!(eval("$input.city == $weather.city"), Ok(true));
        assert_eq!(eval("$fetch-data.n == 3"), Ok(true));
    }

    #[test]
    fn dollars_inside_string_literals_are_untouched() {
        let literals = [
            r#"input.city == "$weather.city""#,
            r"input.city == '$w.x \' $y'",
            r#"input.city == '''it's $w''' && r'\' == "$z""#,
            r#"b"$w" == b'$v'"#,
        ];
        for text in literals {
            assert_eq!(rewrite_placeholders(text), text);
        }
        assert_eq!(rewrite_placeholders(r"r'\' + $w"), r"r'\' + steps.w.output");
        assert_eq!(eval(r#"$input.city + "$weather.city" == "Wuhan$weather.city""#), Ok(true));
    }
}
