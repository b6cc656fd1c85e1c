//! Run labels: `key → value` pairs an operator puts on a run at submission (or a schedule on the runs it starts)
//! to find it again (`GET /v1/runs?label=key:value`). The rules live here so the API, the CLI's `--label`, the
//! schedules and the store agree on them.

use std::collections::BTreeMap;

/// A run's labels, ordered by key.
pub type Labels = BTreeMap<String, String>;

/// At most this many labels per run.
pub const MAX_LABELS: usize = 16;
/// Longest key, in characters (`[a-z0-9_.-]`).
pub const MAX_KEY_CHARS: usize = 63;
/// Longest value, in characters.
pub const MAX_VALUE_CHARS: usize = 256;

/// Why labels, or a label selector, break the rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// More than [`MAX_LABELS`].
    #[error("a run takes at most {MAX_LABELS} labels; {count} were given")]
    TooMany {
        /// Labels given.
        count: usize,
    },
    /// A key that is empty, too long or has a character outside `[a-z0-9_.-]`.
    #[error("label key `{key}` is not 1 to {MAX_KEY_CHARS} characters of a-z, 0-9, `_`, `.` and `-`")]
    Key {
        /// The key, escaped for printing.
        key: String,
    },
    /// A value over [`MAX_VALUE_CHARS`] characters.
    #[error("the value of label `{key}` is {chars} characters long; the limit is {MAX_VALUE_CHARS}")]
    ValueTooLong {
        /// The label's key.
        key: String,
        /// The value's length in characters.
        chars: usize,
    },
    /// A value holding U+0000.
    #[error("the value of label `{key}` contains the character U+0000 (NUL), which is not allowed")]
    Nul {
        /// The label's key.
        key: String,
    },
    /// A selector or assignment without its separator.
    #[error("`{text}` is not a label as `key{separator}value`")]
    Form {
        /// The text given, escaped for printing.
        text: String,
        /// The separator expected.
        separator: char,
    },
}

/// Checks a run's labels: at most [`MAX_LABELS`], each key and value as [`check_label`] wants.
///
/// # Errors
/// The first rule broken.
pub fn check(labels: &Labels) -> Result<(), LabelError> {
    if labels.len() > MAX_LABELS {
        return Err(LabelError::TooMany { count: labels.len() });
    }
    labels.iter().try_for_each(|(key, value)| check_label(key, value))
}

/// Checks one label: key of 1 to [`MAX_KEY_CHARS`] characters of `[a-z0-9_.-]`, value of at most
/// [`MAX_VALUE_CHARS`] characters without U+0000 (an empty value is allowed).
///
/// # Errors
/// The first rule broken.
pub fn check_label(key: &str, value: &str) -> Result<(), LabelError> {
    let key_ok = !key.is_empty()
        && key.chars().count() <= MAX_KEY_CHARS
        && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'));
    if !key_ok {
        return Err(LabelError::Key { key: key.escape_debug().to_string() });
    }
    let chars = value.chars().count();
    if chars > MAX_VALUE_CHARS {
        return Err(LabelError::ValueTooLong { key: key.into(), chars });
    }
    if value.contains('\0') {
        return Err(LabelError::Nul { key: key.into() });
    }
    Ok(())
}

/// Parses `key<separator>value` (the filter's `key:value`, the CLI's `key=value`) at the first separator, so a
/// value may hold the separator; the label is checked.
///
/// # Errors
/// [`LabelError::Form`] without a separator; otherwise as [`check_label`].
pub fn parse(text: &str, separator: char) -> Result<(String, String), LabelError> {
    let Some((key, value)) = text.split_once(separator) else {
        return Err(LabelError::Form { text: text.escape_debug().to_string(), separator });
    };
    check_label(key, value)?;
    Ok((key.to_owned(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_pattern_and_values_their_limits() {
        assert!(check_label("team.ops-1_a", "").is_ok());
        for key in ["", "Team", "a b", "é", &"k".repeat(64)] {
            assert!(matches!(check_label(key, "v"), Err(LabelError::Key { .. })), "{key:?}");
        }
        assert!(check_label(&"k".repeat(63), &"é".repeat(256)).is_ok(), "limits count characters");
        assert_eq!(check_label("k", &"v".repeat(257)), Err(LabelError::ValueTooLong { key: "k".into(), chars: 257 }));
        assert_eq!(check_label("k", "a\0b"), Err(LabelError::Nul { key: "k".into() }));
    }

    #[test]
    fn at_most_sixteen_labels() {
        let mut labels: Labels = (0..16).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(check(&labels).is_ok());
        labels.insert("k16".into(), "v".into());
        assert_eq!(check(&labels), Err(LabelError::TooMany { count: 17 }));
    }

    #[test]
    fn a_selector_splits_at_its_first_separator() {
        assert_eq!(parse("url:http://x", ':'), Ok(("url".into(), "http://x".into())));
        assert_eq!(parse("env=prod", '='), Ok(("env".into(), "prod".into())));
        assert!(matches!(parse("env", ':'), Err(LabelError::Form { .. })));
        assert!(matches!(parse("Env:prod", ':'), Err(LabelError::Key { .. })));
    }
}
