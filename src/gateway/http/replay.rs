//! A chat conversation as the model reads it: replayed assistant calls (as the openai client
//! sends them back) and tool results written the way the model's template writes them. Pure.

use crate::constraint::tools::calls_text;
use crate::gateway::error::ApiError;
use crate::gateway::http::requests::Message;
use crate::model::chat_template::ChatMessage;

/// An assistant message's earlier calls (name, arguments as JSON text), as the openai client
/// replays them: `[{"id", "type": "function", "function": {"name", "arguments"}}]`.
pub(super) fn earlier_calls(param: &str, m: &Message) -> Result<Vec<(String, String)>, ApiError> {
    let Some(calls) = m.tool_calls.as_ref().filter(|c| !c.is_null()) else {
        return Ok(Vec::new());
    };
    let bad = || {
        ApiError::invalid(
            Some(&format!("{param}.tool_calls")),
            "`tool_calls` is a list of {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
        )
    };
    if m.role != "assistant" {
        return Err(bad());
    }
    let list = calls.as_array().ok_or_else(bad)?;
    list.iter()
        .map(|c| {
            let name = c.pointer("/function/name").and_then(|n| n.as_str());
            let args = match c.pointer("/function/arguments") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(v @ serde_json::Value::Object(_)) => Some(v.to_string()),
                _ => None,
            };
            match (name, args) {
                (Some(n), Some(a)) => Ok((n.to_string(), a)),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// A message as the chat template sees it: a tool's result is a user turn wrapped as
/// Qwen 2.5's template wraps it, earlier calls are written as the model writes them.
pub(super) fn turn(role: String, content: String, calls: &[(String, String)]) -> ChatMessage {
    match role.as_str() {
        "developer" => ChatMessage::new("system", &content),
        "tool" => ChatMessage::new(
            "user",
            &format!("<tool_response>\n{content}\n</tool_response>"),
        ),
        "assistant" if !calls.is_empty() => {
            let sep = if content.is_empty() || content.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            ChatMessage::new("assistant", &format!("{content}{sep}{}", calls_text(calls)))
        }
        _ => ChatMessage { role, content },
    }
}
