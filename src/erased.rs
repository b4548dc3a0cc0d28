//! What compaction erased from the claims topic, as a reader sees it.
//!
//! Positions never change (docs/protocol.md, "Terms"), but a missing
//! position is no proof of an erased record: a transaction's commit marker
//! (and an aborted record) also takes a position that a `read_committed`
//! reader never sees. What proves one is the writers' numbering: every
//! pool record carries its writer incarnation's `seq` (1, 2, ...; R7). When
//! the broker's cleaner erases a record that has a newer one of its key
//! (R42), and a later record of the same incarnation survives, the seqs
//! between the two surviving records are missing. [`Erased`] notes the
//! position, writer, incarnation and seq of every pool record read and
//! counts the missing seqs, so that a tool that counts history (`status`,
//! `history`, `audit`, `serve`) can say what it cannot know instead of a
//! count that looks exact.
//!
//! The count is a lower bound: the trailing records of an incarnation whose
//! every later record was erased leave no trace (say "at least"). (One seq
//! goes missing without compaction: a checkpoint that the broker refuses as
//! too large is not written, `Kafka::append`, and is counted here as an
//! erased record.) A record appended again after a failure or an aborted
//! transaction keeps its seq (R6): a duplicate, nothing missing. An erased
//! record lay strictly between the positions of its surviving neighbours of
//! the same incarnation, at a position that holds no record: [`Erased`]
//! keeps those positions (the missing positions within each missing seq
//! range's span), so that `audit` can ask whether an erased record can lie
//! between two positions ([`Erased::first_between`]) — yes only where a
//! missing seq range says so, not for every gap between offsets.

use crate::record::{Incarnation, InstanceNo, Record};
use serde::Serialize;
use std::collections::BTreeMap;

/// The most ranges kept of each kind: with a commit marker after every
/// record, nearly every other position is missing, and `serve` reads the
/// topic for as long as it runs. Beyond this, the older half is kept as one
/// range (coarser: more positions where an erased record "can lie", far
/// back; the count is unchanged).
const MAX_RANGES: usize = 1 << 16;

/// The records a log read in order is known to miss.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Erased {
    /// The pool records known erased: seqs missing below a surviving
    /// record of the same incarnation. A lower bound ("at least").
    pub records: u64,
    /// The lowest position where an erased record can lie.
    pub first: Option<u64>,
    /// One past the highest position where an erased record can lie: from
    /// here on, no erased record is known.
    pub before: Option<u64>,
    /// Where erased records can lie: missing positions within the spans of
    /// missing seq ranges, as ranges `[start, end)`, disjoint and in order.
    #[serde(skip)]
    ranges: Vec<(u64, u64)>,
    /// The positions that hold no record (commit markers, aborted records,
    /// erased records), as ranges `[start, end)`, in order.
    #[serde(skip)]
    gaps: Vec<(u64, u64)>,
    /// The position expected next.
    #[serde(skip)]
    next: u64,
    /// Per writer incarnation: its highest seq read and that record's
    /// position.
    #[serde(skip)]
    last: BTreeMap<(InstanceNo, Incarnation), (u64, u64)>,
}

impl Erased {
    pub fn new() -> Erased {
        Erased::default()
    }

    /// The record at `pos` was read: a pool record (`Some`, counted by its
    /// writer incarnation's seq) or a foreign one (`None`, which carries
    /// none). Positions come in increasing order.
    pub fn note(&mut self, pos: u64, rec: Option<&Record>) {
        if pos > self.next {
            self.gaps.push((self.next, pos));
            coarsen(&mut self.gaps, MAX_RANGES);
        }
        self.next = self.next.max(pos + 1);
        let Some(rec) = rec.filter(|r| r.seq > 0) else {
            return;
        };
        let key = (rec.writer(), rec.incarnation.clone());
        let (seq, from) = match self.last.get(&key) {
            // A duplicate (a producer retry, R6/R7) says nothing new.
            Some(&(last, _)) if rec.seq <= last => return,
            Some(&(last, at)) => (last, at + 1),
            // The incarnation's first record read: its seqs below it are
            // missing too, somewhere before it.
            None => (0, 0),
        };
        self.last.insert(key, (rec.seq, pos));
        if rec.seq > seq + 1 {
            self.missing(rec.seq - seq - 1, from, pos);
        }
    }

    /// `n` records of one incarnation are missing between positions
    /// `from` and `to` (`[from, to)`): they lay at positions there that
    /// hold no record.
    fn missing(&mut self, n: u64, from: u64, to: u64) {
        let i = self.gaps.partition_point(|&(_, end)| end <= from);
        let pieces: Vec<(u64, u64)> = self.gaps[i..]
            .iter()
            .map(|&(s, e)| (s.max(from), e.min(to)))
            .filter(|&(s, e)| s < e)
            .collect();
        if pieces.is_empty() {
            // No position for them: not erased records (a writer that
            // skipped a seq), nothing a reader can count.
            return;
        }
        self.records += n;
        for piece in pieces {
            self.insert(piece);
        }
        coarsen(&mut self.ranges, MAX_RANGES);
        self.first = self.ranges.first().map(|r| r.0);
        self.before = self.ranges.last().map(|r| r.1);
    }

    /// Adds `[s, e)` to the disjoint ranges.
    fn insert(&mut self, (mut s, mut e): (u64, u64)) {
        let lo = self.ranges.partition_point(|&(_, end)| end < s);
        let hi = self.ranges.partition_point(|&(start, _)| start <= e);
        if lo < hi {
            s = s.min(self.ranges[lo].0);
            e = e.max(self.ranges[hi - 1].1);
        }
        self.ranges.splice(lo..hi, [(s, e)]);
    }

