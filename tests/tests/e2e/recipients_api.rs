//! Recipients over the REST API on both backends: created, replaced, read with secrets redacted, listed a page at
//! a time, deleted; bodies that break the rules refused with what is wrong; and submissions naming a missing
//! literal recipient or an unknown channel refused with a diagnostic before anything runs.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{HttpApp, TempDir, cairn};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

async fn app(backend: Backend) -> HttpApp {
    HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await
}

async fn put(app: &HttpApp, id: &str, body: &Value) -> (u16, Value) {
    HttpApp::send(app.request(reqwest::Method::PUT, &format!("/v1/recipients/{id}")).json(body)).await
}

fn reminder_to(to: Value, channels: Option<Value>) -> Value {
    let mut args = json!({"to": to, "text": "take an umbrella"});
    if let Some(channels) = channels {
        args["channels"] = channels;
    }
    json!({"steps": [{"id": "remind", "action": "notify.send", "args": args}]})
}

on_both_backends!(a_recipient_is_created_replaced_read_listed_and_deleted);
async fn a_recipient_is_created_replaced_read_listed_and_deleted(backend: Backend) {
    let app = app(backend).await;
    let alice = json!({"channels": {"telegram": {"chat_id": "42"},
        "webhook": {"url": "https://hooks.example.com/a", "secret": "s3cret-hmac"}}, "timezone": "Asia/Shanghai"});

    let (status, created) = put(&app, "alice", &alice).await;
    assert_eq!(status, 201, "{backend:?}: the first PUT creates: {created:#}");
    assert_eq!(created["channels"]["telegram"]["chat_id"], "42");
    assert_eq!(created["channels"]["webhook"]["secret"], "[REDACTED]", "secrets are never shown: {created:#}");
    assert_eq!(created["timezone"], "Asia/Shanghai");
    let (status, replaced) = put(&app, "alice", &json!({"channels": {"email": {"address": "a@example.com"}}})).await;
    assert_eq!(status, 200, "{backend:?}: a second PUT replaces: {replaced:#}");
    assert_eq!(replaced["channels"], json!({"email": {"address": "a@example.com"}}), "the channels are replaced");
    assert_eq!(replaced["created_at"], created["created_at"], "replacing keeps when it was created");

    let (status, shown) = app.get("/v1/recipients/alice").await;
    assert_eq!((status, &shown["channels"]), (200, &replaced["channels"]), "{backend:?}: GET reads it back");
    for id in ["bob", "carol", "dave"] {
        assert_eq!(put(&app, id, &json!({"channels": {"stdout": {}}})).await.0, 201);
    }
    let (status, first) = app.get("/v1/recipients?limit=3").await;
    assert_eq!(status, 200, "{first:#}");
    let ids: Vec<&str> = first["recipients"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["alice", "bob", "carol"], "{backend:?}: listed by id, a page at a time");
    assert_eq!(first["next_after"], "carol");
    let (_, second) = app.get("/v1/recipients?limit=3&after=carol").await;
    assert_eq!(second["recipients"].as_array().unwrap().len(), 1, "the last page: {second:#}");
    assert_eq!(second["next_after"], Value::Null, "nothing after the last page");

    let deleted = HttpApp::send(app.request(reqwest::Method::DELETE, "/v1/recipients/bob")).await;
    assert_eq!(deleted.0, 204, "{backend:?}: deleted: {deleted:?}");
    assert_eq!(app.get("/v1/recipients/bob").await.0, 404, "a deleted recipient is gone");
    let again = HttpApp::send(app.request(reqwest::Method::DELETE, "/v1/recipients/bob")).await;
    assert_eq!(again.0, 404, "deleting it again finds nothing");
}

