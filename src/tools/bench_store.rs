//! `specgate bench store`: what a store costs the hot path and the history writer —
//! authenticating a key (cold: the first lookup; warm: from the replica's cache), one
//! admission and release through the limiter, and history flush throughput with several
//! writers (replicas) flushing at once into the same buckets. Each writer opens the store on
//! its own, as a replica would; the flushed totals are read back and checked.

use std::time::Instant;

use serde::Serialize;
use specgate_policies::WorkloadClass;
use specgate_strategies::StrategyKind;

use crate::store::history::{FlushId, HistoryKey, HistoryRecord};
use crate::store::limits::Limits;
use crate::store::{RedisConfig, StoreError, StoreUrl, Stores};

#[derive(Debug, thiserror::Error)]
pub enum BenchStoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Tenants(#[from] crate::store::tenants::TenantError),
    #[error("admission refused: {0}")]
    Refused(#[from] crate::store::limits::QuotaError),
    #[error("read back, the history holds {found} requests where {flushed} were flushed")]
    Lost { found: u64, flushed: u64 },
}

#[derive(Debug, Clone)]
pub struct BenchStoreConfig {
    pub store: StoreUrl,
    pub redis: Option<RedisConfig>,
    /// Writers flushing at once (one per replica).
    pub writers: usize,
    pub flushes: usize,
    pub buckets_per_flush: usize,
    /// Warm authentications timed.
    pub lookups: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchStoreReport {
    pub store: String,
    pub redis: bool,
    pub auth_cold_p50_us: f64,
    pub auth_cold_p99_us: f64,
    pub auth_warm_p50_us: f64,
    pub auth_warm_p99_us: f64,
    pub admit_release_p50_us: f64,
    pub admit_release_p99_us: f64,
    pub writers: usize,
    pub buckets_per_flush: usize,
    pub flush_p50_ms: f64,
    pub buckets_per_sec: f64,
}

fn percentile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[((xs.len() as f64 - 1.0) * q).round() as usize]
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64())
}

pub fn bench_store(cfg: &BenchStoreConfig) -> Result<BenchStoreReport, BenchStoreError> {
    let stores = Stores::connect(&cfg.store, cfg.redis.as_ref())?;
    let run = format!("bench-{:08x}", rand::random::<u32>());
    let mut keys = vec![stores.tenants.create(&run)?.api_key];
    for _ in 0..19 {
        keys.push(stores.tenants.add_key(&run)?.api_key);
    }
    let mut cold = Vec::new();
    for k in &keys {
        let (who, secs) = timed(|| stores.tenants.authenticate(k));
        debug_assert_eq!(who.ok().flatten().as_deref(), Some(run.as_str()));
        cold.push(secs * 1e6);
    }
    let mut warm = Vec::with_capacity(cfg.lookups);
    for i in 0..cfg.lookups {
        let (_, secs) = timed(|| stores.tenants.authenticate(&keys[i % keys.len()]));
        warm.push(secs * 1e6);
    }
    let limits = Limits {
        max_concurrent_requests: 8,
        tokens_per_minute: 0,
    };
    let mut admissions = Vec::new();
    for _ in 0..cfg.lookups.min(2000) {
        let t = Instant::now();
        let lease = stores.limiter.admit(&run, limits, 64)?;
        stores.limiter.release(&run, &lease, 64, 32);
        admissions.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (flush_ms, buckets_per_sec) = flush_throughput(cfg, &stores, &run)?;
    Ok(BenchStoreReport {
        store: cfg.store.to_string(),
        redis: cfg.redis.is_some(),
        auth_cold_p50_us: percentile(&mut cold, 0.5),
        auth_cold_p99_us: percentile(&mut cold, 0.99),
        auth_warm_p50_us: percentile(&mut warm, 0.5),
        auth_warm_p99_us: percentile(&mut warm, 0.99),
        admit_release_p50_us: percentile(&mut admissions, 0.5),
        admit_release_p99_us: percentile(&mut admissions, 0.99),
        writers: cfg.writers,
        buckets_per_flush: cfg.buckets_per_flush,
        flush_p50_ms: flush_ms,
        buckets_per_sec,
    })
}

/// Every writer flushes the same buckets (the same routes and minutes, as replicas serving
/// one tenant do), one request each per flush. Returns the median flush and buckets/s.
fn flush_throughput(
    cfg: &BenchStoreConfig,
    stores: &Stores,
    tenant: &str,
) -> Result<(f64, f64), BenchStoreError> {
    let strategies = [
        StrategyKind::Ngram,
        StrategyKind::Suffix,
        StrategyKind::Plain,
    ];
    let batch: Vec<(HistoryKey, HistoryRecord)> = (0..cfg.buckets_per_flush)
        .map(|i| {
            let key = HistoryKey::minute(
                tenant,
                WorkloadClass::ALL[i % WorkloadClass::ALL.len()],
                strategies[i % strategies.len()],
                i % 8,
                7_200 + 60 * (i / 96) as u64,
            );
            let record = HistoryRecord {
                requests: 1,
                tokens_out: 10,
                ..HistoryRecord::default()
            };
            (key, record)
        })
        .collect();
    // A replica each on a shared store; one process holds a sled file, so its writers share.
    let writers: Vec<Stores> = (0..cfg.writers.max(1))
        .map(|_| match cfg.store {
            StoreUrl::Sled(_) => Ok(stores.clone()),
            StoreUrl::Postgres(_) => Stores::connect(&cfg.store, None),
        })
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let times: Vec<Result<Vec<f64>, StoreError>> = std::thread::scope(|scope| {
        let hs: Vec<_> = writers
            .iter()
            .map(|w| {
                let batch = &batch;
                scope.spawn(move || {
                    (0..cfg.flushes)
                        .map(|_| {
                            let (r, secs) = timed(|| w.history.add(FlushId::new(), batch));
                            r.map(|()| secs * 1e3)
                        })
                        .collect()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(StoreError::Unavailable("a writer panicked".into())))
            })
            .collect()
    });
    let wall = started.elapsed().as_secs_f64();
    let mut all = Vec::new();
    for t in times {
        all.extend(t?);
    }
    let flushed = (writers.len() * cfg.flushes * batch.len()) as u64;
    let found: u64 = stores
        .history
        .read(Some(tenant), 0, u64::MAX)?
        .iter()
        .map(|(_, r)| r.requests)
        .sum();
    if found != flushed {
        return Err(BenchStoreError::Lost { found, flushed });
    }
    Ok((percentile(&mut all, 0.5), flushed as f64 / wall))
}

impl BenchStoreReport {
    pub fn markdown(&self) -> String {
        format!(
            "| store | redis | auth cold p50 / p99 (µs) | auth warm p50 / p99 (µs) | admit+release p50 / p99 (µs) | writers × buckets/flush | flush p50 (ms) | buckets/s |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- |\n\
             | {} | {} | {:.0} / {:.0} | {:.1} / {:.1} | {:.0} / {:.0} | {} × {} | {:.1} | {:.0} |",
            self.store,
            if self.redis { "yes" } else { "no" },
            self.auth_cold_p50_us,
            self.auth_cold_p99_us,
            self.auth_warm_p50_us,
            self.auth_warm_p99_us,
            self.admit_release_p50_us,
            self.admit_release_p99_us,
            self.writers,
            self.buckets_per_flush,
            self.flush_p50_ms,
            self.buckets_per_sec,
        )
    }
}
