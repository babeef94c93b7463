//! Where a history record lives: route, strategy, k and time bucket, and its byte encoding
//! (a tenant's records are one prefix scan in an ordered store).

use specgate_policies::WorkloadClass;
use specgate_strategies::StrategyKind;

/// Bucket granularity in the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Granularity {
    Minute,
    Hour,
}

/// Where a record lives: route, strategy, k and bucket start (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HistoryKey {
    pub tenant: String,
    pub class: WorkloadClass,
    pub strategy: StrategyKind,
    pub k: u8,
    pub granularity: Granularity,
    pub start: u64,
}

impl HistoryKey {
    /// The minute bucket holding `at` (unix seconds).
    pub fn minute(
        tenant: &str,
        class: WorkloadClass,
        strategy: StrategyKind,
        k: usize,
        at: u64,
    ) -> Self {
        Self {
            tenant: tenant.to_string(),
            class,
            strategy,
            k: k.min(255) as u8,
            granularity: Granularity::Minute,
            start: at - at % 60,
        }
    }

    /// The plan its requests ran, "strategy:k", as the analytics' strategy mix names it.
    pub fn plan_label(&self) -> String {
        format!("{}:{}", self.strategy, self.k)
    }

    /// `tenant ␀ class ␀ strategy ␀ k g start`: a tenant's records are one prefix scan.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = tenant_prefix(&self.tenant);
        for part in [self.class.name(), self.strategy.name()] {
            out.extend_from_slice(part.as_bytes());
            out.push(0);
        }
        out.push(self.k);
        out.push(match self.granularity {
            Granularity::Minute => b'm',
            Granularity::Hour => b'h',
        });
        out.extend_from_slice(&self.start.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut parts = bytes.splitn(4, |&b| b == 0);
        let tenant = std::str::from_utf8(parts.next()?).ok()?.to_string();
        let class = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
        let strategy = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
        let rest = parts.next()?;
        let (&k, rest) = rest.split_first()?;
        let (&g, rest) = rest.split_first()?;
        let granularity = match g {
            b'm' => Granularity::Minute,
            b'h' => Granularity::Hour,
            _ => return None,
        };
        let start = u64::from_be_bytes(rest.try_into().ok()?);
        Some(Self {
            tenant,
            class,
            strategy,
            k,
            granularity,
            start,
        })
    }
}

/// The key prefix of every record of a tenant.
pub fn tenant_prefix(tenant: &str) -> Vec<u8> {
    let mut out = tenant.as_bytes().to_vec();
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort_by_tenant() {
        let k = HistoryKey::minute(
            "acme",
            WorkloadClass::Rag,
            StrategyKind::EarlyExit,
            4,
            3_725,
        );
        assert_eq!(k.start, 3_720);
        assert_eq!(HistoryKey::decode(&k.encode()), Some(k.clone()));
        assert!(k.encode().starts_with(&tenant_prefix("acme")));
        assert!(!k.encode().starts_with(&tenant_prefix("acm")));
        assert_eq!(HistoryKey::decode(b"garbage"), None);
    }
}
