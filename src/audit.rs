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
//!    that starts at position 0 with no record known erased: compaction
//!    erases old claims; gaps that are commit markers or aborted records
//!    are no erased records, [`Erased`]);
//! 5. no run of an order is past `MAX_ATTEMPTS` (a committed attempt number
//!    above it; the order should have been completed as `gave_up`);
//! 6. no job of an order started once a cancel preceded its first commit
//!    (`pool_worker cancel`): such an order is completed `cancelled`, and
//!    any other completion of it means its job ran.
//!
//! On a compacted log (records known erased: [`Erased`], from the seqs
//! missing in their writers' numbering, not from missing positions, which
//! commit markers also leave) the auditor judges what the surviving
//! records can tell. Counts are of the records that survive. A second
//! commit (1) or a completion without its commit (3) is a violation only
//! if no record that would explain it can have been erased: the broker
//! erases a record only when a newer one of its key exists (R42), so the
//! explanation (a revocation of the first holder, `<holder>:revoked`; the
//! writer's commit, `<writer>:committed`) can be missing only if an erased
//! record can lie between the two records *and* the log holds a newer
//! record of that key. Such findings are listed as [`Report::unjudged`],
//! never as violations. A run after a cancel (6) is judged only when no
//! erased record can lie before the cancel (an erased first commit may
//! precede it). Unclaimed orders (4) need the whole log: read from
//! position 0, no record known erased (the positions missing are commit
//! markers and aborted records; an incarnation whose every record was
//! erased leaves no missing seq, which the claims topic's
//! `min.compaction.lag.ms`, 7 days, keeps to logs older than that).
//!
//! Pure: records in, a [`Report`] out; `pool_worker audit`
//! (`pool_worker/src/cli/audit.rs`) is the shell.

use crate::boot::View;
use crate::erased::Erased;
use crate::record::{Event, Lane, OrderId, Position, Record};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

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
    /// Position of the runner's commit.
    runner_commit: Option<u64>,
}

