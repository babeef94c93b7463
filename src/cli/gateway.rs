//! The gateway's commands: `serve`, `loadgen`, `policy export|import`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::cli::store::StoreArgs;

mod conversations;
mod noisy;
mod soak;
pub use soak::{run_soak, SoakArgs};
use specgate::tools::scenarios::Scenario;

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Write every stored policy to DIR/default/<class>.toml and DIR/tenants/<t>/<class>.toml.
    Export {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, default_value = "policies-export")]
        out: PathBuf,
    },
    /// Store the policies in DIR (same layout) as new versions; all or nothing.
    Import {
        #[command(flatten)]
        store: StoreArgs,
        dir: PathBuf,
    },
}

#[derive(Args)]
pub struct ServeArgs {
    /// A llama-architecture GGUF file (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (printed on stdout).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Token for /admin (also SPECGATE_ADMIN_TOKEN); without one the admin API is off.
    #[arg(long, env = "SPECGATE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A separate draft model (same vocabulary) for the `draft` strategy.
    #[arg(long)]
    draft_model: Option<PathBuf>,
    /// Medusa heads for the `medusa` strategy (default: the shipped heads for the model).
    #[arg(long)]
    medusa_heads: Option<PathBuf>,
    /// The EAGLE layer for the `eagle` strategy (default: the shipped layer for the model).
    #[arg(long)]
    eagle_layer: Option<PathBuf>,
    /// The target's device: cpu, cuda, cuda:N or auto (a GPU when one is found).
    #[arg(long, env = "SPECGATE_DEVICE", default_value = "cpu")]
    device: specgate::model::DeviceChoice,
    /// Answer corpus the suffix strategies consult for every tenant (default: the shipped
    /// one for the model, `specgate build-corpus` writes one).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Suffix drafting from tenants' own text only.
    #[arg(long)]
    no_corpus: bool,
    #[arg(long, default_value_t = specgate::drafting::registry::DEFAULT_EXIT_LAYER)]
    exit_layer: usize,
    /// Most tokens in one engine step (decode, verify and prefill rows together).
    #[arg(long, default_value_t = 512, value_parser = at_least_one)]
    max_batch_tokens: usize,
    /// Most prompt tokens of one sequence per step.
    #[arg(long, default_value_t = 64, value_parser = at_least_one)]
    prefill_chunk: usize,
    /// Batch slots: most sequences in one engine step.
    #[arg(long, default_value_t = 16, value_parser = at_least_one)]
    max_sequences: usize,
    /// KV cache memory live sequences may reserve, in MiB.
    #[arg(long, default_value_t = 1024)]
    kv_budget_mib: usize,
    /// Requests that may wait in all; past that, a tenant that already has requests waiting
    /// gets 429.
    #[arg(long, default_value_t = 64)]
    queue_capacity: usize,
    /// Requests one tenant may have waiting before its requests get 429.
    #[arg(long, default_value_t = 32)]
    tenant_queue_capacity: usize,
    /// Whom each engine step serves: `fair` (tenants' weighted shares within priority
    /// tiers) or `fcfs` (arrival order, for comparison).
    #[arg(long, value_enum, default_value_t = specgate::scheduler::Scheduling::Fair)]
    scheduling: specgate::scheduler::Scheduling,
    /// While an `interactive` tenant is active, the most times lower tiers' rows may lengthen
    /// its engine steps (by the fitted step cost; ≥ 1).
    #[arg(long, default_value_t = 1.5)]
    interactive_slowdown: f64,
    /// Occupancy (busy sequences / slots) at which speculation turns off.
    #[arg(long, default_value_t = 0.5)]
    spec_off_occupancy: f64,
    /// Most MiB of KV the prefix cache keeps for prompts to reuse (0 turns it off).
    #[arg(long, default_value_t = 512)]
    prefix_cache_mib: usize,
    /// The share of the prefix cache (0-1) past which one tenant (or shared scope) makes
    /// room only by evicting its own blocks.
    #[arg(long, default_value_t = 0.5, value_parser = share)]
    prefix_cache_tenant_share: f64,
    #[arg(long, default_value_t = 2048)]
    max_tokens_limit: usize,
    #[arg(long, default_value_t = 256)]
    default_max_tokens: usize,
    /// Largest accepted request body, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    body_limit: usize,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// How often finished requests' history is written to the store, in ms.
    #[arg(long, default_value_t = 1000)]
    history_flush_ms: u64,
    /// Tenants whose suffix caches (earlier requests' text, for suffix drafting and recall)
    /// are kept; past that the least recently used tenant's is dropped.
    #[arg(long, default_value_t = specgate::gateway::actors::tenant_caches::SUFFIX_CACHE_TENANTS)]
    suffix_cache_tenants: usize,
    /// Tokens of earlier requests each tenant's suffix cache keeps (oldest evicted).
    #[arg(long, default_value_t = specgate::gateway::actors::tenant_caches::SUFFIX_CACHE_TOKENS)]
    suffix_cache_tokens: usize,
    /// Requests one tenant may have in flight (0: unlimited); the admin API overrides it
    /// per tenant.
    #[arg(long, default_value_t = 32)]
    max_concurrent_per_tenant: u32,
    /// Prompt + completion tokens one tenant may use per minute (0: unlimited); the admin
    /// API overrides it per tenant.
    #[arg(long, default_value_t = 0)]
    tokens_per_minute_per_tenant: u64,
    /// Most stop strings in one request, and the longest one, in bytes.
    #[arg(long, default_value_t = 4)]
    max_stop_strings: usize,
    #[arg(long, default_value_t = 256)]
    max_stop_len: usize,
    /// Most choices one request may ask for (`n`).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=128))]
    max_n: u32,
    /// On SIGTERM or SIGINT: seconds in-flight requests get to finish before the process
    /// exits anyway.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout_secs: u64,
    /// The learner's measured priors (default: `<model>.priors.toml` beside the model, else
    /// the shipped ones when serving the default model; `specgate calibrate-policy` makes them).
    #[arg(long)]
    priors: Option<PathBuf>,
    /// Fault injection for reliability tests (see src/faults.rs), e.g.
    /// `engine-panic-at-step=40,drafter-fail-every=3`.
    #[arg(long, hide = true, default_value = "")]
    inject_faults: specgate::faults::Faults,
}

