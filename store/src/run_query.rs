//! The SQL of [`RunFilter`]: which table drives a listing, and the statements.
//!
//! A listing is read newest first from the index of one *driving* set, so a page stops after `limit` rows
//! however many runs match; the other filters are checked on each row read. The driving set is the filter's
//! most selective one, chosen from capped counts ([`estimates`], at most [`ESTIMATE_CAP`] index entries each,
//! so choosing costs a millisecond or two): a label (`run_labels_value_idx`), the action
//! (`run_actions_action_idx`), the statuses (`runs_status_created_idx`), the goal text (SQLite's trigram
//! full-text table `run_goals`, PostgreSQL's trigram index `runs_goal_search_idx`), the runs needing attention
//! (partial indexes on `steps`), or the idempotency key (unique). A label or the action drives even when dense,
//! because its index is in creation order; a dense status, goal or attention set leaves `runs` to drive
//! (`runs_created_idx`), where the matches are close together. Without this choice, a rare label next to a common
//! one read tens of thousands of index entries to fill a page (`cairn bench search`, `two_labels`).

use crate::run_filter::{RunCursor, RunFilter, WORKER_WAIT_MS};

/// Counts stop here: a set this large is dense enough to be found by reading `runs` newest first.
pub(crate) const ESTIMATE_CAP: i64 = 2000;

/// A goal text matched by this many of the newest [`ESTIMATE_CAP`] runs is dense (PostgreSQL's estimate).
const DENSE_AMONG_NEWEST: i64 = 50;

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
    pub(crate) fn bind(&mut self, value: Bind) -> String {
        self.binds.push(value);
        format!("${}", self.binds.len())
    }
}

/// The table a listing is read from, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// `runs` itself.
    Runs,
    /// The `i`th label's rows of `run_labels`.
    Label(usize),
    /// The action's rows of `run_actions`.
    Action,
    /// The runs with one of the statuses.
    Status,
    /// The runs whose goal holds the text (SQLite's `run_goals`).
    Goal,
    /// The runs with a step that needs attention.
    Attention,
    /// The run with the idempotency key.
    Key,
}

/// The steps that need attention ([`RunFilter::attention_at`]) as run ids, one index per part; `$stale` is the
/// placeholder of the instant before which a due step is waiting for a worker.
fn attention_runs(stale: &str) -> String {
    format!(
        "SELECT s.run_id FROM steps s WHERE s.status = 'outcome_unknown' \
         UNION SELECT s.run_id FROM steps s WHERE s.status = 'waiting_approval' \
         UNION SELECT s.run_id FROM steps s WHERE s.status = 'ready' \
           AND (s.attempt > s.attempt_base OR s.available_at <= {stale})"
    )
}

/// The steps that need attention, as a condition on `steps s` (the reasons' query).
pub(crate) fn attention_steps(stale: &str) -> String {
    format!(
        "(s.status IN ('outcome_unknown', 'waiting_approval') OR (s.status = 'ready' AND \
         (s.attempt > s.attempt_base OR s.available_at <= {stale})))"
    )
}

