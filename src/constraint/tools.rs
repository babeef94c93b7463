//! Tool calls: the grammar that makes a call valid by construction, the prompt text that
//! offers the tools to a model whose template has no syntax for them, and the reading of
//! calls (whole or streamed) out of the generated text.
//!
//! A call is written as Hermes / Qwen 2.5 write it, one per block:
//! `<tool_call>\n{"name": "NAME", "arguments": {…}}\n</tool_call>`, blocks separated by a
//! newline. Under the grammar the text between `"arguments": ` and `}\n</tool_call>` is JSON
//! valid against the function's parameter schema.

use serde_json::{json, Value};

use super::{with_layout, GrammarError, GrammarSpec};
use crate::model::chat_template::ChatMessage;

/// A function the client offers (`tools[i].function`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema of the arguments object.
    pub parameters: Value,
    /// Read the schema as OpenAI's strict mode does (`function.strict` is not false): an
    /// object that declares its properties allows no others ([`super::closed`]).
    pub strict: bool,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

pub const CALL_OPEN: &str = "<tool_call>\n{\"name\": \"";
const NAME_CLOSE: &str = "\", \"arguments\": ";
pub const CALL_CLOSE: &str = "}\n</tool_call>";

/// Whether a function name is one OpenAI accepts (letters, digits, `_` and `-`, 1 to 64).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The grammar for a request with tools (None: `tool_choice` none, nothing constrained).
/// `auto` allows either an answer or calls: text not starting with `<` or whitespace (so
/// a call cannot hide in a text answer, unchecked), or JSON valid
/// against `answer` when the request gave a response format; `required` and a named
/// function allow only calls; `parallel` allows more than one.
pub fn call_grammar(
    tools: &[ToolSpec],
    choice: &ToolChoice,
    parallel: bool,
    answer: Option<&Value>,
) -> Result<Option<GrammarSpec>, GrammarError> {
    let offered: Vec<&ToolSpec> = match choice {
        ToolChoice::None => return Ok(None),
        ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(n) => tools.iter().filter(|t| &t.name == n).collect(),
    };
    if offered.is_empty() {
        return Err(GrammarError::Invalid("no tool matches tool_choice".into()));
    }
    let mut g = String::new();
    match (choice, answer) {
        (ToolChoice::Auto, None) => g += "start: TEXT | calls\nTEXT: /[^<\\s][\\s\\S]*/\n",
        (ToolChoice::Auto, Some(schema)) => {
            g += &format!(
                "start: answer | calls\nanswer: %json{}\n",
                with_layout(schema.clone())?
            )
        }
        _ => g += "start: calls\n",
    }
    g += if parallel && !matches!(choice, ToolChoice::Named(_)) {
        "calls: call (\"\\n\" call)*\n"
    } else {
        "calls: call\n"
    };
    let names: Vec<String> = (0..offered.len()).map(|i| format!("call_{i}")).collect();
    g += &format!("call: {}\n", names.join(" | "));
    for (rule, tool) in names.iter().zip(&offered) {
        let parameters = if tool.strict {
            super::closed::closed(tool.parameters.clone())
        } else {
            tool.parameters.clone()
        };
        let schema = with_layout(parameters).map_err(|e| {
            GrammarError::Invalid(format!("function {}: parameters: {e}", tool.name))
        })?;
        g += &format!(
            "{rule}: {} %json{} {}\n",
            lark_str(&format!("{CALL_OPEN}{}{NAME_CLOSE}", tool.name)),
            schema,
            lark_str(CALL_CLOSE)
        );
    }
    Ok(Some(GrammarSpec::Lark(g)))
}

/// A Lark string literal (JSON's escapes are Lark's).
fn lark_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// What the system prompt says when the model's chat template has no tool syntax (the text
/// Qwen 2.5's template writes).
pub fn tools_prompt(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        let mut f = json!({"name": t.name, "parameters": t.parameters});
        if let Some(d) = &t.description {
            f["description"] = json!(d);
        }
        s += &format!("\n{}", json!({"type": "function", "function": f}));
    }
    s += "\n</tools>\n\nFor each function call, return a json object with function name and \
          arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
          {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
    s
}

/// The messages with the tools described in the system message (the documented default for
/// every template: docs/structured-output.md).
pub fn offer_tools(messages: &[ChatMessage], tools: &[ToolSpec]) -> Vec<ChatMessage> {
    let offer = tools_prompt(tools);
    let mut out = messages.to_vec();
    match out.first_mut() {
        Some(m) if m.role == "system" => m.content = format!("{}\n\n{offer}", m.content),
        _ => out.insert(0, ChatMessage::new("system", &offer)),
    }
    out
}

