//! What the planner tells the model: the system prompt (rules, registered actions, the plan JSON Schema), the
//! request as the user message, the repair message carrying diagnostics, and the `response_format`.
//!
//! The conversation keeps only the latest draft and its diagnostics, not every round: the system prompt is the
//! large part, and a bounded request size matters more than the model seeing its older mistakes (the
//! diagnostics of the latest draft already say what is still wrong).

use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestUserMessage, ResponseFormat, ResponseFormatJsonSchema,
};
use cairn_core::catalog::ActionSpec;
use cairn_core::diagnostic::Diagnostic;
use serde_json::{Value, json};

/// The messages of the next model call.
#[derive(Debug, Clone)]
pub struct Conversation {
    system: String,
    request: String,
    /// The latest draft as the model wrote it, and the feedback on it.
    repair: Option<(String, String)>,
}

impl Conversation {
    /// The first round: the system prompt and the request.
    pub fn new(system: String, request: &str) -> Self {
        Self { system, request: request.to_owned(), repair: None }
    }

    /// The next round answers `feedback` about the model's `answer` (replacing any earlier round).
    pub fn repair(&mut self, answer: String, feedback: String) {
        self.repair = Some((answer, feedback));
    }

    /// system, user (request), then, when repairing, assistant (the draft) and user (the diagnostics).
    pub fn messages(&self) -> Vec<ChatCompletionRequestMessage> {
        let mut messages: Vec<ChatCompletionRequestMessage> = vec![
            ChatCompletionRequestSystemMessage::from(self.system.as_str()).into(),
            ChatCompletionRequestUserMessage::from(self.request.as_str()).into(),
        ];
        if let Some((answer, feedback)) = &self.repair {
            messages.push(ChatCompletionRequestAssistantMessage::from(answer.as_str()).into());
            messages.push(ChatCompletionRequestUserMessage::from(feedback.as_str()).into());
        }
        messages
    }
}

const INTRO: &str = "You are the planner of Cairn, a workflow orchestrator. Turn the user's request into one \
workflow plan in Cairn's `cairn/v1` JSON format. Answer with the plan only: one JSON object matching the plan JSON \
Schema below, with no prose and no Markdown around it.";

/// The system prompt: rules, the registered actions and the plan JSON Schema.
pub fn system_message(specs: &[ActionSpec], timezone: &str) -> String {
    let actions: Vec<Value> = specs
        .iter()
        .map(|s| {
            json!({"name": s.name, "description": s.description, "effect": s.effect, "args_schema": s.args_schema,
                   "output_schema": s.output_schema, "grounded_args": s.grounded_args})
        })
        .collect();
    let actions = serde_json::to_string(&actions).unwrap_or_default();
    let schema = serde_json::to_string(&plan_schema()).unwrap_or_default();
    format!(
        "{INTRO}\n\nRules:\n{}\n\nRegistered actions (JSON; `effect` is read, idempotent_write or non_idempotent, \
         `grounded_args` are JSON pointers into args):\n{actions}\n\nPlan JSON Schema:\n{schema}",
        rules(timezone)
    )
}

fn rules(timezone: &str) -> String {
    [
        "1. Use only the registered actions below, with `args` that satisfy the action's args schema. Never \
         invent an action.",
        "2. Every step has a unique `id` matching [A-Za-z_][A-Za-z0-9_-]{0,63}; `input`, `context`, `steps` and \
         `run` are reserved.",
        "3. `depends_on` lists the ids of steps that must finish first. The steps form a DAG: no cycles, no step \
         depending on itself, only ids of steps in the plan.",
        "4. Placeholders pass data between steps. A string that is exactly `$<step_id>.output.<field>` becomes \
         that value with its JSON type; `${<step_id>.output.<field>}` inside longer text is interpolated as text; \
         `$$` is a literal `$`; `$input.<field>` reads the plan's `input`. A step may reference only steps it \
         depends on, directly or transitively.",
        "5. `when` is a CEL expression such as `steps.<step_id>.output.matched` over steps the step depends on; \
         when it is false the step is skipped. Use a `condition.eval` step for a condition on an output.",
        &format!(
            "6. Times: `not_before` takes a local time such as `tomorrow 08:00` or `2027-03-14 02:30` in the \
             plan's time zone ({timezone}), a relative time such as `+2h` or `in 90m`, or an RFC 3339 instant. \
             Prefer local or relative times: you do not know today's date."
        ),
        "7. Grounding: args an action lists in `grounded_args` (a city, a recipient, ...) must be copied \
         literally from the user's request, in the language and spelling the user wrote. Never translate, guess \
         or invent such a value, not even through `input`; if the request does not give one, leave the step out.",
        "8. Cairn sets `context.source_text` and `context.timezone` itself; you may leave `context` out.",
        "9. Keep the plan minimal: only the steps the request needs, and a short `goal` in the user's words.",
    ]
    .join("\n")
}

/// The plan JSON Schema as sent to the model (without `$schema`, which some providers refuse).
fn plan_schema() -> Value {
    let mut schema = cairn_core::plan::plan_schema();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// `response_format`: the plan JSON Schema, non-strict (strict mode requires every property to be required
/// and forbids much of what the plan schema uses; Cairn validates the result anyway).
pub fn response_format() -> ResponseFormat {
    ResponseFormat::JsonSchema {
        json_schema: ResponseFormatJsonSchema {
            description: Some("A Cairn workflow plan (cairn/v1)".into()),
            name: "cairn_plan".into(),
            schema: plan_schema(),
            strict: Some(false),
        },
    }
}

/// The repair message: the diagnostics of the last draft as JSON, and what to do about them.
pub fn repair_message(diagnostics: &[Diagnostic]) -> String {
    let listed = serde_json::to_string_pretty(diagnostics).unwrap_or_default();
    format!(
        "Cairn's validator rejected that plan. Diagnostics (JSON; `code` is stable, `pointer` is an RFC 6901 \
         pointer into your plan, `hint` says how to fix it):\n{listed}\n\nReturn the complete corrected plan as \
         one JSON object and nothing else. Keep what was right; change what the diagnostics require."
    )
}
