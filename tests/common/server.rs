//! A `specgate serve` process for end-to-end tests over real HTTP: started on a free port with
//! its own store, killed when dropped.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const ADMIN: &str = "test-admin-token";

pub struct Server {
    child: Child,
    pub base: String,
    pub model_id: String,
    _db: Option<tempfile::TempDir>,
}

impl Server {
    /// Start with extra `serve` flags and a store of its own; waits until it answers /ready.
    pub fn start(extra: &[&str]) -> Server {
        let db = tempfile::tempdir().expect("temp dir");
        let mut s = Self::start_in(db.path(), extra);
        s._db = Some(db);
        s
    }

    /// Start on the store under `dir` (kept when the server goes: restarts reuse it).
    pub fn start_in(dir: &std::path::Path, extra: &[&str]) -> Server {
        let store = dir.join("store");
        let mut args = vec!["--db", store.to_str().expect("a UTF-8 temp path")];
        args.extend_from_slice(extra);
        Self::start_with(&args)
    }

    /// Start with exactly these `serve` flags (the store among them).
    pub fn start_with(extra: &[&str]) -> Server {
        Self::serve(&super::model_path(), extra)
    }

    /// Serve `model` with extra flags and a store of its own.
    pub fn start_model(model: &std::path::Path, extra: &[&str]) -> Server {
        let db = tempfile::tempdir().expect("temp dir");
        let store = db.path().join("store");
        let mut args = vec!["--db", store.to_str().expect("a UTF-8 temp path")];
        args.extend_from_slice(extra);
        let mut s = Self::serve(model, &args);
        s._db = Some(db);
        s
    }

    /// Serve `model` with exactly these flags.
    fn serve(model: &std::path::Path, extra: &[&str]) -> Server {
        let model = model.to_path_buf();
        let mut child = Command::new(env!("CARGO_BIN_EXE_specgate"))
            .arg("serve")
            .arg("--model")
            .arg(&model)
            .args(["--port", "0", "--admin-token", ADMIN])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting specgate serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the listen line");
        let base = line
            .trim()
            .strip_prefix("specgate listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        let model_id = model.file_stem().unwrap().to_string_lossy().into_owned();
        let server = Server {
            child,
            base,
            model_id,
            _db: None,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while ureq::get(&server.url("/ready")).call().is_err() {
            assert!(Instant::now() < deadline, "server never became ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A new tenant; returns its API key.
    pub fn tenant(&self, name: &str) -> String {
        let v: Value = ureq::post(&self.url("/admin/v1/tenants"))
            .set("Authorization", &format!("Bearer {ADMIN}"))
            .send_json(json!({ "name": name }))
            .expect("creating a tenant")
            .into_json()
            .expect("tenant json");
        v["api_key"].as_str().expect("api_key").to_string()
    }

    /// A greedy chat request for `prompt`; `extra`'s fields are added or replace these.
    pub fn chat_body(&self, prompt: &str, max_tokens: usize, extra: Value) -> Value {
        let mut body = json!({
            "model": self.model_id,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        body
    }

    /// POST JSON with a key; (status, body) whatever the status.
    pub fn post(&self, path: &str, key: &str, body: &Value) -> (u16, Value) {
        let r = ureq::post(&self.url(path))
            .set("Authorization", &format!("Bearer {key}"))
            .send_json(body.clone());
        match r {
            Ok(resp) => (resp.status(), resp.into_json().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, resp)) => (code, resp.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("POST {path}: {e}"),
        }
    }

    /// POST a raw body (not necessarily JSON).
    pub fn post_raw(&self, path: &str, key: &str, body: &str) -> (u16, Value) {
        let r = ureq::post(&self.url(path))
            .set("Authorization", &format!("Bearer {key}"))
            .set("Content-Type", "application/json")
            .send_string(body);
        match r {
            Ok(resp) => (resp.status(), resp.into_json().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, resp)) => (code, resp.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("POST {path}: {e}"),
        }
    }

    /// A streaming request: the concatenated text, the finish reason and the usage chunk.
    pub fn stream(&self, path: &str, key: &str, body: &Value) -> StreamResult {
        let resp = ureq::post(&self.url(path))
            .set("Authorization", &format!("Bearer {key}"))
            .send_json(body.clone())
            .unwrap_or_else(|e| panic!("stream {path}: {e}"));
        assert_eq!(resp.header("content-type"), Some("text/event-stream"));
        parse_sse(resp.into_reader())
    }

    /// A gauge or counter from /metrics, summed over its label sets (0 when absent).
    pub fn metric(&self, name: &str) -> f64 {
        self.metric_if_exported(name).unwrap_or(0.0)
    }

    /// The same, or None when /metrics has no sample of it.
    pub fn metric_if_exported(&self, name: &str) -> Option<f64> {
        let text = ureq::get(&self.url("/metrics"))
            .set("Authorization", &format!("Bearer {ADMIN}"))
            .call()
            .expect("metrics")
            .into_string()
            .expect("metrics text");
        let samples: Vec<f64> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(' '))
            .filter(|(n, _)| *n == name || n.starts_with(&format!("{name}{{")))
            .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
            .collect();
        (!samples.is_empty()).then(|| samples.iter().sum())
    }
}

impl Server {
    /// SIGKILL: no shutdown, no flush.
    pub fn kill_9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM: the server drains and exits on its own.
    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("running kill")
            .success();
        assert!(ok, "kill -TERM failed");
    }

    /// Wait up to `timeout` for the process to exit; its status, or None if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Any method with the admin token; (status, body) whatever the status.
    pub fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        request(method, &self.url(path), ADMIN, body)
    }
}

/// (status, JSON body) of any request, whatever the status; panics only on transport errors.
pub fn request(method: &str, url: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let req = ureq::request(method, url).set("Authorization", &format!("Bearer {token}"));
    let r = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    match r {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Default)]
pub struct StreamResult {
    pub text: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    pub chunks: usize,
    pub done: bool,
    /// Each chunk's `logprobs.content` entries, in order (chat with `logprobs`).
    pub logprobs: Vec<Value>,
    /// Per chunk: its text, and how many `logprobs.content` entries it carried.
    pub pieces: Vec<(String, usize)>,
    /// Every chunk as sent.
    pub events: Vec<Value>,
}

/// Read server-sent events until `data: [DONE]`.
pub fn parse_sse(reader: impl Read) -> StreamResult {
    let mut out = StreamResult::default();
    for line in BufReader::new(reader).lines() {
        let line = line.expect("reading the stream");
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            out.done = true;
            break;
        }
        let v: Value = serde_json::from_str(data).expect("chunk json");
        assert!(v.get("error").is_none(), "error in stream: {v}");
        out.chunks += 1;
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            out.usage = Some(u.clone());
        }
        if let Some(c) = v["choices"].get(0) {
            let piece = c["delta"]["content"].as_str().or(c["text"].as_str());
            out.text += piece.unwrap_or_default();
            let mut entries = 0;
            if let Some(lp) = c["logprobs"]["content"].as_array() {
                out.logprobs.extend(lp.iter().cloned());
                entries = lp.len();
            }
            out.pieces
                .push((piece.unwrap_or_default().to_string(), entries));
            if let Some(f) = c["finish_reason"].as_str() {
                out.finish_reason = Some(f.to_string());
            }
        }
        out.events.push(v);
    }
    out
}

/// A chat answer's text (empty when it has none).
pub fn chat_text(v: &Value) -> &str {
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
}
