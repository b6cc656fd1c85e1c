//! New runs' steps in one statement, each column bound as an array (PostgreSQL): a run's, or those of a
//! group-commit batch's runs together.
//!
//! Why: as multi-row `VALUES` lists (1,000 rows of 21 parameters a statement, as on SQLite), a 10,000-step run's
//! steps are ten statements that PostgreSQL parses, binds and plans one by one: 146 ms of a 450 ms submission
//! in `cairn bench throughput` under statement logging (parse 10 ms, bind 42 ms, execute 94 ms), and Rust builds
//! 21,000-parameter queries for them. One prepared text for any number of rows leaves only the rows' own work.

use sqlx::{Postgres, Transaction};

use crate::error::StoreResult;
use crate::rows::StepInsert;

/// Inserts runs' steps (in no particular order: nothing reads their physical order): `$1`–`$21` one array per
/// column (a row per step, `$1` its run, `$20` its run's creation time).
const STEPS_INSERT: &str = "INSERT INTO steps (run_id, step_id, position, action, status, args, when_expr, \
     trigger_rule, idempotent, timeout_ms, heartbeat_timeout_ms, retry, approval, dep_count, pending_deps, \
     available_at, not_before_at, not_before_local, updated_at, child_count, successor_action, starts_itself) \
     SELECT s.run_id, s.step_id, s.position, s.action, s.status, s.args, s.when_expr, s.trigger_rule, \
       s.idempotent, s.timeout_ms, s.heartbeat_timeout_ms, s.retry, s.approval, s.dep_count, s.dep_count, \
       s.available_at, s.not_before_at, s.not_before_local, s.updated_at, s.child_count, s.successor_action, \
       s.starts_itself \
     FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], \
       $9::int8[], $10::int8[], $11::int8[], $12::text[], $13::text[], $14::int8[], $15::int8[], $16::int8[], \
       $17::text[], $18::int8[], $19::text[], $20::int8[], $21::int8[]) \
       AS s(run_id, step_id, position, action, status, args, when_expr, trigger_rule, idempotent, timeout_ms, \
         heartbeat_timeout_ms, retry, approval, dep_count, available_at, not_before_at, not_before_local, \
         child_count, successor_action, updated_at, starts_itself)";

/// Runs [`STEPS_INSERT`] for each `(run_id, rows, now)` of `runs`, `now` the run's creation time (nothing for no
/// rows).
pub(crate) async fn steps_insert(
    tx: &mut Transaction<'_, Postgres>,
    runs: &[(&str, &[StepInsert], i64)],
) -> StoreResult<()> {
    let rows: Vec<(&str, &StepInsert, i64)> =
        runs.iter().flat_map(|(run_id, rows, now)| rows.iter().map(move |r| (*run_id, r, *now))).collect();
    if rows.is_empty() {
        return Ok(());
    }
    let texts = |f: fn(&StepInsert) -> &str| rows.iter().map(|(_, r, _)| f(r)).collect::<Vec<&str>>();
    let optional_texts =
        |f: fn(&StepInsert) -> Option<&str>| rows.iter().map(|(_, r, _)| f(r)).collect::<Vec<Option<&str>>>();
    let numbers = |f: fn(&StepInsert) -> i64| rows.iter().map(|(_, r, _)| f(r)).collect::<Vec<i64>>();
    let optional_numbers =
        |f: fn(&StepInsert) -> Option<i64>| rows.iter().map(|(_, r, _)| f(r)).collect::<Vec<Option<i64>>>();
    sqlx::query::<Postgres>(STEPS_INSERT)
        .bind(rows.iter().map(|(run_id, _, _)| *run_id).collect::<Vec<&str>>())
        .bind(texts(|r| &r.step_id))
        .bind(numbers(|r| r.position))
        .bind(texts(|r| &r.action))
        .bind(texts(|r| r.status.as_str()))
        .bind(texts(|r| &r.args))
        .bind(optional_texts(|r| r.when_expr.as_deref()))
        .bind(texts(|r| r.trigger_rule.as_str()))
        .bind(numbers(|r| r.idempotent))
        .bind(numbers(|r| r.timeout_ms))
        .bind(optional_numbers(|r| r.heartbeat_timeout_ms))
        .bind(texts(|r| &r.retry))
        .bind(optional_texts(|r| r.approval.as_deref()))
        .bind(numbers(|r| r.dep_count))
        .bind(rows.iter().map(|(_, r, now)| r.ready_at(*now)).collect::<Vec<Option<i64>>>())
        .bind(optional_numbers(|r| r.not_before_at))
        .bind(optional_texts(|r| r.not_before_local.as_deref()))
        .bind(numbers(|r| r.child_count))
        .bind(optional_texts(|r| r.successor_action.as_deref()))
        .bind(rows.iter().map(|(_, _, now)| *now).collect::<Vec<i64>>())
        .bind(numbers(|r| r.starts_itself))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// One run's steps ([`steps_insert`] of one run), as [`crate::tx::StepTx::steps_insert`] takes them.
pub(crate) async fn run_steps_insert(
    tx: &mut Transaction<'_, Postgres>,
    run_id: &str,
    rows: &[StepInsert],
    now: i64,
) -> StoreResult<()> {
    steps_insert(tx, &[(run_id, rows, now)]).await
}
