//! A database created by the migrations before step facts (through 0011) upgrades: a run caught mid-flight keeps
//! going and finishes, its pending steps given the `starts_itself` fact the statements now compare, the events
//! it recorded as JSON text read as before beside the ones recorded after in payload columns; a run with a step
//! already failed is counted (`runs.failed_steps`) and so still ends failed; and on PostgreSQL the stored
//! functions are redefined from `store/sql/postgres/functions/`.
//!
//! The old schema is made by applying the migrations up to 0011 from a copy of their files, and the mid-flight
//! run is written with the statements of that schema (no code of this version touches it before the upgrade).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use cairn_store::{ClaimRequest, Claimed, Report, ReportLimits, Store};
use serde_json::json;
use sqlx::migrate::Migrator;

const T0: i64 = 1_767_225_600_000;
const TTL: i64 = 30_000;
const LIMITS: ReportLimits = ReportLimits { max_output_bytes: 1 << 20 };
/// The last migration before step facts.
const BEFORE: i64 = 11;

/// A scratch directory, removed on drop: `dialect`'s migrations up to [`BEFORE`] ([`OldMigrations::copy`]), or
/// the SQLite database.
struct OldMigrations(PathBuf);

impl OldMigrations {
    fn copy(dialect: &str, name: &str) -> OldMigrations {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations").join(dialect);
        let dir = std::env::temp_dir().join(format!("cairn-upgrade-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(source).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let version: i64 = file.split('_').next().unwrap().parse().unwrap();
            if version <= BEFORE {
                std::fs::copy(&path, dir.join(&file)).unwrap();
            }
        }
        OldMigrations(dir)
    }

    async fn migrator(&self) -> Migrator {
        Migrator::new(self.0.as_path()).await.unwrap()
    }
}

impl Drop for OldMigrations {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The mid-flight run as the old schema holds it: `a` (ready) → `b` (pending, plain) → `c` (pending, `when`),
/// with the events its submission recorded, their payloads JSON text.
const OLD_RUN: [&str; 5] = [
    "INSERT INTO plans (id, body, created_at) VALUES ('p-old', '{\"goal\":\"old\",\"steps\":[]}', 1767225600000)",
    "INSERT INTO runs (id, plan_id, status, input, context, step_count, open_steps, created_at, updated_at) \
     VALUES ('r-old', 'p-old', 'pending', '{}', '{}', 3, 3, 1767225600000, 1767225600000)",
    "INSERT INTO steps (run_id, step_id, position, action, status, args, when_expr, trigger_rule, idempotent, \
     timeout_ms, retry, dep_count, pending_deps, available_at, updated_at, child_count, successor_action) VALUES \
     ('r-old', 'a', 0, 'noop', 'ready', '{}', NULL, 'all_success', 1, 60000, '{\"max_attempts\":1}', 0, 0, \
       1767225600000, 1767225600000, 1, NULL), \
     ('r-old', 'b', 1, 'noop', 'pending', '{}', NULL, 'all_success', 1, 60000, '{\"max_attempts\":1}', 1, 1, \
       NULL, 1767225600000, 1, NULL), \
     ('r-old', 'c', 2, 'noop', 'pending', '{}', 'steps.b.status == \"succeeded\"', 'all_success', 1, 60000, \
       '{\"max_attempts\":1}', 1, 1, NULL, 1767225600000, 0, NULL)",
    "INSERT INTO step_edges (run_id, parent, child) VALUES ('r-old', 'a', 'b'), ('r-old', 'b', 'c')",
    "INSERT INTO run_events (run_id, step_id, kind, data, at) VALUES \
     ('r-old', NULL, 'run_created', '{\"plan_id\":\"p-old\",\"steps\":3}', 1767225600000), \
     ('r-old', 'a', 'step_ready', '{\"available_at\":1767225600000}', 1767225600000)",
];

/// When the step of [`OLD_FAILED_RUN`] that is left comes due: after the chain of [`OLD_RUN`] finished.
const LATER: i64 = T0 + 86_400_000;

/// A second mid-flight run: `x` failed, `y` (`all_done`, so it runs anyway) ready from [`LATER`].
const OLD_FAILED_RUN: [&str; 3] = [
    "INSERT INTO runs (id, plan_id, status, input, context, step_count, open_steps, created_at, updated_at) \
     VALUES ('r-failed', 'p-old', 'running', '{}', '{}', 2, 1, 1767225600000, 1767225600000)",
    "INSERT INTO steps (run_id, step_id, position, action, status, args, when_expr, trigger_rule, idempotent, \
     timeout_ms, retry, dep_count, pending_deps, available_at, updated_at, child_count, successor_action, error, \
     attempt) VALUES \
     ('r-failed', 'x', 0, 'noop', 'failed', '{}', NULL, 'all_success', 1, 60000, '{\"max_attempts\":1}', 0, 0, \
       NULL, 1767225600000, 1, NULL, '{\"code\":\"bad_request\",\"message\":\"no\"}', 1), \
     ('r-failed', 'y', 1, 'noop', 'ready', '{}', NULL, 'all_done', 1, 60000, '{\"max_attempts\":1}', 1, 0, \
       1767312000000, 1767225600000, 0, NULL, NULL, 0)",
    "INSERT INTO step_edges (run_id, parent, child) VALUES ('r-failed', 'x', 'y')",
];

/// Runs the second old run's last step: the run ends failed, naming the step that failed before the upgrade.
async fn finish_the_failed_run(store: &Store) {
    let claimed = claim(store, LATER).await;
    let ids: Vec<&str> = claimed.iter().map(|c| c.lease.step_id.as_str()).collect();
    assert_eq!(ids, ["y"], "the all_done step runs after its failed dependency");
    let report = store.complete(&claimed[0].lease, &json!({}), LIMITS, LATER).await.unwrap();
    assert_eq!(report, Report::Succeeded);
    let run = store.run_detail("r-failed").await.unwrap().unwrap().run;
    assert_eq!(run.status, "failed", "the step that failed before the upgrade still fails the run");
    assert_eq!(run.failure.unwrap()["step_id"], "x");
}

async fn claim(store: &Store, now: i64) -> Vec<Claimed> {
    let req = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 10, now_ms: now };
    store.claim(&req, TTL).await.unwrap()
}

/// Runs the upgraded run to its end: each step is claimed alone, in chain order, and succeeds.
async fn finish_the_old_run(store: &Store) {
    for (i, expected) in ["a", "b", "c"].into_iter().enumerate() {
        let now = T0 + 1_000 * (i64::try_from(i).unwrap() + 1);
        let claimed = claim(store, now).await;
        let ids: Vec<&str> = claimed.iter().map(|c| c.lease.step_id.as_str()).collect();
        assert_eq!(ids, [expected], "the upgraded run's steps become ready one by one, in chain order");
        let report = store.complete(&claimed[0].lease, &json!({"step": expected}), LIMITS, now).await.unwrap();
        assert_eq!(report, Report::Succeeded);
    }
    let detail = store.run_detail("r-old").await.unwrap().unwrap();
    assert_eq!(detail.run.status, "succeeded", "the run caught by the upgrade finishes");
    let events = store.events("r-old", 0, 100).await.unwrap();
    let data: Vec<_> = events.iter().map(|e| e.data.clone()).collect();
    assert_eq!(
        data[..3],
        [
            json!({"plan_id": "p-old", "steps": 3}),
            json!({"available_at": T0}),
            json!({"attempt": 1, "worker_id": "w1"})
        ],
        "the events recorded before the upgrade read as written, and those after as they always did"
    );
    let kinds: Vec<(Option<String>, String)> = events.into_iter().map(|e| (e.step_id, e.kind.to_string())).collect();
    let step = |id: &str, kind: &str| (Some(id.to_owned()), kind.to_owned());
    assert_eq!(
        kinds,
        [
            (None, "run_created".to_owned()),
            step("a", "step_ready"),
            step("a", "step_started"),
            step("a", "step_succeeded"),
            step("b", "step_ready"),
            step("b", "step_started"),
            step("b", "step_succeeded"),
            step("c", "step_ready"),
            step("c", "step_started"),
            step("c", "step_succeeded"),
            (None, "run_succeeded".to_owned()),
        ],
        "the upgraded run records what a run submitted after the upgrade records"
    );
}

#[tokio::test]
async fn a_sqlite_database_of_the_previous_schema_upgrades_and_its_run_finishes() {
    let old = OldMigrations::copy("sqlite", "sqlite");
    let db = OldMigrations(std::env::temp_dir().join(format!("cairn-upgrade-{}-db", std::process::id())));
    std::fs::create_dir_all(&db.0).unwrap();
    let url = format!("sqlite:{}?mode=rwc", db.0.join("old.db").display());
    {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        old.migrator().await.run(&pool).await.unwrap();
        for statement in OLD_RUN.iter().chain(&OLD_FAILED_RUN) {
            sqlx::query(*statement).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }

    let store = Store::connect(&url).await.expect("the previous schema upgrades");

    let Store::Sqlite(pool) = &store else { unreachable!("a SQLite URL") };
    let facts: Vec<(String, i64)> =
        sqlx::query_as("SELECT step_id, starts_itself FROM steps WHERE run_id = 'r-old' ORDER BY position")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(facts, [("a".into(), 0), ("b".into(), 1), ("c".into(), 0)], "pending steps get their fact");
    finish_the_old_run(&store).await;
    finish_the_failed_run(&store).await;
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL upgrade test skipped")]
async fn a_postgres_database_of_the_previous_schema_upgrades_and_its_run_finishes(pool: sqlx::PgPool) {
    let old = OldMigrations::copy("postgres", "postgres");
    old.migrator().await.run(&pool).await.unwrap();
    for statement in OLD_RUN.iter().chain(&OLD_FAILED_RUN) {
        sqlx::query(*statement).execute(&pool).await.unwrap();
    }
    let chain_before: String = sqlx::query_scalar("SELECT pg_get_functiondef('cairn_complete_and_claim'::regproc)")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(chain_before.contains("when_expr IS NULL"), "the previous schema's function reads the step's rules");

    let store = Store::Postgres(pool.clone());
    store.migrate().await.expect("the previous schema upgrades");

    let chain_after: String = sqlx::query_scalar("SELECT pg_get_functiondef('cairn_complete_and_claim'::regproc)")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        chain_after.contains("starts_itself") && !chain_after.contains("when_expr"),
        "the function is redefined from its file: {chain_after}"
    );
    let facts: Vec<(String, i64)> =
        sqlx::query_as("SELECT step_id, starts_itself FROM steps WHERE run_id = 'r-old' ORDER BY position")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(facts, [("a".into(), 0), ("b".into(), 1), ("c".into(), 0)], "pending steps get their fact");
    store.migrate().await.expect("migrating again changes nothing");
    finish_the_old_run(&store).await;
    finish_the_failed_run(&store).await;
}
