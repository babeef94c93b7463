//! The history writer: gathers finished requests' records in memory and writes them to sled
//! in one batch per flush interval (no store write per request or token). A crash loses at
//! most one interval. Minute buckets older than the window are rolled up into hours.

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;

use crate::clock::unix_now;
use crate::history::{Granularity, HistoryKey, HistoryRecord};

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

    /// Merge one record into what the store holds under `key`.
    fn merge_into(tree: &sled::Tree, key: &[u8], rec: &HistoryRecord) -> sled::Result<()> {
        tree.fetch_and_update(key, |old| {
            let mut merged: HistoryRecord = old
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or_default();
            merged.merge(rec);
            serde_json::to_vec(&merged).ok()
        })?;
        Ok(())
    }

    fn flush(&mut self) -> sled::Result<()> {
        for (key, rec) in self.pending.drain() {
            Self::merge_into(&self.tree, &key, &rec)?;
        }
        let now = unix_now();
        if now >= self.last_rollup + 60 {
            self.rollup(now)?;
            self.last_rollup = now;
        }
        self.db.flush()?;
        Ok(())
    }

    /// Fold minute buckets older than the window into their hour.
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
            Self::merge_into(&self.tree, &hour.encode(), &rec)?;
            self.tree.remove(raw)?;
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
