//! Boot replay: the [`View`] of the claims topic (docs/protocol.md R9–R15).
//!
//! An instance keeps no state of its own between runs. At every boot it
//! folds the claims topic, in log order, into a [`View`]: who holds which
//! order and whether they committed to it, the frontier, and, for orders
//! whose negotiation is still recent, every instance's stance on them (the
//! [`Contest`]). The same `View` then stays up to date while the instance
//! negotiates and runs (R9). It voids duplicates (R7) and fenced
//! incarnations (R10), and concludes the same with or without compaction
//! (docs/protocol-proofs.md, "Compaction").
//!
//! This module is pure: records and positions in, answers out. No I/O, no
//! clock (timestamps come inside the records). Nor is any of it written: a
//! checkpoint carries the View as structs of its own (src/record/wire.rs),
//! converted in `snapshot`.
//!
//! The View's rules live by family in submodules: `fence` (R7, R10),
//! `hold` (R11–R15, R46), `revoke` (R37–R39), `queue` (R26–R30),
//! `cancel` (R51), `snapshot` (R20, R23, R24) and, for the tests only,
//! `relabel`.

use crate::record::{
    Attempt, Body, Cite, Event, Incarnation, InstanceNo, Lane, OrderId, Outcome, Position, Record,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod cancel;
mod fence;
mod hold;
mod queue;
#[cfg(any(test, feature = "testing"))]
mod relabel;
mod revoke;
mod snapshot;

pub use queue::{priority, turns, turns_with, Turn};
#[cfg(any(test, feature = "testing"))]
pub use relabel::{Relabel, Summary, SummaryHold};

/// How many positions a settled contest is remembered after it settled. A
/// claim of an order behind the frontier whose contest is no longer known is
/// *late* and loses (docs/protocol.md R12, R14).
pub const CONTEST_MEMORY: u64 = 100_000;

/// An instance's stance on one order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stance {
    /// Claimed at this position, not yet decided.
    Undecided,
    Committed,
    Yielded,
    Completed,
}

/// Every instance's stance on one order, as the log tells it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Contest {
    /// Instance → (position of its claim, its stance).
    pub stances: BTreeMap<InstanceNo, (Position, Stance)>,
    /// The order was behind the frontier when its first claim we know of
    /// arrived, and nothing was known of it: the claim came late.
    pub late: bool,
    /// Position at which the order was completed.
    pub completed_at: Option<Position>,
    /// A void `completed` of the order (its writer was fenced or revoked,
    /// but it ran the job to its end): position and outcome. See
    /// [`View::apply`] and docs/protocol.md R15.
    pub finished: Option<(Position, Outcome)>,
    /// Claimants whose rank is not their instance number: takeovers, which
    /// stand where the hold they took over stood.
    pub ranks: BTreeMap<InstanceNo, u32>,
    /// Takeover claimants whose claims are not late even though the contest
    /// is: heirs of a committed hold, or of a claim that was not late.
    pub heirs: BTreeSet<InstanceNo>,
    /// The order was parked once (R54): every record about it is keyed
    /// `park:P:O` from then on.
    pub parked_once: bool,
    /// Position of the order's newest valid `parked`: the claims before it
    /// are of an earlier round, which the park ended (R55): they yield,
    /// and no claim after it counts them as rivals.
    pub round: Option<Position>,
    /// Claimants whose claim came after the order's park but without
    /// `unpark` (made before its writer read the park): of the round the
    /// park ended, like the claims before it (R55).
    pub stale: BTreeSet<InstanceNo>,
}

impl Contest {
    /// Instance `i`'s place in the negotiation: (rank, number), lower wins.
    /// A total order on claimants, fixed by their records, which is all the
    /// safety argument of `claim::decide` needs.
    pub fn rank(&self, i: InstanceNo) -> (u32, InstanceNo) {
        (self.ranks.get(&i).copied().unwrap_or(i.get()), i)
    }

    /// Instance `i` claims (undecided) at `pos`, with `rank`.
    fn claim(&mut self, i: InstanceNo, pos: Position, rank: u32) {
        self.stances.insert(i, (pos, Stance::Undecided));
        if rank == i.get() {
            self.ranks.remove(&i);
        } else {
            self.ranks.insert(i, rank);
        }
    }

    /// Whether instance `i`'s claim must yield as late.
    pub fn late_for(&self, i: InstanceNo) -> bool {
        self.late && !self.heirs.contains(&i)
    }

    /// Whether instance `i`'s claim met no rival: the order is neither
    /// completed nor finished, the claim is not late, and every other
    /// claimant has yielded (or completed). Then R32 commits at once, and a
    /// first claim is its own decision (R34; `claim::decide` answers
    /// `Commit` exactly then).
    pub fn unrivalled_for(&self, i: InstanceNo) -> bool {
        !self.late_for(i)
            && self.completed_at.is_none()
            && self.finished.is_none()
            && self
                .rivals(i)
                .all(|(_, (_, s))| matches!(s, Stance::Yielded | Stance::Completed))
    }

    /// The stances of `i`'s rivals in the current round (R55): every
    /// other claimant whose claim is not before the order's newest park.
    pub fn rivals(
        &self,
        i: InstanceNo,
    ) -> impl Iterator<Item = (&InstanceNo, &(Position, Stance))> + '_ {
        self.stances.iter().filter(move |(j, (at, _))| {
            **j != i && !self.stale.contains(j) && self.round.is_none_or(|r| *at > r)
        })
    }

    /// Whether `i`'s claim is of a round that a park ended (R55): made
    /// before the order's newest park, or after it without `unpark`. The
    /// position of that park.
    pub fn outrun(&self, i: InstanceNo) -> Option<Position> {
        let (at, _) = self.stances.get(&i)?;
        self.round.filter(|r| at < r || self.stale.contains(&i))
    }

    /// Whether nobody is still deciding or running this order.
    fn settled(&self) -> bool {
        (self.completed_at.is_some() || self.finished.is_some())
            && self
                .stances
                .values()
                .all(|(_, s)| matches!(s, Stance::Yielded | Stance::Completed))
    }
}

