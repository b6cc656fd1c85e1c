//! Every diagnostic code in `CODE_NAMES` is produced by a plan, with its pointer, step id and hint (contract §4).
//!
//! Each test submits one small plan and asserts on the single diagnostic it is about; the tests at the end check
//! the promises around them: every problem at once, limits, YAML, aliases, defaults and large plans (C24).

#![allow(clippy::unwrap_used)]

use cairn_core::catalog::StaticCatalog;
use cairn_core::diagnostic::{CODE_NAMES, Code, Diagnostic, Severity};
use cairn_core::document::Format;
use cairn_core::validate::{Limits, Report, validate_text, validate_value};
use serde_json::{Value, json};

fn validate(plan: &Value) -> Report {
    validate_value(plan, &StaticCatalog::builtin(), &Limits::default())
}

fn validate_str(text: &str, format: Format) -> Report {
    validate_text(text, format, &StaticCatalog::builtin(), &Limits::default())
}

/// The one diagnostic with `code`; fails when there is none or more than one.
fn only(report: &Report, code: Code) -> Diagnostic {
    let found: Vec<&Diagnostic> = report.diagnostics.iter().filter(|d| d.code == code).collect();
    assert_eq!(found.len(), 1, "exactly one `{}` diagnostic is expected, got {:#?}", code.as_str(), report.diagnostics);
    found[0].clone()
}

fn codes(report: &Report) -> Vec<Code> {
    report.diagnostics.iter().map(|d| d.code).collect()
}

fn hint(d: &Diagnostic) -> &str {
    d.hint.as_deref().unwrap_or_else(|| panic!("`{}` must carry a hint: {d:#?}", d.code.as_str()))
}

fn assert_at(d: &Diagnostic, pointer: &str, step_id: Option<&str>) {
    assert_eq!(d.pointer, pointer, "`{}` points at the offending value", d.code.as_str());
    assert_eq!(d.step_id.as_deref(), step_id, "`{}` names the step concerned", d.code.as_str());
}

/// A minimal valid plan around `steps`.
fn plan(steps: Value) -> Value {
    json!({ "steps": steps })
}

// ---------------------------------------------------------------------------------------------------------------
// Document level

#[test]
fn malformed_json_is_a_parse_error_with_line_and_column() {
    let report = validate_str("{\n  \"steps\": [\n    {\"id\": }\n  ]\n}", Format::Json);

    assert!(!report.valid, "an unreadable document is invalid");
    let d = only(&report, Code::ParseError);
    assert_at(&d, "", None);
    assert!(d.message.contains("line 3"), "the message names the line: {}", d.message);
    assert!(d.message.contains("column"), "the message names the column: {}", d.message);
    assert!(d.hint.is_some(), "a parse error says how to fix it");
}

#[test]
fn malformed_yaml_is_a_parse_error_with_line_and_column() {
    let report = validate_str("steps:\n  - id: a\n    action: [noop\n", Format::Yaml);

    let d = only(&report, Code::ParseError);
    assert!(d.message.contains("line"), "the message names the line: {}", d.message);
    assert!(d.message.contains("column"), "the message names the column: {}", d.message);
}

