//! Text → JSON value for plan documents, in JSON or YAML, refusing what serde would silently accept.
//!
//! Why not `serde_json::from_str::<Value>`: it keeps the last of two equal keys in one object, so
//! `{"id":"a","id":"b"}` would quietly become `{"id":"b"}` (case C01 variant c). The [`Strict`] visitor below builds
//! the same [`Value`] but fails on a repeated key, naming the key and the JSON pointer of its object. Non-finite
//! numbers (YAML `.nan`, `.inf`) are refused too, because JSON cannot carry them and they would turn into `null`.
//! Nesting deeper than 128 levels is refused by the parsers' recursion limits, never by a stack overflow.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::diagnostic::{Code, Diagnostic};
use crate::pointer;

/// The syntax a document is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON (RFC 8259).
    Json,
    /// YAML 1.2 (the JSON-compatible subset of it that maps onto JSON values).
    Yaml,
}

impl Format {
    /// Picks the format from a file name (`.yaml`/`.yml` → YAML, `.json` → JSON), else from the first
    /// non-blank character (`{` or `[` → JSON, anything else YAML).
    pub fn detect(file_name: Option<&str>, text: &str) -> Self {
        let lower = file_name.map(str::to_ascii_lowercase);
        match lower.as_deref() {
            Some(name) if name.ends_with(".yaml") || name.ends_with(".yml") => Format::Yaml,
            Some(name) if name.ends_with(".json") => Format::Json,
            _ => match text.trim_start().chars().next() {
                Some('{' | '[') => Format::Json,
                _ => Format::Yaml,
            },
        }
    }
}

/// Why a document could not be read into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseFailure {
    /// [`Code::ParseError`] or [`Code::DuplicateKey`].
    pub code: Code,
    /// What went wrong, with line and column when known.
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// Pointer of the object holding a duplicate key; `""` otherwise.
    pub pointer: String,
}

impl From<ParseFailure> for Diagnostic {
    fn from(failure: ParseFailure) -> Self {
        let hint = match failure.code {
            Code::DuplicateKey => "remove or rename one of the two entries",
            _ => "fix the syntax at the reported line and column",
        };
        Diagnostic::error(failure.code, failure.pointer, failure.message).hint(hint)
    }
}

/// Parses `text` in `format` into a JSON value.
///
/// # Errors
/// [`ParseFailure`] with code `parse_error` (malformed text, non-finite numbers, nesting deeper than 128 levels,
/// trailing content) or `duplicate_key` (an object repeats a key), with line and column when the parser knows them.
pub fn parse(text: &str, format: Format) -> Result<Value, ParseFailure> {
    match format {
        Format::Json => parse_json(text),
        Format::Yaml => parse_yaml(text),
    }
}

fn parse_json(text: &str) -> Result<Value, ParseFailure> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Strict { path: Vec::new() }.deserialize(&mut de).map_err(|e| json_failure(&e))?;
    de.end().map_err(|e| json_failure(&e))?;
    Ok(value)
}

fn parse_yaml(text: &str) -> Result<Value, ParseFailure> {
    // The YAML parser reads the whole event stream before the deserializer's recursion limit can stop it, and its
    // scanner is quadratic in the depth of flow collections (20,000 nested `{"a": ` took 11 s), so that depth is
    // bounded on the text first.
    if let Some((line, column)) = flow_too_deep(text, MAX_DEPTH) {
        let message = format!("recursion limit exceeded: flow collections nest deeper than {MAX_DEPTH} levels");
        return Err(failure(&message, Some(line), Some(column)));
    }
    let de = serde_norway::Deserializer::from_str(text);
    Strict { path: Vec::new() }.deserialize(de).map_err(|e| {
        let (line, column) = e.location().map_or((None, None), |l| (Some(l.line()), Some(l.column())));
        failure(&e.to_string(), line, column)
    })
}

/// Deepest nesting a document may have; serde_json's recursion limit, applied to YAML too.
const MAX_DEPTH: usize = 128;

