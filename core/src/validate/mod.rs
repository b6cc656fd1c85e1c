//! Static validation of a plan (contract §4): every diagnostic at once, nothing executed.
//!
//! [`validate_value`] runs these passes over the submitted JSON, each adding diagnostics:
//! 1. [`shape`]: the document against the plan model (unknown fields, wrong types), step by step so that one bad
//!    step does not hide the others;
//! 2. [`ids`]: id charset, reserved ids, duplicates (exact and after Unicode NFC normalisation);
//! 3. [`graph`]: unknown, self and repeated dependencies, cycles with their path, transitive ancestry;
//! 4. [`fields`]: time zone, `not_before`, timeout and retry ranges, approval; [`expressions`]: `when` and the
//!    literal CEL in built-in actions' args (length, depth, syntax);
//! 5. [`references`]: placeholders and `when` references must name a transitive dependency (or `$input`);
//! 6. [`actions`]: unknown actions, args against the action's JSON Schema, grounded args.
//!
//! The plan is returned (with defaults applied) only when no error was found. Diagnostics are sorted by pointer
//! order of appearance: document-level first, then by step index, stable within a step.

mod actions;
mod expressions;
mod fields;
mod graph;
mod ids;
mod references;
mod shape;

use serde::Serialize;
use serde_json::Value;

use crate::catalog::ActionCatalog;
use crate::diagnostic::Diagnostic;
use crate::document::{self, Format};
use crate::plan::Plan;

pub use graph::{Cycle, find_cycles};

/// Configurable limits (contract §2 defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Maximum number of steps in one plan (default 1000).
    pub max_steps: usize,
    /// Smallest allowed `timeout_ms` (1000).
    pub min_timeout_ms: u64,
    /// Largest allowed `timeout_ms` and `heartbeat_timeout_ms` (default 24 h).
    pub max_timeout_ms: u64,
    /// Longest CEL expression, in bytes: a `when`, or a literal `condition.eval` `expr` or `event.wait` `filter`
    /// (default 16 KiB). Depth is bounded separately and always ([`crate::expression`]).
    pub max_expression_bytes: usize,
    /// Most `depends_on` entries in one plan, all steps together (default 20,000).
    pub max_edges: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: 1000,
            min_timeout_ms: 1000,
            max_timeout_ms: 24 * 3600 * 1000,
            max_expression_bytes: 16 * 1024,
            max_edges: 20_000,
        }
    }
}

/// The outcome of validation.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// True when no diagnostic is an error.
    pub valid: bool,
    /// Every finding, errors and warnings.
    pub diagnostics: Vec<Diagnostic>,
    /// The plan with defaults applied (and `idempotent` filled from the action's effect), when valid.
    #[serde(skip)]
    pub plan: Option<Plan>,
}

impl Report {
    fn new(mut diagnostics: Vec<Diagnostic>, plan: Option<Plan>) -> Self {
        diagnostics.sort_by_key(|d| pointer_order(&d.pointer));
        let valid = !diagnostics.iter().any(Diagnostic::is_error);
        Self { valid, plan: if valid { plan } else { None }, diagnostics }
    }

    /// Only the errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }
}

/// Sort key: document-level pointers first, then steps by index; ties keep insertion order (stable sort).
fn pointer_order(pointer: &str) -> (usize, usize) {
    let step =
        pointer.strip_prefix("/steps/").and_then(|rest| rest.split('/').next()).and_then(|i| i.parse::<usize>().ok());
    match step {
        Some(i) => (1, i),
        None => (0, 0),
    }
}

/// Parses `text` (JSON or YAML) and validates it. A parse failure is reported as a single diagnostic.
pub fn validate_text(text: &str, format: Format, catalog: &dyn ActionCatalog, limits: &Limits) -> Report {
    match document::parse(text, format) {
        Ok(value) => validate_value(&value, catalog, limits),
        Err(failure) => Report::new(vec![failure.into()], None),
    }
}

/// Validates a plan document already parsed into JSON. See the module docs for the passes.
pub fn validate_value(document: &Value, catalog: &dyn ActionCatalog, limits: &Limits) -> Report {
    let mut out = Vec::new();
    let Some(mut parsed) = shape::read(document, limits, &mut out) else {
        return Report::new(out, None);
    };
    ids::check(&parsed.slots, &mut out);
    if !graph::edges_within(&parsed.slots, limits, &mut out) {
        // Reading half a million edges costs seconds; the plan is refused on their number alone.
        return Report::new(out, None);
    }
    let graph = graph::Graph::build(&parsed.slots, &mut out);
    let ancestry = graph.ancestry(&parsed.slots, limits);
    fields::check(&parsed, limits, &mut out);
    expressions::check(&parsed.slots, limits, &mut out);
    references::check(&parsed.slots, &graph, ancestry.as_ref(), &mut out);
    actions::check(&mut parsed, catalog, &mut out);
    let plan = parsed.into_plan();
    Report::new(out, plan)
}
