//! Parsing: string leaves into [`Template`]s and `$ref` strings into [`Reference`]s (grammar: module docs).
//!
//! Every char the grammar cares about is ASCII, so the scanner works on bytes and only ever slices the string at
//! ASCII positions: text between placeholders is copied byte for byte, whatever Unicode it holds (C26).

use std::ops::Range;

use super::{Piece, Reference, Root, Segment, SyntaxError, Template};

/// One scanned part of a string: unescaped text, or a reference with the byte span it was written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawPiece {
    /// Literal text after unescaping `$$`; never empty, never adjacent to another `Text`.
    Text(String),
    /// A placeholder and where it sits in the string (`$` through its last char).
    Ref { reference: Reference, span: Range<usize> },
}

/// Parses one JSON string leaf of `args` into its canonical [`Template`].
///
/// Errors: a malformed `${…}` (unclosed, empty, bad segment, stray char) or a malformed `[…]` segment of a bare
/// placeholder, with the byte offset in `s`. Strings without a valid placeholder start (`"$5"`, `"US$"`) are
/// never errors.
pub fn parse_template(s: &str) -> Result<Template, SyntaxError> {
    let pieces = scan(s)?
        .into_iter()
        .map(|p| match p {
            RawPiece::Text(t) => Piece::Text(t),
            RawPiece::Ref { reference, .. } => Piece::Ref(reference),
        })
        .collect();
    Ok(Template::from_pieces(pieces))
}

/// Parses the `$ref` string of the object form: root and path with no surrounding text, e.g.
/// `weather.output.precipitation_probability` or `$input.city` (one leading `$` is allowed).
///
/// Path rules are those of `${…}`; anything left over after the path is an error.
pub fn parse_reference(s: &str) -> Result<Reference, SyntaxError> {
    let start = usize::from(s.starts_with('$'));
    let b = s.as_bytes();
    match b.get(start) {
        None => {
            return Err(error(start, "empty reference: expected a step id or `input`"));
        }
        Some(&c) if !is_ident_start(c) => {
            return Err(error(
                start,
                format!("expected a step id or `input` (starting with a letter or `_`), found {}", describe(s, start)),
            ));
        }
        Some(_) => {}
    }
    let (reference, end) = reference(s, start, Mode::Strict)?;
    if end < s.len() {
        return Err(error(end, format!("unexpected {} after the reference", describe(s, end))));
    }
    Ok(reference)
}

/// Splits a string into text and placeholders (see the module docs for the rules).
pub(crate) fn scan(s: &str) -> Result<Vec<RawPiece>, SyntaxError> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut text = String::new();
    // Start of the literal run not yet copied into `text`.
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        let (reference, end) = match b.get(i + 1) {
            Some(b'$') => {
                text.push_str(&s[copied..=i]);
                i += 2;
                copied = i;
                continue;
            }
            Some(b'{') => delimited(s, i)?,
            Some(&c) if is_ident_start(c) => reference(s, i + 1, Mode::Bare)?,
            // `$` before a digit, a space, punctuation or the end is a literal `$`.
            _ => {
                i += 1;
                continue;
            }
        };
        text.push_str(&s[copied..i]);
        if !text.is_empty() {
            out.push(RawPiece::Text(std::mem::take(&mut text)));
        }
        out.push(RawPiece::Ref { reference, span: i..end });
        i = end;
        copied = end;
    }
    text.push_str(&s[copied..]);
    if !text.is_empty() {
        out.push(RawPiece::Text(text));
    }
    Ok(out)
}

/// How strictly a path is read: a bare placeholder may end at a `.` that does not start a field; inside `${…}`
/// and in a `$ref` string it may not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bare,
    Strict,
}

/// Parses `${…}` whose `$` is at `dollar`; returns the reference and the offset just past `}`.
fn delimited(s: &str, dollar: usize) -> Result<(Reference, usize), SyntaxError> {
    let b = s.as_bytes();
    let start = dollar + 2;
    match b.get(start) {
        None => return Err(unclosed(dollar)),
        Some(b'}') => return Err(error(dollar, "empty placeholder `${}`")),
        Some(&c) if !is_ident_start(c) => {
            return Err(error(
                start,
                format!(
                    "expected a step id or `input` after `${{` (starting with a letter or `_`), found {}",
                    describe(s, start)
                ),
            ));
        }
        Some(_) => {}
    }
    let (reference, end) = reference(s, start, Mode::Strict)?;
    match b.get(end) {
        None => Err(unclosed(dollar)),
        Some(b'}') => Ok((reference, end + 1)),
        Some(_) => Err(error(end, format!("expected `.`, `[` or `}}` inside `${{…}}`, found {}", describe(s, end)))),
    }
}

