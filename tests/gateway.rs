//! The gateway end to end: a real `specgate serve` process, real HTTP, the real model.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::server::{chat_text, Server};
use serde_json::{json, Value};
use specgate::engine::generate::{generate, GenerateParams};
use specgate::model::chat_template::ChatMessage;
use specgate::SamplingParams;
use specgate_strategies::PlainDrafter;

const MAX_TOKENS: usize = 40;

/// Plain greedy text for a prompt, as `specgate generate` produces it.
fn expected(chat: bool, prompt: &str, max_tokens: usize) -> (String, usize) {
    let mut lm = common::model();
    let text = if chat {
        lm.chat_prompt(&[ChatMessage::new("user", prompt)]).unwrap()
    } else {
        prompt.to_string()
    };
    let ids = lm.tokenizer.encode(&text).unwrap();
    let params = GenerateParams {
        max_tokens,
        sampling: SamplingParams::greedy(),
        seed: 0,
        stop: Vec::new(),
        max_draft_tokens: 0,
        adaptive_k: false,
        row_cost: None,
        penalties: Default::default(),
    };
    let lm = &mut *lm;
    let out = generate(
        &mut lm.model,
        &lm.tokenizer,
        &ids,
        &params,
        &mut PlainDrafter,
        |_| {},
    )
    .unwrap();
    (out.text, out.generated_tokens)
}

fn first_prompt(set: &str) -> String {
    let line = common::fixture(&format!("prompts/{set}.jsonl"));
    let v: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    v["prompt"].as_str().unwrap().to_string()
}

