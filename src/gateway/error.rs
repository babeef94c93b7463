//! Errors in OpenAI's format: `{"error": {"message", "type", "param", "code"}}` with the
//! HTTP status a client library maps to the right exception.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ApiError {
    #[serde(skip)]
    pub status: u16,
    pub message: String,
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: &'static str,
    pub param: Option<String>,
    #[schema(value_type = Option<String>)]
    pub code: Option<&'static str>,
    #[serde(skip)]
    pub retry_after_secs: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.kind, self.message)
    }
}

impl ApiError {
    fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after_secs: None,
        }
    }

    /// 400: the request is malformed or a field is out of range.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            param: param.map(str::to_string),
            ..Self::new(400, "invalid_request_error", message)
        }
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 401: no key, or a key nobody issued (or one that was revoked).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "authentication_error", message).with_code("invalid_api_key")
    }

    /// 403: authenticated but not allowed.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "permission_error", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "not_found_error", message)
    }

    pub fn model_not_found(model: &str) -> Self {
        Self {
            param: Some("model".into()),
            ..Self::new(
                404,
                "invalid_request_error",
                format!("The model `{model}` does not exist"),
            )
            .with_code("model_not_found")
        }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(409, "invalid_request_error", message)
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            413,
            "invalid_request_error",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    /// 429 with Retry-After.
    pub fn rate_limited(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self {
            retry_after_secs: Some(retry_after_secs),
            ..Self::new(429, "rate_limit_error", message).with_code("rate_limit_exceeded")
        }
    }

    /// 503: the engine is not running.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            retry_after_secs: Some(5),
            ..Self::new(503, "server_error", message)
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "server_error", message)
    }

    /// The JSON body: `{"error": {...}}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!(ErrorBody {
            error: self.clone()
        })
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status_code());
        if let Some(secs) = self.retry_after_secs {
            resp.insert_header((header::RETRY_AFTER, secs.to_string()));
        }
        resp.json(self.body())
    }
}

/// Every error answer: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ApiError,
}

/// A request's failure as the API answers it: a grammar that hit the parser's limits while
/// generating is the client's (400 `invalid_grammar`, the parser's first line only), anything
/// else the server's.
impl From<crate::engine::Failure> for ApiError {
    fn from(f: crate::engine::Failure) -> Self {
        if f.by_grammar {
            let why = f.message.lines().next().unwrap_or_default();
            return ApiError::invalid(
                None,
                format!("the output grammar failed while generating: {why}"),
            )
            .with_code("invalid_grammar");
        }
        ApiError::internal(f.message)
    }
}

/// A store that cannot be reached is the server's trouble, not the client's: 503, retry.
impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::Unavailable(_) => ApiError::unavailable(e.to_string()),
            _ => ApiError::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn a_grammar_failing_mid_answer_is_the_clients_400_and_anything_else_a_500() {
        use crate::engine::Failure;
        let grammar = ApiError::from(Failure {
            message: "lexer error: too many expressions\nstate: …".into(),
            by_grammar: true,
        });
        assert_eq!(
            (grammar.status, grammar.code),
            (400, Some("invalid_grammar"))
        );
        assert!(!grammar.message.contains("state"), "{}", grammar.message);
        assert_eq!(
            ApiError::from(Failure::server("the engine stopped")).status,
            500
        );
    }

    #[test]
    fn a_store_that_cannot_be_reached_is_a_503_and_a_corrupt_one_a_500() {
        let down = ApiError::from(StoreError::Unavailable("connection refused".into()));
        assert_eq!(down.status, 503);
        assert!(down.body()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unavailable")));
        assert_eq!(
            ApiError::from(StoreError::Corrupt("bad".into())).status,
            500
        );
    }
}
