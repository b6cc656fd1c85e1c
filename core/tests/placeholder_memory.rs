//! Memory is linear in the placeholders of one string (issue "Hardening", F2).
//!
//! A placeholder that kept a copy of the whole string it was found in would make memory quadratic: 8,000
//! `${input.a}` (80 KB) would peak at 635 MB, and 100,000 (1.1 MB, under the body limit) would exhaust 24 GB.
//! dhat's heap profiler measures the peak bytes live while one plan is validated and its args resolved.

#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

use cairn_core::catalog::StaticCatalog;
use cairn_core::placeholder::{Producer, Scope, resolve_args};
use cairn_core::validate::{Limits, validate_value};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// One heap profiler runs at a time in a process.
static SERIAL: Mutex<()> = Mutex::new(());

/// Peak heap bytes while `work` runs (what was live before it included).
fn peak_during(work: impl FnOnce()) -> usize {
    let _one = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let _profiler = dhat::Profiler::builder().testing().build();
    work();
    let peak = dhat::HeapStats::get().max_bytes;
    eprintln!("peak heap: {} KiB", peak >> 10);
    peak
}

/// A scope with only an input.
struct InputOnly(Value);

impl Scope for InputOnly {
    fn input(&self) -> &Value {
        &self.0
    }

    fn producer(&self, _step_id: &str) -> Producer<'_> {
        Producer::Pending
    }
}

fn plan_with(placeholders: usize) -> Value {
    json!({"goal": "g", "steps": [{"id": "a", "action": "noop", "args": {"x": "${input.a}".repeat(placeholders)}}]})
}

#[test]
fn validating_a_string_of_8000_placeholders_stays_within_a_few_megabytes() {
    let plan = plan_with(8_000);

    let peak = peak_during(|| {
        let report = validate_value(&plan, &StaticCatalog::builtin(), &Limits::default());
        assert!(report.valid, "{:#?}", report.diagnostics);
    });

    assert!(peak < 16 << 20, "validation of an 80 KB string peaked at {} MB", peak >> 20);
}

#[test]
fn a_megabyte_of_placeholders_is_validated_and_resolved_in_memory_linear_in_it() {
    let plan = plan_with(100_000);
    let scope = InputOnly(json!({"a": "z"}));

    let peak = peak_during(|| {
        let report = validate_value(&plan, &StaticCatalog::builtin(), &Limits::default());
        assert!(report.valid, "{:#?}", report.diagnostics);
        let resolved = resolve_args(&plan["steps"][0]["args"], &scope).unwrap();
        assert_eq!(resolved["x"].as_str().map(str::len), Some(100_000), "each placeholder became `z`");
    });

    assert!(peak < 160 << 20, "a 1 MB string of placeholders peaked at {} MB", peak >> 20);
}
