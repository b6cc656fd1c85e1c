//! No input makes the plan parser, the validator, the placeholder code or the CEL handling panic or overflow the
//! stack (issue "Hardening": F1, F3 and the property test of its acceptance).
//!
//! The generators build text from the characters these parsers care about and repeat random fragments thousands of
//! times, so operator chains, selector and index chains, brackets and nested documents reach depths far past every
//! bound. Tests run on the test harness's threads (2 MiB stacks, a tokio worker's size): an overflow aborts the
//! binary and fails the run. `PROPTEST_CASES` raises the number of cases (default 48 each, to keep CI brief).

use cairn_core::catalog::StaticCatalog;
use cairn_core::condition::{Condition, ConditionScope, rewrite_placeholders};
use cairn_core::document::{self, Format};
use cairn_core::event_wait::EventFilter;
use cairn_core::placeholder::{Producer, Scope, parse_reference, parse_template, references, resolve_args};
use cairn_core::validate::{Limits, validate_text, validate_value};
use proptest::prelude::*;
use serde_json::{Value, json};

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// A short fragment of CEL-ish text: operators, selectors, brackets, quotes, placeholders, macros.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(" + 1".to_owned()),
        Just(".x".to_owned()),
        Just("[0]".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just("[".to_owned()),
        Just("{".to_owned()),
        Just("!".to_owned()),
        Just(" && ".to_owned()),
        Just(" ? 1 : ".to_owned()),
        Just(" in ".to_owned()),
        Just(".all(x, ".to_owned()),
        Just("'".to_owned()),
        Just("\"".to_owned()),
        Just("${".to_owned()),
        Just("}".to_owned()),
        Just("$w.output.a".to_owned()),
        Just("steps.a.output".to_owned()),
        r#"[a-z0-9 $.{}\[\]()'"\\+\-*/<>=!&|?:,雨]{0,6}"#,
    ]
}

/// Text of up to thousands of fragments, each repeated up to 3,000 times: long chains as well as noise.
fn hostile_text() -> impl Strategy<Value = String> {
    prop::collection::vec((fragment(), 1usize..3_000), 1..6)
        .prop_map(|parts| parts.into_iter().map(|(f, n)| f.repeat(n)).collect())
}

/// A document nested `depth` levels deep in arrays or objects, in JSON or YAML flow syntax.
fn nested_document() -> impl Strategy<Value = String> {
    (0usize..20_000, any::<bool>()).prop_map(|(depth, arrays)| {
        if arrays {
            format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
        } else {
            "{\"a\": ".repeat(depth) + "1" + &"}".repeat(depth)
        }
    })
}

struct Outputs(Value);

impl Scope for Outputs {
    fn input(&self) -> &Value {
        &self.0
    }

    fn producer(&self, step_id: &str) -> Producer<'_> {
        if step_id == "w" { Producer::Output(&self.0) } else { Producer::Pending }
    }
}

fn plan_with(when: &str, arg: &str) -> Value {
    json!({"goal": "g", "context": {"source_text": arg}, "steps": [
        {"id": "w", "action": "noop", "args": {}},
        {"id": "c", "action": "condition.eval", "depends_on": ["w"], "when": when, "args": {"expr": arg}},
        {"id": "e", "action": "event.wait", "depends_on": ["w"], "args": {"name": "n", "filter": when}},
        {"id": "n", "action": "notify.send", "depends_on": ["c"], "args": {"text": arg, "to": arg}}
    ]})
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn conditions_compile_and_evaluate_or_fail_cleanly(text in hostile_text()) {
        let _ = rewrite_placeholders(&text);
        if let Ok(condition) = Condition::compile(&text) {
            let _ = condition.step_references();
            let scope = ConditionScope { input: json!({"a": [1, 2]}), steps: serde_json::Map::new() };
            let _ = condition.evaluate(&scope);
        }
        if let Ok(filter) = EventFilter::compile(&text) {
            let _ = filter.matches("n", None, &json!({"a": 1}));
        }
    }

    #[test]
    fn placeholders_parse_and_resolve_or_fail_cleanly(text in hostile_text()) {
        let _ = parse_template(&text);
        let _ = parse_reference(&text);
        let args = json!({"x": text, "y": [text], "z": {"$ref": text, "default": 0}});
        let _ = references(&args);
        let _ = resolve_args(&args, &Outputs(json!({"a": {"b": [1]}, "output": 2})));
    }

    #[test]
    fn plans_of_hostile_text_validate_without_crashing(when in hostile_text(), arg in hostile_text()) {
        let plan = plan_with(&when, &arg);
        let limits = Limits { max_expression_bytes: 1 << 20, ..Limits::default() };
        let report = validate_value(&plan, &StaticCatalog::builtin(), &limits);
        prop_assert!(report.valid || !report.diagnostics.is_empty(), "an invalid plan says why");
        let _ = validate_text(&plan.to_string(), Format::Json, &StaticCatalog::builtin(), &Limits::default());
    }

    #[test]
    fn deeply_nested_documents_are_parse_errors_not_crashes(text in nested_document(), yaml in any::<bool>()) {
        let format = if yaml { Format::Yaml } else { Format::Json };
        if let Ok(value) = document::parse(&text, format) {
            let _ = validate_value(&json!({"steps": [{"id": "a", "action": "noop", "args": {"v": value}}]}),
                &StaticCatalog::builtin(), &Limits::default());
        }
        let _ = validate_text(&format!("{{\"steps\": [{{\"id\": \"a\", \"action\": \"noop\", \"args\": {text}}}]}}"),
            format, &StaticCatalog::builtin(), &Limits::default());
    }
}