/// Parses a root identifier starting at `start` (already known to be an identifier start) and its segments;
/// returns the normalised reference and the offset just past it.
fn reference(s: &str, start: usize, mode: Mode) -> Result<(Reference, usize), SyntaxError> {
    let b = s.as_bytes();
    let mut pos = start;
    while b.get(pos).is_some_and(|&c| is_name_char(c)) {
        pos += 1;
    }
    let root = &s[start..pos];
    let mut path = Vec::new();
    loop {
        match b.get(pos) {
            Some(b'.') => {
                let field_start = pos + 1;
                let mut end = field_start;
                while b.get(end).is_some_and(|&c| is_name_char(c)) {
                    end += 1;
                }
                if end == field_start {
                    if mode == Mode::Bare {
                        break;
                    }
                    return Err(error(
                        field_start,
                        format!("expected a field name ([A-Za-z0-9_-]) after `.`, found {}", describe(s, field_start)),
                    ));
                }
                path.push(Segment::Field(s[field_start..end].to_owned()));
                pos = end;
            }
            Some(b'[') => {
                let (segment, end) = bracket(s, pos)?;
                path.push(segment);
                pos = end;
            }
            _ => break,
        }
    }
    Ok((normalise(root, path), pos))
}

/// Applies the root rules: `input` is the run input; for a step, a leading `.output` names the output itself.
fn normalise(root: &str, mut path: Vec<Segment>) -> Reference {
    if root == "input" {
        return Reference { root: Root::Input, path };
    }
    if matches!(path.first(), Some(Segment::Field(f)) if f == "output") {
        path.remove(0);
    }
    Reference { root: Root::Step(root.to_owned()), path }
}

/// Parses `[123]` or `["key"]` with `[` at `open`; returns the segment and the offset just past `]`.
fn bracket(s: &str, open: usize) -> Result<(Segment, usize), SyntaxError> {
    let b = s.as_bytes();
    let first = open + 1;
    let (segment, close) = match b.get(first) {
        Some(c) if c.is_ascii_digit() => {
            let mut end = first;
            while b.get(end).is_some_and(u8::is_ascii_digit) {
                end += 1;
            }
            let index = s[first..end]
                .parse::<usize>()
                .map_err(|_| error(first, format!("index {} is too large", &s[first..end])))?;
            (Segment::Index(index), end)
        }
        Some(b'"') => {
            let (key, end) = quoted(s, first)?;
            (Segment::Field(key), end)
        }
        _ => {
            return Err(error(
                first,
                format!(
                    "expected an index such as [0] or a quoted key such as [\"a b\"] after `[`, found {}",
                    describe(s, first)
                ),
            ));
        }
    };
    match b.get(close) {
        Some(b']') => Ok((segment, close + 1)),
        _ => Err(error(
            close,
            format!("expected `]` to close the segment opened at byte {open}, found {}", describe(s, close)),
        )),
    }
}

/// Reads a double-quoted key with `"` at `quote`; `\"` and `\\` are the only escapes. Returns the key and the
/// offset just past the closing quote.
fn quoted(s: &str, quote: usize) -> Result<(String, usize), SyntaxError> {
    let b = s.as_bytes();
    let mut key = String::new();
    let mut run = quote + 1;
    let mut i = run;
    loop {
        match b.get(i) {
            None => {
                return Err(error(quote, "unterminated quoted key: expected a closing `\"`"));
            }
            Some(b'"') => {
                key.push_str(&s[run..i]);
                return Ok((key, i + 1));
            }
            Some(b'\\') => match b.get(i + 1) {
                Some(&c @ (b'"' | b'\\')) => {
                    key.push_str(&s[run..i]);
                    key.push(char::from(c));
                    i += 2;
                    run = i;
                }
                _ => {
                    return Err(error(
                        i,
                        format!(
                            "unsupported escape `\\` followed by {} in a quoted key (only `\\\"` and `\\\\`)",
                            describe(s, i + 1)
                        ),
                    ));
                }
            },
            Some(_) => i += 1,
        }
    }
}

/// `[A-Za-z_]`: may start a root.
fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

/// `[A-Za-z0-9_-]`: may continue a root or make up a `.field`.
pub(crate) fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// The char at `pos` for a message, or "the end of the string".
fn describe(s: &str, pos: usize) -> String {
    match s.get(pos..).and_then(|rest| rest.chars().next()) {
        Some(c) => format!("{c:?}"),
        None => "the end of the string".to_owned(),
    }
}

fn unclosed(dollar: usize) -> SyntaxError {
    error(dollar, "unclosed `${`: expected `}`")
}

fn error(offset: usize, message: impl Into<String>) -> SyntaxError {
    SyntaxError { offset, message: message.into() }
}