/// Folds the claims log and collects violations.
pub struct Auditor {
    view: View,
    max_attempts: u32,
    orders: BTreeMap<OrderId, Trail>,
    claimed: BTreeMap<Lane, BTreeSet<i64>>,
    violations: Vec<Violation>,
    records: u64,
    /// Whether positions ran 0, 1, 2, ... with no gap (nothing compacted).
    whole: bool,
    /// Whether the first position read was 0.
    from_zero: Option<bool>,
    /// The records known erased (compaction).
    erased: Erased,
    /// The newest position of each key in the whole log, when known
    /// ([`audit`] reads the log twice): which erased records are possible.
    newest: Option<HashMap<String, u64>>,
    /// Findings that an erased record may explain.
    unjudged: Vec<Violation>,
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
    /// Whether the log was whole (from position 0, no record known erased:
    /// any gaps are commit markers and aborted records), so that unclaimed
    /// orders could be judged.
    pub whole: bool,
    /// What compaction erased (seqs missing: at least this many records).
    pub erased: Erased,
    pub violations: Vec<Violation>,
    /// What would be a violation on a whole log, but a record that
    /// compaction may have erased would explain: not a violation.
    pub unjudged: Vec<Violation>,
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
            from_zero: None,
            erased: Erased::new(),
            newest: None,
            unjudged: Vec::new(),
            by_status: BTreeMap::new(),
        }
    }

    /// An auditor that knows the newest position of each key of the log
    /// it will read (so it can tell which records compaction could have
    /// erased).
    pub fn with_newest(max_attempts: u32, newest: HashMap<String, u64>) -> Auditor {
        Auditor {
            newest: Some(newest),
            ..Auditor::new(max_attempts)
        }
    }

    fn at(&mut self, pos: u64, rec: Option<&Record>) {
        if pos != self.view.end().get() {
            self.whole = false;
        }
        self.from_zero.get_or_insert(pos == 0);
        self.erased.note(pos, rec);
        self.records += 1;
    }

    /// Whether a record keyed `key` between positions `a` and `b` can have
    /// been erased: an erased record can lie between them and, if the keys'
    /// newest positions are known, a newer record of `key` exists.
    fn may_be_erased(&self, key: &str, a: u64, b: u64) -> bool {
        match self.erased.first_between(a, b) {
            None => false,
            Some(gap) => self
                .newest
                .as_ref()
                .is_none_or(|n| n.get(key).is_some_and(|&newest| newest > gap)),
        }
    }

    /// A record that is not pool_worker's.
    pub fn foreign(&mut self, pos: u64) {
        self.at(pos, None);
        self.view.skip(Position::new(pos));
    }

    /// The record at `pos`.
    pub fn record(&mut self, pos: u64, rec: &Record) {
        self.at(pos, Some(rec));
        let writer_hold = self.view.hold(rec.instance).cloned();
        if self.view.apply(Position::new(pos), rec).is_err() {
            return; // void: changes nothing
        }
        let Some(order) = rec.order() else { return };
        let trail = self.orders.entry(order).or_default();
        let broken: Vec<(Rule, String, bool)> = match rec.event() {
            Event::Claimed => {
                self.claimed
                    .entry(order.lane())
                    .or_default()
                    .insert(order.offset);
                // A claim that met no rival is its writer's commit (R34);
                // any other claim commits nothing.
                let fused = self
                    .view
                    .hold(rec.instance)
                    .is_some_and(|h| h.fused_at(order, Position::new(pos)));
                if fused {
                    self.committed(pos, order, rec)
                } else {
                    Vec::new()
                }
            }
            Event::Committed => self.committed(pos, order, rec),
            Event::Completed => self.completed(pos, order, rec, writer_hold),
            // A valid revocation ends the holder's run: a taker may run
            // the order again (a retry).
            Event::Revoked if trail.runner == Some(rec.instance.get()) => {
                trail.runner = None;
                trail.runner_commit = None;
                Vec::new()
            }
            // A valid park by the runner (R54): its job never started,
            // and the order is claimed again, by anyone.
            Event::Parked if trail.runner == Some(rec.instance.get()) => {
                trail.runner = None;
                trail.runner_commit = None;
                Vec::new()
            }
            // A valid yield of the runner: its claim had looked like its
            // own commit only because compaction erased the rival before
            // it (R11, R34); it never ran.
            Event::Yielded if trail.runner == Some(rec.instance.get()) => {
                trail.runner = None;
                trail.runner_commit = None;
                Vec::new()
            }
            _ => Vec::new(),
        };
        for (rule, detail, explained) in broken {
            let v = Violation {
                rule,
                pos: Some(pos),
                order: Some(order.to_string()),
                detail,
            };
            if explained {
                self.unjudged.push(v);
            } else {
                self.violations.push(v);
            }
        }
    }

    /// A valid commit of `order` at `pos`: what it breaks (and whether an
    /// erased record may explain it).
    fn committed(&mut self, pos: u64, order: OrderId, rec: &Record) -> Vec<(Rule, String, bool)> {
        let i = rec.instance;
        let mut broken = Vec::new();
        let hold = self.view.hold(i).filter(|h| h.order == order);
        if hold.is_some_and(|h| h.committed == Some(Position::new(pos))) {
            let (runner, since) = {
                let trail = self.orders.entry(order).or_default();
                trail.first_commit.get_or_insert(pos);
                (trail.runner, trail.runner_commit.unwrap_or(0))
            };
            match runner {
                Some(r) if r != i.get() => {
                    // The runner's hold may have been revoked by a record
                    // compaction erased.
                    let explained = self.may_be_erased(&format!("{r}:revoked"), since, pos);
                    broken.push((
                        Rule::CommittedByTwo,
                        format!("instance {i} committed while instance {r} held it committed (since {since})"),
                        explained,
                    ))
                }
                _ => {
                    let trail = self.orders.entry(order).or_default();
                    trail.runner = Some(i.get());
                    trail.runner_commit = Some(pos);
                }
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
                false,
            ));
        }
        broken
    }

    /// A valid completion of `order`, whose writer held `writer_hold`
    /// before it: what it breaks.
    fn completed(
        &mut self,
        pos: u64,
        order: OrderId,
        rec: &Record,
        writer_hold: Option<crate::boot::Hold>,
    ) -> Vec<(Rule, String, bool)> {
        let i = rec.instance;
        let mut broken = Vec::new();
        let cancel = self.view.cancel(order).map(|(c, _)| c.get());
        let (completions, first_commit) = {
            let trail = self.orders.entry(order).or_default();
            trail.completions += 1;
            (trail.completions, trail.first_commit)
        };
        if completions > 1 {
            broken.push((
                Rule::CompletedTwice,
                format!("completion {completions} (by instance {i})"),
                false,
            ));
        }
        if let Some(h) =
            writer_hold.filter(|h| h.order == order && !h.pending && h.committed.is_none())
        {
            let explained = self.may_be_erased(&format!("{i}:committed"), h.claim_pos.get(), pos);
            broken.push((
                Rule::CompletedWithoutCommit,
                format!(
                    "instance {i} completed it; its claim at {} is undecided",
                    h.claim_pos
                ),
                explained,
            ));
        }
        if let Some(o) = rec.outcome() {
            *self.by_status.entry(o.status.as_str()).or_default() += 1;
            if let (Some(c), Some(f)) = (cancel, first_commit) {
                if c < f && o.status != crate::record::Status::Cancelled {
                    // The order's first commit may be an erased one before
                    // the cancel.
                    let explained = self.erased.first.is_some_and(|g| g < c);
                    broken.push((
                        Rule::RanAfterCancel,
                        format!(
                            "cancelled at {c}, committed at {f}, completed {} by instance {i}",
                            o.status
                        ),
                        explained,
                    ));
                }
            }
        }
        broken
    }

    pub fn finish(mut self) -> Report {
        // Gaps only of commit markers and aborted records (no seq missing):
        // as whole as a log without them.
        self.whole |= self.from_zero != Some(false) && !self.erased.any();
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
                        order: Some(p.at(o).to_string()),
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
            erased: self.erased,
            violations: self.violations,
            unjudged: self.unjudged,
        }
    }
}

