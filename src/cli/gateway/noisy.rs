//! `loadgen --scenario noisy-neighbour`: the flags into the scenario's configuration, its run
//! on the server (and the baseline server), and its report files.

use std::time::Duration;

use anyhow::{Context, Result};
use specgate::tools::noisy_neighbour::{self, NoisyConfig};

use super::LoadgenArgs;

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
    let ncfg = NoisyConfig {
        admin_token,
        model,
        flood: args.flood,
        flood_max_tokens: args.flood_max_tokens,
        probe_max_tokens: args.max_tokens,
        probes: args.probes,
        window: Duration::from_secs(args.window_secs),
        settle: Duration::from_secs(6),
        prompts: args.noisy_prompts.clone(),
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
