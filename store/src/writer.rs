//! The orchestrator's batch writer: one task writes every batch of new runs, reports and claims
//! ([`Store::write_batch`]'s semantics; `docs/design/group-commit.md`). On SQLite it writes each batch as
//! [`Store::write_batch`] does (one connection anyway). On PostgreSQL it is the driver's accelerator
//! (`postgres/writer.rs`): it holds one connection between batches and, with the fast path on (`pg_fast_path`,
//! the default), writes a batch in one call of a stored function where the batch allows; the outcome is the
//! same either way.

use crate::Store;
use crate::error::StoreResult;
use crate::flow::batch::Batch;
use crate::model::BatchOutcome;
use crate::postgres::writer::PgWriter;

/// Writes batches for one task (see the module docs). Made by [`Store::batch_writer`].
#[derive(Debug)]
pub struct BatchWriter {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Sqlite(Store),
    Postgres(Box<PgWriter>),
}

/// How many batches a [`crate::BatchWriter`] tried in one call on PostgreSQL (`cairn_complete_and_claim` for a chain
/// step, `cairn_complete_leaves_and_claim` for leaf completions), by how they ended. A fallback went on to the
/// general path; the counts only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OneCallCounts {
    /// Calls that committed: the completions and the claim were written by the call.
    pub committed: u64,
    /// Calls that wrote nothing (the function found a case it leaves to the general path, or an error rolled
    /// it back).
    pub fell_back: u64,
    /// Calls whose connection was lost and whose outcome could not be read back (the batch then failed with the
    /// read's error, as after a `COMMIT` lost on the general path).
    pub unknown: u64,
}

/// How the batches a [`BatchWriter`] tried on PostgreSQL's fast path ended: the chain call
/// (`cairn_complete_and_claim`, a chain step) and the leaf call (`cairn_complete_leaves_and_claim`, leaf
/// completions). Zero on SQLite and with the fast path off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FastPathCounts {
    /// Chain calls.
    pub chain: OneCallCounts,
    /// Leaf calls.
    pub leaves: OneCallCounts,
}

impl Store {
    /// A writer for one task's batches (see [`BatchWriter`]), with PostgreSQL's fast path on.
    #[must_use]
    pub fn batch_writer(&self) -> BatchWriter {
        let backend = match self {
            Store::Sqlite(_) => Backend::Sqlite(self.clone()),
            Store::Postgres(pool) => Backend::Postgres(Box::new(PgWriter::new(pool.clone()))),
        };
        BatchWriter { backend }
    }
}

impl BatchWriter {
    /// This writer with PostgreSQL's fast path (the one-call functions) on or off; on by default. Off, every
    /// batch takes the general path, as on SQLite, and [`BatchWriter::fast_path_counts`] stays zero.
    #[must_use]
    pub fn with_fast_path(mut self, on: bool) -> Self {
        if let Backend::Postgres(writer) = &mut self.backend {
            writer.set_fast_path(on);
        }
        self
    }

    /// [`Store::write_batch`], on the writer's own connection: the same semantics, errors and retries (a
    /// deadlock or serialization failure, after which the transaction was rolled back, runs it again: five
    /// tries in all).
    ///
    /// On PostgreSQL, a held connection that the server closed while the writer was idle (a database restart, a
    /// terminated session) fails at `BEGIN`, before anything was applied: it is dropped and the transaction
    /// begins on a fresh one from the pool, up to once per pooled connection. After any other error the
    /// connection is closed, not returned to the pool, so a connection left in an unknown state is never reused
    /// by anyone. When the connection is lost while `COMMIT` is under way, the steps the batch leased are read
    /// back on a fresh connection: found, the batch is answered as committed, leases and all; not found, it is
    /// written again (within the same budget); with nothing leased to read it by, it fails with the retryable
    /// `Database` error (reports are fenced by their lease, so a worker's resent report changes nothing). A
    /// batch with new runs always takes the general path.
    ///
    /// # Errors
    /// As [`Store::write_batch`].
    pub async fn write_batch(&mut self, batch: &Batch<'_>) -> StoreResult<BatchOutcome> {
        match &mut self.backend {
            Backend::Sqlite(store) => store.write_batch(batch).await,
            Backend::Postgres(writer) => writer.write_batch(batch).await,
        }
    }

    /// How the batches tried on PostgreSQL's fast path ended (for metrics and tests).
    #[must_use]
    pub fn fast_path_counts(&self) -> FastPathCounts {
        match &self.backend {
            Backend::Sqlite(_) => FastPathCounts::default(),
            Backend::Postgres(writer) => {
                FastPathCounts { chain: writer.one_call_counts(), leaves: writer.leaf_call_counts() }
            }
        }
    }

    /// The PostgreSQL writer, for the fast path's own tests.
    #[cfg(test)]
    pub(crate) fn postgres(&self) -> Option<&PgWriter> {
        match &self.backend {
            Backend::Postgres(writer) => Some(writer),
            Backend::Sqlite(_) => None,
        }
    }
}
