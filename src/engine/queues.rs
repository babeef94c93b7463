//! How many requests wait for the engine, in all and per tenant: the handle refuses a
//! submission when its tenant's own queue is full, so one tenant's burst cannot turn every
//! other tenant away.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::SubmitError;

#[derive(Debug, Default)]
pub struct QueueCounts {
    per_tenant: Mutex<HashMap<String, usize>>,
}

impl QueueCounts {
    /// Count a request into `tenant`'s queue, or refuse it: its tenant has `per_tenant`
    /// waiting already, or the server has `total_cap` waiting and this tenant has some of
    /// them (a tenant with nothing waiting is never turned away by the others' queues).
    pub fn enter(
        &self,
        tenant: &str,
        per_tenant: usize,
        total_cap: usize,
        total: &AtomicUsize,
    ) -> Result<(), SubmitError> {
        let mut counts = self.per_tenant.lock().unwrap_or_else(|p| p.into_inner());
        let mine = counts.get(tenant).copied().unwrap_or(0);
        if mine >= per_tenant.max(1) {
            return Err(SubmitError::TenantQueueFull { limit: per_tenant });
        }
        let queued = total.load(Ordering::SeqCst);
        if queued >= total_cap && mine > 0 {
            return Err(SubmitError::QueueFull { queued });
        }
        *counts.entry(tenant.to_string()).or_insert(0) += 1;
        total.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// A request left `tenant`'s queue (started, cancelled or failed).
    pub fn leave(&self, tenant: &str, total: &AtomicUsize) {
        let mut counts = self.per_tenant.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(tenant);
            }
            total.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Requests waiting for `tenant`.
    pub fn of(&self, tenant: &str) -> usize {
        let counts = self.per_tenant.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(tenant).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_tenant_queue_refuses_only_that_tenant() {
        let (q, total) = (QueueCounts::default(), AtomicUsize::new(0));
        for _ in 0..3 {
            q.enter("a", 3, 4, &total).expect("within a's queue");
        }
        assert_eq!(
            q.enter("a", 3, 4, &total),
            Err(SubmitError::TenantQueueFull { limit: 3 })
        );
        q.enter("b", 3, 4, &total).expect("b has its own queue");
        // The server's cap is reached: b, which has one waiting, is refused; c is not.
        assert!(matches!(
            q.enter("b", 3, 4, &total),
            Err(SubmitError::QueueFull { .. })
        ));
        q.enter("c", 3, 4, &total)
            .expect("a tenant with nothing waiting");
        assert_eq!(total.load(Ordering::SeqCst), 5);
        q.leave("a", &total);
        assert_eq!((q.of("a"), total.load(Ordering::SeqCst)), (2, 4));
        // Leaving a queue that holds nothing changes nothing.
        q.leave("zz", &total);
        assert_eq!(total.load(Ordering::SeqCst), 4);
    }
}
