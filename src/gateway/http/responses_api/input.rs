//! The Responses API's request read into the chat request every generation runs as: `input`
//! (a string or items) and `instructions` become messages, flat function tools become chat
//! tools, `text.format` becomes `response_format`, `max_output_tokens` becomes `max_tokens`.
//! Every error names the Responses field it is about. Pure.

use serde_json::{json, Map, Value};

use crate::gateway::error::ApiError;

/// Fields read here; everything else in a body is refused by name.
const OWN: [&str; 15] = [
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "store",
    "previous_response_id",
    "reasoning",
    "include",
];
/// Fields that go to the chat request as they are: OpenAI's hints and specgate's extensions.
const PASSED: [&str; 15] = [
    "metadata",
    "user",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "seed",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "workload",
    "speculation",
    "cache_prompt",
];
/// Known, accepted at the value that changes nothing.
const NEUTRAL: [&str; 4] = ["truncation", "background", "max_tool_calls", "top_logprobs"];

fn invalid(param: &str, why: impl Into<String>) -> ApiError {
    ApiError::invalid(Some(param), why)
}

fn unsupported(param: &str, why: impl Into<String>) -> ApiError {
    invalid(param, why).with_code("unsupported_parameter")
}

/// The chat request body for a Responses body; `earlier`: the messages of the conversation
/// it continues (`previous_response_id`), placed after the instructions.
pub fn chat_body(body: &Map<String, Value>, earlier: &[Value]) -> Result<Value, ApiError> {
    let mut chat = Map::new();
    for (k, v) in body {
        let k = k.as_str();
        if PASSED.contains(&k) {
            chat.insert(k.into(), v.clone());
        } else if NEUTRAL.contains(&k) {
            neutral(k, v)?;
        } else if !OWN.contains(&k) {
            return Err(invalid(k, format!("unknown field `{k}`")).with_code("unknown_field"));
        }
    }
    for (k, ok) in [
        (
            "reasoning",
            body.get("reasoning").is_none_or(Value::is_null),
        ),
        (
            "include",
            body.get("include")
                .is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty)),
        ),
    ] {
        if !ok {
            return Err(unsupported(
                k,
                format!("`{k}` is not supported by this model"),
            ));
        }
    }
    for (from, to) in [
        ("model", "model"),
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("stream", "stream"),
        ("parallel_tool_calls", "parallel_tool_calls"),
    ] {
        if let Some(v) = body.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    let mut messages = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(invalid("instructions", "`instructions` must be a string")),
    }
    messages.extend_from_slice(earlier);
    messages.extend(input_messages(body.get("input"))?);
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = body.get("tools").filter(|v| !v.is_null()) {
        chat.insert("tools".into(), chat_tools(tools)?);
    }
    if let Some(choice) = body.get("tool_choice").filter(|v| !v.is_null()) {
        chat.insert("tool_choice".into(), chat_tool_choice(choice)?);
    }
    if let Some(format) = body.get("text").filter(|v| !v.is_null()) {
        if let Some(f) = response_format(format)? {
            chat.insert("response_format".into(), f);
        }
    }
    Ok(Value::Object(chat))
}

fn neutral(k: &str, v: &Value) -> Result<(), ApiError> {
    let ok = v.is_null()
        || match k {
            "truncation" => v == "disabled" || v == "auto",
            "background" => v == false,
            "top_logprobs" => v.as_f64() == Some(0.0),
            _ => false,
        };
    if ok {
        Ok(())
    } else {
        Err(unsupported(
            k,
            format!("`{k}` is not supported; only its neutral value is accepted"),
        ))
    }
}

/// `input`: a string (one user message) or a list of items.
pub fn input_messages(input: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let items = match input {
        None | Some(Value::Null) => return Err(invalid("input", "`input` is required")),
        Some(Value::String(s)) => return Ok(vec![json!({"role": "user", "content": s})]),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(invalid(
                "input",
                "`input` must be a string or a list of items",
            ))
        }
    };
    let mut messages: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let param = format!("input[{i}]");
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => messages.push(message(&param, item)?),
            "function_call" => {
                let call = json!({
                    "id": text_field(&param, item, "call_id")?,
                    "type": "function",
                    "function": {
                        "name": text_field(&param, item, "name")?,
                        "arguments": text_field(&param, item, "arguments")?,
                    },
                });
                // Calls after the assistant's text, or after each other, are one assistant
                // turn, as a response's output replays (and as chat holds them).
                match messages.last_mut() {
                    Some(last) if last["role"] == "assistant" => {
                        match last["tool_calls"].as_array_mut() {
                            Some(calls) => calls.push(call),
                            None => last["tool_calls"] = json!([call]),
                        }
                    }
                    _ => messages
                        .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            "function_call_output" => messages.push(json!({
                "role": "tool",
                "tool_call_id": text_field(&param, item, "call_id")?,
                "content": output_text(&param, item)?,
            })),
            other => {
                return Err(invalid(
                    &format!("{param}.type"),
                    format!(
                        "input items of type {other:?} are not supported (message, \
                         function_call, function_call_output)"
                    ),
                )
                .with_code("unsupported_parameter"))
            }
        }
    }
    if messages.is_empty() {
        return Err(invalid("input", "`input` holds no items"));
    }
    Ok(messages)
}

