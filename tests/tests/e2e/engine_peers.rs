//! Orchestrators sharing one PostgreSQL database wake each other's long polls (issue 8, `engine/peers.rs`): a
//! worker polling one orchestrator gets a step submitted through another as soon as it is committed, not at its
//! poll's idle re-check. The re-check is set to a minute here and the poll to 30 s, so within the test's 10 s only
//! the wake-up can deliver the step.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::StaticCatalog;
use cairn_orchestrator::{Engine, EngineConfig};
use cairn_store::Store;
use cairn_tests::http::{holds_for, within};
use cairn_tests::{Backend, TestApp};
use serde_json::json;

const START: &str = "2027-03-14T12:00:00Z";

#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: the peer channel between orchestrators needs PostgreSQL")]
async fn a_poll_on_one_orchestrator_gets_a_run_submitted_through_another() {
    let config = EngineConfig { idle_recheck: Duration::from_secs(60), ..EngineConfig::default() };
    let a = TestApp::with_config(Backend::Postgres, START, config.clone()).await;
    let store = Store::connect(&a.url).await.unwrap();
    let b = Engine::start(store, a.clock.clone(), Arc::new(StaticCatalog::builtin()), config).await.unwrap();
    within(Duration::from_secs(10), "the two orchestrators heard each other", || async {
        (a.engine.hears_other_orchestrators() && b.hears_other_orchestrators()).then_some(())
    })
    .await;
    let poller = b.clone();
    let poll = tokio::spawn(async move {
        poller.claim_wait("w1", &["noop".to_owned()], 1, Duration::from_secs(30)).await.unwrap()
    });
    within(Duration::from_secs(10), "the poll waits on the second orchestrator", || async {
        (b.waiting_polls() == 1).then_some(())
    })
    .await;

    let run = a.submit(json!({"steps": [{"id": "s", "action": "noop", "args": {}}]})).await;

    let claimed = tokio::time::timeout(Duration::from_secs(10), poll).await;
    let claimed = claimed.expect("woken by the first orchestrator's commit, not by its re-check").unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].lease.run_id.as_str(), claimed[0].lease.step_id.as_str()), (run.as_str(), "s"));
}

/// One orchestrator alone hears no other (its own messages do not count), so it sends no wake-ups.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: the peer channel between orchestrators needs PostgreSQL")]
async fn an_orchestrator_alone_hears_no_other() {
    let a = TestApp::new(Backend::Postgres, START).await;
    a.submit(json!({"steps": [{"id": "s", "action": "noop", "args": {}}]})).await;

    // Its hello (sent once it listens) comes back to its own listener within this time.
    holds_for(Duration::from_millis(500), "it hears no other orchestrator", || async {
        !a.engine.hears_other_orchestrators()
    })
    .await;
}

use crate::pg_proxy;

/// A listener whose connection is cut without a close (a failover, a network cut) never hears of it: sqlx's
/// listener only reads. The second orchestrator's listener goes through a proxy that answers its `LISTEN` and then
/// passes nothing either way; after three hellos of silence (its own hellos included) it listens again on a new
/// connection, hears the first orchestrator, and its polls are woken again.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: the peer channel between orchestrators needs PostgreSQL")]
async fn a_listener_cut_without_a_close_listens_again_and_wake_ups_resume() {
    let config = EngineConfig {
        idle_recheck: Duration::from_secs(60),
        peer_hello_every: Duration::from_millis(300),
        ..EngineConfig::default()
    };
    let a = TestApp::with_config(Backend::Postgres, START, config.clone()).await;
    let options: sqlx::postgres::PgConnectOptions = a.url.parse().unwrap();
    let server = tokio::net::lookup_host((options.get_host(), options.get_port())).await.unwrap().next().unwrap();
    let (port, armed) = pg_proxy::proxy(server, b"LISTEN", false, pg_proxy::Loss::SilenceAfter).await;
    let database = options.get_database().unwrap();
    let store =
        Store::connect(&format!("postgres://{}@127.0.0.1:{port}/{database}", options.get_username())).await.unwrap();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let b = Engine::start(store, a.clock.clone(), Arc::new(StaticCatalog::builtin()), config).await.unwrap();
    within(Duration::from_secs(10), "the first orchestrator hears the second's hellos", || async {
        a.engine.hears_other_orchestrators().then_some(())
    })
    .await;
    assert!(!armed.load(std::sync::atomic::Ordering::SeqCst), "the second's listener was cut after its LISTEN");

    within(Duration::from_secs(10), "the second orchestrator listens again and hears the first", || async {
        b.hears_other_orchestrators().then_some(())
    })
    .await;
    let poller = b.clone();
    let poll = tokio::spawn(async move {
        poller.claim_wait("w1", &["noop".to_owned()], 1, Duration::from_secs(30)).await.unwrap()
    });
    within(Duration::from_secs(10), "the poll waits on the second orchestrator", || async {
        (b.waiting_polls() == 1).then_some(())
    })
    .await;
    let run = a.submit(json!({"steps": [{"id": "s", "action": "noop", "args": {}}]})).await;

    let claimed = tokio::time::timeout(Duration::from_secs(10), poll).await;
    let claimed = claimed.expect("woken through the new listener, not by the re-check").unwrap();
    assert_eq!((claimed[0].lease.run_id.as_str(), claimed[0].lease.step_id.as_str()), (run.as_str(), "s"));
}