#[derive(Args)]
pub struct LoadgenArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// A tenant's API key (also SPECGATE_API_KEY); not needed with an admin token.
    #[arg(long, env = "SPECGATE_API_KEY", hide_env_values = true)]
    key: Option<String>,
    /// Create a tenant per run (per level, repeat and mode; with `--compare-fixed`, per
    /// configuration), so no suffix cache holds answers to the prompts it is measured on
    /// (also SPECGATE_ADMIN_TOKEN).
    #[arg(long, env = "SPECGATE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The model id (default: the first of /v1/models).
    #[arg(long)]
    model: Option<String>,
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    concurrency: Vec<usize>,
    /// Requests per level and mode (raised to the concurrency when lower).
    #[arg(long, default_value_t = 16)]
    requests: usize,
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    #[arg(long, default_value = "tests/fixtures/prompts")]
    prompts: PathBuf,
    /// Where loadgen.md and loadgen.json go (git-ignored).
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Instead: replay the prompt sets one request at a time, comparing the server's learned
    /// plan with plain decoding and these fixed choices (e.g. ngram:2,suffix:4).
    #[arg(long, value_delimiter = ',')]
    compare_fixed: Vec<String>,
    /// Instead: a scenario of new users' traffic (`cold`: every prompt once, one at a time;
    /// `shift`: code edits, a load ramp, creative and chat, code edits again), the learned plan
    /// against plain and the `--compare-fixed` configurations, each as tenants of its own
    /// (needs an admin token).
    #[arg(long, value_enum)]
    scenario: Option<specgate::tools::scenarios::Scenario>,
    /// With --scenario chat-turns|agent: the conversations' fixtures.
    #[arg(long, default_value = "tests/fixtures/conversations")]
    conversations_dir: PathBuf,
    /// With --scenario chat-turns|agent: conversations per run (0: all of them).
    #[arg(long, default_value_t = 0)]
    conversations: usize,
    /// With --scenario chat-turns|agent: the configurations, each the same conversations on
    /// the same server: cache, no-cache (`cache_prompt: false`), cache-plain, no-cache-plain
    /// (speculation off).
    #[arg(long, value_delimiter = ',', default_value = "cache,no-cache")]
    configs: Vec<String>,
    /// Send only OpenAI's fields and `cache_prompt` (a server other than specgate, such as
    /// llama-server).
    #[arg(long)]
    openai_only: bool,
    /// With --scenario: run plain and the fixed configurations on this second server, so the
    /// learned plan's server learns only from its own traffic. With noisy-neighbour: run
    /// every phase on it too (e.g. a server started with `--scheduling fcfs`).
    #[arg(long)]
    baseline_url: Option<String>,
    #[command(flatten)]
    noisy: noisy::NoisyArgs,
    /// Passes over the prompt sets before measuring (the learner's warm-up; for the levels,
    /// by a tenant of its own and only with an admin token).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Measured passes.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Times each concurrency level alternates speculation on and off (noise control).
    #[arg(long, default_value_t = 2)]
    repeats: usize,
}

