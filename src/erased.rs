//! What compaction erased from the claims topic, as a reader sees it.
//!
//! Positions never change (docs/protocol.md, "Terms"): when the broker's
//! cleaner erases a record that has a newer one of its key (R42), its
//! position is simply missing when the log is read. [`Erased`] notes the
//! positions read and keeps the missing ones, so that a tool that counts
//! history (`status`, `history`, `audit`, `serve`) can say what it cannot
//! know instead of a count that looks exact.
//!
//! A missing position is taken for an erased record: the pool writes no
//! transactions, whose commit markers would also take positions that
//! readers never see.

use serde::Serialize;

/// The missing positions of a log read in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Erased {
    /// Positions below the newest record read that hold no record.
    pub records: u64,
    /// The lowest missing position.
    pub first: Option<u64>,
    /// One past the highest missing position: from here on, the log as read
    /// is whole.
    pub before: Option<u64>,
    /// The missing ranges `[start, end)`, in order.
    #[serde(skip)]
    ranges: Vec<(u64, u64)>,
    /// The position expected next.
    #[serde(skip)]
    next: u64,
}

impl Erased {
    pub fn new() -> Erased {
        Erased::default()
    }

    /// A record (pool record or foreign) was read at `pos`; positions come in
    /// increasing order.
    pub fn note(&mut self, pos: u64) {
        if pos > self.next {
            self.records += pos - self.next;
            self.first.get_or_insert(self.next);
            self.before = Some(pos);
            self.ranges.push((self.next, pos));
        }
        self.next = self.next.max(pos + 1);
    }

    /// Whether any position was missing.
    pub fn any(&self) -> bool {
        self.records > 0
    }

    /// The lowest missing position strictly between `a` and `b`, if any.
    pub fn first_between(&self, a: u64, b: u64) -> Option<u64> {
        let lo = a.saturating_add(1);
        if lo >= b {
            return None;
        }
        // The first range that ends above `lo`.
        let i = self.ranges.partition_point(|&(_, end)| end <= lo);
        self.ranges
            .get(i)
            .map(|&(start, _)| start.max(lo))
            .filter(|&p| p < b)
    }

    /// Whether a position strictly between `a` and `b` is missing.
    pub fn between(&self, a: u64, b: u64) -> bool {
        self.first_between(a, b).is_some()
    }

    /// One plain sentence about what is missing, or `None` for a whole log.
    pub fn sentence(&self) -> Option<String> {
        let (first, before) = (self.first?, self.before?);
        Some(format!(
            "compaction erased {} {} of the claims topic (positions {first} to {}): \
             counts of what happened before position {before} are of the records that survive, \
             lower bounds",
            self.records,
            if self.records == 1 {
                "record"
            } else {
                "records"
            },
            before - 1
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_positions_are_counted_and_found() {
        let mut e = Erased::new();
        for p in [0, 1, 2, 3] {
            e.note(p);
        }
        assert!(!e.any() && e.sentence().is_none() && e.first.is_none());
        // 4..7 and 9 erased; 12 and 13 read.
        for p in [7, 8, 10, 11] {
            e.note(p);
        }
        assert_eq!((e.records, e.first, e.before), (4, Some(4), Some(10)));
        assert!(e.between(3, 5) && e.between(0, 100) && e.between(8, 10));
        assert!(!e.between(6, 7) && !e.between(7, 9) && !e.between(10, 100));
        assert_eq!(e.first_between(5, 20), Some(6));
        assert_eq!(e.first_between(8, 20), Some(9));
        assert_eq!(e.first_between(9, 20), None);
        let s = e.sentence().unwrap();
        assert!(
            s.contains("erased 4 records") && s.contains("positions 4 to 9"),
            "{s}"
        );
        // A log that starts late: its first positions are missing too.
        let mut late = Erased::new();
        late.note(5);
        assert_eq!(
            (late.records, late.first, late.before),
            (5, Some(0), Some(5))
        );
    }
}
