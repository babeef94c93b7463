//! Structured output over real HTTP: the completions endpoint's grammar extension, tool
//! calls streamed as raw SSE, and bad input refused with a 400 in OpenAI's format before
//! anything reaches the engine.

mod common;

use common::server::Server;
use serde_json::{json, Value};

fn completion(s: &Server, key: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({"model": s.model_id, "prompt": "My phone number is", "max_tokens": 24, "temperature": 0});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    s.post("/v1/completions", key, &body)
}

#[test]
fn completions_follow_a_regex_a_choice_and_a_schema() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let (status, v) = completion(
        &s,
        &key,
        json!({"structured_outputs": {"regex": " [0-9]{3}-[0-9]{4}"}}),
    );
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(text.len() == 9 && text.as_bytes()[4] == b'-', "{text:?}");
    assert!(
        text[1..4]
            .bytes()
            .chain(text[5..].bytes())
            .all(|b| b.is_ascii_digit()),
        "{text:?}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let (_, v) = completion(
        &s,
        &key,
        json!({"structured_outputs": {"choice": [" red", " green", " blue"]}, "temperature": 1.0, "seed": 4}),
    );
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!([" red", " green", " blue"].contains(&text), "{text:?}");
    let schema = json!({"type": "object", "properties": {"digits": {"type": "string", "pattern": "^[0-9]{4}$"}}, "required": ["digits"], "additionalProperties": false});
    let (_, v) = completion(
        &s,
        &key,
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}),
    );
    let parsed: Value = serde_json::from_str(v["choices"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(parsed["digits"].as_str().map(str::len), Some(4), "{parsed}");
    // A schema that leaves additionalProperties unsaid is read strictly, as OpenAI's: the
    // answer has the declared keys only, each once, and ends on its own.
    let open = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}, "country": {"type": "string", "maxLength": 16}}, "required": ["city"]});
    let body = json!({"model": s.model_id, "max_tokens": 60, "temperature": 0,
        "messages": [{"role": "user", "content": "Name a city and its country, with its population, mayor and area, as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": open}}});
    let (status, v) = s.post("/v1/chat/completions", &key, &body);
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(text).unwrap();
    let keys: Vec<&String> = parsed.as_object().unwrap().keys().collect();
    assert!(
        keys.iter().all(|k| *k == "city" || *k == "country"),
        "{text}"
    );
    assert_eq!(text.matches("\"city\"").count(), 1, "{text}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{text}");
    // Constrained requests are a route of their own.
    assert!(s.metric_if_exported("specgate_requests_total").is_some());
}

#[test]
fn a_streamed_tool_call_is_openai_deltas() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"word": {"type": "string", "maxLength": 20}}, "required": ["word"], "additionalProperties": false}}}]);
    let body = s.chat_body("Look up the word 'ocean'.", 64, json!({"tools": tools, "tool_choice": "required", "parallel_tool_calls": false, "stream": true}));
    let r = s.stream("/v1/chat/completions", &key, &body);
    let chunks: Vec<&Value> = r
        .events
        .iter()
        .filter(|e| e.get("choices").is_some())
        .collect();
    let first = &chunks[0]["choices"][0]["delta"];
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["tool_calls"][0]["function"]["name"], "lookup");
    assert!(first["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .starts_with("call_"));
    let args: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    let parsed: Value = serde_json::from_str(&args).unwrap_or_else(|e| panic!("{e}: {args}"));
    assert!(parsed["word"].is_string(), "{parsed}");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["delta"].get("content").is_none()),
        "no content"
    );

    // Cut by max_tokens at every point of the call: never markup in the arguments or the
    // content, whole or streamed; a cut call keeps its name and the JSON text it had.
    for max_tokens in 1..=28 {
        let extra = json!({"tools": tools, "tool_choice": "required", "parallel_tool_calls": false, "temperature": 0});
        let body = s.chat_body("Look up the word 'ocean'.", max_tokens, extra);
        let (status, v) = s.post("/v1/chat/completions", &key, &body);
        assert_eq!(status, 200, "{v}");
        let message = &v["choices"][0]["message"];
        let content = message["content"].as_str().unwrap_or_default();
        let args = message["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap_or_default();
        assert!(
            !content.contains('<') && !args.contains("</") && !args.contains('\n'),
            "{max_tokens}: {v}"
        );
        if v["choices"][0]["finish_reason"] == "length" && !args.is_empty() {
            assert_eq!(
                message["tool_calls"][0]["function"]["name"], "lookup",
                "{v}"
            );
        }
        if max_tokens % 4 == 0 {
            let mut streamed = body.clone();
            streamed["stream"] = json!(true);
            let r = s.stream("/v1/chat/completions", &key, &streamed);
            let piece = |f: &str| -> String {
                r.events
                    .iter()
                    .filter_map(|e| {
                        e["choices"][0]["delta"]["tool_calls"][0]["function"][f].as_str()
                    })
                    .collect()
            };
            assert_eq!(piece("arguments"), args, "{max_tokens}: streamed as whole");
        }
    }
}

