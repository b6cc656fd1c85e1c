//! [`StrictJson`]: the request body extractor. Unlike `axum::Json` it refuses duplicate keys (which serde_json
//! would silently merge, case C01 c), reports syntax errors with line and column, and names what was wrong.
//!
//! Refusals: wrong or missing content type → 415; body over the configured limit → 413; invalid UTF-8 → 400
//! `invalid_utf8`; malformed JSON, nesting deeper than 128 → 400 `malformed_json`; duplicate key → 400
//! `duplicate_key`; a body of the wrong shape → 422 `invalid_request`.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use cairn_core::diagnostic::Code;
use cairn_core::document::{self, Format};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::error::ApiError;

/// A JSON body parsed strictly into `T`.
#[derive(Debug)]
pub struct StrictJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for StrictJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("application/json"));
        if !is_json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with `Content-Type: application/json`",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            let status = rejection.status();
            let code = if status == StatusCode::PAYLOAD_TOO_LARGE { "payload_too_large" } else { "bad_request" };
            ApiError::new(status, code, rejection.body_text())
        })?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            let mut err = ApiError::bad_request(format!("the body is not valid UTF-8: {e}"));
            err.code = "invalid_utf8";
            err
        })?;
        let value = document::parse(text, Format::Json).map_err(|failure| {
            let code = if failure.code == Code::DuplicateKey { "duplicate_key" } else { "malformed_json" };
            let mut err = ApiError::bad_request(failure.message.clone());
            err.code = code;
            err.details = json!({"line": failure.line, "column": failure.column, "pointer": failure.pointer});
            err
        })?;
        typed(value).map(StrictJson)
    }
}

/// Deserializes a parsed body, naming the offending field on failure.
pub fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", format!("the request body is invalid: {e}"))
    })
}
