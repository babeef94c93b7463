//! `specgate loadgen`: a load generator against a running server. For each concurrency level
//! it runs the same mix of workload classes with speculation on (the server's plan) and off
//! (`speculation: {"enabled": false}`) in one run (alternating per request at concurrency 1,
//! per pass above it), and reports throughput, time to first token and inter-token latency
//! percentiles, overall and per class (`loadgen_report`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

pub(crate) use crate::tools::loadgen_report::percentile;
use crate::tools::loadgen_report::summarise;
pub use crate::tools::loadgen_report::{
    markdown, write_results, LevelReport, LoadgenRun, RequestRecord,
};
use crate::tools::prompts::{load_prompt_sets, PromptSet};

#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("http: {0}")]
    Http(String),
    #[error("prompts: {0}")]
    Prompts(#[from] crate::tools::prompts::PromptError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the server answered something unexpected: {0}")]
    Protocol(String),
}

#[derive(Debug, Clone)]
pub struct LoadgenConfig {
    pub url: String,
    pub key: String,
    pub model: Option<String>,
    pub concurrency: Vec<usize>,
    /// Requests per level and mode (at least the concurrency).
    pub requests: usize,
    pub max_tokens: usize,
    pub prompt_dir: PathBuf,
    /// Times each level alternates speculation on and off.
    pub repeats: usize,
    /// Passes over the mix before measuring, by a tenant of their own (admin token only).
    pub warmup: usize,
}

/// How a request asks for speculation.
#[derive(Debug, Clone, PartialEq)]
pub enum SpecMode {
    /// The server's plan (the route's policy and learner).
    Server,
    Off,
    /// A fixed strategy and k for every request.
    Fixed(String, usize),
}

impl SpecMode {
    /// The server's plan when speculation is on, else off.
    fn on(spec: bool) -> Self {
        if spec {
            Self::Server
        } else {
            Self::Off
        }
    }
}

/// One finished request.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub class: String,
    pub ttft: f64,
    /// Mean seconds per output token after the first (TPOT).
    pub itl: f64,
    pub tokens: usize,
    pub e2e: f64,
    /// The server's `usage.speculative`: strategy, k, drafted, accepted, target passes.
    pub speculative: Value,
}

impl Sample {
    /// A request that failed: no tokens (keeps a paired run's places).
    pub fn failed(class: &str) -> Self {
        Self {
            class: class.to_string(),
            ttft: 0.0,
            itl: 0.0,
            tokens: 0,
            e2e: 0.0,
            speculative: Value::Null,
        }
    }
}

/// A failed call, with the server's own error message when it sent one (a 403 says which
/// policy refused what).
fn http_err(e: ureq::Error) -> LoadgenError {
    match e {
        ureq::Error::Status(code, resp) => {
            let url = resp.get_url().to_string();
            let body = resp.into_string().unwrap_or_default();
            let why = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or(body);
            LoadgenError::Http(format!("{url}: status {code}: {why}"))
        }
        e => LoadgenError::Http(e.to_string()),
    }
}

/// POST a chat request as the tenant of `key`; an error status becomes the server's message.
pub fn post_chat(url: &str, key: &str, body: &Value) -> Result<ureq::Response, LoadgenError> {
    ureq::post(&format!("{url}/v1/chat/completions"))
        .set("Authorization", &format!("Bearer {key}"))
        .send_json(body.clone())
        .map_err(http_err)
}

/// The served model's id, from /v1/models.
pub fn model_id(cfg: &LoadgenConfig) -> Result<String, LoadgenError> {
    if let Some(m) = &cfg.model {
        return Ok(m.clone());
    }
    let v: Value = ureq::get(&format!("{}/v1/models", cfg.url))
        .set("Authorization", &format!("Bearer {}", cfg.key))
        .call()
        .map_err(http_err)?
        .into_json()?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| LoadgenError::Protocol(format!("no model in {v}")))
}

/// A new tenant through the admin API; its API key.
pub fn create_tenant(url: &str, admin_token: &str, name: &str) -> Result<String, LoadgenError> {
    let v: Value = ureq::post(&format!("{url}/admin/v1/tenants"))
        .set("Authorization", &format!("Bearer {admin_token}"))
        .send_json(json!({ "name": name }))
        .map_err(|e| LoadgenError::Http(format!("creating tenant {name}: {e}")))?
        .into_json()?;
    v["api_key"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| LoadgenError::Protocol(format!("no api_key in {v}")))
}

