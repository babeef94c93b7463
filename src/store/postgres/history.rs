//! History in PostgreSQL: one row per bucket, every measure a column that merges by addition.
//! A flush is one transaction of additive upserts (`ON CONFLICT … DO UPDATE SET requests =
//! history.requests + excluded.requests, …`), its keys in order so two replicas flushing at
//! once cannot deadlock, and its id recorded in the same transaction so a flush sent again
//! after a lost reply is skipped. Roll-ups run on one replica at a time (an advisory lock).

use std::fmt::Write;

use specgate_policies::WorkloadClass;
use specgate_strategies::StrategyKind;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{big, db_error, unbig, Pg};
use crate::clock::unix_now;
use crate::store::history::{
    Evidence, FlushId, Granularity, HistoryKey, HistoryRecord, HistoryStore, LatencyHistogram,
};
use crate::store::StoreError;

/// The advisory lock a roll-up holds (any constant no other code takes).
const ROLLUP_LOCK: i64 = 0x5eca_7e00_0002;

const KEY: [&str; 6] = ["tenant", "class", "strategy", "k", "granularity", "start"];
const COUNTS: [&str; 17] = [
    "requests",
    "prompt_tokens",
    "tokens_out",
    "target_passes",
    "rounds",
    "drafted",
    "accepted",
    "judged",
    "shadow_checks",
    "shadow_mismatches",
    "u_requests",
    "u_rounds",
    "u_drafted",
    "u_accepted",
    "u_judged",
    "cached_tokens",
    "shadow_plain_tokens",
];
const SECONDS: [&str; 7] = [
    "draft_secs",
    "verify_secs",
    "e2e_secs",
    "u_draft_secs",
    "u_verify_secs",
    "u_load_share",
    "shadow_plain_secs",
];
const ARRAYS: [&str; 4] = ["accepted_per_pos", "ttft", "itl", "queue"];
// And `load_share`, NULL while no request of the bucket kept its load.

fn columns() -> Vec<&'static str> {
    let mut all: Vec<&str> = KEY.to_vec();
    all.extend(COUNTS);
    all.extend(SECONDS);
    all.extend(ARRAYS);
    all.push("load_share");
    all
}

/// How an incoming row merges into the stored one, column by column (the same sums as
/// [`HistoryRecord::merge`]); `new` names the incoming row, `old` the stored one.
fn merged(old: &str, new: &str) -> Vec<String> {
    let mut set: Vec<String> = COUNTS
        .iter()
        .chain(&SECONDS)
        .map(|c| format!("{c} = {old}.{c} + {new}.{c}"))
        .collect();
    set.extend(
        ARRAYS
            .iter()
            .map(|c| format!("{c} = specgate_add_counts({old}.{c}, {new}.{c})")),
    );
    set.push(format!(
        "load_share = CASE WHEN {old}.load_share IS NULL AND {new}.load_share IS NULL THEN NULL \
         ELSE coalesce({old}.load_share, {old}.requests) + coalesce({new}.load_share, {new}.requests) END"
    ));
    set
}

/// The additive upsert of one bucket.
fn upsert_sql() -> String {
    let cols = columns();
    let params: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
    format!(
        "INSERT INTO history ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}",
        cols.join(", "),
        params.join(", "),
        KEY.join(", "),
        merged("history", "excluded").join(", ")
    )
}

/// Move every minute bucket before $1 into its hour, in one statement: the minutes deleted
/// and their sums upserted into the hours (load_share summed as the merge does).
fn rollup_sql() -> String {
    let mut sums = String::new();
    for c in COUNTS.iter().chain(&SECONDS) {
        let _ = write!(sums, ", sum({c})");
    }
    for c in ARRAYS {
        let _ = write!(sums, ", specgate_sum_counts({c})");
    }
    sums.push_str(
        ", CASE WHEN bool_and(load_share IS NULL) THEN NULL \
         ELSE sum(coalesce(load_share, requests)) END",
    );
    let cols = columns();
    format!(
        "WITH moved AS (DELETE FROM history WHERE granularity = 'm' AND start < $1 RETURNING *), \
         folded AS (INSERT INTO history ({cols}) \
             SELECT tenant, class, strategy, k, 'h', start - start % 3600{sums} FROM moved \
             GROUP BY tenant, class, strategy, k, start - start % 3600 \
             ON CONFLICT ({key}) DO UPDATE SET {set}) \
         SELECT count(*) FROM moved",
        cols = cols.join(", "),
        key = KEY.join(", "),
        set = merged("history", "excluded").join(", ")
    )
}

