//! A new run's steps in one statement, each column bound as an array (PostgreSQL).
//!
//! Why: as multi-row `VALUES` lists (1,000 rows of 21 parameters a statement, as on SQLite), a 10,000-step run's
//! steps cost ten statements that PostgreSQL parsed, bound and planned one by one: 146 ms of a 450 ms
//! submission in `cairn bench throughput` (statement logging, 2026-11-30, window M: parse 10 ms, bind 42 ms,
//! execute 94 ms). One prepared text for any number of rows leaves the rows' own work: the insert took 99–117 ms
//! against 136–141 ms (statement logging, two runs each, alternating), and the submission (`submit_ms`, the
//! Rust side included: no 21,000-parameter queries to build) 398–408 against 379–588 ms (four runs each, on a
//! machine busy with a build).

use sqlx::{Postgres, Transaction};

use crate::error::StoreResult;
use crate::rows::StepInsert;

/// Inserts a run's steps (in no particular order: nothing reads their physical order): `$1` the run, `$2`–`$19` one array per column (a row per step),
/// `$20` the insert time.
const STEPS_INSERT: &str = "INSERT INTO steps (run_id, step_id, position, action, status, args, when_expr, \
     trigger_rule, idempotent, timeout_ms, heartbeat_timeout_ms, retry, approval, dep_count, pending_deps, \
     available_at, not_before_at, not_before_local, updated_at, child_count, successor_action) \
     SELECT $1, s.step_id, s.position, s.action, s.status, s.args, s.when_expr, s.trigger_rule, s.idempotent, \
       s.timeout_ms, s.heartbeat_timeout_ms, s.retry, s.approval, s.dep_count, s.dep_count, s.available_at, \
       s.not_before_at, s.not_before_local, $20, s.child_count, s.successor_action \
     FROM UNNEST($2::text[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int8[], \
       $10::int8[], $11::int8[], $12::text[], $13::text[], $14::int8[], $15::int8[], $16::int8[], $17::text[], \
       $18::int8[], $19::text[]) \
       AS s(step_id, position, action, status, args, when_expr, trigger_rule, idempotent, timeout_ms, \
         heartbeat_timeout_ms, retry, approval, dep_count, available_at, not_before_at, not_before_local, \
         child_count, successor_action)";

/// Runs [`STEPS_INSERT`] for `rows` (nothing for none).
pub(crate) async fn steps_insert(
    tx: &mut Transaction<'_, Postgres>,
    run_id: &str,
    rows: &[StepInsert],
    now: i64,
) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let texts = |f: fn(&StepInsert) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
    let optional_texts = |f: fn(&StepInsert) -> Option<&str>| rows.iter().map(f).collect::<Vec<Option<&str>>>();
    let numbers = |f: fn(&StepInsert) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
    let optional_numbers = |f: fn(&StepInsert) -> Option<i64>| rows.iter().map(f).collect::<Vec<Option<i64>>>();
    sqlx::query::<Postgres>(STEPS_INSERT)
        .bind(run_id)
        .bind(texts(|r| &r.step_id))
        .bind(numbers(|r| r.position))
        .bind(texts(|r| &r.action))
        .bind(texts(|r| r.status))
        .bind(texts(|r| &r.args))
        .bind(optional_texts(|r| r.when_expr.as_deref()))
        .bind(texts(|r| &r.trigger_rule))
        .bind(numbers(|r| r.idempotent))
        .bind(numbers(|r| r.timeout_ms))
        .bind(optional_numbers(|r| r.heartbeat_timeout_ms))
        .bind(texts(|r| &r.retry))
        .bind(optional_texts(|r| r.approval.as_deref()))
        .bind(numbers(|r| r.dep_count))
        .bind(rows.iter().map(|r| r.ready_at(now)).collect::<Vec<Option<i64>>>())
        .bind(optional_numbers(|r| r.not_before_at))
        .bind(optional_texts(|r| r.not_before_local.as_deref()))
        .bind(numbers(|r| r.child_count))
        .bind(optional_texts(|r| r.successor_action.as_deref()))
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
