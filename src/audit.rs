//! `pool_worker audit`: the claims topic checked against the protocol's
//! invariants, from its first record to its last.
//!
//! The log is folded through the same [`View`] the workers build (nothing
//! is interpreted a second time: which records are valid, void or foreign,
//! whose hold is whose, is the View's answer), and after each record the
//! auditor checks what the model check checks of every state
//! (docs/protocol.md I1–I5):
//!
//! 1. no order is run by two instances: a second instance commits to an
//!    order only after the first one's hold was revoked (its run may be
//!    repeated, as a retry) — never beside a live one;
//! 2. an order is completed at most once (valid completions);
//! 3. every valid completion follows its writer's commit of the order;
//! 4. no order below the frontier was left unclaimed (judged only on a log
//!    that starts at position 0 and has no gaps: compaction erases old
//!    claims);
//! 5. no run of an order is past `MAX_ATTEMPTS` (a committed attempt number
//!    above it; the order should have been completed as `gave_up`);
//! 6. no job of an order started once a cancel preceded its first commit
//!    (`pool_worker cancel`): such an order is completed `cancelled`, and
//!    any other completion of it means its job ran.
//!
//! Pure: records in, a [`Report`] out; `pool_worker audit`
//! (`src/cli/audit.rs`) is the shell.

use crate::boot::View;
use crate::record::{Event, OrderId, Position, Record};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Which invariant a record broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    CommittedByTwo,
    CompletedTwice,
    CompletedWithoutCommit,
    UnclaimedBehindFrontier,
    TooManyAttempts,
    RanAfterCancel,
}

impl Rule {
    pub fn describe(self) -> &'static str {
        match self {
            Rule::CommittedByTwo => {
                "an order committed by a second instance while the first still held it"
            }
            Rule::CompletedTwice => "an order completed more than once",
            Rule::CompletedWithoutCommit => "a completion without its writer's commit",
            Rule::UnclaimedBehindFrontier => "an order below the frontier that nobody claimed",
            Rule::TooManyAttempts => "a run past MAX_ATTEMPTS",
            Rule::RanAfterCancel => "an order run although a cancel preceded its commit",
        }
    }
}

/// One broken invariant: where, which order, and what happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: Rule,
    /// The position of the offending record (for unclaimed orders: none).
    pub pos: Option<u64>,
    pub order: Option<String>,
    pub detail: String,
}

/// What is known of one order while auditing.
#[derive(Default)]
struct Trail {
    /// The instance whose commit is the order's live run.
    runner: Option<u32>,
    completions: u32,
    /// Position of the order's first valid commit.
    first_commit: Option<u64>,
}

/// Folds the claims log and collects violations.
pub struct Auditor {
    view: View,
    max_attempts: u32,
    orders: BTreeMap<OrderId, Trail>,
    claimed: BTreeMap<i32, BTreeSet<i64>>,
    violations: Vec<Violation>,
    records: u64,
    /// Whether positions ran 0, 1, 2, ... with no gap (nothing compacted).
    whole: bool,
    by_status: BTreeMap<&'static str, u64>,
}

/// The audit's result.
#[derive(Debug, Serialize)]
pub struct Report {
    pub records: u64,
    pub foreign: u64,
    pub void: u64,
    pub orders: usize,
    pub completed: BTreeMap<String, u64>,
    /// Whether the log was whole (from position 0, no gaps), so that
    /// unclaimed orders could be judged.
    pub whole: bool,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn holds(&self) -> bool {
        self.violations.is_empty()
    }
}

impl Auditor {
    pub fn new(max_attempts: u32) -> Auditor {
        Auditor {
            view: View::new(),
            max_attempts,
            orders: BTreeMap::new(),
            claimed: BTreeMap::new(),
            violations: Vec::new(),
            records: 0,
            whole: true,
            by_status: BTreeMap::new(),
        }
    }

    fn at(&mut self, pos: u64) {
        if pos != self.view.end().get() {
            self.whole = false;
        }
        self.records += 1;
    }

    /// A record that is not pool_worker's.
    pub fn foreign(&mut self, pos: u64) {
        self.at(pos);
        self.view.skip(Position::new(pos));
    }

    /// The record at `pos`.
    pub fn record(&mut self, pos: u64, rec: &Record) {
        self.at(pos);
        let writer_hold = self.view.hold(rec.instance).cloned();
        if self.view.apply(Position::new(pos), rec).is_err() {
            return; // void: changes nothing
        }
        let Some(order) = rec.order() else { return };
        let trail = self.orders.entry(order).or_default();
        let broken = match rec.event() {
            Event::Claimed => {
                self.claimed
                    .entry(order.partition)
                    .or_default()
                    .insert(order.offset);
                Vec::new()
            }
            Event::Committed => self.committed(pos, order, rec),
            Event::Completed => self.completed(order, rec, writer_hold),
            // A valid revocation ends the holder's run: a taker may run
            // the order again (a retry).
            Event::Revoked if trail.runner == Some(rec.instance.get()) => {
                trail.runner = None;
                Vec::new()
            }
            _ => Vec::new(),
        };
        for (rule, detail) in broken {
            self.violations.push(Violation {
                rule,
                pos: Some(pos),
                order: Some(order.to_string()),
                detail,
            });
        }
    }

