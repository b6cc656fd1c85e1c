//! Placeholders: the `$step.output.path` grammar in step `args`: parsing, rendering and run-time resolution.
//!
//! The rules below are contract §3 (`docs/architecture.md`) made precise; cases C04, C06, C09 and C26
//! (`cases/cases.md`) are the failures they guard against. Only JSON **string values** are scanned, recursively
//! through arrays and objects; object **keys** are never substituted.
//!
//! # Grammar (inside one JSON string)
//!
//! | Text | Meaning |
//! |------|---------|
//! | `$$` | a literal `$` (C06) |
//! | `$` + `[A-Za-z_]` | a **bare** placeholder: root, then path segments, ending at the first char that cannot continue it |
//! | `${` … `}` | a **delimited** placeholder: the same root + path, no spaces, must be closed by `}` |
//! | `$` + anything else | a literal `$`: `"$5.00"`, `"US$"`, `"$"`, `"price $ 3"` are plain text (C06) |
//!
//! - **Root**: `[A-Za-z_][A-Za-z0-9_-]*`. `input` is the run input; any other root is a step id.
//! - **Segments**: `.field` with field `[A-Za-z0-9_-]+`; `[123]` (non-negative integer index); `["odd key"]`
//!   (double-quoted, with `\"` and `\\` as the only escapes).
//! - In a bare placeholder a `.` that is not followed by a field char ends the placeholder and stays text
//!   (`"Rain: $w.p."` ends with a literal `.`). A `[` always starts a segment, so `$a[x]` is a syntax error
//!   rather than `$a` followed by the text `[x]`; write `${a}[x]` for that.
//! - Inside `${…}` every char must belong to the reference: `${}`, `${a.}`, `${a[x]}`, `${a b}`,
//!   `${a["unterminated}` and an unclosed `${a` are [`SyntaxError`]s with a byte offset into the string.
//! - **Output shorthand**: for a step root the first segment `.output` names the output itself, so `$w`,
//!   `$w.output` are the output, and `$w.a`, `$w.output.a` are its field `a` (`$w[0]` is `$w.output[0]`). The
//!   parser normalises to [`Reference`] `{ root, path }` with `path` relative to the output (or to the input).
//!   A field actually named `output` is `$w.output.output`.
//!
//! # Substitution
//!
//! - **Whole value**: a string that is exactly one placeholder (bare or `${…}`) is replaced by the resolved JSON
//!   value with its type kept: a number stays a number, `null` stays `null`, an object stays an object.
//! - **Interpolation**: otherwise each placeholder is replaced by text: strings unquoted, other JSON compact.
//! - **Object form**: an object whose keys are exactly `{"$ref"}` or `{"$ref", "default"}`, e.g.
//!   `{"$ref": "weather.output.precipitation_probability", "default": 0}` (a leading `$` is accepted). It is a
//!   whole value; when resolution fails with a missing key, an index out of range, or a skipped or failed
//!   producer, `default` (used verbatim, never scanned) replaces it. An object with `$ref` and any other key is
//!   an ordinary object.
//! - A missing path is **never** `null` or `""` (C04): it is a [`ResolveError`]. A present `null` stays `null`.
//! - Text outside placeholders is copied byte for byte; nothing is Unicode-normalised (C26).

mod parse;
#[cfg(test)]
mod parse_tests;
mod render;
mod resolve;
#[cfg(test)]
mod tests;

use serde::Serialize;
use serde_json::Value;

pub use parse::{parse_reference, parse_template};
pub use render::render_template;
pub use resolve::{FAILURE_CODE, Producer, ResolveError, ResolveErrorKind, Scope, resolve_args, resolve_reference};

/// What a placeholder starts from: the run input (`$input…`) or a step's output (`$<step_id>…`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Root {
    /// `$input`: the run's input document.
    Input,
    /// `$<step_id>`: the output of the step with this id.
    Step(String),
}

/// One step of a path below the root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// `.field` or `["odd key"]`: a key of an object.
    Field(String),
    /// `[n]`: an element of an array.
    Index(usize),
}

/// A parsed placeholder: a root and a path relative to the step's output (or to the input).
///
/// `$w`, `$w.output` → `{ Step("w"), [] }`; `$w.a`, `$w.output.a` → `{ Step("w"), [Field("a")] }`;
/// `$input.city` → `{ Input, [Field("city")] }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// Where the path starts.
    pub root: Root,
    /// Keys and indices below the root (the `.output` of a step root is not part of it).
    pub path: Vec<Segment>,
}

impl Reference {
    /// The step this reference reads from, or `None` for `$input…`.
    pub fn step_id(&self) -> Option<&str> {
        match &self.root {
            Root::Input => None,
            Root::Step(id) => Some(id),
        }
    }
}

impl std::fmt::Display for Reference {
    /// Canonical text, as [`Reference::render`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// A malformed placeholder in one string (or `$ref` string): where and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("placeholder syntax error at byte {offset}: {message}")]
pub struct SyntaxError {
    /// Byte offset into the string where the problem was found (the `$` of an unclosed `${`).
    pub offset: usize,
    /// What is wrong, e.g. ``expected a field name after `.` ``.
    pub message: String,
}

/// A parsed string leaf.
///
/// Always canonical (as built by [`Template::from_pieces`]): `Literal` has no placeholders, `Whole` is a string
/// that is exactly one placeholder, `Pieces` has at least one reference and is not a lone reference, with no
/// empty or adjacent text pieces. Text is unescaped (`$$` already turned into `$`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Template {
    /// No placeholders; the string after unescaping.
    Literal(String),
    /// The whole string is one placeholder: substituted with its JSON type kept.
    Whole(Reference),
    /// Text and placeholders: interpolated as text.
    Pieces(Vec<Piece>),
}