fn text_field(param: &str, item: &Value, key: &str) -> Result<String, ApiError> {
    item.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            invalid(
                &format!("{param}.{key}"),
                format!("`{key}` must be a string"),
            )
        })
}

/// A function's output: a string, or a list of `input_text` parts.
fn output_text(param: &str, item: &Value) -> Result<String, ApiError> {
    match item.get("output") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => parts_text(&format!("{param}.output"), parts),
        _ => Err(invalid(
            &format!("{param}.output"),
            "`output` must be a string or a list of input_text parts",
        )),
    }
}

/// A message item: a role and content (a string or text parts).
fn message(param: &str, item: &Value) -> Result<Value, ApiError> {
    let role = match item.get("role").and_then(Value::as_str) {
        Some("developer") | Some("system") => "system",
        Some(r @ ("user" | "assistant")) => r,
        _ => {
            return Err(invalid(
                &format!("{param}.role"),
                "`role` must be user, assistant, system or developer",
            ))
        }
    };
    let content = match item.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts_text(&format!("{param}.content"), parts)?,
        _ => {
            return Err(invalid(
                &format!("{param}.content"),
                "`content` must be a string or a list of parts",
            ))
        }
    };
    Ok(json!({"role": role, "content": content}))
}

/// Text parts joined; a part the model cannot read (an image, a file, audio) is refused.
fn parts_text(param: &str, parts: &[Value]) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{param}[{j}]");
        match part.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => {
                text += &text_field(&at, part, "text")?;
            }
            Some(other) => {
                return Err(invalid(
                    &at,
                    format!("content parts of type {other:?} are not supported by this model"),
                )
                .with_code("unsupported_content"))
            }
            None => return Err(invalid(&format!("{at}.type"), "a part needs a `type`")),
        }
    }
    Ok(text)
}

/// Flat function tools (`{"type": "function", "name", "parameters", …}`) as chat tools.
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let list = tools
        .as_array()
        .ok_or_else(|| invalid("tools", "`tools` must be a list"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let param = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {}
            other => {
                return Err(unsupported(
                    &format!("{param}.type"),
                    format!("tools of type {other:?} are not supported (function)"),
                ))
            }
        }
        let mut function = Map::new();
        for key in ["name", "description", "parameters", "strict"] {
            if let Some(v) = t.get(key).filter(|v| !v.is_null()) {
                function.insert(key.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice`: the same words as chat, or `{"type": "function", "name"}`.
fn chat_tool_choice(choice: &Value) -> Result<Value, ApiError> {
    if choice.is_string() {
        return Ok(choice.clone());
    }
    match (
        choice.get("type").and_then(Value::as_str),
        choice.get("name"),
    ) {
        (Some("function"), Some(name)) => {
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(invalid(
            "tool_choice",
            "`tool_choice` must be auto, none, required or {\"type\": \"function\", \"name\"}",
        )),
    }
}

/// `text.format` as chat's `response_format` (None: plain text).
fn response_format(text: &Value) -> Result<Option<Value>, ApiError> {
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut js = Map::new();
            for key in ["name", "schema", "strict", "description"] {
                if let Some(v) = format.get(key) {
                    js.insert(key.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        _ => Err(invalid(
            "text.format.type",
            "`text.format.type` must be text, json_object or json_schema",
        )),
    }
}

/// A chat validation error's field, named as the Responses API names it.
pub fn rename_param(mut e: ApiError) -> ApiError {
    if let Some(p) = e.param.take() {
        let renamed = if let Some(rest) = p.strip_prefix("response_format.json_schema") {
            format!("text.format{rest}")
        } else if let Some(rest) = p.strip_prefix("response_format") {
            format!("text.format{rest}")
        } else if p == "max_tokens" {
            "max_output_tokens".into()
        } else if p.starts_with("messages") {
            "input".into()
        } else {
            p.replace(".function.", ".")
        };
        e.message = e.message.replace("max_tokens", "max_output_tokens");
        e.param = Some(renamed);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_output_is_one_assistant_turn_as_a_stored_one() {
        let items = json!([
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "12 C"},
        ]);
        let m = input_messages(Some(&items)).unwrap();
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[1]["content"], "Checking.");
        assert_eq!(m[1]["tool_calls"][0]["id"], "call_1");
        assert_eq!(m[2]["role"], "tool");
        let e = input_messages(Some(&json!([{"type": "reasoning"}]))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].type"));
    }
}
