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
        ("n = 9", json!({"model": m, "messages": msgs, "n": 9}).to_string(), 400, "invalid_request_error"),
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

/// Hostile requests over the Responses API, penalties, `n`, grammars and tools cut by
/// `max_tokens`: never a 5xx, and every error names its field.
#[test]
fn hostile_requests_over_the_new_surface_are_4xx_naming_their_field() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let m = s.model_id.clone();
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    let chat = |extra: Value| {
        let mut b = json!({"model": m, "messages": msgs, "max_tokens": 4});
        extra
            .as_object()
            .unwrap()
            .iter()
            .for_each(|(k, v)| b[k] = v.clone());
        ("/v1/chat/completions", b)
    };
    let resp = |extra: Value| {
        let mut b = json!({"model": m, "input": "Hi", "max_output_tokens": 4});
        extra
            .as_object()
            .unwrap()
            .iter()
            .for_each(|(k, v)| b[k] = v.clone());
        ("/v1/responses", b)
    };
    let one = |item: Value| resp(json!({"input": [item]}));
    let fc = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
    let cases: Vec<((&str, Value), u16, &str)> = vec![
        (resp(json!({"input": null})), 400, "input"),
        (resp(json!({"input": 5})), 400, "input"),
        (resp(json!({"input": []})), 400, "input"),
        (
            one(json!({"type": "item_reference", "id": "x"})),
            400,
            "input[0].type",
        ),
        (
            one(json!({"role": "robot", "content": "hi"})),
            400,
            "input[0].role",
        ),
        (
            one(json!({"role": "user", "content": [{"type": "input_file", "file_id": "f"}]})),
            400,
            "input[0].content[0]",
        ),
        (
            one(json!({"type": "function_call", "name": "f", "arguments": "{}"})),
            400,
            "input[0].call_id",
        ),
        (
            one(json!({"type": "function_call_output", "call_id": "c", "output": 5})),
            400,
            "input[0].output",
        ),
        (resp(json!({"instructions": 5})), 400, "instructions"),
        (
            resp(json!({"tools": [{"type": "file_search"}]})),
            400,
            "tools[0].type",
        ),
        (
            resp(json!({"tools": [{"type": "function", "name": "bad name"}]})),
            400,
            "tools[0].name",
        ),
        (
            resp(json!({"tools": [fc], "tool_choice": {"type": "function"}})),
            400,
            "tool_choice",
        ),
        (
            resp(json!({"text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}})),
            400,
            "text.format.schema",
        ),
        (
            resp(
                json!({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "array", "uniqueItems": true}}}}),
            ),
            400,
            "text.format.schema",
        ),
        (
            resp(json!({"previous_response_id": "resp_nobody"})),
            404,
            "previous_response_id",
        ),
        (
            resp(json!({"reasoning": {"effort": "high"}})),
            400,
            "reasoning",
        ),
        (resp(json!({"store": "yes"})), 400, "store"),
        (
            resp(json!({"max_output_tokens": 1_000_000_000})),
            400,
            "max_output_tokens",
        ),
        (resp(json!({"background": true})), 400, "background"),
        (resp(json!({"messages": msgs})), 400, "messages"),
        (
            chat(json!({"presence_penalty": 3})),
            400,
            "presence_penalty",
        ),
        (
            chat(json!({"frequency_penalty": -2.5})),
            400,
            "frequency_penalty",
        ),
        (
            chat(json!({"repetition_penalty": 0})),
            400,
            "repetition_penalty",
        ),
        (
            chat(json!({"logit_bias": {"abc": 1}})),
            400,
            "logit_bias.abc",
        ),
        (chat(json!({"logit_bias": {"1": 500}})), 400, "logit_bias.1"),
        (
            chat(json!({"logit_bias": {"99999999": 1}})),
            400,
            "logit_bias.99999999",
        ),
        (chat(json!({"logit_bias": "x"})), 400, "logit_bias"),
        (chat(json!({"n": 0})), 400, "n"),
        (chat(json!({"n": 1000})), 400, "n"),
        (chat(json!({"n": "two"})), 400, "n"),
        (
            chat(json!({"structured_outputs": {"regex": "a{1000000}"}})),
            400,
            "structured_outputs.regex",
        ),
        (
            chat(json!({"structured_outputs": {"choice": []}})),
            400,
            "structured_outputs.choice",
        ),
    ];
    for ((path, body), status, param) in &cases {
        let (got, v) = s.post(path, &key, body);
        assert_eq!(
            (got, v["error"]["param"].as_str()),
            (*status, Some(*param)),
            "{body}: {v}"
        );
        assert!(
            !v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{v}"
        );
    }
    // A required call cut by max_tokens, on both endpoints: its arguments are the JSON text
    // so far, never markup.
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let ask = "What is the weather in Oslo?";
    for cut in [6, 9, 12] {
        let (status, v) = s.post(
            "/v1/chat/completions",
            &key,
            &s.chat_body(ask, cut, json!({"tools": tools, "tool_choice": "required"})),
        );
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
        let args = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str();
        assert!(args.is_some_and(|a| !a.contains('<')), "{v}");
        let (status, r) = s.post(
            "/v1/responses",
            &key,
            &json!({"model": m, "input": ask,
            "max_output_tokens": cut, "tool_choice": "required", "temperature": 0,
            "tools": [{"type": "function", "name": "get_weather",
                       "parameters": tools[0]["function"]["parameters"]}]}),
        );
        assert_eq!(
            (status, r["status"].as_str()),
            (200, Some("incomplete")),
            "{r}"
        );
        let call = &r["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["type"] == "function_call");
        assert!(
            call.is_some_and(|c| !c["arguments"].as_str().unwrap().contains('<')),
            "{r}"
        );
    }
}
