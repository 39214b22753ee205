//! `metav1.Status`, the failure answer of the Kubernetes API: what the HTTP servers answer a
//! request they refuse with — HTTP ingest, the read API's request checks
//! ([`crate::source::request_options`]) and the connection cap ([`super::reserve`]).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A Kubernetes `metav1.Status` failure, as the apiserver writes it; every error answer of the
/// ingest server is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiStatus {
    /// `"Status"`.
    pub kind: String,
    /// `"v1"`.
    pub api_version: String,
    /// Always `{}`.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// `"Failure"`.
    pub status: String,
    /// Human-readable explanation.
    pub message: String,
    /// `metav1.StatusReason`: `BadRequest`, `Unauthorized`, `NotFound`, …
    pub reason: String,
    /// Name, kind, causes and retry delay, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// The HTTP status code.
    pub code: u16,
}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// The object's name, when the failure is about one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The API group of `kind` (`"meta.k8s.io"` for request options), when there is one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The resource (`"events"`), or the kind refused (`"ListOptions"`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// One entry per problem (for `/ingest`: per bad line, `field` = `"line N"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    /// Seconds to wait before retrying (`503`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StatusCause {
    /// `metav1.CauseType` (`FieldValueInvalid`, `FieldValueRequired`).
    pub reason: String,
    /// What is wrong.
    pub message: String,
    /// Where.
    pub field: String,
}

impl ApiStatus {
    /// A failure with `code`, `reason` and `message`, no details.
    pub fn failure(code: StatusCode, reason: &str, message: impl Into<String>) -> Self {
        Self {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: serde_json::Map::new(),
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            details: None,
            code: code.as_u16(),
        }
    }

    /// The same failure with `details`.
    pub fn with_details(mut self, details: StatusDetails) -> Self {
        self.details = Some(details);
        self
    }
}

impl IntoResponse for ApiStatus {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = self.details.as_ref().and_then(|d| d.retry_after_seconds);
        let mut response = json_response(code, &self);
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// `body` as JSON with `code` (`500` with a text body if it cannot be encoded).
pub(crate) fn json_response(code: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            (code, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], bytes).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding the answer: {e}")).into_response(),
    }
}
