//! Hostile plans are refused with `limit_exceeded` (or another diagnostic) and never crash the validator (issue
//! "Hardening", F1 and F3; the 1,000-step plan of 499,500 edges).
//!
//! Every test here runs the validator on a thread with a 2 MiB stack, the size of a tokio worker's: before the
//! bounds, the first three plans overflowed it and aborted the process.

#![allow(clippy::unwrap_used)]

use cairn_core::catalog::StaticCatalog;
use cairn_core::diagnostic::{Code, Diagnostic};
use cairn_core::document::Format;
use cairn_core::expression;
use cairn_core::validate::{Limits, Report, validate_text, validate_value};
use serde_json::{Value, json};

/// Validates on a thread with a tokio worker's stack; a stack overflow would abort the test binary.
fn validate_small_stack(plan: Value, limits: Limits) -> Report {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || validate_value(&plan, &StaticCatalog::builtin(), &limits))
        .unwrap()
        .join()
        .unwrap()
}

fn with_when(when: String) -> Value {
    json!({"goal": "g", "steps": [
        {"id": "b", "action": "noop", "args": {}},
        {"id": "a", "action": "noop", "args": {}, "depends_on": ["b"], "when": when}
    ]})
}

fn the_limit(report: &Report) -> &Diagnostic {
    assert!(!report.valid, "a plan over a limit is invalid");
    report
        .diagnostics
        .iter()
        .find(|d| d.code == Code::LimitExceeded)
        .unwrap_or_else(|| panic!("a limit_exceeded diagnostic is expected, got {:#?}", report.diagnostics))
}

#[test]
fn a_when_of_ten_thousand_terms_is_refused_by_its_depth_not_a_stack_overflow() {
    let when = format!("{} == 0", vec!["1"; 10_000].join(" + "));
    // 40 KB: over the default length limit too, so allow the length to show the depth bound at work.
    let limits = Limits { max_expression_bytes: 1 << 20, ..Limits::default() };

    let by_length = validate_small_stack(with_when(when.clone()), Limits::default());
    let report = validate_small_stack(with_when(when), limits);

    assert_eq!(the_limit(&by_length).limit.as_ref().unwrap().name, "max_expression_bytes");
    let d = the_limit(&report);
    assert_eq!(d.pointer, "/steps/1/when", "the diagnostic points at the `when`");
    assert_eq!(d.step_id.as_deref(), Some("a"));
    let limit = d.limit.as_ref().expect("the diagnostic names the limit");
    assert_eq!((limit.name.as_str(), limit.max), ("max_expression_depth", 128));
    assert!(limit.found > limit.max, "found {} is over the limit", limit.found);
    assert!(d.message.len() < 300, "the message does not quote the whole expression: {}", d.message);
}

#[test]
fn chained_selectors_and_indexes_are_refused_too() {
    for when in [format!("steps.b{} == 1", ".x".repeat(5_000)), format!("steps.b{} == 1", "[0]".repeat(20_000))] {
        let report =
            validate_small_stack(with_when(when), Limits { max_expression_bytes: 1 << 20, ..Limits::default() });

        let limit = the_limit(&report).limit.as_ref().unwrap();
        assert!(limit.name.starts_with("max_expression_"), "a depth bound refuses it: {limit:?}");
    }
}

#[test]
fn a_when_longer_than_max_expression_bytes_is_refused_before_it_is_read() {
    let limits = Limits { max_expression_bytes: 100, ..Limits::default() };

    let report = validate_small_stack(with_when(format!("{} == 0", vec!["1"; 40].join(" + "))), limits);

    let limit = the_limit(&report).limit.as_ref().unwrap();
    assert_eq!((limit.name.as_str(), limit.max, limit.found), ("max_expression_bytes", 100, 162));
}

#[test]
fn the_cli_sized_when_of_fifty_thousand_terms_is_refused_from_text_too() {
    let text = with_when(format!("{} == 0", vec!["1"; 50_000].join(" + "))).to_string();

    let report = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || validate_text(&text, Format::Json, &StaticCatalog::builtin(), &Limits::default()))
        .unwrap()
        .join()
        .unwrap();

    assert!(the_limit(&report).limit.is_some());
}

#[test]
fn a_literal_condition_eval_expression_is_compiled_at_submission() {
    let plan = |expr: &str| json!({"steps": [{"id": "c", "action": "condition.eval", "args": {"expr": expr, "vars": {"p": 1}}}]});

    let bad = validate_small_stack(plan("input.p >="), Limits::default());
    let deep = validate_small_stack(plan(&format!("{} == 0", vec!["1"; 10_000].join(" + "))), Limits::default());
    let good = validate_small_stack(plan("input.p >= 1"), Limits::default());

    let d = bad.diagnostics.iter().find(|d| d.code == Code::InvalidExpression).expect("invalid_expression");
    assert_eq!((d.pointer.as_str(), d.step_id.as_deref()), ("/steps/0/args/expr", Some("c")));
    assert_eq!(the_limit(&deep).pointer, "/steps/0/args/expr");
    assert!(good.valid, "a valid literal expression passes: {:#?}", good.diagnostics);
}

#[test]
fn an_interpolated_condition_eval_expression_is_left_to_the_worker() {
    let plan = json!({"steps": [
        {"id": "w", "action": "noop", "args": {}},
        {"id": "c", "action": "condition.eval", "depends_on": ["w"], "args": {"expr": "${w.output.text} >="}}
    ]});

    let report = validate_small_stack(plan, Limits::default());

    assert!(report.valid, "its text is known only at run time: {:#?}", report.diagnostics);
}

#[test]
fn a_literal_event_filter_is_bounded_and_compiled() {
    let plan = |filter: String| json!({"steps": [{"id": "e", "action": "event.wait", "args": {"name": "n", "filter": filter}}]});

    let deep = validate_small_stack(plan(format!("payload{} == 1", ".a".repeat(5_000))), Limits::default());
    let bad = validate_small_stack(plan("payload.a >".into()), Limits::default());

    assert_eq!(the_limit(&deep).pointer, "/steps/0/args/filter");
    assert!(bad.diagnostics.iter().any(|d| d.code == Code::InvalidExpression), "{:#?}", bad.diagnostics);
}

#[test]
fn a_plan_with_more_edges_than_max_edges_is_refused_on_their_number() {
    let steps: Vec<Value> = (0..1000)
        .map(|i| {
            let deps: Vec<String> = (0..i).map(|d| format!("s{d}")).collect();
            json!({"id": format!("s{i}"), "action": "noop", "depends_on": deps})
        })
        .collect();

    let report = validate_small_stack(json!({"steps": steps}), Limits::default());

    let d = the_limit(&report);
    let limit = d.limit.as_ref().unwrap();
    assert_eq!((limit.name.as_str(), limit.max, limit.found), ("max_edges", 20_000, 499_500));
    assert_eq!(report.diagnostics.len(), 1, "nothing else is computed over the edges: {:#?}", report.diagnostics);
}

#[test]
fn the_depth_bounds_leave_room_for_ordinary_long_conditions() {
    let when = (0..40).map(|i| format!("steps.b.output.v{i} == {i}")).collect::<Vec<_>>().join(" && ");

    let report = validate_small_stack(with_when(when.clone()), Limits::default());

    assert!(report.valid, "{:#?}", report.diagnostics);
    assert!(expression::check(&when).is_ok());
}
