//! `cairn-llm`: the OpenAI-compatible chat completions client of Cairn. The `llm.chat` action (in
//! `cairn-workers`) and the orchestrator's planner build theirs here from one [`LlmConfig`], so one
//! configuration (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `CAIRN_LLM_MODEL`) means one behaviour, and the
//! orchestrator needs no worker code to draft plans.
//!
//! Retries are the caller's job (the orchestrator's for `llm.chat`, the planner's repair loop for drafts): the
//! client's own retry layer is removed, so a 429 or 5xx is reported at once instead of being retried inside a
//! call whose deadline the caller set.

use async_openai::config::OpenAIConfig;
use async_openai::middleware::ReqwestService;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// The async-openai client type every Cairn caller holds.
pub type OpenAiClient = async_openai::Client<OpenAIConfig>;

/// `User-Agent` of requests made by [`client`] (`llm.chat` sends the workers' own).
pub const USER_AGENT: &str = concat!("cairn/", env!("CARGO_PKG_VERSION"));

/// Which endpoint, key and default model to use.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct LlmConfig {
    /// API base including the version, like `OPENAI_BASE_URL`: requests go to `{base_url}/chat/completions`.
    /// Default `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; `None` sends none (local servers). A secret: `Debug` prints `[REDACTED]`.
    pub api_key: Option<SecretString>,
    /// Model used when a request names none. Default `gpt-4o-mini`.
    pub model: String,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self { base_url: "https://api.openai.com/v1".into(), api_key: None, model: "gpt-4o-mini".into() }
    }
}

/// Installs rustls' `ring` crypto provider as the process default, once. Every reqwest or async-openai client
/// needs a provider (the workspace builds them with `rustls-no-provider`); calling this again, or after someone
/// else installed a provider, does nothing.
pub fn install_crypto_provider() {
    // `Err` only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client for `config` over `http`, which must have been built after [`install_crypto_provider`]. A caller
/// that classifies transport failures itself passes a client of its own (`llm.chat` passes one whose redirect
/// policy records what it needs); the client does not retry (see the crate docs).
pub fn client_over(config: &LlmConfig, http: reqwest::Client) -> OpenAiClient {
    let key = config.api_key.as_ref().map(ExposeSecret::expose_secret).unwrap_or_default();
    let openai = OpenAIConfig::new()
        .with_api_base(config.base_url.trim_end_matches('/'))
        .with_api_key(key)
        .with_org_id("")
        .with_project_id("");
    // `build` installs a retrying executor; the plain service replaces it (see the crate docs).
    async_openai::Client::build(http.clone(), openai).with_http_service(ReqwestService::new(http))
}

/// The client for `config` over a reqwest client with [`USER_AGENT`] and reqwest's defaults; installs the
/// crypto provider first.
///
/// # Errors
/// The HTTP client cannot be built (no TLS backend); not retryable.
pub fn client(config: &LlmConfig) -> Result<OpenAiClient, reqwest::Error> {
    install_crypto_provider();
    let http = reqwest::Client::builder().user_agent(USER_AGENT).build()?;
    Ok(client_over(config, http))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_key_never_appears_in_debug_output() {
        let config = LlmConfig { api_key: Some("sk-live-4f9a2c".into()), ..LlmConfig::default() };

        let printed = format!("{config:?}");

        assert!(!printed.contains("sk-live-4f9a2c"), "the key is redacted: {printed}");
        assert!(printed.contains("api.openai.com") && printed.contains("gpt-4o-mini"), "the rest shows: {printed}");
    }

    #[test]
    fn the_key_is_read_from_configuration_and_still_reaches_the_client() {
        let config: LlmConfig =
            serde_json::from_value(serde_json::json!({"api_key": "sk-from-file"})).expect("a valid config");

        assert_eq!(config.api_key.as_ref().map(ExposeSecret::expose_secret), Some("sk-from-file"));
        assert_eq!(config.model, "gpt-4o-mini", "unset fields keep their defaults");
        assert!(client(&config).is_ok(), "a client is built over the default HTTP stack");
    }
}
