//! Pass 4: field values — time zone, `context.now`, `not_before`, timeouts, retry, approval.

use crate::diagnostic::{Code, Diagnostic};
use crate::plan::{Step, StepDefaults};
use crate::pointer;
use crate::retry::{RetryPolicy, validate_policy};
use crate::time_spec::{self, TimeSpec};
use crate::validate::Limits;
use crate::validate::shape::Parsed;

pub(crate) fn check(parsed: &Parsed, limits: &Limits, out: &mut Vec<Diagnostic>) {
    let context = &parsed.header.context;
    if let Some(name) = &context.timezone
        && let Err(e) = time_spec::zone(name)
    {
        let hint = "use an IANA time zone name such as `Asia/Shanghai` or `America/New_York`";
        out.push(Diagnostic::error(Code::InvalidTimezone, "/context/timezone", e.to_string()).hint(hint));
    }
    if let Some(now) = &context.now
        && now.parse::<jiff::Timestamp>().is_err()
    {
        let msg = format!("context.now `{now}` is not an RFC 3339 instant");
        out.push(Diagnostic::error(Code::InvalidTime, "/context/now", msg).hint("e.g. `2027-03-14T12:00:00Z`"));
    }
    if let Some(defaults) = &parsed.header.defaults {
        check_defaults(defaults, limits, out);
    }
    for slot in &parsed.slots {
        if let Some(step) = &slot.step {
            check_step(slot.index, step, limits, out);
        }
    }
}

fn check_defaults(defaults: &StepDefaults, limits: &Limits, out: &mut Vec<Diagnostic>) {
    check_timeout(defaults.timeout_ms, "/defaults/timeout_ms", "timeout_ms", None, limits, out);
    check_timeout(
        defaults.heartbeat_timeout_ms,
        "/defaults/heartbeat_timeout_ms",
        "heartbeat_timeout_ms",
        None,
        limits,
        out,
    );
    if let Some(retry) = &defaults.retry {
        check_retry(retry, "/defaults/retry", None, out);
    }
}

fn check_step(index: usize, step: &Step, limits: &Limits, out: &mut Vec<Diagnostic>) {
    let id = Some(step.id.as_str());
    let at = |field: &str| pointer::step_field(index, field);
    check_timeout(step.timeout_ms, &at("timeout_ms"), "timeout_ms", id, limits, out);
    check_timeout(step.heartbeat_timeout_ms, &at("heartbeat_timeout_ms"), "heartbeat_timeout_ms", id, limits, out);
    if let Some(retry) = &step.retry {
        check_retry(retry, &at("retry"), id, out);
    }
    if let Some(spec) = &step.not_before {
        check_not_before(spec, &at("not_before"), &step.id, out);
    }
    if let Some(approval) = &step.approval
        && approval.timeout_ms == Some(0)
    {
        let msg = format!("approval timeout of `{}` must be positive", step.id);
        out.push(
            Diagnostic::error(Code::InvalidApproval, format!("{}/timeout_ms", at("approval")), msg).step(&step.id),
        );
    }
}

fn check_timeout(
    value: Option<u64>,
    at: &str,
    field: &str,
    step: Option<&str>,
    limits: &Limits,
    out: &mut Vec<Diagnostic>,
) {
    let Some(ms) = value else { return };
    if (limits.min_timeout_ms..=limits.max_timeout_ms).contains(&ms) {
        return;
    }
    let msg = format!("{field} {ms} is outside {}..={} ms", limits.min_timeout_ms, limits.max_timeout_ms);
    let hint = format!("use a value between {} and {} milliseconds", limits.min_timeout_ms, limits.max_timeout_ms);
    let d = Diagnostic::error(Code::TimeoutOutOfRange, at, msg).hint(hint);
    out.push(match step {
        Some(id) => d.step(id),
        None => d,
    });
}

fn check_retry(retry: &RetryPolicy, at: &str, step: Option<&str>, out: &mut Vec<Diagnostic>) {
    for problem in validate_policy(retry) {
        let d = Diagnostic::error(Code::RetryInvalid, pointer::join(at, &[problem.field]), problem.message).hint(
            "retry needs max_attempts ≥ 1, intervals > 0, max_interval_ms ≥ initial_interval_ms, coefficient ≥ 1",
        );
        out.push(match step {
            Some(id) => d.step(id),
            None => d,
        });
    }
}

fn check_not_before(spec: &str, at: &str, step_id: &str, out: &mut Vec<Diagnostic>) {
    let zone_problem = match time_spec::parse(spec) {
        Err(e) => {
            let hint = "use an RFC 3339 instant, `in 90m` / `+2h`, or a local time like `tomorrow 08:00`";
            out.push(Diagnostic::error(Code::InvalidTime, at, e.to_string()).step(step_id).hint(hint));
            return;
        }
        Ok(TimeSpec::Local { zone: Some(zone), .. }) => time_spec::zone(&zone).err(),
        Ok(_) => None,
    };
    if let Some(e) = zone_problem {
        let hint = "use an IANA time zone name such as `Asia/Shanghai`";
        out.push(Diagnostic::error(Code::InvalidTimezone, at, e.to_string()).step(step_id).hint(hint));
    }
}
