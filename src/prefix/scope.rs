//! Cache scopes: whose blocks a request may hit. A hit answers faster than a miss, so a shared
//! cache would let one tenant learn, from its own timings, what another tenant sent. Scopes are
//! derived by the server from who is asking (the tenant, or a group an admin put the tenant
//! in), never from a request field: a client-chosen salt can be copied by an attacker.

use sha2::{Digest, Sha256};

/// Whose blocks a request may hit. The root of every block chain, so blocks of different
/// scopes never match, whatever their tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheScope(pub u64);

/// The server's secret behind every scope: scopes are keyed hashes of a tenant id or a group
/// name, unpredictable outside this process.
#[derive(Clone)]
pub struct ScopeSecret([u8; 32]);

impl std::fmt::Debug for ScopeSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScopeSecret(..)")
    }
}

impl ScopeSecret {
    /// A fresh secret (the cache lives in this process only, so nothing needs to keep it).
    pub fn random() -> Self {
        Self(rand::random())
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A tenant's own scope (the default).
    pub fn tenant(&self, tenant: &str) -> CacheScope {
        self.derive(b"tenant", tenant)
    }

    /// A scope an admin shares between tenants (one product's tenants and their common
    /// system prompt).
    pub fn shared(&self, group: &str) -> CacheScope {
        self.derive(b"group", group)
    }

    fn derive(&self, kind: &[u8], name: &str) -> CacheScope {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(kind);
        h.update([0]);
        h.update(name.as_bytes());
        CacheScope(first_u64(&h.finalize()))
    }
}

/// The first eight bytes of a digest as a number.
pub(crate) fn first_u64(digest: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_and_a_group_of_the_same_name_get_different_scopes() {
        let s = ScopeSecret::from_bytes([7; 32]);
        assert_ne!(s.tenant("acme"), s.shared("acme"));
        assert_ne!(s.tenant("acme"), s.tenant("acme2"));
        assert_eq!(s.tenant("acme"), s.tenant("acme"));
    }

    #[test]
    fn another_secret_gives_other_scopes() {
        let (a, b) = (
            ScopeSecret::from_bytes([1; 32]),
            ScopeSecret::from_bytes([2; 32]),
        );
        assert_ne!(a.tenant("acme"), b.tenant("acme"));
    }
}
