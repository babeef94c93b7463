//! Log-probabilities in OpenAI's two shapes: chat's `logprobs.content` (token, logprob,
//! bytes and `top_logprobs` per token) and the completions endpoint's parallel lists
//! (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::responses::Endpoint;

use crate::logprobs::TokenLogprob;
use crate::tokenizer::Tokenizer;

/// Renders one request's log-probabilities chunk by chunk in its endpoint's shape.
pub struct Renderer {
    tok: Arc<Tokenizer>,
    endpoint: Endpoint,
    /// Completions: the bytes of the answer's tokens so far (text offsets count its
    /// characters).
    answer: Vec<u8>,
}

impl Renderer {
    pub fn new(tok: Arc<Tokenizer>, endpoint: Endpoint) -> Self {
        Self {
            tok,
            endpoint,
            answer: Vec::new(),
        }
    }

    /// The `logprobs` object for the next `entries` of the answer.
    pub fn render(&mut self, entries: &[TokenLogprob]) -> Value {
        match self.endpoint {
            Endpoint::Chat => chat(&self.tok, entries),
            Endpoint::Completion => completion(&self.tok, entries, &mut self.answer),
        }
    }
}

/// Whole characters in `bytes` (a character split across tokens counts once it is whole).
fn chars(bytes: &[u8]) -> usize {
    let valid = match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    valid.chars().count()
}

/// A token's text (lossy where it holds part of a character; `bytes` has them all).
fn text(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_bytes(id);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

fn chat_token(tok: &Tokenizer, id: u32, logprob: f32) -> Value {
    let (token, bytes) = text(tok, id);
    json!({"token": token, "logprob": logprob, "bytes": bytes})
}

/// Chat's `logprobs` object for `entries`.
pub fn chat(tok: &Tokenizer, entries: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = chat_token(tok, e.token, e.logprob);
            let top: Vec<Value> = e
                .top
                .iter()
                .map(|&(id, lp)| chat_token(tok, id, lp))
                .collect();
            v["top_logprobs"] = Value::Array(top);
            v
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// The completions endpoint's `logprobs` object for `entries`, which follow the tokens
/// whose bytes are `answer` (extended by theirs). `top_logprobs` holds the chosen token too,
/// as OpenAI's does (up to n + 1 entries); it is a JSON object, so its keys come out in name
/// order, and alternatives whose text is the same (parts of characters) share one key.
pub fn completion(tok: &Tokenizer, entries: &[TokenLogprob], answer: &mut Vec<u8>) -> Value {
    let (mut tokens, mut logprobs, mut tops, mut offsets) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in entries {
        let (token, bytes) = text(tok, e.token);
        offsets.push(chars(answer));
        answer.extend_from_slice(&bytes);
        let mut top: Map<String, Value> = e
            .top
            .iter()
            .map(|&(id, lp)| (text(tok, id).0, json!(lp)))
            .collect();
        top.entry(token.clone()).or_insert(json!(e.logprob));
        tokens.push(token);
        logprobs.push(e.logprob);
        tops.push(Value::Object(top));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": logprobs,
        "top_logprobs": tops,
        "text_offset": offsets,
    })
}
