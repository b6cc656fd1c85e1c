//! Pass 3: the dependency graph — unknown, self and repeated dependencies, cycles, transitive ancestry.
//!
//! Cycle detection is Kahn's algorithm (O(n + e)): steps left over after repeatedly removing steps whose
//! dependencies are all removed lie on a cycle or downstream of one. When there are any, [`find_cycles`] reports
//! one cycle per strongly connected component (Tarjan), so independent cycles are all reported. Cycles are
//! reported in execution order (`b → c → d → b` means c depends on b, d on c, b on d), starting at the step that
//! comes first in the plan. Ancestry is one bitset per step, filled in topological order.

use std::collections::{HashMap, HashSet};

use crate::diagnostic::{Code, Diagnostic, did_you_mean};
use crate::pointer;
use crate::validate::Limits;
use crate::validate::shape::Slot;

/// A cycle as step indices in execution order, the first index repeated at the end.
pub type Cycle = Vec<usize>;

/// Largest plan for which ancestry bitsets are built (n² bits: 20,000 steps → 50 MB). Bigger plans are already
/// rejected by `too_many_steps` under any sane limit; skipping keeps validation of hostile input bounded.
const MAX_ANCESTRY_STEPS: usize = 20_000;

/// The dependency graph over step indices; unknown and self dependencies are left out, repeats removed.
#[derive(Debug)]
pub(crate) struct Graph {
    /// `deps[i]`: indices step `i` depends on.
    pub deps: Vec<Vec<usize>>,
    /// Steps in topological order (dependencies first); shorter than `deps` when there is a cycle.
    pub order: Vec<usize>,
}

/// `is_ancestor(a, d)`: whether `a` is a transitive dependency of `d`.
#[derive(Debug)]
pub(crate) struct Ancestry {
    words: usize,
    bits: Vec<u64>,
}

impl Ancestry {
    pub fn is_ancestor(&self, ancestor: usize, descendant: usize) -> bool {
        let word = self.bits[descendant * self.words + ancestor / 64];
        word & (1 << (ancestor % 64)) != 0
    }
}

impl Graph {
    pub fn build(slots: &[Slot], out: &mut Vec<Diagnostic>) -> Graph {
        let mut index_of: HashMap<&str, usize> = HashMap::with_capacity(slots.len());
        for slot in slots {
            if let Some(id) = slot.id.as_deref() {
                index_of.entry(id).or_insert(slot.index);
            }
        }
        let deps = slots.iter().map(|slot| resolve_deps(slot, &index_of, out)).collect::<Vec<_>>();
        let order = topological_order(&deps);
        if order.len() < deps.len() {
            for cycle in find_cycles(&deps) {
                out.push(cycle_diagnostic(&cycle, slots));
            }
        }
        Graph { deps, order }
    }

    /// Ancestor bitsets for every step that is not on or behind a cycle; `None` for plans too large to afford it.
    pub fn ancestry(&self, slots: &[Slot], limits: &Limits) -> Option<Ancestry> {
        let n = slots.len();
        if n > MAX_ANCESTRY_STEPS && n > limits.max_steps {
            return None;
        }
        let words = n.div_ceil(64);
        let mut bits = vec![0u64; n * words];
        for &step in &self.order {
            for &dep in &self.deps[step] {
                let (lo, hi) = (dep.min(step), dep.max(step));
                let (head, tail) = bits.split_at_mut(hi * words);
                let (dep_row, step_row) = if dep < step {
                    (&head[lo * words..(lo + 1) * words], &mut tail[..words])
                } else {
                    (&tail[..words], &mut head[lo * words..(lo + 1) * words])
                };
                for (s, d) in step_row.iter_mut().zip(dep_row) {
                    *s |= *d;
                }
                step_row[dep / 64] |= 1 << (dep % 64);
            }
        }
        Some(Ancestry { words, bits })
    }
}

