//! The Responses API's response object: output items (a message, function calls), status
//! and usage, with the request's settings repeated as OpenAI repeats them. Pure.

use serde_json::{json, Map, Value};

use crate::engine::sequence::FinishReason;
use crate::engine::Summary;
use crate::gateway::http::responses::usage as chat_usage;

/// A fresh id with OpenAI's prefix for its kind (`resp`, `msg`, `fc`, `call`). Random, so
/// an id tells nobody the server's traffic.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:032x}", rand::random::<u128>())
}

/// A finished assistant message item.
pub fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// A function call item.
pub fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call",
        "id": id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    })
}

/// The output of a whole answer: its text as a message (when it has any, or nothing else),
/// then its calls.
pub fn output_items(content: &str, calls: &[(String, String)], finish: FinishReason) -> Vec<Value> {
    let status = item_status(finish);
    let mut items = Vec::new();
    if !content.is_empty() || calls.is_empty() {
        items.push(message_item(&new_id("msg"), content, status));
    }
    for (name, arguments) in calls {
        items.push(call_item(
            &new_id("fc"),
            &new_id("call"),
            name,
            arguments,
            status,
        ));
    }
    items
}

pub fn item_status(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "completed",
        FinishReason::Length => "incomplete",
    }
}

/// Usage as the Responses API names it, with specgate's `speculative` object.
pub fn usage(s: &Summary) -> Value {
    let u = chat_usage(s);
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.prompt_tokens_details.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens,
        "speculative": u.speculative,
    })
}

/// Who the response is and what it was asked.
pub struct ResponseHead<'a> {
    pub id: &'a str,
    pub created_at: u64,
    pub model: &'a str,
    /// The request body, whose settings the object repeats.
    pub request: &'a Map<String, Value>,
}

/// The response object: `status` in_progress (no usage yet), completed or incomplete.
pub fn response_object(
    head: &ResponseHead,
    output: Vec<Value>,
    finished: Option<&Summary>,
) -> Value {
    let r = head.request;
    let get = |k: &str, default: Value| {
        r.get(k)
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or(default)
    };
    let (status, incomplete) = match finished.map(|s| s.finish_reason) {
        None => ("in_progress", Value::Null),
        Some(FinishReason::Stop) => ("completed", Value::Null),
        Some(FinishReason::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
    };
    json!({
        "id": head.id,
        "object": "response",
        "created_at": head.created_at,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "model": head.model,
        "output": output,
        "instructions": get("instructions", Value::Null),
        "max_output_tokens": get("max_output_tokens", Value::Null),
        "temperature": get("temperature", json!(1.0)),
        "top_p": get("top_p", json!(1.0)),
        "tools": get("tools", json!([])),
        "tool_choice": get("tool_choice", json!("auto")),
        "parallel_tool_calls": get("parallel_tool_calls", json!(true)),
        "text": get("text", json!({"format": {"type": "text"}})),
        "previous_response_id": get("previous_response_id", Value::Null),
        "store": get("store", json!(true)),
        "metadata": get("metadata", json!({})),
        "reasoning": {"effort": null, "summary": null},
        "truncation": "disabled",
        "usage": finished.map_or(Value::Null, usage),
    })
}

/// Output items as the chat messages a continuation replays: one assistant turn with the
/// text and the calls.
pub fn as_messages(items: &[Value]) -> Vec<Value> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    text += part["text"].as_str().unwrap_or_default();
                }
            }
            Some("function_call") => calls.push(json!({
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            })),
            _ => {}
        }
    }
    if calls.is_empty() {
        return vec![json!({"role": "assistant", "content": text})];
    }
    let content = if text.is_empty() {
        Value::Null
    } else {
        json!(text)
    };
    vec![json!({"role": "assistant", "content": content, "tool_calls": calls})]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_replays_as_one_assistant_turn() {
        let items = vec![
            message_item("msg_1", "Checking.", "completed"),
            call_item("fc_1", "call_1", "get_weather", "{}", "completed"),
        ];
        let m = as_messages(&items);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["content"], "Checking.");
        assert_eq!(m[0]["tool_calls"][0]["id"], "call_1");
        assert_eq!(m[0]["tool_calls"][0]["function"]["name"], "get_weather");
        let text = as_messages(&[message_item("msg_2", "Hi", "completed")]);
        assert_eq!(text, vec![json!({"role": "assistant", "content": "Hi"})]);
    }
}