/// Stream one chat request as the tenant of `key` and time it.
pub(crate) fn one_request(
    cfg: &LoadgenConfig,
    key: &str,
    model: &str,
    class: &str,
    prompt: &str,
    mode: &SpecMode,
) -> Result<Sample, LoadgenError> {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": cfg.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
        "workload": class,
    });
    match mode {
        SpecMode::Server => {}
        SpecMode::Off => body["speculation"] = json!({"enabled": false}),
        SpecMode::Fixed(strategy, k) => body["speculation"] = json!({"strategy": strategy, "k": k}),
    }
    let start = Instant::now();
    let resp = ureq::post(&format!("{}/v1/chat/completions", cfg.url))
        .set("Authorization", &format!("Bearer {key}"))
        .send_json(body)
        .map_err(http_err)?;
    let (mut first, mut last, mut tokens) = (None, start, 0usize);
    let mut speculative = Value::Null;
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let mut v: Value = serde_json::from_str(data)
            .map_err(|e| LoadgenError::Protocol(format!("{e}: {data}")))?;
        if let Some(err) = v.get("error") {
            return Err(LoadgenError::Protocol(err.to_string()));
        }
        if v["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
        {
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            tokens = n as usize;
            speculative = v["usage"]["speculative"].take();
        }
    }
    let first = first.unwrap_or(last);
    let ttft = (first - start).as_secs_f64();
    let itl = if tokens > 1 {
        (last - first).as_secs_f64() / (tokens - 1) as f64
    } else {
        0.0
    };
    Ok(Sample {
        class: class.to_string(),
        ttft,
        itl,
        tokens,
        e2e: start.elapsed().as_secs_f64(),
        speculative,
    })
}

/// One mode's share of a run: its samples, its failed requests and its time.
pub(crate) type ModeRun = (Vec<Sample>, usize, Duration);

