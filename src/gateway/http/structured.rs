//! The fields that constrain an answer — `response_format`, `tools` with `tool_choice` and
//! `parallel_tool_calls`, and the `structured_outputs` extension (vLLM's name, for
//! completions and chat alike) — validated into one [`OutputFormat`]. Pure: a bad value is
//! a 400 naming its parameter; the grammar itself is compiled later, when the prompt is.

use serde_json::Value;

use crate::constraint::closed::closed;
use crate::constraint::tools::{valid_name, ToolChoice, ToolSpec};
use crate::constraint::GrammarSpec;
use crate::gateway::error::ApiError;

/// What the answer must be.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    /// A grammar, and the parameter that gave it (named in errors).
    Grammar(GrammarSpec, &'static str),
    Tools(ToolsRequest),
}

/// A request that offers tools.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsRequest {
    pub tools: Vec<ToolSpec>,
    pub choice: ToolChoice,
    pub parallel: bool,
    /// The schema a text answer must follow (`response_format` beside `tool_choice` auto).
    pub answer: Option<Value>,
}

impl ToolsRequest {
    /// The functions an answer may call: the named one, or every one offered.
    pub fn callable(&self) -> Vec<String> {
        match &self.choice {
            ToolChoice::Named(n) => vec![n.clone()],
            _ => self.tools.iter().map(|t| t.name.clone()).collect(),
        }
    }
}

fn invalid(param: &str, why: impl Into<String>) -> ApiError {
    ApiError::invalid(Some(param), why)
}

/// `response_format`: text, json_object, or json_schema `{name, schema, strict}`.
pub fn response_format(v: Option<&Value>) -> Result<Option<GrammarSpec>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let param = "response_format";
    let kind = v.get("type").and_then(Value::as_str).ok_or_else(|| {
        invalid(
            param,
            "`response_format.type` must be text, json_object or json_schema",
        )
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(GrammarSpec::JsonObject)),
        "json_schema" => {
            let js = v
                .get("json_schema")
                .filter(|j| j.is_object())
                .ok_or_else(|| {
                    invalid(
                        "response_format.json_schema",
                        "`json_schema` must be an object with `name` and `schema`",
                    )
                })?;
            if js
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(|n| !valid_name(n))
            {
                return Err(invalid(
                    "response_format.json_schema.name",
                    "`name` must be 1 to 64 letters, digits, underscores or dashes",
                ));
            }
            // OpenAI allows the schema to be left out (any JSON object then).
            match js.get("schema") {
                None | Some(Value::Null) => Ok(Some(GrammarSpec::JsonObject)),
                // OpenAI's strict reading unless `strict` is false: declared objects are
                // closed ([`closed`]).
                Some(s) if s.is_object() && js.get("strict") == Some(&Value::Bool(false)) => {
                    Ok(Some(GrammarSpec::JsonSchema(s.clone())))
                }
                Some(s) if s.is_object() => Ok(Some(GrammarSpec::JsonSchema(closed(s.clone())))),
                Some(_) => Err(invalid(
                    "response_format.json_schema.schema",
                    "`schema` must be a JSON schema object",
                )),
            }
        }
        other => Err(invalid(
            "response_format.type",
            format!("unknown response_format type {other:?} (text, json_object, json_schema)"),
        )),
    }
}

