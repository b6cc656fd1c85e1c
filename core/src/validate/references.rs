//! Pass 5: placeholders and `when` references must name a transitive dependency or `$input` (contract §3).
//!
//! A value produced by a step that is not an ancestor might not exist when this step runs, so the plan is
//! rejected before anything runs, with the fix: add the producer to `depends_on`. A step naming itself is the
//! degenerate case (case C02 b).

use std::collections::HashMap;

use crate::condition::Condition;
use crate::diagnostic::{Code, Diagnostic, did_you_mean};
use crate::expression;
use crate::placeholder::{self, Root};
use crate::pointer;
use crate::validate::graph::{Ancestry, Graph};
use crate::validate::shape::Slot;

struct Lookup<'a> {
    index_of: HashMap<&'a str, usize>,
    settled: Vec<bool>,
    ancestry: Option<&'a Ancestry>,
}

pub(crate) fn check(slots: &[Slot], graph: &Graph, ancestry: Option<&Ancestry>, out: &mut Vec<Diagnostic>) {
    let mut index_of = HashMap::with_capacity(slots.len());
    for slot in slots {
        if let Some(id) = slot.id.as_deref() {
            index_of.entry(id).or_insert(slot.index);
        }
    }
    // Steps on or behind a cycle have incomplete ancestry; the cycle error already explains them.
    let mut settled = vec![false; slots.len()];
    for &i in &graph.order {
        settled[i] = true;
    }
    let lookup = Lookup { index_of, settled, ancestry };
    for slot in slots {
        let Some(step) = &slot.step else { continue };
        let args_at = pointer::step_field(slot.index, "args");
        for found in placeholder::references(&step.args) {
            let at = format!("{args_at}{}", found.pointer);
            match found.result {
                Err(e) => {
                    let msg = format!("bad placeholder in `{}`: {e}", expression::excerpt(&found.placeholder, 120));
                    let hint =
                        "write `$step.output.field`, `${step.output.field}` inside text, or `$$` for a literal `$`";
                    out.push(Diagnostic::error(Code::PlaceholderSyntax, at, msg).step(&step.id).hint(hint));
                }
                Ok(reference) => {
                    if let Root::Step(producer) = &reference.root {
                        lookup.check(slot, &step.id, producer, &found.placeholder, &at, out);
                    }
                }
            }
        }
        if let Some(when) = &step.when
            && let Ok(condition) = Condition::compile(when)
        {
            let at = pointer::step_field(slot.index, "when");
            let quoted = expression::excerpt(when, 120);
            for producer in condition.step_references() {
                lookup.check(slot, &step.id, &producer, &quoted, &at, out);
            }
        }
    }
}

impl Lookup<'_> {
    fn check(&self, slot: &Slot, id: &str, producer: &str, text: &str, at: &str, out: &mut Vec<Diagnostic>) {
        let Some(&p) = self.index_of.get(producer) else {
            let msg = format!("`{text}` refers to step `{producer}`, which is not a step of this plan");
            let d = Diagnostic::error(Code::PlaceholderUnknownStep, at, msg).step(id);
            out.push(match did_you_mean(producer, self.index_of.keys().copied()) {
                Some(s) => d.hint(format!("did you mean `{s}`? (write `$$` for a literal `$`)")),
                None => d.hint("name an existing step, use `$input…`, or write `$$` for a literal `$`"),
            });
            return;
        };
        if p == slot.index {
            let msg = format!("`{text}` refers to the output of step `{id}` itself, which does not exist yet");
            out.push(
                Diagnostic::error(Code::PlaceholderNotAncestor, at, msg)
                    .step(id)
                    .hint("refer to a dependency's output instead"),
            );
            return;
        }
        let Some(ancestry) = self.ancestry else {
            return;
        };
        if self.settled[slot.index] && !ancestry.is_ancestor(p, slot.index) {
            let msg = format!(
                "`{text}` refers to step `{producer}`, which is not a (transitive) dependency of `{id}`: its output might not exist yet"
            );
            let hint = format!("add `{producer}` to depends_on of `{id}`");
            out.push(Diagnostic::error(Code::PlaceholderNotAncestor, at, msg).step(id).hint(hint));
        }
    }
}
