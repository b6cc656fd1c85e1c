//! `POST /v1/plans:draft`: a plan drafted by the planner from a request in natural language.
//!
//! Body `{text, timezone?, max_rounds?}` (time zone default `UTC`). Answers 200 `{valid: true, plan, rounds}`
//! with every round's `{draft, diagnostics}`, or 422 `draft_failed` with the rounds in `details.rounds` when no
//! valid plan was reached. 503 `planner_unconfigured` when the server started without a model endpoint. The
//! drafted plan is only returned: submitting it is a separate `POST /v1/runs`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::catalog::ActionCatalog;
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::body::StrictJson;
use super::error::ApiError;
use crate::planner::DraftRequest;

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DraftBody {
    text: String,
    timezone: Option<String>,
    max_rounds: Option<usize>,
}

pub(super) async fn draft(
    State(state): State<AppState>,
    StrictJson(body): StrictJson<DraftBody>,
) -> Result<Response, ApiError> {
    let Some(planner) = state.planner.clone() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "planner_unconfigured",
            "the planner is not configured: start the server with OPENAI_API_KEY and/or OPENAI_BASE_URL set",
        ));
    };
    let request = DraftRequest {
        text: &body.text,
        timezone: body.timezone.as_deref().unwrap_or("UTC"),
        max_rounds: body.max_rounds,
    };
    // One snapshot for both the prompt and validation, so the model is shown exactly what is checked.
    let catalog = state.engine.catalog().snapshot();
    let specs: Vec<_> = catalog.names().into_iter().filter_map(|n| catalog.get(n).map(|e| e.spec().clone())).collect();
    let drafted = planner.draft(&request, &catalog, &specs).await?;
    match drafted.plan {
        Some(plan) => Ok(Json(json!({"valid": true, "plan": plan, "rounds": drafted.rounds})).into_response()),
        None => {
            let message = drafted.error.unwrap_or_else(|| "no valid plan".into());
            let mut err = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "draft_failed", message);
            err.details = json!({"rounds": drafted.rounds});
            Err(err)
        }
    }
}