    /// A valid commit of `order` at `pos`: what it breaks.
    fn committed(&mut self, pos: u64, order: OrderId, rec: &Record) -> Vec<(Rule, String)> {
        let i = rec.instance;
        let mut broken = Vec::new();
        let hold = self.view.hold(i).filter(|h| h.order == order);
        if hold.is_some_and(|h| h.committed == Some(Position::new(pos))) {
            let trail = self.orders.entry(order).or_default();
            trail.first_commit.get_or_insert(pos);
            match trail.runner {
                Some(r) if r != i.get() => broken.push((
                    Rule::CommittedByTwo,
                    format!("instance {i} committed while instance {r} held it committed"),
                )),
                _ => trail.runner = Some(i.get()),
            }
        }
        if rec.attempt().get() > self.max_attempts {
            broken.push((
                Rule::TooManyAttempts,
                format!(
                    "instance {i} committed attempt {} of at most {}",
                    rec.attempt(),
                    self.max_attempts
                ),
            ));
        }
        broken
    }

    /// A valid completion of `order`, whose writer held `writer_hold`
    /// before it: what it breaks.
    fn completed(
        &mut self,
        order: OrderId,
        rec: &Record,
        writer_hold: Option<crate::boot::Hold>,
    ) -> Vec<(Rule, String)> {
        let i = rec.instance;
        let mut broken = Vec::new();
        let cancel = self.view.cancel(order).map(|(c, _)| c.get());
        let trail = self.orders.entry(order).or_default();
        trail.completions += 1;
        if trail.completions > 1 {
            broken.push((
                Rule::CompletedTwice,
                format!("completion {} (by instance {i})", trail.completions),
            ));
        }
        if let Some(h) =
            writer_hold.filter(|h| h.order == order && !h.pending && h.committed.is_none())
        {
            broken.push((
                Rule::CompletedWithoutCommit,
                format!(
                    "instance {i} completed it; its claim at {} is undecided",
                    h.claim_pos
                ),
            ));
        }
        if let Some(o) = rec.outcome() {
            *self.by_status.entry(o.status.as_str()).or_default() += 1;
            if let (Some(c), Some(f)) = (cancel, trail.first_commit) {
                if c < f && o.status != crate::record::Status::Cancelled {
                    broken.push((
                        Rule::RanAfterCancel,
                        format!(
                            "cancelled at {c}, committed at {f}, completed {} by instance {i}",
                            o.status
                        ),
                    ));
                }
            }
        }
        broken
    }

    pub fn finish(mut self) -> Report {
        if self.whole {
            for (&p, &next) in self.view.frontier() {
                let claimed = self.claimed.get(&p);
                let missing: Vec<i64> = (0..next)
                    .filter(|o| !claimed.is_some_and(|c| c.contains(o)))
                    .take(100)
                    .collect();
                for o in missing {
                    self.violations.push(Violation {
                        rule: Rule::UnclaimedBehindFrontier,
                        pos: None,
                        order: Some(OrderId::new(p, o).to_string()),
                        detail: format!("the frontier of partition {p} is {next}"),
                    });
                }
            }
        }
        Report {
            records: self.records,
            foreign: self.view.foreign,
            void: self.view.void,
            orders: self.orders.len(),
            completed: self
                .by_status
                .iter()
                .map(|(s, n)| (s.to_string(), *n))
                .collect(),
            whole: self.whole,
            violations: self.violations,
        }
    }
}

