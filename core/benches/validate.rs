//! Validation throughput: a 1000-step plan with 3000 dependency edges and 2000 placeholders.
//!
//! Issue target: under 20 ms per validation in a release build. Run `cargo bench -p cairn-core --bench validate`.

#![allow(missing_docs)]

use cairn_core::catalog::StaticCatalog;
use cairn_core::document::Format;
use cairn_core::validate::{Limits, validate_text, validate_value};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

/// Step `i` depends on three distinct earlier steps (when it has them) and reads two of their outputs.
fn large_plan(steps: usize) -> Value {
    let mut out = Vec::with_capacity(steps);
    let mut edges = 0;
    let mut placeholders = 0;
    for i in 0..steps {
        let mut deps: Vec<usize> = [i.wrapping_sub(1), i / 2, (i * 7) / 11].into_iter().filter(|&d| d < i).collect();
        deps.sort_unstable();
        deps.dedup();
        let mut k = 3;
        while deps.len() < 3.min(i) {
            let d = (i * 13 + k * 7) % i;
            if !deps.contains(&d) {
                deps.push(d);
            }
            k += 1;
        }
        edges += deps.len();
        let mut args = serde_json::Map::new();
        for (n, d) in deps.iter().take(2).enumerate() {
            args.insert(format!("in{n}"), json!(format!("$s{d}.output.value")));
            placeholders += 1;
        }
        args.insert("text".into(), json!(format!("step {i} of the benchmark plan")));
        let depends_on: Vec<String> = deps.iter().map(|d| format!("s{d}")).collect();
        out.push(json!({"id": format!("s{i}"), "action": "noop", "args": args, "depends_on": depends_on,
                        "timeout_ms": 5000, "retry": {"max_attempts": 3}}));
    }
    eprintln!("benchmark plan: {steps} steps, {edges} edges, {placeholders} placeholders");
    json!({"goal": "benchmark", "context": {"timezone": "Asia/Shanghai"}, "steps": out})
}

fn bench(c: &mut Criterion) {
    let catalog = StaticCatalog::builtin();
    let limits = Limits::default();
    let plan = large_plan(1000);
    let text = plan.to_string();
    assert!(validate_value(&plan, &catalog, &limits).valid, "the benchmark plan must be valid");
    c.bench_function("validate_value 1000 steps / 3000 edges / 2000 placeholders", |b| {
        b.iter(|| validate_value(std::hint::black_box(&plan), &catalog, &limits))
    });
    c.bench_function("validate_text (parse + validate) 1000 steps", |b| {
        b.iter(|| validate_text(std::hint::black_box(&text), Format::Json, &catalog, &limits))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