#[test]
fn chat_and_completions_equal_generate_streamed_or_not_whatever_the_strategy() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    for set in ["code_edit", "rag", "creative"] {
        let prompt = first_prompt(set);
        let (want, tokens) = expected(true, &prompt, MAX_TOKENS);
        // The default plan for the class, then each strategy forced.
        let mut overrides = vec![
            json!({}),
            json!({"speculation": {"enabled": false}}),
            json!({"speculation": {"strategy": "ngram", "k": 4}}),
            json!({"speculation": {"strategy": "suffix", "k": 8}}),
            json!({"speculation": {"strategy": "early-exit", "k": 2}}),
        ];
        if set == "creative" {
            // The EAGLE layer reads every committed row's hidden state from the engine's
            // batches (creative routes offer it).
            overrides.push(json!({"speculation": {"strategy": "eagle", "k": 8}}));
        }
        for extra in overrides {
            let (status, v) = s.post(
                "/v1/chat/completions",
                &key,
                &s.chat_body(&prompt, MAX_TOKENS, extra.clone()),
            );
            assert_eq!(status, 200, "{set} {extra}: {v}");
            assert_eq!(
                chat_text(&v),
                want,
                "{set} {extra}: gateway text differs from generate"
            );
            assert_eq!(v["object"], "chat.completion");
            assert_eq!(v["usage"]["completion_tokens"], tokens);
            assert!(v["usage"]["speculative"]["target_passes"].as_u64().unwrap() >= 1);
            if extra["speculation"]["strategy"] == "eagle" {
                let spec = &v["usage"]["speculative"];
                assert_eq!(spec["strategy"], "eagle", "{spec}");
                assert!(spec["accepted"].as_u64().unwrap() > 0, "{spec}");
            }
        }
        let streamed = s.stream(
            "/v1/chat/completions",
            &key,
            &s.chat_body(
                &prompt,
                MAX_TOKENS,
                json!({"stream": true, "stream_options": {"include_usage": true}}),
            ),
        );
        assert!(streamed.done, "{set}: stream must end with [DONE]");
        assert_eq!(streamed.text, want, "{set}: streamed text differs");
        assert!(streamed.finish_reason.is_some());
        let usage = streamed.usage.expect("include_usage sends a usage chunk");
        assert_eq!(usage["completion_tokens"], tokens);
    }

    // Completions: raw prompt, no template.
    let prompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";
    let (want, _) = expected(false, prompt, MAX_TOKENS);
    let body = json!({"model": s.model_id, "prompt": prompt, "max_tokens": MAX_TOKENS,
                      "temperature": 0, "workload": "code_edit"});
    let (status, v) = s.post("/v1/completions", &key, &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"].as_str().unwrap(), want);
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let streamed = s.stream("/v1/completions", &key, &sbody);
    assert_eq!(streamed.text, want);
    assert!(streamed.usage.is_none(), "usage only when asked for");

    // The models list names the served model.
    let models: Value = ureq::get(&s.url("/v1/models"))
        .set("Authorization", &format!("Bearer {key}"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(models["data"][0]["id"], s.model_id.as_str());
}

/// A completions request written on a raw socket, so the test decides when the client leaves
/// (dropping the socket).
fn raw_completion(s: &Server, key: &str, body: Value) -> TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let mut sock = TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    write!(
        sock,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    sock
}

/// A streaming request over a raw socket, dropped after the first bytes of its answer.
fn disconnect_mid_stream(s: &Server, key: &str) {
    let body = json!({"model": s.model_id, "prompt": "Once upon a time", "max_tokens": 1500,
                      "temperature": 0, "stream": true});
    let mut sock = raw_completion(s, key, body);
    let mut buf = [0u8; 2048];
    let n = sock.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    drop(sock);
}

#[test]
fn sixteen_concurrent_streams_from_three_tenants_equal_their_single_runs_and_free_the_cache() {
    let s = Server::start(&[]);
    let keys: Vec<String> = (0..3).map(|i| s.tenant(&format!("tenant-{i}"))).collect();
    let sets = ["code_edit", "rag", "creative"];
    let strategies = [
        json!({}),
        json!({"speculation": {"strategy": "ngram", "k": 3}}),
        json!({"speculation": {"strategy": "suffix"}}),
        json!({"speculation": {"strategy": "early-exit", "k": 2}}),
        json!({"speculation": {"enabled": false}}),
    ];
    let mut cases = Vec::new();
    for i in 0..16 {
        let set = sets[i % 3];
        let lines = common::fixture(&format!("prompts/{set}.jsonl"));
        let line = lines.lines().nth(i / 3).unwrap();
        let prompt = serde_json::from_str::<Value>(line).unwrap()["prompt"]
            .as_str()
            .unwrap()
            .to_string();
        let (want, _) = expected(true, &prompt, 24);
        // Creative prompts alternate with Medusa trees (its default policy allows them), so
        // tree passes share ragged batches with chains and prefills.
        let spec = match (set, i % 2) {
            ("creative", 0) => json!({"speculation": {"strategy": "medusa-tree", "k": 3}}),
            ("creative", _) => json!({"speculation": {"strategy": "medusa", "k": 3}}),
            _ => strategies[i % strategies.len()].clone(),
        };
        let mut body = s.chat_body(&prompt, MAX_TOKENS, spec);
        body["max_tokens"] = json!(24);
        body["stream"] = json!(true);
        body["workload"] = json!(set);
        cases.push((keys[i % 3].clone(), body, want));
    }
    disconnect_mid_stream(&s, &keys[0]);
    std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(key, body, want)| {
                let s = &s;
                scope.spawn(move || {
                    let got = s.stream("/v1/chat/completions", key, body);
                    assert!(got.done);
                    assert_eq!(&got.text, want, "concurrent output differs: {body}");
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a concurrent request failed");
        }
    });
    // Every sequence, the abandoned one included, has left the engine.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (live, kv) = (
            s.metric("specgate_live_sequences"),
            s.metric("specgate_kv_cache_bytes"),
        );
        if live == 0.0 && kv == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "KV not freed: {live} live, {kv} bytes"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(s.metric("specgate_requests_cancelled_total") >= 1.0);
    assert!(s.metric("specgate_batch_sequences_count") > 0.0);
    // The cost of a verify row the drafts were held to: a share of a plain step. Its value
    // comes from step timings, which four servers sharing two test cores make noise of (a
    // flat fit prices rows at 0 legitimately); the cost model's unit tests check the value.
    let row_cost = s
        .metric_if_exported("specgate_verify_row_cost")
        .expect("the verify row cost gauge is exported");
    assert!((0.0..1.0).contains(&row_cost), "row cost {row_cost}");
}

/// A non-streamed request that runs for seconds (up to 2048 tokens of counting), sent on a
/// raw socket and started: it holds a batch slot until it ends or the socket is dropped,
/// which is the only way a non-streamed client can tell the server it left.
fn hold_a_slot(s: &Server, key: &str) -> TcpStream {
    let body = json!({"model": s.model_id, "max_tokens": 2048, "temperature": 0,
                      "prompt": "Count from 1 to 5000, one number per line:\n1\n2\n3\n"});
    let sock = raw_completion(s, key, body);
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.metric("specgate_live_sequences") < 1.0 {
        assert!(Instant::now() < deadline, "the request never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    sock
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let s = Server::start(&["--max-sequences", "1", "--queue-capacity", "1"]);
    let key = s.tenant("acme");
    let body = json!({"model": s.model_id, "prompt": "Once upon a time", "max_tokens": 16,
                      "temperature": 0});
    let send = |body: &Value| match ureq::post(&s.url("/v1/completions"))
        .set("Authorization", &format!("Bearer {key}"))
        .send_json(body.clone())
    {
        Ok(r) => (r.status(), None),
        Err(ureq::Error::Status(code, r)) => (code, r.header("retry-after").map(str::to_string)),
        Err(e) => panic!("{e}"),
    };
    // One request holds the only slot for as long as the test needs...
    let held = hold_a_slot(&s, &key);
    let answered = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(u16, Option<String>)> = std::thread::scope(|scope| {
        // ...then four at once: one waits in the queue, the rest are refused at once.
        let hs: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let r = send(&body);
                    answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    r
                })
            })
            .collect();
        // The refusals come at once; the counts below fail the test if they do not.
        let deadline = Instant::now() + Duration::from_secs(30);
        while answered.load(std::sync::atomic::Ordering::SeqCst) < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // The holder leaves: the queued request gets the slot and finishes.
        drop(held);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|r| r.0 == 200).count();
    let limited: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    assert_eq!(
        (ok, limited.len()),
        (1, 3),
        "one slot held, one queue place, four at once: {results:?}"
    );
    assert!(
        limited.iter().all(|r| r.1.is_some()),
        "429 carries Retry-After"
    );
}

