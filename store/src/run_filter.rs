//! Finding runs: [`RunFilter`] (what `GET /v1/runs` and the bulk operations filter on), keyset pages newest
//! first ([`RunCursor`]), and the runs that need an operator's attention.
//!
//! Every filter is served by an index on both backends. One table drives the query and is read newest first
//! from its index, so a page stops after `limit` rows however many runs match: the first label's rows
//! (`run_labels_value_idx`), else the action's (`run_actions_action_idx`), else `runs` (`runs_status_created_idx`
//! for a status, `runs_created_idx` otherwise). The other filters are checked on each row read: further labels
//! by the `run_labels` key, `attention` against the few steps that need it (partial indexes on `steps`), `q`
//! against the folded goal (a trigram index on PostgreSQL, which its planner uses when the goal is rare).

use std::fmt;
use std::str::FromStr;

use cairn_core::state::RunStatus;

use crate::error::StoreResult;
use crate::model::RunSummary;
use crate::read::run_summary;
use crate::rows::RunRow;
use crate::{Store, sql};

/// A step that is due but not taken this long (ms) is "waiting for a worker" and needs attention.
pub const WORKER_WAIT_MS: i64 = 60_000;

/// Which runs to list. Every field given must hold (AND); labels must all match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Any of these statuses (none: any status).
    pub statuses: Vec<RunStatus>,
    /// Labels `(key, value)` the run carries, all of them.
    pub labels: Vec<(String, String)>,
    /// A case-insensitive substring of the goal.
    pub q: Option<String>,
    /// An action one of the run's steps uses.
    pub action: Option<String>,
    /// Created at or after (ms).
    pub created_after: Option<i64>,
    /// Created before (ms).
    pub created_before: Option<i64>,
    /// The run-level idempotency key.
    pub idempotency_key: Option<String>,
    /// Only runs that need attention as of this instant (ms): a step `outcome_unknown`, waiting for approval,
    /// ready again after a failed attempt (a retry in backoff or due), or due for [`WORKER_WAIT_MS`] and not taken.
    pub attention_at: Option<i64>,
}

/// Where a page of runs starts: after the run with this creation time and id (newest first). Its text form
/// (`next_cursor`) is `<created_at>.<id>`; clients treat it as opaque.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    /// The last listed run's creation time.
    pub created_at_ms: i64,
    /// The last listed run's id.
    pub run_id: String,
}

impl fmt::Display for RunCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_at_ms, self.run_id)
    }
}

/// A cursor that is not one [`RunCursor`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`cursor` is not a cursor this API returned (`next_cursor`)")]
pub struct CursorError;

impl FromStr for RunCursor {
    type Err = CursorError;

    fn from_str(text: &str) -> Result<Self, CursorError> {
        let (at, id) = text.split_once('.').ok_or(CursorError)?;
        let created_at_ms = at.parse().map_err(|_| CursorError)?;
        if id.is_empty() || cairn_core::text::RUN_ID.check(id).is_err() {
            return Err(CursorError);
        }
        Ok(RunCursor { created_at_ms, run_id: id.to_owned() })
    }
}

/// Where a page starts: a cursor, or an offset into the filtered runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageStart {
    /// After this run.
    After(RunCursor),
    /// Skipping this many runs.
    Offset(i64),
}

/// One page of runs, newest first, and the cursor of the next page when there may be one.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunSummary>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<RunCursor>,
}

/// The steps that need attention (see [`RunFilter::attention_at`]), as a condition on `steps s`, with `$stale`
/// (bound as the instant before which a due step counts as waiting for a worker) written by the caller.
macro_rules! attention_steps {
    ($stale:expr) => {
        format!(
            "(s.status IN ('outcome_unknown', 'waiting_approval') OR (s.status = 'ready' AND \
             (s.attempt > s.attempt_base OR s.available_at <= {})))",
            $stale
        )
    };
}

/// Why a step needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionReason {
    /// A non-idempotent attempt ended ambiguously: retry, skip or fail it.
    OutcomeUnknown,
    /// Waiting for an approval.
    WaitingApproval,
    /// Ready again after a failed attempt: in backoff, or due.
    Retrying,
    /// Due for [`WORKER_WAIT_MS`] or more and not taken: no worker serves its action, or all are busy.
    WaitingForWorker,
}

/// A step that needs attention, and since when (its deadline or due time, when it has one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttentionStep {
    /// The run.
    pub run_id: String,
    /// The step.
    pub step_id: String,
    /// Why.
    pub reason: AttentionReason,
    /// For a ready step, when it is (or was) due; for an approval, its deadline.
    pub available_at_ms: Option<i64>,
}

/// A value bound to a statement.
#[derive(Debug, Clone)]
pub(crate) enum Bind {
    Int(i64),
    Text(String),
}

/// A statement's text with its binds, `$1`… in order.
#[derive(Debug, Default)]
pub(crate) struct Statement {
    pub text: String,
    pub binds: Vec<Bind>,
}

impl Statement {
    /// Binds `value` and returns its placeholder.
    fn bind(&mut self, value: Bind) -> String {
        self.binds.push(value);
        format!("${}", self.binds.len())
    }
}

