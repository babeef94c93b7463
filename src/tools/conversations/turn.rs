//! One streamed chat turn as a client sees it: when the first piece arrived, the text and tool
//! calls assembled from the deltas, and the usage (specgate's `cached_tokens`, or
//! llama-server's `timings.cache_n` where a server reports that instead).

use std::io::{BufRead, BufReader};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::tools::loadgen::LoadgenError;

/// Most calls one turn's answer is read for.
const MAX_CALLS: usize = 64;

/// A finished turn.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TurnSample {
    pub ttft: f64,
    pub e2e: f64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    #[serde(skip)]
    pub text: String,
    /// (id, name, arguments) of each call the answer made.
    #[serde(skip)]
    pub calls: Vec<(String, String, String)>,
}

/// POST `body` (streamed) and read the answer.
pub fn stream_turn(url: &str, key: &str, body: &Value) -> Result<TurnSample, LoadgenError> {
    let start = Instant::now();
    let resp = crate::tools::loadgen::post_chat(url, key, body)?;
    let mut turn = TurnSample::default();
    let mut first = None;
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data.trim() == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| LoadgenError::Protocol(format!("{e}: {data}")))?;
        if let Some(err) = v.get("error") {
            return Err(LoadgenError::Protocol(err.to_string()));
        }
        if absorb(&mut turn, &v["choices"][0]["delta"]) {
            first.get_or_insert_with(Instant::now);
        }
        read_usage(&mut turn, &v);
    }
    turn.ttft = first.map_or(0.0, |f| (f - start).as_secs_f64());
    turn.e2e = start.elapsed().as_secs_f64();
    Ok(turn)
}

/// Add a delta's text and call pieces; true when it carried any.
fn absorb(turn: &mut TurnSample, delta: &Value) -> bool {
    let mut any = false;
    if let Some(s) = delta["content"].as_str().filter(|s| !s.is_empty()) {
        turn.text += s;
        any = true;
    }
    for call in delta["tool_calls"].as_array().into_iter().flatten() {
        // Another server's index is not trusted to be small.
        let i = (call["index"].as_u64().unwrap_or(0) as usize).min(MAX_CALLS - 1);
        while turn.calls.len() <= i {
            turn.calls.push(Default::default());
        }
        let c = &mut turn.calls[i];
        if let Some(id) = call["id"].as_str() {
            c.0 = id.to_string();
        }
        if let Some(name) = call["function"]["name"].as_str() {
            c.1 += name;
        }
        if let Some(args) = call["function"]["arguments"].as_str() {
            c.2 += args;
        }
        any = true;
    }
    any
}

fn read_usage(turn: &mut TurnSample, v: &Value) {
    let usage = &v["usage"];
    if let Some(n) = usage["prompt_tokens"].as_u64() {
        turn.prompt_tokens = n;
    }
    if let Some(n) = usage["completion_tokens"].as_u64() {
        turn.completion_tokens = n;
    }
    if let Some(n) = usage["prompt_tokens_details"]["cached_tokens"].as_u64() {
        turn.cached_tokens = n;
    } else if let Some(n) = v["timings"]["cache_n"].as_u64() {
        turn.cached_tokens = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn call_pieces_and_usage_assemble_into_one_turn() {
        let mut t = TurnSample::default();
        assert!(absorb(
            &mut t,
            &json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]})
        ));
        assert!(absorb(
            &mut t,
            &json!({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]})
        ));
        assert!(!absorb(&mut t, &json!({"content": ""})));
        read_usage(
            &mut t,
            &json!({"usage": {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}}),
        );
        assert_eq!(
            t.calls,
            vec![("c1".into(), "f".into(), "{\"a\": 1}".into())]
        );
        assert_eq!(
            (t.prompt_tokens, t.cached_tokens, t.completion_tokens),
            (10, 8, 3)
        );
        // llama-server's own account of its cache.
        read_usage(
            &mut t,
            &json!({"usage": {"prompt_tokens": 12}, "timings": {"cache_n": 11}}),
        );
        assert_eq!(t.cached_tokens, 11);
    }
}
