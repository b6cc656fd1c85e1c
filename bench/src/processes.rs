//! The processes `cairn bench` runs: orchestrators (`cairn serve`) and workers (`cairn worker --actions noop`),
//! each with its log files in the bench's temporary directory, all killed when the bench ends.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cairn_orchestrator::secret::{DatabaseUrl, ExposeSecret};
use serde_json::Value;

use crate::api::Api;

/// An orchestrator process the bench started.
pub(super) struct Orchestrator {
    /// Its REST API, with the bench's API token.
    pub(super) api: Api,
    /// Its worker protocol address, `http://127.0.0.1:PORT`.
    grpc_url: String,
}

/// The spawned processes and their log directory. Kills the processes when dropped (also on error paths).
pub(super) struct Processes {
    /// The `cairn` executable.
    cairn: PathBuf,
    /// `CAIRN_MAX_STEPS` of the orchestrators.
    max_plan_steps: usize,
    children: Vec<Child>,
    /// Pid of the first orchestrator (the one `memory` measures).
    first_serve: Option<u32>,
    dir: PathBuf,
    /// Keep the logs (and the SQLite file) after the processes are killed.
    pub(super) keep_dir: bool,
    api_token: String,
    worker_token: String,
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if self.keep_dir {
            eprintln!("cairn bench: process logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Processes {
    /// Runs `cairn` with `dir` for the logs, which are kept unless the bench ends well ([`Processes::keep_dir`]);
    /// orchestrators accept plans of up to `max_plan_steps`.
    pub(super) fn new(cairn: PathBuf, dir: PathBuf, max_plan_steps: usize) -> anyhow::Result<Processes> {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Processes {
            cairn,
            max_plan_steps,
            children: Vec::new(),
            first_serve: None,
            dir,
            keep_dir: true,
            api_token: token("api"),
            worker_token: token("worker"),
        })
    }

    /// Pid of the first orchestrator started.
    pub(super) fn first_serve_pid(&self) -> u32 {
        self.first_serve.unwrap_or_default()
    }

    /// Starts orchestrator number `i` over `db` on free ports and waits until its API answers.
    pub(super) async fn serve(&mut self, i: usize, db: &DatabaseUrl) -> anyhow::Result<Orchestrator> {
        let (http, grpc) = (free_port()?, free_port()?);
        let suffix = if i == 0 { String::new() } else { format!("-{i}") };
        let mut child = self
            .command(&format!("serve{suffix}"))?
            .args(["serve", "--http", &format!("127.0.0.1:{http}"), "--grpc", &format!("127.0.0.1:{grpc}")])
            // In the environment rather than as `--db`: the process list shows arguments, and the URL may hold
            // a password.
            .env("CAIRN_DB", db.expose_secret())
            .env("CAIRN_API_TOKEN", &self.api_token)
            .env("CAIRN_MAX_STEPS", self.max_plan_steps.to_string())
            .spawn()
            .context("starting `cairn serve`")?;
        let api = Api::new(format!("http://127.0.0.1:{http}"), self.api_token.as_str().into())?;
        let healthy = wait_healthy(&api, &mut child).await;
        self.first_serve.get_or_insert(child.id());
        self.children.push(child);
        healthy?;
        Ok(Orchestrator { api, grpc_url: format!("http://127.0.0.1:{grpc}") })
    }

    /// Starts worker number `i` with `concurrency` slots, polling `orchestrator`.
    pub(super) fn worker(&mut self, i: usize, orchestrator: &Orchestrator, concurrency: usize) -> anyhow::Result<()> {
        let child = self
            .command(&format!("worker-{i}"))?
            .args(["worker", "--server", &orchestrator.grpc_url])
            .args(["--concurrency", &concurrency.to_string(), "--actions", "noop"])
            .args(["--id", &format!("bench-worker-{i}")])
            .spawn()
            .context("starting `cairn worker`")?;
        self.children.push(child);
        Ok(())
    }

    /// The `cairn` executable, with the worker token, `RUST_LOG` (default `warn`), no stdin, and its output in
    /// `NAME.log` and `NAME.err` in the bench's directory.
    fn command(&self, name: &str) -> anyhow::Result<Command> {
        let mut command = Command::new(&self.cairn);
        command
            .env("CAIRN_WORKER_TOKEN", &self.worker_token)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(self.log(&format!("{name}.log"))?)
            .stderr(self.log(&format!("{name}.err"))?);
        Ok(command)
    }

    fn log(&self, name: &str) -> anyhow::Result<Stdio> {
        let file = std::fs::File::create(self.dir.join(name)).with_context(|| format!("creating log {name}"))?;
        Ok(Stdio::from(file))
    }
}

/// A free TCP port on 127.0.0.1 (bound then released; the orchestrator binds it right after).
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// A throwaway token, unique enough for one local benchmark.
fn token(kind: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("bench-{kind}-{}-{nanos:x}", std::process::id())
}

async fn wait_healthy(api: &Api, serve: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if api.text("/healthz").await.is_ok() {
            return Ok(());
        }
        if let Some(status) = serve.try_wait()? {
            bail!("`cairn serve` exited with {status} before becoming healthy (see its logs)");
        }
        if Instant::now() > deadline {
            bail!("`cairn serve` did not answer /healthz within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `noop` is registered and the orchestrator counts `workers` connected workers (at most 30 s; at
/// once when it should have none).
pub(super) async fn wait_workers(api: &Api, workers: usize) -> anyhow::Result<()> {
    if workers == 0 {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let actions = api.get("/v1/actions").await?;
        let has_noop = actions["actions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s.get("name").and_then(Value::as_str) == Some("noop")));
        let connected = api
            .text("/metrics")
            .await?
            .lines()
            .find_map(|l| l.strip_prefix("cairn_connected_workers "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        #[allow(clippy::cast_precision_loss)]
        if has_noop && connected >= workers as f64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            if has_noop {
                eprintln!("cairn bench: only {connected} of {workers} workers seen after 30 s; going on");
                return Ok(());
            }
            bail!("no worker registered `noop` within 30 s (see the worker logs)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
