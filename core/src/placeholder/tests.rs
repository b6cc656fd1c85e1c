//! Behaviour tests for placeholders: the C04, C06, C09 and C26 cases and the substitution rules.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

/// A scope built from literals: `steps` maps ids to an output, or to `"SKIPPED"` / `"FAILED"` markers.
struct TestScope {
    input: Value,
    outputs: BTreeMap<String, Value>,
    skipped: Vec<&'static str>,
    failed: Vec<&'static str>,
}

impl TestScope {
    fn new(input: Value, outputs: &[(&str, Value)]) -> Self {
        TestScope {
            input,
            outputs: outputs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
            skipped: Vec::new(),
            failed: Vec::new(),
        }
    }
}

impl Scope for TestScope {
    fn input(&self) -> &Value {
        &self.input
    }

    fn producer(&self, step_id: &str) -> Producer<'_> {
        if self.skipped.contains(&step_id) {
            return Producer::Skipped;
        }
        if self.failed.contains(&step_id) {
            return Producer::Failed;
        }
        self.outputs.get(step_id).map_or(Producer::Pending, Producer::Output)
    }
}

fn c04_scope() -> TestScope {
    let weather = json!({"precip_prob": 0.7, "uv": null, "hourly": [{"t": "08:00", "p": 0.6}]});
    TestScope::new(json!({"city": "Wuhan"}), &[("weather", weather)])
}

fn kind_of(args: Value, scope: &TestScope) -> ResolveErrorKind {
    match resolve_args(&args, scope) {
        Err(e) => *e.kind,
        Ok(v) => panic!("expected an error, resolved to {v}"),
    }
}

#[test]
fn c04_a_missing_key_is_an_error_naming_the_placeholder_and_the_arg_path() {
    let err = resolve_args(&json!({"text": "$weather.output.precipitation"}), &c04_scope()).expect_err("missing");
    assert_eq!(err.placeholder, "$weather.output.precipitation");
    assert_eq!(err.arg_path, "/text");
    assert_eq!(err.kind.code(), "missing_key");
    let msg = err.to_string();
    assert!(msg.starts_with("placeholder \"$weather.output.precipitation\" at /text: "), "{msg}");
    assert!(msg.contains("$weather.output has no key \"precipitation\" (keys: precip_prob, uv, hourly)"), "{msg}");
}

#[test]
fn c04_an_index_out_of_range_is_an_error_not_null() {
    let kind = kind_of(json!({"p": "$weather.output.hourly[5].p"}), &c04_scope());
    let want = ResolveErrorKind::IndexOutOfRange { index: 5, len: 1, at: "$weather.output.hourly".into() };
    assert_eq!(kind, want);
}

#[test]
fn c04_a_path_through_a_number_is_not_a_container() {
    let kind = kind_of(json!({"p": "$weather.output.precip_prob.value"}), &c04_scope());
    assert_eq!(kind.code(), "not_a_container");
    assert!(kind.to_string().contains("it is a number, not an object"), "{kind}");
    let kind = kind_of(json!({"p": "$weather.output.hourly.p"}), &c04_scope());
    assert!(matches!(kind, ResolveErrorKind::NotAContainer { found: "array", expected: "object", .. }));
    let kind = kind_of(json!({"p": "$weather.uv.x"}), &c04_scope());
    assert!(kind.to_string().ends_with("it is null, not an object"), "{kind}");
    let kind = kind_of(json!({"p": "$weather[0]"}), &c04_scope());
    assert!(matches!(kind, ResolveErrorKind::NotAContainer { found: "object", expected: "array", .. }));
}

#[test]
fn c04_a_present_index_resolves_to_a_json_number_and_a_present_null_stays_null() {
    let out = resolve_args(&json!({"p": "$weather.output.hourly[0].p", "uv": "$weather.output.uv"}), &c04_scope());
    assert_eq!(out, Ok(json!({"p": 0.6, "uv": null})));
}

