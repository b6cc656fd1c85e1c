//! `cairn bench --json`: the fields issue 8 says scripts rely on, from a real orchestrator and worker processes
//! on a temporary SQLite file. Behaviour only (which figures are printed and that they describe finished runs);
//! how fast is for `cairn bench` itself, not for tests, so each runs small (`--steps`, `--runs`).

#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde_json::Value;

/// Runs `cairn bench SCENARIO --json` with `size` flags and returns its one JSON line.
fn bench(scenario: &str, size: &[&str]) -> Value {
    let out =
        Command::new(env!("CARGO_BIN_EXE_cairn")).args(["bench", scenario, "--json"]).args(size).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "bench {scenario} failed: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object per scenario: {stdout}");
    serde_json::from_str(lines[0]).unwrap()
}

fn number(figures: &Value, field: &str) -> f64 {
    figures[field].as_f64().unwrap_or_else(|| panic!("`{field}` is a number in {figures}"))
}

#[test]
fn chain_reports_per_step_figures_and_the_configuration() {
    let figures = bench("chain", &["--runs", "3", "--steps", "5"]);
    assert_eq!(figures["scenario"], "chain");
    let (median, p99) = (number(&figures, "per_step_ms_median"), number(&figures, "per_step_ms_p99"));
    assert!(median > 0.0 && p99 > 0.0, "a step's cycle takes time: {figures}");
    let means = figures["per_step_ms_run_means"].as_array().unwrap();
    assert_eq!(means.len(), 3, "one mean per run");
    assert_eq!((figures["runs"].as_u64(), figures["steps"].as_u64()), (Some(3), Some(5)), "the size asked for");
    assert_eq!(figures["db"], "sqlite", "the embedded default");
    assert_eq!(figures["workers"], 1);
    assert_eq!(figures["concurrency"], 16);
}

#[test]
fn fanout_reports_the_wall_time_of_a_finished_run() {
    let figures = bench("fanout", &["--steps", "20"]);
    assert_eq!(figures["scenario"], "fanout");
    assert_eq!(figures["width"], 20, "the width asked for");
    assert!(number(&figures, "wall_ms") > 0.0, "run finished − run created: {figures}");
    assert!(figures.get("per_step_ms_median").is_none(), "chain's fields belong to chain: {figures}");
}

/// The figures' arithmetic is unit-tested on synthetic timelines (`drain_figures` in `bench/src/scenarios.rs`);
/// here, that a real run prints every field scripts read.
#[test]
fn throughput_reports_the_drain_and_the_submission_apart() {
    let figures = bench("throughput", &["--steps", "500"]);
    assert_eq!(figures["scenario"], "throughput");
    assert_eq!(figures["steps"], 500);
    for field in [
        "span_ms",
        "steps_per_sec",
        "dispatch_latency_ms_p50",
        "dispatch_latency_ms_p99",
        "submit_ms",
        "steps_per_sec_from_ready",
    ] {
        number(&figures, field);
    }
}

#[test]
fn validate_reports_the_time_to_the_answer_for_a_wide_plan() {
    let figures = bench("validate", &["--steps", "50", "--runs", "3"]);
    assert_eq!(figures["scenario"], "validate");
    assert_eq!((figures["width"].as_u64(), figures["runs"].as_u64()), (Some(50), Some(3)), "the size asked for");
    let (median, max) = (number(&figures, "validate_ms_median"), number(&figures, "validate_ms_max"));
    assert!(median > 0.0 && max >= median, "three answers, the slowest last: {figures}");
}

#[test]
fn a_size_that_measures_nothing_is_refused_before_any_process_starts() {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn")).args(["bench", "chain", "--steps", "1"]).output().unwrap();

    assert_eq!(out.status.code(), Some(2), "refused as an error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--steps must be at least 2 for `chain`"), "says why: {stderr}");
}
