//! Failure cases about conditions, skips and placeholder resolution, run through the real engine and store on
//! every available backend: C04, C07, C09, C26. Case names map to the contract as in `cases_validation.rs`.

#![allow(clippy::unwrap_used)]

use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn weather_returning(output: Value) -> TestWorker {
    TestWorker::new("w1")
        .on("weather.forecast", move |_| Outcome::Succeed(output.clone()))
        .echo("notify.send")
        .echo("noop")
        .echo("llm.chat")
}

on_both_backends!(c04_unresolvable_placeholders_fail_the_consumer_and_never_become_null);
/// C04: a missing key, an index out of range or a path through a number fails the consumer with
/// `placeholder_unresolved` naming the placeholder and the arg path; the handler is never invoked; a present
/// `null` stays `null`; an existing nested value keeps its JSON type.
async fn c04_unresolvable_placeholders_fail_the_consumer_and_never_become_null(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let worker = weather_returning(json!({"precip_prob":0.7,"uv":null,"hourly":[{"t":"08:00","p":0.6}]}));
    let run = app
            .submit(json!({"steps":[
              {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"}},
              {"id":"n1","action":"notify.send","args":{"text":"$weather.output.precipitation"},"depends_on":["weather"]},
              {"id":"n2","action":"notify.send","args":{"text":"x","p":"$weather.output.hourly[5].p"},"depends_on":["weather"]},
              {"id":"n3","action":"notify.send","args":{"text":"x","p":"$weather.output.precip_prob.value"},"depends_on":["weather"]},
              {"id":"n4","action":"notify.send","args":{"text":"x","p":"$weather.output.hourly[0].p"},"depends_on":["weather"]},
              {"id":"n5","action":"notify.send","args":{"text":"x","uv":"$weather.output.uv"},"depends_on":["weather"]}
            ]}))
            .await;
    worker.run_until_idle(&app.engine).await;
    for (step, arg) in [("n1", "/text"), ("n2", "/p"), ("n3", "/p")] {
        let s = app.step(&run, step).await;
        assert_eq!(s.status, "failed", "{backend:?} {step} must fail");
        let error = s.error.unwrap();
        assert_eq!(error["code"], "placeholder_unresolved");
        assert_eq!(error["retryable"], false, "resolution errors are deterministic and not retried");
        assert_eq!(error["details"]["arg_path"], arg);
        assert!(error["message"].as_str().unwrap().contains("$weather.output"), "{error}");
        assert!(worker.calls_for(step).is_empty(), "{step}: handler must not be invoked");
        assert_eq!(s.attempts, 1, "{step} must not be retried");
    }
    assert_eq!(worker.calls_for("n4")[0].args["p"], json!(0.6), "a number stays a number");
    assert_eq!(worker.calls_for("n5")[0].args["uv"], Value::Null, "a present null stays null");
    assert_eq!(app.run(&run).await.status, "failed", "{backend:?}");
}

fn c07_plan() -> Value {
    json!({"context":{"timezone":"Asia/Shanghai"},"steps":[
      {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"}},
      {"id":"rainy","action":"noop","args":{"p":"$weather.output.precip_prob"},"depends_on":["weather"],
       "when":"$weather.output.precip_prob >= 0.5"},
      {"id":"remind","action":"notify.send","args":{"text":"take umbrella"},"not_before":"tomorrow 08:00","depends_on":["rainy"]},
      {"id":"notify","action":"notify.send","args":{"text":"reminder set"},"depends_on":["remind"]}
    ]})
}

on_both_backends!(c07_skip_propagates_to_dependents_and_the_run_succeeds);
/// C07: a skip propagates through default (all_success) dependencies; a skip is not a failure.
async fn c07_skip_propagates_to_dependents_and_the_run_succeeds(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let worker = weather_returning(json!({"precip_prob": 0.1}));
    let run = app.submit(c07_plan()).await;
    worker.run_until_idle(&app.engine).await;
    for step in ["rainy", "remind", "notify"] {
        assert_eq!(app.status(&run, step).await, "skipped", "{backend:?} {step}");
    }
    assert!(worker.calls_for("remind").is_empty() && worker.calls_for("notify").is_empty(), "nothing is sent");
    assert_eq!(app.run(&run).await.status, "succeeded");
}

on_both_backends!(c07_with_rain_every_step_runs_exactly_once);
/// C07 inverse: with rain, every step runs once (the reminder at 08:00 local, after its timer).
async fn c07_with_rain_every_step_runs_exactly_once(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let worker = weather_returning(json!({"precip_prob": 0.7}));
    let run = app.submit(c07_plan()).await;
    worker.run_until_idle(&app.engine).await;
    assert_eq!(app.status(&run, "remind").await, "ready", "waits for its timer");
    app.set_time("2027-03-15T00:00:00Z"); // 08:00 in Shanghai
    worker.run_until_idle(&app.engine).await;
    for step in ["weather", "rainy", "remind", "notify"] {
        assert_eq!(app.status(&run, step).await, "succeeded", "{backend:?} {step}");
        assert_eq!(worker.calls_for(step).len(), 1, "{step} runs exactly once");
    }
    assert_eq!(app.run(&run).await.status, "succeeded");
}

on_both_backends!(c09_skipped_producer_skips_consumers_instead_of_failing_them);
/// C09: `when` and skip are decided before placeholders are resolved, so a skipped producer skips its
/// consumers instead of failing them.
async fn c09_skipped_producer_skips_consumers_instead_of_failing_them(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let worker = weather_returning(json!({"has_alerts": false, "alerts": []}));
    let run = app
        .submit(json!({"steps":[
          {"id":"weather","action":"weather.forecast","args":{"city":"Shanghai"}},
          {"id":"summarize","action":"llm.chat","args":{"prompt":"summarize ${weather.output.alerts}"},
           "depends_on":["weather"],"when":"$weather.output.has_alerts == true"},
          {"id":"send","action":"notify.send","args":{"text":"$summarize.output.text"},
           "depends_on":["summarize"],"when":"$weather.output.has_alerts == true"},
          {"id":"audit","action":"noop","args":{"s":"$summarize.output.text"},"depends_on":["summarize"]}
        ]}))
        .await;
    worker.run_until_idle(&app.engine).await;
    for step in ["summarize", "send", "audit"] {
        assert_eq!(app.status(&run, step).await, "skipped", "{backend:?} {step}");
        assert!(worker.calls_for(step).is_empty());
    }
    assert_eq!(app.run(&run).await.status, "succeeded");
}

on_both_backends!(c26_unicode_survives_persistence_and_placeholders_byte_for_byte);
/// C26: unicode reaches the next step byte-identical, also after a restart reads the output back from storage.
async fn c26_unicode_survives_persistence_and_placeholders_byte_for_byte(backend: Backend) {
    let summary = "明天有雨 🌧️，记得带伞";
    let long = "雨".repeat(5000);
    let app = TestApp::new(backend, START).await;
    let worker = weather_returning(json!({"summary": summary, "city": "上海"}));
    let run = app
        .submit(json!({"context":{"timezone":"Asia/Shanghai"},"steps":[
          {"id":"weather","action":"weather.forecast","args":{"city":"上海"}},
          {"id":"notify","action":"notify.send","args":{"text":"$weather.output.summary",
            "title":"天气：$weather.output.city ✅","nfd":"e\u{301}","rtl":"مطر","zwj":"👩\u{200d}💻","long": long},
           "depends_on":["weather"]},
          {"id":"remind","action":"notify.send","args":{"text":"$weather.output.summary"},
           "not_before":"tomorrow 08:00","depends_on":["weather"]}
        ]}))
        .await;
    let claimed = app.engine.claim("w1", &["weather.forecast".into()], 1).await.unwrap();
    worker.handle(&app.engine, claimed.into_iter().next().unwrap()).await;
    let app = app.restart().await; // (a) outputs are read back from storage
    app.set_time("2027-03-15T00:00:00Z");
    worker.run_until_idle(&app.engine).await;
    let args = &worker.calls_for("notify")[0].args;
    assert_eq!(args["text"], summary, "{backend:?}: text byte-identical including U+FE0F");
    assert_eq!(args["title"], "天气：上海 ✅");
    assert_eq!(args["nfd"], "e\u{301}", "no normalisation of arg values");
    assert_eq!(args["rtl"], "مطر");
    assert_eq!(args["zwj"], "👩\u{200d}💻");
    assert_eq!(args["long"].as_str().map(str::len), Some(long.len()));
    assert_eq!(worker.calls_for("remind")[0].args["text"], summary);
    assert_eq!(app.run(&run).await.status, "succeeded");
}