/// Run `n` requests over `c` client threads; returns the samples, the errors and wall time.
pub(crate) fn run_level(
    cfg: &LoadgenConfig,
    key: &str,
    model: &str,
    mix: &[(String, String)],
    c: usize,
    n: usize,
    mode: &SpecMode,
) -> ModeRun {
    let next = AtomicUsize::new(0);
    let samples = Mutex::new(Vec::with_capacity(n));
    let errors = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..c {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let (class, prompt) = &mix[i % mix.len()];
                match one_request(cfg, key, model, class, prompt, mode) {
                    Ok(s) => samples.lock().unwrap_or_else(|p| p.into_inner()).push(s),
                    Err(e) => {
                        eprintln!("loadgen: request failed: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let samples = samples.into_inner().unwrap_or_else(|p| p.into_inner());
    (samples, errors.into_inner(), start.elapsed())
}

/// Concurrency 1 with the modes paired per request: each prompt runs with speculation on
/// (as `keys[0]`'s tenant) and off (`keys[1]`'s), in alternating order, so the drift of a
/// noisy machine (its plain speed moved 25% between passes a minute apart) hits both modes
/// alike instead of whichever pass it fell in. Each mode's time is the sum of its requests'.
fn run_paired(
    cfg: &LoadgenConfig,
    keys: [&str; 2],
    model: &str,
    mix: &[(String, String)],
    n: usize,
) -> [ModeRun; 2] {
    let mut runs: [ModeRun; 2] = Default::default();
    for i in 0..n {
        let (class, prompt) = &mix[i % mix.len()];
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for m in order {
            let mode = SpecMode::on(m == 0);
            match one_request(cfg, keys[m], model, class, prompt, &mode) {
                Ok(s) => {
                    runs[m].2 += Duration::from_secs_f64(s.e2e);
                    runs[m].0.push(s);
                }
                Err(e) => {
                    eprintln!("loadgen: request failed: {e}");
                    runs[m].1 += 1;
                }
            }
        }
    }
    runs
}

/// The prompt sets as one list of (class, prompt), classes interleaved so every level sees
/// the same mix.
pub(crate) fn prompt_mix(dir: &Path) -> Result<Vec<(String, String)>, LoadgenError> {
    interleave(&load_prompt_sets(dir)?)
}

pub(crate) fn interleave(sets: &[PromptSet]) -> Result<Vec<(String, String)>, LoadgenError> {
    let longest = sets.iter().map(|s| s.prompts.len()).max().unwrap_or(0);
    let mix: Vec<(String, String)> = (0..longest)
        .flat_map(|i| {
            sets.iter()
                .filter_map(move |s| s.prompts.get(i).map(|p| (s.name.clone(), p.clone())))
        })
        .collect();
    if mix.is_empty() {
        return Err(LoadgenError::Protocol("no prompts".into()));
    }
    Ok(mix)
}

/// Every level with speculation on, then off; a row for all classes and one per class.
/// With `admin_token`, every (level, repeat, mode) runs as a new tenant: the same prompts
/// recur across levels and repeats, and a tenant's suffix cache would draft a recurring
/// prompt's earlier answer back, flattering speculation. Without one, all share `cfg.key`
/// and the log says so when prompts recur.
pub fn loadgen(
    cfg: &LoadgenConfig,
    admin_token: Option<&str>,
    log: &mut dyn std::io::Write,
) -> Result<LoadgenRun, LoadgenError> {
    let sets = load_prompt_sets(&cfg.prompt_dir)?;
    let mix = interleave(&sets)?;
    let recurs = cfg.repeats > 1 || cfg.concurrency.len() > 1 || cfg.requests > mix.len();
    if admin_token.is_none() && recurs {
        writeln!(
            log,
            "loadgen: one tenant sees the same prompts more than once, and its suffix cache \
             drafts their earlier answers; pass --admin-token for a tenant per run"
        )?;
    }
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let key_for = |c: usize, r: usize, mode: &str| match admin_token {
        Some(t) => create_tenant(&cfg.url, t, &format!("loadgen-{run_id}-c{c}-r{r}-{mode}")),
        None => Ok(cfg.key.clone()),
    };
    // The learner pools each class's evidence over tenants and starts new routes from it, so
    // the measured tenants plan as a new tenant of a server that has served these classes
    // does, while their suffix caches start empty.
    let warmup = admin_token.is_some() && cfg.warmup > 0;
    let first_key = key_for(0, 0, if warmup { "warmup" } else { "model" })?;
    let model = model_id(&LoadgenConfig {
        key: first_key.clone(),
        ..cfg.clone()
    })?;
    if warmup {
        let key = first_key;
        for pass in 0..cfg.warmup {
            writeln!(log, "warm-up pass {}/{}", pass + 1, cfg.warmup)?;
            run_level(cfg, &key, &model, &mix, 1, mix.len(), &SpecMode::Server);
        }
    }
    let mut run = LoadgenRun::default();
    for &c in &cfg.concurrency {
        let n = cfg.requests.max(c);
        // Modes alternate `repeats` times so drift of a noisy machine hits both alike; one
        // client alternates them per request.
        let mut runs: [ModeRun; 2] = Default::default();
        if c > 1 {
            // Unmeasured: the first run at a level grows the target's KV caches and batch
            // buffers to that many sequences; measured, that cost would fall on whichever
            // mode ran first.
            let key = key_for(c, 0, "settle")?;
            run_level(cfg, &key, &model, &mix, c, c, &SpecMode::Off);
        }
        for r in 0..cfg.repeats.max(1) {
            let keys = [key_for(c, r, "on")?, key_for(c, r, "off")?];
            let got = if c == 1 {
                run_paired(cfg, [&keys[0], &keys[1]], &model, &mix, n)
            } else {
                // On-off, then off-on (ABBA): drift over the repeats hits both modes alike
                // (fully so with an even --repeats; an odd one's last runs on first).
                // With "on" always first, c = 16 read 0.85-0.91 on/off in runs where not one
                // token was drafted; a 4-repeat ABBA run read 1.04 while the machine's step
                // time drifted from 21 to 27 ms.
                let first = r % 2 == 0;
                let mut got: [ModeRun; 2] = Default::default();
                for spec in [first, !first] {
                    let key = &keys[usize::from(!spec)];
                    got[usize::from(!spec)] =
                        run_level(cfg, key, &model, &mix, c, n, &SpecMode::on(spec));
                }
                got
            };
            for (run, (samples, errors, wall)) in runs.iter_mut().zip(got) {
                run.0.extend(samples);
                run.1 += errors;
                run.2 += wall;
            }
        }
        for (m, spec) in [true, false].into_iter().enumerate() {
            let (samples, errors, wall) = &runs[m];
            let all: Vec<&Sample> = samples.iter().collect();
            let row = summarise(c, spec, "all", &all, *errors, *wall);
            writeln!(
                log,
                "concurrency {c:>2} speculation {:<3}: {:.1} tok/s, ITL p50 {:.1} ms, {} errors",
                if spec { "on" } else { "off" },
                row.tokens_per_second,
                row.itl_p50 * 1e3,
                errors
            )?;
            run.rows.push(row);
            for set in &sets {
                let of: Vec<&Sample> = samples.iter().filter(|s| s.class == set.name).collect();
                if !of.is_empty() {
                    run.rows.push(summarise(c, spec, &set.name, &of, 0, *wall));
                }
            }
            run.requests.extend(samples.iter().map(|s| RequestRecord {
                concurrency: c,
                speculation: spec,
                sample: s.clone(),
            }));
        }
    }
    Ok(run)
}
