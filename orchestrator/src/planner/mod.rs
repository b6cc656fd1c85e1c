//! The planner: a request in natural language → a validated `cairn/v1` plan, drafted by any OpenAI-compatible
//! chat completions endpoint and checked by Cairn, never trusted.
//!
//! A model can write a plan; it cannot promise the plan is well-formed, acyclic, uses registered actions, or
//! mentions only the city the user said. So every draft goes through [`cairn_core::validate`] and, when it has
//! errors, back to the model with the diagnostics for another round, at most `max_rounds` times. Every round is
//! recorded so a user can see why the final plan looks as it does. Module map:
//! - [`prompt`]: the system prompt (registered actions, the plan JSON Schema, the rules), the request and
//!   repair messages, and the JSON-schema `response_format`.
//! - [`repair`]: one round's check of the model's output: size cap, strict parse, `context` overwrite,
//!   validation (grounding included, also through `$input`), and the feedback for the next round.
//!
//! The client is `cairn-llm`'s, the one `llm.chat` uses, built from the same [`LlmConfig`]. The planner only drafts: it never submits or executes anything; callers decide.

pub mod prompt;
pub mod repair;

use std::time::Duration;

use async_openai::error::OpenAIError;
use async_openai::types::chat::CreateChatCompletionRequest;
use cairn_core::catalog::{ActionCatalog, ActionSpec};
use cairn_core::diagnostic::Diagnostic;
use cairn_core::validate::Limits;
use cairn_llm::{LlmConfig, OpenAiClient};
use serde::Serialize;
use serde_json::Value;

use repair::{Check, Verdict};

/// Rounds (model calls) per draft unless the request says otherwise.
pub const DEFAULT_MAX_ROUNDS: usize = 3;
/// The most rounds a request may ask for: each is a paid model call.
pub const MAX_ROUNDS_LIMIT: usize = 10;
/// Largest model output accepted, in bytes (a plan of the default 1000 steps fits comfortably).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Largest request text accepted, in bytes.
pub const MAX_REQUEST_TEXT_BYTES: usize = 16 * 1024;
/// Time one model call may take before the draft fails (local models on CPUs are slow).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(180);

/// Drafts plans through one chat completions endpoint.
pub struct Planner {
    client: OpenAiClient,
    model: String,
    max_rounds: usize,
    limits: Limits,
    max_output_bytes: usize,
    call_timeout: Duration,
}

impl std::fmt::Debug for Planner {
    // The client holds the API key: only the harmless settings are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("model", &self.model)
            .field("max_rounds", &self.max_rounds)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish_non_exhaustive()
    }
}

/// What to plan.
#[derive(Debug, Clone, Copy)]
pub struct DraftRequest<'a> {
    /// The user's request, copied into `context.source_text` (grounded args must appear in it).
    pub text: &'a str,
    /// IANA time zone, copied into `context.timezone`.
    pub timezone: &'a str,
    /// Rounds for this draft (1 to [`MAX_ROUNDS_LIMIT`]); `None` uses the planner's default.
    pub max_rounds: Option<usize>,
}

/// One model answer and what validation found in it.
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    /// The draft as parsed (with `context` overwritten), or the raw text when it did not parse (cut to a few
    /// KiB when it was over the size limit).
    pub draft: Value,
    /// Every diagnostic of this draft (errors and warnings); no errors means the draft was accepted.
    pub diagnostics: Vec<Diagnostic>,
}

/// The outcome of [`Planner::draft`].
#[derive(Debug, Clone, Serialize)]
pub struct Drafted {
    /// The valid plan (the last round's draft), when one was reached.
    pub plan: Option<Value>,
    /// Every round, in order.
    pub rounds: Vec<Round>,
    /// Why there is no plan, when there is none.
    pub error: Option<String>,
}

/// Why a draft could not be attempted or a model call failed. Drafts that merely stay invalid are not errors:
/// they are a [`Drafted`] with `error` set.
#[derive(Debug, thiserror::Error)]
pub enum PlannerError {
    /// The request itself is unusable (empty or oversized text, unknown time zone, rounds out of range). Not
    /// retryable: fix the request.
    #[error("invalid planning request: {0}")]
    InvalidRequest(String),
    /// The chat completions endpoint failed or answered something that is not a chat completion. Retryable
    /// when `retryable` (connection failures, timeouts, 429, 5xx); otherwise fix the configuration (401, 404
    /// unknown model, …).
    #[error("the model endpoint failed: {message}")]
    Provider {
        /// What failed (never the API key).
        message: String,
        /// Whether trying again later may succeed.
        retryable: bool,
    },
    /// The HTTP client could not be built (no TLS backend). Not retryable.
    #[error("cannot build the planner's HTTP client: {0}")]
    Client(String),
}

impl Planner {
    /// A planner on `config`'s endpoint and model, validating against `limits`, with [`DEFAULT_MAX_ROUNDS`].
    ///
    /// # Errors
    /// [`PlannerError::Client`] when the HTTP client cannot be built.
    pub fn new(config: &LlmConfig, limits: Limits) -> Result<Self, PlannerError> {
        let client = cairn_llm::client(config).map_err(|e| PlannerError::Client(e.to_string()))?;
        Ok(Self {
            client,
            model: config.model.clone(),
            max_rounds: DEFAULT_MAX_ROUNDS,
            limits,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        })
    }

    /// Sets the default number of rounds (clamped to 1..=[`MAX_ROUNDS_LIMIT`]).
    #[must_use]
    pub fn with_max_rounds(mut self, rounds: usize) -> Self {
        self.max_rounds = rounds.clamp(1, MAX_ROUNDS_LIMIT);
        self
    }

