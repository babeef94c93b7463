//! History in sled: one tree, `history`, keyed by [`HistoryKey::encode`] (a tenant's records
//! are one prefix scan) with each record as JSON. The one place a stored record is decoded.

use sled::transaction::{ConflictableTransactionError, TransactionError};

use crate::store::history::{tenant_prefix, Granularity, HistoryKey, HistoryRecord, HistoryStore};
use crate::store::StoreError;

#[derive(Clone)]
pub struct SledHistory {
    db: sled::Db,
    tree: sled::Tree,
}

/// A stored entry: None for a key that is not a history key (skipped), an error for a
/// history key whose record this build cannot read.
fn decode(k: &[u8], v: &[u8]) -> Result<Option<(HistoryKey, HistoryRecord)>, StoreError> {
    let Some(key) = HistoryKey::decode(k) else {
        return Ok(None);
    };
    let rec = serde_json::from_slice(v).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(Some((key, rec)))
}

impl SledHistory {
    pub(super) fn open(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(Self {
            db: db.clone(),
            tree: db.open_tree("history")?,
        })
    }

    /// Merge `records` and remove `remove` in one transaction.
    fn merge_all(
        &self,
        records: &[(Vec<u8>, &HistoryRecord)],
        remove: &[sled::IVec],
    ) -> Result<(), StoreError> {
        self.tree
            .transaction(|tx| {
                for (key, rec) in records {
                    let mut merged: HistoryRecord = tx
                        .get(key)?
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or_default();
                    merged.merge(rec);
                    let bytes = serde_json::to_vec(&merged).map_err(|e| {
                        ConflictableTransactionError::Abort(StoreError::Corrupt(e.to_string()))
                    })?;
                    tx.insert(key.as_slice(), bytes)?;
                }
                for key in remove {
                    tx.remove(key.clone())?;
                }
                Ok(())
            })
            .map_err(|e| match e {
                TransactionError::Abort(e) => e,
                TransactionError::Storage(e) => e.into(),
            })
    }
}

impl HistoryStore for SledHistory {
    fn add(&self, records: &[(HistoryKey, HistoryRecord)]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let encoded: Vec<_> = records.iter().map(|(k, r)| (k.encode(), r)).collect();
        self.merge_all(&encoded, &[])?;
        self.db.flush()?;
        Ok(())
    }

    fn read(
        &self,
        tenant: Option<&str>,
        from: u64,
        to: u64,
    ) -> Result<Vec<(HistoryKey, HistoryRecord)>, StoreError> {
        let scan = match tenant {
            Some(t) => self.tree.scan_prefix(tenant_prefix(t)),
            None => self.tree.iter(),
        };
        let mut out = Vec::new();
        for item in scan {
            let (k, v) = item?;
            if let Some((key, rec)) = decode(&k, &v)? {
                if key.start >= from && key.start < to {
                    out.push((key, rec));
                }
            }
        }
        Ok(out)
    }

    fn roll_up(&self, cutoff: u64) -> Result<usize, StoreError> {
        let mut old = Vec::new();
        for item in self.tree.iter() {
            let (k, v) = item?;
            // A record that cannot be read stays where it is (rolling it up would lose it).
            if let Ok(Some((key, rec))) = decode(&k, &v) {
                if key.granularity == Granularity::Minute && key.start < cutoff {
                    old.push((k, key, rec));
                }
            }
        }
        let moved = old.len();
        for (raw, key, rec) in old {
            let hour = HistoryKey {
                granularity: Granularity::Hour,
                start: key.start - key.start % 3600,
                ..key
            };
            self.merge_all(&[(hour.encode(), &rec)], &[raw])?;
        }
        if moved > 0 {
            self.db.flush()?;
        }
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn adds_merge_reads_filter_and_old_minutes_move_into_their_hour() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let s = SledHistory::open(&db).unwrap();
        let key = |tenant, at| {
            HistoryKey::minute(tenant, WorkloadClass::Rag, StrategyKind::Suffix, 4, at)
        };
        let hour = 7200 * 1000;
        s.add(&[
            (key("a", hour), record(1, 10)),
            (key("b", hour), record(5, 50)),
        ])
        .unwrap();
        s.add(&[
            (key("a", hour), record(1, 10)),
            (key("a", hour + 120), record(2, 20)),
        ])
        .unwrap();
        let a = s.read(Some("a"), 0, u64::MAX).unwrap();
        assert_eq!(
            a.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
            vec![record(2, 20), record(2, 20)]
        );
        assert_eq!(s.read(Some("a"), hour + 60, u64::MAX).unwrap().len(), 1);
        assert_eq!(s.read(None, 0, u64::MAX).unwrap().len(), 3);
        assert_eq!(
            s.roll_up(hour + 60).unwrap(),
            2,
            "a's and b's first minutes"
        );
        assert_eq!(s.roll_up(hour + 60).unwrap(), 0);
        let a = s.read(Some("a"), 0, u64::MAX).unwrap();
        let hours: Vec<_> = a
            .iter()
            .filter(|(k, _)| k.granularity == Granularity::Hour)
            .map(|(k, r)| (k.start, r.clone()))
            .collect();
        assert_eq!(hours, vec![(hour, record(2, 20))]);
        assert_eq!(a.len(), 2, "the hour and the minute after the cutoff");
    }
}