#[test]
fn repeated_key_is_a_duplicate_key_error_pointing_at_its_object() {
    let report = validate_str(r#"{"steps":[{"id":"a","action":"noop","id":"b"}]}"#, Format::Json);

    let d = only(&report, Code::DuplicateKey);
    assert_at(&d, "/steps/0", None);
    assert!(d.message.contains("`id`"), "the message names the key: {}", d.message);
    assert!(d.hint.is_some(), "a duplicate key says how to fix it");
}

#[test]
fn other_plan_version_is_unsupported_version() {
    let report = validate(&json!({"version": "cairn/v2", "steps": [{"id": "a", "action": "noop"}]}));

    let d = only(&report, Code::UnsupportedVersion);
    assert_at(&d, "/version", None);
    assert!(hint(&d).contains("cairn/v1"), "the hint names the supported version");
}

#[test]
fn empty_steps_is_no_steps() {
    let report = validate(&plan(json!([])));

    assert!(!report.valid, "a plan without steps is invalid");
    let d = only(&report, Code::NoSteps);
    assert_at(&d, "/steps", None);
}

#[test]
fn more_steps_than_a_custom_limit_is_too_many_steps() {
    let limits = Limits { max_steps: 2, ..Limits::default() };
    let document = plan(json!([
        {"id": "a", "action": "noop"}, {"id": "b", "action": "noop"}, {"id": "c", "action": "noop"}
    ]));

    let report = validate_value(&document, &StaticCatalog::builtin(), &limits);

    let d = only(&report, Code::TooManySteps);
    assert_at(&d, "/steps", None);
    assert!(d.message.contains('3') && d.message.contains('2'), "count and limit: {}", d.message);
    assert!(d.hint.is_some(), "too_many_steps suggests splitting or raising the limit");
    let at_limit = Limits { max_steps: 3, ..Limits::default() };
    assert!(
        validate_value(&document, &StaticCatalog::builtin(), &at_limit).valid,
        "a plan exactly at the limit is valid"
    );
}

#[test]
fn wrong_field_type_is_invalid_field() {
    let report = validate(&plan(json!([{"id": "a", "action": 5}])));

    let d = only(&report, Code::InvalidField);
    assert_at(&d, "/steps/0/action", Some("a"));
}

#[test]
fn missing_action_is_invalid_field_on_the_step() {
    let report = validate(&plan(json!([{"id": "a"}])));

    let d = only(&report, Code::InvalidField);
    assert_at(&d, "/steps/0", Some("a"));
    assert!(d.message.contains("action"), "the message names the missing field: {}", d.message);
}

#[test]
fn unknown_step_field_is_unknown_field_with_did_you_mean() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop"},
        {"id": "b", "action": "noop", "dependson": ["a"]}
    ])));

    let d = only(&report, Code::UnknownField);
    assert_at(&d, "/steps/1/dependson", Some("b"));
    assert_eq!(hint(&d), "did you mean `depends_on`?", "a near miss suggests the real field");
}

#[test]
fn unknown_plan_field_is_unknown_field_with_did_you_mean() {
    let report = validate(&json!({"gaol": "x", "steps": [{"id": "a", "action": "noop"}]}));

    let d = only(&report, Code::UnknownField);
    assert_at(&d, "/gaol", None);
    assert_eq!(hint(&d), "did you mean `goal`?", "a near miss suggests the real field");
}

#[test]
fn unknown_context_field_is_unknown_field_with_did_you_mean() {
    let report = validate(&json!({
        "context": {"timezon": "UTC"}, "steps": [{"id": "a", "action": "noop"}]
    }));

    let d = only(&report, Code::UnknownField);
    assert_at(&d, "/context/timezon", None);
    assert_eq!(hint(&d), "did you mean `timezone`?", "a near miss suggests the real field");
}

#[test]
fn unrelated_unknown_field_is_told_to_go_away() {
    let report = validate(&plan(json!([{"id": "a", "action": "noop", "zzzz": 1}])));

    let d = only(&report, Code::UnknownField);
    assert!(hint(&d).contains("remove"), "no suggestion means: remove it");
}

// ---------------------------------------------------------------------------------------------------------------
// Step ids and the graph

#[test]
fn non_ascii_step_id_is_invalid_step_id() {
    let report = validate(&plan(json!([{"id": "提醒", "action": "noop"}])));

    let d = only(&report, Code::InvalidStepId);
    assert_at(&d, "/steps/0/id", Some("提醒"));
    assert!(d.hint.is_some(), "the hint says which characters are allowed");
}

#[test]
fn step_id_starting_with_a_digit_is_invalid_step_id() {
    let report = validate(&plan(json!([{"id": "1abc", "action": "noop"}])));

    let d = only(&report, Code::InvalidStepId);
    assert_at(&d, "/steps/0/id", Some("1abc"));
}

#[test]
fn step_named_input_is_reserved_step_id() {
    let report = validate(&plan(json!([{"id": "input", "action": "noop"}])));

    let d = only(&report, Code::ReservedStepId);
    assert_at(&d, "/steps/0/id", Some("input"));
    assert!(hint(&d).contains("input_step"), "the hint proposes a free name");
}

#[test]
fn repeated_step_id_is_duplicate_step_id_on_the_second() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop"}, {"id": "a", "action": "noop"}
    ])));

    let d = only(&report, Code::DuplicateStepId);
    assert_at(&d, "/steps/1/id", Some("a"));
    assert!(d.message.contains("index 0"), "the message names the first one: {}", d.message);
}

