//! Grammar tests for [`super::parse_template`] and [`super::parse_reference`] (module docs; C06 literals).

use super::*;

fn field(f: &str) -> Segment {
    Segment::Field(f.to_owned())
}

fn step(id: &str, path: Vec<Segment>) -> Reference {
    Reference { root: Root::Step(id.to_owned()), path }
}

fn err_at(s: &str) -> usize {
    match parse_template(s) {
        Err(e) => e.offset,
        Ok(t) => panic!("{s:?} parsed as {t:?}"),
    }
}

#[test]
fn step_root_output_and_shorthand_all_normalise_to_the_same_reference() {
    let a = Template::Whole(step("w", vec![field("a")]));
    assert_eq!(parse_template("$w.a"), Ok(a.clone()));
    assert_eq!(parse_template("$w.output.a"), Ok(a.clone()));
    assert_eq!(parse_template("${w.output.a}"), Ok(a));
    assert_eq!(parse_template("$w"), Ok(Template::Whole(step("w", vec![]))));
    assert_eq!(parse_template("$w.output"), Ok(Template::Whole(step("w", vec![]))));
    assert_eq!(parse_template("$w[0]"), parse_template("$w.output[0]"));
    assert_eq!(parse_template("$w.output.output"), Ok(Template::Whole(step("w", vec![field("output")]))));
}

#[test]
fn input_root_keeps_every_segment() {
    let r = parse_reference("$input.output.city").expect("valid");
    assert_eq!(r.root, Root::Input);
    assert_eq!(r.path, vec![field("output"), field("city")]);
}

#[test]
fn odd_keys_and_indices_are_segments() {
    let t = parse_template(r#"$w.a["b c"][12]["q\"\\"].d-e"#).expect("valid");
    let path = vec![field("a"), field("b c"), Segment::Index(12), field("q\"\\"), field("d-e")];
    assert_eq!(t, Template::Whole(step("w", path)));
}

#[test]
fn a_bare_placeholder_ends_at_a_dot_without_a_field_or_at_any_other_char() {
    let t = parse_template("Rain: $w.p. Bye").expect("valid");
    let want = vec![Piece::Text("Rain: ".into()), Piece::Ref(step("w", vec![field("p")])), Piece::Text(". Bye".into())];
    assert_eq!(t, Template::Pieces(want));
    assert_eq!(parse_template("$w!").expect("valid").references().len(), 1);
}

#[test]
fn dollar_before_non_identifier_is_literal_and_double_dollar_escapes() {
    for s in ["$5.00", "US$", "$", "price $ 3", "a $- b", "$.x", "$[0]", "$}"] {
        assert_eq!(parse_template(s), Ok(Template::Literal(s.to_owned())), "{s}");
    }
    assert_eq!(parse_template("$$w.a"), Ok(Template::Literal("$w.a".into())));
    assert_eq!(parse_template("$$$$"), Ok(Template::Literal("$$".into())));
}

#[test]
fn malformed_delimited_placeholders_are_errors_with_offsets() {
    assert_eq!(err_at("ab${"), 2);
    assert_eq!(err_at("x ${w.a"), 2);
    assert_eq!(err_at("${}"), 0);
    assert_eq!(err_at("${w.}"), 4);
    assert_eq!(err_at("${w[x]}"), 4);
    assert_eq!(err_at(r#"${w["unterminated}"#), 4);
    assert_eq!(err_at("${w a}"), 3);
    assert_eq!(err_at("${5}"), 2);
    assert_eq!(err_at("${$a}"), 2);
    assert_eq!(err_at("${w[1}"), 5);
    assert_eq!(err_at(r#"${w["a\n"]}"#), 6);
    assert_eq!(err_at("$w[99999999999999999999999999]"), 3);
}

#[test]
fn a_bracket_after_a_bare_placeholder_must_be_a_valid_segment() {
    assert_eq!(err_at("$a[x]"), 3);
    assert_eq!(err_at("see $a[-1]"), 7);
    assert!(parse_template("${a}[x]").is_ok());
}

#[test]
fn ref_strings_accept_an_optional_dollar_and_reject_leftovers() {
    let want = step("weather", vec![field("p")]);
    assert_eq!(parse_reference("weather.output.p"), Ok(want.clone()));
    assert_eq!(parse_reference("$weather.p"), Ok(want));
    assert_eq!(parse_reference("").map_err(|e| e.offset), Err(0));
    assert_eq!(parse_reference("w.a b").map_err(|e| e.offset), Err(3));
    assert_eq!(parse_reference("w.").map_err(|e| e.offset), Err(2));
    assert_eq!(parse_reference("9w").map_err(|e| e.offset), Err(0));
}

#[test]
fn error_messages_name_the_problem() {
    let e = parse_template("${w.a").expect_err("unclosed");
    assert!(e.to_string().contains("unclosed `${`"), "{e}");
    let e = parse_template("${w[x]}").expect_err("bad index");
    assert!(e.message.contains("found 'x'"), "{e}");
}
