//! Bounds on CEL expressions, checked on the text before it is parsed.
//!
//! The `cel` crate parses, compiles and evaluates recursively: every operator of a chain (`1 + 1 + …`), every
//! selector (`.x.x.x…`), index (`[0][0]…`) and bracket adds frames to the thread's stack. A 40 KB `when` of
//! `1 +` terms overflowed a 2 MiB tokio worker stack and aborted the orchestrator. So before any expression
//! reaches the parser — a `when`, a `condition.eval` expression, an `event.wait` filter, at validation, in the
//! store or in a worker — [`check`] bounds the depth its syntax tree can have, in one linear pass that allocates
//! only one small frame per open bracket (itself bounded).
//!
//! The estimate is an upper bound of the tree's depth: within one bracket level, between commas, each operator
//! (binary, unary, `?`, `in`) can add at most one level above its deepest operand, an operand is as deep as its
//! selector chain (`a.b.c`) plus its deepest bracket, and each bracket adds [`BRACKET_COST`] (a call, an index or
//! a macro's comprehension is a few nodes deep). String literals are skipped. Measured with the `cel`
//! crate (optimised, as the workspace builds it even in the dev profile): a level costs about 1.6 KB of stack
//! for an operator and 8 KB for a bracket, so the bounds below stay under 0.7 MB, a third of a tokio worker's
//! stack.
//!
//! The bounds are fixed, not settings: they protect the process, and every place that compiles an expression
//! (orchestrator, store, workers) must agree on them without sharing configuration. How long an expression may
//! be is a plan limit instead (`Limits::max_expression_bytes`, checked by the validator).

/// Deepest syntax tree an expression may have, as estimated by [`check`].
pub const MAX_DEPTH: usize = 128;
/// Most brackets (`(`, `[`, `{`) open at once.
pub const MAX_NESTING: usize = 32;
/// Most comprehension macros (`all`, `exists`, `exists_one`, `map`, `filter`) nested in each other: evaluation
/// time grows as the product of the lists they range over.
pub const MAX_COMPREHENSION_NESTING: usize = 2;
/// Depth one bracket level adds to the estimate.
pub const BRACKET_COST: usize = 4;

/// The macros that expand into a loop over a list or map.
const COMPREHENSIONS: [&str; 5] = ["all", "exists", "exists_one", "map", "filter"];

/// Which bound an expression exceeds, with the limit and what was found (or reached when the scan stopped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    /// The estimated syntax tree is deeper than [`MAX_DEPTH`].
    #[error("the expression nests too deeply: depth {found} exceeds the limit of {limit}")]
    Depth {
        /// The limit.
        limit: usize,
        /// The estimated depth (at least; the scan stops at the first excess).
        found: usize,
    },
    /// More than [`MAX_NESTING`] brackets are open at once.
    #[error("the expression nests brackets too deeply: {found} open at once exceeds the limit of {limit}")]
    Nesting {
        /// The limit.
        limit: usize,
        /// Brackets open when the scan stopped.
        found: usize,
    },
    /// More than [`MAX_COMPREHENSION_NESTING`] comprehension macros are nested.
    #[error("the expression nests {found} comprehension macros (all, exists, map, …); the limit is {limit}")]
    Comprehensions {
        /// The limit.
        limit: usize,
        /// Comprehensions open when the scan stopped.
        found: usize,
    },
}

impl BoundError {
    /// The limit's stable name, as diagnostics report it (`max_expression_depth`, …).
    pub fn limit_name(&self) -> &'static str {
        match self {
            BoundError::Depth { .. } => "max_expression_depth",
            BoundError::Nesting { .. } => "max_expression_nesting",
            BoundError::Comprehensions { .. } => "max_comprehension_nesting",
        }
    }

    /// The limit and the value found.
    pub fn values(&self) -> (usize, usize) {
        match *self {
            BoundError::Depth { limit, found }
            | BoundError::Nesting { limit, found }
            | BoundError::Comprehensions { limit, found } => (limit, found),
        }
    }
}

/// One open bracket level of the scan, for the comma-separated part being read and the widest part so far.
#[derive(Debug, Default)]
struct Level {
    /// Operators of the part (binary, unary, `?`, `in`): each can add one level above its operands.
    operators: usize,
    /// Selectors (`.x`) of the operand being read.
    chain: usize,
    /// Longest selector chain of the part's operands.
    longest_chain: usize,
    /// Deepest bracketed operand of the part.
    child: usize,
    /// Deepest part of this level already closed by a comma.
    widest: usize,
    /// `?` of this level not yet matched by their `:`.
    open_conditionals: usize,
    /// Whether this level is the argument list of a comprehension macro.
    comprehension: bool,
    /// Whether the bracket follows an operand (`a[0]`, `f(x)`): then it lengthens that operand's chain.
    postfix: bool,
}