on_both_backends!(a_recipient_that_breaks_the_rules_is_refused_saying_what_is_wrong);
async fn a_recipient_that_breaks_the_rules_is_refused_saying_what_is_wrong(backend: Backend) {
    let app = app(backend).await;
    let cases = [
        ("alice", json!({"channels": {"carrier_pigeon": {"loft": "3"}}}), "carrier_pigeon"),
        ("alice", json!({"channels": {"telegram": {}}}), "chat_id"),
        ("alice", json!({"channels": {"telegram": {"chat_id": "42", "token": "x"}}}), "token"),
        ("alice", json!({"channels": {}}), "at least one channel"),
        ("alice", json!({"channels": {"email": {"address": "not an address"}}}), "address"),
        ("alice", json!({"channels": {"stdout": {}}, "timezone": "Mars/Olympus"}), "Mars/Olympus"),
        ("not%20an%20id", json!({"channels": {"stdout": {}}}), "recipient id"),
    ];
    for (id, body, names) in cases {
        let (status, answer) = put(&app, id, &body).await;
        assert_eq!(status, 422, "{backend:?}: {body} is refused: {answer:#}");
        assert_eq!(answer["code"], "invalid_recipient", "{answer:#}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains(names), "the refusal names `{names}`: {message}");
    }
    assert_eq!(app.get("/v1/recipients").await.1["recipients"], json!([]), "{backend:?}: nothing was stored");
}

on_both_backends!(a_plan_naming_a_missing_recipient_or_an_unknown_channel_is_refused_at_submit);
async fn a_plan_naming_a_missing_recipient_or_an_unknown_channel_is_refused_at_submit(backend: Backend) {
    let app = app(backend).await;
    assert_eq!(put(&app, "alice", &json!({"channels": {"telegram": {"chat_id": "42"}}})).await.0, 201);

    let (status, refused) = app.post("/v1/runs", &json!({"plan": reminder_to(json!(["alice", "nobody"]), None)})).await;
    assert_eq!(status, 422, "{backend:?}: a missing literal recipient is refused: {refused:#}");
    let diagnostics = refused["details"]["diagnostics"].as_array().unwrap();
    let missing =
        diagnostics.iter().find(|d| d["code"] == "unknown_recipient").expect("an unknown_recipient diagnostic");
    assert_eq!(missing["pointer"], "/steps/0/args/to/1", "it points at the id: {missing:#}");
    assert!(missing["message"].as_str().unwrap().contains("nobody"), "{missing:#}");

    let plan = reminder_to(json!("alice"), Some(json!(["telegram", "carrier_pigeon"])));
    let (status, refused) = app.post("/v1/runs", &json!({"plan": plan})).await;
    assert_eq!(status, 422, "{backend:?}: an unknown channel name is refused: {refused:#}");
    let text = refused["details"]["diagnostics"].to_string();
    assert!(text.contains("/steps/0/args/channels/1"), "the diagnostic points at the channel: {text}");
    assert!(app.runs().await.is_empty(), "{backend:?}: neither plan created a run");

    let placeholder = json!({"steps": [
        {"id": "who", "action": "noop", "args": {"id": "nobody"}},
        {"id": "remind", "action": "notify.send", "depends_on": ["who"],
         "args": {"to": "$who.output.id", "text": "hi"}}]});
    let (status, accepted) = app.post("/v1/runs", &json!({"plan": placeholder})).await;
    assert_eq!(status, 201, "{backend:?}: a recipient from a placeholder is resolved at dispatch: {accepted:#}");
    let (status, ok) = app.post("/v1/runs", &json!({"plan": reminder_to(json!("alice"), None)})).await;
    assert_eq!(status, 201, "{backend:?}: an existing recipient is accepted: {ok:#}");
}

on_both_backends!(cairn_validate_with_a_server_checks_literal_recipients_as_submit_does);
async fn cairn_validate_with_a_server_checks_literal_recipients_as_submit_does(backend: Backend) {
    let app = app(backend).await;
    assert_eq!(put(&app, "alice", &json!({"channels": {"stdout": {}}})).await.0, 201);
    let dir = TempDir::new();
    let plan = dir.path().join("remind.json");
    std::fs::write(&plan, reminder_to(json!(["alice", "nobody"]), None).to_string()).unwrap();
    let plan = plan.display().to_string();

    let checked = cairn(dir.path(), &["validate", "--server", &app.base_url, &plan]).await;
    let offline = cairn(dir.path(), &["validate", &plan]).await;

    assert_eq!(checked.code, Some(1), "{backend:?}: the missing recipient makes it invalid: {checked:?}");
    assert!(checked.stdout.contains("unknown_recipient") && checked.stdout.contains("nobody"), "{}", checked.stdout);
    assert!(checked.stdout.contains("cairn recipient set nobody"), "the hint names the id: {}", checked.stdout);
    assert!(!checked.stdout.contains("`alice`"), "an existing recipient is fine: {}", checked.stdout);
    assert_eq!(offline.code, Some(0), "offline, recipients are not known and not checked: {offline:?}");
}
