//! The history writer: gathers finished requests' records in memory and adds them to the
//! history store in one batch per flush interval (no store write per request or token). A
//! crash loses at most one interval. A store that is down keeps the batch, with its flush id,
//! for the next try (backing off to [`MAX_BACKOFF`]), so a batch whose reply was lost is
//! skipped by the store rather than counted twice; records that arrive meanwhile wait in
//! their own batch, bounded by [`MAX_PENDING_BUCKETS`]. Minute buckets older than the window
//! are rolled up into hours.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use crate::clock::unix_now;
use crate::store::history::{FlushId, HistoryKey, HistoryRecord};
use crate::store::{HistoryStore, StoreError};

/// The most buckets kept in memory while the store is down; records for a new bucket past
/// it are dropped and counted (`specgate_history_dropped_total`).
pub const MAX_PENDING_BUCKETS: usize = 50_000;
/// The most buckets in one store call: a backlog after an outage goes in flushes of this
/// size, each with its own id, so no single call outgrows the store's call timeout.
pub const MAX_FLUSH_BUCKETS: usize = 1000;
/// The longest wait between tries while the store is down.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct HistoryWriter {
    store: Arc<dyn HistoryStore>,
    pending: BTreeMap<HistoryKey, HistoryRecord>,
    /// Batches the store has not acknowledged, each with the id it was first sent under.
    unsent: VecDeque<(FlushId, Vec<(HistoryKey, HistoryRecord)>)>,
    flush_every: Duration,
    minute_window: Duration,
    last_rollup: u64,
    failures: u32,
    next_try: Option<Instant>,
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
            unsent: VecDeque::new(),
            flush_every,
            minute_window,
            last_rollup: 0,
            failures: 0,
            next_try: None,
        }
    }

    fn add(&mut self, key: HistoryKey, record: &HistoryRecord) {
        if self.held() >= MAX_PENDING_BUCKETS && !self.pending.contains_key(&key) {
            metrics::counter!("specgate_history_dropped_total").increment(1);
            return;
        }
        self.pending.entry(key).or_default().merge(record);
    }

    /// Buckets held in memory, sent or not.
    fn held(&self) -> usize {
        self.pending.len() + self.unsent.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    /// Send the unacknowledged batches (each under its first id), then what is pending (in
    /// batches under new ids); on failure the rest stay for the next flush.
    fn flush(&mut self) -> Result<(), StoreError> {
        if self.unsent.is_empty() && !self.pending.is_empty() {
            let all: Vec<_> = std::mem::take(&mut self.pending).into_iter().collect();
            for chunk in all.chunks(MAX_FLUSH_BUCKETS) {
                self.unsent.push_back((FlushId::new(), chunk.to_vec()));
            }
        }
        while let Some((id, batch)) = self.unsent.front() {
            self.store.add(*id, batch)?;
            self.unsent.pop_front();
            if self.unsent.is_empty() && !self.pending.is_empty() {
                return self.flush();
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

    /// A timed flush: skipped while backing off after failures.
    fn tick(&mut self) {
        if self.next_try.is_some_and(|t| Instant::now() < t) {
            return;
        }
        match self.flush() {
            Ok(()) => {
                self.failures = 0;
                self.next_try = None;
            }
            Err(e) => {
                self.failures += 1;
                let backoff = self
                    .flush_every
                    .saturating_mul(1 << self.failures.min(10))
                    .min(MAX_BACKOFF);
                self.next_try = Some(Instant::now() + backoff);
                eprintln!("specgate: writing history failed (retry in {backoff:?}): {e}");
                metrics::counter!("specgate_history_write_failures_total").increment(1);
            }
        }
        metrics::gauge!("specgate_history_pending_buckets").set(self.held() as f64);
    }
}

impl Actor for HistoryWriter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.flush_every, |act, _| act.tick());
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
        self.add(msg.key, &msg.record);
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
        /// Fail after the add went through (a reply lost on the way back).
        lose_replies: bool,
    }

    impl HistoryStore for Flaky {
        fn add(
            &self,
            flush: FlushId,
            records: &[(HistoryKey, HistoryRecord)],
        ) -> Result<(), StoreError> {
            use std::sync::atomic::Ordering::SeqCst;
            let fail = self
                .failures
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if fail && self.lose_replies {
                self.inner.add(flush, records)?;
            }
            if fail {
                return Err(StoreError::Unavailable("down".into()));
            }
            self.inner.add(flush, records)
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

    /// A writer on a sled store behind [`Flaky`], and the store itself to read back.
    fn flaky_writer(failures: usize, lose_replies: bool) -> (Arc<dyn HistoryStore>, HistoryWriter) {
        let inner = crate::store::Stores::temporary().unwrap().history;
        let flaky = Arc::new(Flaky {
            inner: Arc::clone(&inner),
            failures: failures.into(),
            lose_replies,
        });
        let w = HistoryWriter::new(flaky, Duration::from_secs(1), Duration::from_secs(600));
        (inner, w)
    }

    #[test]
    fn a_batch_the_store_refused_is_written_by_a_later_flush_once() {
        let (inner, mut w) = flaky_writer(2, false);
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

    #[test]
    fn a_batch_whose_reply_was_lost_is_counted_once_and_later_records_are_not_lost() {
        let (inner, mut w) = flaky_writer(1, true);
        let key = HistoryKey::minute("t", WorkloadClass::Chat, StrategyKind::Plain, 0, unix_now());
        w.add(key.clone(), &record(1, 10));
        assert!(
            w.flush().is_err(),
            "the store added it but the reply was lost"
        );
        // A request that ends meanwhile goes into a batch of its own, not the lost one.
        w.add(key.clone(), &record(1, 5));
        w.flush().unwrap();
        let rows = inner.read(None, 0, u64::MAX).unwrap();
        assert_eq!(rows, vec![(key, record(2, 15))]);
    }

    #[test]
    fn a_backlog_goes_in_batches_each_counted_once() {
        let (inner, mut w) = flaky_writer(1, true);
        w.last_rollup = unix_now(); // no roll-up of these old minutes in this test
        let n = MAX_FLUSH_BUCKETS as u64 * 2 + 5;
        for i in 0..n {
            let key = HistoryKey::minute("t", WorkloadClass::Chat, StrategyKind::Plain, 0, i * 60);
            w.add(key, &record(1, 1));
        }
        assert!(w.flush().is_err(), "the first batch's reply was lost");
        assert_eq!(
            w.unsent.len(),
            3,
            "three batches of at most {MAX_FLUSH_BUCKETS}"
        );
        w.flush().unwrap();
        let rows = inner.read(None, 0, u64::MAX).unwrap();
        assert_eq!(rows.len() as u64, n);
        assert!(
            rows.iter().all(|(_, r)| *r == record(1, 1)),
            "each counted once"
        );
    }

    #[test]
    fn new_buckets_past_the_bound_are_dropped_while_the_store_is_down() {
        let inner = crate::store::Stores::temporary().unwrap().history;
        let mut w = HistoryWriter::new(inner, Duration::from_secs(1), Duration::from_secs(600));
        for i in 0..MAX_PENDING_BUCKETS as u64 + 10 {
            let key = HistoryKey::minute("t", WorkloadClass::Chat, StrategyKind::Plain, 0, i * 60);
            w.add(key, &record(1, 1));
        }
        assert_eq!(w.pending.len(), MAX_PENDING_BUCKETS);
        // A bucket already held still takes more records.
        let held = HistoryKey::minute("t", WorkloadClass::Chat, StrategyKind::Plain, 0, 0);
        w.add(held.clone(), &record(1, 1));
        assert_eq!(w.pending[&held], record(2, 2));
    }
}
