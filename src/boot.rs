//! Boot replay: rebuilding every instance's state from the claims topic.
//!
//! An instance keeps no state of its own between runs. At every boot it reads
//! the claims topic and rebuilds a [`View`]: who holds which order, who
//! committed, who completed, how far orders have been claimed. The same `View`
//! then stays up to date as the instance keeps reading while it negotiates
//! and runs.
//!
//! ## The log is a table
//!
//! The claims topic is compacted on `<instance>:<event>`, so the broker may at
//! any time drop a record for which a newer one with the same key exists. The
//! replay is built so that this cannot change what it concludes: the `View`
//! keeps **only the newest record of each key** (with its position), and every
//! question it answers is a function of that table. Replaying the full log and
//! replaying any compaction of it therefore give the same `View`, by
//! construction. Records carry what must survive compaction (the claim
//! frontier rides on every record; a takeover closes the old hold with a
//! `revoked` record under the old holder's key). docs/protocol.md, "The log is
//! a table", says why each fact survives.
//!
//! ## Fences
//!
//! A record can be *void*: written by an incarnation after it was fenced,
//! either by a newer `booted` of the same instance number (a zombie process) or
//! by a `revoked` naming it (a takeover after its lease expired). Void records
//! are kept in the table (they still shadow older records of their key) but
//! count for nothing.
//!
//! This module is pure: records and positions in, answers out.

use crate::record::{Cite, Event, OrderId, Outcome, Record};
use std::collections::BTreeMap;

/// A record and its position (offset) in the claims topic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub pos: u64,
    pub rec: Record,
}

/// What an instance holds: its newest claim, while not closed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub instance: u32,
    pub order: OrderId,
    /// The incarnation that claimed.
    pub incarnation: String,
    pub claim_pos: u64,
    pub attempt: u32,
    pub takeover_of: Vec<Cite>,
    /// Position of the commit, once committed.
    pub committed: Option<u64>,
    /// Newest writer timestamp of the hold's claim, commit or lease.
    pub last_ts: u64,
}

impl Hold {
    pub fn cite(&self) -> Cite {
        Cite { instance: self.instance, incarnation: self.incarnation.clone() }
    }
}

/// How an order was completed, as far as the table still shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub instance: u32,
    pub pos: u64,
    pub attempt: u32,
    pub outcome: Outcome,
}

/// The replayed state of the whole pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct View {
    table: BTreeMap<(u32, Event), Entry>,
    /// Position of the next record to read.
    end: u64,
    /// Foreign records skipped so far.
    pub foreign: u64,
}

impl View {
    pub fn new() -> Self {
        View::default()
    }

    /// Applies the record at `pos` (positions must increase).
    pub fn apply(&mut self, pos: u64, rec: Record) {
        self.end = self.end.max(pos + 1);
        self.table.insert((rec.instance, rec.event), Entry { pos, rec });
    }

    /// Notes that the record at `pos` was foreign and skipped.
    pub fn skip(&mut self, pos: u64) {
        self.end = self.end.max(pos + 1);
        self.foreign += 1;
    }

    /// Position of the next record to read.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The newest record of a key.
    pub fn get(&self, instance: u32, event: Event) -> Option<&Entry> {
        self.table.get(&(instance, event))
    }

