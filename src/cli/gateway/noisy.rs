//! `loadgen --scenario noisy-neighbour`: the flags into the scenario's configuration, its run
//! on the server (and the baseline server), and its report files.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use specgate::tools::noisy_neighbour::{self, NoisyConfig};

use super::LoadgenArgs;

/// The noisy-neighbour scenario's own flags.
#[derive(Args)]
pub(super) struct NoisyArgs {
    /// With --scenario noisy-neighbour: tenant A's requests in flight.
    #[arg(long, default_value_t = 32)]
    flood: usize,
    /// With --scenario noisy-neighbour: max_tokens of A's requests (B's: --max-tokens).
    #[arg(long, default_value_t = 256)]
    flood_max_tokens: usize,
    /// With --scenario noisy-neighbour: B's requests per phase.
    #[arg(long, default_value_t = 20)]
    probes: usize,
    /// With --scenario noisy-neighbour: B pauses a random time of up to this many
    /// milliseconds before each request (0: back to back, each sent as the last one ends).
    #[arg(long, default_value_t = 0)]
    probe_gap_ms: u64,
    /// With --scenario noisy-neighbour: seconds the 3:1 weighted phase is measured.
    #[arg(long, default_value_t = 30)]
    window_secs: u64,
    /// With --scenario noisy-neighbour: the flood's and probes' prompts.
    #[arg(long, default_value = "tests/fixtures/noisy-neighbour/prompts.json")]
    noisy_prompts: PathBuf,
}

pub(super) fn run(args: &LoadgenArgs, cfg: &specgate::tools::loadgen::LoadgenConfig) -> Result<()> {
    let admin_token = args.admin_token.clone().context(
        "--scenario noisy-neighbour needs --admin-token (tenants with weights and tiers)",
    )?;
    let mut cfg = cfg.clone();
    if cfg.key.is_empty() {
        let name = format!("nn-model-{}", specgate::clock::unix_now());
        cfg.key = specgate::tools::loadgen::create_tenant(&cfg.url, &admin_token, &name)?;
    }
    let model = specgate::tools::loadgen::model_id(&cfg)?;
    let n = &args.noisy;
    let ncfg = NoisyConfig {
        admin_token,
        model,
        flood: n.flood,
        flood_max_tokens: n.flood_max_tokens,
        probe_max_tokens: args.max_tokens,
        probes: n.probes,
        probe_gap: Duration::from_millis(n.probe_gap_ms),
        window: Duration::from_secs(n.window_secs),
        settle: Duration::from_secs(6),
        prompts: n.noisy_prompts.clone(),
    };
    let mut urls = vec![cfg.url.clone()];
    urls.extend(
        args.baseline_url
            .as_deref()
            .map(|u| u.trim_end_matches('/').to_string()),
    );
    let run = noisy_neighbour::run(&ncfg, &urls, &mut std::io::stderr())?;
    let md = noisy_neighbour::markdown(&run);
    println!("{md}");
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("scenario-noisy-neighbour.md"), md)?;
    std::fs::write(
        args.out.join("scenario-noisy-neighbour.json"),
        serde_json::to_string_pretty(&run)?,
    )?;
    Ok(())
}
