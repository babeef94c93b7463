use serde_json::json;

use super::*;

fn code_param(e: ApiError) -> Option<String> {
    e.param
}

#[test]
fn response_formats_read_as_grammars() {
    assert_eq!(response_format(None).unwrap(), None);
    assert_eq!(
        response_format(Some(&json!({"type": "text"}))).unwrap(),
        None
    );
    assert_eq!(
        response_format(Some(&json!({"type": "json_object"}))).unwrap(),
        Some(GrammarSpec::JsonObject)
    );
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let rf = json!({"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": true}});
    // Strict, as OpenAI reads it: the declared object allows no other keys.
    let mut closed = schema.clone();
    closed["additionalProperties"] = json!(false);
    assert_eq!(
        response_format(Some(&rf)).unwrap(),
        Some(GrammarSpec::JsonSchema(closed.clone()))
    );
    let mut unsaid = rf.clone();
    unsaid["json_schema"]
        .as_object_mut()
        .unwrap()
        .remove("strict");
    assert_eq!(
        response_format(Some(&unsaid)).unwrap(),
        Some(GrammarSpec::JsonSchema(closed))
    );
    // `strict: false` takes the schema as JSON Schema reads it.
    let mut lenient = rf.clone();
    lenient["json_schema"]["strict"] = json!(false);
    assert_eq!(
        response_format(Some(&lenient)).unwrap(),
        Some(GrammarSpec::JsonSchema(schema))
    );
    for (bad, param) in [
        (json!({"type": "yaml"}), "response_format.type"),
        (json!({"json_schema": {}}), "response_format"),
        (
            json!({"type": "json_schema"}),
            "response_format.json_schema",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}),
            "response_format.json_schema.name",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "a", "schema": 3}}),
            "response_format.json_schema.schema",
        ),
    ] {
        let e = response_format(Some(&bad)).unwrap_err();
        assert_eq!(code_param(e).as_deref(), Some(param), "{bad}");
    }
}

#[test]
fn the_extension_takes_one_kind_of_grammar() {
    let r = |v: serde_json::Value| structured_outputs(Some(&v));
    assert_eq!(
        r(json!({"regex": "[0-9]+"})).unwrap(),
        Some(GrammarSpec::Regex("[0-9]+".into()))
    );
    assert_eq!(
        r(json!({"grammar": "start: \"x\""})).unwrap(),
        Some(GrammarSpec::Lark("start: \"x\"".into()))
    );
    assert_eq!(
        r(json!({"json": "{\"type\": \"object\"}"})).unwrap(),
        Some(GrammarSpec::JsonSchema(json!({"type": "object"})))
    );
    assert_eq!(
        r(json!({"choice": ["yes", "no \"way\""]})).unwrap(),
        Some(GrammarSpec::Lark(
            "start: \"yes\" | \"no \\\"way\\\"\"\n".into()
        ))
    );
    for bad in [
        json!({}),
        json!({"regex": "a", "grammar": "b"}),
        json!({"regex": ""}),
        json!({"choice": []}),
        json!({"yaml": 1}),
        json!("x"),
    ] {
        assert!(r(bad.clone()).is_err(), "{bad}");
    }
}

fn weather() -> serde_json::Value {
    json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

#[test]
fn tools_and_tool_choice_are_checked() {
    let tools_v = json!([weather()]);
    let t = tools(Some(&tools_v), None, None).unwrap().unwrap();
    assert_eq!(
        (t.choice.clone(), t.parallel, t.tools[0].name.as_str()),
        (ToolChoice::Auto, true, "get_weather")
    );
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    let t = tools(Some(&tools_v), Some(&named), Some(&json!(false)))
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.choice, t.parallel),
        (ToolChoice::Named("get_weather".into()), false)
    );
    assert!(tools(None, None, None).unwrap().is_none());
    for (tools_v, choice, param) in [
        (
            json!([weather()]),
            json!({"type": "function", "function": {"name": "nope"}}),
            "tool_choice",
        ),
        (json!([weather()]), json!("sometimes"), "tool_choice"),
        (json!([]), json!("required"), "tool_choice"),
        (
            json!([{"type": "retrieval"}]),
            json!("auto"),
            "tools[0].type",
        ),
        (
            json!([{"type": "function", "function": {"name": "a b"}}]),
            json!("auto"),
            "tools[0].function.name",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": []}}]),
            json!("auto"),
            "tools[0].function.parameters",
        ),
        (
            json!([weather(), weather()]),
            json!("auto"),
            "tools[1].function.name",
        ),
    ] {
        let e = tools(Some(&tools_v), Some(&choice), None).unwrap_err();
        assert_eq!(code_param(e).as_deref(), Some(param), "{tools_v} {choice}");
    }
}

#[test]
fn formats_combine_only_where_they_say_one_thing() {
    let t = tools(Some(&json!([weather()])), None, None).unwrap();
    let json_answer = Some((GrammarSpec::JsonObject, "response_format"));
    let OutputFormat::Tools(both) = output_format(json_answer.clone(), t.clone()).unwrap() else {
        panic!("tools");
    };
    assert_eq!(both.answer, Some(json!({"type": "object"})));
    assert!(output_format(
        Some((GrammarSpec::Regex("a".into()), "structured_outputs")),
        t.clone()
    )
    .is_err());
    assert!(grammar_of(
        Some(GrammarSpec::JsonObject),
        Some(GrammarSpec::Regex("a".into()))
    )
    .is_err());
    let none = tools(Some(&json!([weather()])), Some(&json!("none")), None).unwrap();
    assert_eq!(
        output_format(None, none.clone()).unwrap(),
        OutputFormat::Text
    );
    assert_eq!(
        output_format(json_answer, none).unwrap(),
        OutputFormat::Grammar(GrammarSpec::JsonObject, "response_format")
    );
    assert_eq!(output_format(None, None).unwrap(), OutputFormat::Text);
}