    /// Whether any record is known erased.
    pub fn any(&self) -> bool {
        self.records > 0
    }

    /// The lowest position strictly between `a` and `b` where an erased
    /// record can lie, if any.
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

    /// Whether an erased record can lie strictly between `a` and `b`.
    pub fn between(&self, a: u64, b: u64) -> bool {
        self.first_between(a, b).is_some()
    }

    /// One plain sentence about what is missing, or `None` when no record
    /// is known erased.
    pub fn sentence(&self) -> Option<String> {
        let (first, before) = (self.first?, self.before?);
        Some(format!(
            "compaction erased at least {} {} of the claims topic (positions {first} to {}): \
             counts of what happened are of the records that survive, lower bounds",
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

/// Keeps at most `max` of the disjoint, ordered `ranges`: beyond that, the
/// older half becomes one range that spans them.
fn coarsen(ranges: &mut Vec<(u64, u64)>, max: usize) {
    if ranges.len() > max {
        let half = ranges.len() / 2;
        let span = (ranges[0].0, ranges[half - 1].1);
        ranges.splice(0..half, [span]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Event;

    /// A record of instance `i` by incarnation `inc`, numbered `seq`.
    fn r(i: u32, inc: &str, seq: u64) -> Record {
        let mut r = Record::of(i, Event::Lease, inc, 0);
        r.seq = seq;
        r
    }

    fn read(log: &[(u64, Option<Record>)]) -> Erased {
        let mut e = Erased::new();
        for (p, rec) in log {
            e.note(*p, rec.as_ref());
        }
        e
    }

    /// Records in transactions of their own: a commit marker after each, so
    /// every other position is missing, and nothing is erased.
    #[test]
    fn commit_markers_are_not_erased_records() {
        let e = read(&[
            (0, Some(r(1, "a", 1))),
            (2, Some(r(1, "a", 2))),
            (4, Some(r(2, "b", 1))),
            (6, Some(r(1, "a", 3))),
            (8, None),
            (10, Some(r(2, "b", 2))),
        ]);
        assert!(!e.any() && e.sentence().is_none(), "{e:?}");
        assert_eq!((e.records, e.first, e.before), (0, None, None));
        assert!(!e.between(0, 10) && e.first_between(0, 100).is_none());
    }

    /// Seqs missing between two surviving records of an incarnation are
    /// erased records, at the missing positions between those two.
    #[test]
    fn missing_seqs_are_counted_and_found() {
        let e = read(&[
            (0, Some(r(1, "a", 1))),
            (2, Some(r(2, "b", 1))),
            // a's 2 and 3 erased (positions 3..8 hold them and markers).
            (8, Some(r(1, "a", 4))),
            (10, Some(r(2, "b", 2))),
            // A duplicate of a's 4 (a producer retry): nothing missing.
            (12, Some(r(1, "a", 4))),
            // b's 3 erased: at 11 or 13 (the other a marker).
            (14, Some(r(2, "b", 4))),
            (16, None),
            (18, Some(r(1, "a", 5))),
        ]);
        assert_eq!((e.records, e.first, e.before), (3, Some(1), Some(14)));
        // a's 2 and 3 lie at 1 or 3..8 (b's record at 2 is no place for them).
        assert_eq!(e.first_between(0, 20), Some(1));
        assert_eq!(e.first_between(1, 20), Some(3));
        assert!(e.between(8, 14) && e.between(12, 14));
        assert_eq!(e.first_between(8, 20), Some(11));
        // After b's 4 (at 14), nothing is known erased: markers only.
        assert!(!e.between(13, 20) && !e.between(14, 18));
        assert!(!e.between(0, 1) && !e.between(7, 8));
        let s = e.sentence().unwrap();
        assert!(
            s.contains("erased at least 3 records") && s.contains("positions 1 to 13"),
            "{s}"
        );
        // Foreign records count for nothing; an incarnation first read at
        // seq 3 misses its 1 and 2, before it (a log that starts late).
        let late = read(&[(0, None), (4, Some(r(1, "a", 3)))]);
        assert_eq!(
            (late.records, late.first, late.before),
            (2, Some(1), Some(4))
        );
        // Seqs missing with no position for them are no erased records.
        let tight = read(&[(0, Some(r(1, "a", 1))), (1, Some(r(1, "a", 3)))]);
        assert!(!tight.any(), "{tight:?}");
        // The same incarnation name on two instances: two numberings.
        let two = read(&[(0, Some(r(1, "x", 1))), (2, Some(r(2, "x", 1)))]);
        assert!(!two.any(), "{two:?}");
    }

    /// Ranges beyond the most kept: the older half becomes one.
    #[test]
    fn many_ranges_are_kept_coarser() {
        let mut v: Vec<(u64, u64)> = (0..5).map(|i| (2 * i + 1, 2 * i + 2)).collect();
        coarsen(&mut v, 5);
        assert_eq!(v.len(), 5);
        v.push((11, 12));
        coarsen(&mut v, 5);
        assert_eq!(v, vec![(1, 6), (7, 8), (9, 10), (11, 12)]);
        // A long log with a marker after every record keeps few ranges.
        let mut e = Erased::new();
        for s in 1..=(3 * MAX_RANGES as u64) {
            e.note(2 * s, Some(&r(1, "a", s)));
        }
        assert!(e.gaps.len() <= MAX_RANGES && !e.any(), "{}", e.gaps.len());
    }
}