/// specgate's (and vLLM's) extension: exactly one of `json` (a schema), `regex`,
/// `grammar` (Lark), `choice` (a list of strings) or `json_object: true`.
pub fn structured_outputs(v: Option<&Value>) -> Result<Option<GrammarSpec>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let param = "structured_outputs";
    let o = v.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
        invalid(
            param,
            "`structured_outputs` takes exactly one of json, regex, grammar, choice, json_object",
        )
    })?;
    let (key, val) = o.iter().next().ok_or_else(|| invalid(param, "empty"))?;
    let text = |what: &str| {
        val.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                invalid(
                    &format!("{param}.{key}"),
                    format!("`{key}` must be a non-empty {what}"),
                )
            })
    };
    Ok(Some(match key.as_str() {
        "json" => match val {
            Value::Object(_) => GrammarSpec::JsonSchema(closed(val.clone())),
            // vLLM accepts the schema as a JSON string too.
            Value::String(s) => {
                GrammarSpec::JsonSchema(closed(serde_json::from_str(s).map_err(|e| {
                    invalid("structured_outputs.json", format!("not a JSON schema: {e}"))
                })?))
            }
            _ => {
                return Err(invalid(
                    "structured_outputs.json",
                    "`json` must be a JSON schema",
                ))
            }
        },
        "regex" => GrammarSpec::Regex(text("regular expression")?),
        "grammar" => GrammarSpec::Lark(text("Lark grammar")?),
        "json_object" if val == &Value::Bool(true) => GrammarSpec::JsonObject,
        "choice" => {
            let options: Vec<&str> = val
                .as_array()
                .filter(|a| !a.is_empty())
                .and_then(|a| a.iter().map(Value::as_str).collect())
                .ok_or_else(|| {
                    invalid(
                        "structured_outputs.choice",
                        "`choice` must be a non-empty list of strings",
                    )
                })?;
            GrammarSpec::Lark(choice_grammar(&options))
        }
        _ => {
            return Err(invalid(
                param,
                format!("unknown key {key:?} (json, regex, grammar, choice, json_object)"),
            ))
        }
    }))
}

/// A grammar allowing exactly one of `options`.
fn choice_grammar(options: &[&str]) -> String {
    let alts: Vec<String> = options
        .iter()
        .map(|o| Value::String(o.to_string()).to_string())
        .collect();
    format!("start: {}\n", alts.join(" | "))
}

/// `tools`, `tool_choice` and `parallel_tool_calls` (None: no tools offered).
pub fn tools(
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<&Value>,
) -> Result<Option<ToolsRequest>, ApiError> {
    let list = match tools {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(invalid("tools", "`tools` must be a list")),
    };
    let mut specs = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        specs.push(tool(i, t)?);
    }
    for (i, t) in specs.iter().enumerate() {
        if specs[..i].iter().any(|s| s.name == t.name) {
            return Err(invalid(
                &format!("tools[{i}].function.name"),
                format!("function {:?} is offered twice", t.name),
            ));
        }
    }
    let choice = tool_choice(choice, &specs)?;
    let parallel = match parallel {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("parallel_tool_calls", "must be a boolean")),
    };
    Ok((!specs.is_empty()).then_some(ToolsRequest {
        tools: specs,
        choice,
        parallel,
        answer: None,
    }))
}

fn tool(i: usize, t: &Value) -> Result<ToolSpec, ApiError> {
    let param = format!("tools[{i}]");
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(invalid(
            &format!("{param}.type"),
            "only tools of type \"function\" are supported",
        ));
    }
    let f = t
        .get("function")
        .filter(|f| f.is_object())
        .ok_or_else(|| invalid(&format!("{param}.function"), "`function` is required"))?;
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| valid_name(n))
        .ok_or_else(|| {
            invalid(
                &format!("{param}.function.name"),
                "`name` must be 1 to 64 letters, digits, underscores or dashes",
            )
        })?;
    let parameters = match f.get("parameters") {
        // OpenAI: no parameters means a function that takes none.
        None | Some(Value::Null) => {
            serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
        }
        Some(p) if p.is_object() => p.clone(),
        Some(_) => {
            return Err(invalid(
                &format!("{param}.function.parameters"),
                "`parameters` must be a JSON schema object",
            ))
        }
    };
    Ok(ToolSpec {
        name: name.to_string(),
        description: f
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        parameters,
        strict: f.get("strict") != Some(&Value::Bool(false)),
    })
}