/// One bucket as the upsert's parameters, in [`columns`] order.
struct Params {
    key: (String, &'static str, &'static str, i16, i8, i64),
    counts: [i64; COUNTS.len()],
    seconds: [f64; SECONDS.len()],
    arrays: [Vec<i64>; ARRAYS.len()],
    load_share: Option<f64>,
}

impl Params {
    fn new(k: &HistoryKey, r: &HistoryRecord) -> Params {
        let u = &r.unlearned;
        let g = match k.granularity {
            Granularity::Minute => b'm',
            Granularity::Hour => b'h',
        } as i8;
        let ints = |v: &[u64]| v.iter().map(|&x| big(x)).collect::<Vec<_>>();
        Params {
            key: (
                k.tenant.clone(),
                k.class.name(),
                k.strategy.name(),
                i16::from(k.k),
                g,
                big(k.start),
            ),
            counts: [
                r.requests,
                r.prompt_tokens,
                r.tokens_out,
                r.target_passes,
                r.rounds,
                r.drafted,
                r.accepted,
                r.judged,
                r.shadow_checks,
                r.shadow_mismatches,
                u.requests,
                u.rounds,
                u.drafted,
                u.accepted,
                u.judged,
                r.cached_tokens,
                r.shadow_plain_tokens,
            ]
            .map(big),
            seconds: [
                r.draft_secs,
                r.verify_secs,
                r.e2e_secs,
                u.draft_secs,
                u.verify_secs,
                u.load_share,
                r.shadow_plain_secs,
            ],
            arrays: [
                ints(&r.accepted_per_pos),
                ints(&r.ttft.counts),
                ints(&r.itl.counts),
                ints(&r.queue.counts),
            ],
            load_share: r.load_share,
        }
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        let (t, c, s, k, g, start) = &self.key;
        let mut out: Vec<&(dyn ToSql + Sync)> = vec![t, c, s, k, g, start];
        out.extend(self.counts.iter().map(|v| v as &(dyn ToSql + Sync)));
        out.extend(self.seconds.iter().map(|v| v as &(dyn ToSql + Sync)));
        out.extend(self.arrays.iter().map(|v| v as &(dyn ToSql + Sync)));
        out.push(&self.load_share);
        out
    }
}