/// One part of an interpolated [`Template::Pieces`] string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text (unescaped).
    Text(String),
    /// A placeholder, replaced by its value's text form.
    Ref(Reference),
}

impl Template {
    /// Builds the canonical template for a sequence of pieces: drops empty text, merges adjacent text, and
    /// classifies the result as `Literal` (no references), `Whole` (exactly one reference and nothing else) or
    /// `Pieces`.
    pub fn from_pieces(pieces: Vec<Piece>) -> Template {
        let mut merged: Vec<Piece> = Vec::with_capacity(pieces.len());
        for piece in pieces {
            match (piece, merged.last_mut()) {
                (Piece::Text(t), _) if t.is_empty() => {}
                (Piece::Text(t), Some(Piece::Text(last))) => last.push_str(&t),
                (piece, _) => merged.push(piece),
            }
        }
        if !merged.iter().any(|p| matches!(p, Piece::Ref(_))) {
            let text = merged
                .into_iter()
                .map(|p| match p {
                    Piece::Text(t) => t,
                    Piece::Ref(_) => String::new(),
                })
                .collect();
            return Template::Literal(text);
        }
        if merged.len() == 1
            && let Some(Piece::Ref(r)) = merged.pop()
        {
            return Template::Whole(r);
        }
        Template::Pieces(merged)
    }

    /// The references in this template, in order of appearance.
    pub fn references(&self) -> Vec<&Reference> {
        match self {
            Template::Literal(_) => Vec::new(),
            Template::Whole(r) => vec![r],
            Template::Pieces(pieces) => pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Ref(r) => Some(r),
                    Piece::Text(_) => None,
                })
                .collect(),
        }
    }
}

/// One placeholder found in a step's `args`, for static validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// RFC 6901 pointer to the string leaf (or `$ref` object) relative to `args`, e.g. `/body/f`.
    pub pointer: String,
    /// This placeholder as written, e.g. `$weather.output.city` or `${w.a}`; for a syntax error, the whole leaf
    /// (or the `$ref` string, compact JSON if it is not a string). Never the whole leaf for each placeholder of
    /// it: a string of n placeholders costs O(n), not O(n²) (a copy per placeholder made 8,000 placeholders in
    /// 80 KB take 635 MB).
    pub placeholder: String,
    /// Whether the object form supplies a `default` (then a skipped producer or a missing path is not fatal).
    pub has_default: bool,
    /// The parsed reference, or why the leaf could not be parsed.
    pub result: Result<Reference, SyntaxError>,
}

/// Every placeholder in an `args` value, in document order: one entry per placeholder (a leaf with three
/// placeholders gives three), one `Err` entry per malformed leaf, nothing for leaves without placeholders.
pub fn references(args: &Value) -> Vec<Found> {
    let mut found = Vec::new();
    collect(args, &mut String::new(), &mut found);
    found
}

fn collect(value: &Value, pointer: &mut String, found: &mut Vec<Found>) {
    match value {
        Value::String(s) => match parse::scan(s) {
            Ok(pieces) => found.extend(pieces.into_iter().filter_map(|p| match p {
                parse::RawPiece::Ref { reference, span } => Some(Found {
                    pointer: pointer.clone(),
                    placeholder: s.get(span).unwrap_or_default().to_owned(),
                    has_default: false,
                    result: Ok(reference),
                }),
                parse::RawPiece::Text(_) => None,
            })),
            Err(e) => found.push(Found {
                pointer: pointer.clone(),
                placeholder: s.clone(),
                has_default: false,
                result: Err(e),
            }),
        },
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                collect(item, pointer, found);
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            if let Some(form) = RefObject::of(map) {
                found.push(Found {
                    pointer: pointer.clone(),
                    placeholder: form.text(),
                    has_default: form.default.is_some(),
                    result: form.parse(),
                });
                return;
            }
            for (key, item) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&crate::pointer::escape_token(key));
                collect(item, pointer, found);
                pointer.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The `{"$ref": …, "default": …}` object form, recognised only when those are its only keys.
pub(crate) struct RefObject<'a> {
    pub(crate) target: &'a Value,
    pub(crate) default: Option<&'a Value>,
}

impl<'a> RefObject<'a> {
    pub(crate) fn of(map: &'a serde_json::Map<String, Value>) -> Option<Self> {
        let target = map.get("$ref")?;
        let only_known = map.keys().all(|k| k == "$ref" || k == "default");
        only_known.then(|| RefObject { target, default: map.get("default") })
    }

    /// The `$ref` string as written (compact JSON when it is not a string).
    pub(crate) fn text(&self) -> String {
        match self.target {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    pub(crate) fn parse(&self) -> Result<Reference, SyntaxError> {
        match self.target {
            Value::String(s) => parse_reference(s),
            _ => Err(SyntaxError {
                offset: 0,
                message: "`$ref` must be a string such as \"weather.output.city\"".to_owned(),
            }),
        }
    }
}