/// Where YAML flow collections (`[`, `{`) first nest deeper than `max`, as 1-based line and column; quoted
/// scalars and comments are skipped. A lexical guard only: the parser still decides what the text means.
fn flow_too_deep(text: &str, max: usize) -> Option<(usize, usize)> {
    let (mut depth, mut line, mut column) = (0usize, 1, 0);
    let mut chars = text.chars().peekable();
    let mut previous = '\n';
    while let Some(c) = chars.next() {
        column += 1;
        match c {
            '\n' => (line, column) = (line + 1, 0),
            '[' | '{' => {
                depth += 1;
                if depth > max {
                    return Some((line, column));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            '#' if previous.is_whitespace() => while chars.next_if(|&c| c != '\n').is_some() {},
            // A quote opens a quoted scalar only where a scalar can start (`don't` is plain text).
            '"' | '\'' if previous.is_whitespace() || "[{,:".contains(previous) => {
                while let Some(inner) = chars.next() {
                    column += 1;
                    match inner {
                        '\n' => (line, column) = (line + 1, 0),
                        '\\' if c == '"' => {
                            chars.next();
                        }
                        '\'' if c == '\'' && chars.peek() == Some(&'\'') => {
                            chars.next();
                        }
                        q if q == c => break,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        previous = c;
    }
    None
}

fn json_failure(e: &serde_json::Error) -> ParseFailure {
    let (line, column) = if e.line() == 0 { (None, None) } else { (Some(e.line()), Some(e.column())) };
    failure(&e.to_string(), line, column)
}

/// Marker the visitor puts in front of duplicate-key messages so the code survives the parser's error type.
const DUPLICATE_MARK: &str = "duplicate key ";
const POINTER_MARK: &str = " in object at ";

fn failure(message: &str, line: Option<usize>, column: Option<usize>) -> ParseFailure {
    let (code, pointer) = match message.strip_prefix(DUPLICATE_MARK) {
        Some(rest) => {
            let at = rest.find(POINTER_MARK).map_or("", |i| &rest[i + POINTER_MARK.len()..]);
            // Keys are free text and may contain backticks, so the pointer is taken up to the last "`: ".
            let at = at.strip_prefix('`').and_then(|r| r.rfind("`: ").map(|end| &r[..end])).unwrap_or("");
            (Code::DuplicateKey, at.to_string())
        }
        None => (Code::ParseError, String::new()),
    };
    let message = match (line, message.contains(" line ")) {
        (Some(l), false) => format!("{message} (line {l}, column {})", column.unwrap_or(0)),
        _ => message.to_string(),
    };
    ParseFailure { code, message, line, column, pointer }
}

/// A `Value` visitor that refuses duplicate keys and non-finite numbers, tracking the pointer for messages.
struct Strict {
    path: Vec<String>,
}

impl Strict {
    fn child(&self, token: String) -> Strict {
        let mut path = self.path.clone();
        path.push(token);
        Strict { path }
    }

    fn pointer(&self) -> String {
        pointer::join("", &self.path)
    }
}

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("non-finite number {v} at `{}`", self.pointer())))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child(items.len().to_string()))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "{DUPLICATE_MARK}`{key}`{POINTER_MARK}`{}`: an object may not repeat a key",
                    self.pointer()
                )));
            }
            let value = map.next_value_seed(self.child(key.clone()))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_json_key_is_refused_with_its_object_pointer() {
        let text = r#"{"steps":[{"id":"a","action":"noop","id":"b"}]}"#;
        let err = parse(text, Format::Json).expect_err("a repeated key must not be merged");
        assert_eq!(err.code, Code::DuplicateKey);
        assert_eq!(err.pointer, "/steps/0");
        assert!(err.message.contains("`id`"), "{}", err.message);
        assert_eq!(err.line, Some(1));
    }

    #[test]
    fn duplicate_yaml_key_is_refused() {
        let err = parse("steps:\n  - id: a\n    id: b\n    action: noop\n", Format::Yaml)
            .expect_err("a repeated key must not be merged");
        assert!(matches!(err.code, Code::DuplicateKey | Code::ParseError), "{err:?}");
        assert!(err.message.contains("id"), "{}", err.message);
    }

    #[test]
    fn malformed_json_reports_line_and_column() {
        let err = parse("{\n  \"steps\": [\n    {\"id\": }\n]}", Format::Json).expect_err("malformed");
        assert_eq!(err.code, Code::ParseError);
        assert_eq!(err.line, Some(3));
        assert!(err.column.is_some());
    }

    #[test]
    fn trailing_content_after_the_document_is_refused() {
        assert!(parse(r#"{"steps":[]} {"x":1}"#, Format::Json).is_err());
    }

    #[test]
    fn yaml_nan_is_refused_instead_of_becoming_null() {
        let err = parse("a: .nan\n", Format::Yaml).expect_err("NaN has no JSON form");
        assert!(err.message.contains("non-finite"), "{}", err.message);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(&text, Format::Json).is_err());
    }

    #[test]
    fn deep_yaml_flow_nesting_is_refused_before_the_parser_reads_it() {
        let objects = "{\"a\": ".repeat(20_000) + "1" + &"}".repeat(20_000);
        let err = parse(&objects, Format::Yaml).expect_err("too deep");
        assert!(err.message.contains("deeper than 128"), "{}", err.message);
        assert_eq!((err.line, err.column), (Some(1), Some(129 * 6 - 5)));
        let quoted =
            format!("a: '{}'\nb: \"{}\" # {}\nc: don't [1]", "[".repeat(500), "{".repeat(500), "[".repeat(500));
        assert!(parse(&quoted, Format::Yaml).is_ok(), "brackets in quoted scalars and comments do not count");
    }

    #[test]
    fn lone_surrogate_escape_is_a_parse_error() {
        let err = parse(r#"{"a":"\ud800"}"#, Format::Json).expect_err("lone surrogate");
        assert_eq!(err.code, Code::ParseError);
    }

    #[test]
    fn unicode_survives_unchanged() {
        let v = parse(r#"{"t":"明天有雨 🌧️，记得带伞","nfd":"e\u0301"}"#, Format::Json).expect("valid");
        assert_eq!(v["t"], "明天有雨 🌧️，记得带伞");
        assert_eq!(v["nfd"], "e\u{301}");
    }

    #[test]
    fn format_is_detected_from_name_then_content() {
        assert_eq!(Format::detect(Some("p.YAML"), "{}"), Format::Yaml);
        assert_eq!(Format::detect(None, "  {\"steps\":[]}"), Format::Json);
        assert_eq!(Format::detect(None, "steps: []"), Format::Yaml);
    }
}
