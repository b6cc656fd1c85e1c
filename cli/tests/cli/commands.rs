//! The real `cairn` binary: exit codes (0 valid, 1 invalid, 2 usage or I/O error), text and JSON output, stdin.
//!
//! Tests run with the crate directory (`cli/`) as the working directory, so the examples are at `../examples/`.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn")).args(args).output().unwrap()
}

fn cairn_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// A file under the system temp dir, unique to this test process and `name`, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> Self {
        let path = std::env::temp_dir().join(format!("cairn-cli-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const EXAMPLE: &str = "../examples/rain-reminder.json";
const BROKEN: &str = "../examples/broken-plan.json";

#[test]
fn valid_example_exits_zero_and_says_valid() {
    let output = cairn(&["validate", EXAMPLE]);

    assert_eq!(output.status.code(), Some(0), "a valid plan exits 0");
    assert!(
        stdout(&output).starts_with(&format!("{EXAMPLE}: valid")),
        "the output says the plan is valid: {}",
        stdout(&output)
    );
}

#[test]
fn broken_example_exits_one_and_prints_every_problem() {
    let output = cairn(&["validate", BROKEN]);
    let text = stdout(&output);

    assert_eq!(output.status.code(), Some(1), "an invalid plan exits 1");
    for code in ["unknown_action", "unknown_dependency", "self_dependency", "timeout_out_of_range", "invalid_timezone"]
    {
        assert!(text.contains(&format!("[{code}]")), "every problem is printed, `{code}` too:\n{text}");
    }
    assert!(text.contains("did you mean `weather.forecast`?"), "the misspelt action gets a suggestion:\n{text}");
    assert!(text.contains("did you mean `weather`?"), "the misspelt dependency gets a suggestion:\n{text}");
    assert!(text.contains("/steps/0/action"), "diagnostics carry their pointer:\n{text}");
}

#[test]
fn json_format_prints_a_parsable_report_per_file() {
    let output = cairn(&["validate", "--format", "json", BROKEN, EXAMPLE]);
    let lines: Vec<Value> = stdout(&output).lines().map(|line| serde_json::from_str(line).unwrap()).collect();

    assert_eq!(output.status.code(), Some(1), "one invalid file makes the exit code 1");
    assert_eq!(lines.len(), 2, "one JSON object per file, one per line");
    let broken = &lines[0];
    assert_eq!(broken["file"], BROKEN, "each report names its file");
    assert_eq!(broken["valid"], false, "the broken plan is reported invalid");
    let diagnostics = broken["diagnostics"].as_array().unwrap();
    let codes: Vec<&str> = diagnostics.iter().map(|d| d["code"].as_str().unwrap()).collect();
    assert!(
        codes.contains(&"unknown_action") && codes.contains(&"self_dependency"),
        "diagnostics carry stable codes: {codes:?}"
    );
    for d in diagnostics {
        for field in ["severity", "code", "step_id", "pointer", "message", "hint"] {
            assert!(d.get(field).is_some(), "every diagnostic has `{field}`: {d}");
        }
    }
    assert_eq!(lines[1]["valid"], true, "the example is reported valid");
    assert_eq!(lines[1]["diagnostics"], Value::Array(vec![]), "with nothing to say");
}

#[test]
fn dash_reads_the_plan_from_stdin() {
    let plan = std::fs::read_to_string(EXAMPLE).unwrap();

    let valid = cairn_with_stdin(&["validate", "-"], &plan);
    let invalid = cairn_with_stdin(&["validate", "--format", "json", "-"], r#"{"steps":[{"id":"a","action":"nope"}]}"#);

    assert_eq!(valid.status.code(), Some(0), "a valid plan on stdin exits 0");
    assert!(stdout(&valid).starts_with("<stdin>"), "stdin is named `<stdin>`: {}", stdout(&valid));
    assert_eq!(invalid.status.code(), Some(1), "an invalid plan on stdin exits 1");
    let report: Value = serde_json::from_str(stdout(&invalid).trim()).unwrap();
    assert_eq!(report["diagnostics"][0]["code"], "unknown_action", "stdin is validated");
}

#[test]
fn yaml_file_is_validated_by_its_extension() {
    let file = TempFile::new(
        "plan.yaml",
        "steps:\n  - id: a\n    action: noop\n  - id: b\n    action: noop\n    depends_on: [a]\n",
    );

    let output = cairn(&["validate", file.path()]);

    assert_eq!(output.status.code(), Some(0), "a valid YAML plan exits 0: {}", stdout(&output));
}

#[test]
fn missing_file_exits_two_with_an_error_on_stderr() {
    let output = cairn(&["validate", "../examples/no-such-plan.json"]);

    assert_eq!(output.status.code(), Some(2), "an unreadable file is an I/O error");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("no-such-plan.json"), "the error names the file: {stderr}");
}

#[test]
fn malformed_json_exits_one_with_a_parse_error_naming_line_and_column() {
    let file = TempFile::new("malformed.json", "{\n  \"steps\": [\n    {\"id\": }\n  ]\n}\n");

    let output = cairn(&["validate", "--format", "json", file.path()]);

    assert_eq!(output.status.code(), Some(1), "an unparsable plan is invalid, not an I/O error");
    let report: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    let d = &report["diagnostics"][0];
    assert_eq!(d["code"], "parse_error", "the problem is a parse error");
    let message = d["message"].as_str().unwrap();
    assert!(message.contains("line 3") && message.contains("column"), "the message names line and column: {message}");
}

#[test]
fn no_file_argument_is_a_usage_error() {
    let output = cairn(&["validate"]);

    assert_eq!(output.status.code(), Some(2), "missing arguments exit 2");
}

#[test]
fn max_steps_flag_sets_the_step_limit() {
    let output = cairn(&["validate", "--max-steps", "2", EXAMPLE]);

    assert_eq!(output.status.code(), Some(1), "three steps are over a limit of two");
    assert!(stdout(&output).contains("[too_many_steps]"), "the limit is reported: {}", stdout(&output));
}

#[test]
fn schema_plan_prints_a_json_schema_with_steps() {
    let output = cairn(&["schema", "plan"]);

    assert_eq!(output.status.code(), Some(0), "printing a schema succeeds");
    let schema: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert!(schema.is_object(), "the schema is a JSON object");
    assert!(schema["properties"]["steps"].is_object(), "the plan schema describes `steps`: {schema}");
    assert!(schema["required"].as_array().is_some_and(|r| r.contains(&Value::from("steps"))), "`steps` is required");
}

#[test]
fn schema_actions_lists_the_builtin_actions() {
    let output = cairn(&["schema", "actions"]);

    assert_eq!(output.status.code(), Some(0), "printing a schema succeeds");
    let actions: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let names: Vec<&str> = actions.as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"weather.forecast") && names.contains(&"notify.send"),
        "the built-ins are listed: {names:?}"
    );
}