pub fn run_serve(model: PathBuf, args: ServeArgs) -> Result<()> {
    let cfg = specgate::gateway::ServeConfig {
        model,
        store: args.store.store.clone(),
        redis: args.store.redis(),
        host: args.host,
        port: args.port,
        admin_token: args.admin_token,
        draft_model: args.draft_model,
        medusa_heads: args.medusa_heads,
        eagle_layer: args.eagle_layer,
        device: args.device,
        corpus: specgate::drafting::answer_corpus::CorpusSource::from_flags(
            args.corpus,
            args.no_corpus,
        ),
        exit_layer: args.exit_layer,
        engine: specgate::engine::EngineConfig {
            max_batch_tokens: args.max_batch_tokens,
            prefill_chunk: args.prefill_chunk,
            max_sequences: args.max_sequences,
            kv_budget_bytes: args.kv_budget_mib << 20,
            queue_capacity: args.queue_capacity,
            tenant_queue_capacity: args.tenant_queue_capacity,
            scheduling: args.scheduling,
            interactive_slowdown: args.interactive_slowdown,
            spec_off_occupancy: args.spec_off_occupancy,
            prefix_cache_bytes: args.prefix_cache_mib << 20,
            prefix_cache_scope_share: args.prefix_cache_tenant_share,
        },
        faults: args.inject_faults,
        max_tokens_limit: args.max_tokens_limit,
        default_max_tokens: args.default_max_tokens,
        body_limit: args.body_limit,
        workers: args.workers,
        history_flush_ms: args.history_flush_ms,
        suffix_cache_tenants: args.suffix_cache_tenants,
        suffix_cache_tokens: args.suffix_cache_tokens,
        limits: specgate::store::limits::Limits {
            max_concurrent_requests: args.max_concurrent_per_tenant,
            tokens_per_minute: args.tokens_per_minute_per_tenant,
        },
        max_stop_strings: args.max_stop_strings,
        max_stop_len: args.max_stop_len,
        max_n: args.max_n as usize,
        shutdown_timeout_secs: args.shutdown_timeout_secs,
        priors: args.priors,
    };
    actix_web::rt::System::new().block_on(specgate::gateway::serve(cfg))?;
    Ok(())
}

