//! `specgate soak`: N clients for a while against a running server, mixing tenants, workload
//! classes, strategies, sampling, streaming, cancellations and bad requests; then checks what
//! production relies on: no 5xx, no leaked KV cache, no lost history (the usage returned to
//! clients equals the history's totals), resident memory stable.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::Value;

use crate::tools::loadgen::{percentile, prompt_mix};
use crate::tools::soak_client::{bad_request, Client, Outcome};

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("http: {0}")]
    Http(String),
    #[error("loading prompts: {0}")]
    Prompts(#[from] crate::tools::loadgen::LoadgenError),
    #[error("the server answered something unexpected: {0}")]
    Protocol(String),
}

#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The replicas' base URLs (one or more, on one shared store): clients are spread over
    /// them, metrics are summed over them, history is read from the first.
    pub urls: Vec<String>,
    pub admin_token: String,
    pub clients: usize,
    pub duration: Duration,
    pub max_tokens: usize,
    pub prompt_dir: PathBuf,
    pub seed: u64,
}

/// What a soak saw, and what the server's store and metrics say afterwards.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakReport {
    pub seconds: f64,
    pub requests: u64,
    pub completed: u64,
    pub cancelled: u64,
    pub bad_requests: u64,
    /// Every answer by HTTP status (transport failures under 0).
    pub by_status: BTreeMap<u16, u64>,
    /// Bad requests the server accepted (each is a bug).
    pub bad_accepted: u64,
    /// Valid requests refused with a 4xx other than 429 (each is a bug).
    pub valid_refused: u64,
    pub ttft_p50_ms: f64,
    pub ttft_p95_ms: f64,
    pub e2e_p50_ms: f64,
    pub e2e_p95_ms: f64,
    pub usage_requests: u64,
    pub usage_completion_tokens: u64,
    pub history_requests: u64,
    pub history_tokens_out: u64,
    pub live_sequences_after: f64,
    pub kv_cache_bytes_after: f64,
    pub rss_before_mib: f64,
    pub rss_after_mib: f64,
    /// What the prefix cache holds after the soak (bounded by `--prefix-cache-mib`, so not
    /// counted as growth).
    pub prefix_cache_mib_after: f64,
}

impl SoakReport {
    /// What went wrong; empty when the soak passed.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let server_errors: u64 = self
            .by_status
            .iter()
            .filter(|(s, _)| **s >= 500 || **s == 0)
            .map(|(_, n)| n)
            .sum();
        if server_errors > 0 {
            p.push(format!(
                "{server_errors} answers were 5xx or transport failures"
            ));
        }
        if self.valid_refused > 0 {
            p.push(format!(
                "{} valid requests were refused",
                self.valid_refused
            ));
        }
        if self.bad_accepted > 0 {
            p.push(format!("{} bad requests were accepted", self.bad_accepted));
        }
        if self.kv_cache_bytes_after != 0.0 || self.live_sequences_after != 0.0 {
            p.push(format!(
                "leaked: {} live sequences, {} KV bytes after the soak",
                self.live_sequences_after, self.kv_cache_bytes_after
            ));
        }
        if (self.usage_requests, self.usage_completion_tokens)
            != (self.history_requests, self.history_tokens_out)
        {
            p.push(format!(
                "history ({} requests, {} tokens) differs from the usage clients got ({}, {})",
                self.history_requests,
                self.history_tokens_out,
                self.usage_requests,
                self.usage_completion_tokens
            ));
        }
        // Allocators keep freed pages; a leak shows as growth well past that and past what
        // the prefix cache holds by design.
        if self.rss_after_mib > self.rss_before_mib * 1.5 + 64.0 + self.prefix_cache_mib_after {
            p.push(format!(
                "resident memory grew from {:.0} to {:.0} MiB",
                self.rss_before_mib, self.rss_after_mib
            ));
        }
        p
    }

    pub fn markdown(&self) -> String {
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        format!(
            "| requests | completed | cancelled | bad | by status | TTFT p50/p95 ms | e2e p50/p95 ms | usage tokens | history tokens | KV after | RSS before → after MiB | prefix cache MiB |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n\
             | {} | {} | {} | {} | {} | {:.0} / {:.0} | {:.0} / {:.0} | {} | {} | {} | {:.0} → {:.0} | {:.1} |\n",
            self.requests,
            self.completed,
            self.cancelled,
            self.bad_requests,
            statuses.join(", "),
            self.ttft_p50_ms,
            self.ttft_p95_ms,
            self.e2e_p50_ms,
            self.e2e_p95_ms,
            self.usage_completion_tokens,
            self.history_tokens_out,
            self.kv_cache_bytes_after,
            self.rss_before_mib,
            self.rss_after_mib,
            self.prefix_cache_mib_after,
        )
    }
}