#[test]
fn bad_grammars_and_tools_are_400s_naming_the_parameter() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let weather = json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}});
    // 20 000 required properties: past the grammar's size limit.
    let props: serde_json::Map<String, Value> = (0..20_000)
        .map(|i| (format!("p{i}"), json!({"type": "integer"})))
        .collect();
    let required: Vec<&String> = props.keys().collect();
    let too_large = json!({"type": "object", "properties": props, "required": required});
    let choices: Vec<String> = (0..5000).map(|i| format!("option number {i}")).collect();
    let cases = [
        (
            json!({"structured_outputs": {"regex": "(unclosed"}}),
            "structured_outputs.regex",
            "invalid_grammar",
        ),
        // Compile, then exceed the parser's limits on the first token: refused before
        // admission, not failed mid-answer.
        (
            json!({"structured_outputs": {"regex": "a{1000000}"}}),
            "structured_outputs.regex",
            "invalid_grammar",
        ),
        (
            json!({"structured_outputs": {"regex": "((a{100}){100}){100}"}}),
            "structured_outputs.regex",
            "invalid_grammar",
        ),
        (
            json!({"structured_outputs": {"choice": choices}}),
            "structured_outputs.choice",
            "invalid_grammar",
        ),
        (
            json!({"structured_outputs": {"grammar": "start: missing_rule"}}),
            "structured_outputs.grammar",
            "invalid_grammar",
        ),
        (
            json!({"structured_outputs": {"json": {"type": "array", "uniqueItems": true}}}),
            "structured_outputs.json",
            "invalid_grammar",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": too_large}}}),
            "response_format.json_schema.schema",
            "invalid_grammar",
        ),
        (
            json!({"response_format": {"type": "xml"}}),
            "response_format.type",
            "",
        ),
        (
            json!({"tools": [weather.clone()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
            "",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "has space"}}]}),
            "tools[0].function.name",
            "",
        ),
        (
            json!({"tools": [weather.clone()], "response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}),
            "structured_outputs",
            "",
        ),
    ];
    for (extra, param, code) in cases {
        let body = s.chat_body("Hi", 8, extra.clone());
        let (status, v) = s.post("/v1/chat/completions", &key, &body);
        let what = extra.to_string();
        let what = &what[..what.len().min(120)];
        assert_eq!(status, 400, "{what}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{what}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            !message.contains("<state>") && message.len() < 2000,
            "{what}: the parser's internals: {message}"
        );
        assert!(
            v["error"]["param"]
                .as_str()
                .is_some_and(|p| p.starts_with(param)),
            "{what}: {v}"
        );
        if !code.is_empty() {
            assert_eq!(v["error"]["code"], code, "{what}: {v}");
        }
    }
    // Tools are a chat feature: the completions endpoint takes only their neutral value.
    let (status, v) = completion(&s, &key, json!({"tools": [weather]}));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("unsupported_parameter")),
        "{v}"
    );
    // None of them reached the engine.
    assert_eq!(
        s.metric_if_exported("specgate_requests_total")
            .unwrap_or(0.0),
        0.0
    );
}
