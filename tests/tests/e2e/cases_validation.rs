//! Failure cases from `../shared/cases/cases.md` whose bug lives in plan validation, placeholder semantics or
//! retry maths: C01, C02, C03 (a), C06, C10. Case plans use the cases' illustrative names mapped to the contract:
//! `weather.lookup` → `weather.forecast`, `reminder.create` → `notify.send` with `not_before`, and the retry
//! fields `initial_backoff_ms`/`multiplier`/`max_backoff_ms` → `initial_interval_ms`/`backoff_coefficient`/
//! `max_interval_ms`. "Rejected at validation" is asserted as: the report is invalid, and an error names the
//! offending step and field (pointer). Nothing is dispatched because no plan is returned to run.

use cairn_core::catalog::StaticCatalog;
use cairn_core::diagnostic::{Code, Diagnostic};
use cairn_core::document::Format;
use cairn_core::validate::{Limits, Report, validate_text};
use serde_json::json;

fn validate(text: &str) -> Report {
    validate_text(text, Format::Json, &StaticCatalog::builtin(), &Limits::default())
}

fn errors_with(report: &Report, code: Code) -> Vec<&Diagnostic> {
    report.errors().filter(|d| d.code == code).collect()
}

fn assert_rejected(report: &Report) {
    assert!(!report.valid, "plan must be rejected: {:#?}", report.diagnostics);
    assert!(report.plan.is_none(), "an invalid plan must not be handed on to run");
}

/// C01: duplicate ids that are not adjacent are caught, naming both positions.
#[test]
fn c01_duplicate_step_ids_that_are_not_adjacent_are_rejected() {
    let report = validate(
        r#"{"steps":[
          {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"},"depends_on":[]},
          {"id":"notify","action":"notify.send","args":{"text":"rain $weather.output.precip_prob"},"depends_on":["weather"]},
          {"id":"log","action":"noop","args":{},"depends_on":["notify"]},
          {"id":"notify","action":"notify.send","args":{"text":"second"},"depends_on":[]}
        ]}"#,
    );
    assert_rejected(&report);
    let dups = errors_with(&report, Code::DuplicateStepId);
    assert_eq!(dups.len(), 1, "{dups:#?}");
    assert_eq!(dups[0].step_id.as_deref(), Some("notify"));
    assert_eq!(dups[0].pointer, "/steps/3/id");
    assert!(dups[0].message.contains("index 3") && dups[0].message.contains("index 1"), "{}", dups[0].message);
}

/// C01 variant b: ids equal after NFC normalisation are never both accepted.
#[test]
fn c01b_ids_equal_after_nfc_normalisation_are_rejected() {
    let report = validate(r#"{"steps":[{"id":"caf\u00e9","action":"noop"},{"id":"cafe\u0301","action":"noop"}]}"#);
    assert_rejected(&report);
    let dups = errors_with(&report, Code::DuplicateStepId);
    assert_eq!(dups.len(), 1, "the NFD id must collide with the NFC one: {:#?}", report.diagnostics);
    assert!(dups[0].message.contains("NFC"));
}

/// C01 variant c: a key repeated inside one step object is a parse error, never first- or last-wins.
#[test]
fn c01c_repeated_key_in_one_step_is_rejected_not_merged() {
    let report = validate(r#"{"steps":[{"id":"a","action":"noop","id":"b","args":{}}]}"#);
    assert_rejected(&report);
    let dup = errors_with(&report, Code::DuplicateKey);
    assert_eq!(dup.len(), 1);
    assert_eq!(dup[0].pointer, "/steps/0");
    assert!(dup[0].message.contains("`id`"));
}

/// C02 a: a step depending on itself.
#[test]
fn c02a_self_dependency_is_rejected() {
    let report = validate(r#"{"steps":[{"id":"a","action":"noop","args":{},"depends_on":["a"]}]}"#);
    assert_rejected(&report);
    let errs = errors_with(&report, Code::SelfDependency);
    assert_eq!(errs.len(), 1);
    assert_eq!((errs[0].step_id.as_deref(), errs[0].pointer.as_str()), (Some("a"), "/steps/0/depends_on/0"));
}

/// C02 b: a self-reference through a placeholder only.
#[test]
fn c02b_self_reference_through_a_placeholder_is_rejected() {
    let report = validate(r#"{"steps":[{"id":"a","action":"noop","args":{"x":"$a.output.y"},"depends_on":[]}]}"#);
    assert_rejected(&report);
    let errs = errors_with(&report, Code::PlaceholderNotAncestor);
    assert_eq!(errs.len(), 1, "{:#?}", report.diagnostics);
    assert_eq!(errs[0].pointer, "/steps/0/args/x");
}

/// C02 c: a cycle behind a valid prefix is reported with its path in order; nothing runs, not even `root`.
#[test]
fn c02c_cycle_behind_a_valid_prefix_is_reported_with_its_path() {
    let report = validate(
        r#"{"steps":[
          {"id":"root","action":"noop","args":{},"depends_on":[]},
          {"id":"b","action":"noop","args":{},"depends_on":["root","d"]},
          {"id":"c","action":"noop","args":{},"depends_on":["b"]},
          {"id":"d","action":"noop","args":{},"depends_on":["c"]}
        ]}"#,
    );
    assert_rejected(&report);
    let cycles = errors_with(&report, Code::Cycle);
    assert_eq!(cycles.len(), 1);
    assert_eq!(cycles[0].cycle.as_deref(), Some(&["b", "c", "d", "b"].map(String::from)[..]));
    assert!(cycles[0].message.contains("b → c → d → b"), "{}", cycles[0].message);
    assert_eq!(cycles[0].pointer, "/steps/1/depends_on/1", "points at the edge that closes the cycle");
}

/// C02 d: a repeated dependency entry is not a cycle; it is deduplicated with a warning.
#[test]
fn c02d_repeated_dependency_is_accepted_once_with_a_warning() {
    let report = validate(
        r#"{"steps":[
          {"id":"root","action":"noop","args":{},"depends_on":[]},
          {"id":"x","action":"noop","args":{},"depends_on":["root","root"]}
        ]}"#,
    );
    assert!(report.valid, "{:#?}", report.diagnostics);
    let warning = report.diagnostics.iter().find(|d| d.code == Code::DuplicateDependency);
    assert_eq!(warning.map(|d| d.pointer.as_str()), Some("/steps/1/depends_on/1"));
}

