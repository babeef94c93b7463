//! Anticipation: a tenant whose only request just ended often sends its next one at once (a
//! client calling in a loop, a chat's next message typed ahead, an agent's next step). That
//! request lands a millisecond or two after its previous answer left, which is just after the
//! engine started its next step: it then waits a whole step, not half of one on average.
//! Measured beside a 32-request flood on 2 cores: such a tenant's requests reached the engine
//! 20–30 ms after submission with 21 ms steps, every time.
//!
//! So after such an ending the engine may hold its next step for a few milliseconds
//! ([`WINDOW`]) while other work waits, and start as soon as the tenant's request arrives —
//! "deceptive idleness", as anticipatory disk scheduling (Iyer and Druschel, 2001) named it.
//! The idle time is budgeted: at most [`IDLE_SHARE`] of the engine's time, so a server with
//! many one-request tenants that do not come back loses at most that.
//!
//! Pure: the caller passes the time.

use std::time::{Duration, Instant};

/// How long the engine may hold a step for an anticipated request.
pub const WINDOW: Duration = Duration::from_millis(4);

/// The most of the engine's time anticipation may leave idle.
pub const IDLE_SHARE: f64 = 0.02;

/// The idle credit saved up at most (a few windows).
const MAX_CREDIT: Duration = Duration::from_millis(20);

/// Who is expected back, and the idle time the engine may still spend waiting for them.
#[derive(Debug)]
pub struct Anticipation {
    /// Tenants expected, each with when its window closes.
    expected: Vec<(String, Instant)>,
    credit: Duration,
    refilled: Option<Instant>,
}

impl Default for Anticipation {
    fn default() -> Self {
        Self {
            expected: Vec::new(),
            credit: MAX_CREDIT,
            refilled: None,
        }
    }
}

impl Anticipation {
    /// `tenant`'s request ended at `now` and it has nothing else in the engine: expect it
    /// back within the window.
    pub fn ended(&mut self, tenant: &str, now: Instant) {
        self.expected.retain(|(t, _)| t != tenant);
        self.expected.push((tenant.to_string(), now + WINDOW));
    }

    /// A request of `tenant` arrived; true when it was expected (its wait is over).
    pub fn arrived(&mut self, tenant: &str) -> bool {
        let before = self.expected.len();
        self.expected.retain(|(t, _)| t != tenant);
        self.expected.len() < before
    }

    /// How long to hold the next step at `now` (None: start it): until the last expected
    /// tenant's window closes, within the idle credit.
    pub fn hold(&mut self, now: Instant) -> Option<Duration> {
        self.refill(now);
        self.expected.retain(|&(_, until)| until > now);
        let until = self.expected.iter().map(|&(_, until)| until).max()?;
        let hold = (until - now).min(self.credit);
        if hold.is_zero() {
            self.expected.clear();
            return None;
        }
        Some(hold)
    }

    /// The engine held a step for `d`: charged to the credit.
    pub fn held(&mut self, d: Duration) {
        self.credit = self.credit.saturating_sub(d);
    }

    /// Nothing to hold for (the engine went idle: an arrival starts it anyway).
    pub fn forget(&mut self) {
        self.expected.clear();
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.refilled {
            let earned = now.saturating_duration_since(last).mul_f64(IDLE_SHARE);
            self.credit = (self.credit + earned).min(MAX_CREDIT);
        }
        self.refilled = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_step_is_held_until_the_tenant_comes_back_or_its_window_closes() {
        let t0 = Instant::now();
        let mut a = Anticipation::default();
        assert_eq!(a.hold(t0), None, "nobody expected");
        a.ended("b", t0);
        assert_eq!(a.hold(t0 + MS), Some(WINDOW - MS));
        assert!(!a.arrived("a"), "another tenant does not end the wait");
        assert_eq!(a.hold(t0 + MS), Some(WINDOW - MS));
        assert!(a.arrived("b"));
        assert_eq!(a.hold(t0 + MS), None);
        a.ended("b", t0 + 10 * MS);
        assert_eq!(a.hold(t0 + 10 * MS + WINDOW), None, "the window closed");
    }

    #[test]
    fn holding_never_takes_more_than_its_share_of_the_engine() {
        let t0 = Instant::now();
        let mut a = Anticipation::default();
        let mut held = Duration::ZERO;
        // A tenant that ends a request every 5 ms and never comes back.
        for i in 0..2000u32 {
            let now = t0 + 5 * MS * i;
            a.ended("gone", now);
            if let Some(d) = a.hold(now) {
                a.held(d);
                held += d;
            }
        }
        let elapsed = 5 * MS * 2000;
        let share = held.as_secs_f64() / elapsed.as_secs_f64();
        assert!(
            share <= IDLE_SHARE + MAX_CREDIT.as_secs_f64() / elapsed.as_secs_f64(),
            "held {held:?} of {elapsed:?}"
        );
        assert!(share > IDLE_SHARE / 2.0, "the credit is spent, not lost");
    }
}