fn admin_get(cfg: &SoakConfig, url: &str, path: &str) -> Result<ureq::Response, SoakError> {
    ureq::get(&format!("{url}{path}"))
        .set("Authorization", &format!("Bearer {}", cfg.admin_token))
        .call()
        .map_err(|e| SoakError::Http(format!("GET {path}: {e}")))
}

/// A gauge from /metrics, summed over its label sets and over the replicas.
fn metric(cfg: &SoakConfig, name: &str) -> Result<f64, SoakError> {
    let mut total = 0.0;
    for url in &cfg.urls {
        let text = admin_get(cfg, url, "/metrics")?
            .into_string()
            .map_err(|e| SoakError::Http(e.to_string()))?;
        total += text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(n, _)| *n == name || n.starts_with(&format!("{name}{{")))
            .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(total)
}

/// The first replica (tenants are created and history read there).
fn primary(cfg: &SoakConfig) -> &str {
    cfg.urls.first().map_or("", String::as_str)
}

fn create_tenant(cfg: &SoakConfig, name: &str) -> Result<String, SoakError> {
    crate::tools::loadgen::create_tenant(primary(cfg), &cfg.admin_token, name).map_err(
        |e| match e {
            crate::tools::loadgen::LoadgenError::Http(m) => SoakError::Http(m),
            other => SoakError::Protocol(other.to_string()),
        },
    )
}

/// One client thread's tally.
#[derive(Default)]
struct Tally {
    report: SoakReport,
    ttft: Vec<f64>,
    e2e: Vec<f64>,
}

impl Tally {
    fn record(&mut self, o: Outcome) {
        self.report.requests += 1;
        *self.report.by_status.entry(o.status).or_default() += 1;
        match o.kind {
            crate::tools::soak_client::Kind::Completed { usage_tokens } => {
                self.report.completed += 1;
                self.report.usage_requests += 1;
                self.report.usage_completion_tokens += usage_tokens;
                self.e2e.push(o.seconds * 1e3);
                if let Some(t) = o.ttft {
                    self.ttft.push(t * 1e3);
                }
            }
            crate::tools::soak_client::Kind::Cancelled => self.report.cancelled += 1,
            crate::tools::soak_client::Kind::Bad { accepted } => {
                self.report.bad_requests += 1;
                self.report.bad_accepted += u64::from(accepted);
            }
            crate::tools::soak_client::Kind::Refused => {}
            crate::tools::soak_client::Kind::WronglyRefused => self.report.valid_refused += 1,
        }
    }

    fn merge(&mut self, other: Tally) {
        let (r, o) = (&mut self.report, other.report);
        r.requests += o.requests;
        r.completed += o.completed;
        r.cancelled += o.cancelled;
        r.bad_requests += o.bad_requests;
        r.bad_accepted += o.bad_accepted;
        r.valid_refused += o.valid_refused;
        r.usage_requests += o.usage_requests;
        r.usage_completion_tokens += o.usage_completion_tokens;
        for (s, n) in o.by_status {
            *r.by_status.entry(s).or_default() += n;
        }
        self.ttft.extend(other.ttft);
        self.e2e.extend(other.e2e);
    }
}

