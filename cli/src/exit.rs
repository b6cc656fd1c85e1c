//! The exit codes of every `cairn` command, in one table (README, "Exit codes").

use std::process::ExitCode;

/// The command did what was asked; a followed run succeeded.
pub const OK: u8 = 0;
/// A followed run failed (`run`, `watch`).
pub const RUN_FAILED: u8 = 1;
/// `validate`: a plan is invalid (the diagnostics are printed).
pub const NOT_VALID: u8 = 1;
/// The command could not do it: bad usage, the server unreachable or refusing (with its message).
pub const ERROR: u8 = 2;
/// A followed run was cancelled.
pub const RUN_CANCELLED: u8 = 3;
/// `run`, `submit`, `schedule create`: the server refused the plan as invalid (its diagnostics are printed).
pub const INVALID_PLAN: u8 = 4;
/// `run`, `watch`: stopped following with ctrl-c or SIGTERM; the run goes on (128 + SIGINT, as shells report).
pub const INTERRUPTED: u8 = 130;

/// `code` as the process's exit code.
pub fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}
