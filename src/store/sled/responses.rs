//! Stored responses in sled: `responses` maps `tenant \0 id` to the record's JSON, and
//! `responses_expiry` orders the same keys by expiry time (big-endian first), so a write
//! sweeps the oldest expired ones without a scan.

use crate::store::responses::{ResponseStore, StoredResponse, SWEEP_PER_WRITE};
use crate::store::StoreError;

pub struct SledResponses {
    records: sled::Tree,
    expiry: sled::Tree,
}

impl SledResponses {
    pub fn open(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(Self {
            records: db.open_tree("responses")?,
            expiry: db.open_tree("responses_expiry")?,
        })
    }

    fn sweep(&self, now: u64) -> Result<(), StoreError> {
        let due: Vec<_> = self
            .expiry
            .range(..now.to_be_bytes().to_vec())
            .keys()
            .take(SWEEP_PER_WRITE)
            .collect::<Result<_, _>>()?;
        for k in due {
            self.records.remove(&k[8..])?;
            self.expiry.remove(k)?;
        }
        Ok(())
    }
}

fn key(tenant: &str, id: &str) -> Vec<u8> {
    [tenant.as_bytes(), b"\0", id.as_bytes()].concat()
}

fn expiry_key(expires_at: u64, key: &[u8]) -> Vec<u8> {
    [&expires_at.to_be_bytes()[..], key].concat()
}

fn corrupt(e: serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("a stored response: {e}"))
}

impl ResponseStore for SledResponses {
    fn put(&self, r: &StoredResponse) -> Result<(), StoreError> {
        let k = key(&r.tenant, &r.id);
        let bytes = serde_json::to_vec(r).map_err(corrupt)?;
        // A replaced record's expiry entry goes (one this build cannot read is left to the
        // sweep, which removes the key whatever it finds).
        let old = self.records.insert(&k, bytes)?;
        if let Some(old) = old.and_then(|o| serde_json::from_slice::<StoredResponse>(&o).ok()) {
            self.expiry.remove(expiry_key(old.expires_at, &k))?;
        }
        self.expiry.insert(expiry_key(r.expires_at, &k), &[])?;
        self.sweep(r.created_at)?;
        self.records.flush()?;
        self.expiry.flush()?;
        Ok(())
    }

    fn get(&self, tenant: &str, id: &str, now: u64) -> Result<Option<StoredResponse>, StoreError> {
        let Some(bytes) = self.records.get(key(tenant, id))? else {
            return Ok(None);
        };
        let r: StoredResponse = serde_json::from_slice(&bytes).map_err(corrupt)?;
        Ok((r.expires_at > now).then_some(r))
    }

    fn delete(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        let k = key(tenant, id);
        let Some(old) = self.records.remove(&k)? else {
            return Ok(false);
        };
        if let Ok(old) = serde_json::from_slice::<StoredResponse>(&old) {
            self.expiry.remove(expiry_key(old.expires_at, &k))?;
        }
        self.records.flush()?;
        Ok(true)
    }
}