/// Audits a whole log: (position, record or `None` for a foreign one).
pub fn audit<'a>(
    log: impl IntoIterator<Item = (u64, Option<&'a Record>)>,
    max_attempts: u32,
) -> Report {
    let log: Vec<(u64, Option<&Record>)> = log.into_iter().collect();
    let mut newest = HashMap::new();
    for (pos, rec) in &log {
        if let Some(r) = rec {
            newest.insert(r.key(), *pos);
        }
    }
    let mut a = Auditor::with_newest(max_attempts, newest);
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
            r.next.insert(0.into(), o + 1);
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

    /// A parked order (R54) is run by the instance that claims it again:
    /// its commit is not a second one beside the parker's.
    #[test]
    fn a_parked_order_is_run_by_its_next_claimant() {
        let mut parked = rec(1, Event::Parked, "a", 3, 0);
        parked.set_until(Some(5));
        // Its claim out of the park (R55).
        let mut again = rec(2, Event::Claimed, "b", 2, 0);
        again.set_unpark(true);
        let mut done = rec(2, Event::Completed, "b", 3, 0);
        done.order_keyed = true;
        let log = [
            rec(1, Event::Booted, "a", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            parked,
            rec(2, Event::Booted, "b", 1, 0),
            again.clone(),
            done.clone(),
        ];
        let r = check(&log);
        assert!(r.holds(), "{:?}", r.violations);
        assert_eq!(r.completed.get("ok"), Some(&1));
        // Without the park, instance 1 still holds it committed.
        let log = [
            rec(1, Event::Booted, "a", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(2, Event::Booted, "b", 1, 0),
            rec(2, Event::Claimed, "b", 2, 0),
            rec(2, Event::Committed, "b", 3, 0),
        ];
        assert_eq!(rules(&check(&log)), vec![Rule::CommittedByTwo]);
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
        // Instance 1's claim met no rival: it was its commit (R34), so
        // instance 2's commit is the second.
        assert_eq!(r.violations[0].pos, Some(4));
    }

    #[test]
    fn a_job_run_after_a_preceding_cancel_is_caught() {
        let cancel = Record::cancel(OrderId::new(0, 0), "op", 0, "no");
        let mut done = rec(1, Event::Completed, "a", 4, 0);
        // The claim, which met no rival, is the commit (R34).
        let log = [
            rec(1, Event::Booted, "a", 1, 0),
            cancel.clone(),
            rec(1, Event::Claimed, "a", 2, 0),
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
        log[3] = done;
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
        // Instance 2's claim came first: instance 1's claim is undecided.
        let log = [
            rec(2, Event::Claimed, "b", 1, 0),
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
        // Gaps of commit markers (the writer's seqs run on): judged.
        let r = audit([(0, Some(&log[0])), (5, Some(&log[1]))], 3);
        assert_eq!(rules(&r), vec![Rule::UnclaimedBehindFrontier]);
        assert!(r.whole);
        // A log that does not start at 0, or misses a seq (compaction
        // erased a record): not judged.
        let r = audit([(3, Some(&log[0])), (5, Some(&log[1]))], 3);
        assert!(r.holds() && !r.whole);
        let mut late = log[1].clone();
        late.seq = 3;
        let r = audit([(0, Some(&log[0])), (5, Some(&late))], 3);
        assert!(r.holds() && !r.whole && r.erased.any());
    }

    /// A log with a commit marker after every record, as the workers write
    /// it (docs/protocol.md R16), and an aborted record (a gap of two
    /// positions, its record appended again with the same seq): every
    /// order below the frontier claimed holds; a claim the log lacks while
    /// the frontier passed it is caught.
    #[test]
    fn unclaimed_orders_are_judged_on_a_log_with_markers() {
        let one = one_run();
        let mut log: Vec<(u64, Option<&Record>)> = one
            .iter()
            .enumerate()
            .map(|(p, r)| (2 * p as u64 + 2 * u64::from(p > 1), Some(r)))
            .collect();
        let r = audit(log.clone(), 3);
        assert!(r.holds() && r.whole, "{:?}", r.violations);
        // The frontier moved past 0:1 without a claim of it.
        let mut skip = rec(1, Event::Lease, "a", one.len() as u64 + 1, 0);
        skip.next.insert(0.into(), 2);
        log.push((100, Some(&skip)));
        let r = audit(log, 3);
        assert!(r.whole);
        assert_eq!(rules(&r), vec![Rule::UnclaimedBehindFrontier]);
        assert_eq!(r.violations[0].order.as_deref(), Some("0:1"));
    }

    /// Instance 1 commits 0:0; instance 2 revokes its hold (at 4) and takes
    /// the order over; later, a second revocation of instance 1 (at 8; a
    /// stray one, which changes nothing) supersedes the first.
    fn takeover() -> Vec<Record> {
        let seq = |mut r: Record, n: u64| {
            r.seq = n;
            r
        };
        let revoked = |seen: u64, n: u64| {
            let mut r = Record::of(1, Event::Revoked, "b", 0).with_order(OrderId::new(0, 0));
            r.set_by(Some(2));
            r.set_fences(Some("a".into()));
            r.set_seen(Some(seen));
            r.set_rank(Some(0));
            r.set_attempt(2);
            seq(r, n)
        };
        let mut claim = rec(2, Event::Claimed, "b", 3, 0);
        claim.set_rank(Some(0));
        claim.set_attempt(2);
        let mut commit = rec(2, Event::Committed, "b", 4, 0);
        commit.set_attempt(2);
        let mut done = rec(2, Event::Completed, "b", 5, 0);
        done.set_attempt(2);
        vec![
            rec(1, Event::Booted, "a", 1, 0),
            rec(2, Event::Booted, "b", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(1, Event::Committed, "a", 3, 0),
            revoked(3, 2),
            claim,
            commit,
            done,
            revoked(99, 6),
        ]
    }

    /// The log without the positions `erased`.
    fn compacted(log: &[Record], erased: &[u64]) -> Report {
        audit(
            log.iter()
                .enumerate()
                .map(|(p, r)| (p as u64, Some(r)))
                .filter(|(p, _)| !erased.contains(p)),
            3,
        )
    }

    /// On a compacted log, a second commit that an erased revocation
    /// explains is no violation (it is listed as unjudged); the counts
    /// say what was erased; and where no record of the explaining key
    /// survives after the gap, the broker cannot have erased one, so the
    /// second commit is still a violation.
    #[test]
    fn a_compacted_log_gives_no_false_alarm_and_still_catches_what_it_can() {
        let log = takeover();
        let whole = compacted(&log, &[]);
        assert!(
            whole.holds() && whole.unjudged.is_empty() && whole.whole,
            "{:?} {:?}",
            whole.violations,
            whole.unjudged
        );
        assert_eq!(whole.erased.records, 0);
        // The first revocation erased (the broker keeps the newer one of
        // its key, at 8).
        let r = compacted(&log, &[4]);
        assert!(r.holds(), "a false alarm: {:?}", r.violations);
        assert_eq!(
            r.unjudged.iter().map(|v| v.rule).collect::<Vec<_>>(),
            vec![Rule::CommittedByTwo],
            "{:?}",
            r.unjudged
        );
        assert_eq!(
            (r.erased.records, r.erased.first, r.erased.before, r.whole),
            (1, Some(4), Some(5), false)
        );
        assert_eq!(r.completed.get("ok"), Some(&1));
        // No newer `1:revoked` in the log: nothing of that key can have
        // been erased between the two commits, so the second one is a
        // violation, gap or not.
        let r = compacted(&log[..8], &[4]);
        assert_eq!(rules(&r), vec![Rule::CommittedByTwo], "{:?}", r.violations);
        // A completion whose commit compaction erased (a newer
        // `1:committed`, a retry's, survives) is no violation; without the
        // newer record it is one.
        // Instance 2's claim came first, so instance 1's is no commit of
        // its own (R34): its `committed` (at 5) is. Instance 2's yield (at
        // 4) is what a compacted log shows when the rival before its claim
        // was erased (R11).
        let mut retry = rec(1, Event::Committed, "a", 5, 0);
        retry.set_attempt(2);
        let log = vec![
            rec(1, Event::Booted, "a", 1, 0),
            rec(2, Event::Booted, "b", 1, 0),
            rec(2, Event::Claimed, "b", 2, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(2, Event::Yielded, "b", 3, 0),
            rec(1, Event::Committed, "a", 3, 0),
            rec(1, Event::Completed, "a", 4, 0),
            retry,
        ];
        let r = compacted(&log, &[]);
        assert!(r.holds(), "{:?}", r.violations);
        let r = compacted(&log, &[5]);
        assert!(r.holds(), "a false alarm: {:?}", r.violations);
        assert_eq!(r.unjudged.len(), 1, "{:?}", r.unjudged);
        let r = compacted(&log[..7], &[5]);
        assert_eq!(
            rules(&r),
            vec![Rule::CompletedWithoutCommit],
            "{:?}",
            r.violations
        );
    }

    /// The log spread over even positions (each record followed by its
    /// transaction's commit marker; a revocation's `seen` moved with
    /// them), without the positions `erased`.
    fn with_markers(log: &[Record], erased: &[u64]) -> Report {
        let log: Vec<Record> = log
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if let Some(seen) = r.seen() {
                    r.set_seen(Some(2 * seen.get()));
                }
                r
            })
            .collect();
        audit(
            log.iter()
                .enumerate()
                .map(|(p, r)| (2 * p as u64, Some(r)))
                .filter(|(p, _)| !erased.contains(p)),
            3,
        )
    }

    /// Commit markers take positions that no reader sees: a gap between
    /// two records is then no erased record. Instance 2 commits while
    /// instance 1 holds the order, without revoking it (its seqs run on:
    /// nothing of it is missing), a newer `1:revoked` at the end: a
    /// violation, not "not judged" for the markers' gaps. With the
    /// revocation there and erased (a seq of instance 2 missing), it is
    /// not judged, as on a log without markers.
    #[test]
    fn commit_markers_are_no_excuse() {
        let mut log = takeover();
        log.remove(4);
        for r in &mut log[4..] {
            r.seq -= 1;
        }
        let r = with_markers(&log, &[]);
        assert_eq!(rules(&r), vec![Rule::CommittedByTwo], "{:?}", r.violations);
        // Nothing erased: the markers' gaps leave the log whole (judged).
        assert!(r.unjudged.is_empty() && r.whole, "{:?}", r.unjudged);
        assert_eq!((r.erased.records, r.erased.first), (0, None));
        let log = takeover();
        let whole = with_markers(&log, &[]);
        assert!(
            whole.holds() && whole.unjudged.is_empty() && whole.erased.records == 0,
            "{:?} {:?}",
            whole.violations,
            whole.unjudged
        );
        let r = with_markers(&log, &[8]);
        assert!(r.holds(), "a false alarm: {:?}", r.violations);
        assert_eq!(
            r.unjudged.iter().map(|v| v.rule).collect::<Vec<_>>(),
            vec![Rule::CommittedByTwo],
            "{:?}",
            r.unjudged
        );
        // Instance 2's seq 2 lay between its records at 2 and 10, at a
        // position no record holds.
        assert_eq!(
            (r.erased.records, r.erased.first, r.erased.before),
            (1, Some(3), Some(10))
        );
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
