//! `llm.chat`: one chat completion against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, a local
//! mock), through the client of `cairn-llm` (shared with the orchestrator's planner). Retries are the
//! orchestrator's job: the client does not retry, so a 429 or 5xx is reported at once instead of being retried
//! inside the attempt.

use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage,
    CreateChatCompletionRequest,
};
use cairn_core::catalog::Effect;
use cairn_core::failure::codes;
pub use cairn_llm::LlmConfig;
use cairn_llm::OpenAiClient;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::transport::{self, Exchange};
use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// Args of `llm.chat`: `prompt`, `messages`, or both (the prompt is appended as the last user message).
/// Unknown fields are ignored, as the catalog schema allows them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct LlmArgs {
    /// A user message.
    pub prompt: Option<String>,
    /// OpenAI chat messages (`{"role": "user", "content": "…"}`, any role the API accepts).
    pub messages: Option<Vec<Value>>,
    /// A system message put first.
    pub system: Option<String>,
    /// Model; default [`LlmConfig::model`].
    pub model: Option<String>,
    /// Upper bound on generated tokens (sent as `max_completion_tokens`).
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Sampling temperature (0–2).
    #[schemars(range(min = 0.0))]
    pub temperature: Option<f32>,
}

/// Token counts of one completion (zeros when the server reports none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LlmUsage {
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Sum of both.
    pub total_tokens: u32,
}

/// Output of `llm.chat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LlmOutput {
    /// The first choice's message text (`""` when it has none, e.g. a refusal or tool call).
    pub text: String,
    /// The model that answered, as reported by the server.
    pub model: String,
    /// Token usage.
    pub usage: LlmUsage,
    /// Why generation stopped (`stop`, `length`, …), when reported.
    pub finish_reason: Option<String>,
}

/// `llm.chat` {prompt? | messages?, system?, model?, max_tokens?, temperature?} → {text, model, usage}.
///
/// Errors: 401/403 → permanent `unauthorized`; 404 (unknown model) → permanent `not_found`; 429 → retryable
/// `rate_limited` (permanent when the error type is `insufficient_quota`); 5xx and connection failures →
/// retryable (nothing sent: `did_not_take_effect`; lost after the request: `transport_error`, see `transport`);
/// other 4xx, an unparseable response or no choices → permanent; neither `prompt` nor `messages`, or a malformed
/// message → permanent `invalid_args`. Cancellation or the deadline aborts the request.
#[derive(Debug)]
pub struct LlmChat {
    model: String,
    client: Result<OpenAiClient, String>,
}

impl LlmChat {
    /// An `llm.chat` talking to `config.base_url`.
    pub fn new(config: LlmConfig) -> Self {
        // The workers' HTTP stack, not `cairn_llm::client`'s: its redirect policy records what `send_error`
        // needs to tell a request that was never sent from one that may have been.
        let client = transport::builder(None)
            .build()
            .map(|http| cairn_llm::client_over(&config, http))
            .map_err(|e| e.to_string());
        Self { model: config.model, client }
    }
}

fn invalid(message: String) -> ActionError {
    ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect()
}

/// The request's messages: system, then `messages`, then `prompt`.
fn messages(args: &mut LlmArgs) -> Result<Vec<ChatCompletionRequestMessage>, ActionError> {
    let mut out: Vec<ChatCompletionRequestMessage> = Vec::new();
    if let Some(system) = &args.system {
        out.push(ChatCompletionRequestSystemMessage::from(system.as_str()).into());
    }
    for (i, message) in args.messages.take().unwrap_or_default().into_iter().enumerate() {
        let message = serde_json::from_value(message).map_err(|e| invalid(format!("messages[{i}]: {e}")))?;
        out.push(message);
    }
    if let Some(prompt) = args.prompt.take() {
        out.push(ChatCompletionRequestUserMessage::from(prompt).into());
    }
    if out.iter().all(|m| matches!(m, ChatCompletionRequestMessage::System(_))) {
        return Err(invalid("llm.chat needs `prompt` or `messages`".into()));
    }
    Ok(out)
}

/// Classifies an async-openai failure as documented on [`LlmChat`]; a request without an answer as every HTTP
/// action does (`transport::send_error`).
fn llm_error(error: OpenAIError, exchange: Exchange) -> ActionError {
    match error {
        OpenAIError::ApiError(response) => {
            let message = format!("llm.chat: {response}");
            let quota = response.api_error.r#type.as_deref() == Some("insufficient_quota");
            match response.status_code.as_u16() {
                401 | 403 => ActionError::permanent(codes::UNAUTHORIZED, message),
                404 => ActionError::permanent(codes::NOT_FOUND, message),
                429 if quota => ActionError::permanent(codes::RATE_LIMITED, message),
                429 => ActionError::retryable(codes::RATE_LIMITED, message),
                408 => ActionError::retryable(codes::TIMEOUT, message),
                500..=599 => ActionError::retryable(codes::ACTION_ERROR, message),
                _ => ActionError::permanent(codes::ACTION_ERROR, message),
            }
        }
        OpenAIError::Reqwest(error) => transport::send_error("llm.chat", &error, exchange),
        OpenAIError::InvalidArgument(message) => invalid(format!("llm.chat: {message}")),
        other => ActionError::permanent(codes::ACTION_ERROR, format!("llm.chat: {other}")),
    }
}

impl Action for LlmChat {
    type Args = LlmArgs;
    type Output = LlmOutput;
    const NAME: &'static str = "llm.chat";
    const DESCRIPTION: &'static str = "Chat completion against an OpenAI-compatible endpoint; output text and usage.";
    const EFFECT: Effect = Effect::Read;

    async fn run(&self, mut args: LlmArgs, ctx: &ActionContext) -> Result<LlmOutput, ActionError> {
        let client = self.client.as_ref().map_err(|e| {
            ActionError::permanent(codes::ACTION_ERROR, format!("HTTP client unavailable: {e}")).did_not_take_effect()
        })?;
        let request = CreateChatCompletionRequest {
            messages: messages(&mut args)?,
            model: args.model.unwrap_or_else(|| self.model.clone()),
            max_completion_tokens: args.max_tokens,
            temperature: args.temperature,
            ..Default::default()
        };
        let chat = client.chat();
        let (sent, exchange) = transport::race(ctx, transport::exchange(chat.create(request))).await?;
        let response = sent.map_err(|e| llm_error(e, exchange))?;
        let Some(choice) = response.choices.into_iter().next() else {
            return Err(ActionError::permanent(codes::ACTION_ERROR, "llm.chat: the response has no choices"));
        };
        let finish_reason =
            choice.finish_reason.and_then(|r| serde_json::to_value(r).ok()).and_then(|v| v.as_str().map(str::to_owned));
        let usage = response.usage.map_or_else(LlmUsage::default, |u| LlmUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
        });
        Ok(LlmOutput { text: choice.message.content.unwrap_or_default(), model: response.model, usage, finish_reason })
    }
}
