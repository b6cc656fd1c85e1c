//! The identifiers and keys requests carry — idempotency keys, event names, keys and ids, schedule ids, run and
//! step ids in paths, worker ids and action names — and the rules every one of them follows: not empty, at most
//! [`Field::max_bytes`] bytes, and no U+0000.
//!
//! They are checked where a request enters (the REST API, the worker protocol, args an orchestrator-run action
//! reads), so that SQLite and PostgreSQL accept exactly the same values: PostgreSQL refuses NUL in text and a
//! b-tree key over about 2,700 bytes, SQLite takes both, and a value one backend refuses must not reach it, where
//! it would be an error the client can do nothing about. JSON values (inputs, args, outputs, payloads) may hold any Unicode, U+0000 included: they are
//! stored as JSON text, where it is the escape `\u0000`.

/// A kind of identifier and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The field's name, as requests spell it (`idempotency_key`, `name`, …).
    pub name: &'static str,
    /// Longest accepted value, in bytes of UTF-8.
    pub max_bytes: usize,
}

/// A run's `idempotency_key`.
pub const IDEMPOTENCY_KEY: Field = Field { name: "idempotency_key", max_bytes: 255 };
/// An event's `name` (`POST /v1/events`, `event.wait` `name`).
pub const EVENT_NAME: Field = Field { name: "name", max_bytes: 255 };
/// An event's correlation `key`.
pub const EVENT_KEY: Field = Field { name: "key", max_bytes: 1024 };
/// An event's dedupe `id`.
pub const EVENT_ID: Field = Field { name: "id", max_bytes: 255 };
/// A schedule id.
pub const SCHEDULE_ID: Field = Field { name: "schedule id", max_bytes: 128 };
/// A run id in a path (Cairn's are UUIDs; anything longer cannot name a run).
pub const RUN_ID: Field = Field { name: "run id", max_bytes: 128 };
/// A step id in a path (plans allow 64 characters).
pub const STEP_ID: Field = Field { name: "step id", max_bytes: 64 };
/// A worker's id.
pub const WORKER_ID: Field = Field { name: "worker_id", max_bytes: 255 };
/// An action name (registered by a worker, or asked for in a poll).
pub const ACTION_NAME: Field = Field { name: "action", max_bytes: 255 };
/// Who took an operator action, and why (`by`, `reason`).
pub const OPERATOR_NOTE: Field = Field { name: "by", max_bytes: 1024 };

/// Why a value does not fit its [`Field`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// The value is empty.
    #[error("`{field}` must not be empty")]
    Empty {
        /// The field's name.
        field: &'static str,
    },
    /// The value is longer than the field allows.
    #[error("`{field}` is {bytes} bytes long; the limit is {max} bytes")]
    TooLong {
        /// The field's name.
        field: &'static str,
        /// The value's length in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The value holds U+0000.
    #[error("`{field}` contains the character U+0000 (NUL) at byte {at}, which is not allowed")]
    Nul {
        /// The field's name.
        field: &'static str,
        /// Byte offset of the first NUL.
        at: usize,
    },
}

impl Field {
    /// Checks `value` against this field's rules.
    ///
    /// # Errors
    /// The first rule `value` breaks.
    pub fn check(self, value: &str) -> Result<(), TextError> {
        if value.is_empty() {
            return Err(TextError::Empty { field: self.name });
        }
        if value.len() > self.max_bytes {
            return Err(TextError::TooLong { field: self.name, bytes: value.len(), max: self.max_bytes });
        }
        match value.find('\0') {
            Some(at) => Err(TextError::Nul { field: self.name, at }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_must_be_present_short_and_free_of_nul() {
        assert_eq!(IDEMPOTENCY_KEY.check("order-42"), Ok(()));
        assert_eq!(IDEMPOTENCY_KEY.check(""), Err(TextError::Empty { field: "idempotency_key" }));
        assert_eq!(IDEMPOTENCY_KEY.check(&"k".repeat(255)), Ok(()));
        assert_eq!(
            IDEMPOTENCY_KEY.check(&"k".repeat(2700)),
            Err(TextError::TooLong { field: "idempotency_key", bytes: 2700, max: 255 })
        );
        assert_eq!(EVENT_NAME.check("a\0b"), Err(TextError::Nul { field: "name", at: 1 }));
        assert!(EVENT_NAME.check("a\0b").expect_err("NUL").to_string().contains("U+0000"));
    }
}
