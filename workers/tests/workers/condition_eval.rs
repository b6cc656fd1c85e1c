//! `condition.eval`: CEL over `vars` (bound as `input`).

use crate::support;

use cairn_workers::action::{Action, ActionError};
use cairn_workers::actions::ConditionEval;
use cairn_workers::actions::condition::ConditionArgs;
use serde_json::{Value, json};

async fn eval(value: Value) -> Result<bool, ActionError> {
    let args: ConditionArgs = serde_json::from_value(value).expect("args fit the schema");
    ConditionEval.run(args, &support::ctx("check")).await.map(|out| out.matched)
}

#[tokio::test]
async fn vars_are_visible_as_input() {
    assert_eq!(eval(json!({"expr": "input.p >= 50", "vars": {"p": 80}})).await, Ok(true));
    assert_eq!(eval(json!({"expr": "input.p >= 50", "vars": {"p": 20.5}})).await, Ok(false));
    let city =
        json!({"expr": "input.city == 'Wuhan' && size(input.days) == 2", "vars": {"city": "Wuhan", "days": [1, 2]}});
    assert_eq!(eval(city).await, Ok(true));
}

#[tokio::test]
async fn an_expression_interpolated_by_the_orchestrator_needs_no_vars() {
    assert_eq!(eval(json!({"expr": "80 >= 50"})).await, Ok(true), "`$weather.p >= 50` arrives as `80 >= 50`");
}

#[tokio::test]
async fn invalid_cel_is_a_permanent_invalid_args() {
    let err = eval(json!({"expr": "input.p >= "})).await.expect_err("syntax error");
    assert_eq!(err.code, "invalid_args");
    assert!(!err.retryable && err.did_not_take_effect);
}

#[tokio::test]
async fn evaluation_failures_are_permanent_condition_errors() {
    let missing = eval(json!({"expr": "input.nope > 1", "vars": {}})).await.expect_err("missing key");
    assert_eq!(missing.code, "condition_error");
    assert!(!missing.retryable, "evaluation is deterministic");
    let not_bool = eval(json!({"expr": "input.p + 1", "vars": {"p": 1}})).await.expect_err("an int");
    assert_eq!(not_bool.code, "condition_error");
    let steps = eval(json!({"expr": "steps.weather.output.p > 1"})).await.expect_err("no steps here");
    assert!(steps.message.contains("placeholders"), "the message says how to read another step: {}", steps.message);
}

#[tokio::test]
async fn a_poison_expression_fails_the_attempt_with_invalid_args_instead_of_killing_the_worker() {
    // 10,000 `1 +` terms overflowed the stack of the thread evaluating them, aborting the worker process with
    // every attempt it ran; the interpolated form reaches the worker unchecked, so the worker bounds it too.
    let poison = format!("{} == 0", vec!["1"; 10_000].join(" + "));

    let err = eval(json!({"expr": poison})).await.expect_err("refused");

    assert_eq!(err.code, "invalid_args");
    assert!(!err.retryable && err.did_not_take_effect, "nothing ran, and it would fail again");
    assert!(err.message.contains("too complex") && err.message.len() < 600, "{}", err.message);
}
