//! The registry serves exactly the catalog's built-in actions, and each typed `Args` accepts what the
//! catalog's schema accepts.

use std::collections::BTreeSet;

use cairn_core::catalog::{ActionCatalog, StaticCatalog, builtin_specs};
use cairn_workers::actions::{ActionsConfig, registry};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn parses<T: DeserializeOwned>(args: &Value) -> bool {
    serde_json::from_value::<T>(args.clone()).is_ok()
}

/// Whether the typed args of `name` deserialize `args`.
fn typed_accepts(name: &str, args: &Value) -> bool {
    use cairn_workers::actions::{condition, http, llm, notify, sleep, weather};
    match name {
        "noop" => parses::<serde_json::Map<String, Value>>(args),
        "sleep" => parses::<sleep::SleepArgs>(args),
        "condition.eval" => parses::<condition::ConditionArgs>(args),
        "http.request" => parses::<http::HttpArgs>(args),
        "weather.forecast" => parses::<weather::WeatherArgs>(args),
        "notify.send" => parses::<notify::NotifyArgs>(args),
        "llm.chat" => parses::<llm::LlmArgs>(args),
        other => panic!("no typed args for `{other}`"),
    }
}

#[test]
fn the_registry_serves_every_builtin_of_the_catalog_with_the_same_effect() {
    let served = registry(&ActionsConfig::default());
    let names: BTreeSet<String> = served.iter().map(|a| a.spec().name).collect();
    // `event.wait` is carried out by the orchestrator itself (it waits for `POST /v1/events`), never by a worker.
    let catalog: BTreeSet<String> =
        builtin_specs().into_iter().map(|s| s.name).filter(|name| name != "event.wait").collect();
    assert_eq!(names, catalog, "the worker serves every worker-side action the validator accepts");
    for action in &served {
        let spec = action.spec();
        let builtin = builtin_specs().into_iter().find(|s| s.name == spec.name).expect("listed");
        assert_eq!(spec.effect, builtin.effect, "`{}` declares the catalog's effect", spec.name);
        assert_eq!(spec.grounded_args, builtin.grounded_args, "`{}` grounds the same args", spec.name);
        assert_eq!(spec.recipient_args, builtin.recipient_args, "`{}` names recipients at the same args", spec.name);
    }
}

#[test]
fn args_the_catalog_accepts_deserialize_into_the_typed_args() {
    let samples = [
        ("noop", json!({"anything": [1, 2]})),
        ("sleep", json!({"duration_ms": 0})),
        ("condition.eval", json!({"expr": "input.p > 1", "vars": {"p": 2}})),
        (
            "http.request",
            json!({"method": "PATCH", "url": "http://x", "headers": {"a": "b"}, "body": [1], "timeout_ms": 1}),
        ),
        ("weather.forecast", json!({"city": "Wuhan", "date": "2027-03-15", "latitude": 30.5, "longitude": 114})),
        (
            "notify.send",
            json!({"text": "t", "title": "x", "channels": ["file"], "to": "me", "success_policy": "any", "extra": 1}),
        ),
        (
            "notify.send",
            json!({"text": "t", "to": ["a", "b"], "channels": ["telegram", "email"], "success_policy": {"min": 1},
                   "channel_retry": {"delays_ms": [0, 10]}}),
        ),
        (
            "llm.chat",
            json!({"prompt": "p", "system": "s", "model": "m", "messages": [], "max_tokens": 5, "temperature": 0}),
        ),
    ];
    let catalog = StaticCatalog::builtin();
    let served = registry(&ActionsConfig::default());
    for (name, args) in samples {
        let entry = catalog.get(name).expect("builtin");
        assert!(entry.check_args(&args).is_empty(), "the sample for `{name}` is valid per the catalog");
        assert!(typed_accepts(name, &args), "`{name}`'s typed args deserialize the sample");
        let action = served.iter().find(|a| a.spec().name == name).expect("served");
        let typed = action.spec().args_schema;
        let validator = jsonschema::validator_for(&typed).expect("the typed schema compiles");
        assert!(validator.is_valid(&args), "`{name}`'s typed args schema accepts the sample");
    }
}

#[test]
fn args_the_catalog_rejects_are_rejected_by_the_typed_args_too() {
    let samples = [
        ("sleep", json!({"duration_ms": 5, "extra": true})),
        ("condition.eval", json!({"expr": "true", "unexpected": 1})),
        ("http.request", json!({"url": "http://x", "method": "get"})),
        ("weather.forecast", json!({"city": "Wuhan", "country": "CN"})),
        ("notify.send", json!({"text": "t", "success_policy": "most"})),
        ("notify.send", json!({"text": "t", "channels": ["app"]})),
        ("notify.send", json!({"text": "t", "success_policy": {"min": 0}})),
        ("notify.send", json!({"text": "t", "channel_retry": {"tries": 3}})),
    ];
    let catalog = StaticCatalog::builtin();
    for (name, args) in samples {
        assert!(!catalog.get(name).expect("builtin").check_args(&args).is_empty(), "the catalog rejects {args}");
        assert!(!typed_accepts(name, &args), "`{name}`'s typed args reject {args} as the catalog does");
    }
}

#[tokio::test]
async fn noop_echoes_its_args() {
    let served = registry(&ActionsConfig::default());
    let noop = served.iter().find(|a| a.spec().name == "noop").expect("served");
    let ctx = cairn_workers::context::ActionContext::standalone("join", std::time::Duration::from_secs(1));
    let args = json!({"a": 1, "nested": {"b": [true, null]}});
    assert_eq!(noop.call(args.clone(), &ctx).await, Ok(args), "the output is the args, unchanged");
}