#[test]
fn dependency_on_a_missing_step_is_unknown_dependency_with_did_you_mean() {
    let report = validate(&plan(json!([
        {"id": "weather", "action": "noop"},
        {"id": "rainy", "action": "noop", "depends_on": ["wether"]}
    ])));

    let d = only(&report, Code::UnknownDependency);
    assert_at(&d, "/steps/1/depends_on/0", Some("rainy"));
    assert_eq!(hint(&d), "did you mean `weather`?", "a near miss suggests the real step");
}

#[test]
fn step_depending_on_itself_is_self_dependency() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop"},
        {"id": "b", "action": "noop", "depends_on": ["a", "b"]}
    ])));

    let d = only(&report, Code::SelfDependency);
    assert_at(&d, "/steps/1/depends_on/1", Some("b"));
    assert!(d.hint.is_some(), "the hint says to remove it");
    assert!(!codes(&report).contains(&Code::Cycle), "a self dependency is not also a cycle");
}

#[test]
fn repeated_dependency_is_a_warning_and_the_plan_stays_valid() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop"},
        {"id": "b", "action": "noop", "depends_on": ["a", "a"]}
    ])));

    let d = only(&report, Code::DuplicateDependency);
    assert_eq!(d.severity, Severity::Warning, "a repeat is only a warning");
    assert_at(&d, "/steps/1/depends_on/1", Some("b"));
    assert!(report.valid, "warnings never make a plan invalid");
}

#[test]
fn dependency_cycle_is_reported_with_its_path_in_execution_order() {
    // root <- b <- c <- d <- b   (c depends on b, d on c, b on d)
    let report = validate(&plan(json!([
        {"id": "root", "action": "noop"},
        {"id": "b", "action": "noop", "depends_on": ["root", "d"]},
        {"id": "c", "action": "noop", "depends_on": ["b"]},
        {"id": "d", "action": "noop", "depends_on": ["c"]}
    ])));

    let d = only(&report, Code::Cycle);
    assert_at(&d, "/steps/1/depends_on/1", Some("b"));
    assert_eq!(
        d.cycle,
        Some(vec!["b".into(), "c".into(), "d".into(), "b".into()]),
        "the cycle lists ids in execution order, first repeated at the end"
    );
    assert!(d.message.contains("b → c → d → b"), "the message shows the path: {}", d.message);
    assert!(hint(&d).contains("`d`"), "the hint names the edge to remove");
}

// ---------------------------------------------------------------------------------------------------------------
// Actions and args

#[test]
fn unregistered_action_is_unknown_action_with_did_you_mean() {
    let report = validate(&plan(json!([
        {"id": "weather", "action": "weather.forcast", "args": {"city": "Wuhan"}}
    ])));

    let d = only(&report, Code::UnknownAction);
    assert_at(&d, "/steps/0/action", Some("weather"));
    assert_eq!(hint(&d), "did you mean `weather.forecast`?", "a near miss suggests the real action");
}

#[test]
fn unrelated_action_name_lists_the_registered_actions() {
    let report = validate(&plan(json!([{"id": "a", "action": "zzz"}])));

    let d = only(&report, Code::UnknownAction);
    assert!(hint(&d).contains("notify.send"), "without a near miss the hint lists the actions");
}

#[test]
fn http_request_without_url_is_args_schema() {
    let report = validate(&plan(json!([
        {"id": "call", "action": "http.request", "args": {"method": "GET"}}
    ])));

    let d = only(&report, Code::ArgsSchema);
    assert_at(&d, "/steps/0/args", Some("call"));
    assert!(d.message.contains("url"), "the message names the missing arg: {}", d.message);
}

#[test]
fn args_schema_ignores_a_placeholder_leaf_but_checks_the_rest() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop"},
        {"id": "nap", "action": "sleep", "depends_on": ["a"], "args": {"duration_ms": "$a.output.ms"}},
        {"id": "bad", "action": "sleep", "depends_on": ["a"], "args": {"duration_ms": "soon"}}
    ])));

    let d = only(&report, Code::ArgsSchema);
    assert_at(&d, "/steps/2/args/duration_ms", Some("bad"));
}

