//! Starting the gateway: load the model, start the engine thread and the actors, open the
//! store, bind, and serve until a signal stops it.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix::Actor;
use actix_web::{web, App, HttpServer};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use std::time::Duration;

use crate::constraint::LazyGrammars;
use crate::drafting::model_drafter::{DraftModelError, ModelDrafter};
use crate::drafting::registry::{self, DraftResources};
use crate::engine::{EngineConfig, EngineHandle};
use crate::gateway::actors::history_writer::{Flush, HistoryWriter};
use crate::gateway::actors::planner::Planner;
use crate::gateway::actors::request::Services;
use crate::gateway::actors::strategy::{StrategyActor, TenantSuffixCaches};
use crate::gateway::admission::Quotas;
use crate::gateway::http::requests::RequestLimits;
use crate::gateway::http::routes;
use crate::gateway::http::state::AppState;
use crate::heads::bundle::MedusaBundle;
use crate::heads::eagle_bundle::EagleBundle;
use crate::model::loaded::{LoadError, LoadedModel};
use crate::model::tokenizer::Tokenizer;
use specgate_policies::{ArmPrior, WorkloadClass};
use specgate_strategies::StrategyKind;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("loading the model: {0}")]
    Load(#[from] LoadError),
    #[error("loading a draft model: {0}")]
    DraftModel(#[from] DraftModelError),
    #[error("loading Medusa heads: {0}")]
    Medusa(#[from] crate::heads::bundle::MedusaError),
    #[error("loading the EAGLE layer: {0}")]
    Eagle(#[from] crate::heads::eagle_bundle::EagleError),
    #[error(transparent)]
    Corpus(#[from] crate::drafting::answer_corpus::CorpusError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("policies: {0}")]
    Policies(#[from] crate::store::policies::PolicyStoreError),
    #[error("metrics: {0}")]
    Metrics(String),
    #[error("priors: {0}")]
    Priors(#[from] crate::gateway::priors::PriorsLoadError),
    #[error("hashing the model: {0}")]
    ModelHash(#[from] crate::model::fetch::FetchError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub model: PathBuf,
    /// Where state lives, and the Redis replicas share limits and notifications through.
    pub store: crate::store::StoreUrl,
    pub redis: Option<crate::store::RedisConfig>,
    pub host: String,
    pub port: u16,
    pub admin_token: Option<String>,
    pub draft_model: Option<PathBuf>,
    /// Medusa heads' directory (default: the shipped heads for the model, if any).
    pub medusa_heads: Option<PathBuf>,
    /// The EAGLE layer's directory (default: the shipped layer for the model, if any).
    pub eagle_layer: Option<PathBuf>,
    /// The target's device.
    pub device: crate::model::DeviceChoice,
    /// The answer corpus the suffix strategies consult for every tenant.
    pub corpus: crate::drafting::answer_corpus::CorpusSource,
    pub exit_layer: usize,
    pub engine: EngineConfig,
    pub max_tokens_limit: usize,
    pub default_max_tokens: usize,
    pub body_limit: usize,
    pub workers: usize,
    /// How often finished requests' history is written (a crash loses at most this much).
    pub history_flush_ms: u64,
    /// Tenants whose suffix caches are kept (least recently used dropped first), and the
    /// tokens each keeps.
    pub suffix_cache_tenants: usize,
    pub suffix_cache_tokens: usize,
    /// Per-tenant defaults; the admin API overrides them per tenant.
    pub limits: crate::store::limits::Limits,
    pub max_stop_strings: usize,
    pub max_stop_len: usize,
    /// Most choices one request may ask for (`n`).
    pub max_n: usize,
    /// How long in-flight requests may run on after SIGTERM.
    pub shutdown_timeout_secs: u64,
    /// Injected faults (reliability tests only; none by default).
    pub faults: crate::faults::Faults,
    /// The learner's priors file (None: found for the model, see [`crate::gateway::priors`]).
    pub priors: Option<PathBuf>,
}

const SECONDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 20.0,
];
const COUNTS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

fn install_metrics() -> Result<PrometheusHandle, ServeError> {
    let err = |e: metrics_exporter_prometheus::BuildError| ServeError::Metrics(e.to_string());
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("seconds".into()), &SECONDS)
        .map_err(err)?
        .set_buckets_for_metric(Matcher::Prefix("specgate_batch".into()), &COUNTS)
        .map_err(err)?
        .install_recorder()
        .map_err(err)
}

/// The priors measured for the served model (empty: none; the classes start uniform). Read
/// before the engine starts, so a file made for another model fails the start at once.
fn learner_priors(
    cfg: &ServeConfig,
) -> Result<Vec<(WorkloadClass, StrategyKind, ArmPrior)>, ServeError> {
    let sha = crate::model::fetch::model_sha256(&cfg.model)?;
    let mut warnings = Vec::new();
    let found =
        crate::gateway::priors::for_model(&cfg.model, &sha, cfg.priors.as_deref(), &mut warnings)?;
    for w in warnings {
        eprintln!("specgate: {w}");
    }
    let Some((priors, from)) = found else {
        eprintln!(
            "specgate: no learner priors for this model: classes start uniform \
             (`specgate calibrate-policy` measures them)"
        );
        return Ok(Vec::new());
    };
    let entries = priors
        .entries()
        .map_err(|e| crate::gateway::priors::PriorsLoadError::File {
            path: from.clone().into(),
            why: e.to_string(),
        })?;
    eprintln!(
        "specgate: learner priors: {from} ({} entries)",
        entries.len()
    );
    Ok(entries)
}

/// Serve until SIGINT or SIGTERM, then drain (see [`drain_on_signal`]). Prints `specgate listening on http://ADDR` once bound (with
/// `--port 0` that is how a caller learns the port).
pub async fn serve(cfg: ServeConfig) -> Result<(), ServeError> {
    // The store first: a store this build cannot read should fail before the model loads.
    let stores = crate::store::Stores::connect(&cfg.store, cfg.redis.as_ref())?;
    if matches!(cfg.store, crate::store::StoreUrl::Postgres(_)) && cfg.redis.is_none() {
        eprintln!(
            "specgate: no --redis: tenant limits are enforced per replica, and other replicas \
             see key, limit and policy edits within the cache TTL (5 s); run several replicas \
             with Redis"
        );
    }
    let metrics = install_metrics()?;
    let lm = LoadedModel::load_on(&cfg.model, cfg.device)?;
    let priors = learner_priors(&cfg)?;
    let tokenizer = Arc::clone(&lm.tokenizer);
    let context_length = lm.model.config().context_length;
    let vocab_size = lm.model.config().vocab_size;
    let grammars = LazyGrammars::new(Arc::clone(&tokenizer), lm.model.config().vocab_size);
    grammars.warm();
    let model_id = cfg.model.file_stem().map_or_else(
        || "default".to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    let resources = draft_resources(&cfg, &tokenizer)?;
    let engine = EngineHandle::start_with_hook(lm, cfg.engine.clone(), cfg.faults.step_hook())?;
    let available = registry::available(&resources);
    let suffix_caches = TenantSuffixCaches::new(cfg.suffix_cache_tenants, cfg.suffix_cache_tokens);
    let strategies: HashMap<_, _> = available
        .iter()
        .map(|&k| {
            let actor = StrategyActor::new(k, resources.clone())
                .with_suffix_caches(suffix_caches.clone())
                .with_drafter_hook(cfg.faults.drafter_hook());
            (k, actor.start())
        })
        .collect();
    let policies = Arc::clone(&stores.policies);
    policies.seed_defaults()?;
    let writer = HistoryWriter::new(
        Arc::clone(&stores.history),
        Duration::from_millis(cfg.history_flush_ms.max(10)),
        Duration::from_secs(24 * 3600),
    );
    // Its own thread: a flush's fsync and rollups must not stall the planner and the
    // strategy actors, which share the system arbiter.
    let history = HistoryWriter::start_in_arbiter(&actix::Arbiter::new().handle(), |_| writer);
    let mut planner = Planner::new(engine.clone(), available, policies.clone(), history.clone());
    planner.learner.seed(&priors);
    planner.warm_start(stores.history.as_ref(), 3600);
    let planner = planner.start();
    let services = Services {
        engine,
        planner,
        strategies: Arc::new(strategies),
        history: history.clone(),
    };
    let draining = Arc::new(AtomicBool::new(false));
    let state = web::Data::new(AppState {
        services,
        tenants: stores.tenants,
        policies,
        history: stores.history,
        responses: stores.responses,
        tokenizer,
        grammars,
        limits: RequestLimits {
            model_id,
            context_length,
            max_tokens_limit: cfg.max_tokens_limit,
            default_max_tokens: cfg.default_max_tokens,
            max_stop_strings: cfg.max_stop_strings,
            max_stop_len: cfg.max_stop_len,
            max_n: cfg.max_n,
            max_k: 16,
            vocab_size,
        },
        admin_token: cfg.admin_token.clone(),
        metrics,
        body_limit: cfg.body_limit,
        quotas: Quotas::new(cfg.limits, Arc::clone(&stores.limiter)),
        draining: Arc::clone(&draining),
        started: crate::clock::unix_now(),
        cache_scopes: crate::prefix::ScopeSecret::random(),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .configure(routes::routes)
            .default_service(web::to(routes::not_found))
    })
    .workers(cfg.workers.max(1))
    // A client that closes its socket has left (actix keeps half-closed connections by
    // default): the handler is dropped, and with it the request, which frees its sequence.
    // Without this a non-streamed request, which writes nothing until it ends, ran on to
    // max_tokens after its client was gone.
    .h1_allow_half_closed(false)
    .shutdown_timeout(cfg.shutdown_timeout_secs)
    .disable_signals()
    .bind((cfg.host.as_str(), cfg.port))?;
    for addr in server.addrs() {
        println!("specgate listening on http://{addr}");
    }
    std::io::stdout().flush()?;
    let server = server.run();
    actix_web::rt::spawn(drain_on_signal(server.handle(), draining));
    server.await?;
    // Drained (or out of time): what the writer still holds goes to disk before we exit.
    match history.send(Flush).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("specgate: final history flush failed: {e}"),
        Err(e) => eprintln!("specgate: the history writer is gone, its last records lost: {e}"),
    }
    eprintln!("specgate: stopped");
    Ok(())
}

/// What the strategy actors draft with: the early-exit layers always, a draft model and
/// heads when given (or shipped), and the answer corpus.
fn draft_resources(cfg: &ServeConfig, tokenizer: &Tokenizer) -> Result<DraftResources, ServeError> {
    let draft_model = match &cfg.draft_model {
        Some(path) => Some(ModelDrafter::load_separate(path, tokenizer)?),
        None => None,
    };
    let corpus = cfg
        .corpus
        .load(&cfg.model, tokenizer, registry::SUFFIX_MAX_DEPTH)?;
    if let Some(c) = &corpus {
        eprintln!("specgate: answer corpus: {} tokens", c.len_tokens());
    }
    Ok(DraftResources {
        draft_model,
        early_exit: Some(ModelDrafter::load_early_exit(&cfg.model, cfg.exit_layer)?),
        medusa: load_medusa(cfg)?,
        eagle: load_eagle(cfg)?,
        corpus,
    })
}

/// Heads given with `--medusa-heads` must load; the shipped default heads are used when they
/// exist and match the model, and otherwise the `medusa` strategy is simply unavailable.
fn load_medusa(cfg: &ServeConfig) -> Result<Option<MedusaBundle>, ServeError> {
    if let Some(dir) = &cfg.medusa_heads {
        return Ok(Some(crate::heads::bundle::load(dir, &cfg.model)?));
    }
    let dir = crate::heads::bundle::default_dir(&cfg.model);
    if !dir.join("heads.json").exists() {
        return Ok(None);
    }
    match crate::heads::bundle::load(&dir, &cfg.model) {
        Ok(b) => Ok(Some(b)),
        Err(e) => {
            eprintln!("specgate: medusa unavailable: {e}");
            Ok(None)
        }
    }
}

/// A layer given with `--eagle-layer` must load; the shipped one is used when it exists and
/// matches the model, and otherwise the `eagle` strategy is simply unavailable.
fn load_eagle(cfg: &ServeConfig) -> Result<Option<EagleBundle>, ServeError> {
    use crate::heads::eagle_bundle;
    if let Some(dir) = &cfg.eagle_layer {
        return Ok(Some(eagle_bundle::load(dir, &cfg.model)?));
    }
    let dir = eagle_bundle::default_dir(&cfg.model);
    if !dir.join("eagle.json").exists() {
        return Ok(None);
    }
    match eagle_bundle::load(&dir, &cfg.model) {
        Ok(b) => Ok(Some(b)),
        Err(e) => {
            eprintln!("specgate: eagle unavailable: {e}");
            Ok(None)
        }
    }
}

/// On SIGTERM or SIGINT: turn not-ready and refuse new requests (503), stop accepting
/// connections, and let in-flight requests finish within the shutdown timeout.
async fn drain_on_signal(server: actix_web::dev::ServerHandle, draining: Arc<AtomicBool>) {
    let signal = async {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    };
    signal.await;
    draining.store(true, Ordering::SeqCst);
    eprintln!("specgate: draining: no new requests; in-flight ones may finish");
    server.stop(true).await;
}
