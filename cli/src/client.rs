//! A small client of the REST API for the CLI's client commands (`submit`, `runs`, `show`, `logs`, …).

use anyhow::{Context, bail};
use cairn_orchestrator::secret::{ExposeSecret, SecretString};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Talks to one orchestrator's REST API.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<SecretString>,
    http: reqwest::Client,
}

impl Client {
    /// A client of `base` (e.g. `http://127.0.0.1:7400`).
    pub fn new(base: &str, token: Option<SecretString>) -> anyhow::Result<Self> {
        cairn_workers::actions::install_crypto_provider();
        let http = reqwest::Client::builder().build().context("building the HTTP client")?;
        Ok(Self { base: base.trim_end_matches('/').to_owned(), token, http })
    }

    /// Sends a request and returns the status with the JSON body.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<(StatusCode, Value)> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token.expose_secret());
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.with_context(|| format!("cannot reach the Cairn server at {}", self.base))?;
        let status = resp.status();
        let text = resp.text().await.context("reading the response")?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// GET expecting success.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let (status, body) = self.call(Method::GET, path, None).await?;
        ok(status, body)
    }

    /// POST expecting success.
    pub async fn post(&self, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let (status, body) = self.call(Method::POST, path, body).await?;
        ok(status, body)
    }
}

/// The body of a successful answer; the server's error, with its diagnostics, otherwise.
pub(crate) fn ok(status: StatusCode, body: Value) -> anyhow::Result<Value> {
    if status.is_success() {
        return Ok(body);
    }
    let code = body.get("code").and_then(Value::as_str).unwrap_or("error");
    let message = body.get("message").and_then(Value::as_str).unwrap_or("request failed");
    // Diagnostics (invalid plans, invalid repaired args) say what was wrong and where.
    let mut lines = String::new();
    for d in body["details"]["diagnostics"].as_array().into_iter().flatten() {
        let at = d["pointer"].as_str().unwrap_or_default();
        let said = d["message"].as_str().unwrap_or_default();
        lines.push_str(&format!("\n  {} at {at}: {said}", d["code"].as_str().unwrap_or("error")));
    }
    bail!("{status}: {code}: {message}{lines}")
}
