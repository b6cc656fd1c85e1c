//! Store errors, and their one classification ([`ErrorClass`]): whether the database was unreachable, turned
//! the work away because of other work, refused the data, or failed otherwise. Every layer above maps from the
//! class, once: the REST API to 503 / 422 / 500, the worker protocol to `UNAVAILABLE` / `INVALID_ARGUMENT` /
//! `INTERNAL`, the engine to "resend" or "write the batch one by one".

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

/// What kind of failure a [`StoreError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The database could not be reached (connection lost or refused, pool exhausted or closed, server shutting
    /// down or out of connections). Retryable: nothing was applied.
    Unreachable,
    /// The database turned the transaction away because of other work (deadlock, serialization failure, lock or
    /// statement timeout, SQLite busy). Retryable: nothing was applied.
    Contended,
    /// The database refused a value or a constraint (text with U+0000, a key too long for its index, a number
    /// out of range, a constraint violated). Not retryable: the same data is refused again.
    Refused,
    /// Anything else: a bug, corrupt data, a failed migration. Not retryable.
    Internal,
}

impl StoreError {
    /// The class of this error (see [`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        if self.is_unreachable() {
            return ErrorClass::Unreachable;
        }
        if self.is_contended() {
            return ErrorClass::Contended;
        }
        match self {
            StoreError::Database(e) if refuses_data(e) => ErrorClass::Refused,
            _ => ErrorClass::Internal,
        }
    }

    /// Whether repeating the whole operation may succeed: the database was unreachable or contended.
    pub fn is_retryable(&self) -> bool {
        matches!(self.class(), ErrorClass::Unreachable | ErrorClass::Contended)
    }

    /// Whether the database could not be reached (connection lost or refused, the pool timed out or closed, the
    /// server shutting down): nothing was applied, and the same statements on another connection would wait out
    /// the same outage.
    pub fn is_unreachable(&self) -> bool {
        match self {
            StoreError::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::Tls(_)
                        | sqlx::Error::WorkerCrashed
                        | sqlx::Error::Protocol(_)
                ) || DbCode::of(e).is_some_and(|code| code.is_unreachable())
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
        match DbCode::of(e) {
            Some(DbCode::Sqlite(code)) => matches!(code & 0xff, 5 | 6),
            Some(DbCode::Postgres(code)) => {
                crate::is_transient_conflict(e) || matches!(code.as_str(), "55P03" | "57014")
            }
            None => false,
        }
    }

    pub(crate) fn corrupt(what: &'static str, message: impl std::fmt::Display) -> Self {
        StoreError::Corrupt { what, message: message.to_string() }
    }
}

/// A database's error code, by backend: PostgreSQL's SQLSTATE and SQLite's extended result code are both
/// written as digits (`22021`, `2067`), so the backend is told by the error's type, never by the code's form.
enum DbCode {
    Postgres(String),
    Sqlite(i32),
}

impl DbCode {
    fn of(e: &sqlx::Error) -> Option<DbCode> {
        let db = e.as_database_error()?;
        let code = db.code()?;
        if db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some() {
            Some(DbCode::Postgres(code.into_owned()))
        } else {
            code.parse().ok().map(DbCode::Sqlite)
        }
    }

    /// PostgreSQL: connection exceptions (`08`), operator intervention such as a shutdown (`57P`), insufficient
    /// resources such as too many connections (`53`), a system error (`58`), a session ended for idling in a
    /// transaction (`25P03`). SQLite: I/O errors (10), a full disk (13), a database it cannot open (14).
    fn is_unreachable(&self) -> bool {
        match self {
            DbCode::Sqlite(code) => matches!(code & 0xff, 10 | 13 | 14),
            DbCode::Postgres(code) => {
                ["08", "57P", "53", "58"].iter().any(|class| code.starts_with(class)) || code == "25P03"
            }
        }
    }

    /// PostgreSQL: data exceptions (`22`: text with U+0000 is `22021` or `22P05`, a value too long `22001`, out
    /// of range `22003`), integrity constraints (`23`), program limits (`54`: an index row too large), an exception
    /// a trigger raised (`P0001`). SQLite: a value too big (18), a constraint or a trigger's `RAISE` (19), a type
    /// mismatch (20), a bind index out of range (25).
    fn refuses_data(&self) -> bool {
        match self {
            DbCode::Sqlite(code) => matches!(code & 0xff, 18 | 19 | 20 | 25),
            DbCode::Postgres(code) => ["22", "23", "54"].iter().any(|class| code.starts_with(class)) || code == "P0001",
        }
    }
}

/// Whether the database (or sqlx, refusing to encode a value) refused the data itself.
fn refuses_data(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Encode(_)) || DbCode::of(e).is_some_and(|code| code.refuses_data())
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;