/// What an instance holds: its newest claim, while it is not closed by a
/// yield or a completion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub order: OrderId,
    pub claim_pos: Position,
    /// The newest attempt number (claims start at 1; a resumed run writes a
    /// new `committed` with the next number).
    pub attempt: Attempt,
    /// Position of the first `committed` after the claim; `None` while undecided.
    pub committed: Option<Position>,
    /// The order's `id`, when the claim named one.
    pub order_id: Option<String>,
    /// Newest writer timestamp of the claim, its decisions and its leases.
    pub last_ts: u64,
    /// Position of the hold's newest record (claim, commit or lease): a
    /// revocation must name it (docs/protocol.md R37).
    pub last_pos: Position,
    /// Incarnation that wrote the hold's newest record.
    pub incarnation: Incarnation,
    /// The hold's rank in the negotiation (see [`Contest::rank`]).
    pub rank: u32,
    /// Opened by the instance's revocation of another's hold; its takeover
    /// claim is not in the log yet (docs/protocol.md R39).
    pub pending: bool,
    /// The hold this one took over, if it is a takeover.
    pub took_over: Option<Cite>,
    /// The order's key and the position of the record that announced it
    /// in this hold: its claim, the revocation that opened a pending hold,
    /// or a lease (docs/protocol.md R56).
    pub key: Option<(String, Position)>,
}

/// An order parked (docs/protocol.md R54): held by nobody until an
/// instance claims it again, once it is due and its key has room.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Parked {
    /// Position of the `parked` record.
    pub at: Position,
    /// The attempt a claim of it carries on.
    pub attempt: Attempt,
    /// Not before this time (ms since the UNIX epoch, by the claimant's
    /// clock).
    pub until: Option<u64>,
    /// The order's key (R56).
    pub key: Option<String>,
}

impl Hold {
    /// Whether the hold's claim at `pos` is its own commit: a first claim
    /// that met no rival (R34), read so by every reader.
    pub fn fused_at(&self, order: OrderId, pos: Position) -> bool {
        self.order == order && self.claim_pos == pos && self.committed == Some(pos)
    }
}

/// What the replay knows of one instance number.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Instance {
    /// The current incarnation: that of the newest `booted`.
    pub booted: Option<Booted>,
    /// The last `seq` accepted from this instance number (R7).
    last_seq: Option<LastSeq>,
    pub hold: Option<Hold>,
    /// An incarnation whose hold was revoked: its later records are void.
    pub revoked: Option<Incarnation>,
    /// The newest completion.
    pub last_completed: Option<Completion>,
    /// Newest timestamp written by this instance.
    pub last_ts: u64,
    /// The writer's clock (`ts`) of the record with which this instance
    /// last came to hold nothing: its `booted`, or the yield, completion or
    /// revocation that closed its hold. Orders the idle queue
    /// ([`View::idle_queue`]).
    pub idle_ts: u64,
    /// A claim named this instance in `passed_over` (it did not claim in
    /// its turn) and it has written nothing valid since: out of the idle
    /// queue ([`View::idle_queue`]).
    pub passed_over: bool,
    /// The current incarnation's `completed` said that its process exits
    /// after it (`exits`): out of the idle queue until the instance's next
    /// `booted` ([`View::idle_queue`]).
    pub exiting: bool,
}

/// An instance's newest `booted`: where, and the incarnation it made
/// current.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Booted {
    pub at: Position,
    pub incarnation: Incarnation,
}

/// The last `seq` accepted from an instance number, and the incarnation
/// that wrote it (R7).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LastSeq {
    incarnation: Incarnation,
    seq: u64,
}

/// An instance's newest completion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Completion {
    pub order: OrderId,
    pub at: Position,
    pub attempt: Attempt,
    pub outcome: Outcome,
}

/// A contest that settled: where, and the order (R12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Settled {
    at: Position,
    order: OrderId,
}

/// The order that first announced an id, and where (R46).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct IdOwner {
    order: OrderId,
    at: Position,
}

/// An operator's cancel of an order: where, and the operator's reason
/// (R51).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Cancel {
    at: Position,
    reason: String,
}

/// Why a record was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Void {
    /// Written by an incarnation older than the instance's newest `booted`.
    Fenced,
    /// A second copy of a record already applied.
    Duplicate,
    /// A decision, lease or completion that matches no open hold.
    Stray,
}

/// The replayed state of the whole pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct View {
    /// Keep duplicate records (a deliberate flaw for the checks; see
    /// `worker::Flaw::KeepDuplicates`). Only with the `testing` feature.
    #[cfg(any(test, feature = "testing"))]
    pub keep_duplicates: bool,
    /// Position of the next record to read.
    end: Position,
    /// Foreign records skipped so far.
    pub foreign: u64,
    /// Records that were void (fenced, duplicate, stray).
    pub void: u64,
    /// Completions applied so far (only those this replay saw: compaction
    /// may have erased older ones).
    pub completions: u64,
    /// Incarnations made current by a record's `booted_at`, their `booted`
    /// unread: erased by compaction, behind or ahead of a cleaner pass
    /// (docs/protocol.md R10).
    pub adopted: u64,
    instances: BTreeMap<InstanceNo, Instance>,
    frontier: BTreeMap<Lane, i64>,
    contests: BTreeMap<OrderId, Contest>,
    /// Settled contests, oldest first.
    settled: VecDeque<Settled>,
    /// Order ids (a JSON order's `id`): the order that first announced each,
    /// and where (docs/protocol.md R46).
    ids: BTreeMap<String, IdOwner>,
    /// The newest checkpoint read covers the log before this position.
    checkpoint: Position,
    /// Before this position the log may hold a completion this view does
    /// not remember: the snapshot it was loaded from covers the log before
    /// it, and the contests that settled before it were forgotten (R12).
    /// Not raised by a checkpoint read on the way: a view that read the log
    /// itself read every completion of a parked order (keyed by its order,
    /// R54, so never erased before it is read), but may have missed the
    /// park itself, erased by a newer one (R55).
    stale_before: Position,
    /// Operators' cancels (`pool_worker cancel`) of orders not completed
    /// when they landed: order → the first one. A
    /// commit of the order that follows it never runs the job
    /// (docs/protocol.md R51, R52). Forgotten with the
    /// order's settled contest.
    cancels: BTreeMap<OrderId, Cancel>,
    /// Orders parked and not claimed since (docs/protocol.md R54).
    parked: BTreeMap<OrderId, Parked>,
}

impl View {
    pub fn new() -> Self {
        View::default()
    }

    /// Position of the next record to read.
    pub fn end(&self) -> Position {
        self.end
    }

    /// Notes that the record at `pos` was foreign and skipped.
    pub fn skip(&mut self, pos: Position) {
        self.end = self.end.max(pos.next());
        self.foreign += 1;
    }