/// Whether the plan's `depends_on` entries, all steps together, are within `limits.max_edges`; reports the
/// excess otherwise.
pub(crate) fn edges_within(slots: &[Slot], limits: &Limits, out: &mut Vec<Diagnostic>) -> bool {
    let edges: usize = slots.iter().map(|s| s.depends_on.len()).sum();
    if edges <= limits.max_edges {
        return true;
    }
    let d = Diagnostic::limit_exceeded(
        "/steps",
        "dependency edges (depends_on entries)",
        "max_edges",
        limits.max_edges,
        edges,
    );
    out.push(d.hint("depend on one step that joins a group instead of on every step of it"));
    false
}

fn resolve_deps(slot: &Slot, index_of: &HashMap<&str, usize>, out: &mut Vec<Diagnostic>) -> Vec<usize> {
    let id = slot.id.as_deref().unwrap_or("");
    let mut deps = Vec::with_capacity(slot.depends_on.len());
    // A set, not `deps.contains`: a join over k steps would otherwise cost O(k²) (case C24).
    let mut seen = HashSet::with_capacity(slot.depends_on.len());
    for (k, dep) in slot.depends_on.iter().enumerate() {
        let at = pointer::join(&pointer::step_field(slot.index, "depends_on"), &[k.to_string()]);
        match index_of.get(dep.as_str()) {
            None => {
                let msg = format!("step `{id}` depends on `{dep}`, which is not a step of this plan");
                let d = Diagnostic::error(Code::UnknownDependency, at, msg).step(id);
                out.push(match did_you_mean(dep, index_of.keys().copied()) {
                    Some(s) => d.hint(format!("did you mean `{s}`?")),
                    None => d.hint("name an existing step id, or add the missing step"),
                });
            }
            Some(_) if dep == id => {
                let msg = format!("step `{id}` depends on itself");
                out.push(Diagnostic::error(Code::SelfDependency, at, msg).step(id).hint("remove it from depends_on"));
            }
            Some(&i) if seen.contains(&i) => {
                let msg = format!("step `{id}` lists `{dep}` more than once in depends_on; it is counted once");
                out.push(Diagnostic::warning(Code::DuplicateDependency, at, msg).step(id).hint("remove the repeat"));
            }
            Some(&i) => {
                seen.insert(i);
                deps.push(i);
            }
        }
    }
    deps
}

/// Kahn's algorithm: indices in an order where every step comes after its dependencies. Steps on or behind a
/// cycle are missing.
fn topological_order(deps: &[Vec<usize>]) -> Vec<usize> {
    let n = deps.len();
    let mut dependents = vec![Vec::new(); n];
    let mut pending: Vec<usize> = deps.iter().map(Vec::len).collect();
    for (step, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d].push(step);
        }
    }
    let mut order: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    let mut next = 0;
    while next < order.len() {
        let step = order[next];
        next += 1;
        for &w in &dependents[step] {
            pending[w] -= 1;
            if pending[w] == 0 {
                order.push(w);
            }
        }
    }
    order
}

/// One cycle for every group of steps that depend on each other (every strongly connected component with more
/// than one step, or one step listing itself), so a plan with several independent cycles reports them all at once.
///
/// `deps[i]` lists the indices step `i` depends on (indices must be `< deps.len()`). Returns an empty vector for
/// an acyclic graph. Each cycle is in execution order and starts at its lowest index; cycles are ordered by the
/// lowest index of their component. O(n + e), no recursion.
pub fn find_cycles(deps: &[Vec<usize>]) -> Vec<Cycle> {
    let n = deps.len();
    let component = components(deps);
    let mut size = vec![0usize; n];
    for &c in &component {
        size[c] += 1;
    }
    // One walk per component, not per leftover step: a walk can pass through one cycle's steps on its way into
    // another and close only the second, and the first would never be reported.
    let mut walked = vec![false; n];
    let mut position = vec![usize::MAX; n];
    let mut cycles = Vec::new();
    for start in 0..n {
        let c = component[start];
        let cyclic = size[c] > 1 || deps[start].contains(&start);
        if walked[c] || !cyclic {
            continue;
        }
        walked[c] = true;
        // Inside a cyclic component every step has a dependency in the same component, so the walk goes on
        // until it meets a step again; the stretch from that step on is a cycle.
        let mut path = Vec::new();
        let mut at = start;
        let closed = loop {
            if position[at] != usize::MAX {
                break true;
            }
            position[at] = path.len();
            path.push(at);
            match deps[at].iter().copied().find(|&d| component[d] == c) {
                Some(d) => at = d,
                None => break false,
            }
        };
        if closed && let Some(from) = path.get(position[at]..) {
            cycles.push(execution_order(from));
        }
    }
    cycles
}

