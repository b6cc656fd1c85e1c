//! `cairn validate FILE…`: static validation with readable or JSON output.
//!
//! Offline (the default) plans are checked against Cairn's built-in actions, so an action of your own is
//! `unknown_action`. `--server URL` checks against the catalog a running orchestrator holds (built-ins and every
//! action a worker registered; token from `CAIRN_API_TOKEN`), `--catalog FILE` against a file in the
//! `GET /v1/actions` format (`{"actions": [spec, …]}`, or the array alone). With `--server`, the literal recipients
//! a plan sends to are looked up too (`GET /v1/recipients/{id}`), so a missing one is `unknown_recipient` as at
//! submit.
//!
//! Exit 0 when every file is valid, 1 when any is invalid, 2 when a file cannot be read or the server cannot be
//! reached.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use cairn_core::catalog::{ActionCatalog, ActionSpec, CatalogEntry, StaticCatalog};
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
    /// Validate against the action catalog of the orchestrator at this REST API URL (e.g.
    /// `http://127.0.0.1:7400`; token from `CAIRN_API_TOKEN`).
    #[arg(long, conflicts_with = "catalog")]
    server: Option<String>,
    /// Validate against the actions in this file (the `GET /v1/actions` format).
    #[arg(long)]
    catalog: Option<PathBuf>,
}

/// Validates every file; see the module docs for exit codes.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let catalog = catalog(args)?;
    let limits = Limits { max_steps: args.max_steps, ..Limits::default() };
    let mut all_valid = true;
    for file in &args.files {
        let (name, text) = read(file)?;
        let format = Format::detect(Some(&name), &text);
        let known = match &args.server {
            Some(server) => KnownRecipients::of(server, &text, format, &catalog)?,
            None => KnownRecipients::default(),
        };
        let report = validate_text(&text, format, &WithRecipients { catalog: &catalog, known }, &limits);
        all_valid &= report.valid;
        match args.format {
            OutputFormat::Json => print_json(&name, &report)?,
            OutputFormat::Text => print_text(&name, &report),
        }
        let offline = args.server.is_none() && args.catalog.is_none();
        if offline && report.diagnostics.iter().any(|d| d.code == cairn_core::diagnostic::Code::UnknownAction) {
            // On stderr, so `--format json` output stays one object per file.
            eprintln!(
                "note: validated offline against Cairn's built-in actions; for actions of your own, validate against \
                 the orchestrator's catalog with `--server URL` (token from CAIRN_API_TOKEN) or a saved \
                 `GET /v1/actions` with `--catalog FILE`"
            );
        }
    }
    Ok(crate::exit::code(if all_valid { crate::exit::OK } else { crate::exit::NOT_VALID }))
}

/// Most recipients looked up per plan, as the orchestrator does at submit.
const MAX_RECIPIENTS_LOOKED_UP: usize = 1000;

/// The literal recipient ids of one plan that were asked of the server, and which of them exist.
#[derive(Debug, Default)]
struct KnownRecipients {
    checked: Vec<String>,
    existing: Vec<String>,
}

impl KnownRecipients {
    /// Asks `server` for each literal recipient of the plan in `text` (one it cannot parse names none).
    fn of(server: &str, text: &str, format: Format, catalog: &StaticCatalog) -> anyhow::Result<Self> {
        let Ok(plan) = cairn_core::document::parse(text, format) else { return Ok(Self::default()) };
        let checked = cairn_core::recipient::literal_ids(&plan, catalog, MAX_RECIPIENTS_LOOKED_UP);
        if checked.is_empty() {
            return Ok(Self::default());
        }
        let token = std::env::var("CAIRN_API_TOKEN").ok().filter(|t| !t.is_empty()).map(Into::into);
        let client = crate::client::Client::new(server, token)?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let existing = runtime.block_on(async {
            let mut existing = Vec::new();
            for id in &checked {
                let (status, body) = client.call(reqwest::Method::GET, &format!("/v1/recipients/{id}"), None).await?;
                match status.as_u16() {
                    200 => existing.push(id.clone()),
                    404 => {}
                    _ => {
                        crate::client::ok(status, body)?;
                    }
                }
            }
            anyhow::Ok(existing)
        })?;
        Ok(Self { checked, existing })
    }
}

/// A catalog that also knows which recipients exist.
struct WithRecipients<'a> {
    catalog: &'a StaticCatalog,
    known: KnownRecipients,
}

impl ActionCatalog for WithRecipients<'_> {
    fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.catalog.get(name)
    }
    fn names(&self) -> Vec<&str> {
        self.catalog.names()
    }
    fn recipient_exists(&self, id: &str) -> Option<bool> {
        self.known.checked.iter().any(|c| c == id).then(|| self.known.existing.iter().any(|e| e == id))
    }
}

/// The actions to validate against: the built-ins, or a server's or a file's catalog.
fn catalog(args: &Args) -> anyhow::Result<StaticCatalog> {
    let listed = if let Some(server) = &args.server {
        let token = std::env::var("CAIRN_API_TOKEN").ok().filter(|t| !t.is_empty()).map(Into::into);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async { crate::client::Client::new(server, token)?.get("/v1/actions").await })?
    } else if let Some(file) = &args.catalog {
        let (name, text) = read(file)?;
        serde_json::from_str(&text).with_context(|| format!("{name} is not JSON"))?
    } else {
        return Ok(StaticCatalog::builtin());
    };
    let specs = listed.get("actions").unwrap_or(&listed).clone();
    let specs: Vec<ActionSpec> =
        serde_json::from_value(specs).context("the catalog is not a list of action specs (GET /v1/actions)")?;
    // A catalog from an older server may lack built-ins: they are always accepted.
    let mut all: std::collections::BTreeMap<String, ActionSpec> =
        cairn_core::catalog::builtin_specs().into_iter().map(|s| (s.name.clone(), s)).collect();
    all.extend(specs.into_iter().map(|s| (s.name.clone(), s)));
    Ok(StaticCatalog::new(all.into_values())?)
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
