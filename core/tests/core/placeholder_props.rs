//! Property tests for the placeholder grammar (contract §3; C06 escaping, C26 Unicode): rendering a template and
//! parsing it back gives the same template, and no input string makes the parser panic.

use cairn_core::placeholder::{
    Piece, Reference, Root, Segment, Template, parse_reference, parse_template, references, render_template,
};
use proptest::prelude::*;
use serde_json::json;

/// Step ids and `input`, per the root grammar `[A-Za-z_][A-Za-z0-9_-]*`.
fn root() -> impl Strategy<Value = Root> {
    prop_oneof![
        1 => Just(Root::Input),
        4 => "[A-Za-z_][A-Za-z0-9_-]{0,8}"
            .prop_filter("`input` is the input root", |id| id != "input")
            .prop_map(Root::Step),
    ]
}

/// Plain fields, odd keys (quotes, backslashes, brackets, `$`, spaces, Unicode, empty) and indices.
fn segment() -> impl Strategy<Value = Segment> {
    prop_oneof![
        "[A-Za-z0-9_-]{1,6}".prop_map(Segment::Field),
        r#"[a-z "\\\]\[}{$.🌧雨é\u{301}]{0,6}"#.prop_map(Segment::Field),
        any::<usize>().prop_map(Segment::Index),
    ]
}

fn reference() -> impl Strategy<Value = Reference> {
    (root(), prop::collection::vec(segment(), 0..5)).prop_map(|(root, path)| Reference { root, path })
}

/// Text that is hard to escape: `$`, `{`, `}`, `.`, `[`, identifier chars, spaces and multi-byte Unicode.
fn text() -> impl Strategy<Value = String> {
    r#"[$${}.\[\]"\\a-z0-9_ 😀雨\u{200d}\u{fe0f}\u{301}مطر]{0,12}"#
}

fn template() -> impl Strategy<Value = Template> {
    let piece = prop_oneof![text().prop_map(Piece::Text), reference().prop_map(Piece::Ref)];
    prop::collection::vec(piece, 0..6).prop_map(Template::from_pieces)
}

proptest! {
    #[test]
    fn rendering_a_template_and_parsing_it_back_gives_the_same_template(t in template()) {
        let rendered = render_template(&t);
        prop_assert_eq!(parse_template(&rendered), Ok(t));
    }

    #[test]
    fn a_rendered_reference_parses_back_as_a_whole_placeholder_and_as_a_ref_string(r in reference()) {
        let text = r.render();
        prop_assert_eq!(parse_template(&text), Ok(Template::Whole(r.clone())));
        prop_assert_eq!(parse_reference(&text), Ok(r.clone()));
        prop_assert_eq!(parse_reference(&text[1..]), Ok(r));
    }

    #[test]
    fn parsing_never_panics_and_errors_point_inside_the_string(s in "\\PC*") {
        if let Err(e) = parse_template(&s) {
            prop_assert!(e.offset <= s.len());
        }
        if let Err(e) = parse_reference(&s) {
            prop_assert!(e.offset <= s.len());
        }
        let _ = references(&json!({ "k": s }));
    }

    #[test]
    fn strings_without_a_dollar_are_literal_and_byte_identical(s in "[^$]*") {
        prop_assert_eq!(parse_template(&s), Ok(Template::Literal(s.clone())));
    }

    #[test]
    fn text_with_escaped_dollars_parses_to_the_original_text(s in "\\PC*") {
        let escaped = s.replace('$', "$$");
        prop_assert_eq!(parse_template(&escaped), Ok(Template::Literal(s)));
    }
}
