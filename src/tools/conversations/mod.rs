//! `specgate loadgen --scenario chat-turns|agent`: traffic that repeats itself, for the prefix
//! cache. `chat-turns`: conversations of six turns over a long system prompt, each turn the
//! conversation so far plus a new user message. `agent`: a long system prompt with tool
//! definitions, then eight steps of tool call → tool result through the tool-call API.
//! Each configuration ([`Variant`]: the cache on or off per request with `cache_prompt`,
//! speculation on or off) runs the same conversations on the same server, as a tenant of its
//! own when an admin token is given (so no configuration starts from another's blocks).
//! `--openai-only` sends only OpenAI's fields and `cache_prompt`, for llama-server (and writes
//! the tool definitions into the system prompt, which its template would otherwise drop).

mod report;
pub mod turn;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};

pub use report::markdown;
pub use turn::{stream_turn, TurnSample};

use crate::tools::loadgen::{create_tenant, LoadgenError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    ChatTurns,
    Agent,
}

/// A configuration every conversation runs under.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Variant {
    pub name: String,
    pub cache: bool,
    pub speculation: bool,
}

impl Variant {
    pub fn new(cache: bool, speculation: bool) -> Self {
        let name = match (cache, speculation) {
            (true, true) => "cache",
            (false, true) => "no-cache",
            (true, false) => "cache, plain",
            (false, false) => "no-cache, plain",
        };
        Self {
            name: name.into(),
            cache,
            speculation,
        }
    }
}

pub struct ConversationConfig {
    pub url: String,
    pub key: String,
    pub admin_token: Option<String>,
    pub model: String,
    pub concurrency: Vec<usize>,
    pub max_tokens: usize,
    /// The fixtures (tests/fixtures/conversations).
    pub dir: PathBuf,
    pub repeats: usize,
    /// Conversations per run (0: every one the fixtures hold).
    pub conversations: usize,
    pub openai_only: bool,
    pub variants: Vec<Variant>,
}

/// One conversation's script.
#[derive(Debug, Clone)]
enum Script {
    Chat(Vec<String>),
    Agent { task: String, results: Vec<String> },
}

struct Fixtures {
    system: String,
    tools: Option<Value>,
    scripts: Vec<Script>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TurnRow {
    pub variant: String,
    pub concurrency: usize,
    pub repeat: usize,
    pub conversation: usize,
    pub turn: usize,
    pub sample: TurnSample,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub variant: String,
    pub concurrency: usize,
    pub repeat: usize,
    pub seconds: f64,
    pub completion_tokens: u64,
    pub errors: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConversationRun {
    pub scenario: Kind,
    pub turns: Vec<TurnRow>,
    pub runs: Vec<RunRow>,
}

fn read(dir: &Path, name: &str) -> Result<String, LoadgenError> {
    std::fs::read_to_string(dir.join(name))
        .map_err(|e| LoadgenError::Protocol(format!("{}: {e}", dir.join(name).display())))
}

fn load(dir: &Path, kind: Kind) -> Result<Fixtures, LoadgenError> {
    let bad = |what: &str, e: serde_json::Error| LoadgenError::Protocol(format!("{what}: {e}"));
    let lines = |name: &str| -> Result<Vec<Value>, LoadgenError> {
        read(dir, name)?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| bad(name, e)))
            .collect()
    };
    Ok(match kind {
        Kind::ChatTurns => Fixtures {
            system: read(dir, "chat-system.md")?,
            tools: None,
            scripts: lines("chat-turns.jsonl")?
                .into_iter()
                .map(|v| serde_json::from_value(v).map(Script::Chat))
                .collect::<Result<_, _>>()
                .map_err(|e| bad("chat-turns.jsonl", e))?,
        },
        Kind::Agent => Fixtures {
            system: read(dir, "agent-system.md")?,
            tools: Some(
                serde_json::from_str(&read(dir, "agent-tools.json")?)
                    .map_err(|e| bad("agent-tools.json", e))?,
            ),
            scripts: lines("agent-tasks.jsonl")?
                .into_iter()
                .map(|v| match (v["task"].as_str(), serde_json::from_value(v["results"].clone())) {
                    (Some(task), Ok(results)) => Ok(Script::Agent {
                        task: task.to_string(),
                        results,
                    }),
                    _ => Err(LoadgenError::Protocol(format!(
                        "agent-tasks.jsonl: expected {{\"task\": text, \"results\": [text]}}, got {v}"
                    ))),
                })
                .collect::<Result<_, _>>()?,
        },
    })
}

