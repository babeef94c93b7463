//! The history writer: gathers finished requests' records in memory and adds them to the
//! history store in one batch per flush interval (no store write per request or token). A
//! crash loses at most one interval; a store that is down keeps the batch pending for the
//! next flush. Minute buckets older than the window are rolled up into hours.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::clock::unix_now;
use crate::store::history::{HistoryKey, HistoryRecord};
use crate::store::{HistoryStore, StoreError};

pub struct HistoryWriter {
    store: Arc<dyn HistoryStore>,
    pending: BTreeMap<HistoryKey, HistoryRecord>,
    flush_every: Duration,
    minute_window: Duration,
    last_rollup: u64,
}

impl HistoryWriter {
    pub fn new(
        store: Arc<dyn HistoryStore>,
        flush_every: Duration,
        minute_window: Duration,
    ) -> Self {
        Self {
            store,
            pending: BTreeMap::new(),
            flush_every,
            minute_window,
            last_rollup: 0,
        }
    }

    /// Add the pending batch; on failure it stays pending for the next flush (the store
    /// adds all or none, so nothing is counted twice).
    fn flush(&mut self) -> Result<(), StoreError> {
        if !self.pending.is_empty() {
            let batch: Vec<_> = std::mem::take(&mut self.pending).into_iter().collect();
            if let Err(e) = self.store.add(&batch) {
                self.pending.extend(batch);
                return Err(e);
            }
        }
        let now = unix_now();
        if now >= self.last_rollup + 60 {
            self.store
                .roll_up(now.saturating_sub(self.minute_window.as_secs()))?;
            self.last_rollup = now;
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
        self.pending.entry(msg.key).or_default().merge(&msg.record);
    }
}

/// Write everything pending now (analytics reads after it; shutdown calls it).
#[derive(Message)]
#[rtype(result = "Result<(), StoreError>")]
pub struct Flush;

impl Handler<Flush> for HistoryWriter {
    type Result = Result<(), StoreError>;

    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::history::Granularity;
    use specgate_policies::WorkloadClass;
    use specgate_strategies::StrategyKind;

    fn record(requests: u64, tokens_out: u64) -> HistoryRecord {
        HistoryRecord {
            requests,
            tokens_out,
            ..HistoryRecord::default()
        }
    }

    #[test]
    fn flushes_merge_once_and_old_minutes_move_into_their_hour() {
        let store = crate::store::Stores::temporary().unwrap().history;
        let minute = Duration::from_secs(600);
        let mut w = HistoryWriter::new(Arc::clone(&store), Duration::from_secs(1), minute);
        let now = unix_now();
        let hour_ago = now - now % 3600 - 3600;
        let key = |at| HistoryKey::minute("t", WorkloadClass::Rag, StrategyKind::Suffix, 4, at);
        w.pending.insert(key(hour_ago), record(1, 10));
        w.pending.insert(key(hour_ago + 120), record(2, 20));
        w.pending.insert(key(now), record(3, 30));
        w.flush().unwrap();
        // A second flush with nothing pending writes nothing again.
        w.flush().unwrap();
        w.last_rollup = 0;
        w.flush().unwrap();
        let rows = store.read(None, 0, u64::MAX).unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        let at = |g| rows.iter().find(|(k, _)| k.granularity == g).unwrap();
        let (hour, total) = at(Granularity::Hour);
        assert_eq!((hour.start, total), (hour_ago, &record(3, 30)));
        assert_eq!(at(Granularity::Minute).1, record(3, 30));
    }

    /// A store that fails its first `failures` adds.
    struct Flaky {
        inner: Arc<dyn HistoryStore>,
        failures: std::sync::atomic::AtomicUsize,
    }

    impl HistoryStore for Flaky {
        fn add(&self, records: &[(HistoryKey, HistoryRecord)]) -> Result<(), StoreError> {
            use std::sync::atomic::Ordering::SeqCst;
            if self
                .failures
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(StoreError::Unavailable("down".into()));
            }
            self.inner.add(records)
        }
        fn read(
            &self,
            tenant: Option<&str>,
            from: u64,
            to: u64,
        ) -> Result<Vec<(HistoryKey, HistoryRecord)>, StoreError> {
            self.inner.read(tenant, from, to)
        }
        fn roll_up(&self, cutoff: u64) -> Result<usize, StoreError> {
            self.inner.roll_up(cutoff)
        }
    }

    #[test]
    fn a_batch_the_store_refused_is_written_by_a_later_flush_once() {
        let inner = crate::store::Stores::temporary().unwrap().history;
        let flaky = Arc::new(Flaky {
            inner: Arc::clone(&inner),
            failures: 2.into(),
        });
        let mut w = HistoryWriter::new(flaky, Duration::from_secs(1), Duration::from_secs(600));
        let key = HistoryKey::minute("t", WorkloadClass::Chat, StrategyKind::Plain, 0, unix_now());
        w.pending.insert(key.clone(), record(1, 10));
        assert!(w.flush().is_err());
        w.pending
            .entry(key.clone())
            .or_default()
            .merge(&record(1, 5));
        assert!(w.flush().is_err());
        w.flush().unwrap();
        w.flush().unwrap();
        let rows = inner.read(None, 0, u64::MAX).unwrap();
        assert_eq!(rows, vec![(key, record(2, 15))]);
    }
}
