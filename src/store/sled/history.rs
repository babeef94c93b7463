//! History in sled: one tree, `history`, keyed by [`HistoryKey::encode`] (a tenant's records
//! are one prefix scan) with each record as JSON; `history_flushes` holds the ids of the
//! flushes added (id → unix seconds), pruned by roll-ups. The one place a stored record is
//! decoded.

use sled::transaction::{ConflictableTransactionError, TransactionError};

use sled::Transactional;

use crate::clock::unix_now;
use crate::store::history::{
    tenant_prefix, FlushId, Granularity, HistoryKey, HistoryRecord, HistoryStore,
};
use crate::store::StoreError;

#[derive(Clone)]
pub struct SledHistory {
    db: sled::Db,
    tree: sled::Tree,
    flushes: sled::Tree,
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
            flushes: db.open_tree("history_flushes")?,
        })
    }

    /// Merge `records` and remove `remove` in one transaction, once per `flush` (None: a
    /// roll-up's move, which is never retried as such).
    fn merge_all(
        &self,
        flush: Option<FlushId>,
        records: &[(Vec<u8>, &HistoryRecord)],
        remove: &[sled::IVec],
    ) -> Result<(), StoreError> {
        let now = unix_now().to_be_bytes();
        (&self.tree, &self.flushes)
            .transaction(|(tree, flushes)| {
                if let Some(id) = flush {
                    if flushes.insert(&id.0[..], &now[..])?.is_some() {
                        return Ok(()); // added before: its reply was lost
                    }
                }
                for (key, rec) in records {
                    let mut merged: HistoryRecord = tree
                        .get(key)?
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or_default();
                    merged.merge(rec);
                    let bytes = serde_json::to_vec(&merged).map_err(|e| {
                        ConflictableTransactionError::Abort(StoreError::Corrupt(e.to_string()))
                    })?;
                    tree.insert(key.as_slice(), bytes)?;
                }
                for key in remove {
                    tree.remove(key.clone())?;
                }
                Ok(())
            })
            .map_err(|e| match e {
                TransactionError::Abort(e) => e,
                TransactionError::Storage(e) => e.into(),
            })
    }

    /// Forget the ids of flushes older than `cutoff`: no writer retries one that old.
    fn prune_flushes(&self, cutoff: u64) -> Result<(), StoreError> {
        for item in self.flushes.iter() {
            let (id, at) = item?;
            let at = <[u8; 8]>::try_from(at.as_ref()).map_or(0, u64::from_be_bytes);
            if at < cutoff {
                self.flushes.remove(id)?;
            }
        }
        Ok(())
    }
}

impl HistoryStore for SledHistory {
    fn add(
        &self,
        flush: FlushId,
        records: &[(HistoryKey, HistoryRecord)],
    ) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let encoded: Vec<_> = records.iter().map(|(k, r)| (k.encode(), r)).collect();
        self.merge_all(Some(flush), &encoded, &[])?;
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
            self.merge_all(None, &[(hour.encode(), &rec)], &[raw])?;
        }
        self.prune_flushes(cutoff)?;
        if moved > 0 {
            self.db.flush()?;
        }
        Ok(moved)
    }
}
