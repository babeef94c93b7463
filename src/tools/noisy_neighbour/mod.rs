//! `loadgen --scenario noisy-neighbour`: tenant A keeps many long creative requests in flight
//! while tenant B sends short chat requests one at a time. Phases, each with tenants of their
//! own: B alone; B under A's flood (equal shares); two flooding tenants weighted 3:1; B
//! `interactive` under A's `batch` flood. Against a second server (`--baseline-url`, e.g. one
//! started with `--scheduling fcfs`) the same phases run after, side by side in the report.
//! The engine's service per tenant is read from the server's
//! `specgate_engine_tokens_total` counters, so tokens per second count work done in the
//! window, not requests that happened to end in it.

mod report;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::tools::conversations::turn::stream_turn;
use crate::tools::loadgen::{create_tenant, post_chat, LoadgenError};

pub use report::markdown;

#[derive(Debug, Clone)]
pub struct NoisyConfig {
    pub admin_token: String,
    pub model: String,
    /// A's requests in flight.
    pub flood: usize,
    pub flood_max_tokens: usize,
    pub probe_max_tokens: usize,
    /// B's requests per phase.
    pub probes: usize,
    /// B pauses a uniformly random time up to this before each request (zero: back to
    /// back, which lands each request just after the engine started a step).
    pub probe_gap: Duration,
    /// How long the weighted phase is measured.
    pub window: Duration,
    /// How long a flood runs before B's first request (its prompts prefilled).
    pub settle: Duration,
    pub prompts: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Prompts {
    flood: Vec<String>,
    probe: Vec<String>,
}

/// B's requests in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Probes {
    pub ttft: Vec<f64>,
    pub e2e: Vec<f64>,
    /// Answered 429.
    pub refused: usize,
    pub failed: usize,
}

/// A phase with a flood.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FloodPhase {
    pub probes: Probes,
    /// Output tokens per second the engine gave the flooding tenant and all tenants while B
    /// was measured.
    pub flood_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
    pub flood_refused: usize,
    pub flood_failed: usize,
}

/// Two flooding tenants weighted 3:1.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WeightsPhase {
    pub weights: (u32, u32),
    pub output_tokens: (u64, u64),
    /// Charged work (prompt tokens + 2 × output tokens), the scheduler's measure.
    pub charged: (u64, u64),
    pub seconds: f64,
}

/// Every phase on one server.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerRun {
    pub url: String,
    pub alone: Probes,
    pub flood: FloodPhase,
    pub weights: WeightsPhase,
    pub tiers: FloodPhase,
    pub tiers_alone: Probes,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct NoisyRun {
    pub servers: Vec<ServerRun>,
    pub flood: usize,
    pub flood_max_tokens: usize,
    pub probe_max_tokens: usize,
    /// B's pause before each request: up to this many milliseconds (0: none).
    pub probe_gap_ms: u64,
}

/// Run every phase on each of `urls` in turn.
pub fn run(
    cfg: &NoisyConfig,
    urls: &[String],
    log: &mut dyn std::io::Write,
) -> Result<NoisyRun, LoadgenError> {
    let text = std::fs::read_to_string(&cfg.prompts)?;
    let prompts: Prompts = serde_json::from_str(&text)
        .map_err(|e| LoadgenError::Protocol(format!("{}: {e}", cfg.prompts.display())))?;
    if prompts.flood.is_empty() || prompts.probe.is_empty() {
        return Err(LoadgenError::Protocol("no flood or probe prompts".into()));
    }
    let mut out = NoisyRun {
        flood: cfg.flood,
        flood_max_tokens: cfg.flood_max_tokens,
        probe_max_tokens: cfg.probe_max_tokens,
        probe_gap_ms: cfg.probe_gap.as_millis() as u64,
        ..NoisyRun::default()
    };
    for url in urls {
        let s = Server {
            url,
            cfg,
            prompts: &prompts,
        };
        out.servers.push(s.run_all(log)?);
    }
    Ok(out)
}

struct Server<'a> {
    url: &'a str,
    cfg: &'a NoisyConfig,
    prompts: &'a Prompts,
}

