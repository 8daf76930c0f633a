//! The wait before trying again: doubling from a first wait up to a cap.
//! One type for every retry the host makes itself — reads, instance
//! restarts, retried batches — so each only states its own bounds.

use std::time::Duration;

/// A doubling wait, from `first` up to `cap`.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    /// Waits `first`, then twice as long each time, up to `cap`.
    pub const fn new(first: Duration, cap: Duration) -> Self {
        Self { first, cap, next: first }
    }

    /// The wait before the next try; the one after is twice as long, up to the cap.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.cap);
        wait
    }

    /// A try went well: the next failure waits `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_its_cap_and_starts_over_after_a_reset() {
        let (first, cap) = (Duration::from_millis(100), Duration::from_millis(500));
        let mut backoff = Backoff::new(first, cap);
        let waits: Vec<Duration> = (0..5).map(|_| backoff.next_wait()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500].map(Duration::from_millis));
        backoff.reset();
        assert_eq!(backoff.next_wait(), first);
    }
}
