//! Log-probabilities in OpenAI's two shapes: chat's `logprobs.content` (token, logprob,
//! bytes and `top_logprobs` per token) and the completions endpoint's parallel lists
//! (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::gateway::http::responses::Endpoint;

use crate::engine::logprobs::TokenLogprob;
use crate::model::tokenizer::Tokenizer;

/// Renders one request's log-probabilities chunk by chunk in its endpoint's shape.
pub struct Renderer {
    tok: Arc<Tokenizer>,
    endpoint: Endpoint,
    /// Completions: where the next token's text starts, in characters.
    offset: TextOffset,
}

impl Renderer {
    pub fn new(tok: Arc<Tokenizer>, endpoint: Endpoint) -> Self {
        Self {
            tok,
            endpoint,
            offset: TextOffset::default(),
        }
    }

    /// The `logprobs` object for the next `entries` of the answer.
    pub fn render(&mut self, entries: &[TokenLogprob]) -> Value {
        match self.endpoint {
            Endpoint::Chat => chat(&self.tok, entries),
            Endpoint::Completion => completion(&self.tok, entries, &mut self.offset),
        }
    }
}

/// Characters of an answer whose token bytes arrive one token at a time, counted as the
/// answer's text shows them: a character split across tokens counts once it is whole, and
/// each invalid sequence as one replacement character. Only an unfinished character's bytes
/// are kept, so counting costs the new bytes alone.
#[derive(Debug, Default)]
pub struct TextOffset {
    chars: usize,
    partial: Vec<u8>,
}

impl TextOffset {
    /// Characters complete so far.
    pub fn chars(&self) -> usize {
        self.chars
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let mut rest: &[u8] = &self.partial;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.chars += s.chars().count();
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.chars += std::str::from_utf8(valid).map_or(0, |s| s.chars().count());
                    let Some(bad) = e.error_len() else {
                        rest = after; // an unfinished character: wait for its bytes
                        break;
                    };
                    self.chars += 1;
                    rest = &after[bad..];
                }
            }
        }
        let keep = rest.len();
        self.partial.drain(..self.partial.len() - keep);
    }
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
/// counted by `offset` (advanced past theirs). `top_logprobs` holds the chosen token too,
/// as OpenAI's does (up to n + 1 entries), likeliest first. It is a JSON object, so
/// alternatives whose text is the same (parts of characters) share one key.
pub fn completion(tok: &Tokenizer, entries: &[TokenLogprob], offset: &mut TextOffset) -> Value {
    let (mut tokens, mut logprobs, mut tops, mut offsets) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in entries {
        let (token, bytes) = text(tok, e.token);
        offsets.push(offset.chars());
        offset.push(&bytes);
        // Likeliest first; a text two alternatives share keeps the likelier one's value.
        let mut top = Map::new();
        for &(id, lp) in &e.top {
            top.entry(text(tok, id).0).or_insert(json!(lp));
        }
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

#[cfg(test)]
mod tests {
    use super::TextOffset;

    /// What the whole answer's text shows, counted the slow way.
    fn lossy_chars(bytes: &[u8]) -> usize {
        String::from_utf8_lossy(bytes).chars().count()
    }

    #[test]
    fn offsets_count_characters_as_the_answer_shows_them() {
        // "aé€😀", a lone continuation byte, an overlong lead, then "z", fed in every split.
        let answer: Vec<u8> = ["aé€😀".as_bytes(), &[0x80], &[0xC0, 0xAF], "z".as_bytes()].concat();
        for cut in 1..answer.len() {
            let mut offset = TextOffset::default();
            let mut seen = Vec::new();
            for piece in answer.chunks(cut) {
                seen.extend_from_slice(piece);
                offset.push(piece);
                // Complete characters only: an unfinished one is not counted yet.
                let whole = match std::str::from_utf8(&seen) {
                    Err(e) if e.error_len().is_none() => e.valid_up_to(),
                    _ => seen.len(),
                };
                assert_eq!(offset.chars(), lossy_chars(&seen[..whole]), "cut {cut}");
            }
            assert_eq!(offset.chars(), lossy_chars(&answer), "cut {cut}");
        }
    }
}
