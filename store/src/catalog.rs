//! The action catalog in the database (migration `0011_action_catalog`): the spec of every registered action,
//! shared by all orchestrators of the database and kept across restarts, and which workers serve each action and
//! when each was last seen. Specs are stored as JSON text, read and written whole; the orchestrator compiles them.

use crate::Store;
use crate::error::StoreResult;

/// A registered action as stored: its name and its spec (JSON text).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredAction {
    /// The action's name.
    pub name: String,
    /// Its spec, JSON text (`cairn_core::catalog::ActionSpec`).
    pub spec: String,
}

/// A worker serving an action, and when it was last seen registering or polling for it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct ActionWorker {
    /// The action.
    pub action: String,
    /// The worker's id.
    pub worker_id: String,
    /// Epoch ms of its last registration or poll for the action.
    pub last_seen_at: i64,
}

/// Registers (or refreshes) `actions` with their specs for the worker `worker_id` at `now_ms`.
const ACTION_UPSERT: &str = "INSERT INTO actions (name, spec, registered_at, updated_at) VALUES ($1, $2, $3, $3) \
     ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at";

/// A worker seen for an action. Index: `action_workers` PK.
const ACTION_WORKER_SEEN: &str = "INSERT INTO action_workers (action, worker_id, last_seen_at) VALUES ($1, $2, $3) \
     ON CONFLICT (action, worker_id) DO UPDATE SET last_seen_at = excluded.last_seen_at";

/// Every registered action. Index: `actions` PK (a full read; the catalog is small).
const ACTIONS_ALL: &str = "SELECT name, spec FROM actions ORDER BY name";

/// The workers seen for any action since `$1`, most recent first. Index: `action_workers_seen_idx`.
const ACTION_WORKERS_SINCE: &str = "SELECT action, worker_id, last_seen_at FROM action_workers \
     WHERE last_seen_at >= $1 ORDER BY action, last_seen_at DESC";

/// Ready steps due by `$1`, counted by action (orchestrator-run `event.wait` steps aside). Index:
/// `steps_ready_idx` (ready steps by due time).
const READY_BY_ACTION: &str = "SELECT action, COUNT(*) FROM steps WHERE status = 'ready' AND available_at <= $1 \
     AND action <> 'event.wait' GROUP BY action ORDER BY action";

impl Store {
    /// Stores the specs of `actions` (`(name, spec JSON)`) and records `worker_id` as serving each, at `now_ms`.
    /// Each statement is an upsert on its own: a registration cut short is completed by the worker's next one.
    ///
    /// # Errors
    /// Database errors (classified by [`crate::ErrorClass`]).
    pub async fn actions_register(
        &self,
        worker_id: &str,
        actions: &[(String, String)],
        now_ms: i64,
    ) -> StoreResult<()> {
        for (name, spec) in actions {
            on_pool!(self, Db, pool => {
                sqlx::query::<Db>(ACTION_UPSERT).bind(name).bind(spec).bind(now_ms).execute(pool).await?;
            });
            on_pool!(self, Db, pool => {
                sqlx::query::<Db>(ACTION_WORKER_SEEN).bind(name).bind(worker_id).bind(now_ms).execute(pool).await?;
            });
        }
        Ok(())
    }

    /// Records that `worker_id` was seen polling for `actions` at `now_ms` (actions it never registered are
    /// recorded too: a worker of another orchestrator's registration).
    ///
    /// # Errors
    /// Database errors.
    pub async fn action_workers_seen(&self, worker_id: &str, actions: &[String], now_ms: i64) -> StoreResult<()> {
        for action in actions {
            on_pool!(self, Db, pool => {
                sqlx::query::<Db>(ACTION_WORKER_SEEN).bind(action).bind(worker_id).bind(now_ms).execute(pool).await?;
            });
        }
        Ok(())
    }

    /// Every registered action with its stored spec.
    ///
    /// # Errors
    /// Database errors.
    pub async fn actions_all(&self) -> StoreResult<Vec<StoredAction>> {
        Ok(on_pool!(self, Db, pool => sqlx::query_as::<Db, StoredAction>(ACTIONS_ALL).fetch_all(pool).await?))
    }

    /// Ready steps due by `now_ms`, counted by action (`event.wait` aside: the orchestrator runs it).
    ///
    /// # Errors
    /// Database errors.
    pub async fn steps_ready_by_action(&self, now_ms: i64) -> StoreResult<Vec<(String, i64)>> {
        Ok(on_pool!(self, Db, pool => sqlx::query_as::<Db, (String, i64)>(READY_BY_ACTION)
            .bind(now_ms).fetch_all(pool).await?))
    }

    /// The workers seen for each action at or after `since_ms`.
    ///
    /// # Errors
    /// Database errors.
    pub async fn action_workers_since(&self, since_ms: i64) -> StoreResult<Vec<ActionWorker>> {
        Ok(on_pool!(self, Db, pool => sqlx::query_as::<Db, ActionWorker>(ACTION_WORKERS_SINCE)
            .bind(since_ms).fetch_all(pool).await?))
    }
}