    /// Folds the record at `pos` (positions increase; gaps are compacted
    /// records) into the view.
    pub fn apply(&mut self, pos: Position, rec: &Record) -> Result<(), Void> {
        self.end = self.end.max(pos.next());
        if rec.event() == Event::Cancelled {
            // No instance's record: no fence, seq or hold of any instance.
            self.apply_cancel(pos, rec);
            self.forget_old_contests(pos);
            return Ok(());
        }
        let r = self.apply_inner(pos, rec);
        if r.is_err() {
            self.void += 1;
            self.note_completion(pos, rec);
        } else {
            self.note_idle(rec);
        }
        self.forget_old_contests(pos);
        r
    }

    /// A record of an instance (anything but a cancel): admitted (R7, R10),
    /// its frontier raised (R13), then applied by its kind.
    fn apply_inner(&mut self, pos: Position, rec: &Record) -> Result<(), Void> {
        self.admit(pos, rec)?;
        // Whether a claim's order was already behind the frontier before this
        // record (its own `next` counts the claim itself).
        let behind = rec
            .order()
            .is_some_and(|o| o.offset < self.next_offset(o.lane()));
        for (&p, &o) in &rec.next {
            raise(&mut self.frontier, p, o);
        }
        if let Body::Checkpoint { snapshot } = &rec.body {
            self.checkpoint = self.checkpoint.max(snapshot.at);
        }
        let Some(order) = rec.order() else {
            return Ok(());
        };
        match &rec.body {
            Body::Claimed { .. } => {
                self.apply_claim(pos, rec, order, behind);
                Ok(())
            }
            Body::Revoked { .. } => self.apply_revoke(pos, rec, order),
            Body::Parked { .. } => self.apply_park(pos, rec, order),
            Body::Committed { .. }
            | Body::Yielded { .. }
            | Body::Completed { .. }
            | Body::Lease { .. } => self.apply_decision(pos, rec, order),
            // Handled in `apply`, never here.
            Body::Booted | Body::Checkpoint { .. } | Body::Cancelled { .. } => Ok(()),
        }
    }

    /// What the view knows of instance `i` (for the tests: the shells go
    /// through [`View::instances`], [`View::hold`] …).
    #[cfg(any(test, feature = "testing"))]
    pub fn instance(&self, i: InstanceNo) -> Option<&Instance> {
        self.instances.get(&i)
    }

    /// Every instance number the log mentions.
    pub fn instances(&self) -> impl Iterator<Item = (InstanceNo, &Instance)> {
        self.instances.iter().map(|(i, s)| (*i, s))
    }

    /// The position of instance `i`'s `booted` by `incarnation`, when that
    /// is its current one (R10: every later record of it carries it).
    pub fn booted_at(&self, i: InstanceNo, incarnation: &Incarnation) -> Option<Position> {
        let b = self.instances.get(&i)?.booted.as_ref()?;
        (b.incarnation == *incarnation).then_some(b.at)
    }

    /// What instance `i` holds.
    pub fn hold(&self, i: InstanceNo) -> Option<&Hold> {
        self.instances.get(&i)?.hold.as_ref()
    }

    /// The current incarnation of instance `i`.
    pub fn incarnation(&self, i: InstanceNo) -> Option<&Incarnation> {
        Some(&self.instances.get(&i)?.booted.as_ref()?.incarnation)
    }

    /// The order that first announced `id`.
    pub fn id_owner(&self, id: &str) -> Option<OrderId> {
        self.ids.get(id).map(|owner| owner.order)
    }

    /// The ids announced that start with `prefix`, in the ids' order, and
    /// the order that first announced each (R46; a schedule's firings,
    /// src/schedule.rs).
    pub fn ids_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, OrderId)> + 'a {
        self.ids
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(id, _)| id.starts_with(prefix))
            .map(|(id, owner)| (id.as_str(), owner.order))
    }

    pub fn contest(&self, order: OrderId) -> Option<&Contest> {
        self.contests.get(&order)
    }

    /// The claim frontier: per orders partition, the lowest offset no claim
    /// has reached (docs/protocol.md R13).
    pub fn frontier(&self) -> &BTreeMap<Lane, i64> {
        &self.frontier
    }

    /// The frontier of `lane`.
    pub fn next_offset(&self, lane: Lane) -> i64 {
        self.frontier.get(&lane).copied().unwrap_or(0)
    }

    /// The frontier of each partition named in `ends` (0 where none).
    pub fn frontier_for(&self, ends: &BTreeMap<Lane, i64>) -> BTreeMap<Lane, i64> {
        ends.keys().map(|&p| (p, self.next_offset(p))).collect()
    }

    /// The newest checkpoint read covers the log before this position.
    pub fn checkpoint(&self) -> Position {
        self.checkpoint
    }

    /// A view loaded from a predecessor's handed view (docs/protocol.md
    /// R16, "Handed view"), not from a checkpoint in the log: the newest
    /// checkpoint is where the giver knew it (R23 counts from there), never
    /// past the snapshot.
    pub(crate) fn set_checkpoint(&mut self, at: Position) {
        self.checkpoint = at.min(self.end);
    }
}