#[test]
fn unknown_schema_subject_is_a_usage_error() {
    let output = cairn(&["schema", "plans"]);

    assert_eq!(output.status.code(), Some(2), "a bad subject exits 2");
}

/// Issue "Hardening" F1: a `when` of 50,000 terms would abort `cairn validate` with a stack overflow; it is an
/// invalid plan (exit 1) whose diagnostic names the limit.
#[test]
fn validate_refuses_a_when_of_fifty_thousand_terms_with_exit_1() {
    let when = format!("{} == 0", vec!["1"; 50_000].join(" + "));
    let plan = serde_json::json!({"steps": [{"id": "b", "action": "noop"},
        {"id": "a", "action": "noop", "depends_on": ["b"], "when": when}]});
    let file = TempFile::new("deep-when.json", &plan.to_string());

    let output = cairn(&["validate", "--format", "json", file.path()]);

    assert_eq!(output.status.code(), Some(1), "invalid, not aborted: {}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout(&output).contains("limit_exceeded"), "the diagnostic names the limit: {}", stdout(&output));
}

/// `cairn validate --catalog FILE` checks actions of your own against a saved `GET /v1/actions`; offline they are
/// `unknown_action`; an unreachable `--server` is exit 2 (issue "Your own code", point 4).
#[test]
fn validate_against_a_catalog_file_accepts_a_registered_action_and_an_unreachable_server_is_exit_2() {
    let plan = TempFile::new(
        "own-action.json",
        r#"{"steps": [{"id": "who", "action": "crm.lookup", "args": {"id": "c-1"}}]}"#,
    );
    let catalog = TempFile::new(
        "catalog.json",
        &serde_json::json!({"actions": [{"name": "crm.lookup", "version": "1", "description": "", "effect": "read",
            "args_schema": {"type": "object", "required": ["id"]}, "output_schema": {}, "workers": [], "connected": false}]})
        .to_string(),
    );

    let offline = cairn(&["validate", plan.path()]);
    let against_file = cairn(&["validate", "--catalog", catalog.path(), plan.path()]);
    let unreachable = cairn(&["validate", "--server", "http://127.0.0.1:9", plan.path()]);

    assert_eq!(offline.status.code(), Some(1), "offline, an action of your own is unknown: {}", stdout(&offline));
    assert!(stdout(&offline).contains("unknown_action"));
    assert_eq!(against_file.status.code(), Some(0), "valid against the catalog: {}", stdout(&against_file));
    assert_eq!(unreachable.status.code(), Some(2), "{}", String::from_utf8_lossy(&unreachable.stderr));
}
