//! Where state lives (`--store`, `--redis`, shared by every command that opens the store),
//! and `specgate store migrate|copy`.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use specgate::store::{RedisConfig, StoreUrl, Stores};

#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// Where tenants, keys, limits, policies and history live: sled:PATH (embedded, one
    /// replica) or postgres://USER@HOST:PORT/DB (shared by replicas). A bare path is sled.
    #[arg(
        long,
        alias = "db",
        env = "SPECGATE_STORE",
        default_value = "sled:data/specgate.db"
    )]
    pub store: StoreUrl,
    /// Redis for limits shared across replicas and change notifications
    /// (redis://HOST:PORT/); several replicas need it.
    #[arg(long, env = "SPECGATE_REDIS")]
    pub redis: Option<String>,
    /// Prefix of every Redis key and channel (deployments sharing one Redis).
    #[arg(long, env = "SPECGATE_REDIS_PREFIX", default_value = "specgate")]
    pub redis_prefix: String,
    /// Seconds an in-flight place outlives a replica that stopped renewing it.
    #[arg(long, default_value_t = 10)]
    pub lease_ttl_secs: u64,
}

impl StoreArgs {
    pub fn redis(&self) -> Option<RedisConfig> {
        self.redis.as_ref().map(|url| RedisConfig {
            url: url.clone(),
            prefix: self.redis_prefix.clone(),
            lease_ttl: Duration::from_secs(self.lease_ttl_secs.max(1)),
        })
    }

    pub fn open(&self) -> Result<Stores> {
        Stores::connect(&self.store, self.redis().as_ref())
            .with_context(|| format!("opening the store {}", self.store))
    }
}

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Create or upgrade the store's schema, and nothing else.
    Migrate {
        #[arg(long, env = "SPECGATE_STORE", default_value = "sled:data/specgate.db")]
        store: StoreUrl,
    },
    /// Copy tenants, keys, limits, policies with their history, and the request history
    /// from one store into another, empty one; both are read back and compared.
    Copy {
        #[arg(long)]
        from: StoreUrl,
        #[arg(long)]
        to: StoreUrl,
    },
}

pub fn run(which: StoreCommand) -> Result<()> {
    match which {
        StoreCommand::Migrate { store } => {
            // Opening migrates; the report says where the schema stands.
            Stores::connect(&store, None).with_context(|| format!("migrating {store}"))?;
            println!("{store}: schema up to date");
        }
        StoreCommand::Copy { from, to } => {
            let source = Stores::connect(&from, None).with_context(|| format!("opening {from}"))?;
            let target = Stores::connect(&to, None).with_context(|| format!("opening {to}"))?;
            let r = specgate::store::copy::copy(&source, &target)?;
            println!(
                "copied {from} to {to}: {} tenants, {} keys, {} routes with {} policy versions, \
                 {} history buckets; read back and compared: identical",
                r.tenants, r.keys, r.routes, r.policy_versions, r.history_buckets
            );
        }
    }
    Ok(())
}

#[derive(Args)]
pub struct BenchStoreArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Writers flushing history at once (one per replica).
    #[arg(long, default_value_t = 2)]
    writers: usize,
    #[arg(long, default_value_t = 50)]
    flushes: usize,
    #[arg(long, default_value_t = 200)]
    buckets: usize,
    /// Warm authentications (and admissions) timed.
    #[arg(long, default_value_t = 20_000)]
    lookups: usize,
}

pub fn run_bench(args: BenchStoreArgs) -> Result<()> {
    let cfg = specgate::tools::bench_store::BenchStoreConfig {
        store: args.store.store.clone(),
        redis: args.store.redis(),
        writers: args.writers,
        flushes: args.flushes,
        buckets_per_flush: args.buckets,
        lookups: args.lookups,
    };
    let report = specgate::tools::bench_store::bench_store(&cfg)?;
    println!("{}", report.markdown());
    Ok(())
}