#[test]
fn city_missing_from_the_source_text_is_ungrounded_arg() {
    let step = |city: &str| json!({"id": "weather", "action": "weather.forecast", "args": {"city": city}});
    let with_source = |city: &str| {
        json!({
            "context": {"source_text": "If it rains in Wuhan tomorrow, remind me to take an umbrella"},
            "steps": [step(city)]
        })
    };

    let paris = validate(&with_source("Paris"));
    let wuhan = validate(&with_source("Wuhan"));
    let unchecked = validate(&plan(json!([step("Paris")])));

    let d = only(&paris, Code::UngroundedArg);
    assert_at(&d, "/steps/0/args/city", Some("weather"));
    assert!(d.message.contains("Paris"), "the message names the value: {}", d.message);
    assert!(d.hint.is_some(), "the hint says to use what the request says");
    assert!(wuhan.valid, "a city the request mentions is grounded: {:#?}", wuhan.diagnostics);
    assert!(unchecked.valid, "without source_text grounding is not checked: {:#?}", unchecked.diagnostics);
}

#[test]
fn grounding_ignores_case_and_placeholders() {
    let report = validate(&json!({
        "context": {"source_text": "明天武汉下雨的话提醒我 (WUHAN)"},
        "input": {"city": "Paris"},
        "steps": [
            {"id": "a", "action": "weather.forecast", "args": {"city": "wuhan"}},
            {"id": "b", "action": "weather.forecast", "args": {"city": "$input.city"}}
        ]
    }));

    assert!(report.valid, "case differences and placeholders are not ungrounded: {:#?}", report.diagnostics);
}

// ---------------------------------------------------------------------------------------------------------------
// Placeholders and conditions

#[test]
fn unclosed_placeholder_is_placeholder_syntax() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop"},
        {"id": "b", "action": "noop", "depends_on": ["a"], "args": {"text": "x ${a.output.y"}}
    ])));

    let d = only(&report, Code::PlaceholderSyntax);
    assert_at(&d, "/steps/1/args/text", Some("b"));
    assert!(hint(&d).contains("$$"), "the hint shows how to write a literal `$`");
}

#[test]
fn placeholder_naming_a_missing_step_is_placeholder_unknown_step_with_did_you_mean() {
    let report = validate(&plan(json!([
        {"id": "weather", "action": "noop"},
        {"id": "b", "action": "noop", "depends_on": ["weather"], "args": {"p": "$wether.output.p"}}
    ])));

    let d = only(&report, Code::PlaceholderUnknownStep);
    assert_at(&d, "/steps/1/args/p", Some("b"));
    assert!(hint(&d).starts_with("did you mean `weather`?"), "a near miss suggests the step: {}", hint(&d));
}

#[test]
fn placeholder_reading_a_non_ancestor_is_placeholder_not_ancestor_with_the_fix() {
    let report = validate(&plan(json!([
        {"id": "weather", "action": "noop"},
        {"id": "rainy", "action": "noop"},
        {"id": "remind", "action": "notify.send", "depends_on": ["rainy"],
         "args": {"text": "Rain ${weather.output.precipitation_probability}%"}}
    ])));

    let d = only(&report, Code::PlaceholderNotAncestor);
    assert_at(&d, "/steps/2/args/text", Some("remind"));
    assert_eq!(hint(&d), "add `weather` to depends_on of `remind`", "the hint is the fix");
}

#[test]
fn placeholder_reading_a_transitive_ancestor_is_fine() {
    let report = validate(&plan(json!([
        {"id": "weather", "action": "noop"},
        {"id": "rainy", "action": "noop", "depends_on": ["weather"]},
        {"id": "remind", "action": "noop", "depends_on": ["rainy"],
         "args": {"p": "$weather.output.p"}, "when": "steps.weather.output.p > 50"}
    ])));

    assert!(report.valid, "an ancestor two hops up is an ancestor: {:#?}", report.diagnostics);
}

#[test]
fn when_reading_a_non_ancestor_is_placeholder_not_ancestor() {
    let report = validate(&plan(json!([
        {"id": "weather", "action": "noop"},
        {"id": "remind", "action": "noop", "when": "steps.weather.output.p > 50"}
    ])));

    let d = only(&report, Code::PlaceholderNotAncestor);
    assert_at(&d, "/steps/1/when", Some("remind"));
    assert_eq!(hint(&d), "add `weather` to depends_on of `remind`", "the hint is the fix");
}

#[test]
fn malformed_when_is_invalid_when() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop"},
        {"id": "b", "action": "noop", "depends_on": ["a"], "when": "steps.a.output.x >="}
    ])));

    let d = only(&report, Code::InvalidWhen);
    assert_at(&d, "/steps/1/when", Some("b"));
    assert!(d.hint.is_some(), "the hint shows a valid condition");
}

