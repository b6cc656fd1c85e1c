//! Store errors. Each variant says whether the caller may retry the operation.

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed or is unreachable (connection lost, restart, lock timeout). Retryable: nothing was
    /// committed, so the operation may be repeated as a whole.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Migrations could not be applied. Not retryable without operator action.
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Stored data could not be decoded (corruption or a manual edit). Not retryable.
    #[error("corrupt data in {what}: {message}")]
    Corrupt {
        /// What was being read.
        what: &'static str,
        /// Why it is unusable.
        message: String,
    },
    /// The database failed while a batch including this operation was written (the original error is in the
    /// message). Retryable: nothing of the batch was recorded.
    #[error("database error in a batch: {0}")]
    Unavailable(String),
    /// The engine stopped before the operation was written (shutting down). Retryable: nothing was recorded.
    #[error("the orchestrator is stopping; nothing was recorded")]
    Stopped,
    /// The database URL is not `sqlite:…` or `postgres://…`. Not retryable.
    #[error("unsupported database URL `{0}`: use sqlite:PATH or postgres://…")]
    UnsupportedUrl(String),
}

impl StoreError {
    /// Whether repeating the whole operation may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Database(_) | StoreError::Unavailable(_) | StoreError::Stopped)
    }

    /// Whether the database could not be reached (connection lost or refused, the pool timed out or closed, the
    /// server shutting down): nothing was applied, and the same statements on another connection would wait out
    /// the same outage.
    pub fn is_unreachable(&self) -> bool {
        match self {
            StoreError::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_)
                ) || matches!(e, sqlx::Error::Database(db)
                    if db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")))
            }
            StoreError::Unavailable(_) | StoreError::Stopped => true,
            _ => false,
        }
    }

    /// Whether the database turned the transaction away because of other work, after the store's own retries:
    /// a deadlock or serialization failure (`40P01`, `40001`), a lock or statement timeout (`55P03`, `57014`),
    /// SQLite busy or locked (primary codes 5, 6). Nothing was applied, and the same statements run again at once
    /// would likely meet the same condition.
    pub fn is_contended(&self) -> bool {
        let StoreError::Database(e) = self else { return false };
        let Some(code) = e.as_database_error().and_then(|db| db.code()) else { return false };
        match code.parse::<i32>() {
            Ok(sqlite) => matches!(sqlite & 0xff, 5 | 6),
            Err(_) => crate::is_transient_conflict(e) || matches!(&*code, "55P03" | "57014"),
        }
    }

    pub(crate) fn corrupt(what: &'static str, message: impl std::fmt::Display) -> Self {
        StoreError::Corrupt { what, message: message.to_string() }
    }
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;