    /// Every newest record, in key order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.table.values()
    }

    /// Instance numbers that appear in the table.
    pub fn instances(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.table.keys().map(|(i, _)| *i).collect();
        v.dedup();
        v
    }

    /// The current incarnation of an instance: that of its newest `booted`.
    pub fn incarnation(&self, instance: u32) -> Option<&str> {
        self.get(instance, Event::Booted).map(|e| e.rec.incarnation.as_str())
    }

    /// Whether a record at `pos` counts, or is void because its writer's
    /// incarnation had been fenced before it (protocol.md, "Fences").
    pub fn valid(&self, pos: u64, rec: &Record) -> bool {
        if rec.event == Event::Booted {
            return true;
        }
        !self.fenced_at(rec.writer(), &rec.incarnation, pos)
    }

    /// Whether `incarnation` of `instance` is fenced at position `pos`.
    pub fn fenced_at(&self, instance: u32, incarnation: &str, pos: u64) -> bool {
        if let Some(b) = self.get(instance, Event::Booted) {
            if pos > b.pos && b.rec.incarnation != incarnation {
                return true;
            }
            if let Some(prev) = &b.rec.prev {
                if pos > prev.pos && pos < b.pos && prev.incarnation != incarnation {
                    return true;
                }
            }
        }
        if let Some(r) = self.get(instance, Event::Revoked) {
            if pos > r.pos && r.rec.fences.as_deref() == Some(incarnation) && self.valid(r.pos, &r.rec)
            {
                return true;
            }
        }
        false
    }

    /// Whether `incarnation` of `instance` is fenced by anything in the table.
    pub fn fenced(&self, instance: u32, incarnation: &str) -> bool {
        self.fenced_at(instance, incarnation, u64::MAX)
    }

    /// A valid record of `instance`/`event` about `order`, by `incarnation`,
    /// after position `after`.
    fn about(&self, instance: u32, event: Event, order: OrderId, inc: &str, after: u64) -> Option<&Entry> {
        self.get(instance, event).filter(|e| {
            e.pos > after
                && e.rec.order() == Some(order)
                && e.rec.incarnation == inc
                && self.valid(e.pos, &e.rec)
        })
    }

    /// The first takeover claim by another instance that cites `cite` on
    /// `order` — from that position on, the cited hold's decisions are void.
    fn cited_at(&self, cite: &Cite, order: OrderId) -> Option<u64> {
        self.table
            .iter()
            .filter(|((_, ev), e)| {
                *ev == Event::Claimed
                    && e.rec.order() == Some(order)
                    && e.rec.takeover_of.contains(cite)
                    && self.valid(e.pos, &e.rec)
            })
            .map(|(_, e)| e.pos)
            .min()
    }

    /// What `instance` holds: its newest claim, unless that claim was decided
    /// `yielded`, completed after its commit, or revoked.
    pub fn hold(&self, instance: u32) -> Option<Hold> {
        let c = self.get(instance, Event::Claimed)?;
        if !self.valid(c.pos, &c.rec) {
            return None;
        }
        let order = c.rec.order()?;
        let inc = c.rec.incarnation.as_str();
        let cite = Cite { instance, incarnation: inc.to_string() };
        // A revoked hold is closed: its incarnation is fenced after the claim.
        if let Some(r) = self.get(instance, Event::Revoked) {
            if r.pos > c.pos && r.rec.fences.as_deref() == Some(inc) && self.valid(r.pos, &r.rec) {
                return None;
            }
        }
        let cited = self.cited_at(&cite, order).unwrap_or(u64::MAX);
        // The hold's decision is its first own `committed`/`yielded` after the
        // claim, unless a takeover citing it came first (protocol.md, "Leases").
        let commit = self.about(instance, Event::Committed, order, inc, c.pos);
        let yielded = self.about(instance, Event::Yielded, order, inc, c.pos);
        let decision = match (commit, yielded) {
            (Some(a), Some(b)) => Some(if a.pos < b.pos { a } else { b }),
            (a, b) => a.or(b),
        }
        .filter(|d| d.pos < cited);
        let mut last_ts = c.rec.ts;
        let committed = match decision {
            Some(d) if d.rec.event == Event::Yielded => return None,
            Some(d) => {
                if self.about(instance, Event::Completed, order, inc, d.pos).is_some() {
                    return None;
                }
                last_ts = last_ts.max(d.rec.ts);
                Some(d.pos)
            }
            None => None,
        };
        if let Some(l) = self.about(instance, Event::Lease, order, inc, c.pos) {
            last_ts = last_ts.max(l.rec.ts);
        }
        Some(Hold {
            instance,
            order,
            incarnation: inc.to_string(),
            claim_pos: c.pos,
            attempt: c.rec.attempt,
            takeover_of: c.rec.takeover_of.clone(),
            committed,
            last_ts,
        })
    }

    /// Every hold in the pool, by instance.
    pub fn holds(&self) -> Vec<Hold> {
        self.instances().into_iter().filter_map(|i| self.hold(i)).collect()
    }

    /// The holds of one order.
    pub fn holders(&self, order: OrderId) -> Vec<Hold> {
        self.holds().into_iter().filter(|h| h.order == order).collect()
    }

    /// A valid completion of `order` still in the table, if any.
    pub fn completion(&self, order: OrderId) -> Option<Completion> {
        self.table
            .iter()
            .filter(|((_, ev), e)| {
                *ev == Event::Completed && e.rec.order() == Some(order) && self.valid(e.pos, &e.rec)
            })
            .map(|((i, _), e)| Completion {
                instance: *i,
                pos: e.pos,
                attempt: e.rec.attempt,
                outcome: e.rec.outcome.clone().unwrap_or_else(|| {
                    Outcome::not_run(crate::record::Status::Error, "missing outcome")
                }),
            })
            .next()
    }

    /// The claim frontier: per orders partition, the lowest offset that no
    /// valid claim has reached. Every record carries its writer's frontier,
    /// so the maximum survives compaction (protocol.md, "The frontier").
    pub fn frontier(&self) -> BTreeMap<i32, i64> {
        let mut f: BTreeMap<i32, i64> = BTreeMap::new();
        let mut raise = |p: i32, o: i64| {
            let e = f.entry(p).or_insert(0);
            *e = (*e).max(o);
        };
        for e in self.table.values() {
            if !self.valid(e.pos, &e.rec) {
                continue;
            }
            for (&p, &o) in &e.rec.next {
                raise(p, o);
            }
            if e.rec.event == Event::Claimed {
                if let Some(o) = e.rec.order() {
                    raise(o.partition, o.offset + 1);
                }
            }
        }
        f
    }

    /// The frontier of one partition.
    pub fn next_offset(&self, partition: i32) -> i64 {
        self.frontier().get(&partition).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Prev, Status};

    fn rec(i: u32, ev: Event, inc: &str, o: i64) -> Record {
        let r = Record::new(i, ev, inc, 0);
        if ev.needs_order() {
            let mut r = r.with_order(OrderId::new(0, o));
            if ev == Event::Completed {
                r.outcome = Some(Outcome::not_run(Status::Ok, "x"));
            }
            r
        } else {
            r
        }
    }

    fn view(log: &[Record]) -> View {
        let mut v = View::new();
        for (p, r) in log.iter().enumerate() {
            v.apply(p as u64, r.clone());
        }
        v
    }

    #[test]
    fn claim_commit_complete_closes_the_hold() {
        let mut log = vec![rec(1, Event::Booted, "a", 0), rec(1, Event::Claimed, "a", 0)];
        let v = view(&log);
        assert_eq!(v.hold(1).unwrap().committed, None);
        assert_eq!(v.next_offset(0), 1);
        log.push(rec(1, Event::Committed, "a", 0));
        assert_eq!(view(&log).hold(1).unwrap().committed, Some(2));
        log.push(rec(1, Event::Completed, "a", 0));
        let v = view(&log);
        assert!(v.hold(1).is_none());
        assert_eq!(v.completion(OrderId::new(0, 0)).unwrap().instance, 1);
    }

    #[test]
    fn zombie_records_after_a_newer_boot_are_void() {
        let mut b2 = rec(1, Event::Booted, "new", 0);
        b2.prev = Some(Prev { incarnation: "old".into(), pos: 0 });
        let log = vec![rec(1, Event::Booted, "old", 0), b2, rec(1, Event::Claimed, "old", 5)];
        let v = view(&log);
        assert!(v.hold(1).is_none(), "a claim by the fenced incarnation counts for nothing");
        assert_eq!(v.next_offset(0), 0);
    }

    #[test]
    fn the_first_decision_wins() {
        let log = vec![
            rec(2, Event::Claimed, "a", 0),
            rec(2, Event::Yielded, "a", 0),
            rec(2, Event::Committed, "a", 0),
        ];
        assert!(view(&log).hold(2).is_none());
    }

    #[test]
    fn revoked_closes_and_fences() {
        let mut rv = rec(2, Event::Revoked, "x", 0);
        rv.by = Some(3);
        rv.fences = Some("a".into());
        let log = vec![
            rec(2, Event::Claimed, "a", 0),
            rec(2, Event::Committed, "a", 0),
            rv,
            rec(2, Event::Lease, "a", 0),
        ];
        let v = view(&log);
        assert!(v.hold(2).is_none());
        assert!(v.fenced(2, "a"));
        assert!(!v.valid(3, &log[3]));
    }

    #[test]
    fn frontier_survives_a_superseded_claim() {
        let mut c2 = rec(1, Event::Claimed, "a", 0);
        c2.next.insert(0, 8); // a takeover of order 0 by one who knew 0..8 were claimed
        let log = vec![rec(1, Event::Claimed, "a", 7), c2];
        assert_eq!(view(&log).next_offset(0), 8);
    }
}