pub fn run_policy(which: PolicyCommand) -> Result<()> {
    let open = |store: &StoreArgs| -> Result<std::sync::Arc<dyn specgate::store::PolicyStore>> {
        Ok(store.open()?.policies)
    };
    match which {
        PolicyCommand::Export { store, out } => {
            let n = specgate::tools::policy_files::export(open(&store)?.as_ref(), &out)?;
            println!("exported {n} policies to {}", out.display());
        }
        PolicyCommand::Import { store, dir } => {
            let n = specgate::tools::policy_files::import(
                open(&store)?.as_ref(),
                &dir,
                "specgate policy import",
            )?;
            println!("imported {n} policies from {}", dir.display());
        }
    }
    Ok(())
}

pub fn run_loadgen(args: LoadgenArgs) -> Result<()> {
    let tenancy = match (&args.admin_token, args.compare_fixed.is_empty()) {
        (Some(t), false) => specgate::tools::bench_policy::Tenancy::PerConfig {
            admin_token: t.clone(),
        },
        _ => specgate::tools::bench_policy::Tenancy::Shared,
    };
    let key = match (&args.key, &args.admin_token) {
        (Some(k), _) => k.clone(),
        (None, Some(_)) => String::new(),
        (None, None) => anyhow::bail!("--key (or SPECGATE_API_KEY) is required"),
    };
    let cfg = specgate::tools::loadgen::LoadgenConfig {
        url: args.url.trim_end_matches('/').to_string(),
        key,
        model: args.model.clone(),
        concurrency: args.concurrency.clone(),
        requests: args.requests,
        max_tokens: args.max_tokens,
        prompt_dir: args.prompts.clone(),
        repeats: args.repeats,
        warmup: args.warmup,
    };
    let mut fixed = Vec::new();
    for f in &args.compare_fixed {
        let (s, k) = f
            .split_once(':')
            .with_context(|| format!("{f}: expected strategy:k"))?;
        fixed.push((s.to_string(), k.parse::<usize>()?));
    }
    if let Some(kind) = args.scenario.and_then(Scenario::conversation) {
        return conversations::run(kind, &args, &cfg);
    }
    if args.scenario == Some(Scenario::NoisyNeighbour) {
        return noisy::run(&args, &cfg);
    }
    if let Some(scenario) = args.scenario {
        let admin_token = args
            .admin_token
            .clone()
            .context("--scenario needs --admin-token (a tenant per configuration and phase)")?;
        let scfg = specgate::tools::scenarios::ScenarioConfig {
            base: cfg,
            admin_token,
            baseline_url: args
                .baseline_url
                .map(|u| u.trim_end_matches('/').to_string()),
            fixed,
        };
        let run = specgate::tools::scenarios::run(&scfg, scenario, &mut std::io::stderr())?;
        let md = specgate::tools::scenarios::markdown(&run);
        println!("{md}");
        std::fs::create_dir_all(&args.out)?;
        let name = format!("scenario-{}", run.scenario);
        std::fs::write(args.out.join(format!("{name}.md")), md)?;
        std::fs::write(
            args.out.join(format!("{name}.json")),
            serde_json::to_string_pretty(&run)?,
        )?;
        return Ok(());
    }
    if !fixed.is_empty() {
        let rows = specgate::tools::bench_policy::compare(
            &cfg,
            &fixed,
            &tenancy,
            args.warmup,
            args.rounds,
            &mut std::io::stderr(),
        )?;
        let md = specgate::tools::bench_policy::markdown(&rows);
        println!("{md}");
        std::fs::create_dir_all(&args.out)?;
        std::fs::write(args.out.join("policy.md"), md)?;
        return Ok(());
    }
    let run = specgate::tools::loadgen::loadgen(
        &cfg,
        args.admin_token.as_deref(),
        &mut std::io::stderr(),
    )?;
    println!("{}", specgate::tools::loadgen::markdown(&run.rows));
    specgate::tools::loadgen::write_results(&args.out, &run)?;
    Ok(())
}

/// A count the engine cannot run with at 0 (no slot, no row, no prompt token per step).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A share from 0 to 1.
fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        Ok(_) => Err("must be from 0 to 1".into()),
        Err(e) => Err(e.to_string()),
    }
}
