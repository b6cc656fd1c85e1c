//! The harness's PostgreSQL databases are clones of a template built once (`tests/src/databases.rs`): a clone
//! already holds every migration the store embeds, with the checksums it compares, and the stored functions, so
//! opening the store on it has nothing left to migrate.

#![allow(clippy::unwrap_used)]

use cairn_store::POSTGRES_MIGRATIONS;
use sqlx::{Connection, PgConnection};

#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: the template database is PostgreSQL's")]
async fn a_fresh_database_is_cloned_from_the_template_with_every_migration_already_applied() {
    let url = cairn_tests::postgres_url().await;
    let _database = cairn_tests::Dropped(url.clone());
    let mut clone = PgConnection::connect(&url).await.unwrap();

    let applied: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(&mut clone)
            .await
            .unwrap();
    let functions: Vec<String> = sqlx::query_scalar(
        "SELECT proname::text FROM pg_proc WHERE proname IN \
         ('cairn_complete_and_claim', 'cairn_complete_leaves_and_claim', 'cairn_runs_deleted') ORDER BY proname",
    )
    .fetch_all(&mut clone)
    .await
    .unwrap();
    let template: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(cairn_tests::template_name())
        .fetch_one(&mut clone)
        .await
        .unwrap();

    let embedded: Vec<(i64, Vec<u8>)> = POSTGRES_MIGRATIONS.iter().map(|m| (m.version, m.checksum.to_vec())).collect();
    assert_eq!(applied, embedded, "the clone holds exactly the store's migrations, checksums included");
    assert_eq!(
        functions,
        ["cairn_complete_and_claim", "cairn_complete_leaves_and_claim", "cairn_runs_deleted"],
        "and the stored functions"
    );
    assert!(template, "the template it came from is named after the migrations and functions it holds");
}
