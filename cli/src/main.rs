//! `cairn`: the command line of the Cairn workflow orchestrator.
//!
//! Thin by design: parse arguments, call the library crates, map outcomes to exit codes.
//! Exit codes: 0 success, 1 the subject is invalid or failed, 2 usage or I/O error.

mod command;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Cairn: a durable workflow orchestrator for plans written by agents, people and programs.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate plan files (JSON or YAML; `-` reads stdin) and print every diagnostic.
    Validate(command::validate::Args),
    /// Print a JSON Schema (`plan`: the plan format; `actions`: the built-in actions' specs).
    Schema(command::schema::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Validate(args) => command::validate::run(&args),
        Command::Schema(args) => command::schema::run(&args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
