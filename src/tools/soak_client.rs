//! One soak client's requests: valid ones of every kind (endpoint, class, strategy, sampling,
//! streaming), cancellations, and bad ones that must get a 4xx.

use std::io::{BufRead, BufReader};
use std::time::Instant;

use rand::Rng;
use serde_json::{json, Value};

use crate::tools::soak::{read_stream, SoakError};

pub struct Client {
    pub url: String,
    pub model: String,
    pub key: String,
    /// Cancellations run as a tenant of their own (see `soak`).
    pub cancel_key: String,
    pub max_tokens: usize,
}

pub enum Kind {
    Completed {
        usage_tokens: u64,
    },
    Cancelled,
    Bad {
        accepted: bool,
    },
    /// 429: the server is full; allowed.
    Refused,
    /// Any other 4xx for a valid request.
    WronglyRefused,
}

pub struct Outcome {
    /// The HTTP status; 0 for a transport failure or a broken stream.
    pub status: u16,
    pub kind: Kind,
    pub seconds: f64,
    pub ttft: Option<f64>,
}

pub fn model_id(url: &str, key: &str) -> Result<String, SoakError> {
    let v: Value = ureq::get(&format!("{url}/v1/models"))
        .set("Authorization", &format!("Bearer {key}"))
        .call()
        .map_err(|e| SoakError::Http(e.to_string()))?
        .into_json()
        .map_err(|e| SoakError::Protocol(e.to_string()))?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| SoakError::Protocol(format!("no model in {v}")))
}

fn post(url: &str, key: Option<&str>, body: &str) -> Result<ureq::Response, (u16, String)> {
    let mut req = ureq::post(url).set("Content-Type", "application/json");
    if let Some(k) = key {
        req = req.set("Authorization", &format!("Bearer {k}"));
    }
    match req.send_string(body) {
        Ok(r) => Ok(r),
        Err(ureq::Error::Status(code, r)) => Err((code, r.into_string().unwrap_or_default())),
        Err(e) => Err((0, e.to_string())),
    }
}

impl Client {
    /// A valid request of a random kind; `cancel` makes it a stream the client abandons
    /// after its first chunks.
    pub fn generate(&self, class: &str, prompt: &str, cancel: bool, rng: &mut impl Rng) -> Outcome {
        let chat = cancel || rng.random_bool(0.8);
        let stream = cancel || rng.random_bool(0.5);
        let mut body = json!({
            "model": self.model,
            "max_tokens": rng.random_range(4..=self.max_tokens.max(4)),
            "stream": stream,
            "workload": class,
        });
        if chat {
            body["messages"] = json!([{"role": "user", "content": prompt}]);
        } else {
            body["prompt"] = json!(prompt);
        }
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        if rng.random_bool(0.5) {
            body["temperature"] = json!(0);
        } else {
            body["temperature"] = json!(0.8);
            body["seed"] = json!(rng.random_range(0..1000));
        }
        let spec = [
            json!(null),
            json!({"enabled": false}),
            json!({"strategy": "ngram", "k": 3}),
            json!({"strategy": "suffix", "k": 4}),
            json!({"strategy": "early-exit", "k": 2}),
        ];
        let pick = &spec[rng.random_range(0..spec.len())];
        if !pick.is_null() {
            body["speculation"] = pick.clone();
        }
        let path = if chat {
            "chat/completions"
        } else {
            "completions"
        };
        let key = if cancel { &self.cancel_key } else { &self.key };
        let start = Instant::now();
        let outcome = |status, kind, ttft| Outcome {
            status,
            kind,
            seconds: start.elapsed().as_secs_f64(),
            ttft,
        };
        let resp = match post(
            &format!("{}/v1/{path}", self.url),
            Some(key),
            &body.to_string(),
        ) {
            Ok(r) => r,
            Err((429, _)) => return outcome(429, Kind::Refused, None),
            Err((code, _)) if (400..500).contains(&code) => {
                return outcome(code, Kind::WronglyRefused, None)
            }
            Err((code, _)) => return outcome(code, Kind::Bad { accepted: false }, None),
        };
        let status = resp.status();
        if cancel {
            // Two events, then hang up: the server must free the sequence.
            let mut lines = BufReader::new(resp.into_reader()).lines();
            let mut seen = 0;
            while seen < 2 {
                match lines.next() {
                    Some(Ok(l)) if l.starts_with("data: ") => seen += 1,
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            return outcome(status, Kind::Cancelled, None);
        }
        if stream {
            return match read_stream(resp.into_reader(), start) {
                Ok((ttft, tokens)) => outcome(
                    status,
                    Kind::Completed {
                        usage_tokens: tokens,
                    },
                    ttft,
                ),
                Err(_) => outcome(0, Kind::Bad { accepted: false }, None),
            };
        }
        let tokens = resp
            .into_json::<Value>()
            .ok()
            .and_then(|v| v["usage"]["completion_tokens"].as_u64());
        match tokens {
            Some(t) => outcome(status, Kind::Completed { usage_tokens: t }, None),
            None => outcome(0, Kind::Bad { accepted: false }, None),
        }
    }
}

/// One of seven bad requests; each must get a 4xx.
pub fn bad_request(c: &Client, which: u32) -> Outcome {
    let url = format!("{}/v1/chat/completions", c.url);
    let m = &c.model;
    let msgs = r#"[{"role": "user", "content": "hi"}]"#;
    let (key, body) = match which {
        0 => (Some(&c.key), "{".to_string()),
        1 => (
            Some(&c.key),
            format!(r#"{{"model": "{m}", "messages": {msgs}, "temprature": 1}}"#),
        ),
        2 => (
            Some(&c.key),
            format!(r#"{{"model": "{m}", "messages": {msgs}, "max_tokens": 0}}"#),
        ),
        3 => (
            Some(&c.key),
            format!(r#"{{"model": "nope", "messages": {msgs}}}"#),
        ),
        4 => (None, format!(r#"{{"model": "{m}", "messages": {msgs}}}"#)),
        5 => (
            Some(&c.key),
            format!(r#"{{"model": "{m}", "messages": {msgs}, "stop": ["a","b","c","d","e","f"]}}"#),
        ),
        _ => (
            Some(&c.key),
            format!(r#"{{"model": "{m}", "messages": {msgs}, "n": 1000}}"#),
        ),
    };
    let start = Instant::now();
    let (status, accepted) = match post(&url, key.map(String::as_str), &body) {
        Ok(r) => (r.status(), true),
        Err((code, _)) => (code, false),
    };
    Outcome {
        status,
        kind: Kind::Bad { accepted },
        seconds: start.elapsed().as_secs_f64(),
        ttft: None,
    }
}
