//! `cairn schema plan|actions`: the JSON Schemas planners and tools build on.

use std::process::ExitCode;

use cairn_core::catalog::builtin_specs;
use cairn_core::plan::plan_schema;

/// Which schema to print.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Subject {
    /// The `cairn/v1` plan format.
    Plan,
    /// The built-in actions: name, description, args and output schemas, effect.
    Actions,
}

/// Arguments of `cairn schema`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to print.
    #[arg(value_enum)]
    subject: Subject,
}

/// Prints the schema as pretty JSON.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let value = match args.subject {
        Subject::Plan => plan_schema(),
        Subject::Actions => serde_json::to_value(builtin_specs())?,
    };
    out!("{}", serde_json::to_string_pretty(&value)?);
    Ok(ExitCode::SUCCESS)
}
