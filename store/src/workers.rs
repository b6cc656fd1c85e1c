//! What each worker is doing now: the attempts it holds a lease on, for the dashboard's workers page
//! (`GET /v1/workers`).

use crate::{Store, StoreResult};

/// A worker's leased attempts.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct WorkerLoad {
    /// The worker's id (the lease owner).
    pub worker_id: String,
    /// Attempts it holds a lease on (steps `running` under its lease).
    pub in_flight: i64,
}

/// Running steps by lease owner. The same text on both backends. Served by the partial index
/// `steps_lease_idx` (`lease_expires_at` where `status = 'running'`), so it reads only running steps; orchestrator
/// waits (`event.wait`) hold leases without expiry and are left out. Takes no locks.
const WORKER_LOADS: &str = "SELECT lease_owner AS worker_id, COUNT(*) AS in_flight FROM steps \
     WHERE status = 'running' AND lease_expires_at IS NOT NULL AND lease_owner IS NOT NULL \
     GROUP BY lease_owner ORDER BY lease_owner";

impl Store {
    /// The attempts each worker holds a lease on now; workers holding none are absent.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn worker_loads(&self) -> StoreResult<Vec<WorkerLoad>> {
        Ok(on_pool!(self, Db, pool => sqlx::query_as::<Db, WorkerLoad>(WORKER_LOADS).fetch_all(pool).await?))
    }
}
