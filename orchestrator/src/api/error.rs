//! The API's one error type: JSON `{code, message, details}` with the HTTP status decided here, once.
//!
//! Internal failures are 500 with a generic body; the cause chain goes to the log, never to the client.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_store::StoreError;
use serde_json::{Value, json};

use crate::planner::PlannerError;
use crate::submit::SubmitError;

/// An API error.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code, e.g. `invalid_plan`, `not_found`, `conflict`.
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Structured details (diagnostics for an invalid plan).
    pub details: Value,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: Value::Null }
    }

    /// 404.
    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", format!("{what} not found"))
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"code": self.code, "message": self.message, "details": self.details});
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, retryable = e.is_retryable(), "store error");
        if e.is_retryable() {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the database is unavailable; retry")
        } else {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Invalid(diagnostics) => {
                let mut err = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_plan", e_message(&diagnostics));
                err.details = json!({"diagnostics": diagnostics});
                err
            }
            SubmitError::Conflict { run_id } => {
                let mut err = ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    "the idempotency key is already used by a run with a different plan or input",
                );
                err.details = json!({"run_id": run_id});
                err
            }
            SubmitError::Store(e) => e.into(),
        }
    }
}

impl From<PlannerError> for ApiError {
    fn from(e: PlannerError) -> Self {
        match e {
            PlannerError::InvalidRequest(message) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
            }
            PlannerError::Provider { message, retryable } => {
                tracing::warn!(error = %message, retryable, "planner model call failed");
                let mut err = ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "planner_failed",
                    format!("the model endpoint failed: {message}"),
                );
                err.details = json!({"retryable": retryable});
                err
            }
            PlannerError::Client(cause) => {
                tracing::error!(error = %cause, "planner client unavailable");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
            }
        }
    }
}

fn e_message(diagnostics: &[cairn_core::diagnostic::Diagnostic]) -> String {
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    format!("the plan is invalid: {errors} error(s)")
}
