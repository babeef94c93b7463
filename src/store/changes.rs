//! Change notifications between replicas: a write that other replicas may hold a cached copy
//! of is announced, and every replica drops that copy at once. The messages are plain data;
//! a [`Notifier`] carries them (Redis pub/sub in a shared deployment, nothing on one replica).

use serde::{Deserialize, Serialize};

/// What changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A key was revoked.
    Key { id: String },
    /// A tenant's limits were edited.
    Tenant { name: String },
    /// A route's policy was written or removed.
    Policy { tenant: String, class: String },
    /// Anything may have changed (notifications were missed): drop every cached copy.
    All,
}

impl Change {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| r#"{"kind":"all"}"#.to_string())
    }

    /// A message from another replica; one this build cannot read drops everything (safe).
    pub fn decode(message: &str) -> Change {
        serde_json::from_str(message).unwrap_or(Change::All)
    }
}

/// What a replica's caches do with a change.
pub type OnChange = Box<dyn Fn(&Change) + Send + Sync>;

/// Carries changes to every replica (this one included).
pub trait Notifier: Send + Sync {
    /// Announce a change; a failure is logged, and the caches' short time-to-live covers it.
    fn publish(&self, change: &Change);
    /// Call `on_change` for every change announced from now on, by any replica.
    fn subscribe(&self, on_change: OnChange);
}

/// One replica alone: nobody else to tell.
pub struct Alone;

impl Notifier for Alone {
    fn publish(&self, _: &Change) {}
    fn subscribe(&self, _: OnChange) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_round_trip_and_unknown_messages_drop_everything() {
        for c in [
            Change::Key { id: "ab12".into() },
            Change::Tenant {
                name: "acme".into(),
            },
            Change::Policy {
                tenant: "*".into(),
                class: "rag".into(),
            },
            Change::All,
        ] {
            assert_eq!(Change::decode(&c.encode()), c);
        }
        assert_eq!(Change::decode(r#"{"kind":"future"}"#), Change::All);
        assert_eq!(Change::decode("garbage"), Change::All);
    }
}