/// Strongly connected components (Tarjan's algorithm, with an explicit stack so a long chain cannot overflow the
/// call stack): `component[i]` is the component id of step `i`.
fn components(deps: &[Vec<usize>]) -> Vec<usize> {
    const UNSEEN: usize = usize::MAX;
    let n = deps.len();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut component = vec![UNSEEN; n];
    let (mut next_index, mut next_component) = (0, 0);
    // (step, how many of its dependencies were already followed)
    let mut frames: Vec<(usize, usize)> = Vec::new();
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        frames.push((root, 0));
        while let Some(frame) = frames.last_mut() {
            let v = frame.0;
            if let Some(&w) = deps[v].get(frame.1) {
                frame.1 += 1;
                if index[w] == UNSEEN {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    frames.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component[w] = next_component;
                    if w == v {
                        break;
                    }
                }
                next_component += 1;
            }
        }
    }
    component
}

/// A dependency-direction walk `[x, dep of x, dep of that, …]` as an execution-order cycle from its lowest index.
fn execution_order(walk: &[usize]) -> Cycle {
    let mut cycle: Vec<usize> = walk.iter().rev().copied().collect();
    let lowest = cycle.iter().enumerate().min_by_key(|(_, s)| **s).map_or(0, |(i, _)| i);
    cycle.rotate_left(lowest);
    if let Some(&first) = cycle.first() {
        cycle.push(first);
    }
    cycle
}

fn cycle_diagnostic(cycle: &Cycle, slots: &[Slot]) -> Diagnostic {
    let name = |i: usize| slots[i].id.clone().unwrap_or_else(|| format!("#{i}"));
    let ids: Vec<String> = cycle.iter().map(|&i| name(i)).collect();
    let first = cycle[0];
    let closing = cycle[cycle.len() - 2];
    let dep_pos = slots[first].depends_on.iter().position(|d| Some(d) == slots[closing].id.as_ref());
    let at = match dep_pos {
        Some(k) => pointer::join(&pointer::step_field(first, "depends_on"), &[k.to_string()]),
        None => pointer::step_field(first, "depends_on"),
    };
    let msg = format!("dependency cycle: {}", ids.join(" → "));
    let hint = format!("remove `{}` from depends_on of `{}` or otherwise break the cycle", ids[ids.len() - 2], ids[0]);
    let mut d = Diagnostic::error(Code::Cycle, at, msg).step(ids[0].clone()).hint(hint);
    d.cycle = Some(ids);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_behind_a_valid_prefix_is_reported_in_execution_order() {
        // root; b <- [root, d]; c <- [b]; d <- [c]   (case C02 c)
        let deps = vec![vec![], vec![0, 3], vec![1], vec![2]];
        assert_eq!(find_cycles(&deps), vec![vec![1, 2, 3, 1]]);
    }

    #[test]
    fn two_disjoint_cycles_are_both_reported() {
        let deps = vec![vec![1], vec![0], vec![3], vec![2], vec![0]];
        assert_eq!(find_cycles(&deps), vec![vec![0, 1, 0], vec![2, 3, 2]]);
    }

    #[test]
    fn acyclic_graph_has_no_cycles_and_a_full_order() {
        let deps = vec![vec![], vec![0], vec![0, 1]];
        assert!(find_cycles(&deps).is_empty());
        assert_eq!(topological_order(&deps), vec![0, 1, 2]);
    }
}