fn tool_choice(v: Option<&Value>, specs: &[ToolSpec]) -> Result<ToolChoice, ApiError> {
    let param = "tool_choice";
    let choice = match v {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(invalid(
                    param,
                    format!("unknown tool_choice {other:?} (none, auto, required, or a function)"),
                ))
            }
        },
        Some(o) => {
            let name = o
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|_| o.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| invalid(param, "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": …}}"))?;
            if !specs.iter().any(|s| s.name == name) {
                return Err(invalid(
                    param,
                    format!("tool_choice names {name:?}, which is not among the tools"),
                ));
            }
            ToolChoice::Named(name.to_string())
        }
    };
    if specs.is_empty() && matches!(choice, ToolChoice::Required) {
        return Err(invalid(param, "tool_choice \"required\" needs `tools`"));
    }
    Ok(choice)
}

/// The grammar of `response_format` or of the extension, with the parameter that gave it:
/// giving both is refused.
pub fn grammar_of(
    format: Option<GrammarSpec>,
    extension: Option<GrammarSpec>,
) -> Result<Option<(GrammarSpec, &'static str)>, ApiError> {
    match (format, extension) {
        (Some(_), Some(_)) => Err(invalid(
            "structured_outputs",
            "give either `response_format` or `structured_outputs`, not both",
        )),
        (Some(f), None) => Ok(Some((f, "response_format"))),
        (None, e) => Ok(e.map(|e| (e, "structured_outputs"))),
    }
}

/// The field that holds a grammar given by `from` (`body`: that field's value), named down
/// to the grammar itself (`structured_outputs.regex`, `response_format.json_schema.schema`),
/// for errors found when it is compiled or run.
pub fn grammar_field(from: &'static str, body: Option<&Value>) -> &'static str {
    let key = |v: &Value| v.as_object().and_then(|o| o.keys().next().cloned());
    match (from, body) {
        ("structured_outputs", Some(v)) => match key(v).as_deref() {
            Some("json") => "structured_outputs.json",
            Some("regex") => "structured_outputs.regex",
            Some("grammar") => "structured_outputs.grammar",
            Some("choice") => "structured_outputs.choice",
            Some("json_object") => "structured_outputs.json_object",
            _ => from,
        },
        ("response_format", Some(v)) if v.get("type").is_some_and(|t| t == "json_schema") => {
            "response_format.json_schema.schema"
        }
        _ => from,
    }
}

impl OutputFormat {
    /// The grammar of a format without tools, and the parameter that gave it.
    pub fn grammar(&self) -> Option<(GrammarSpec, &'static str)> {
        match self {
            OutputFormat::Grammar(g, from) => Some((g.clone(), from)),
            _ => None,
        }
    }
}

/// The one output format of a request from its grammar and its tools; a combination that
/// says two things is refused.
pub fn output_format(
    grammar: Option<(GrammarSpec, &'static str)>,
    tools: Option<ToolsRequest>,
) -> Result<OutputFormat, ApiError> {
    match (tools, grammar) {
        // Tools the model may not call are not offered at all.
        (Some(t), g) if t.choice == ToolChoice::None => Ok(g
            .map_or(OutputFormat::Text, |(g, from)| {
                OutputFormat::Grammar(g, from)
            })),
        (Some(mut t), Some((g, _))) => {
            // Beside tools, only a JSON answer can be told apart from a call.
            t.answer = Some(match g {
                GrammarSpec::JsonObject => serde_json::json!({"type": "object"}),
                GrammarSpec::JsonSchema(s) => s,
                _ => {
                    return Err(invalid(
                        "structured_outputs",
                        "beside `tools`, only a JSON format is supported",
                    ))
                }
            });
            Ok(OutputFormat::Tools(t))
        }
        (Some(t), None) => Ok(OutputFormat::Tools(t)),
        (None, Some((g, from))) => Ok(OutputFormat::Grammar(g, from)),
        (None, None) => Ok(OutputFormat::Text),
    }
}

#[cfg(test)]
#[path = "structured_tests.rs"]
mod tests;
