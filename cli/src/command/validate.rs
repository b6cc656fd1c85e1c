//! `cairn validate FILE…`: static validation with readable or JSON output.
//!
//! Exit 0 when every file is valid, 1 when any is invalid, 2 when a file cannot be read.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use cairn_core::catalog::StaticCatalog;
use cairn_core::diagnostic::{Diagnostic, Severity};
use cairn_core::document::Format;
use cairn_core::validate::{Limits, Report, validate_text};

/// Output format.
#[derive(Debug, Clone, Copy, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Human-readable diagnostics.
    #[default]
    Text,
    /// One `{"file", "valid", "diagnostics"}` object per file, one per line.
    Json,
}

/// Arguments of `cairn validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Plan files (JSON or YAML by extension or content); `-` reads standard input.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
    /// Maximum steps per plan.
    #[arg(long, default_value_t = Limits::default().max_steps)]
    max_steps: usize,
}

/// Validates every file; see the module docs for exit codes.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let catalog = StaticCatalog::builtin();
    let limits = Limits { max_steps: args.max_steps, ..Limits::default() };
    let mut all_valid = true;
    for file in &args.files {
        let (name, text) = read(file)?;
        let format = Format::detect(Some(&name), &text);
        let report = validate_text(&text, format, &catalog, &limits);
        all_valid &= report.valid;
        match args.format {
            OutputFormat::Json => print_json(&name, &report)?,
            OutputFormat::Text => print_text(&name, &report),
        }
    }
    Ok(if all_valid { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn read(file: &PathBuf) -> anyhow::Result<(String, String)> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading the plan from standard input")?;
        return Ok(("<stdin>".into(), text));
    }
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let text = String::from_utf8(bytes).with_context(|| format!("{} is not valid UTF-8", file.display()))?;
    Ok((file.display().to_string(), text))
}

fn print_json(name: &str, report: &Report) -> anyhow::Result<()> {
    let value = serde_json::json!({"file": name, "valid": report.valid, "diagnostics": report.diagnostics});
    out!("{}", serde_json::to_string(&value)?);
    Ok(())
}

fn print_text(name: &str, report: &Report) {
    let errors = report.errors().count();
    let warnings = report.diagnostics.len() - errors;
    if report.valid {
        out!("{name}: valid ({warnings} warning(s))");
    } else {
        out!("{name}: invalid ({errors} error(s), {warnings} warning(s))");
    }
    for d in &report.diagnostics {
        out!("{}", render(d));
    }
}

fn render(d: &Diagnostic) -> String {
    let severity = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let step = d.step_id.as_deref().map(|s| format!(" step `{s}`")).unwrap_or_default();
    let at = if d.pointer.is_empty() { "/".to_owned() } else { d.pointer.clone() };
    let mut out = format!("  {severity}[{}]{step} at {at}\n    {}", d.code.as_str(), d.message);
    if let Some(hint) = &d.hint {
        out.push_str(&format!("\n    hint: {hint}"));
    }
    out
}
