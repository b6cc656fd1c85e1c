//! Property tests for cycle detection (cases C02, C03): the validator and `find_cycles` agree with petgraph.
//!
//! Random directed graphs (up to 30 steps, self loops and cycles included) are turned into plans of `noop`
//! steps `s0…sN` whose `depends_on` lists the edges. petgraph's `toposort` is the oracle for "has a cycle" and
//! `tarjan_scc` for "which steps lie on one".

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;

use cairn_core::catalog::StaticCatalog;
use cairn_core::diagnostic::Code;
use cairn_core::validate::{Limits, find_cycles, validate_value};
use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};
use proptest::prelude::*;
use serde_json::{Value, json};

/// `deps[i]`: the steps step `i` depends on (may repeat, may include `i`).
fn dependency_lists() -> impl Strategy<Value = Vec<Vec<usize>>> {
    (1..=30usize).prop_flat_map(|n| {
        // Sparse and dense graphs: up to 4 dependencies per step on average, sometimes none at all.
        let edges = prop::collection::vec((0..n, 0..n), 0..=4 * n);
        edges.prop_map(move |edges| {
            let mut deps = vec![Vec::new(); n];
            for (step, dep) in edges {
                deps[step].push(dep);
            }
            deps
        })
    })
}

/// Edges point from a dependency to its dependent, the direction work flows.
fn petgraph_of(deps: &[Vec<usize>]) -> DiGraph<usize, ()> {
    let mut graph = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..deps.len()).map(|i| graph.add_node(i)).collect();
    for (step, ds) in deps.iter().enumerate() {
        for &dep in ds {
            graph.update_edge(nodes[dep], nodes[step], ());
        }
    }
    graph
}

fn plan_of(deps: &[Vec<usize>]) -> Value {
    let steps: Vec<Value> = deps
        .iter()
        .enumerate()
        .map(|(i, ds)| {
            let on: Vec<String> = ds.iter().map(|d| format!("s{d}")).collect();
            json!({"id": format!("s{i}"), "action": "noop", "depends_on": on})
        })
        .collect();
    json!({ "steps": steps })
}

/// Steps on some cycle: members of a strongly connected component of two or more, or with a self loop.
fn cyclic_components(deps: &[Vec<usize>], self_loops: bool) -> Vec<HashSet<usize>> {
    let graph = petgraph_of(deps);
    tarjan_scc(&graph)
        .into_iter()
        .map(|scc| scc.into_iter().map(|n| graph[n]).collect::<HashSet<usize>>())
        .filter(|scc| scc.len() > 1 || (self_loops && scc.iter().all(|&i| deps[i].contains(&i))))
        .collect()
}