/// An assistant turn's earlier calls, written as the model would have written them.
pub fn calls_text(calls: &[(String, String)]) -> String {
    calls
        .iter()
        .map(|(name, args)| format!("{CALL_OPEN}{name}{NAME_CLOSE}{args}{CALL_CLOSE}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a piece of generated text turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEvent {
    /// Plain answer text.
    Content(String),
    /// Call `index` begins: its function's name is known.
    Start { index: usize, name: String },
    /// More of call `index`'s arguments (JSON text).
    Arguments { index: usize, delta: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Nothing decided yet: the text so far could still open a call.
    Undecided,
    Content,
    Name,
    Arguments,
    /// Between calls: a newline and another call may follow.
    Between,
}

/// Reads calls out of text as it arrives: content goes out at once, a call's name once it
/// is complete, its arguments as they grow (holding back what could be the call's end).
#[derive(Debug, Clone)]
pub struct CallReader {
    mode: Mode,
    buf: String,
    calls: usize,
    /// The current call's arguments sent so far.
    args: String,
    /// The functions the request offered (a call cut inside its name is one of them).
    names: Vec<String>,
}

impl Default for CallReader {
    fn default() -> Self {
        Self::new()
    }
}

impl CallReader {
    pub fn new() -> Self {
        Self::with_names(Vec::new())
    }

    /// A reader for an answer that may call `names`.
    pub fn with_names(names: Vec<String>) -> Self {
        Self {
            mode: Mode::Undecided,
            buf: String::new(),
            calls: 0,
            args: String::new(),
            names,
        }
    }

    /// How many calls have begun.
    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn push(&mut self, text: &str) -> Vec<CallEvent> {
        self.buf += text;
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// The text is complete (or cut by `max_tokens`): what is held goes out as what it was
    /// read as, never as markup. A call cut in its arguments keeps the JSON text it had, as
    /// OpenAI's do; one cut in its name is the one offered function that name can begin.
    pub fn finish(&mut self) -> Vec<CallEvent> {
        let rest = std::mem::take(&mut self.buf);
        match self.mode {
            Mode::Arguments => {
                // What is held could begin the call's end. Once the arguments sent are a
                // whole JSON value it is that end (the layout allows no other text there).
                let whole = serde_json::from_str::<serde::de::IgnoredAny>(&self.args).is_ok();
                if rest.is_empty() || whole {
                    return Vec::new();
                }
                self.args += &rest;
                vec![CallEvent::Arguments {
                    index: self.calls - 1,
                    delta: rest,
                }]
            }
            Mode::Content if !rest.is_empty() => vec![CallEvent::Content(rest)],
            // Held only while it could open a call (a text answer cannot start with `<`).
            Mode::Undecided if !rest.is_empty() => self.cut_call(""),
            Mode::Name => self.cut_call(&rest),
            // After a call, or nothing held: no more calls.
            _ => Vec::new(),
        }
    }

    /// A call cut before its name was complete: the one offered function it can be, with no
    /// arguments yet; nothing when that is not one function.
    fn cut_call(&mut self, begun: &str) -> Vec<CallEvent> {
        let mut fit = self.names.iter().filter(|n| n.starts_with(begun));
        match (fit.next(), fit.next()) {
            (Some(name), None) => {
                self.calls += 1;
                vec![CallEvent::Start {
                    index: self.calls - 1,
                    name: name.clone(),
                }]
            }
            _ => Vec::new(),
        }
    }

    /// Advance by what the buffer allows; true when it should be called again.
    fn step(&mut self, out: &mut Vec<CallEvent>) -> bool {
        match self.mode {
            Mode::Undecided | Mode::Between => {
                let open = if self.mode == Mode::Between {
                    format!("\n{CALL_OPEN}")
                } else {
                    CALL_OPEN.to_string()
                };
                if self.buf.starts_with(&open) {
                    self.buf.drain(..open.len());
                    self.mode = Mode::Name;
                    return true;
                }
                if open.starts_with(self.buf.as_str()) {
                    return false; // could still open a call
                }
                if self.mode == Mode::Undecided {
                    self.mode = Mode::Content;
                    return true;
                }
                self.buf.clear(); // text after the calls is not part of any
                false
            }
            Mode::Content => {
                if !self.buf.is_empty() {
                    out.push(CallEvent::Content(std::mem::take(&mut self.buf)));
                }
                false
            }
            Mode::Name => {
                let Some(end) = self.buf.find(NAME_CLOSE) else {
                    return false;
                };
                let name = self.buf[..end].to_string();
                self.buf.drain(..end + NAME_CLOSE.len());
                out.push(CallEvent::Start {
                    index: self.calls,
                    name,
                });
                self.calls += 1;
                self.args.clear();
                self.mode = Mode::Arguments;
                true
            }
            Mode::Arguments => {
                let index = self.calls - 1;
                if let Some(end) = self.buf.find(CALL_CLOSE) {
                    let delta: String = self.buf.drain(..end).collect();
                    self.buf.drain(..CALL_CLOSE.len());
                    if !delta.is_empty() {
                        self.args += &delta;
                        out.push(CallEvent::Arguments { index, delta });
                    }
                    self.mode = Mode::Between;
                    return true;
                }
                // Release all but a tail that could begin the call's end.
                let keep = (1..=CALL_CLOSE.len().min(self.buf.len()))
                    .rev()
                    .find(|&n| {
                        self.buf.is_char_boundary(self.buf.len() - n)
                            && CALL_CLOSE.starts_with(&self.buf[self.buf.len() - n..])
                    })
                    .unwrap_or(0);
                let cut = self.buf.len() - keep;
                if cut > 0 {
                    let delta: String = self.buf.drain(..cut).collect();
                    self.args += &delta;
                    out.push(CallEvent::Arguments { index, delta });
                }
                false
            }
        }
    }
}

/// A whole answer read at once: its content and its calls (name, arguments); `names`: the
/// functions offered.
pub fn read_calls(text: &str, names: &[String]) -> (String, Vec<(String, String)>) {
    let mut r = CallReader::with_names(names.to_vec());
    let mut events = r.push(text);
    events.extend(r.finish());
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for e in events {
        match e {
            CallEvent::Content(t) => content += &t,
            CallEvent::Start { name, .. } => calls.push((name, String::new())),
            CallEvent::Arguments { index, delta } => calls[index].1 += &delta,
        }
    }
    (content, calls)
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