/// C03 a: an unknown dependency is rejected with a did-you-mean hint instead of waiting forever.
#[test]
fn c03a_unknown_dependency_is_rejected_with_a_did_you_mean_hint() {
    let report = validate(
        r#"{"context":{"timezone":"Asia/Shanghai"},"steps":[
          {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"},"depends_on":[]},
          {"id":"remind","action":"notify.send","args":{"text":"umbrella"},"not_before":"tomorrow 08:00",
           "depends_on":["wether"]}
        ]}"#,
    );
    assert_rejected(&report);
    let errs = errors_with(&report, Code::UnknownDependency);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].step_id.as_deref(), Some("remind"));
    assert!(errs[0].message.contains("wether"));
    assert_eq!(errs[0].hint.as_deref(), Some("did you mean `weather`?"));
}

/// C06 plan A: `$5.00`, `US$`, `$`, `price $ 3` stay literal; `$$` escapes; a whole placeholder is valid.
#[test]
fn c06a_literal_dollars_and_escapes_pass_validation() {
    let plan = json!({"steps":[
      {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"},"depends_on":[]},
      {"id":"post","action":"http.request","args":{
          "method":"POST","url":"http://127.0.0.1:18080/echo",
          "headers":{"X-Price":"$5.00"},
          "body":{"a":"costs $5 today","b":"$$weather.output.precip_prob","c":"US$",
                  "d":"$","e":"price $ 3","f":"$weather.output.precip_prob"}},
       "depends_on":["weather"]}
    ]});
    let report = validate(&plan.to_string());
    assert!(report.valid, "{:#?}", report.diagnostics);
}

/// C06 plan B: an unknown reference is an error naming it, never an empty string.
#[test]
fn c06b_unknown_placeholder_root_is_rejected_naming_it() {
    let report = validate(
        r#"{"steps":[{"id":"bad","action":"notify.send","args":{"text":"hello $nobody.output.x"},"depends_on":[]}]}"#,
    );
    assert_rejected(&report);
    let errs = errors_with(&report, Code::PlaceholderUnknownStep);
    assert_eq!(errs.len(), 1);
    assert!(errs[0].message.contains("nobody"));
    assert_eq!((errs[0].step_id.as_deref(), errs[0].pointer.as_str()), (Some("bad"), "/steps/0/args/text"));
}

/// C10 variant c: NaN/inf/negative coefficients, negative backoff and zero attempts are rejected at validation.
#[test]
fn c10c_invalid_retry_policies_are_rejected() {
    let bad = [
        r#"{"max_attempts":0}"#,
        r#"{"backoff_coefficient":-1}"#,
        r#"{"backoff_coefficient":0.5}"#,
        r#"{"initial_interval_ms":-5}"#,
        r#"{"initial_interval_ms":100,"max_interval_ms":50}"#,
    ];
    for retry in bad {
        let report = validate(&format!(r#"{{"steps":[{{"id":"flaky","action":"noop","retry":{retry}}}]}}"#));
        assert_rejected(&report);
        let errs = errors_with(&report, Code::RetryInvalid);
        assert!(!errs.is_empty(), "{retry}: {:#?}", report.diagnostics);
        assert!(errs[0].pointer.starts_with("/steps/0/retry"), "{}", errs[0].pointer);
    }
    for yaml in ["backoff_coefficient: .nan", "backoff_coefficient: .inf"] {
        let text = format!("steps:\n  - id: flaky\n    action: noop\n    retry:\n      {yaml}\n");
        let report = validate_text(&text, Format::Yaml, &StaticCatalog::builtin(), &Limits::default());
        assert_rejected(&report);
    }
}

/// C10 plans A and B are valid plans: 200 and 1100 attempts with tiny caps are allowed.
#[test]
fn c10_many_attempt_policies_are_valid() {
    let report = validate(
        r#"{"steps":[{"id":"flaky2","action":"http.request",
          "args":{"method":"GET","url":"http://127.0.0.1:18080/always500"},"depends_on":[],
          "timeout_ms":1000,"idempotent":true,
          "retry":{"max_attempts":1100,"initial_interval_ms":1,"backoff_coefficient":2.0,"max_interval_ms":20,"jitter":"none"}}]}"#,
    );
    assert!(report.valid, "{:#?}", report.diagnostics);
}