// ---------------------------------------------------------------------------------------------------------------
// Times, timeouts, retry, approval

#[test]
fn unreadable_not_before_is_invalid_time() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop", "not_before": "next tuesday-ish"}
    ])));

    let d = only(&report, Code::InvalidTime);
    assert_at(&d, "/steps/0/not_before", Some("a"));
    assert!(d.hint.is_some(), "the hint lists the accepted forms");
}

#[test]
fn unreadable_context_now_is_invalid_time() {
    let report = validate(&json!({
        "context": {"now": "yesterday-ish"}, "steps": [{"id": "a", "action": "noop"}]
    }));

    let d = only(&report, Code::InvalidTime);
    assert_at(&d, "/context/now", None);
}

#[test]
fn unknown_plan_time_zone_is_invalid_timezone() {
    let report = validate(&json!({
        "context": {"timezone": "Mars/Olympus"}, "steps": [{"id": "a", "action": "noop"}]
    }));

    let d = only(&report, Code::InvalidTimezone);
    assert_at(&d, "/context/timezone", None);
    assert!(d.message.contains("Mars/Olympus"), "the message names the zone: {}", d.message);
    assert!(d.hint.is_some(), "the hint gives an IANA example");
}

#[test]
fn unknown_time_zone_inside_not_before_is_invalid_timezone() {
    let report = validate(&plan(json!([
        {"id": "remind", "action": "noop", "not_before": "tomorrow 08:00 Mars/Olympus"}
    ])));

    let d = only(&report, Code::InvalidTimezone);
    assert_at(&d, "/steps/0/not_before", Some("remind"));
    assert!(!codes(&report).contains(&Code::InvalidTime), "a well-formed spec is not also invalid_time");
}

#[test]
fn timeout_below_the_minimum_and_above_the_maximum_is_timeout_out_of_range() {
    let ten_days_ms = 10 * 24 * 3600 * 1000u64;
    let report = validate(&plan(json!([
        {"id": "short", "action": "noop", "timeout_ms": 10},
        {"id": "long", "action": "noop", "timeout_ms": ten_days_ms}
    ])));

    let found: Vec<&Diagnostic> = report.diagnostics.iter().filter(|d| d.code == Code::TimeoutOutOfRange).collect();
    assert_eq!(found.len(), 2, "both timeouts are out of range: {:#?}", report.diagnostics);
    assert_at(found[0], "/steps/0/timeout_ms", Some("short"));
    assert_at(found[1], "/steps/1/timeout_ms", Some("long"));
    assert!(found.iter().all(|d| d.hint.is_some()), "the hint gives the allowed range");
}

#[test]
fn heartbeat_timeout_and_default_timeout_are_range_checked_too() {
    let report = validate(&json!({
        "defaults": {"timeout_ms": 1},
        "steps": [{"id": "a", "action": "noop", "heartbeat_timeout_ms": 0}]
    }));

    let pointers: Vec<&str> =
        report.diagnostics.iter().filter(|d| d.code == Code::TimeoutOutOfRange).map(|d| d.pointer.as_str()).collect();
    assert_eq!(
        pointers,
        ["/defaults/timeout_ms", "/steps/0/heartbeat_timeout_ms"],
        "both fields are checked where they are written"
    );
}

#[test]
fn negative_timeout_is_timeout_out_of_range() {
    let report = validate(&plan(json!([{"id": "a", "action": "noop", "timeout_ms": -5}])));

    let d = only(&report, Code::TimeoutOutOfRange);
    assert_at(&d, "/steps/0/timeout_ms", Some("a"));
}

#[test]
fn coefficient_below_one_is_retry_invalid() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop", "retry": {"max_attempts": 3, "backoff_coefficient": 0.5}}
    ])));

    let d = only(&report, Code::RetryInvalid);
    assert_at(&d, "/steps/0/retry/backoff_coefficient", Some("a"));
    assert!(d.hint.is_some(), "the hint lists the rules");
}

#[test]
fn max_interval_below_initial_is_retry_invalid() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop",
         "retry": {"initial_interval_ms": 5000, "max_interval_ms": 1000}}
    ])));

    let d = only(&report, Code::RetryInvalid);
    assert_at(&d, "/steps/0/retry/max_interval_ms", Some("a"));
}