/// A stored row back as its key and record.
fn decode(row: &Row) -> Result<(HistoryKey, HistoryRecord), StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("history row: {what}"));
    let class: WorkloadClass = row
        .get::<_, &str>(1)
        .parse()
        .map_err(|_| corrupt("class"))?;
    let strategy: StrategyKind = row
        .get::<_, &str>(2)
        .parse()
        .map_err(|_| corrupt("strategy"))?;
    let granularity = match row.get::<_, i8>(4) as u8 {
        b'm' => Granularity::Minute,
        b'h' => Granularity::Hour,
        _ => return Err(corrupt("granularity")),
    };
    let key = HistoryKey {
        tenant: row.get(0),
        class,
        strategy,
        k: u8::try_from(row.get::<_, i16>(3)).map_err(|_| corrupt("k"))?,
        granularity,
        start: unbig(row.get(5)),
    };
    let n = |i: usize| unbig(row.get(KEY.len() + i));
    let f = |i: usize| row.get::<_, f64>(KEY.len() + COUNTS.len() + i);
    let a = |i: usize| -> Vec<u64> {
        let at = KEY.len() + COUNTS.len() + SECONDS.len() + i;
        row.get::<_, Vec<i64>>(at).into_iter().map(unbig).collect()
    };
    let record = HistoryRecord {
        requests: n(0),
        prompt_tokens: n(1),
        tokens_out: n(2),
        target_passes: n(3),
        rounds: n(4),
        drafted: n(5),
        accepted: n(6),
        judged: n(7),
        shadow_checks: n(8),
        shadow_mismatches: n(9),
        cached_tokens: n(15),
        shadow_plain_tokens: n(16),
        shadow_plain_secs: f(6),
        unlearned: Evidence {
            requests: n(10),
            rounds: n(11),
            drafted: n(12),
            accepted: n(13),
            judged: n(14),
            draft_secs: f(3),
            verify_secs: f(4),
            load_share: f(5),
        },
        draft_secs: f(0),
        verify_secs: f(1),
        e2e_secs: f(2),
        accepted_per_pos: a(0),
        ttft: LatencyHistogram { counts: a(1) },
        itl: LatencyHistogram { counts: a(2) },
        queue: LatencyHistogram { counts: a(3) },
        load_share: row.get(columns().len() - 1),
    };
    Ok((key, record))
}

#[derive(Clone)]
pub struct PgHistory {
    pg: Pg,
}

impl PgHistory {
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

impl HistoryStore for PgHistory {
    fn add(
        &self,
        flush: FlushId,
        records: &[(HistoryKey, HistoryRecord)],
    ) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut sorted: Vec<_> = records
            .iter()
            .map(|(k, r)| (k.clone(), Params::new(k, r)))
            .collect();
        // One lock order for every replica's flush: no two can wait on each other.
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        self.pg.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(db_error)?;
            let fresh = tx
                .execute(
                    "INSERT INTO history_flushes (id, at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                    &[&&flush.0[..], &big(unix_now())],
                )
                .await
                .map_err(db_error)?;
            if fresh == 0 {
                return Ok(()); // added before: the reply to it was lost
            }
            let upsert = tx.prepare_cached(&upsert_sql()).await.map_err(db_error)?;
            for (_, params) in &sorted {
                tx.execute(&upsert, &params.refs()).await.map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)
        })
    }

    fn read(
        &self,
        tenant: Option<&str>,
        from: u64,
        to: u64,
    ) -> Result<Vec<(HistoryKey, HistoryRecord)>, StoreError> {
        let tenant = tenant.map(str::to_string);
        let sql = format!(
            "SELECT {} FROM history WHERE ($1::text IS NULL OR tenant = $1) \
             AND start >= $2 AND start < $3 \
             ORDER BY tenant COLLATE \"C\", class, strategy, k, granularity, start",
            columns().join(", ")
        );
        self.pg.run(move |client| async move {
            let rows = client
                .query(&sql, &[&tenant, &big(from), &big(to)])
                .await
                .map_err(db_error)?;
            rows.iter().map(decode).collect()
        })
    }

    fn roll_up(&self, cutoff: u64) -> Result<usize, StoreError> {
        self.pg.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(db_error)?;
            let locked: bool = tx
                .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&ROLLUP_LOCK])
                .await
                .map_err(db_error)?
                .get(0);
            if !locked {
                return Ok(0); // another replica is rolling up
            }
            let moved: i64 = tx
                .query_one(&rollup_sql(), &[&big(cutoff)])
                .await
                .map_err(db_error)?
                .get(0);
            tx.execute("DELETE FROM history_flushes WHERE at < $1", &[&big(cutoff)])
                .await
                .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            Ok(moved as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_has_one_parameter_and_one_merge() {
        let k = HistoryKey::minute("t", WorkloadClass::Chat, StrategyKind::Plain, 0, 60);
        assert_eq!(
            Params::new(&k, &HistoryRecord::default()).refs().len(),
            columns().len()
        );
        assert_eq!(merged("a", "b").len(), columns().len() - KEY.len());
    }
}
