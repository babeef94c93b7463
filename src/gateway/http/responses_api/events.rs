//! The Responses API's stream: the answer's text and calls as typed events
//! (`response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, … `response.completed`), each numbered. The
//! items it closes are the ones the final response object holds. Pure.

use bytes::Bytes;
use serde_json::{json, Value};

use super::output::{call_item, item_status, message_item, new_id};
use crate::constraint::tools::CallEvent;
use crate::engine::sequence::FinishReason;

/// The item being streamed.
enum Open {
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        args: String,
    },
}

#[derive(Default)]
pub struct ResponseEvents {
    sequence: u64,
    items: Vec<Value>,
    open: Option<Open>,
}

impl ResponseEvents {
    fn event(&mut self, kind: &str, mut body: Value) -> Value {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        body
    }

    /// `response.created` and `response.in_progress` for the in-progress object.
    pub fn start(&mut self, response: &Value) -> Vec<Value> {
        vec![
            self.event("response.created", json!({"response": response})),
            self.event("response.in_progress", json!({"response": response})),
        ]
    }

    /// The events for a piece of the answer.
    pub fn push(&mut self, e: CallEvent) -> Vec<Value> {
        let mut out = Vec::new();
        match e {
            CallEvent::Content(delta) => {
                if !matches!(self.open, Some(Open::Message { .. })) {
                    out.extend(self.close(FinishReason::Stop));
                    out.extend(self.open_message());
                }
                if let Some(Open::Message { id, text }) = self.open.as_mut() {
                    text.push_str(&delta);
                    let id = id.clone();
                    let body = json!({"item_id": id, "output_index": self.items.len(),
                                      "content_index": 0, "delta": delta, "logprobs": []});
                    out.push(self.event("response.output_text.delta", body));
                }
            }
            CallEvent::Start { name, .. } => {
                out.extend(self.close(FinishReason::Stop));
                let (id, call_id) = (new_id("fc"), new_id("call"));
                let item = call_item(&id, &call_id, &name, "", "in_progress");
                let body = json!({"output_index": self.items.len(), "item": item});
                out.push(self.event("response.output_item.added", body));
                self.open = Some(Open::Call {
                    id,
                    call_id,
                    name,
                    args: String::new(),
                });
            }
            CallEvent::Arguments { delta, .. } => {
                if let Some(Open::Call { id, args, .. }) = self.open.as_mut() {
                    args.push_str(&delta);
                    let id = id.clone();
                    let body = json!({"item_id": id, "output_index": self.items.len(),
                                      "delta": delta});
                    out.push(self.event("response.function_call_arguments.delta", body));
                }
            }
        }
        out
    }

    fn open_message(&mut self) -> Vec<Value> {
        let id = new_id("msg");
        let index = self.items.len();
        let mut item = message_item(&id, "", "in_progress");
        item["content"] = json!([]);
        let added = json!({"output_index": index, "item": item});
        let part = json!({"item_id": id, "output_index": index, "content_index": 0,
                          "part": {"type": "output_text", "text": "", "annotations": []}});
        self.open = Some(Open::Message {
            id,
            text: String::new(),
        });
        vec![
            self.event("response.output_item.added", added),
            self.event("response.content_part.added", part),
        ]
    }

    /// Close the open item, if any.
    fn close(&mut self, finish: FinishReason) -> Vec<Value> {
        let status = item_status(finish);
        let index = self.items.len();
        let mut out = Vec::new();
        let item = match self.open.take() {
            None => return out,
            Some(Open::Message { id, text }) => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                let done = json!({"item_id": id, "output_index": index, "content_index": 0,
                                  "text": text, "logprobs": []});
                out.push(self.event("response.output_text.done", done));
                let body = json!({"item_id": id, "output_index": index, "content_index": 0,
                                  "part": part});
                out.push(self.event("response.content_part.done", body));
                message_item(&id, &text, status)
            }
            Some(Open::Call {
                id,
                call_id,
                name,
                args,
            }) => {
                let body = json!({"item_id": id, "output_index": index, "arguments": args});
                out.push(self.event("response.function_call_arguments.done", body));
                call_item(&id, &call_id, &name, &args, status)
            }
        };
        let body = json!({"output_index": index, "item": item});
        out.push(self.event("response.output_item.done", body));
        self.items.push(item);
        out
    }

    /// Close the last item (an answer with nothing in it still gets an empty message) and
    /// hand back the events and the output items.
    pub fn finish(&mut self, finish: FinishReason) -> (Vec<Value>, Vec<Value>) {
        let mut out = Vec::new();
        if self.items.is_empty() && self.open.is_none() {
            out.extend(self.open_message());
        }
        out.extend(self.close(finish));
        (out, std::mem::take(&mut self.items))
    }

    /// The closing event: `response.completed` (or `response.incomplete`, cut by length).
    pub fn end(&mut self, response: Value, finish: FinishReason) -> Value {
        let kind = match finish {
            FinishReason::Stop => "response.completed",
            FinishReason::Length => "response.incomplete",
        };
        self.event(kind, json!({"response": response}))
    }

    /// A failure after the stream began.
    pub fn failed(&mut self, response: Value) -> Value {
        self.event("response.failed", json!({"response": response}))
    }
}

/// One event as SSE: its type named on the `event:` line, as OpenAI sends it.
pub fn sse(event: &Value) -> Bytes {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    Bytes::from(format!("event: {kind}\ndata: {event}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(events: &[Value]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn text_then_a_call_stream_as_two_items_numbered_in_order() {
        let mut s = ResponseEvents::default();
        let mut all = s.start(&json!({"id": "resp_1"}));
        all.extend(s.push(CallEvent::Content("Let me ".into())));
        all.extend(s.push(CallEvent::Content("check.".into())));
        all.extend(s.push(CallEvent::Start {
            index: 0,
            name: "get_weather".into(),
        }));
        all.extend(s.push(CallEvent::Arguments {
            index: 0,
            delta: "{\"city\": \"Oslo\"}".into(),
        }));
        let (tail, items) = s.finish(FinishReason::Stop);
        all.extend(tail);
        assert_eq!(
            kinds(&all),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
            ]
        );
        let numbers: Vec<u64> = all
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..all.len() as u64).collect::<Vec<_>>());
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["content"][0]["text"], "Let me check.");
        assert_eq!(items[1]["arguments"], "{\"city\": \"Oslo\"}");
        // The streamed item ids are the final items' ids.
        assert_eq!(all[4]["item_id"], items[0]["id"]);
        assert_eq!(all[10]["item_id"], items[1]["id"]);
    }

    #[test]
    fn an_empty_answer_is_one_empty_message_marked_incomplete_when_cut() {
        let mut s = ResponseEvents::default();
        let (events, items) = s.finish(FinishReason::Length);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["status"], "incomplete");
        assert_eq!(items[0]["content"][0]["text"], "");
        assert_eq!(events.last().unwrap()["type"], "response.output_item.done");
        assert_eq!(
            s.end(json!({}), FinishReason::Length)["type"],
            "response.incomplete"
        );
    }
}
