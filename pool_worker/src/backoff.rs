//! Exponential back-off between retries: one type for every retry loop of
//! the shells (Kafka requests and appends, `serve`'s reader, `supervise`'s
//! restarts).

use std::time::Duration;

/// Appends to the claims topic and results: 50 ms doubling to 2 s (an
/// instance's own records, which the protocol waits on).
pub(crate) const APPEND: Backoff =
    Backoff::fixed(Duration::from_millis(50), Duration::from_secs(2));

/// Metadata and watermark requests (the orders topic's partitions and
/// ends): 100 ms doubling to 5 s.
pub(crate) const REQUEST: Backoff =
    Backoff::fixed(Duration::from_millis(100), Duration::from_secs(5));

/// A delay that starts at `first` and doubles at each retry, up to `max`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// `first`, then twice that at each retry, never more than `max` (nor
    /// less than `first`).
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max: max.max(first),
            next: first,
        }
    }

    /// [`Backoff::new`] for constants, with `first <= max` already true.
    const fn fixed(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The delay the next retry waits (for a log line before it).
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// The delay to wait before this retry; the one after is doubled.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let now = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        now
    }

    /// Back to `first` (a success, or a long healthy run, ended the row of
    /// failures).
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }

    /// Sleeps for [`Backoff::next_delay`] (in a task).
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Sleeps for [`Backoff::next_delay`] (on a thread of its own).
    pub(crate) fn wait_blocking(&mut self) {
        std::thread::sleep(self.next_delay());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_its_cap_and_starts_again_on_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1000));
        assert_eq!(b.peek(), ms(100));
        let row: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        assert_eq!(
            row,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
        let mut b = Backoff::new(ms(100), ms(10));
        assert_eq!(
            (b.next_delay(), b.next_delay()),
            (ms(100), ms(100)),
            "a cap below the start"
        );
        let mut b = Backoff::new(Duration::from_secs(1), Duration::MAX);
        assert_eq!(
            (0..200).map(|_| b.next_delay()).last(),
            Some(Duration::MAX),
            "no overflow"
        );
        for c in [APPEND, REQUEST] {
            assert!(c.first <= c.max && c == Backoff::new(c.first, c.max));
        }
    }
}