fn raise(f: &mut BTreeMap<Lane, i64>, p: Lane, o: i64) {
    let e = f.entry(p).or_insert(0);
    *e = (*e).max(o);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Status;

    fn n(i: u32) -> InstanceNo {
        InstanceNo::new(i)
    }

    fn ns(i: &[u32]) -> Vec<InstanceNo> {
        i.iter().copied().map(InstanceNo::new).collect()
    }

    fn p(at: u64) -> Position {
        Position::new(at)
    }

    pub(crate) fn rec(i: u32, ev: Event, inc: &str, o: i64) -> Record {
        let mut r = Record::of(i, ev, inc, 0);
        if ev.needs_order() {
            r = r.with_order(OrderId::new(0, o));
            r.set_attempt(1);
            if ev == Event::Completed {
                r.set_outcome(Some(Outcome::not_run(Status::Ok, "x")));
            }
        }
        r
    }

    fn view(log: &[Record]) -> View {
        let mut v = View::new();
        for (i, r) in log.iter().enumerate() {
            let _ = v.apply(p(i as u64), r);
        }
        v
    }

    #[test]
    fn claim_commit_complete_closes_the_hold() {
        let mut log = vec![
            rec(1, Event::Booted, "a", 0),
            rec(1, Event::Claimed, "a", 0),
        ];
        let v = view(&log);
        // R34: the claim met no rival, it is the commit.
        assert_eq!(v.hold(n(1)).unwrap().committed, Some(p(1)));
        assert_eq!(v.next_offset(0.into()), 1);
        // A `committed` after it (an older writer's, or a retry's) is the
        // hold's own decision record from then on.
        log.push(rec(1, Event::Committed, "a", 0));
        assert_eq!(view(&log).hold(n(1)).unwrap().committed, Some(p(2)));
        log.push(rec(1, Event::Completed, "a", 0));
        let v = view(&log);
        assert!(v.hold(n(1)).is_none());
        assert_eq!(
            v.instance(n(1))
                .unwrap()
                .last_completed
                .as_ref()
                .unwrap()
                .order,
            OrderId::new(0, 0)
        );
        assert_eq!(
            v.contest(OrderId::new(0, 0)).unwrap().completed_at,
            Some(p(3))
        );
    }

    /// R55: a parked order is ready once due and while its key has room;
    /// cancelled, at once (R52 then completes it without running it).
    #[test]
    fn a_parked_order_is_ready_when_due_with_room_or_cancelled() {
        let o0 = OrderId::new(0, 0);
        let mut park = rec(1, Event::Parked, "a", 0);
        park.set_until(Some(1_000));
        park.set_order_key(Some("k".into()));
        let mut c1 = rec(2, Event::Claimed, "b", 1);
        c1.next.insert(0.into(), 2);
        let mut lease = rec(2, Event::Lease, "b", 1);
        lease.set_order_key(Some("k".into()));
        let log = vec![
            rec(1, Event::Booted, "a", 0),
            rec(1, Event::Claimed, "a", 0),
            park,
            rec(2, Event::Booted, "b", 0),
            c1,
            lease,
        ];
        let v = view(&log);
        assert_eq!(v.parked_order(o0).map(|p| p.until), Some(Some(1_000)));
        assert!(v.ready(999, 2).is_empty(), "not due");
        assert_eq!(v.ready(1_000, 2), vec![o0], "due, and key k has room for 2");
        assert!(v.ready(1_000, 1).is_empty(), "key k is full: 0:1 holds it");
        assert_eq!(v.next_due(0), Some(1_000));
        let mut cancelled = log.clone();
        cancelled.push(Record::cancel(o0, "op", 0, "not wanted"));
        assert_eq!(view(&cancelled).ready(0, 1), vec![o0], "cancelled: at once");
        // A claim out of the park takes it out; the park survives a
        // checkpoint.
        let back = View::from_snapshot(&v.snapshot());
        assert_eq!(back.parked_order(o0), v.parked_order(o0));
        let mut again = rec(2, Event::Claimed, "b", 0);
        again.set_unpark(true);
        let mut l = log;
        l.push(again);
        assert!(view(&l).parked_order(o0).is_none());
    }

    /// R56: a claim announces its order's key at its own position; a
    /// lower order of the key claimed out of the park after it is not
    /// counted ahead of it (announced later) but goes first
    /// (`held_below`), and counts the higher one ahead of itself.
    #[test]
    fn a_claim_announces_its_key_and_a_lower_order_claimed_later_goes_first() {
        let (o1, o4) = (OrderId::new(0, 1), OrderId::new(0, 4));
        let mut c1 = rec(1, Event::Claimed, "a", 1);
        c1.next.insert(0.into(), 2);
        let mut park = rec(1, Event::Parked, "a", 1);
        park.set_order_key(Some("k".into()));
        let mut c4 = rec(2, Event::Claimed, "b", 4);
        c4.next.insert(0.into(), 5);
        c4.set_order_key(Some("k".into()));
        let mut again = rec(3, Event::Claimed, "c", 1);
        again.set_unpark(true);
        again.set_park_at(Some(p(2)));
        again.set_order_key(Some("k".into()));
        let log = vec![
            rec(1, Event::Booted, "a", 0),
            c1,
            park,
            rec(2, Event::Booted, "b", 0),
            c4,
            rec(3, Event::Booted, "c", 0),
            again,
        ];
        let v = view(&log);
        assert_eq!(v.hold(n(2)).unwrap().key, Some(("k".into(), p(4))));
        assert_eq!(v.hold(n(3)).unwrap().key, Some(("k".into(), p(6))));
        assert!(v.parked_order(o1).is_none(), "out of the park");
        assert_eq!(v.key_ahead(n(2), "k", p(4)), 0, "announced after 0:4's");
        assert!(v.held_below(n(2), o4, "k", p(4)), "0:1 goes first");
        assert!(!v.held_below(n(3), o1, "k", p(6)), "nothing below 0:1");
        assert_eq!(v.key_ahead(n(3), "k", p(6)), 1, "0:4 counts for 0:1");
        // As a checkpoint carries it.
        let back = View::from_snapshot(&v.snapshot());
        assert_eq!(back.hold(n(2)).unwrap().key, v.hold(n(2)).unwrap().key);
    }

    /// R55: a claim out of the park whose writer had not read the order's
    /// completion yields, whether the reader read that completion or
    /// started from a checkpoint after it (which keeps no settled
    /// contest): late by `park_at`, never its own commit.
    #[test]
    fn a_stale_unpark_claim_yields_also_after_a_checkpoint() {
        let o0 = OrderId::new(0, 0);
        let mut c0 = rec(1, Event::Claimed, "a", 0);
        c0.next.insert(0.into(), 1);
        let unpark = |i: u32, inc: &str| {
            let mut r = rec(i, Event::Claimed, inc, 0);
            r.set_unpark(true);
            r.set_park_at(Some(p(2)));
            r
        };
        let mut done = rec(2, Event::Completed, "b", 0);
        done.order_keyed = true;
        let log = vec![
            rec(1, Event::Booted, "a", 0),
            c0,
            rec(1, Event::Parked, "a", 0),
            rec(2, Event::Booted, "b", 0),
            unpark(2, "b"),
            done,
            rec(3, Event::Booted, "c", 0),
        ];
        let v = view(&log);
        assert_eq!(v.contest(o0).unwrap().completed_at, Some(p(5)));
        let stale = unpark(3, "c");
        let mut all = log.clone();
        all.push(stale.clone());
        let read = view(&all);
        assert_eq!(
            read.hold(n(3)).unwrap().committed,
            None,
            "read the completion"
        );
        let mut from = View::from_snapshot(&v.snapshot());
        assert!(from.contest(o0).is_none(), "settled: not in the snapshot");
        let _ = from.apply(p(7), &stale);
        assert_eq!(
            from.hold(n(3)).unwrap().committed,
            None,
            "from the checkpoint"
        );
        assert!(from.contest(o0).unwrap().late, "late by its park_at");
        // A view that read the completion, then forgot its settled contest
        // (R12, CONTEST_MEMORY positions later), judges it stale too.
        let mut forgot = view(&log);
        let far = p(5 + CONTEST_MEMORY);
        let _ = forgot.apply(far, &rec(3, Event::Booted, "c", 0));
        assert!(forgot.contest(o0).is_none(), "forgotten");
        let _ = forgot.apply(far.next(), &stale);
        assert!(
            forgot.contest(o0).unwrap().late,
            "late: forgotten after its park_at"
        );
        assert_eq!(forgot.hold(n(3)).unwrap().committed, None);
        // A park after the checkpoint: never late (compaction may have
        // erased what came before the claim).
        let mut fresh = unpark(3, "c");
        fresh.set_park_at(Some(p(7)));
        let mut from = View::from_snapshot(&v.snapshot());
        let _ = from.apply(p(8), &fresh);
        assert!(!from.contest(o0).unwrap().late);
    }

    /// R55, R42: a view that read the log itself, not from a checkpoint,
    /// may have missed an order's first claim and park (each erased by a
    /// newer record of its key, the cleaner ahead of the replay). A
    /// checkpoint read on the way, after that park, does not make the
    /// claim out of it stale: it is the first record the view meets of a
    /// live order, and the park after it parks the order again, as for a
    /// view loaded from that checkpoint (whose snapshot has the order
    /// parked). Found by the simulation (the herd with one key, seed 460):
    /// the view lost the order, and a later order of its key ran first.
    #[test]
    fn an_unpark_claim_is_not_stale_by_a_checkpoint_read_on_the_way() {
        let o0 = OrderId::new(0, 0);
        let mut c0 = rec(1, Event::Claimed, "a", 0);
        c0.next.insert(0.into(), 1);
        let mut b2 = rec(2, Event::Booted, "b", 0);
        b2.next.insert(0.into(), 1);
        let full = vec![
            rec(1, Event::Booted, "a", 0),
            c0,
            rec(1, Event::Parked, "a", 0),
            b2.clone(),
        ];
        let snapshot = view(&full).snapshot();
        assert!(snapshot.parked.iter().any(|(o, _)| *o == o0));
        let mut cp = Record::of(2, Event::Checkpoint, "b", 0);
        cp.body = Body::Checkpoint {
            snapshot: Box::new(snapshot.clone()),
        };
        let mut unpark = rec(2, Event::Claimed, "b", 0);
        unpark.set_unpark(true);
        unpark.set_park_at(Some(p(2)));
        let repark = rec(2, Event::Parked, "b", 0);
        // The log as the cleaner left it ahead of the replay: #1 and #2
        // erased.
        let mut read = View::new();
        for (pos, r) in [
            (0, &full[0]),
            (3, &b2),
            (4, &cp),
            (5, &unpark),
            (6, &repark),
        ] {
            let _ = read.apply(p(pos), r);
        }
        let mut from = View::from_snapshot(&snapshot);
        for (pos, r) in [(4, &cp), (5, &unpark), (6, &repark)] {
            let _ = from.apply(p(pos), r);
        }
        for (v, how) in [(&read, "read from #0"), (&from, "from the checkpoint")] {
            assert!(!v.contest(o0).unwrap().late, "{how}: not stale");
            assert_eq!(
                v.parked_order(o0).map(|p| p.at),
                Some(p(6)),
                "{how}: parked again"
            );
        }
    }

    /// R54, R15: a void completion (its writer revoked after the order's
    /// next holder parked it) takes the order out of the park.
    #[test]
    fn a_void_completion_takes_its_order_out_of_the_park() {
        let o0 = OrderId::new(0, 0);
        let mut c0 = rec(1, Event::Claimed, "a", 0);
        c0.next.insert(0.into(), 1);
        let mut late = rec(3, Event::Completed, "c", 0);
        late.order_keyed = true;
        let log = vec![
            rec(1, Event::Booted, "a", 0),
            c0,
            rec(1, Event::Parked, "a", 0),
        ];
        assert!(view(&log).parked_order(o0).is_some());
        let mut all = log;
        all.push(late);
        let v = view(&all);
        assert!(v.parked_order(o0).is_none(), "finished: parked no more");
        assert!(v.snapshot().parked.is_empty());
        assert!(v.ready(0, 1).is_empty());
    }

    #[test]
    fn a_cancel_is_noted_only_for_an_order_not_completed() {
        let (o0, o1, o5) = (OrderId::new(0, 0), OrderId::new(0, 1), OrderId::new(0, 5));
        let mut c1 = rec(1, Event::Claimed, "a", 1);
        c1.next.insert(0.into(), 2);
        let log = vec![
            rec(1, Event::Booted, "a", 0),
            rec(1, Event::Claimed, "a", 0),
            rec(1, Event::Committed, "a", 0),
            rec(1, Event::Completed, "a", 0),
            Record::cancel(o0, "op", 0, "too late"),
            Record::cancel(o5, "op", 0, "not yet claimed"),
            Record::cancel(o5, "op2", 0, "a second one"),
            c1,
            Record::cancel(o1, "op", 0, "held"),
        ];
        let v = view(&log);
        assert_eq!(v.cancel(o0), None, "completed: left as it is");
        assert_eq!(
            v.cancel(o5),
            Some((p(5), "not yet claimed")),
            "beyond the frontier, the first"
        );
        assert_eq!(v.cancel(o1), Some((p(8), "held")));
        assert_eq!(v.void, 0);
        assert!(
            v.instance(n(0)).is_none(),
            "a cancel is no instance's record"
        );
        assert_eq!(v.hold(n(1)).unwrap().order, o1, "the hold is untouched");
        // Behind the frontier with nothing known: settled and forgotten.
        let mut c = rec(1, Event::Claimed, "a", 9);
        c.next.insert(0.into(), 10);
        let v = view(&[c, Record::cancel(OrderId::new(0, 3), "op", 0, "x")]);
        assert_eq!(v.cancel(OrderId::new(0, 3)), None);
        // Checkpoints carry the cancels still to act on.
        let v = view(&log);
        let back = View::from_snapshot(&v.snapshot());
        assert_eq!(back.cancel(o5), Some((p(5), "not yet claimed")));
        assert_eq!(back.cancel(o1), Some((p(8), "held")));
    }

    #[test]
    fn records_of_a_fenced_incarnation_are_void() {
        let log = vec![
            rec(1, Event::Booted, "old", 0),
            rec(1, Event::Booted, "new", 0),
            rec(1, Event::Claimed, "old", 5),
        ];
        let v = view(&log);
        assert!(
            v.hold(n(1)).is_none(),
            "a claim by the fenced incarnation counts for nothing"
        );
        assert_eq!(v.next_offset(0.into()), 0);
        assert_eq!(v.void, 1);
    }

    #[test]
    fn a_duplicate_append_is_void() {
        let mut c = rec(1, Event::Claimed, "a", 0);
        c.seq = 2;
        let mut y = rec(1, Event::Yielded, "a", 0);
        y.seq = 3;
        let v = view(&[c.clone(), y, c]);
        assert!(
            v.hold(n(1)).is_none(),
            "the second copy of the claim does not reopen it"
        );
        assert_eq!(v.void, 1);
    }

    #[test]
    fn the_first_decision_wins() {
        let log = vec![
            rec(2, Event::Claimed, "a", 0),
            rec(2, Event::Committed, "a", 0),
            rec(2, Event::Yielded, "a", 0),
        ];
        assert_eq!(view(&log).hold(n(2)).unwrap().committed, Some(p(1)));
        let log = vec![
            rec(2, Event::Claimed, "a", 0),
            rec(2, Event::Yielded, "a", 0),
            rec(2, Event::Committed, "a", 0),
        ];
        assert!(view(&log).hold(n(2)).is_none());
    }

    /// R11, R34: a claim that met no rival commits itself; its writer's
    /// own yield right after it (met only in a compacted log, where the
    /// rival it met was erased) is the decision after all, and closes the
    /// hold; after an explicit `committed`, a yield is stray.
    #[test]
    fn a_yield_undoes_a_claim_read_as_its_own_commit() {
        let log = vec![rec(2, Event::Claimed, "a", 0)];
        let v = view(&log);
        assert_eq!(v.hold(n(2)).unwrap().committed, Some(p(0)));
        assert_eq!(
            v.contest(OrderId::new(0, 0)).unwrap().stances[&n(2)].1,
            Stance::Committed
        );
        let log = vec![
            rec(2, Event::Claimed, "a", 0),
            rec(2, Event::Yielded, "a", 0),
        ];
        let v = view(&log);
        assert!(v.hold(n(2)).is_none());
        assert_eq!(
            v.contest(OrderId::new(0, 0)).unwrap().stances[&n(2)].1,
            Stance::Yielded
        );
        assert_eq!(v.void, 0);
    }

    #[test]
    fn frontier_survives_a_superseded_claim() {
        let mut c2 = rec(1, Event::Claimed, "a", 3);
        c2.next.insert(0.into(), 8);
        // Compaction kept only the newer claim; its `next` remembers 0..8.
        assert_eq!(view(&[c2]).next_offset(0.into()), 8);
    }

    /// R10, R42: a replay that the log cleaner passed reads an instance's
    /// old `booted` and claim before its place, while after it the cleaner
    /// erased that claim's completion and the next incarnation's `booted`
    /// (each had a newer record of its key). The next incarnation's records
    /// name their `booted` (`booted_at`): it is current, its claim closes
    /// the old hold, and the instance holds nothing (a compaction test on
    /// Apache Kafka found the old hold resumed and its order run twice).
    #[test]
    fn a_newer_incarnation_whose_booted_was_erased_is_current() {
        let at = |mut r: Record, b: u64| {
            r.booted_at = Some(p(b));
            r
        };
        let mut c1 = at(rec(4, Event::Claimed, "y", 1), 3);
        c1.next.insert(0.into(), 2);
        let log = [
            (0, rec(4, Event::Booted, "x", 0)),
            (1, at(rec(4, Event::Claimed, "x", 0), 0)),
            // 2: x's completion of 0:0, 3: y's booted: erased.
            (4, c1),
            (5, at(rec(4, Event::Completed, "y", 1), 3)),
            (6, rec(4, Event::Booted, "z", 0)),
        ];
        let mut v = View::new();
        for (pos, r) in &log {
            assert_eq!(v.apply(p(*pos), r), Ok(()), "#{pos}");
        }
        assert!(v.hold(n(4)).is_none(), "{:?}", v.hold(n(4)));
        assert_eq!((v.void, v.adopted), (0, 1));
        // An older incarnation's record, by its `booted_at`, stays void;
        // one that names no `booted` too.
        let mut v2 = View::new();
        let _ = v2.apply(p(0), &rec(4, Event::Booted, "x", 0));
        let _ = v2.apply(p(1), &rec(4, Event::Booted, "y", 0));
        let zombie = at(rec(4, Event::Claimed, "x", 3), 0);
        assert_eq!(v2.apply(p(2), &zombie), Err(Void::Fenced));
        assert_eq!(
            v2.apply(p(3), &rec(4, Event::Claimed, "w", 3)),
            Err(Void::Fenced)
        );
        // A `booted_at` at or past the record's own position proves nothing.
        let odd = at(rec(4, Event::Claimed, "w", 3), 9);
        assert_eq!(v2.apply(p(4), &odd), Err(Void::Fenced));
        assert_eq!(
            v2.incarnation(n(4)).map(|i| i.to_string()),
            Some("y".into())
        );
    }

    #[test]
    fn a_claim_behind_the_frontier_with_no_contest_is_late() {
        let mut c = rec(1, Event::Claimed, "a", 9);
        c.next.insert(0.into(), 10);
        let v = view(&[c, rec(2, Event::Claimed, "b", 4)]);
        assert!(v.contest(OrderId::new(0, 4)).unwrap().late);
        assert!(!v.contest(OrderId::new(0, 9)).unwrap().late);
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn any_record() -> impl Strategy<Value = Record> {
            (
                1u32..4,
                0usize..Event::ALL.len(),
                0i64..3,
                prop_oneof![Just("a"), Just("b")],
                0u64..5,
                proptest::option::of(1u32..4),
                proptest::option::of(0u64..20),
                proptest::option::of(0i64..5),
                0u32..4,
            )
                .prop_map(|(i, ev, o, inc, seq, by, seen, next, attempt)| {
                    let ev = Event::ALL[ev];
                    let mut r = rec(i, ev, inc, o);
                    r.seq = seq;
                    r.set_by(by);
                    r.set_seen(seen);
                    r.set_attempt(attempt);
                    r.set_fences(Some(if seq % 2 == 0 { "a".into() } else { "b".into() }));
                    if let Some(n) = next {
                        r.next.insert(0.into(), n);
                    }
                    if ev == Event::Lease && seq == 3 {
                        r.set_order_id(Some("id".into()));
                    }
                    r
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

            /// Any sequence of well-formed records — however absurd — folds
            /// without panicking, the frontier never goes down, and a hold
            /// is always an instance's own claim.
            #[test]
            fn replay_never_panics(log in proptest::collection::vec(any_record(), 0..40)) {
                let mut v = View::new();
                let mut last = 0;
                for (i, r) in log.iter().enumerate() {
                    let _ = v.apply(p(i as u64), r);
                    let f = v.next_offset(0.into());
                    prop_assert!(f >= last);
                    last = f;
                }
                for (i, s) in v.instances() {
                    if let Some(h) = &s.hold {
                        // A hold is an instance's own claim, or (pending) its
                        // revocation of another's hold of the same order.
                        let c = &log[h.claim_pos.get() as usize];
                        if h.pending {
                            prop_assert_eq!(c.event(), Event::Revoked);
                            prop_assert_eq!(c.by(), Some(i));
                        } else {
                            prop_assert_eq!(c.event(), Event::Claimed);
                            prop_assert_eq!(c.instance, i);
                        }
                        prop_assert_eq!(c.order(), Some(h.order));
                    }
                }
            }
        }
    }

    fn at(mut r: Record, ts: u64) -> Record {
        r.ts = ts;
        r
    }

    #[test]
    fn the_idle_queue_is_longest_idle_first_without_the_passed_over() {
        let mut log = vec![
            at(rec(1, Event::Booted, "a", 0), 30),
            at(rec(2, Event::Booted, "b", 0), 10),
            at(rec(3, Event::Booted, "c", 0), 20),
        ];
        assert_eq!(
            view(&log).idle_queue(),
            ns(&[2, 3, 1]),
            "by the time each came to hold nothing"
        );
        // 2 claims 0:0: out of the queue, and at the end of every line.
        log.push(at(rec(2, Event::Claimed, "b", 0), 40));
        let v = view(&log);
        assert_eq!(v.idle_queue(), ns(&[3, 1]));
        let ends = BTreeMap::from([(0.into(), 5)]);
        let waiting = OrderId::new(0, 1);
        assert_eq!(
            turns(&v, &ends, n(3)),
            vec![Turn {
                order: waiting,
                ahead: ns(&[])
            }]
        );
        assert_eq!(
            turns(&v, &ends, n(1)),
            vec![Turn {
                order: waiting,
                ahead: ns(&[3])
            }]
        );
        assert_eq!(
            turns(&v, &ends, n(2)),
            vec![Turn {
                order: waiting,
                ahead: ns(&[3, 1])
            }]
        );
        assert!(
            turns(&v, &BTreeMap::from([(0.into(), 1)]), n(3)).is_empty(),
            "nothing waiting"
        );
        // 2 completes: back in the queue, at its end.
        log.push(at(rec(2, Event::Committed, "b", 0), 41));
        log.push(at(rec(2, Event::Completed, "b", 0), 50));
        assert_eq!(view(&log).idle_queue(), ns(&[3, 1, 2]));
        // 1 claims 0:1 after deferring to 3: 3 is out of the queue until it
        // writes again.
        let mut c = at(rec(1, Event::Claimed, "a", 1), 60);
        c.set_passed_over(vec![3]);
        log.push(c);
        assert_eq!(view(&log).idle_queue(), ns(&[2]));
        log.push(at(rec(3, Event::Booted, "c2", 0), 70));
        assert_eq!(view(&log).idle_queue(), ns(&[2, 3]));
        // A revoked incarnation is not idle (it stops); its next one is.
        let mut r = at(rec(1, Event::Revoked, "c2", 1), 80);
        r.set_by(Some(3));
        r.set_fences(Some("a".into()));
        r.set_seen(Some(6));
        log.push(r);
        let v = view(&log);
        assert!(v.instance(n(1)).unwrap().revoked.is_some());
        assert!(!v.idle_queue().contains(&n(1)));
    }

    /// A completion that says its process exits: until the instance's next
    /// `booted`, it is not in the queue. Under the old rule it joined the
    /// queue at its completion, and in a burst (every process exiting after
    /// its order, ORDERS_PER_PROCESS=1) a restarting process was often the
    /// head, and the order first in its line waited for its boot.
    #[test]
    fn an_instance_whose_process_exits_joins_the_queue_at_its_next_boot() {
        let done = |i, inc: &str, o, ts, exits| {
            let mut r = at(rec(i, Event::Completed, inc, o), ts);
            r.set_exits(exits);
            r
        };
        let mut log = vec![
            at(rec(1, Event::Booted, "a", 0), 10),
            at(rec(2, Event::Booted, "b", 0), 20),
            at(rec(3, Event::Booted, "c", 0), 30),
            at(rec(1, Event::Claimed, "a", 0), 40),
            at(rec(1, Event::Committed, "a", 0), 41),
            done(1, "a", 0, 50, true),
            // 2 and 3 restart after orders of their own (not shown: they
            // came to hold nothing after 1 did).
            at(rec(2, Event::Booted, "b2", 0), 60),
            at(rec(3, Event::Booted, "c2", 0), 70),
        ];
        let v = view(&log);
        assert_eq!(
            v.idle_queue(),
            ns(&[2, 3]),
            "1's process is exiting: not the head (the old rule: [1, 2, 3])"
        );
        assert!(v.instance(n(1)).unwrap().exiting);
        let ends = BTreeMap::from([(0.into(), 5)]);
        let first = |v: &View| {
            (1..=3)
                .find(|&i| turns(v, &ends, n(i))[0].ahead.is_empty())
                .unwrap()
        };
        assert_eq!(
            first(&v),
            2,
            "the waiting order is 2's, not the exiting 1's"
        );
        // 1's next process boots: back in the queue, at its end.
        log.push(at(rec(1, Event::Booted, "a2", 0), 80));
        assert_eq!(view(&log).idle_queue(), ns(&[2, 3, 1]));
        // A completion that does not say so (an older writer's, or below
        // ORDERS_PER_PROCESS) joins the queue at once, as before.
        for r in [
            at(rec(2, Event::Claimed, "b2", 1), 90),
            at(rec(2, Event::Committed, "b2", 1), 91),
            done(2, "b2", 1, 100, false),
        ] {
            log.push(r);
        }
        assert_eq!(view(&log).idle_queue(), ns(&[3, 1, 2]));
        // A void completion (here a fenced incarnation's) says nothing.
        log.push(done(3, "c", 2, 110, true));
        let v = view(&log);
        assert!(!v.instance(n(3)).unwrap().exiting);
        assert_eq!(v.idle_queue(), ns(&[3, 1, 2]));
    }

    #[test]
    fn the_j_th_order_waiting_is_the_j_th_idle_instance_s() {
        let log = vec![
            rec(1, Event::Booted, "a", 0),
            rec(2, Event::Booted, "b", 0),
            rec(3, Event::Booted, "c", 0),
        ];
        let v = view(&log);
        let ends = BTreeMap::from([(0.into(), 1), (1.into(), 1), (2.into(), 0)]);
        let (p0, p1) = (OrderId::new(0, 0), OrderId::new(1, 0));
        let ahead = |me| {
            turns(&v, &ends, me)
                .into_iter()
                .map(|t| (t.order, t.ahead))
                .collect::<Vec<_>>()
        };
        assert_eq!(ahead(n(1)), vec![(p0, ns(&[])), (p1, ns(&[2, 3]))]);
        assert_eq!(ahead(n(2)), vec![(p0, ns(&[1])), (p1, ns(&[]))]);
        assert_eq!(ahead(n(3)), vec![(p0, ns(&[1, 2])), (p1, ns(&[2]))]);
        // More orders waiting than idle instances: lines wrap around.
        let ends = BTreeMap::from([(0.into(), 1), (1.into(), 1), (2.into(), 1), (3.into(), 1)]);
        let firsts: Vec<usize> = turns(&v, &ends, n(1))
            .iter()
            .map(|t| t.ahead.len())
            .collect();
        assert_eq!(firsts, vec![0, 2, 1, 0]);
    }

    fn urgent() -> crate::record::Topic {
        crate::record::Topic::named("urgent").unwrap()
    }

    /// R28, R57: the orders waiting are lined up by their topic's place
    /// in the list (parked orders ready ahead of new ones within a topic),
    /// orders of a topic not listed are left out, and the lines are dealt
    /// out over the idle queue in that order.
    #[test]
    fn waiting_orders_are_lined_up_by_topic_priority() {
        use crate::record::Topic;
        let u = Lane::new(urgent(), 0);
        let other = Lane::new(Topic::named("other").unwrap(), 0);
        // Three idle instances; both listed topics' frontiers at 3.
        let mut b = rec(1, Event::Booted, "a", 0);
        b.next = BTreeMap::from([(Lane::from(0), 3), (u, 3)]);
        let v = view(&[
            b,
            rec(2, Event::Booted, "b", 0),
            rec(3, Event::Booted, "c", 0),
        ]);
        assert_eq!(v.idle_queue(), ns(&[1, 2, 3]));
        let ready = [OrderId::new(0, 1), u.at(2), other.at(0)];
        let ends = BTreeMap::from([(Lane::from(0), 5), (u, 5), (other, 5)]);
        let topics = [urgent(), Topic::MAIN];
        let lines = |me| {
            turns_with(&v, &ready, &ends, &topics, n(me))
                .into_iter()
                .map(|t| (t.order, t.ahead))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lines(1),
            vec![
                (u.at(2), ns(&[])),
                (u.at(3), ns(&[2, 3])),
                (OrderId::new(0, 1), ns(&[3])),
                (OrderId::new(0, 3), ns(&[])),
            ]
        );
        assert_eq!(
            lines(2).iter().map(|l| l.1.len()).collect::<Vec<_>>(),
            vec![1, 0, 2, 1]
        );
        // Main topic only: the urgent orders are left out.
        let main_only = turns_with(&v, &ready, &ends, &[Topic::MAIN], n(1));
        let orders: Vec<OrderId> = main_only.iter().map(|t| t.order).collect();
        assert_eq!(orders, vec![OrderId::new(0, 1), OrderId::new(0, 3)]);
        // Nothing of a listed topic waiting: no turn at all.
        let others = BTreeMap::from([(other, 5)]);
        assert!(turns_with(&v, &[other.at(0)], &others, &topics, n(1)).is_empty());
        assert_eq!(crate::boot::priority(&topics, Topic::MAIN), Some(1));
        assert_eq!(crate::boot::priority(&topics, other.topic), None);
        assert_eq!(crate::boot::priority(&[], other.topic), Some(0));
    }

    /// R13, R57: an order of a named topic with the main topic's
    /// partition and offset is another order: its claim moves its own
    /// lane's frontier only, its contest is apart, and a claim of the main
    /// topic's order after it is not late.
    #[test]
    fn orders_of_two_topics_at_one_offset_are_two_orders() {
        let u = Lane::new(urgent(), 0);
        let (uo, mo) = (u.at(0), OrderId::new(0, 0));
        let mut c1 = rec(1, Event::Claimed, "a", 0).with_order(uo);
        c1.set_attempt(1);
        c1.next = BTreeMap::from([(u, 1)]);
        let log = vec![
            rec(1, Event::Booted, "a", 0),
            rec(2, Event::Booted, "b", 0),
            c1,
        ];
        let v = view(&log);
        assert_eq!(v.next_offset(u), 1);
        assert_eq!(v.next_offset(0.into()), 0);
        assert_eq!(v.hold(n(1)).unwrap().order, uo);
        assert!(v.contest(mo).is_none());
        let mut c2 = rec(2, Event::Claimed, "b", 0);
        c2.next = BTreeMap::from([(Lane::from(0), 1), (u, 1)]);
        let mut log = log;
        log.push(c2);
        let v = view(&log);
        let (cu, cm) = (v.contest(uo).unwrap(), v.contest(mo).unwrap());
        assert!(!cu.late);
        assert!(!cm.late, "the main order was at its frontier");
        assert_eq!(v.hold(n(2)).unwrap().order, mo);
        assert_eq!(v.hold(n(2)).unwrap().committed, Some(p(3)), "no rival");
        assert_eq!(v.hold(n(1)).unwrap().committed, Some(p(2)), "no rival");
        // A completion of one leaves the other open; a cancel of one is
        // the other's no more.
        let mut done = rec(1, Event::Completed, "a", 0).with_order(uo);
        done.set_attempt(1);
        log.push(done);
        log.push(Record::cancel(mo, "op", 0, "x"));
        let v = view(&log);
        assert!(v.contest(uo).unwrap().completed_at.is_some());
        assert!(v.contest(mo).unwrap().completed_at.is_none());
        assert!(v.cancel(mo).is_some());
        assert!(v.cancel(uo).is_none());
        // The frontiers survive a checkpoint, per lane.
        let back = View::from_snapshot(&v.snapshot());
        assert_eq!(back.frontier(), v.frontier());
        assert_eq!(back.frontier().len(), 2);
    }
}