/// A quoted FTS5 phrase: the text as one substring to match.
fn phrase(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// Whether a trigram index can find `q` (three characters at least, on either backend).
fn goal_indexed(q: &str) -> bool {
    q.chars().count() >= 3
}

/// The candidate drivers of `filter` with the statement that counts each (capped), in order of preference on
/// equal counts.
pub(crate) fn estimates(filter: &RunFilter, sqlite: bool) -> Vec<(Driver, Statement)> {
    let capped = |inner: String, binds: Vec<Bind>| Statement {
        text: format!("SELECT COUNT(*) FROM ({inner} LIMIT {ESTIMATE_CAP}) AS counted"),
        binds,
    };
    let mut out = Vec::new();
    if let Some(now) = filter.attention_at {
        let inner = attention_runs("$1");
        out.push((Driver::Attention, capped(inner, vec![Bind::Int(now - WORKER_WAIT_MS)])));
    }
    for (i, (key, value)) in filter.labels.iter().enumerate() {
        let inner = "SELECT 1 FROM run_labels WHERE key = $1 AND value = $2".to_owned();
        out.push((Driver::Label(i), capped(inner, vec![Bind::Text(key.clone()), Bind::Text(value.clone())])));
    }
    if let Some(action) = &filter.action {
        let inner = "SELECT 1 FROM run_actions WHERE action = $1".to_owned();
        out.push((Driver::Action, capped(inner, vec![Bind::Text(action.clone())])));
    }
    if let Some(q) = filter.q.as_deref().filter(|q| goal_indexed(q)) {
        let folded = q.to_lowercase();
        if sqlite {
            let inner = "SELECT 1 FROM run_goals WHERE run_goals MATCH $1".to_owned();
            out.push((Driver::Goal, capped(inner, vec![Bind::Text(phrase(&folded))])));
        } else {
            // How many of the newest runs match, as a count: counting every match through the trigram index
            // reads all of a common text's entries. Dense among the newest, the page fills from `runs` at once.
            let text = format!(
                "SELECT CASE WHEN COUNT(*) >= {DENSE_AMONG_NEWEST} THEN {ESTIMATE_CAP} ELSE COUNT(*) END FROM \
                 (SELECT goal_search FROM runs ORDER BY created_at DESC, id DESC LIMIT {ESTIMATE_CAP}) AS newest \
                 WHERE goal_search LIKE $1 ESCAPE '\\'"
            );
            let pattern = format!("%{}%", like_escaped(&folded));
            out.push((Driver::Goal, Statement { text, binds: vec![Bind::Text(pattern)] }));
        }
    }
    if !filter.statuses.is_empty() {
        let binds: Vec<Bind> = filter.statuses.iter().map(|s| Bind::Text(s.as_str().to_owned())).collect();
        let names: Vec<String> = (1..=binds.len()).map(|i| format!("${i}")).collect();
        let inner = format!("SELECT 1 FROM runs WHERE status IN ({})", names.join(", "));
        out.push((Driver::Status, capped(inner, binds)));
    }
    out
}

/// The driver for these counts (in [`estimates`]' order): the smallest set; when every set is dense, the first
/// label or the action (in creation order in its index), else `runs`.
pub(crate) fn choose(filter: &RunFilter, counted: &[(Driver, i64)]) -> Driver {
    if filter.idempotency_key.is_some() {
        return Driver::Key;
    }
    let smallest = counted.iter().min_by_key(|(_, n)| *n);
    match smallest {
        Some((driver, n)) if *n < ESTIMATE_CAP => *driver,
        _ => counted
            .iter()
            .map(|(d, _)| *d)
            .find(|d| matches!(d, Driver::Label(_) | Driver::Action))
            .unwrap_or(Driver::Runs),
    }
}

/// Whether [`choose`] can decide without counting: no filter with a set to count, or one label or action alone.
pub(crate) fn obvious(filter: &RunFilter) -> Option<Driver> {
    if filter.idempotency_key.is_some() {
        return Some(Driver::Key);
    }
    let goal = filter.q.as_deref().is_some_and(goal_indexed);
    let sets = filter.labels.len()
        + usize::from(filter.action.is_some())
        + usize::from(goal)
        + usize::from(!filter.statuses.is_empty())
        + usize::from(filter.attention_at.is_some());
    match sets {
        0 => Some(Driver::Runs),
        1 if filter.labels.len() == 1 => Some(Driver::Label(0)),
        1 if filter.action.is_some() => Some(Driver::Action),
        _ => None,
    }
}

/// `FROM … WHERE …` of the filter read through `driver`, and the driving table's time and id columns (for order
/// and cursor). The driving table comes first in a `CROSS JOIN`, which SQLite's planner keeps as the outer loop.
fn from_where(filter: &RunFilter, driver: Driver, sqlite: bool, st: &mut Statement) -> (&'static str, &'static str) {
    let mut conditions = Vec::new();
    let (from, at, id) = match driver {
        Driver::Label(i) => {
            let (key, value) = &filter.labels[i];
            let (k, v) = (st.bind(Bind::Text(key.clone())), st.bind(Bind::Text(value.clone())));
            conditions.push(format!("d.key = {k} AND d.value = {v} AND r.id = d.run_id"));
            ("run_labels d CROSS JOIN runs r".to_owned(), "d.created_at", "d.run_id")
        }
        Driver::Action => {
            let a = st.bind(Bind::Text(filter.action.clone().unwrap_or_default()));
            conditions.push(format!("d.action = {a} AND r.id = d.run_id"));
            ("run_actions d CROSS JOIN runs r".to_owned(), "d.created_at", "d.run_id")
        }
        Driver::Attention if sqlite => {
            let stale = st.bind(Bind::Int(filter.attention_at.unwrap_or_default() - WORKER_WAIT_MS));
            conditions.push("r.id = d.run_id".to_owned());
            (format!("({}) d CROSS JOIN runs r", attention_runs(&stale)), "r.created_at", "r.id")
        }
        Driver::Goal if sqlite => {
            let q = st.bind(Bind::Text(phrase(&filter.q.clone().unwrap_or_default().to_lowercase())));
            conditions.push(format!("r.id = d.run_id AND d.run_goals MATCH {q}"));
            ("run_goals d CROSS JOIN runs r".to_owned(), "r.created_at", "r.id")
        }
        Driver::Runs | Driver::Status | Driver::Key | Driver::Goal | Driver::Attention => {
            ("runs r".to_owned(), "r.created_at", "r.id")
        }
    };
    st.text.push_str(&format!(" FROM {from}"));
    // The other labels are read from the run's row, already at hand: no lookup per row for a planner to misjudge.
    for (_, (key, value)) in filter.labels.iter().enumerate().filter(|(i, _)| driver != Driver::Label(*i)) {
        let v = st.bind(Bind::Text(value.clone()));
        let label = if sqlite {
            // Keys are `[a-z0-9_.-]`: quoted, a key with a dot is one path step.
            format!("json_extract(r.labels, {})", st.bind(Bind::Text(format!("$.\"{key}\""))))
        } else {
            format!("(r.labels::jsonb ->> {})", st.bind(Bind::Text(key.clone())))
        };
        conditions.push(format!("{label} = {v}"));
    }
    if let Some(action) = filter.action.as_ref().filter(|_| driver != Driver::Action) {
        let a = st.bind(Bind::Text(action.clone()));
        conditions.push(format!("EXISTS (SELECT 1 FROM run_actions a WHERE a.run_id = r.id AND a.action = {a})"));
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
        // The rule, also under SQLite's trigram table (whose phrase match folds case its own way). Unless the goal
        // drives, PostgreSQL reads no trigram index for it (bitmap scans are off): for a common text, its planner
        // collected every match there and sorted them (0.5 s over 100,000 runs).
        let pattern = format!("%{}%", like_escaped(&q.to_lowercase()));
        conditions.push(format!("r.goal_search LIKE {} ESCAPE '\\'", st.bind(Bind::Text(pattern))));
    }
    if let Some(now) = filter.attention_at.filter(|_| driver != Driver::Attention || !sqlite) {
        let stale = st.bind(Bind::Int(now - WORKER_WAIT_MS));
        // PostgreSQL: the ids as an array computed first, a key lookup in any plan.
        let test = if sqlite { "r.id IN ({})" } else { "r.id = ANY (ARRAY({}))" };
        conditions.push(test.replace("{}", &attention_runs(&stale)));
    }
    if filter.attention_at.is_some() {
        conditions.push("r.status IN ('pending', 'running', 'paused')".to_owned());
    }
    if !conditions.is_empty() {
        st.text.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
    }
    (at, id)
}

/// `text` with the `LIKE` wildcards `%`, `_` and the escape `\` escaped.
pub(crate) fn like_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The page statement through `driver`: the filter, then the cursor or offset, newest first, `limit + 1` rows
/// (one more tells whether a next page exists).
pub(crate) fn page_statement(
    filter: &RunFilter,
    driver: Driver,
    sqlite: bool,
    after: Option<&RunCursor>,
    offset: i64,
    limit: i64,
) -> Statement {
    let mut st = Statement { text: format!("SELECT {}", crate::sql::run_columns!(r)), binds: Vec::new() };
    let (at, id) = from_where(filter, driver, sqlite, &mut st);
    if let Some(cursor) = after {
        let (t, i) = (st.bind(Bind::Int(cursor.created_at_ms)), st.bind(Bind::Text(cursor.run_id.clone())));
        let joiner = if st.text.contains(" WHERE ") { " AND" } else { " WHERE" };
        st.text.push_str(&format!("{joiner} ({at}, {id}) < ({t}, {i})"));
    }
    let n = st.bind(Bind::Int(limit + 1));
    st.text.push_str(&format!(" ORDER BY {at} DESC, {id} DESC LIMIT {n} + 0"));
    if offset > 0 {
        let o = st.bind(Bind::Int(offset));
        st.text.push_str(&format!(" OFFSET {o} + 0"));
    }
    st
}

/// The count statement through `driver`: how many runs the filter matches.
pub(crate) fn count_statement(filter: &RunFilter, driver: Driver, sqlite: bool) -> Statement {
    let mut st = Statement { text: "SELECT COUNT(*)".into(), binds: Vec::new() };
    from_where(filter, driver, sqlite, &mut st);
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_wildcards_in_a_query_match_themselves() {
        assert_eq!(like_escaped(r"50%_off\"), r"50\%\_off\\");
    }

    #[test]
    fn the_smallest_set_drives_and_a_dense_one_leaves_it_to_an_ordered_index() {
        let filter = RunFilter {
            labels: vec![("env".into(), "prod".into()), ("tenant".into(), "t42".into())],
            statuses: vec![cairn_core::state::RunStatus::Pending],
            ..RunFilter::default()
        };
        let cap = ESTIMATE_CAP;
        let counted = [(Driver::Label(0), cap), (Driver::Label(1), 100), (Driver::Status, cap)];
        assert_eq!(choose(&filter, &counted), Driver::Label(1));
        let dense = [(Driver::Status, cap), (Driver::Label(0), cap)];
        assert_eq!(choose(&filter, &dense), Driver::Label(0), "a label's index is in creation order");
        assert_eq!(choose(&RunFilter::default(), &[(Driver::Status, cap)]), Driver::Runs);
        assert_eq!(obvious(&RunFilter::default()), Some(Driver::Runs));
        assert_eq!(obvious(&filter), None);
    }

    #[test]
    fn the_other_filters_are_checked_on_each_row_of_the_driver() {
        let filter = RunFilter {
            labels: vec![("env".into(), "prod".into()), ("team".into(), "ops".into())],
            action: Some("notify.send".into()),
            ..RunFilter::default()
        };
        let st = page_statement(&filter, Driver::Label(1), true, None, 0, 50);
        assert!(st.text.contains("FROM run_labels d CROSS JOIN runs r"), "{}", st.text);
        assert!(st.text.contains("ORDER BY d.created_at DESC, d.run_id DESC"), "{}", st.text);
        assert_eq!(st.text.matches("EXISTS").count(), 1, "the action: {}", st.text);
        assert!(st.text.contains("json_extract(r.labels, $"), "the other label: {}", st.text);
        assert_eq!(st.binds.len(), 6, "two labels, the action and the limit");
    }
}
