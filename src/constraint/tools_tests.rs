use super::*;

fn weather() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Weather in a city".into()),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        strict: true,
    }
}

/// Feed `text` in pieces of `n` bytes (on character boundaries) and collect the events.
fn read_in_pieces(text: &str, n: usize) -> Vec<CallEvent> {
    let mut r = CallReader::new();
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + n).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.extend(r.push(&text[start..end]));
        start = end;
    }
    out.extend(r.finish());
    out
}

/// Events merged as a client merges deltas: (content, [(name, arguments)]).
fn assemble(events: &[CallEvent]) -> (String, Vec<(String, String)>) {
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for e in events {
        match e {
            CallEvent::Content(t) => content += t,
            CallEvent::Start { index, name } => {
                assert_eq!(*index, calls.len(), "calls start in order");
                calls.push((name.clone(), String::new()));
            }
            CallEvent::Arguments { index, delta } => calls[*index].1 += delta,
        }
    }
    (content, calls)
}

#[test]
fn calls_read_the_same_whole_or_in_any_pieces() {
    let text = calls_text(&[
        ("get_weather".into(), r#"{"city": "Paris"}"#.into()),
        ("get_time".into(), r#"{"zone": "}\n</tool"}"#.into()),
    ]);
    let want = (
        String::new(),
        vec![
            (
                "get_weather".to_string(),
                r#"{"city": "Paris"}"#.to_string(),
            ),
            (
                "get_time".to_string(),
                r#"{"zone": "}\n</tool"}"#.to_string(),
            ),
        ],
    );
    assert_eq!(read_calls(&text, &[]), want);
    for n in [1, 2, 3, 7, 13, 100] {
        assert_eq!(assemble(&read_in_pieces(&text, n)), want, "pieces of {n}");
    }
}

#[test]
fn text_that_is_not_a_call_is_content_and_goes_out_early() {
    let mut r = CallReader::new();
    assert_eq!(r.push("<tool"), vec![], "could still open a call");
    assert_eq!(
        r.push("box> é"),
        vec![CallEvent::Content("<toolbox> é".into())]
    );
    assert_eq!(r.push("ok"), vec![CallEvent::Content("ok".into())]);
    assert_eq!(r.calls(), 0);
    assert_eq!(
        read_calls("Sunny today.", &[]),
        ("Sunny today.".into(), vec![])
    );
}

#[test]
fn arguments_stream_before_the_call_ends() {
    let mut r = CallReader::new();
    let mut events = r.push(&format!(
        "{CALL_OPEN}get_weather{NAME_CLOSE}{{\"city\": \"Pa"
    ));
    assert_eq!(
        events,
        vec![
            CallEvent::Start {
                index: 0,
                name: "get_weather".into()
            },
            CallEvent::Arguments {
                index: 0,
                delta: "{\"city\": \"Pa".into()
            }
        ]
    );
    events = r.push("ris\"}}\n</tool_c");
    assert_eq!(
        events,
        vec![CallEvent::Arguments {
            index: 0,
            delta: "ris\"}".into()
        }],
        "the possible end is held back"
    );
    assert_eq!(r.push("all>"), vec![], "the call's end is not an argument");
    assert_eq!(r.calls(), 1);
}

#[test]
fn a_call_cut_short_keeps_what_it_had() {
    let text = format!("{CALL_OPEN}get_weather{NAME_CLOSE}{{\"city\": \"Pa");
    let (_, calls) = read_calls(&text, &[]);
    assert_eq!(
        calls,
        vec![("get_weather".into(), "{\"city\": \"Pa".into())]
    );
}

#[test]
fn grammars_name_the_offered_functions() {
    let tools = [weather()];
    let Some(GrammarSpec::Lark(g)) =
        call_grammar(&tools, &ToolChoice::Required, true, None).unwrap()
    else {
        panic!("a Lark grammar");
    };
    assert!(g.starts_with("start: calls\n"), "{g}");
    assert!(
        g.contains(r#""<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " %json{"#),
        "{g}"
    );
    let Some(GrammarSpec::Lark(auto)) =
        call_grammar(&tools, &ToolChoice::Auto, false, None).unwrap()
    else {
        panic!("a Lark grammar");
    };
    assert!(auto.starts_with("start: TEXT | calls") && auto.contains("calls: call\n"));
    assert_eq!(
        call_grammar(&tools, &ToolChoice::None, true, None).unwrap(),
        None
    );
    assert!(call_grammar(&tools, &ToolChoice::Named("nope".into()), true, None).is_err());
    let bad = ToolSpec {
        parameters: json!("object"),
        ..weather()
    };
    assert!(call_grammar(&[bad], &ToolChoice::Required, true, None).is_err());
    assert!(valid_name("get_weather-2") && !valid_name("get weather") && !valid_name(""));
}

#[test]
fn the_default_prompt_lists_every_tool() {
    let p = tools_prompt(&[weather()]);
    assert!(
        p.contains("<tools>\n{\"type\":\"function\",\"function\":{"),
        "{p}"
    );
    assert!(p.contains("\"name\":\"get_weather\"") && p.contains("Weather in a city"));
}

/// A call cut by max_tokens never hands markup to a client: arguments are the JSON text
/// generated so far, a name cut short is the one offered function it begins.
#[test]
fn a_call_cut_in_its_end_or_its_name_gives_no_markup() {
    let names = ["get_weather".to_string(), "get_time".to_string()];
    let cut_in_end = format!("{CALL_OPEN}get_weather{NAME_CLOSE}{{\"city\": \"Oslo\"}}}}\n</tool");
    for n in [1, 3, 100] {
        let events = read_in_pieces(&cut_in_end, n);
        let want = vec![("get_weather".to_string(), r#"{"city": "Oslo"}"#.to_string())];
        assert_eq!(assemble(&events), ("".to_string(), want), "pieces of {n}");
    }
    // A `}` held at the cut that belongs to the arguments (they are not whole without it).
    let nested = format!("{CALL_OPEN}get_weather{NAME_CLOSE}{{\"at\": {{\"city\": \"Oslo\"}}");
    let (_, calls) = read_calls(&nested, &names);
    assert_eq!(calls[0].1, r#"{"at": {"city": "Oslo"}"#);
    let in_name = format!("{CALL_OPEN}get_w");
    let got = read_calls(&in_name, &names);
    assert_eq!(
        got,
        (String::new(), vec![("get_weather".into(), String::new())])
    );
    let ambiguous = format!("{CALL_OPEN}get_");
    assert_eq!(read_calls(&ambiguous, &names), (String::new(), vec![]));
    let in_opening = &CALL_OPEN[..5];
    assert_eq!(
        read_calls(in_opening, &names[..1]),
        (String::new(), vec![("get_weather".into(), String::new())]),
        "no `<tool` in the content"
    );
}
