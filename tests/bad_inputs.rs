//! Bad input end to end: every malformed, out-of-range or unsupported request to a real
//! `specgate serve` gets an OpenAI-format error naming what is wrong, bad keys are refused,
//! and the server keeps serving.

mod common;

use common::server::{chat_text, Server};
use serde_json::{json, Value};

#[test]
fn bad_inputs_get_openai_errors_and_the_server_keeps_serving() {
    let s = Server::start(&["--body-limit", "20000", "--max-tokens-limit", "512"]);
    let key = s.tenant("acme");
    let m = s.model_id.clone();
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    let long = "word ".repeat(5000);
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("malformed json", "{\"model\": ".into(), 400, "invalid_request_error"),
        ("not an object", "[1, 2]".into(), 400, "invalid_request_error"),
        ("empty body", "".into(), 400, "invalid_request_error"),
        ("unknown model", json!({"model": "gpt-9", "messages": msgs}).to_string(), 404, "invalid_request_error"),
        ("no model", json!({"messages": msgs}).to_string(), 400, "invalid_request_error"),
        ("empty messages", json!({"model": m, "messages": []}).to_string(), 400, "invalid_request_error"),
        ("wrong type", json!({"model": m, "messages": "hi"}).to_string(), 400, "invalid_request_error"),
        ("bad role", json!({"model": m, "messages": [{"role": "robot", "content": "x"}]}).to_string(), 400, "invalid_request_error"),
        ("unknown field", json!({"model": m, "messages": msgs, "temprature": 0}).to_string(), 400, "invalid_request_error"),
        ("tools", json!({"model": m, "messages": msgs, "tools": [{"type": "retrieval"}]}).to_string(), 400, "invalid_request_error"),
        ("json mode", json!({"model": m, "messages": msgs, "response_format": {"type": "yaml"}}).to_string(), 400, "invalid_request_error"),
        ("a tool call to replay", json!({"model": m, "messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]}]}).to_string(), 400, "invalid_request_error"),
        ("null user content", json!({"model": m, "messages": [{"role": "user", "content": null}]}).to_string(), 400, "invalid_request_error"),
        ("max_tokens 0", json!({"model": m, "messages": msgs, "max_tokens": 0}).to_string(), 400, "invalid_request_error"),
        ("max_tokens negative", json!({"model": m, "messages": msgs, "max_tokens": -5}).to_string(), 400, "invalid_request_error"),
        ("max_tokens over the limit", json!({"model": m, "messages": msgs, "max_tokens": 513}).to_string(), 400, "invalid_request_error"),
        ("huge number", format!("{{\"model\": \"{m}\", \"messages\": {msgs}, \"max_tokens\": 1e400}}"), 400, "invalid_request_error"),
        ("n = 2", json!({"model": m, "messages": msgs, "n": 2}).to_string(), 400, "invalid_request_error"),
        ("temperature 3", json!({"model": m, "messages": msgs, "temperature": 3}).to_string(), 400, "invalid_request_error"),
        ("top_p 0", json!({"model": m, "messages": msgs, "top_p": 0}).to_string(), 400, "invalid_request_error"),
        ("five stops", json!({"model": m, "messages": msgs, "stop": ["a","b","c","d","e"]}).to_string(), 400, "invalid_request_error"),
        ("unknown workload", json!({"model": m, "messages": msgs, "workload": "poetry"}).to_string(), 400, "invalid_request_error"),
        ("unknown strategy", json!({"model": m, "messages": msgs, "speculation": {"strategy": "magic"}}).to_string(), 400, "invalid_request_error"),
        ("draft without a draft model", json!({"model": m, "messages": msgs, "speculation": {"strategy": "draft"}}).to_string(), 400, "invalid_request_error"),
        ("k too large", json!({"model": m, "messages": msgs, "speculation": {"k": 100}}).to_string(), 400, "invalid_request_error"),
        ("prompt over the context", json!({"model": m, "messages": [{"role": "user", "content": "x ".repeat(9000)}], "max_tokens": 10}).to_string(), 400, "invalid_request_error"),
        ("body over the limit", json!({"model": m, "messages": [{"role": "user", "content": long}]}).to_string(), 413, "invalid_request_error"),
    ];
    for (what, body, status, kind) in &cases {
        let (got, v) = s.post_raw("/v1/chat/completions", &key, body);
        assert_eq!(got, *status, "{what}: {v}");
        assert_eq!(v["error"]["type"], *kind, "{what}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}"
        );
    }
    // Errors a person can act on: the field named by its path, with what it must be.
    let image = json!([{"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]);
    let call =
        json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
    let named: Vec<(&str, String, &str, &str)> = vec![
        ("an image part", json!({"model": m, "messages": [{"role": "user", "content": image}]}).to_string(), "messages[0].content[1]", "not supported by this model"),
        ("a tool message without its call's id", json!({"model": m, "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null, "tool_calls": call}, {"role": "tool", "content": "42"}]}).to_string(), "messages[2].tool_call_id", "tool_call_id"),
        ("seed 2**70", format!("{{\"model\": \"{m}\", \"messages\": {msgs}, \"seed\": 1180591620717411303424}}"), "seed", "must be an integer"),
        ("content a number", json!({"model": m, "messages": [{"role": "user", "content": 5}]}).to_string(), "messages[0].content", "a string or a list"),
        ("temperature a word", json!({"model": m, "messages": msgs, "temperature": "hot"}).to_string(), "temperature", "invalid type"),
    ];
    for (what, body, param, says) in &named {
        let (got, v) = s.post_raw("/v1/chat/completions", &key, body);
        assert_eq!(got, 400, "{what}: {v}");
        assert_eq!(v["error"]["param"], *param, "{what}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{what}: {message}");
    }
    let (got, v) = s.post_raw(
        "/v1/completions",
        &key,
        &json!({"model": m, "prompt": ""}).to_string(),
    );
    assert_eq!(
        (got, v["error"]["param"].as_str()),
        (400, Some("prompt")),
        "{v}"
    );

    // Keys: none, forged, revoked.
    let ok = s.chat_body("Say hi.", 4, json!({}));
    for bad in ["", "sg-0000-0000", "Bearer nonsense"] {
        let (got, v) = s.post("/v1/chat/completions", bad, &ok);
        assert_eq!(got, 401, "{bad:?}: {v}");
        assert_eq!(v["error"]["type"], "authentication_error");
    }
    let issued: Value = ureq::post(&s.url("/admin/v1/tenants/acme/keys"))
        .set(
            "Authorization",
            &format!("Bearer {}", common::server::ADMIN),
        )
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let second = issued["api_key"].as_str().unwrap();
    assert_eq!(s.post("/v1/chat/completions", second, &ok).0, 200);
    ureq::delete(&s.url(&format!(
        "/admin/v1/tenants/acme/keys/{}",
        issued["key_id"].as_str().unwrap()
    )))
    .set(
        "Authorization",
        &format!("Bearer {}", common::server::ADMIN),
    )
    .call()
    .unwrap();
    assert_eq!(
        s.post("/v1/chat/completions", second, &ok).0,
        401,
        "revoked on the next request"
    );
    // The admin API wants the admin token, not a tenant key.
    let r = ureq::get(&s.url("/admin/v1/tenants"))
        .set("Authorization", &format!("Bearer {key}"))
        .call();
    assert!(matches!(r, Err(ureq::Error::Status(403, _))));

    // After all of that, a good request is answered.
    let (got, v) = s.post("/v1/chat/completions", &key, &ok);
    assert_eq!(got, 200, "{v}");
    assert!(!chat_text(&v).is_empty());
    // A temperature too small for 1/T to be finite is greedy, not NaN (always token 0).
    let tiny = s.chat_body("Say hi.", 4, json!({"temperature": 1e-39}));
    let (got, t) = s.post("/v1/chat/completions", &key, &tiny);
    assert_eq!(got, 200, "{t}");
    assert_eq!(chat_text(&t), chat_text(&v));
    // The auth scheme is case-insensitive.
    let lower = ureq::post(&s.url("/v1/chat/completions"))
        .set("Authorization", &format!("bearer {key}"))
        .send_json(ok.clone());
    assert_eq!(lower.map(|r| r.status()).ok(), Some(200));
    // Sampling without a seed differs between requests (as OpenAI's does); a seed repeats.
    // (Speculation off: a learned k may change between requests, and with it the draws.)
    let sampled = |extra: Value| {
        let mut body = s.chat_body("Write a poem about the sea.", 40, extra);
        body["speculation"] = json!({"enabled": false});
        body["temperature"] = json!(1.0);
        body["max_tokens"] = json!(24);
        let (got, v) = s.post("/v1/chat/completions", &key, &body);
        assert_eq!(got, 200, "{v}");
        chat_text(&v).to_string()
    };
    let unseeded: Vec<String> = (0..3).map(|_| sampled(json!({}))).collect();
    assert!(
        unseeded[0] != unseeded[1] || unseeded[1] != unseeded[2],
        "three unseeded samples were equal: {unseeded:?}"
    );
    assert_eq!(sampled(json!({"seed": 7})), sampled(json!({"seed": 7})));
}