fn without_self_loops(deps: &[Vec<usize>]) -> Vec<Vec<usize>> {
    deps.iter().enumerate().map(|(i, ds)| ds.iter().copied().filter(|&d| d != i).collect()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn validator_reports_a_cycle_or_self_dependency_iff_toposort_fails(deps in dependency_lists()) {
        let report = validate_value(&plan_of(&deps), &StaticCatalog::builtin(), &Limits::default());

        let cyclic = toposort(&petgraph_of(&deps), None).is_err();
        let acyclic_apart_from_self_loops = toposort(&petgraph_of(&without_self_loops(&deps)), None).is_ok();
        let has_self_loop = deps.iter().enumerate().any(|(i, ds)| ds.contains(&i));
        let codes: Vec<Code> = report.diagnostics.iter().map(|d| d.code).collect();
        let reported = codes.iter().any(|c| matches!(c, Code::Cycle | Code::SelfDependency));
        prop_assert_eq!(reported, cyclic, "cycle/self_dependency is reported iff the graph has a cycle: {:?}", codes);
        prop_assert_eq!(reported, !report.valid, "a cycle is the only possible error in these plans: {:?}", codes);
        prop_assert_eq!(
            codes.contains(&Code::SelfDependency), has_self_loop,
            "self_dependency is reported iff a step lists itself"
        );
        prop_assert_eq!(
            codes.contains(&Code::Cycle), !acyclic_apart_from_self_loops,
            "cycle is reported iff there is a cycle through two or more steps"
        );
    }

    #[test]
    fn every_reported_cycle_is_a_real_cycle_in_execution_order(deps in dependency_lists()) {
        let report = validate_value(&plan_of(&deps), &StaticCatalog::builtin(), &Limits::default());

        let depends_on = |step: &str, dep: &str| {
            let i: usize = step[1..].parse().unwrap();
            deps[i].iter().any(|d| format!("s{d}") == dep)
        };
        for d in report.diagnostics.iter().filter(|d| d.code == Code::Cycle) {
            let cycle = d.cycle.as_ref().expect("a cycle diagnostic carries its path");
            prop_assert!(cycle.len() >= 3, "a cycle has two or more steps plus the repeat: {:?}", cycle);
            prop_assert_eq!(cycle.first(), cycle.last(), "the first id is repeated at the end");
            let distinct: HashSet<&String> = cycle[..cycle.len() - 1].iter().collect();
            prop_assert_eq!(distinct.len(), cycle.len() - 1, "no step appears twice inside a cycle: {:?}", cycle);
            for pair in cycle.windows(2) {
                prop_assert!(
                    depends_on(&pair[1], &pair[0]),
                    "in execution order `{}` depends on `{}`: {:?}", pair[1], pair[0], cycle
                );
            }
            prop_assert_eq!(d.step_id.as_ref(), cycle.first(), "the diagnostic names the cycle's first step");
        }
    }

    #[test]
    fn every_cyclic_component_gets_a_cycle_diagnostic(deps in dependency_lists()) {
        let report = validate_value(&plan_of(&deps), &StaticCatalog::builtin(), &Limits::default());

        let reported: Vec<HashSet<usize>> = report
            .diagnostics
            .iter()
            .filter_map(|d| d.cycle.as_ref())
            .map(|c| c.iter().map(|id| id[1..].parse().unwrap()).collect())
            .collect();
        for component in cyclic_components(&deps, false) {
            prop_assert!(
                reported.iter().any(|cycle| cycle.is_subset(&component)),
                "every group of steps that depend on each other is reported, so all cycles are fixed at once: \
                 {:?} not in {:?}", component, reported
            );
        }
    }

    #[test]
    fn find_cycles_is_empty_iff_toposort_succeeds(deps in dependency_lists()) {
        let cycles = find_cycles(&deps);

        let acyclic = toposort(&petgraph_of(&deps), None).is_ok();
        prop_assert_eq!(cycles.is_empty(), acyclic, "cycles are found iff there is one: {:?}", cycles);
    }

    #[test]
    fn find_cycles_returns_real_distinct_cycles_from_their_lowest_index(deps in dependency_lists()) {
        let cycles = find_cycles(&deps);

        for cycle in &cycles {
            prop_assert!(cycle.len() >= 2, "a cycle has a step plus the repeat: {:?}", cycle);
            prop_assert_eq!(cycle.first(), cycle.last(), "the first index is repeated at the end");
            let body = &cycle[..cycle.len() - 1];
            prop_assert_eq!(body.iter().min(), body.first(), "a cycle starts at its lowest index");
            let distinct: HashSet<&usize> = body.iter().collect();
            prop_assert_eq!(distinct.len(), body.len(), "no index appears twice inside a cycle: {:?}", cycle);
            for pair in cycle.windows(2) {
                prop_assert!(
                    deps[pair[1]].contains(&pair[0]),
                    "in execution order {} depends on {}: {:?}", pair[1], pair[0], cycle
                );
            }
        }
        let unique: HashSet<&Vec<usize>> = cycles.iter().collect();
        prop_assert_eq!(unique.len(), cycles.len(), "no cycle is reported twice: {:?}", cycles);
    }

    #[test]
    fn find_cycles_covers_every_cyclic_component(deps in dependency_lists()) {
        let cycles = find_cycles(&deps);

        for component in cyclic_components(&deps, true) {
            prop_assert!(
                cycles.iter().any(|c| c.iter().all(|i| component.contains(i))),
                "every strongly connected group with a cycle has a reported cycle: {:?} not in {:?}",
                component, cycles
            );
        }
    }
}

#[test]
fn self_loop_is_a_cycle_of_one_index() {
    assert_eq!(
        find_cycles(&[vec![], vec![1]]),
        vec![vec![1, 1]],
        "a step depending on itself is a cycle from the step to itself"
    );
}

#[test]
fn repeated_dependency_is_not_a_cycle() {
    assert!(find_cycles(&[vec![], vec![0, 0]]).is_empty(), "listing a dependency twice is not a cycle (case C02 d)");
}

#[test]
fn steps_downstream_of_a_cycle_are_not_reported_as_cycles() {
    // 0 <-> 1, and 2 depends on 1 (behind the cycle but not on it).
    let cycles = find_cycles(&[vec![1], vec![0], vec![1]]);

    assert_eq!(cycles, vec![vec![0, 1, 0]], "only the steps on the cycle are listed");
}

#[test]
fn cycle_entered_on_the_way_to_another_is_still_reported() {
    // X = {1, 2} (1 <-> 2), Y = {3, 4} (3 <-> 4), 2 also depends on 3, and 0 depends on 1.
    // Walking dependencies from 0 passes through X into Y before X closes.
    let deps = vec![vec![1], vec![2], vec![3, 1], vec![4], vec![3]];

    let cycles = find_cycles(&deps);

    assert!(cycles.contains(&vec![1, 2, 1]), "the cycle between 1 and 2 is reported: {cycles:?}");
    assert!(cycles.contains(&vec![3, 4, 3]), "the cycle between 3 and 4 is reported: {cycles:?}");
}

#[test]
fn long_chain_and_long_cycle_do_not_overflow_the_stack() {
    let n = 100_000;
    let chain: Vec<Vec<usize>> = (0..n).map(|i| if i == 0 { vec![] } else { vec![i - 1] }).collect();
    let mut ring = chain.clone();
    ring[0] = vec![n - 1];

    assert!(find_cycles(&chain).is_empty(), "a chain has no cycle");
    let cycles = find_cycles(&ring);
    assert_eq!(cycles.len(), 1, "a ring is one cycle");
    assert_eq!(cycles[0].len(), n + 1, "through every step, first repeated");
}