#[test]
fn a_client_that_leaves_a_non_streamed_request_frees_its_sequence() {
    // Nothing is written to a non-streamed client until the end, so only the socket's close
    // can tell the server it left: the generation must stop then, not at max_tokens.
    let s = Server::start(&[]);
    let key = s.tenant("leaver");
    let sock = hold_a_slot(&s, &key);
    let cancelled = s
        .metric_if_exported("specgate_requests_cancelled_total")
        .unwrap_or(0.0);
    drop(sock);
    let left = Instant::now();
    while s.metric("specgate_live_sequences") > 0.0 {
        // Only a guard against a hang: the cancelled counter below tells cancellation from
        // running to the end.
        assert!(
            left.elapsed() < Duration::from_secs(30),
            "the abandoned request still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        s.metric("specgate_requests_cancelled_total"),
        cancelled + 1.0,
        "it ended by cancellation, not by finishing"
    );
}

#[test]
fn a_held_answer_still_times_its_first_token_and_each_token_after() {
    // A non-streamed answer is delivered once, at the end; its latency metrics come from
    // when each step committed, not from when the text arrived.
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let body = s.chat_body(
        "Write a long story about a lighthouse.",
        160,
        json!({"speculation": {"enabled": false}, "workload": "creative"}),
    );
    let t = std::time::Instant::now();
    let (status, v) = s.post("/v1/chat/completions", &key, &body);
    let e2e = t.elapsed().as_secs_f64();
    assert_eq!(status, 200, "{v}");
    let n = v["usage"]["completion_tokens"].as_u64().unwrap() as f64;
    let ttft = s.metric("specgate_time_to_first_token_seconds_sum");
    // Bounds loose enough for a loaded machine, tight enough to tell commit-time timing
    // (TTFT a small part, ITL most of the run) from arrival-time timing (ITL near 0).
    assert!(ttft > 0.0 && ttft < e2e / 2.0, "TTFT {ttft} s of {e2e} s");
    assert_eq!(
        s.metric("specgate_inter_token_latency_seconds_count"),
        n - 1.0,
        "one inter-token latency per token after the first"
    );
    let itl = s.metric("specgate_inter_token_latency_seconds_sum");
    assert!(itl > e2e / 4.0 && itl < e2e, "ITL sum {itl} s of {e2e} s");
}

#[test]
fn metrics_show_the_engine_gauges_at_zero_before_the_first_request() {
    let s = Server::start(&[]);
    let text = ureq::get(&s.url("/metrics"))
        .set(
            "Authorization",
            &format!("Bearer {}", common::server::ADMIN),
        )
        .call()
        .expect("/metrics")
        .into_string()
        .expect("text");
    for gauge in [
        "specgate_live_sequences",
        "specgate_queue_depth",
        "specgate_kv_cache_bytes",
        "specgate_kv_cache_reserved_bytes",
    ] {
        assert!(
            text.lines().any(|l| l == format!("{gauge} 0")),
            "{gauge} is not at zero from start-up:\n{text}"
        );
    }
}