/// Audits a whole log: (position, record or `None` for a foreign one).
pub fn audit<'a>(
    log: impl IntoIterator<Item = (u64, Option<&'a Record>)>,
    max_attempts: u32,
) -> Report {
    let mut a = Auditor::new(max_attempts);
    for (pos, rec) in log {
        match rec {
            Some(r) => a.record(pos, r),
            None => a.foreign(pos),
        }
    }
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32, ev: Event, inc: &str, seq: u64, o: i64) -> Record {
        let mut r = Record::of(i, ev, inc, 0);
        r.seq = seq;
        if ev != Event::Booted {
            r = r.with_order(OrderId::new(0, o));
            r.set_attempt(1);
            r.next.insert(0, o + 1);
        }
        if ev == Event::Completed {
            r.set_outcome(Some(crate::record::Outcome::not_run(
                crate::record::Status::Ok,
                "",
            )));
        }
        r
    }

    /// Instances 1 ("a") and 2 ("b") boot and both claim order 0:0.
    fn contest() -> Vec<Record> {
        vec![
            rec(1, Event::Booted, "a", 1, 0),
            rec(2, Event::Booted, "b", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(2, Event::Claimed, "b", 2, 0),
        ]
    }

    /// Instance 1 ("a") boots, claims order 0:0 and commits to it.
    fn one_run() -> Vec<Record> {
        vec![
            rec(1, Event::Booted, "a", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(1, Event::Committed, "a", 3, 0),
        ]
    }

    fn check(log: &[Record]) -> Report {
        audit(log.iter().enumerate().map(|(p, r)| (p as u64, Some(r))), 3)
    }

    fn rules(r: &Report) -> Vec<Rule> {
        r.violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_healthy_negotiation_holds() {
        let mut log = contest();
        log.extend([
            rec(1, Event::Committed, "a", 3, 0),
            rec(2, Event::Yielded, "b", 3, 0),
            rec(1, Event::Completed, "a", 4, 0),
        ]);
        let r = check(&log);
        assert!(r.holds(), "{:?}", r.violations);
        assert_eq!(r.completed.get("ok"), Some(&1));
        assert!(r.whole);
    }

    #[test]
    fn a_double_commit_and_a_double_completion_are_caught() {
        // Both decided on a log read before the other's claim
        // (worker::Flaw::DecideWithoutReading's log).
        let mut log = contest();
        log.extend([
            rec(2, Event::Committed, "b", 3, 0),
            rec(1, Event::Committed, "a", 3, 0),
            rec(2, Event::Completed, "b", 4, 0),
            rec(1, Event::Completed, "a", 4, 0),
        ]);
        let r = check(&log);
        assert_eq!(
            rules(&r),
            vec![Rule::CommittedByTwo, Rule::CompletedTwice],
            "{:?}",
            r.violations
        );
        assert_eq!(r.violations[0].pos, Some(5));
    }

    #[test]
    fn a_job_run_after_a_preceding_cancel_is_caught() {
        let cancel = Record::cancel(OrderId::new(0, 0), "op", 0, "no");
        let mut done = rec(1, Event::Completed, "a", 4, 0);
        let log = [
            rec(1, Event::Booted, "a", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            cancel.clone(),
            rec(1, Event::Committed, "a", 3, 0),
            done.clone(),
        ];
        let r = check(&log);
        assert_eq!(rules(&r), vec![Rule::RanAfterCancel], "{:?}", r.violations);
        // Completed `cancelled`: it never ran.
        done.set_outcome(Some(crate::record::Outcome::not_run(
            crate::record::Status::Cancelled,
            "cancelled before it ran",
        )));
        let mut log = log.to_vec();
        log[4] = done;
        assert!(check(&log).holds());
        // A cancel after the commit (the job ran, then was killed or had
        // ended): whatever the completion says, nothing ran that should not.
        let mut log = one_run();
        log.extend([cancel, rec(1, Event::Completed, "a", 4, 0)]);
        assert!(check(&log).holds());
    }

    #[test]
    fn a_completion_without_commit_and_too_many_attempts_are_caught() {
        let mut retry = rec(1, Event::Committed, "a2", 2, 0);
        retry.set_attempt(4);
        let log = [
            rec(1, Event::Booted, "a", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(1, Event::Completed, "a", 3, 0),
            rec(1, Event::Booted, "a2", 1, 1),
            rec(1, Event::Claimed, "a2", 1, 1),
            retry,
        ];
        let mut log = log.to_vec();
        log[4].seq = 2;
        log[5] = {
            let mut r = log[5].clone();
            r.seq = 3;
            r.with_order(OrderId::new(0, 1))
        };
        let r = check(&log);
        assert_eq!(
            rules(&r),
            vec![Rule::CompletedWithoutCommit, Rule::TooManyAttempts],
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn an_order_skipped_by_the_frontier_is_caught_on_a_whole_log() {
        let log = [
            rec(1, Event::Booted, "a", 1, 0),
            rec(1, Event::Claimed, "a", 2, 1),
        ];
        let r = check(&log);
        assert_eq!(rules(&r), vec![Rule::UnclaimedBehindFrontier]);
        assert_eq!(r.violations[0].order.as_deref(), Some("0:0"));
        // With a gap (compaction), it is not judged.
        let r = audit([(0, Some(&log[0])), (5, Some(&log[1]))], 3);
        assert!(r.holds() && !r.whole);
    }

    #[test]
    fn void_and_foreign_records_change_nothing() {
        let mut log = one_run();
        log.extend([
            rec(1, Event::Completed, "a", 4, 0),
            rec(1, Event::Completed, "a", 4, 0), // a duplicate: void
            rec(1, Event::Completed, "zombie", 9, 0), // fenced: void
        ]);
        let mut entries: Vec<(u64, Option<&Record>)> = log
            .iter()
            .enumerate()
            .map(|(p, r)| (p as u64, Some(r)))
            .collect();
        entries.push((6, None));
        let r = audit(entries, 3);
        assert!(r.holds(), "{:?}", r.violations);
        assert_eq!((r.void, r.foreign), (2, 1));
    }
}
