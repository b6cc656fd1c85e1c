//! [`RunsTx`] on PostgreSQL: the set-based run statements with the runs bound as arrays, so each is one prepared
//! statement whatever the number of runs.
//!
//! New runs: a group-commit batch's runs (at most 100 steps each) are stored with one statement for their plans
//! and runs and one for their steps ([`super::steps_insert`]), instead of two per run, which cost about 0.27 ms a
//! run, execute and bind (statement logging in `cairn bench dispatch`, about four single-step runs a batch).
//!
//! Closing runs:
//! Why: written as `VALUES` and `IN (…)` lists (as on SQLite), their text changes with the number of runs, so
//! they would go unprepared and be parsed, planned and bound for every batch. Batches that carry new runs take
//! the general path (the leaf call knows only reports and claims), so in `cairn bench dispatch` nearly every
//! batch would pay that: as lists, the two statements that close and finish the batch's runs cost 1.0 and
//! 0.6 ms a batch under statement logging, parse and bind 0.3 and 0.4 ms of that.
//!
//! Every statement reads `runs` by key (`id = ANY ($n)`) and `steps` by its `(run_id, …)` primary key prefix.

use cairn_core::machine::{RunCounters, StepsClosed};
use sqlx::{Postgres, Transaction};

use crate::error::StoreResult;
use crate::rows::{RunInsert, StepInsert};
use crate::runs_tx::RunsTx;

/// Stores plans unless their content hash is stored already (`$1`–`$3`: id, body, creation time, each plan at most
/// once), runs (`$4`–`$13`: id, plan, input, context, idempotency key, step count, creation time, goal, goal
/// folded for search, labels as JSON), their labels (`$14`–`$17`: run, key, value, creation time, one element per
/// label) and the actions their plans use (`$18`–`$20`: run, action, creation time). The foreign keys to the plan
/// and the run are checked at the end of the statement, when those rows exist.
const RUNS_INSERT: &str = "WITH plan AS (INSERT INTO plans (id, body, created_at) \
     SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[]) ON CONFLICT (id) DO NOTHING), \
     label AS (INSERT INTO run_labels (run_id, key, value, created_at) \
       SELECT * FROM UNNEST($14::text[], $15::text[], $16::text[], $17::int8[])), \
     action AS (INSERT INTO run_actions (run_id, action, created_at) \
       SELECT * FROM UNNEST($18::text[], $19::text[], $20::int8[])) \
     INSERT INTO runs (id, plan_id, status, input, context, idempotency_key, step_count, open_steps, created_at, \
       updated_at, goal, goal_search, labels) \
     SELECT r.id, r.plan_id, 'pending', r.input, r.context, r.idempotency_key, r.steps, r.steps, r.at, r.at, \
       r.goal, r.goal_search, r.labels \
     FROM UNNEST($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int8[], $10::int8[], \
       $11::text[], $12::text[], $13::text[]) \
       AS r(id, plan_id, input, context, idempotency_key, steps, at, goal, goal_search, labels)";

/// Stores one run as [`RunsTx::runs_insert`] does: its plan, the run, its labels and actions in one statement.
pub(crate) async fn run_insert(tx: &mut Transaction<'_, Postgres>, run: &RunInsert<'_>) -> StoreResult<()> {
    tx.runs_insert(std::slice::from_ref(run)).await
}

/// `$1` the time, `$2` the run ids, `$3` the steps closed in each (a run at most once), `$4` of which failed.
pub(super) const RUNS_CLOSE_STEPS: &str = "UPDATE runs SET open_steps = open_steps - v.closed, \
     failed_steps = failed_steps + v.failed, updated_at = $1 \
     FROM UNNEST($2::text[], $3::int8[], $4::int8[]) AS v(id, closed, failed) WHERE runs.id = v.id \
     RETURNING runs.id, runs.open_steps, runs.failed_steps, runs.cancel_requested";

/// `$1` the run ids.
pub(super) const RUNS_FAILED_STEPS: &str = "SELECT run_id, step_id, error FROM steps \
     WHERE run_id = ANY ($1::text[]) AND status = 'failed' ORDER BY run_id, position";

/// `$1` the time, `$2` the run ids.
pub(super) const RUNS_SUCCEED: &str = "UPDATE runs SET status = 'succeeded', failure = NULL, finished_at = $1, updated_at = $1 \
     WHERE id = ANY ($2::text[]) AND (status IN ('pending', 'running', 'paused')) IS TRUE RETURNING id";