impl Level {
    /// An upper bound of the current part's depth: every operator above the deepest operand.
    fn part_depth(&self) -> usize {
        self.operators + self.longest_chain.max(self.chain) + self.child
    }

    fn operator(&mut self) {
        self.longest_chain = self.longest_chain.max(self.chain);
        self.chain = 0;
        self.operators += 1;
    }

    fn close_part(&mut self) {
        self.widest = self.widest.max(self.part_depth());
        *self = Level {
            widest: self.widest,
            open_conditionals: self.open_conditionals,
            comprehension: self.comprehension,
            postfix: self.postfix,
            ..Level::default()
        };
    }

    fn depth(&self) -> usize {
        self.widest.max(self.part_depth())
    }
}

/// Checks CEL text (placeholders already rewritten) against the bounds above, in one pass.
///
/// # Errors
/// The first bound exceeded. Unbalanced brackets and other syntax errors are left to the parser.
pub fn check(cel: &str) -> Result<(), BoundError> {
    let bytes = cel.as_bytes();
    let mut levels = vec![Level::default()];
    let mut comprehensions = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let mut len = 1;
        match b {
            b'\'' | b'"' => len = literal_len(cel, i),
            b'(' | b'[' | b'{' => {
                let comprehension = b == b'(' && is_comprehension_call(&cel[..i]);
                comprehensions += usize::from(comprehension);
                if comprehensions > MAX_COMPREHENSION_NESTING {
                    return Err(BoundError::Comprehensions { limit: MAX_COMPREHENSION_NESTING, found: comprehensions });
                }
                let postfix = cel[..i].trim_end().ends_with(|c: char| c.is_alphanumeric() || "_)]}'\"".contains(c));
                levels.push(Level { comprehension, postfix, ..Level::default() });
                if levels.len() - 1 > MAX_NESTING {
                    return Err(BoundError::Nesting { limit: MAX_NESTING, found: levels.len() - 1 });
                }
            }
            b')' | b']' | b'}' if levels.len() > 1 => {
                if let Some(closed) = levels.pop() {
                    comprehensions -= usize::from(closed.comprehension);
                    let depth = closed.depth() + BRACKET_COST;
                    if let Some(parent) = levels.last_mut() {
                        parent.child = parent.child.max(depth);
                        parent.chain += usize::from(closed.postfix);
                    }
                }
            }
            b',' | b':' => {
                // A `:` of `a ? b : c` continues the part (chains of conditionals nest); any other `:` separates
                // a map entry's key from its value, like a comma.
                if let Some(level) = levels.last_mut() {
                    if b == b':' && level.open_conditionals > 0 {
                        level.open_conditionals -= 1;
                    } else {
                        level.close_part();
                    }
                }
            }
            b'.' => {
                if let Some(level) = levels.last_mut() {
                    level.chain += 1;
                }
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'=' | b'!' | b'&' | b'|' | b'?' => {
                // Two-character operators (`==`, `<=`, `&&`, …) are one operator.
                if matches!(bytes.get(i + 1), Some(b'=' | b'&' | b'|')) {
                    len = 2;
                }
                if let Some(level) = levels.last_mut() {
                    level.operator();
                    level.open_conditionals += usize::from(b == b'?');
                }
            }
            c if c.is_ascii_alphanumeric() || c == b'_' => {
                len = bytes[i..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_').count();
                if &bytes[i..i + len] == b"in"
                    && let Some(level) = levels.last_mut()
                {
                    level.operator();
                }
            }
            _ => {}
        }
        let depth = levels.iter().map(Level::part_depth).sum::<usize>() + BRACKET_COST * (levels.len() - 1);
        if depth > MAX_DEPTH {
            return Err(BoundError::Depth { limit: MAX_DEPTH, found: depth });
        }
        i += len;
    }
    Ok(())
}

/// Whether the text before a `(` ends in `.all`, `.exists`, `.map`, … (a macro call on a target).
fn is_comprehension_call(before: &str) -> bool {
    let trimmed = before.trim_end();
    // The character before the name may be any character, so the name starts after it, not one byte after.
    let name_start = trimmed
        .char_indices()
        .rfind(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
        .map_or(0, |(p, c)| p + c.len_utf8());
    let name = &trimmed[name_start..];
    COMPREHENSIONS.contains(&name) && trimmed[..name_start].trim_end().ends_with('.')
}

/// Byte length of the CEL string literal starting at `start` (a quote), delimiters included; the rest of the
/// text when it is not closed. Triple quotes and backslash escapes are honoured; a raw prefix (`r'…'`) only
/// makes the scan treat backslashes as text, which can only end the literal later, never earlier, than the
/// parser would — so the estimate stays an upper bound or the parser rejects the text.
pub(crate) fn literal_len(text: &str, start: usize) -> usize {
    let rest = &text[start..];
    let (quote, triple) = if rest.starts_with('"') { ("\"", "\"\"\"") } else { ("'", "'''") };
    let delimiter = if rest.starts_with(triple) { triple } else { quote };
    let raw = is_raw_prefix(&text[..start]);
    let mut chars = rest.char_indices().skip(delimiter.len());
    while let Some((i, c)) = chars.next() {
        if rest[i..].starts_with(delimiter) {
            return i + delimiter.len();
        }
        if c == '\\' && !raw {
            chars.next();
        }
    }
    rest.len()
}

/// Whether the text before a quote ends in a raw-string prefix (`r`, `R`, `br`, …) rather than an identifier.
pub(crate) fn is_raw_prefix(before: &str) -> bool {
    let mut back = before.chars().rev();
    if !matches!(back.next(), Some('r' | 'R')) {
        return false;
    }
    match back.next() {
        Some('b' | 'B') => !back.next().is_some_and(|c| c.is_alphanumeric() || c == '_'),
        Some(c) => !(c.is_alphanumeric() || c == '_'),
        None => true,
    }
}

/// At most `max` characters of `text`, with `…` when cut: expressions quoted in messages stay short however
/// long the expression is.
pub fn excerpt(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]).into(),
        None => text.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_error(text: &str) -> bool {
        matches!(check(text), Err(BoundError::Depth { .. }))
    }

    #[test]
    fn ordinary_expressions_pass() {
        for text in [
            "steps.rainy.output.matched",
            "steps.weather.output.precipitation_probability >= 50 && input.city == 'Wuhan'",
            "has(steps.a.output.x) ? steps.a.output.x > 3 : false",
            "steps.a.output.items.exists(i, i.tags.exists(t, t == 'x'))",
            "[1, 2, 3].map(x, x * 2) == [2, 4, 6]",
            "{'a': 1, 'b': [1, 2]}.a == 1",
            &(0..40).map(|i| format!("steps.s{i}.output.value == {i}")).collect::<Vec<_>>().join(" && "),
        ] {
            assert_eq!(check(text), Ok(()), "{text}");
        }
    }

    #[test]
    fn long_operator_chains_selectors_and_indexes_are_refused() {
        assert!(depth_error(&format!("{} == 0", vec!["1"; 10_000].join(" + "))));
        assert!(depth_error(&format!("steps.b{} == 1", ".x".repeat(5_000))));
        assert!(depth_error(&vec!["true"; 200].join(" || ")));
        assert!(depth_error(&vec!["1"; 200].join(" in ")));
        assert!(depth_error(&format!("{}1 == 1", "true ? 1 : ".repeat(200))));
        assert_eq!(check("{'a': true ? 1 : 2, 'b': 3}.a == 1"), Ok(()));
        let index = format!("steps.b{} == 1", "[0]".repeat(20_000));
        assert!(matches!(check(&index), Err(BoundError::Depth { .. } | BoundError::Nesting { .. })));
    }

    #[test]
    fn deep_brackets_and_nested_comprehensions_are_refused() {
        let parens = format!("{}1{}", "(".repeat(40), ")".repeat(40));
        assert_eq!(check(&parens), Err(BoundError::Nesting { limit: MAX_NESTING, found: MAX_NESTING + 1 }));
        let nested = "l.all(a, l.all(b, l.all(c, a == b)))";
        assert!(matches!(check(nested), Err(BoundError::Comprehensions { found: 3, .. })));
        assert_eq!(check("l.all(a, l.exists(b, a == b)) && l.map(x, x).size() > 0"), Ok(()));
    }

    #[test]
    fn wide_lists_and_operators_inside_strings_do_not_count_as_depth() {
        let wide = format!("[{}].size() > 0", vec!["1 + 1"; 5_000].join(", "));
        assert_eq!(check(&wide), Ok(()));
        let quoted = format!("input.s == '{}'", "+.".repeat(10_000));
        assert_eq!(check(&quoted), Ok(()));
        assert_eq!(check(r#"input.s == "a\"+++" && r'\' == "x""#), Ok(()));
    }

    #[test]
    fn a_call_after_a_multibyte_character_is_scanned_on_character_boundaries() {
        // The name before `(` starts after the last character that is not part of a name, however many bytes
        // that character takes.
        assert_eq!(check("é(1) == 1").map_err(|_| ()), check("x (1) == 1").map_err(|_| ()));
        assert!(!is_comprehension_call("é"));
        assert!(is_comprehension_call("l.é.all"));
        assert!(!is_comprehension_call("雨all"));
    }

    #[test]
    fn excerpts_cut_on_character_boundaries() {
        assert_eq!(excerpt("abc", 5), "abc");
        assert_eq!(excerpt("明天武汉下雨", 2), "明天…");
    }
}