#[test]
fn c06_plan_a_literals_survive_and_the_whole_placeholder_becomes_a_number() {
    let scope = TestScope::new(Value::Null, &[("weather", json!({"precip_prob": 0.7}))]);
    let args = json!({
        "method": "POST",
        "headers": {"X-Price": "$5.00"},
        "body": {"a": "costs $5 today", "b": "$$weather.output.precip_prob", "c": "US$",
                 "d": "$", "e": "price $ 3", "f": "$weather.output.precip_prob"}
    });
    let want = json!({
        "method": "POST",
        "headers": {"X-Price": "$5.00"},
        "body": {"a": "costs $5 today", "b": "$weather.output.precip_prob", "c": "US$",
                 "d": "$", "e": "price $ 3", "f": 0.7}
    });
    assert_eq!(resolve_args(&args, &scope), Ok(want));
}

#[test]
fn c06_plan_b_an_unknown_step_is_reported_by_references_and_never_becomes_empty() {
    let args = json!({"text": "hello $nobody.output.x"});
    let found = references(&args);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].pointer, "/text");
    assert_eq!(found[0].placeholder, "$nobody.output.x");
    assert_eq!(found[0].result.as_ref().map(Reference::step_id), Ok(Some("nobody")));
    let kind = kind_of(args, &c04_scope());
    assert_eq!(kind, ResolveErrorKind::ProducerPending { step_id: "nobody".into() });
}

#[test]
fn c09_a_skipped_producer_is_an_error_unless_the_object_form_has_a_default() {
    let mut scope = TestScope::new(Value::Null, &[]);
    scope.skipped.push("summarize");
    let err = resolve_args(&json!({"s": "$summarize.output.text"}), &scope).expect_err("skipped");
    assert_eq!(err.kind.code(), "producer_skipped");
    assert!(err.to_string().contains("step \"summarize\" was skipped"), "{err}");
    let with_default = json!({"s": {"$ref": "summarize.output.text", "default": "no alerts"}});
    assert_eq!(resolve_args(&with_default, &scope), Ok(json!({"s": "no alerts"})));
    let without = json!({"s": {"$ref": "summarize.output.text"}});
    assert_eq!(kind_of(without, &scope).code(), "producer_skipped");
}

#[test]
fn the_object_form_default_covers_missing_paths_and_failed_producers_but_not_type_errors() {
    let mut scope = c04_scope();
    scope.failed.push("broken");
    let args = json!({
        "a": {"$ref": "weather.output.nope", "default": 0},
        "b": {"$ref": "$weather.hourly[9]", "default": null},
        "c": {"$ref": "broken", "default": {"x": 1}},
        "d": {"$ref": "weather.output.precip_prob", "default": 0},
    });
    assert_eq!(resolve_args(&args, &scope), Ok(json!({"a": 0, "b": null, "c": {"x": 1}, "d": 0.7})));
    let err = resolve_args(&json!({"x": {"$ref": "weather.uv.deep", "default": 1}}), &scope).expect_err("type");
    assert_eq!((err.kind.code(), err.placeholder.as_str()), ("not_a_container", "weather.uv.deep"));
}

#[test]
fn an_object_with_ref_and_other_keys_is_an_ordinary_object() {
    let args = json!({"schema": {"$ref": "#/defs/a", "title": "$input.city"}});
    assert_eq!(resolve_args(&args, &c04_scope()), Ok(json!({"schema": {"$ref": "#/defs/a", "title": "Wuhan"}})));
}

#[test]
fn a_non_string_ref_is_a_syntax_error() {
    let found = references(&json!({"x": {"$ref": 5}}));
    assert_eq!(found.len(), 1);
    assert!(found[0].result.is_err());
    assert_eq!(kind_of(json!({"x": {"$ref": 5}}), &c04_scope()).code(), "placeholder_syntax");
}

