//! The history writer: gathers finished requests' records in memory and writes them to sled
//! in one batch per flush interval (no store write per request or token). A crash loses at
//! most one interval. Minute buckets older than the window are rolled up into hours.

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use sled::transaction::{ConflictableTransactionError, TransactionError};

use crate::clock::unix_now;
use crate::store::history::{Granularity, HistoryKey, HistoryRecord};

pub struct HistoryWriter {
    db: sled::Db,
    tree: sled::Tree,
    pending: HashMap<Vec<u8>, HistoryRecord>,
    flush_every: Duration,
    minute_window: Duration,
    last_rollup: u64,
}

impl HistoryWriter {
    pub fn new(
        db: &sled::Db,
        flush_every: Duration,
        minute_window: Duration,
    ) -> sled::Result<Self> {
        Ok(Self {
            db: db.clone(),
            tree: db.open_tree("history")?,
            pending: HashMap::new(),
            flush_every,
            minute_window,
            last_rollup: 0,
        })
    }

    /// Merge `records` into what the store holds, all or none: a failed write leaves the
    /// store as it was, so the records can be written again without counting any twice.
    /// `remove`: keys deleted in the same transaction (a rollup's minute buckets).
    fn merge_all(
        tree: &sled::Tree,
        records: &HashMap<Vec<u8>, HistoryRecord>,
        remove: &[sled::IVec],
    ) -> sled::Result<()> {
        tree.transaction(|tx| {
            for (key, rec) in records {
                let mut merged: HistoryRecord = tx
                    .get(key)?
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
                merged.merge(rec);
                let bytes = serde_json::to_vec(&merged).map_err(|e| {
                    ConflictableTransactionError::Abort(sled::Error::Unsupported(e.to_string()))
                })?;
                tx.insert(key.as_slice(), bytes)?;
            }
            for key in remove {
                tx.remove(key.clone())?;
            }
            Ok(())
        })
        .map_err(|e| match e {
            TransactionError::Abort(e) | TransactionError::Storage(e) => e,
        })
    }

    /// Write the pending batch; on failure it stays pending for the next flush.
    fn flush(&mut self) -> sled::Result<()> {
        if !self.pending.is_empty() {
            Self::merge_all(&self.tree, &self.pending, &[])?;
            self.pending.clear();
        }
        let now = unix_now();
        if now >= self.last_rollup + 60 {
            self.rollup(now)?;
            self.last_rollup = now;
        }
        self.db.flush()?;
        Ok(())
    }

    /// Fold minute buckets older than the window into their hour, each minute's move in one
    /// transaction: a failure half-way never counts a minute in both places.
    fn rollup(&self, now: u64) -> sled::Result<()> {
        let cutoff = now.saturating_sub(self.minute_window.as_secs());
        let mut old = Vec::new();
        for item in self.tree.iter() {
            let (k, v) = item?;
            let Some(key) = HistoryKey::decode(&k) else {
                continue;
            };
            if key.granularity == Granularity::Minute && key.start < cutoff {
                if let Ok(rec) = serde_json::from_slice::<HistoryRecord>(&v) {
                    old.push((k, key, rec));
                }
            }
        }
        for (raw, key, rec) in old {
            let hour = HistoryKey {
                granularity: Granularity::Hour,
                start: key.start - key.start % 3600,
                ..key
            };
            let into_hour = HashMap::from([(hour.encode(), rec)]);
            Self::merge_all(&self.tree, &into_hour, &[raw])?;
        }
        Ok(())
    }
}

impl Actor for HistoryWriter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.flush_every, |act, _| {
            if let Err(e) = act.flush() {
                eprintln!("specgate: writing history failed: {e}");
                metrics::counter!("specgate_history_write_failures_total").increment(1);
            }
        });
    }

    fn stopping(&mut self, _: &mut Context<Self>) -> Running {
        if let Err(e) = self.flush() {
            eprintln!("specgate: writing history at shutdown failed: {e}");
        }
        Running::Stop
    }
}

/// One finished request.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Record {
    pub key: HistoryKey,
    pub record: HistoryRecord,
}

impl Handler<Record> for HistoryWriter {
    type Result = ();

    fn handle(&mut self, msg: Record, _: &mut Context<Self>) {
        self.pending
            .entry(msg.key.encode())
            .or_default()
            .merge(&msg.record);
    }
}

/// Write everything pending now (analytics reads after it; shutdown calls it).
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct Flush;

impl Handler<Flush> for HistoryWriter {
    type Result = Result<(), String>;

    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        self.flush().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::history::HistoryKey;
    use specgate_policies::WorkloadClass;
    use specgate_strategies::StrategyKind;

    fn record(requests: u64, tokens_out: u64) -> HistoryRecord {
        HistoryRecord {
            requests,
            tokens_out,
            ..HistoryRecord::default()
        }
    }

    fn stored(tree: &sled::Tree) -> Vec<(HistoryKey, HistoryRecord)> {
        tree.iter()
            .map(|item| {
                let (k, v) = item.unwrap();
                let key = HistoryKey::decode(&k).unwrap();
                (key, serde_json::from_slice(&v).unwrap())
            })
            .collect()
    }

    #[test]
    fn flushes_merge_once_and_old_minutes_move_into_their_hour() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let minute = Duration::from_secs(600);
        let mut w = HistoryWriter::new(&db, Duration::from_secs(1), minute).unwrap();
        let now = unix_now();
        let hour_ago = now - now % 3600 - 3600;
        let key =
            |at| HistoryKey::minute("t", WorkloadClass::Rag, StrategyKind::Suffix, 4, at).encode();
        w.pending.insert(key(hour_ago), record(1, 10));
        w.pending.insert(key(hour_ago + 120), record(2, 20));
        w.pending.insert(key(now), record(3, 30));
        w.flush().unwrap();
        // A second flush with nothing pending writes nothing again.
        w.flush().unwrap();
        w.last_rollup = 0;
        w.flush().unwrap();
        let rows = stored(&w.tree);
        assert_eq!(rows.len(), 2, "{rows:?}");
        // 'h' sorts before 'm': the hour first.
        let (hour, total) = &rows[0];
        assert_eq!(
            (hour.granularity, hour.start, total),
            (Granularity::Hour, hour_ago, &record(3, 30))
        );
        let (fresh, recent) = &rows[1];
        assert_eq!(
            (fresh.granularity, recent),
            (Granularity::Minute, &record(3, 30))
        );
    }
}