/// Run every variant at every concurrency, `repeats` times (the variants' order rotates).
pub fn run(
    cfg: &ConversationConfig,
    kind: Kind,
    log: &mut dyn std::io::Write,
) -> Result<ConversationRun, LoadgenError> {
    let mut fx = load(&cfg.dir, kind)?;
    if cfg.conversations > 0 {
        fx.scripts.truncate(cfg.conversations);
    }
    let mut out = ConversationRun {
        scenario: kind,
        turns: Vec::new(),
        runs: Vec::new(),
    };
    let stamp = crate::clock::unix_now();
    for &c in &cfg.concurrency {
        for repeat in 0..cfg.repeats.max(1) {
            for i in 0..cfg.variants.len() {
                let v = &cfg.variants[(i + repeat) % cfg.variants.len()];
                let key = match &cfg.admin_token {
                    Some(admin) => {
                        let name = format!("conv-{stamp}-{c}-{repeat}-{i}");
                        create_tenant(&cfg.url, admin, &name)?
                    }
                    None => cfg.key.clone(),
                };
                let t = Instant::now();
                let (turns, errors) = run_all(cfg, &key, &fx, v, c);
                let row = RunRow {
                    variant: v.name.clone(),
                    concurrency: c,
                    repeat,
                    seconds: t.elapsed().as_secs_f64(),
                    completion_tokens: turns.iter().map(|r| r.2.completion_tokens).sum(),
                    errors,
                };
                writeln!(
                    log,
                    "loadgen: {kind:?} c={c} {}: {} turns, {:.1} s, {errors} errors",
                    v.name,
                    turns.len(),
                    row.seconds
                )?;
                out.runs.push(row);
                out.turns.extend(
                    turns
                        .into_iter()
                        .map(|(conversation, turn, sample)| TurnRow {
                            variant: v.name.clone(),
                            concurrency: c,
                            repeat,
                            conversation,
                            turn,
                            sample,
                        }),
                );
            }
        }
    }
    Ok(out)
}

/// Every conversation over `c` client threads: (conversation, turn, sample) and errors.
fn run_all(
    cfg: &ConversationConfig,
    key: &str,
    fx: &Fixtures,
    v: &Variant,
    c: usize,
) -> (Vec<(usize, usize, TurnSample)>, usize) {
    let next = AtomicUsize::new(0);
    let rows = Mutex::new(Vec::new());
    let errors = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..c.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(script) = fx.scripts.get(i) else {
                    break;
                };
                match converse(cfg, key, fx, script, v) {
                    Ok(turns) => {
                        let mut rows = rows.lock().unwrap_or_else(|p| p.into_inner());
                        rows.extend(turns.into_iter().enumerate().map(|(t, s)| (i, t + 1, s)));
                    }
                    Err(e) => {
                        eprintln!("loadgen: conversation {i} failed: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let rows = rows.into_inner().unwrap_or_else(|p| p.into_inner());
    (rows, errors.into_inner())
}

/// The request body for the conversation so far.
fn body(cfg: &ConversationConfig, fx: &Fixtures, v: &Variant, messages: &[Value]) -> Value {
    let mut b = json!({
        "model": cfg.model,
        "messages": messages,
        "max_tokens": cfg.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
        "cache_prompt": v.cache,
    });
    if let Some(tools) = &fx.tools {
        b["tools"] = tools.clone();
        b["tool_choice"] = json!("required");
    }
    if !cfg.openai_only {
        b["workload"] = json!("chat");
        if !v.speculation {
            b["speculation"] = json!({"enabled": false});
        }
    }
    b
}

/// One conversation, turn by turn: each turn's sample.
fn converse(
    cfg: &ConversationConfig,
    key: &str,
    fx: &Fixtures,
    script: &Script,
    v: &Variant,
) -> Result<Vec<TurnSample>, LoadgenError> {
    let mut messages = vec![json!({"role": "system", "content": system_text(cfg, fx)})];
    let mut samples = Vec::new();
    match script {
        Script::Chat(users) => {
            for user in users {
                messages.push(json!({"role": "user", "content": user}));
                let s = stream_turn(&cfg.url, key, &body(cfg, fx, v, &messages))?;
                messages.push(json!({"role": "assistant", "content": s.text}));
                samples.push(s);
            }
        }
        Script::Agent { task, results } => {
            messages.push(json!({"role": "user", "content": task}));
            for (step, result) in results.iter().enumerate() {
                let s = stream_turn(&cfg.url, key, &body(cfg, fx, v, &messages))?;
                let (id, name, args) = call_of(&s, fx, step);
                messages.push(json!({
                    "role": "assistant",
                    "content": if s.text.is_empty() { Value::Null } else { json!(s.text) },
                    "tool_calls": [{"id": id, "type": "function",
                                    "function": {"name": name, "arguments": args}}],
                }));
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
                samples.push(s);
            }
        }
    }
    Ok(samples)
}

/// The system prompt. For another server (`--openai-only`) the tool definitions are written
/// into it as well: llama-server's template for a model whose own template has no tools
/// drops them, and the servers would then not read the same text.
fn system_text(cfg: &ConversationConfig, fx: &Fixtures) -> String {
    match (&fx.tools, cfg.openai_only) {
        (Some(tools), true) => format!(
            "{}\n\n# Tools\n\nCall exactly one of these functions each turn:\n{}",
            fx.system,
            serde_json::to_string(tools).unwrap_or_default()
        ),
        _ => fx.system.clone(),
    }
}

/// The turn's first call; where a server answered without one (llama-server may), the
/// script's tool for this step with no arguments, so the transcript stays well formed.
fn call_of(s: &TurnSample, fx: &Fixtures, step: usize) -> (String, String, String) {
    if let Some((id, name, args)) = s.calls.first().filter(|c| !c.1.is_empty()) {
        let id = if id.is_empty() {
            format!("call_{step}")
        } else {
            id.clone()
        };
        return (id, name.clone(), args.clone());
    }
    let tools = fx.tools.as_ref().and_then(Value::as_array);
    let name = tools
        .and_then(|t| t.get(step % t.len().max(1)))
        .and_then(|t| t["function"]["name"].as_str())
        .unwrap_or("tool");
    (format!("call_{step}"), name.to_string(), "{}".into())
}
