//! Answers of requests that offered tools: the calls read out of the generated text become
//! `message.tool_calls` (whole) or tool-call deltas (streamed), and `finish_reason` is
//! "tool_calls" when the answer called and ended on its own.

use serde_json::Value;

use super::responses::{
    chunk_choice, finish_name, full, Delta, FunctionCall, ResponseMeta, ToolCall, ToolCallDelta,
};
use crate::constraint::tools::{CallEvent, CallReader};
use crate::engine::sequence::FinishReason;
use crate::engine::Summary;

/// A call's id, as OpenAI shapes them.
fn call_id() -> String {
    format!("call_{:024x}", rand::random::<u128>() >> 32)
}

/// The finish reason of an answer that made `calls` calls.
fn finish(reason: FinishReason, calls: usize) -> String {
    match (reason, calls) {
        (FinishReason::Stop, 1..) => "tool_calls".into(),
        _ => finish_name(reason),
    }
}

/// A whole chat answer whose text may hold calls of the functions `names`.
pub fn full_with_calls(meta: &ResponseMeta, text: &str, s: &Summary, names: &[String]) -> Value {
    let (content, calls) = crate::constraint::tools::read_calls(text, names);
    let mut body = full(meta, &content, s);
    if calls.is_empty() {
        return body;
    }
    let calls: Vec<ToolCall> = calls
        .into_iter()
        .map(|(name, arguments)| ToolCall {
            id: call_id(),
            kind: "function".into(),
            function: FunctionCall {
                name: Some(name),
                arguments: Some(arguments),
            },
        })
        .collect();
    let n = calls.len();
    if let Some(choice) = body.pointer_mut("/choices/0") {
        choice["message"]["tool_calls"] = serde_json::to_value(calls).unwrap_or(Value::Null);
        if content.is_empty() {
            choice["message"]["content"] = Value::Null;
        }
        choice["finish_reason"] = Value::String(finish(s.finish_reason, n));
    }
    body
}

/// Turns a streamed answer's text into chat chunks: content as content deltas, calls as
/// tool-call deltas.
pub struct CallChunks {
    reader: CallReader,
}

impl CallChunks {
    /// For an answer that may call the functions `names`.
    pub fn new(names: Vec<String>) -> Self {
        Self {
            reader: CallReader::with_names(names),
        }
    }

    /// The chunks for a piece of text (`first`: no chunk was sent yet, so the first one
    /// carries the role); none while the text could still open a call.
    pub fn push(&mut self, meta: &ResponseMeta, text: &str, first: bool) -> Vec<Value> {
        let events = self.reader.push(text);
        chunks(meta, events, first)
    }

    /// What the reader still held, then the finish chunk.
    pub fn finish(&mut self, meta: &ResponseMeta, reason: FinishReason, first: bool) -> Vec<Value> {
        let mut out = chunks(meta, self.reader.finish(), first);
        let delta = Delta::default();
        let f = Some(finish(reason, self.reader.calls()));
        out.push(meta.chat_chunk(vec![chunk_choice(delta, f)], None));
        out
    }
}

fn chunks(meta: &ResponseMeta, events: Vec<CallEvent>, mut first: bool) -> Vec<Value> {
    events
        .into_iter()
        .map(|e| {
            let mut delta = Delta {
                role: first.then(|| "assistant".to_string()),
                ..Delta::default()
            };
            first = false;
            match e {
                CallEvent::Content(t) => delta.content = Some(t),
                CallEvent::Start { index, name } => {
                    delta.tool_calls = Some(vec![ToolCallDelta {
                        index,
                        id: Some(call_id()),
                        kind: Some("function".into()),
                        function: FunctionCall {
                            name: Some(name),
                            arguments: Some(String::new()),
                        },
                    }])
                }
                CallEvent::Arguments { index, delta: args } => {
                    delta.tool_calls = Some(vec![ToolCallDelta {
                        index,
                        id: None,
                        kind: None,
                        function: FunctionCall {
                            name: None,
                            arguments: Some(args),
                        },
                    }])
                }
            }
            meta.chat_chunk(vec![chunk_choice(delta, None)], None)
        })
        .collect()
}
