//! The API's one error type: JSON `{code, message, details}` with the HTTP status decided here, once.
//!
//! Internal failures are 500 with a generic body; the cause chain goes to the log, never to the client.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use cairn_store::{ErrorClass, StoreError};
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
    /// 503 `unavailable` when the database was unreachable or contended (retry); 422 `refused` when it refused a
    /// value of the request (the edge checks of `cairn_core::text` catch the known ones first, so this is a value
    /// they do not cover); 500 otherwise.
    fn from(e: StoreError) -> Self {
        let class = e.class();
        match class {
            ErrorClass::Unreachable | ErrorClass::Contended => {
                tracing::warn!(error = %e, ?class, "store error");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the database is unavailable; retry")
            }
            ErrorClass::Refused => {
                tracing::warn!(error = %e, "the database refused a value of the request");
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "refused",
                    "the database refused a value of this request; sending it again will not help",
                )
            }
            ErrorClass::Internal => {
                tracing::error!(error = %e, "store error");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
            }
        }
    }
}

impl From<cairn_core::labels::LabelError> for ApiError {
    /// 422 `invalid_labels` naming the label and the rule broken.
    fn from(e: cairn_core::labels::LabelError) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_labels", e.to_string())
    }
}

impl From<cairn_core::text::TextError> for ApiError {
    /// 422 `invalid_request` naming the field and the rule broken.
    fn from(e: cairn_core::text::TextError) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", e.to_string())
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

impl From<crate::engine::RetryError> for ApiError {
    fn from(e: crate::engine::RetryError) -> Self {
        use crate::engine::RetryError;
        match e {
            RetryError::InvalidArgs(diagnostics) => {
                let errors = diagnostics.iter().filter(|d| d.is_error()).count();
                let message = format!("the repaired args are invalid: {errors} error(s)");
                let mut err = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_args", message);
                err.details = json!({"diagnostics": diagnostics});
                err
            }
            RetryError::NotFound => ApiError::not_found("run or step"),
            RetryError::WrongState(_)
            | RetryError::RunCancelled
            | RetryError::RunNotFinished(_)
            | RetryError::NotFinished(_)
            | RetryError::NotPausable(_) => ApiError::new(StatusCode::CONFLICT, "wrong_state", e.to_string()),
            RetryError::Store(e) => e.into(),
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

/// Makes every error answer JSON `{code, message, details}`, keeping its status and headers (such as `Allow`).
/// axum's own rejections answer in plain text (a query string or path parameter that does not parse) or with an
/// empty body (a method the route does not serve); this response layer wraps them. JSON bodies and successful
/// answers (including event streams) pass through untouched. A server error's text is not echoed.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.map(|b| String::from_utf8_lossy(&b).into_owned());
    let code = match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let reason = status.canonical_reason().unwrap_or("error").to_lowercase();
    let message = match text {
        Ok(text) if !text.trim().is_empty() && (status.is_client_error() || code == "unavailable") => text,
        _ => reason,
    };
    let mut answer = ApiError::new(status, code, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}