#[test]
fn zero_approval_timeout_is_invalid_approval() {
    let report = validate(&plan(json!([
        {"id": "pay", "action": "noop", "approval": {"required": true, "timeout_ms": 0}}
    ])));

    let d = only(&report, Code::InvalidApproval);
    assert_at(&d, "/steps/0/approval/timeout_ms", Some("pay"));
}

#[test]
fn unknown_approval_outcome_is_invalid_approval() {
    let report = validate(&plan(json!([
        {"id": "pay", "action": "noop", "approval": {"required": true, "on_timeout": "explode"}}
    ])));

    let d = only(&report, Code::InvalidApproval);
    assert_at(&d, "/steps/0/approval/on_timeout", Some("pay"));
}

// ---------------------------------------------------------------------------------------------------------------
// Coverage: every code

/// A document producing `code`, exhaustively matched so a new code cannot be added without a sample plan.
fn sample(code: Code) -> (String, Format, Limits) {
    let json = |v: Value| (v.to_string(), Format::Json, Limits::default());
    let steps = |s: Value| json(plan(s));
    match code {
        Code::ParseError => ("{\"steps\": [".into(), Format::Json, Limits::default()),
        Code::DuplicateKey => (r#"{"steps":[],"steps":[]}"#.into(), Format::Json, Limits::default()),
        Code::InvalidField => json(json!({"steps": "all of them"})),
        Code::UnknownField => steps(json!([{"id": "a", "action": "noop", "when_": "true"}])),
        Code::UnsupportedVersion => json(json!({"version": "2", "steps": [{"id": "a", "action": "noop"}]})),
        Code::NoSteps => steps(json!([])),
        Code::TooManySteps => {
            let (text, format, _) = steps(json!([{"id": "a", "action": "noop"}, {"id": "b", "action": "noop"}]));
            (text, format, Limits { max_steps: 1, ..Limits::default() })
        }
        Code::InvalidStepId => steps(json!([{"id": "a b", "action": "noop"}])),
        Code::ReservedStepId => steps(json!([{"id": "steps", "action": "noop"}])),
        Code::DuplicateStepId => steps(json!([{"id": "a", "action": "noop"}, {"id": "a", "action": "noop"}])),
        Code::UnknownDependency => steps(json!([{"id": "a", "action": "noop", "depends_on": ["b"]}])),
        Code::SelfDependency => steps(json!([{"id": "a", "action": "noop", "depends_on": ["a"]}])),
        Code::DuplicateDependency => steps(json!([
            {"id": "a", "action": "noop"}, {"id": "b", "action": "noop", "depends_on": ["a", "a"]}
        ])),
        Code::Cycle => steps(json!([
            {"id": "a", "action": "noop", "depends_on": ["b"]}, {"id": "b", "action": "noop", "depends_on": ["a"]}
        ])),
        Code::UnknownAction => steps(json!([{"id": "a", "action": "nope"}])),
        Code::ArgsSchema => steps(json!([{"id": "a", "action": "sleep", "args": {}}])),
        Code::PlaceholderSyntax => steps(json!([{"id": "a", "action": "noop", "args": {"x": "${}"}}])),
        Code::PlaceholderUnknownStep => steps(json!([{"id": "a", "action": "noop", "args": {"x": "$zz"}}])),
        Code::PlaceholderNotAncestor => steps(json!([{"id": "a", "action": "noop", "args": {"x": "$a.y"}}])),
        Code::InvalidWhen => steps(json!([{"id": "a", "action": "noop", "when": "(("}])),
        Code::InvalidTime => steps(json!([{"id": "a", "action": "noop", "not_before": "soonish"}])),
        Code::InvalidTimezone => {
            json(json!({"context": {"timezone": "Nowhere/Land"}, "steps": [{"id": "a", "action": "noop"}]}))
        }
        Code::TimeoutOutOfRange => steps(json!([{"id": "a", "action": "noop", "timeout_ms": 999}])),
        Code::RetryInvalid => steps(json!([{"id": "a", "action": "noop", "retry": {"max_attempts": 0}}])),
        Code::InvalidApproval => steps(json!([{"id": "a", "action": "noop", "approval": {}}])),
        Code::UngroundedArg => json(json!({
            "context": {"source_text": "weather in Wuhan"},
            "steps": [{"id": "a", "action": "weather.forecast", "args": {"city": "Lyon"}}]
        })),
        Code::UnknownRecipient => {
            steps(json!([{"id": "a", "action": "notify.send", "args": {"text": "hi", "to": "not an id"}}]))
        }
        Code::LimitExceeded => steps(json!([{"id": "a", "action": "noop", "when": "x".repeat(20_000)}])),
        Code::InvalidExpression => {
            steps(json!([{"id": "a", "action": "condition.eval", "args": {"expr": "input.p >="}}]))
        }
    }
}

#[test]
fn every_code_in_code_names_is_produced_by_its_sample_plan() {
    for (code, name) in CODE_NAMES {
        let (text, format, limits) = sample(code);

        let report = validate_text(&text, format, &StaticCatalog::builtin(), &limits);

        assert!(
            codes(&report).contains(&code),
            "the sample for `{name}` must produce it, got {:#?}",
            report.diagnostics
        );
        let expect_valid = code == Code::DuplicateDependency;
        assert_eq!(report.valid, expect_valid, "only warnings leave the `{name}` sample valid");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Promises around the codes

#[test]
fn all_problems_are_reported_at_once() {
    let report = validate(&json!({
        "context": {"timezone": "Mars/Olympus"},
        "steps": [
            {"id": "weather", "action": "weather.forcast", "args": {"city": "Wuhan"}},
            {"id": "rainy", "action": "condition.eval", "depends_on": ["wether"], "args": {"expr": "true"}},
            {"id": "remind", "action": "notify.send", "depends_on": ["rainy", "remind"],
             "args": {"text": "umbrella"}, "timeout_ms": 10},
            {"id": "log", "action": "noop", "depends_on": ["remind"], "when": "steps.remind.output.x >="}
        ]
    }));

    let mut found: Vec<&str> = report.errors().map(|d| d.code.as_str()).collect();
    found.sort_unstable();
    assert_eq!(
        found,
        [
            "invalid_timezone",
            "invalid_when",
            "self_dependency",
            "timeout_out_of_range",
            "unknown_action",
            "unknown_dependency"
        ],
        "six different problems give six diagnostics: {:#?}",
        report.diagnostics
    );
    assert!(report.plan.is_none(), "an invalid plan is not returned");
}

#[test]
fn a_typo_in_the_plan_header_does_not_hide_step_problems() {
    let report = validate(&json!({
        "gaol": "x",
        "steps": [{"id": "a", "action": "weather.forcast", "args": {"city": "Wuhan"}}]
    }));

    let found = codes(&report);
    assert!(found.contains(&Code::UnknownField), "the header typo is reported: {found:?}");
    assert!(found.contains(&Code::UnknownAction), "the step problem is reported too: {found:?}");
}

#[test]
fn one_malformed_step_does_not_hide_problems_in_the_others() {
    let report = validate(&plan(json!([
        {"id": "a", "action": "noop", "timeout_ms": "soon"},
        {"id": "b", "action": "nope", "depends_on": ["a"]},
        {"id": "c", "action": "noop", "depends_on": ["zz"]}
    ])));

    let found = codes(&report);
    assert!(found.contains(&Code::UnknownAction), "step b is still checked: {found:?}");
    assert!(found.contains(&Code::UnknownDependency), "step c is still checked: {found:?}");
    assert_eq!(report.diagnostics[0].pointer, "/steps/0/timeout_ms", "diagnostics are in step order");
}

#[test]
fn yaml_plan_validates_like_json() {
    let text = "\
version: cairn/v1
context:
  timezone: Asia/Shanghai
steps:
  - id: weather
    action: weather.forecast
    args: {city: Wuhan, date: tomorrow}
  - id: remind
    action: notify.send
    depends_on: [weather]
    not_before: tomorrow 08:00
    args:
      text: \"Rain ${weather.output.precipitation_probability}%\"
";
    let broken = text.replace("notify.send", "notify.sned");

    let report = validate_str(text, Format::Yaml);
    let broken_report = validate_str(&broken, Format::Yaml);

    assert!(report.valid, "a valid YAML plan is valid: {:#?}", report.diagnostics);
    let plan = report.plan.unwrap();
    assert_eq!(plan.steps[1].depends_on, ["weather"], "YAML lists become depends_on");
    let d = only(&broken_report, Code::UnknownAction);
    assert_at(&d, "/steps/1/action", Some("remind"));
}

#[test]
fn step_id_alias_is_accepted() {
    let report = validate(&plan(json!([
        {"step_id": "a", "action": "noop"},
        {"step_id": "b", "action": "noop", "depends_on": ["a"], "args": {"x": "$a.y"}}
    ])));

    assert!(report.valid, "`step_id` is an alias of `id`: {:#?}", report.diagnostics);
    let plan = report.plan.unwrap();
    assert_eq!(plan.steps[0].id, "a", "the alias fills `id`");
    assert_eq!(plan.steps[1].id, "b", "the alias fills `id`");
}

#[test]
fn defaults_are_applied_to_steps_that_leave_fields_out() {
    let report = validate(&json!({
        "defaults": {"timeout_ms": 5000, "retry": {"max_attempts": 5}, "trigger_rule": "all_done"},
        "steps": [
            {"id": "a", "action": "noop"},
            {"id": "b", "action": "noop", "depends_on": ["a"], "timeout_ms": 7000, "trigger_rule": "one_success"}
        ]
    }));

    assert!(report.valid, "{:#?}", report.diagnostics);
    let plan = report.plan.unwrap();
    assert_eq!(plan.steps[0].timeout_ms, Some(5000), "a missing timeout comes from defaults");
    assert_eq!(plan.steps[1].timeout_ms, Some(7000), "a step's own timeout wins over defaults");
    assert_eq!(plan.steps[0].retry.as_ref().map(|r| r.max_attempts), Some(5), "a missing retry comes from defaults");
    assert_eq!(plan.steps[0].effective_trigger_rule_name(), "all_done", "rule from defaults");
    assert_eq!(plan.steps[1].effective_trigger_rule_name(), "one_success", "own rule wins");
}

#[test]
fn idempotent_defaults_to_the_actions_declared_effect() {
    let report = validate(&plan(json!([
        {"id": "w", "action": "weather.forecast", "args": {"city": "Wuhan"}},
        {"id": "n", "action": "notify.send", "args": {"text": "hi"}},
        {"id": "m", "action": "notify.send", "args": {"text": "hi"}, "idempotent": true}
    ])));

    let plan = report.plan.unwrap();
    assert_eq!(plan.steps[0].idempotent, Some(true), "a read is idempotent");
    assert_eq!(plan.steps[1].idempotent, Some(false), "notify.send is not idempotent");
    assert_eq!(plan.steps[2].idempotent, Some(true), "the plan's own value wins");
}

#[test]
fn valid_plan_has_no_diagnostics_and_returns_the_plan() {
    let report = validate_str(include_str!("../../../examples/rain-reminder.json"), Format::Json);

    assert!(report.valid, "the example plan is valid: {:#?}", report.diagnostics);
    assert!(report.diagnostics.is_empty(), "and has nothing to say");
    assert_eq!(report.plan.map(|p| p.steps.len()), Some(3), "the plan comes back");
}

/// 1 root, `children` steps each reading the root's output, and a join depending on all of them.
fn fan_out(children: usize) -> Value {
    let mut steps = Vec::with_capacity(children + 2);
    steps.push(json!({"id": "root", "action": "noop", "args": {"v": 1}}));
    for i in 0..children {
        steps.push(json!({
            "id": format!("c{i}"), "action": "noop", "depends_on": ["root"], "args": {"v": "$root.output.v"}
        }));
    }
    let all: Vec<String> = (0..children).map(|i| format!("c{i}")).collect();
    steps.push(json!({"id": "join", "action": "noop", "depends_on": all}));
    plan(Value::Array(steps))
}

#[test]
fn five_thousand_step_fan_out_is_valid_under_a_raised_limit() {
    let limits = Limits { max_steps: 10_000, ..Limits::default() };

    let report = validate_value(&fan_out(5_000), &StaticCatalog::builtin(), &limits);

    assert!(report.valid, "a wide fan-out is a valid DAG: {:?}", report.diagnostics.first());
    assert!(report.diagnostics.is_empty(), "and has nothing to say");
    assert_eq!(report.plan.map(|p| p.steps.len()), Some(5_002), "every step comes back");
}

#[test]
fn fifty_thousand_step_plan_is_too_many_steps_under_the_default_limit() {
    let report = validate(&fan_out(50_000));

    assert!(!report.valid, "a plan above the limit is invalid");
    let d = only(&report, Code::TooManySteps);
    assert_at(&d, "/steps", None);
    assert!(d.message.contains("50002"), "the message gives the count: {}", d.message);
}