impl Server<'_> {
    fn run_all(&self, log: &mut dyn std::io::Write) -> Result<ServerRun, LoadgenError> {
        let stamp = crate::clock::unix_now();
        let tenant = |what: &str| format!("nn-{stamp}-{what}");
        let mut run = ServerRun {
            url: self.url.to_string(),
            ..ServerRun::default()
        };
        writeln!(log, "{}: B alone", self.url)?;
        let b = self.tenant(&tenant("b-alone"), json!({}))?;
        run.alone = self.probes(&b.1);
        writeln!(log, "{}: B under A's flood of {}", self.url, self.cfg.flood)?;
        let a = self.tenant(&tenant("a-flood"), json!({}))?;
        let b = self.tenant(&tenant("b-flood"), json!({}))?;
        run.flood = self.flood_phase(&a, &b, self.cfg.flood)?;
        writeln!(log, "{}: weights 3:1", self.url)?;
        let heavy = self.tenant(&tenant("w3"), json!({"weight": 3}))?;
        let light = self.tenant(&tenant("w1"), json!({"weight": 1}))?;
        run.weights = self.weights_phase(&heavy, &light)?;
        writeln!(
            log,
            "{}: interactive B alone, then under a batch flood",
            self.url
        )?;
        let b = self.tenant(&tenant("b-interactive"), json!({"priority": "interactive"}))?;
        run.tiers_alone = self.probes(&b.1);
        let a = self.tenant(&tenant("a-batch"), json!({"priority": "batch"}))?;
        run.tiers = self.flood_phase(&a, &b, self.cfg.flood)?;
        Ok(run)
    }

    /// A new tenant with these limits: (name, key).
    fn tenant(&self, name: &str, limits: Value) -> Result<(String, String), LoadgenError> {
        let key = create_tenant(self.url, &self.cfg.admin_token, name)?;
        ureq::put(&format!("{}/admin/v1/tenants/{name}/limits", self.url))
            .set("Authorization", &format!("Bearer {}", self.cfg.admin_token))
            .send_json(limits)
            .map_err(|e| LoadgenError::Http(format!("limits of {name}: {e}")))?;
        Ok((name.to_string(), key))
    }

    /// B's requests are streamed (their first token is what is measured); A's are not, as
    /// bulk traffic usually is, so that this machine's cores read 32 answers, not 800 events
    /// a second, beside the server they share.
    fn body(&self, prompt: &str, max_tokens: usize, stream: bool) -> Value {
        let mut body = json!({
            "model": self.cfg.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        });
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// B's requests, one at a time.
    fn probes(&self, key: &str) -> Probes {
        let mut p = Probes::default();
        for i in 0..self.cfg.probes {
            if !self.cfg.probe_gap.is_zero() {
                std::thread::sleep(self.cfg.probe_gap.mul_f64(rand::random::<f64>()));
            }
            let prompt = &self.prompts.probe[i % self.prompts.probe.len()];
            match stream_turn(
                self.url,
                key,
                &self.body(prompt, self.cfg.probe_max_tokens, true),
            ) {
                Ok(t) => {
                    p.ttft.push(t.ttft);
                    p.e2e.push(t.e2e);
                }
                Err(e) if is_refusal(&e) => p.refused += 1,
                Err(_) => p.failed += 1,
            }
        }
        p
    }

    /// `a` keeps `n` requests in flight while `b` is measured.
    fn flood_phase(
        &self,
        a: &(String, String),
        b: &(String, String),
        n: usize,
    ) -> Result<FloodPhase, LoadgenError> {
        let flood = Flood::default();
        let mut phase = FloodPhase::default();
        std::thread::scope(|scope| -> Result<(), LoadgenError> {
            for i in 0..n {
                let flood = &flood;
                scope.spawn(move || self.keep_sending(&a.1, i, flood));
            }
            std::thread::sleep(self.cfg.settle);
            let before = self.service()?;
            let t = Instant::now();
            phase.probes = self.probes(&b.1);
            let secs = t.elapsed().as_secs_f64();
            let after = self.service()?;
            flood.stop.store(true, Ordering::SeqCst);
            let output = |tenant: Option<&str>| delta(&before, &after, tenant, "output") as f64;
            phase.flood_tokens_per_s = output(Some(&a.0)) / secs;
            phase.total_tokens_per_s = output(None) / secs;
            Ok(())
        })?;
        phase.flood_refused = flood.refused.load(Ordering::SeqCst);
        phase.flood_failed = flood.failed.load(Ordering::SeqCst);
        Ok(phase)
    }

    fn weights_phase(
        &self,
        heavy: &(String, String),
        light: &(String, String),
    ) -> Result<WeightsPhase, LoadgenError> {
        let flood = Flood::default();
        let per_tenant = self.cfg.flood / 2;
        let mut phase = WeightsPhase {
            weights: (3, 1),
            ..WeightsPhase::default()
        };
        std::thread::scope(|scope| -> Result<(), LoadgenError> {
            for i in 0..per_tenant {
                let flood = &flood;
                scope.spawn(move || self.keep_sending(&heavy.1, i, flood));
                scope.spawn(move || self.keep_sending(&light.1, i, flood));
            }
            std::thread::sleep(self.cfg.settle);
            let before = self.service()?;
            let t = Instant::now();
            std::thread::sleep(self.cfg.window);
            let after = self.service()?;
            phase.seconds = t.elapsed().as_secs_f64();
            flood.stop.store(true, Ordering::SeqCst);
            for (slot, who) in [(0, &heavy.0), (1, &light.0)] {
                let out = delta(&before, &after, Some(who), "output");
                let prompt = delta(&before, &after, Some(who), "prompt");
                let charged = prompt + 2 * out;
                if slot == 0 {
                    (phase.output_tokens.0, phase.charged.0) = (out, charged);
                } else {
                    (phase.output_tokens.1, phase.charged.1) = (out, charged);
                }
            }
            Ok(())
        })?;
        Ok(phase)
    }

    /// One of a flood's clients: request after request until told to stop.
    fn keep_sending(&self, key: &str, i: usize, flood: &Flood) {
        let mut n = i;
        while !flood.stop.load(Ordering::SeqCst) {
            let prompt = &self.prompts.flood[n % self.prompts.flood.len()];
            n += 7;
            let body = self.body(prompt, self.cfg.flood_max_tokens, false);
            match whole(self.url, key, &body) {
                Ok(()) => {}
                Err(e) if is_refusal(&e) => {
                    flood.refused.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(_) => {
                    flood.failed.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// The engine's service so far: (tenant, kind) → tokens.
    fn service(&self) -> Result<HashMap<(String, String), u64>, LoadgenError> {
        let text = ureq::get(&format!("{}/metrics", self.url))
            .set("Authorization", &format!("Bearer {}", self.cfg.admin_token))
            .call()
            .map_err(|e| LoadgenError::Http(format!("metrics: {e}")))?
            .into_string()?;
        Ok(parse_service(&text))
    }
}

/// POST a request that is not streamed and read its answer.
fn whole(url: &str, key: &str, body: &Value) -> Result<(), LoadgenError> {
    post_chat(url, key, body)?.into_string()?;
    Ok(())
}

#[derive(Default)]
struct Flood {
    stop: AtomicBool,
    refused: AtomicUsize,
    failed: AtomicUsize,
}

fn is_refusal(e: &LoadgenError) -> bool {
    matches!(e, LoadgenError::Http(m) if m.contains("status 429"))
}

/// `specgate_engine_tokens_total{tenant="…",priority="…",kind="…"} N` lines.
fn parse_service(text: &str) -> HashMap<(String, String), u64> {
    let mut out: HashMap<(String, String), u64> = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("specgate_engine_tokens_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k == name).then(|| v.trim_matches('"').to_string())
            })
        };
        let (Some(tenant), Some(kind), Ok(n)) =
            (label("tenant"), label("kind"), value.trim().parse::<f64>())
        else {
            continue;
        };
        *out.entry((tenant, kind)).or_default() += n as u64;
    }
    out
}

/// Tokens of `kind` served between two readings, for one tenant or all.
fn delta(
    before: &HashMap<(String, String), u64>,
    after: &HashMap<(String, String), u64>,
    tenant: Option<&str>,
    kind: &str,
) -> u64 {
    after
        .iter()
        .filter(|((t, k), _)| k == kind && tenant.is_none_or(|want| want == t))
        .map(|(key, n)| n.saturating_sub(before.get(key).copied().unwrap_or(0)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_is_read_per_tenant_and_kind() {
        let before = parse_service(
            "# TYPE specgate_engine_tokens_total counter\n\
             specgate_engine_tokens_total{tenant=\"a\",priority=\"standard\",kind=\"output\"} 10\n",
        );
        let after = parse_service(
            "specgate_engine_tokens_total{tenant=\"a\",priority=\"standard\",kind=\"output\"} 25\n\
             specgate_engine_tokens_total{tenant=\"b\",priority=\"batch\",kind=\"output\"} 5\n\
             specgate_engine_tokens_total{tenant=\"b\",priority=\"batch\",kind=\"prompt\"} 50\n\
             specgate_other_total{tenant=\"a\"} 99\n",
        );
        assert_eq!(delta(&before, &after, Some("a"), "output"), 15);
        assert_eq!(delta(&before, &after, None, "output"), 20);
        assert_eq!(delta(&before, &after, Some("b"), "prompt"), 50);
    }
}
