//! The store contract suite: every store behaviour, written once, run against SQLite and PostgreSQL.
//!
//! Each behaviour is an `async fn behaviour(store: Store)` in one of the area modules below. The
//! [`contract_tests!`] macro turns a list of behaviours into two tests each:
//! - `<area>::sqlite::<behaviour>`: a fresh SQLite file in its own temporary directory;
//! - `<area>::postgres::<behaviour>`: a fresh database created by `sqlx::test` from `DATABASE_URL`, migrated by
//!   the store. When `DATABASE_URL` is unset at build time (`build.rs` sets the `cairn_pg` cfg otherwise) these
//!   are reported as ignored with the reason, never as passing.
//!
//! Time is the `now_ms` each call passes (no clock, no sleeps). Run one backend with
//! `cargo test -p cairn-store --test store sqlite::` (or `postgres::`).
//!
//! Areas: `submit` (create, idempotency keys), `claim` (selection, limit, placeholders), `concurrency` (racing
//! claimers, completions and cancel), `finish` (completion, fencing, output limits, unicode), `retry`
//! (failures and backoff), `lease` (reaper, heartbeat, `outcome_unknown`, operator), `approval` (approvals,
//! operator fail), `batch` (group commit, hand-off, undoing a claim), `batch_runs` (new runs in a batch), `cancel`, `delete` (a run deleted by an operator), `recipients`, `deliveries` (the delivery ledger), `settle` (timers, `when`, fan-out), `read` (integrity check, listings, event paging), `writer` (the batch writer, PostgreSQL's one-call chain
//! step).

/// Generates a SQLite and a PostgreSQL test for each named behaviour of the enclosing module.
macro_rules! contract_tests {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let db = crate::contract::support::SqliteDb::create(concat!(
                        module_path!(),
                        "::",
                        stringify!($name)
                    ))
                    .await;
                    super::$name(db.store.clone()).await;
                }
            )+
        }

        mod postgres {
            $(
                #[sqlx::test(migrations = false)]
                #[cfg_attr(
                    not(cairn_pg),
                    ignore = "DATABASE_URL is not set: PostgreSQL contract tests skipped"
                )]
                async fn $name(pool: sqlx::PgPool) {
                    let store = cairn_store::Store::Postgres(pool);
                    store
                        .migrate()
                        .await
                        .expect("the PostgreSQL migrations apply to a fresh database");
                    super::$name(store).await;
                }
            )+
        }
    };
}

pub mod support;

mod approval;
mod batch;
mod batch_runs;
mod cancel;
mod claim;
mod columns;
mod concurrency;
mod delete;
mod deliveries;
mod event_order;
mod finish;
pub mod lease;
mod machine_model;
mod pause;
mod read;
mod recipients;
mod repair;
mod retry;
mod run_filter;
mod settle;
mod submit;
mod writer;
mod writer_leaves;
