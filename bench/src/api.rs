//! The REST calls the bench makes to an orchestrator it started: JSON requests with the bench's API token,
//! submitting plans of `noop` steps, and the figures it reads from `/metrics`.

use std::time::Instant;

use anyhow::{Context, bail};
use cairn_orchestrator::secret::{ExposeSecret, SecretString};
use reqwest::RequestBuilder;
use serde_json::{Value, json};

/// One orchestrator's REST API.
pub(crate) struct Api {
    base: String,
    token: SecretString,
    http: reqwest::Client,
}

impl Api {
    /// The API at `base` (`http://127.0.0.1:PORT`), called with `token`.
    pub(crate) fn new(base: String, token: SecretString) -> anyhow::Result<Self> {
        cairn_llm::install_crypto_provider();
        let http = reqwest::Client::builder().build().context("building the HTTP client")?;
        Ok(Self { base, token, http })
    }

    /// `GET path`, expecting a JSON success.
    pub(crate) async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let text = self.text(path).await?;
        serde_json::from_str(&text).with_context(|| format!("GET {path} answered no JSON"))
    }

    /// `GET path`, expecting a success in text (`/healthz`, the Prometheus text of `/metrics`).
    pub(crate) async fn text(&self, path: &str) -> anyhow::Result<String> {
        self.send(self.http.get(format!("{}{path}", self.base))).await
    }

    /// `POST path` with a JSON body, expecting a JSON success.
    pub(crate) async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let text = self.send(self.http.post(format!("{}{path}", self.base)).json(body)).await?;
        serde_json::from_str(&text).with_context(|| format!("POST {path} answered no JSON"))
    }

    /// Sends with the token; the body of a success, or an error naming the API's `code` and `message`.
    async fn send(&self, request: RequestBuilder) -> anyhow::Result<String> {
        let response = request
            .bearer_auth(self.token.expose_secret())
            .send()
            .await
            .with_context(|| format!("cannot reach the orchestrator at {}", self.base))?;
        let status = response.status();
        let text = response.text().await.context("reading the response")?;
        if status.is_success() {
            return Ok(text);
        }
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let code = body.get("code").and_then(Value::as_str).unwrap_or("error");
        let message = body.get("message").and_then(Value::as_str).unwrap_or(&text);
        bail!("{status}: {code}: {message}")
    }

    /// Submits a plan of `steps` and returns its run id and the client-side submit instant.
    pub(crate) async fn submit(&self, goal: &str, steps: Vec<Value>) -> anyhow::Result<(String, Instant)> {
        let plan = json!({"version": "cairn/v1", "goal": goal, "steps": steps});
        let started = Instant::now();
        let view = self.post("/v1/runs", &json!({"plan": plan})).await.context("submitting the plan")?;
        let id = view["id"].as_str().context("submit answered without a run id")?.to_owned();
        Ok((id, started))
    }

    /// Runs pending or running, as `/metrics` reports them (0 when it lists none).
    pub(crate) async fn active_runs(&self) -> anyhow::Result<f64> {
        let text = self.text("/metrics").await?;
        Ok(text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("cairn_runs{status=\"pending\"} ")
                    .or_else(|| l.strip_prefix("cairn_runs{status=\"running\"} "))
            })
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum::<f64>())
    }
}

/// A `noop` step depending on `deps`.
pub(crate) fn noop(id: &str, deps: &[String]) -> Value {
    json!({"id": id, "action": "noop", "args": {}, "depends_on": deps})
}
