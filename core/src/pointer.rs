//! JSON pointers (RFC 6901) into the submitted plan document, e.g. `/steps/3/depends_on/0`.

use std::fmt::Write;

/// Escapes one reference token per RFC 6901 §3: `~` becomes `~0` and `/` becomes `~1`.
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Builds a pointer from a base pointer and further tokens, escaping each token.
///
/// `join("/steps/3", &["args", "a/b"])` is `/steps/3/args/a~1b`.
pub fn join<T: AsRef<str>>(base: &str, tokens: &[T]) -> String {
    let mut out = String::from(base);
    for token in tokens {
        // Writing to a String cannot fail.
        let _ = write!(out, "/{}", escape_token(token.as_ref()));
    }
    out
}

/// Pointer to step `index`, e.g. `/steps/3`.
pub fn step(index: usize) -> String {
    format!("/steps/{index}")
}

/// Pointer to field `field` of step `index`, e.g. `/steps/3/timeout_ms`.
pub fn step_field(index: usize, field: &str) -> String {
    format!("/steps/{index}/{}", escape_token(field))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_escaped_per_rfc_6901() {
        assert_eq!(join("/steps/0/args", &["a/b", "m~n"]), "/steps/0/args/a~1b/m~0n");
    }
}
