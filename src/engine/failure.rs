//! Why a request failed, and whose fault it was: the client's grammar or the server.

use super::params::GenerateError;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub message: String,
    /// The request's output grammar hit a limit of the parser while generating: the
    /// client's grammar, not the server, is at fault.
    pub by_grammar: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Failure {
    pub fn server(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            by_grammar: false,
        }
    }

    /// A sequence's error, the grammar's or the server's.
    pub fn of(e: &GenerateError) -> Self {
        Self {
            message: e.to_string(),
            by_grammar: matches!(e, GenerateError::Constraint(_)),
        }
    }
}
