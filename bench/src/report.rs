//! The one-line summary `cairn bench` prints per scenario unless asked for JSON.

use serde_json::Value;

/// A scenario's figures (as [`crate::run`] hands them over) as one line of text: the set-up, then the figures
/// that scenario is about.
pub fn summary(figures: &Value) -> String {
    let get = |k: &str| figures.get(k).cloned().unwrap_or(Value::Null);
    let orchestrators = match get("orchestrators").as_u64() {
        Some(n) if n > 1 => format!(", {n} orchestrators"),
        _ => String::new(),
    };
    let setup = format!(
        "[{} db{orchestrators}, {} worker(s) x concurrency {}, {} build]",
        get("db").as_str().unwrap_or("?"),
        get("workers"),
        get("concurrency"),
        get("build").as_str().unwrap_or("?")
    );
    match get("scenario").as_str().unwrap_or("?") {
        "chain" => format!(
            "chain      {setup}: per step median {} ms, p99 {} ms ({} runs of {} steps; orchestrator hand-off gap \
             median {} ms, p99 {} ms)",
            get("per_step_ms_median"),
            get("per_step_ms_p99"),
            get("runs"),
            get("steps"),
            get("handoff_gap_ms_median"),
            get("handoff_gap_ms_p99")
        ),
        "fanout" => format!(
            "fanout     {setup}: {} parallel steps + join finished in {} ms (client-observed {} ms)",
            get("width"),
            get("wall_ms"),
            get("client_wall_ms")
        ),
        "throughput" => format!(
            "throughput {setup}: {} steps, {} steps/s, dispatch latency p50 {} ms, p99 {} ms (after a {} ms \
             submission; {} steps/s counting it)",
            get("steps"),
            get("steps_per_sec"),
            get("dispatch_latency_ms_p50"),
            get("dispatch_latency_ms_p99"),
            get("submit_ms"),
            get("steps_per_sec_from_ready")
        ),
        "dispatch" => format!(
            "dispatch   {setup}: {} single-step runs arriving at {}/s: dispatch latency p50 {} ms, p99 {} ms, max {} \
             ms; {} steps/s",
            get("runs"),
            get("submit_per_sec"),
            get("dispatch_latency_ms_p50"),
            get("dispatch_latency_ms_p99"),
            get("dispatch_latency_ms_max"),
            get("steps_per_sec")
        ),
        "timers" => format!(
            "timers     {setup}: {} timers due at one instant all fired within {} ms (first after {} ms)",
            get("timers"),
            get("wall_ms"),
            get("first_ms")
        ),
        "validate" => format!(
            "validate   [{} db]: a {}-wide fan-out validated over the API in {} ms (median of {}; max {} ms)",
            get("db").as_str().unwrap_or("?"),
            get("width"),
            get("validate_ms_median"),
            get("runs"),
            get("validate_ms_max")
        ),
        "search" => {
            let queries = get("queries");
            let each: Vec<String> = queries
                .as_array()
                .map(|qs| {
                    qs.iter().map(|q| format!("{} {} ms", q["name"].as_str().unwrap_or("?"), q["ms_median"])).collect()
                })
                .unwrap_or_default();
            format!(
                "search     [{} db]: GET /v1/runs over {} runs, median of {}: {}",
                get("db").as_str().unwrap_or("?"),
                get("runs"),
                get("repeats"),
                each.join(", ")
            )
        }
        _ => format!(
            "memory     {setup}: {} pending timers in {} active runs: orchestrator RSS {} MB (before them: {} MB)",
            get("pending_timers"),
            get("active_runs"),
            get("rss_mb"),
            get("rss_mb_before")
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_chain_reads_as_its_set_up_and_per_step_figures() {
        let figures = json!({
            "scenario": "chain", "per_step_ms_median": 1.25, "per_step_ms_p99": 3.0, "runs": 20, "steps": 20,
            "handoff_gap_ms_median": 0.0, "handoff_gap_ms_p99": 1.0,
            "db": "postgres", "workers": 1, "concurrency": 16, "orchestrators": 2, "build": "release",
        });

        assert_eq!(
            summary(&figures),
            "chain      [postgres db, 2 orchestrators, 1 worker(s) x concurrency 16, release build]: per step median \
             1.25 ms, p99 3.0 ms (20 runs of 20 steps; orchestrator hand-off gap median 0.0 ms, p99 1.0 ms)"
        );
    }
}
