//! The run filter as requests spell it: `GET /v1/runs`'s query string, and the `filter` object of the bulk
//! operations (`POST /v1/runs:cancel|:redrive|:retry-failed`). Both become one [`RunFilter`]; every value is
//! checked here, with an error that names the parameter.

use cairn_core::labels;
use cairn_core::state::RunStatus;
use cairn_store::{PageStart, RunCursor, RunFilter};
use serde::Deserialize;

use super::error::ApiError;

/// Longest `q`, in characters.
pub(super) const MAX_QUERY_CHARS: usize = 256;
/// Page size when `limit` is not given, and the largest accepted.
pub(super) const DEFAULT_LIMIT: i64 = 50;
pub(super) const MAX_LIMIT: i64 = 500;

/// `GET /v1/runs`'s query: the filter, where the page starts and its size.
#[derive(Debug)]
pub(super) struct ListQuery {
    pub filter: RunFilter,
    pub start: PageStart,
    pub limit: i64,
}

/// Parses `GET /v1/runs`'s query string. `label` and `status` may repeat (`status` also takes a comma-separated
/// list); `created_after`/`created_before` take milliseconds or an RFC 3339 instant; `cursor` and `offset`
/// exclude each other. An unknown parameter is an error, so a misspelt filter never lists every run.
pub(super) fn list_query(raw: Option<&str>, now_ms: i64) -> Result<ListQuery, ApiError> {
    let mut filter = RunFilter::default();
    let (mut cursor, mut offset, mut limit) = (None, None, None);
    for (name, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        let value = value.as_ref();
        match name.as_ref() {
            "status" => {
                for one in value.split(',') {
                    filter.statuses.push(status(one)?);
                }
            }
            "label" => {
                filter.labels.push(labels::parse(value, ':').map_err(|e| invalid("label", e))?);
            }
            "q" => filter.q = Some(query_text(value)?),
            "action" => filter.action = Some(checked(cairn_core::text::ACTION_NAME, value)?),
            "created_after" => filter.created_after = Some(instant("created_after", value)?),
            "created_before" => filter.created_before = Some(instant("created_before", value)?),
            "idempotency_key" => filter.idempotency_key = Some(checked(cairn_core::text::IDEMPOTENCY_KEY, value)?),
            "attention" => filter.attention_at = flag("attention", value)?.then_some(now_ms),
            "cursor" => cursor = Some(value.parse::<RunCursor>().map_err(|e| invalid("cursor", e))?),
            "offset" => offset = Some(number("offset", value)?.max(0)),
            "limit" => limit = Some(number("limit", value)?.clamp(1, MAX_LIMIT)),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{}`: use status, label, q, action, created_after, created_before, \
                     idempotency_key, attention, cursor, offset or limit",
                    other.escape_debug()
                )));
            }
        }
    }
    check_labels(&filter.labels)?;
    let start = match (cursor, offset) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request("give `cursor` or `offset`, not both")),
        (Some(cursor), None) => PageStart::After(cursor),
        (None, offset) => PageStart::Offset(offset.unwrap_or(0)),
    };
    Ok(ListQuery { filter, start, limit: limit.unwrap_or(DEFAULT_LIMIT) })
}

/// The `filter` object of a bulk operation: the query's filters with JSON types (`labels` an object, `status`
/// a name or a list).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilterBody {
    #[serde(default)]
    status: Option<OneOrMany>,
    #[serde(default)]
    labels: Option<labels::Labels>,
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    created_after: Option<i64>,
    #[serde(default)]
    created_before: Option<i64>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    attention: Option<bool>,
}

/// A status name or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl FilterBody {
    /// The filter, checked as [`list_query`] checks the query. An empty filter is refused: a bulk operation over
    /// every run must say so (`{"status": [...]}`).
    pub(super) fn run_filter(self, now_ms: i64) -> Result<RunFilter, ApiError> {
        let statuses = match self.status {
            None => Vec::new(),
            Some(OneOrMany::One(name)) => vec![status(&name)?],
            Some(OneOrMany::Many(names)) => names.iter().map(|n| status(n)).collect::<Result<_, _>>()?,
        };
        let labels = self.labels.unwrap_or_default();
        labels::check(&labels).map_err(|e| invalid("labels", e))?;
        let filter = RunFilter {
            statuses,
            labels: labels.into_iter().collect(),
            q: self.q.as_deref().map(query_text).transpose()?,
            action: self.action.as_deref().map(|a| checked(cairn_core::text::ACTION_NAME, a)).transpose()?,
            created_after: self.created_after,
            created_before: self.created_before,
            idempotency_key: self
                .idempotency_key
                .as_deref()
                .map(|k| checked(cairn_core::text::IDEMPOTENCY_KEY, k))
                .transpose()?,
            attention_at: self.attention.unwrap_or(false).then_some(now_ms),
        };
        if filter == RunFilter::default() {
            return Err(ApiError::bad_request(
                "`filter` selects no runs: give at least one of status, labels, q, action, created_after, \
                 created_before, idempotency_key or attention",
            ));
        }
        Ok(filter)
    }
}

fn invalid(parameter: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("`{parameter}`: {e}"))
}

fn status(name: &str) -> Result<RunStatus, ApiError> {
    name.trim().parse::<RunStatus>().map_err(|_| {
        let names: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        ApiError::bad_request(format!("unknown run status `{}`: use {}", name.escape_debug(), names.join(", ")))
    })
}

fn check_labels(selected: &[(String, String)]) -> Result<(), ApiError> {
    if selected.len() > labels::MAX_LABELS {
        return Err(invalid("label", labels::LabelError::TooMany { count: selected.len() }));
    }
    Ok(())
}

fn query_text(value: &str) -> Result<String, ApiError> {
    let chars = value.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(invalid("q", format!("{chars} characters long; the limit is {MAX_QUERY_CHARS}")));
    }
    if value.contains('\0') {
        return Err(invalid("q", "contains the character U+0000 (NUL), which is not allowed"));
    }
    Ok(value.to_owned())
}

fn checked(field: cairn_core::text::Field, value: &str) -> Result<String, ApiError> {
    field.check(value).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(value.to_owned())
}

fn number(parameter: &str, value: &str) -> Result<i64, ApiError> {
    value.parse().map_err(|_| invalid(parameter, format!("`{}` is not an integer", value.escape_debug())))
}

fn flag(parameter: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" | "1" | "" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(invalid(parameter, format!("`{}` is not true or false", other.escape_debug()))),
    }
}

/// Milliseconds since the epoch, or an RFC 3339 instant.
fn instant(parameter: &str, value: &str) -> Result<i64, ApiError> {
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    value.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|_| {
        invalid(parameter, format!("`{}` is neither milliseconds nor an RFC 3339 instant", value.escape_debug()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_of_the_query_reaches_the_store_filter() {
        let q = list_query(
            Some(
                "status=failed,cancelled&label=env:prod&label=url:http://x&q=Rain&action=notify.send&\
                  created_after=2026-12-01T00:00:00Z&created_before=5&idempotency_key=k&attention=true&limit=900",
            ),
            42,
        )
        .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(q.filter.statuses, vec![RunStatus::Failed, RunStatus::Cancelled]);
        assert_eq!(q.filter.labels, vec![("env".into(), "prod".into()), ("url".into(), "http://x".into())]);
        assert_eq!(q.filter.q.as_deref(), Some("Rain"));
        assert_eq!(q.filter.created_after, Some(1_764_547_200_000));
        assert_eq!(q.filter.created_before, Some(5));
        assert_eq!(q.filter.attention_at, Some(42));
        assert_eq!((q.limit, q.start), (MAX_LIMIT, PageStart::Offset(0)));
    }

    #[test]
    fn a_bad_parameter_is_named() {
        for (query, names) in [
            ("status=done", "done"),
            ("label=env", "label"),
            ("label=Env:x", "label"),
            ("statsu=failed", "statsu"),
            ("cursor=nope", "cursor"),
            ("cursor=1.a&offset=2", "cursor"),
            ("attention=maybe", "attention"),
            ("created_after=yesterday", "created_after"),
        ] {
            let e = list_query(Some(query), 0).err().unwrap_or_else(|| panic!("{query} was accepted"));
            assert!(e.message.contains(names), "{query}: {}", e.message);
        }
        let long = format!("q={}", "x".repeat(MAX_QUERY_CHARS + 1));
        assert!(list_query(Some(&long), 0).is_err());
    }

    #[test]
    fn a_bulk_filter_must_select_something() {
        assert!(FilterBody::default().run_filter(0).is_err());
        let body: FilterBody = serde_json::from_value(serde_json::json!({"status": "failed"})).unwrap_or_default();
        assert_eq!(body.run_filter(0).map(|f| f.statuses).ok(), Some(vec![RunStatus::Failed]));
    }
}