/// Run the soak and gather the report (`problems()` says whether it passed).
pub fn soak(cfg: &SoakConfig) -> Result<SoakReport, SoakError> {
    let prompts = prompt_mix(&cfg.prompt_dir)?;
    let run = format!("{:x}", crate::clock::unix_now());
    // Requests that run to the end use these tenants; cancellations use their own, so the
    // history comparison counts exactly what clients were told.
    let tenants: Vec<String> = (0..3)
        .map(|i| create_tenant(cfg, &format!("soak-{run}-{i}")))
        .collect::<Result<_, _>>()?;
    let cancel_key = create_tenant(cfg, &format!("soak-{run}-cancel"))?;
    let model = crate::tools::soak_client::model_id(primary(cfg), &tenants[0])?;
    let rss_before = metric(cfg, "specgate_process_resident_memory_bytes")?;
    let started = Instant::now();
    let deadline = started + cfg.duration;
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.clients)
            .map(|i| {
                let client = Client {
                    url: cfg.urls[i % cfg.urls.len().max(1)].clone(),
                    model: model.clone(),
                    key: tenants[i % tenants.len()].clone(),
                    cancel_key: cancel_key.clone(),
                    max_tokens: cfg.max_tokens,
                };
                let prompts = &prompts;
                let seed = cfg.seed.wrapping_add(i as u64);
                scope.spawn(move || client_loop(&client, prompts, seed, deadline))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut all = Tally::default();
    for t in tallies {
        all.merge(t);
    }
    let mut report = all.report;
    report.seconds = started.elapsed().as_secs_f64();
    report.ttft_p50_ms = percentile(&mut all.ttft, 0.5);
    report.ttft_p95_ms = percentile(&mut all.ttft, 0.95);
    report.e2e_p50_ms = percentile(&mut all.e2e, 0.5);
    report.e2e_p95_ms = percentile(&mut all.e2e, 0.95);
    settle(cfg, &mut report)?;
    if cfg.urls.len() > 1 {
        // Reading the history flushes the first replica's writer; the others flush on
        // their own interval.
        std::thread::sleep(Duration::from_secs(3));
    }
    report.rss_before_mib = rss_before / (1 << 20) as f64;
    report.rss_after_mib =
        metric(cfg, "specgate_process_resident_memory_bytes")? / (1 << 20) as f64;
    report.prefix_cache_mib_after = metric(cfg, "specgate_prefix_cache_bytes")? / (1 << 20) as f64;
    let (requests, tokens) = history_totals(cfg, &format!("soak-{run}-"))?;
    report.history_requests = requests;
    report.history_tokens_out = tokens;
    Ok(report)
}

fn client_loop(c: &Client, prompts: &[(String, String)], seed: u64, deadline: Instant) -> Tally {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let roll: f64 = rng.random();
        let outcome = if roll < 0.15 {
            bad_request(c, rng.random_range(0..7))
        } else {
            let (class, prompt) = &prompts[rng.random_range(0..prompts.len())];
            c.generate(class, prompt, roll < 0.27, &mut rng)
        };
        tally.record(outcome);
    }
    tally
}

/// Wait until the engine is idle again (at most 30 s), then read what it still holds.
fn settle(cfg: &SoakConfig, report: &mut SoakReport) -> Result<(), SoakError> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        report.live_sequences_after = metric(cfg, "specgate_live_sequences")?;
        report.kv_cache_bytes_after = metric(cfg, "specgate_kv_cache_bytes")?;
        let idle = report.live_sequences_after == 0.0 && report.kv_cache_bytes_after == 0.0;
        if idle || Instant::now() > until {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Requests and tokens out in the store's history for tenants named `prefix…` (excluding the
/// cancellation tenant).
fn history_totals(cfg: &SoakConfig, prefix: &str) -> Result<(u64, u64), SoakError> {
    let v: Value = admin_get(cfg, primary(cfg), "/v1/analytics/routes?bucket=minute")?
        .into_json()
        .map_err(|e| SoakError::Protocol(e.to_string()))?;
    let rows = v["data"]
        .as_array()
        .ok_or_else(|| SoakError::Protocol(format!("no rows in {v}")))?;
    let mine = rows.iter().filter(|r| {
        r["tenant"]
            .as_str()
            .is_some_and(|t| t.starts_with(prefix) && !t.ends_with("-cancel"))
    });
    Ok(mine.fold((0, 0), |(n, t), r| {
        (
            n + r["requests"].as_u64().unwrap_or(0),
            t + r["tokens_out"].as_u64().unwrap_or(0),
        )
    }))
}

/// Read a streamed answer to its end: (time to first text, completion tokens from usage).
pub(crate) fn read_stream(
    reader: impl std::io::Read,
    start: Instant,
) -> Result<(Option<f64>, u64), String> {
    let (mut ttft, mut tokens) = (None, None);
    for line in BufReader::new(reader).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            return tokens.map(|t| (ttft, t)).ok_or_else(|| "no usage".into());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
        if v.get("error").is_some() {
            return Err(format!("error event: {v}"));
        }
        let c = &v["choices"][0];
        let text = c["delta"]["content"].as_str().or(c["text"].as_str());
        if ttft.is_none() && text.is_some_and(|t| !t.is_empty()) {
            ttft = Some(start.elapsed().as_secs_f64());
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            tokens = Some(n);
        }
    }
    Err("the stream ended without [DONE]".into())
}