/// `FROM … WHERE …` of the filter, and the driving table's time and id columns (for order and cursor).
fn from_where(filter: &RunFilter, st: &mut Statement) -> (&'static str, &'static str) {
    let mut conditions = Vec::new();
    let mut labels = filter.labels.iter();
    let (from, at, id) = if let Some((key, value)) = labels.next() {
        let (k, v) = (st.bind(Bind::Text(key.clone())), st.bind(Bind::Text(value.clone())));
        conditions.push(format!("d.key = {k} AND d.value = {v}"));
        ("run_labels d JOIN runs r ON r.id = d.run_id", "d.created_at", "d.run_id")
    } else if let Some(action) = &filter.action {
        conditions.push(format!("d.action = {}", st.bind(Bind::Text(action.clone()))));
        ("run_actions d JOIN runs r ON r.id = d.run_id", "d.created_at", "d.run_id")
    } else {
        ("runs r", "r.created_at", "r.id")
    };
    if !filter.labels.is_empty()
        && let Some(action) = &filter.action
    {
        let a = st.bind(Bind::Text(action.clone()));
        conditions.push(format!("EXISTS (SELECT 1 FROM run_actions a WHERE a.run_id = r.id AND a.action = {a})"));
    }
    for (key, value) in labels {
        let (k, v) = (st.bind(Bind::Text(key.clone())), st.bind(Bind::Text(value.clone())));
        conditions.push(format!(
            "EXISTS (SELECT 1 FROM run_labels l WHERE l.run_id = r.id AND l.key = {k} AND l.value = {v})"
        ));
    }
    if !filter.statuses.is_empty() {
        let names: Vec<String> = filter.statuses.iter().map(|s| st.bind(Bind::Text(s.as_str().to_owned()))).collect();
        conditions.push(format!("r.status IN ({})", names.join(", ")));
    }
    if let Some(after) = filter.created_after {
        conditions.push(format!("{at} >= {}", st.bind(Bind::Int(after))));
    }
    if let Some(before) = filter.created_before {
        conditions.push(format!("{at} < {}", st.bind(Bind::Int(before))));
    }
    if let Some(key) = &filter.idempotency_key {
        conditions.push(format!("r.idempotency_key = {}", st.bind(Bind::Text(key.clone()))));
    }
    if let Some(q) = &filter.q {
        let pattern = format!("%{}%", like_escaped(&q.to_lowercase()));
        conditions.push(format!("r.goal_search LIKE {} ESCAPE '\\'", st.bind(Bind::Text(pattern))));
    }
    if let Some(now) = filter.attention_at {
        let stale = st.bind(Bind::Int(now - WORKER_WAIT_MS));
        conditions.push(format!(
            "r.status IN ('pending', 'running', 'paused') AND r.id IN (SELECT s.run_id FROM steps s WHERE {})",
            attention_steps!(stale)
        ));
    }
    let filter_text =
        if conditions.is_empty() { String::new() } else { format!(" WHERE {}", conditions.join(" AND ")) };
    st.text.push_str(&format!(" FROM {from}{filter_text}"));
    (at, id)
}

