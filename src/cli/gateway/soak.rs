//! `specgate soak`'s flags into the soak's configuration (`specgate::tools::soak`), its run
//! against the replicas, and its report files; a soak that found problems fails the command.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct SoakArgs {
    /// A replica's base URL; repeat it for several replicas on one shared store (clients
    /// are spread over them).
    #[arg(long = "url", default_value = "http://127.0.0.1:8080")]
    urls: Vec<String>,
    /// The admin token (also SPECGATE_ADMIN_TOKEN): the soak creates its own tenants and
    /// reads /metrics and the history.
    #[arg(long, env = "SPECGATE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: String,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    #[arg(long, default_value_t = 5.0)]
    minutes: f64,
    #[arg(long, default_value_t = 48)]
    max_tokens: usize,
    #[arg(long, default_value = "tests/fixtures/prompts")]
    prompts: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where soak.md and soak.json go (git-ignored).
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

pub fn run_soak(args: SoakArgs) -> Result<()> {
    let cfg = specgate::tools::soak::SoakConfig {
        urls: args
            .urls
            .iter()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect(),
        admin_token: args.admin_token,
        clients: args.clients.max(1),
        duration: std::time::Duration::from_secs_f64(args.minutes.max(0.0) * 60.0),
        max_tokens: args.max_tokens,
        prompt_dir: args.prompts,
        seed: args.seed,
    };
    let report = specgate::tools::soak::soak(&cfg)?;
    let md = report.markdown();
    println!("{md}");
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("soak.md"), &md)?;
    std::fs::write(
        args.out.join("soak.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let problems = report.problems();
    if !problems.is_empty() {
        anyhow::bail!("the soak failed:\n- {}", problems.join("\n- "));
    }
    Ok(())
}