#[test]
fn shorthand_fields_input_and_odd_keys_resolve() {
    let scope = TestScope::new(
        json!({"city": "上海", "weird key": {"a\"b": [10, 20]}}),
        &[("check", json!({"matched": true}))],
    );
    let args = json!({"m": "$check.matched", "c": "$input.city", "o": r#"${input["weird key"]["a\"b"][1]}"#});
    assert_eq!(resolve_args(&args, &scope), Ok(json!({"m": true, "c": "上海", "o": 20})));
}

#[test]
fn whole_values_keep_their_type_and_interpolation_uses_compact_json() {
    let scope = TestScope::new(Value::Null, &[("w", json!({"n": 3, "o": {"k": [1, "x"]}, "s": "hi", "z": null}))]);
    let args = json!({"obj": "${w.o}", "all": "$w", "t": "n=$w.n o=${w.o} s=$w.s z=$w.z!"});
    let want = json!({
        "obj": {"k": [1, "x"]},
        "all": {"n": 3, "o": {"k": [1, "x"]}, "s": "hi", "z": null},
        "t": "n=3 o={\"k\":[1,\"x\"]} s=hi z=null!"
    });
    assert_eq!(resolve_args(&args, &scope), Ok(want));
}

#[test]
fn object_keys_are_never_substituted_and_arrays_are_walked() {
    let args = json!({"$input.city": ["$input.city", 1, true, null, {"$$": "$$"}]});
    let out = resolve_args(&args, &c04_scope());
    assert_eq!(out, Ok(json!({"$input.city": ["Wuhan", 1, true, null, {"$$": "$"}]})));
}

#[test]
fn errors_inside_arrays_and_escaped_keys_carry_rfc_6901_pointers() {
    let err = resolve_args(&json!({"a/b": [0, "x $weather.nope"]}), &c04_scope()).expect_err("missing");
    assert_eq!(err.arg_path, "/a~1b/1");
    assert_eq!(err.placeholder, "$weather.nope");
    let err = resolve_args(&json!({"t": "ok ${w"}), &c04_scope()).expect_err("syntax");
    assert_eq!((err.kind.code(), err.placeholder.as_str()), ("placeholder_syntax", "ok ${w"));
}

#[test]
fn references_lists_every_placeholder_with_its_pointer() {
    let args = json!({"t": "$a.x and ${b} and $input.y", "n": {"k": [{"$ref": "c.z", "default": 1}]}, "bad": "${"});
    let found = references(&args);
    let summary: Vec<(&str, &str, bool, bool)> =
        found.iter().map(|f| (f.pointer.as_str(), f.placeholder.as_str(), f.has_default, f.result.is_ok())).collect();
    let want = vec![
        ("/t", "$a.x", false, true),
        ("/t", "${b}", false, true),
        ("/t", "$input.y", false, true),
        ("/n/k/0", "c.z", true, true),
        ("/bad", "${", false, false),
    ];
    assert_eq!(summary, want);
}

#[test]
fn error_kinds_serialise_with_their_code() {
    let kind = ResolveErrorKind::ProducerFailed { step_id: "w".into() };
    assert_eq!(serde_json::to_value(&kind).ok(), Some(json!({"code": "producer_failed", "step_id": "w"})));
    let syntax = ResolveErrorKind::Syntax(SyntaxError { offset: 2, message: "m".into() });
    let want = json!({"code": "placeholder_syntax", "offset": 2, "message": "m"});
    assert_eq!(serde_json::to_value(&syntax).ok(), Some(want));
}

#[test]
fn a_missing_key_close_to_a_real_one_gets_a_suggestion() {
    let kind = kind_of(json!({"p": "$weather.precip_prop"}), &c04_scope());
    assert!(kind.to_string().ends_with("did you mean \"precip_prob\"?"), "{kind}");
}

#[test]
fn c26_unicode_is_copied_byte_for_byte_through_interpolation() {
    let summary = "明天有雨 🌧\u{fe0f}，记得带伞";
    let scope = TestScope::new(Value::Null, &[("weather", json!({"summary": summary, "city": "上海"}))]);
    let long = "雨".repeat(5000);
    let args = json!({
        "text": "$weather.output.summary",
        "title": "天气：$weather.output.city ✅",
        "nfd": "e\u{301}",
        "rtl": "مطر $weather.city",
        "zwj": "👩\u{200d}💻",
        "long": long,
        "mixed": format!("{long}$weather.city{long}"),
    });
    let out = resolve_args(&args, &scope).expect("resolves");
    assert_eq!(out["text"].as_str().map(str::as_bytes), Some(summary.as_bytes()));
    assert_eq!(out["title"], "天气：上海 ✅");
    assert_eq!(out["nfd"].as_str().map(str::as_bytes), Some("e\u{301}".as_bytes()));
    assert_eq!(out["rtl"], "مطر 上海");
    assert_eq!(out["zwj"].as_str().map(str::as_bytes), Some("👩\u{200d}💻".as_bytes()));
    assert_eq!(out["long"].as_str(), Some(long.as_str()));
    assert_eq!(out["mixed"].as_str(), Some(format!("{long}上海{long}").as_str()));
}