    /// Sets the largest model output accepted, in bytes.
    #[must_use]
    pub fn with_max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets how long one model call may take.
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The model asked for drafts.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Drafts a plan for `request` using the actions in `catalog` (described to the model from `specs`):
    /// asks the model, validates, and sends the diagnostics back until the draft is valid or the rounds are
    /// used up. `ungrounded_arg` is an error like any other: a draft that keeps it is never accepted.
    ///
    /// # Errors
    /// [`PlannerError::InvalidRequest`] before any call; [`PlannerError::Provider`] when a model call fails
    /// (the rounds so far are dropped: the caller retries the whole draft).
    pub async fn draft(
        &self,
        request: &DraftRequest<'_>,
        catalog: &(dyn ActionCatalog + Sync),
        specs: &[ActionSpec],
    ) -> Result<Drafted, PlannerError> {
        let max_rounds = self.check_request(request)?;
        let check = Check {
            source_text: request.text,
            timezone: request.timezone,
            catalog,
            limits: &self.limits,
            max_output_bytes: self.max_output_bytes,
        };
        let mut conversation = prompt::Conversation::new(prompt::system_message(specs, request.timezone), request.text);
        let mut rounds = Vec::new();
        for number in 1..=max_rounds {
            let output = self.complete(&conversation).await?;
            let (round, verdict) = repair::check(output, &check);
            tracing::info!(round = number, diagnostics = round.diagnostics.len(), "planner round");
            rounds.push(round);
            match verdict {
                Verdict::Valid(plan) => return Ok(Drafted { plan: Some(plan), rounds, error: None }),
                Verdict::Abort(error) => return Ok(Drafted { plan: None, rounds, error: Some(error) }),
                Verdict::Repair { answer, feedback } => conversation.repair(answer, feedback),
            }
        }
        let error = exhausted(max_rounds, rounds.last());
        Ok(Drafted { plan: None, rounds, error: Some(error) })
    }

    /// The rounds this request may use, after checking the request.
    fn check_request(&self, request: &DraftRequest<'_>) -> Result<usize, PlannerError> {
        let invalid = |m: String| Err(PlannerError::InvalidRequest(m));
        if request.text.trim().is_empty() {
            return invalid("the request text is empty".into());
        }
        if request.text.len() > MAX_REQUEST_TEXT_BYTES {
            return invalid(format!("the request text is over {MAX_REQUEST_TEXT_BYTES} bytes"));
        }
        if jiff::tz::TimeZone::get(request.timezone).is_err() {
            return invalid(format!("`{}` is not an IANA time zone (e.g. Asia/Shanghai)", request.timezone));
        }
        match request.max_rounds {
            None => Ok(self.max_rounds),
            Some(n @ 1..=MAX_ROUNDS_LIMIT) => Ok(n),
            Some(n) => invalid(format!("max_rounds must be 1 to {MAX_ROUNDS_LIMIT}, not {n}")),
        }
    }

    /// One chat completion; the first choice's text (`None` when it has none, e.g. a refusal).
    async fn complete(&self, conversation: &prompt::Conversation) -> Result<ModelOutput, PlannerError> {
        let request = CreateChatCompletionRequest {
            model: self.model.clone(),
            messages: conversation.messages(),
            response_format: Some(prompt::response_format()),
            ..Default::default()
        };
        let chat = self.client.chat();
        let answer = tokio::time::timeout(self.call_timeout, chat.create(request)).await.map_err(|_| {
            PlannerError::Provider { message: format!("no answer within {:?}", self.call_timeout), retryable: true }
        })?;
        let response = answer.map_err(provider_error)?;
        let Some(choice) = response.choices.into_iter().next() else {
            return Err(PlannerError::Provider { message: "the response has no choices".into(), retryable: false });
        };
        Ok(ModelOutput { content: choice.message.content, refusal: choice.message.refusal })
    }
}

/// What the model said in one round.
#[derive(Debug, Clone, Default)]
pub struct ModelOutput {
    /// The message text (the plan, if the model complied).
    pub content: Option<String>,
    /// The model's refusal, when it refused.
    pub refusal: Option<String>,
}

/// The error of a draft that used every round without becoming valid.
fn exhausted(max_rounds: usize, last: Option<&Round>) -> String {
    let errors: Vec<&Diagnostic> =
        last.into_iter().flat_map(|r| r.diagnostics.iter()).filter(|d| d.is_error()).collect();
    let mut codes: Vec<&str> = Vec::new();
    for code in errors.iter().map(|d| d.code.as_str()) {
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    let errors = errors.len();
    let mut message = format!(
        "no valid plan after {max_rounds} round(s): the last draft has {errors} error(s) ({})",
        codes.join(", ")
    );
    if codes.contains(&"ungrounded_arg") {
        message.push_str("; it uses values the request never mentions, which are never accepted");
    }
    message
}

/// Classifies an async-openai failure (the response body is never copied into the message: it may be large).
fn provider_error(error: OpenAIError) -> PlannerError {
    let (message, retryable) = match error {
        OpenAIError::ApiError(response) => {
            let status = response.status_code.as_u16();
            (format!("HTTP {response}"), matches!(status, 408 | 429 | 500..=599))
        }
        OpenAIError::Reqwest(e) => (format!("cannot reach the endpoint: {e}"), true),
        OpenAIError::JSONDeserialize(e, _) => (format!("the answer is not a chat completion: {e}"), false),
        other => (other.to_string(), false),
    };
    PlannerError::Provider { message, retryable }
}