/// `text` with the `LIKE` wildcards `%`, `_` and the escape `\` escaped.
fn like_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The page statement: the filter, then the cursor or offset, newest first, `limit + 1` rows (one more tells
/// whether a next page exists).
pub(crate) fn page_statement(filter: &RunFilter, start: &PageStart, limit: i64) -> Statement {
    let mut st = Statement { text: format!("SELECT {}", sql::run_columns!(r)), binds: Vec::new() };
    let (at, id) = from_where(filter, &mut st);
    if let PageStart::After(cursor) = start {
        let (t, i) = (st.bind(Bind::Int(cursor.created_at_ms)), st.bind(Bind::Text(cursor.run_id.clone())));
        let joiner = if st.text.contains(" WHERE ") { " AND" } else { " WHERE" };
        st.text.push_str(&format!("{joiner} ({at}, {id}) < ({t}, {i})"));
    }
    let n = st.bind(Bind::Int(limit + 1));
    st.text.push_str(&format!(" ORDER BY {at} DESC, {id} DESC LIMIT {n} + 0"));
    if let PageStart::Offset(offset) = start {
        let o = st.bind(Bind::Int(*offset));
        st.text.push_str(&format!(" OFFSET {o} + 0"));
    }
    st
}

/// The count statement: how many runs the filter matches.
pub(crate) fn count_statement(filter: &RunFilter) -> Statement {
    let mut st = Statement { text: "SELECT COUNT(*)".into(), binds: Vec::new() };
    from_where(filter, &mut st);
    st
}

/// Binds `binds` to the sqlx query `$q`, in order. The statement's text is Cairn's own: every value in it is a
/// bind.
macro_rules! bound {
    ($q:expr, $binds:expr) => {{
        let mut q = $q;
        for b in $binds {
            q = match b {
                Bind::Int(v) => q.bind(*v),
                Bind::Text(v) => q.bind(v.as_str()),
            };
        }
        q
    }};
}

impl Store {
    /// A page of the runs `filter` matches, newest first (creation time, then id), at most `limit` of them.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable), [`crate::StoreError::Corrupt`].
    pub async fn runs_page(&self, filter: &RunFilter, start: &PageStart, limit: i64) -> StoreResult<RunPage> {
        let st = page_statement(filter, start, limit);
        let rows: Vec<RunRow> = on_pool!(self, Db, pool => bound!(sqlx::query_as::<Db, RunRow>(sqlx::AssertSqlSafe(st.text.as_str())), &st.binds)
            .fetch_all(pool).await?);
        let mut runs = rows.into_iter().map(run_summary).collect::<StoreResult<Vec<_>>>()?;
        let more = i64::try_from(runs.len()).unwrap_or(i64::MAX) > limit;
        runs.truncate(usize::try_from(limit).unwrap_or(0));
        let next_cursor = more
            .then(|| runs.last().map(|r| RunCursor { created_at_ms: r.created_at_ms, run_id: r.id.clone() }))
            .flatten();
        Ok(RunPage { runs, next_cursor })
    }

    /// How many runs `filter` matches.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn runs_count(&self, filter: &RunFilter) -> StoreResult<i64> {
        let st = count_statement(filter);
        Ok(
            on_pool!(self, Db, pool => bound!(sqlx::query_scalar::<Db, i64>(sqlx::AssertSqlSafe(st.text.as_str())), &st.binds)
            .fetch_one(pool).await?),
        )
    }

    /// The steps of `run_ids` that need attention as of `now` ([`RunFilter::attention_at`]), by run and plan order.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable), [`crate::StoreError::Corrupt`].
    pub async fn attention_steps(&self, run_ids: &[&str], now: i64) -> StoreResult<Vec<AttentionStep>> {
        type Row = (String, String, String, i64, i64, Option<i64>);
        let mut found = Vec::new();
        for chunk in run_ids.chunks(500) {
            let mut st = Statement::default();
            let stale = st.bind(Bind::Int(now - WORKER_WAIT_MS));
            let ids: Vec<String> = chunk.iter().map(|id| st.bind(Bind::Text((*id).to_owned()))).collect();
            st.text = format!(
                "SELECT s.run_id, s.step_id, s.status, s.attempt, s.attempt_base, s.available_at FROM steps s \
                 WHERE s.run_id IN ({}) AND {} ORDER BY s.run_id, s.position",
                ids.join(", "),
                attention_steps!(stale)
            );
            let rows: Vec<Row> = on_pool!(self, Db, pool => bound!(sqlx::query_as::<Db, Row>(
                sqlx::AssertSqlSafe(st.text.as_str())), &st.binds).fetch_all(pool).await?);
            for (run_id, step_id, status, attempt, base, available_at) in rows {
                let reason = match crate::rows::name("steps.status", &status)? {
                    cairn_core::state::StepStatus::OutcomeUnknown => AttentionReason::OutcomeUnknown,
                    cairn_core::state::StepStatus::WaitingApproval => AttentionReason::WaitingApproval,
                    _ if attempt > base => AttentionReason::Retrying,
                    _ => AttentionReason::WaitingForWorker,
                };
                found.push(AttentionStep { run_id, step_id, reason, available_at_ms: available_at });
            }
        }
        Ok(found)
    }

    /// Runs, newest first, optionally only those with `status` ([`Store::runs_page`] from an offset).
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable), [`crate::StoreError::Corrupt`].
    pub async fn runs(&self, status: Option<RunStatus>, limit: i64, offset: i64) -> StoreResult<Vec<RunSummary>> {
        let filter = RunFilter { statuses: status.into_iter().collect(), ..RunFilter::default() };
        Ok(self.runs_page(&filter, &PageStart::Offset(offset), limit).await?.runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_nothing_else() {
        let cursor = RunCursor { created_at_ms: 1_733_222_400_000, run_id: "0193-ab.c".into() };
        assert_eq!(cursor.to_string().parse::<RunCursor>(), Ok(cursor));
        for bad in ["", "12", "x.abc", "12.", "-.a"] {
            assert_eq!(bad.parse::<RunCursor>(), Err(CursorError), "{bad:?}");
        }
    }

    #[test]
    fn like_wildcards_in_a_query_match_themselves() {
        assert_eq!(like_escaped(r"50%_off\"), r"50\%\_off\\");
    }

    #[test]
    fn the_first_label_drives_and_the_rest_are_checked() {
        let filter = RunFilter {
            labels: vec![("env".into(), "prod".into()), ("team".into(), "ops".into())],
            action: Some("notify.send".into()),
            ..RunFilter::default()
        };
        let st = page_statement(&filter, &PageStart::Offset(0), 50);
        assert!(st.text.contains("FROM run_labels d JOIN runs r"), "{}", st.text);
        assert!(st.text.contains("ORDER BY d.created_at DESC, d.run_id DESC"), "{}", st.text);
        assert_eq!(st.text.matches("EXISTS").count(), 2, "{}", st.text);
        assert_eq!(st.binds.len(), 8, "two labels, the action, limit and offset");
    }
}