impl RunsTx for Transaction<'_, Postgres> {
    async fn runs_insert(&mut self, runs: &[RunInsert<'_>]) -> StoreResult<()> {
        let mut plans: Vec<&RunInsert<'_>> = Vec::with_capacity(runs.len());
        for run in runs {
            if !plans.iter().any(|p| p.plan_id == run.plan_id) {
                plans.push(run);
            }
        }
        let labels: Vec<(&str, &str, &str, i64)> = runs
            .iter()
            .flat_map(|r| r.label_rows.iter().map(|(k, v)| (r.run_id, k.as_str(), v.as_str(), r.now)))
            .collect();
        let actions: Vec<(&str, &str, i64)> =
            runs.iter().flat_map(|r| r.actions.iter().map(|a| (r.run_id, a.as_str(), r.now))).collect();
        sqlx::query(RUNS_INSERT)
            .bind(plans.iter().map(|p| p.plan_id).collect::<Vec<&str>>())
            .bind(plans.iter().map(|p| p.plan_body).collect::<Vec<&str>>())
            .bind(plans.iter().map(|p| p.now).collect::<Vec<i64>>())
            .bind(runs.iter().map(|r| r.run_id).collect::<Vec<&str>>())
            .bind(runs.iter().map(|r| r.plan_id).collect::<Vec<&str>>())
            .bind(runs.iter().map(|r| r.input).collect::<Vec<&str>>())
            .bind(runs.iter().map(|r| r.context).collect::<Vec<&str>>())
            .bind(runs.iter().map(|r| r.idempotency_key).collect::<Vec<Option<&str>>>())
            .bind(runs.iter().map(|r| r.steps).collect::<Vec<i64>>())
            .bind(runs.iter().map(|r| r.now).collect::<Vec<i64>>())
            .bind(runs.iter().map(|r| r.goal).collect::<Vec<Option<&str>>>())
            .bind(runs.iter().map(|r| r.goal_search).collect::<Vec<Option<&str>>>())
            .bind(runs.iter().map(|r| r.labels).collect::<Vec<&str>>())
            .bind(labels.iter().map(|l| l.0).collect::<Vec<&str>>())
            .bind(labels.iter().map(|l| l.1).collect::<Vec<&str>>())
            .bind(labels.iter().map(|l| l.2).collect::<Vec<&str>>())
            .bind(labels.iter().map(|l| l.3).collect::<Vec<i64>>())
            .bind(actions.iter().map(|a| a.0).collect::<Vec<&str>>())
            .bind(actions.iter().map(|a| a.1).collect::<Vec<&str>>())
            .bind(actions.iter().map(|a| a.2).collect::<Vec<i64>>())
            .execute(&mut **self)
            .await?;
        Ok(())
    }

    async fn runs_steps_insert(&mut self, runs: &[(&str, &[StepInsert], i64)]) -> StoreResult<()> {
        super::steps_insert::steps_insert(self, runs).await
    }

    async fn runs_close_steps(
        &mut self,
        closing: &[(&str, StepsClosed)],
        now: i64,
    ) -> StoreResult<Vec<(String, RunCounters)>> {
        let ids: Vec<&str> = closing.iter().map(|(id, _)| *id).collect();
        let closed: Vec<i64> = closing.iter().map(|(_, c)| c.steps).collect();
        let failed: Vec<i64> = closing.iter().map(|(_, c)| c.failed).collect();
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(RUNS_CLOSE_STEPS)
            .bind(now)
            .bind(ids)
            .bind(closed)
            .bind(failed)
            .fetch_all(&mut **self)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, open, failed, cancel)| (id, crate::rows::run_counters((open, failed, cancel))))
            .collect())
    }

    async fn runs_failed_steps(&mut self, run_ids: &[&str]) -> StoreResult<Vec<(String, String, Option<String>)>> {
        Ok(sqlx::query_as(RUNS_FAILED_STEPS).bind(run_ids).fetch_all(&mut **self).await?)
    }

    async fn runs_succeed(&mut self, run_ids: &[&str], now: i64) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(RUNS_SUCCEED).bind(now).bind(run_ids).fetch_all(&mut **self).await?)
    }
}
