//! Rendering: [`Reference`]s and [`Template`]s back to placeholder text, the inverse of [`super::parse`].

use super::{Piece, Reference, Root, Segment, Template};

impl Reference {
    /// Canonical placeholder text: `$input…` or `$<step>.output…`, fields as `.field` when they match
    /// `[A-Za-z0-9_-]+` and as `["…"]` (escaping `"` and `\`) otherwise, indices as `[n]`.
    ///
    /// Examples: `$w.output.a["b c"][0]`, `$input.x`, `$w.output`. Parsing the result gives `self` back when the
    /// root is a valid identifier (`[A-Za-z_][A-Za-z0-9_-]*`) and a step root is not literally `input`.
    pub fn render(&self) -> String {
        let mut out = String::from("$");
        self.push_body(&mut out);
        out
    }

    /// The text after `$`: root, `.output` for a step, then the segments.
    fn push_body(&self, out: &mut String) {
        match &self.root {
            Root::Input => out.push_str("input"),
            Root::Step(id) => {
                out.push_str(id);
                out.push_str(".output");
            }
        }
        for segment in &self.path {
            push_segment(out, segment);
        }
    }
}

/// Renders a template as a string leaf that parses back to it: `parse_template(&render_template(t)) == Ok(t)`
/// for every canonical template (see [`Template`]) whose references render faithfully (see
/// [`Reference::render`]).
///
/// `$` in text becomes `$$`; a `Whole` reference is written bare (`$w.output.a`); references among text use the
/// delimited form (`${w.output.a}`) so the next char of text cannot extend them.
pub fn render_template(template: &Template) -> String {
    match template {
        Template::Literal(text) => escape_text(text),
        Template::Whole(reference) => reference.render(),
        Template::Pieces(pieces) => {
            let mut out = String::new();
            for piece in pieces {
                match piece {
                    Piece::Text(text) => out.push_str(&escape_text(text)),
                    Piece::Ref(reference) => {
                        out.push_str("${");
                        reference.push_body(&mut out);
                        out.push('}');
                    }
                }
            }
            out
        }
    }
}

/// Appends one segment in canonical form.
pub(crate) fn push_segment(out: &mut String, segment: &Segment) {
    match segment {
        Segment::Index(i) => {
            out.push('[');
            out.push_str(&i.to_string());
            out.push(']');
        }
        Segment::Field(f) if !f.is_empty() && f.bytes().all(super::parse::is_name_char) => {
            out.push('.');
            out.push_str(f);
        }
        Segment::Field(f) => {
            out.push_str("[\"");
            for c in f.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push_str("\"]");
        }
    }
}

/// Escapes literal text so it cannot be read as a placeholder: every `$` becomes `$$`.
fn escape_text(text: &str) -> String {
    text.replace('$', "$$")
}

#[cfg(test)]
mod tests {
    use super::super::parse_template;
    use super::*;

    #[test]
    fn references_render_in_canonical_form() {
        let r = Reference {
            root: Root::Step("w".into()),
            path: vec![
                Segment::Field("a".into()),
                Segment::Field("b c".into()),
                Segment::Index(0),
                Segment::Field("q\"\\".into()),
                Segment::Field(String::new()),
            ],
        };
        assert_eq!(r.render(), r#"$w.output.a["b c"][0]["q\"\\"][""]"#);
        let input = Reference { root: Root::Input, path: vec![Segment::Field("x".into())] };
        assert_eq!(input.render(), "$input.x");
        assert_eq!(input.to_string(), "$input.x");
    }

    #[test]
    fn templates_render_back_to_text_that_parses_to_the_same_template() {
        for s in [
            "plain $$ text",
            "$w.a",
            "Rain ${w.p}% in $input.city.",
            r#"${w["x y"][3]}$$"#,
            "天气：$weather.output.city ✅",
        ] {
            let t = parse_template(s).expect("valid");
            assert_eq!(parse_template(&render_template(&t)), Ok(t), "{s}");
        }
    }

    #[test]
    fn literal_dollars_are_doubled_and_interpolated_references_are_delimited() {
        assert_eq!(render_template(&Template::Literal("US$".into())), "US$$");
        let t = parse_template("a $w.b c").expect("valid");
        assert_eq!(render_template(&t), "a ${w.output.b} c");
    }
}
