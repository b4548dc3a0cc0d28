//! Holds and contests: claims, decisions, completions (docs/protocol.md
//! R11–R15), order ids (R46).

use super::{
    raise, Completion, Contest, Hold, IdOwner, Instance, Parked, Settled, Stance, View, Void,
    CONTEST_MEMORY,
};
use crate::record::{Attempt, Body, Event, OrderId, Outcome, Position, Record, Status};

impl View {
    /// A valid claim of `order` at `pos`: the writer's hold (R11), its stance
    /// and rank in the contest (R12, R33), the frontier past it (R13). A
    /// contest first known from a claim `behind` the frontier is late (R14),
    /// unless the claim is a takeover: one that names the hold it took over
    /// follows a valid revocation of an open hold, and is late only if it
    /// continues a pending hold that inherited lateness (R39).
    pub(super) fn apply_claim(
        &mut self,
        pos: Position,
        rec: &Record,
        order: OrderId,
        behind: bool,
    ) {
        let Body::Claimed {
            attempt,
            takeover_of,
            rank,
            order_id,
            unpark,
            park_at,
            order_key,
            ..
        } = &rec.body
        else {
            return;
        };
        let i = rec.instance;
        // R55: a claim out of a park before `stale_before` (the snapshot
        // this view was loaded from, or a forgotten settlement), of an
        // order it neither has parked nor negotiates, is stale: the order
        // was completed before, and the snapshot (or R12) forgot its
        // settled contest. Late, as a first claim behind the frontier is
        // (R14). (A view that read the completion knows the contest, and
        // its writer yields alike.) Not by a checkpoint read on the way:
        // such a view may have missed the park, erased by a newer one,
        // and the claim is then the first it meets of a live order.
        let stale_unpark = *unpark
            && park_at.is_some_and(|p| p < self.stale_before)
            && !self.parked.contains_key(&order)
            && !self.contests.contains_key(&order);
        // R56: the claim announces the order's key at its own position; an
        // unpark claim of an older writer (without `order_key`) has the
        // key its park named.
        let parked_key = self
            .parked
            .get(&order)
            .filter(|_| *unpark)
            .and_then(|p| p.key.clone());
        let key = order_key.clone().or(parked_key).map(|k| (k, pos));
        let takeover = !takeover_of.is_empty();
        let continues = takeover
            && self
                .instances
                .get(&i)
                .and_then(|s| s.hold.as_ref())
                .is_some_and(|h| h.pending && h.order == order);
        // A takeover follows a revocation, a claim of a parked order a park
        // (R55): both are behind the frontier by design, never late, but
        // for a stale claim out of the park.
        let contest = self.contests.entry(order).or_insert_with(|| Contest {
            late: behind && !takeover && (!unpark || stale_unpark),
            ..Contest::default()
        });
        let rank = rank.unwrap_or(i.get());
        contest.claim(i, pos, rank);
        // R55: a first claim of an order parked since, made before its
        // writer read the park, is of the round the park ended.
        let stale = contest.round.is_some() && !takeover && !unpark;
        if stale {
            contest.stale.insert(i);
        } else {
            contest.stale.remove(&i);
        }
        // R55: any other claim of a parked order takes it out of the park
        // (the claim announces its key, R56).
        if !stale {
            self.parked.remove(&order);
        }
        if continues {
            // As the pending hold was.
        } else if takeover {
            contest.heirs.insert(i);
        } else {
            contest.heirs.remove(&i);
        }
        // R34: a first claim that met no rival is its own decision, a
        // commit at the claim's own position (no `committed` follows it).
        let fused = !takeover && !stale && contest.unrivalled_for(i);
        if fused {
            contest.stances.insert(i, (pos, Stance::Committed));
        }
        raise(&mut self.frontier, order.lane(), order.offset + 1);
        let inst = self.instances.entry(i).or_default();
        inst.hold = Some(Hold {
            order,
            claim_pos: pos,
            attempt: (*attempt).max(Attempt::FIRST),
            committed: fused.then_some(pos),
            order_id: order_id.clone(),
            last_ts: rec.ts,
            last_pos: pos,
            incarnation: rec.incarnation.clone(),
            rank,
            pending: false,
            took_over: takeover_of.first().cloned(),
            key,
        });
    }

    /// A `parked` of `order` at `pos` (R54): it closes its writer's
    /// committed hold of the order, which counts as yielded, and the order
    /// waits, held by nobody, until an instance claims it again (R55). One
    /// that matches no hold (a replay of a compacted log, whose claim of
    /// the order an older record of its writer's superseded) still parks
    /// the order if nobody holds it and it is not completed; one that
    /// matches an undecided hold is stray.
    pub(super) fn apply_park(
        &mut self,
        pos: Position,
        rec: &Record,
        order: OrderId,
    ) -> Result<(), Void> {
        let Body::Parked {
            attempt,
            until,
            order_key,
            ..
        } = &rec.body
        else {
            return Ok(());
        };
        let i = rec.instance;
        let held = self
            .instances
            .get(&i)
            .and_then(|s| s.hold.as_ref())
            .filter(|h| h.order == order)
            .map(|h| (h.claim_pos, h.committed.is_some()));
        let contest = self.contests.entry(order).or_default();
        let done = contest.completed_at.is_some() || contest.finished.is_some();
        match held {
            Some((claim_pos, true)) if !done => {
                contest.stances.insert(i, (claim_pos, Stance::Yielded));
                if let Some(s) = self.instances.get_mut(&i) {
                    s.hold = None;
                }
            }
            Some(_) => return Err(Void::Stray),
            None => {
                let someone_holds = self
                    .instances
                    .values()
                    .any(|s| s.hold.as_ref().is_some_and(|h| h.order == order));
                if done || someone_holds {
                    return Err(Void::Stray);
                }
            }
        }
        if let Some(c) = self.contests.get_mut(&order) {
            c.parked_once = true;
            c.round = Some(pos);
        }
        self.parked.insert(
            order,
            Parked {
                at: pos,
                attempt: (*attempt).max(Attempt::FIRST),
                until: *until,
                key: order_key.clone(),
            },
        );
        Ok(())
    }

    /// A `committed`, `yielded`, `completed` or `lease` of `order` at `pos`:
    /// it must match the writer's open hold of that order (else stray). It
    /// renews the hold (R36), may announce the order's id (R46), and the
    /// first decision after the claim is the decision (R11).
    pub(super) fn apply_decision(
        &mut self,
        pos: Position,
        rec: &Record,
        order: OrderId,
    ) -> Result<(), Void> {
        let i = rec.instance;
        let inst = self.instances.entry(i).or_default();
        let Some(hold) = inst.hold.as_mut().filter(|h| h.order == order) else {
            return Err(Void::Stray);
        };
        hold.last_ts = hold.last_ts.max(rec.ts);
        if matches!(rec.body, Body::Lease { .. } | Body::Committed { .. }) {
            hold.last_pos = pos;
            hold.incarnation = rec.incarnation.clone();
        }
        // An id announced by the holder of a committed order (the first one
        // wins; a duplicate's own completion names its id too, but it is
        // never first).
        if let (Some(id), Some(_)) = (rec.order_id(), hold.committed) {
            hold.order_id = Some(id.to_string());
            self.ids
                .entry(id.to_string())
                .or_insert(IdOwner { order, at: pos });
        }
        // The order's key, announced by the holder of a committed order
        // (R56): the hold's place among the key's from here, kept on.
        if let (
            Body::Lease {
                order_key: Some(k), ..
            },
            Some(_),
            None,
        ) = (&rec.body, hold.committed, &hold.key)
        {
            hold.key = Some((k.clone(), pos));
        }
        let claim_pos = hold.claim_pos;
        let Some(stance) = inst.decide(pos, rec)? else {
            return Ok(());
        };
        if stance == Stance::Completed {
            self.completions += 1;
        }
        let contest = self.contests.entry(order).or_default();
        contest.stances.insert(i, (claim_pos, stance));
        if stance == Stance::Completed {
            contest.completed_at = Some(pos);
        }
        if contest.settled() {
            self.settled.push_back(Settled { at: pos, order });
        }
        Ok(())
    }

    /// A `completed` record is evidence that its order ran to its end (or
    /// was given up) even when it is void: a process appends `completed`
    /// only after reading its own commit back valid, and a fenced or revoked
    /// writer (a zombie, a holder cut off past its lease, a late copy of a
    /// valid completion) still ran the job. Compaction can erase the valid
    /// completion in favour of a void one with the same key, so the void
    /// one must still keep the order from being committed again (R15).
    pub(super) fn note_completion(&mut self, pos: Position, rec: &Record) {
        let Body::Completed { order, outcome, .. } = &rec.body else {
            return;
        };
        let order = *order;
        // A finished order waits no more (R54): a void completion (its
        // writer fenced or revoked) after a park by the order's next
        // holder must not leave it parked, or a reader from a checkpoint,
        // which keeps the park but not the settled contest, would claim it
        // out of the park and run it again.
        self.parked.remove(&order);
        let c = self.contests.entry(order).or_default();
        if c.finished.is_none() {
            c.finished = Some((pos, outcome.clone()));
            if c.settled() {
                self.settled.push_back(Settled { at: pos, order });
            }
        }
    }

    /// Forgets contests that settled more than [`CONTEST_MEMORY`] positions
    /// ago, so that memory does not grow with history (R12), and the
    /// cancels of their orders (R51).
    pub(super) fn forget_old_contests(&mut self, pos: Position) {
        while let Some(&Settled { at, order }) = self.settled.front() {
            if at.get() + CONTEST_MEMORY > pos.get() {
                break;
            }
            self.settled.pop_front();
            if self.contests.get(&order).is_some_and(Contest::settled) {
                self.contests.remove(&order);
                self.cancels.remove(&order);
                self.stale_before = self.stale_before.max(at);
            }
        }
    }
}

impl Instance {
    /// The stance a decision, completion or lease at `pos` gives this
    /// instance's open hold (R11), closing the hold on a yield or a
    /// completion; `None` when it changes no stance (a lease, a later
    /// `committed` that only raises the attempt).
    fn decide(&mut self, pos: Position, rec: &Record) -> Result<Option<Stance>, Void> {
        let Some(hold) = self.hold.as_mut() else {
            return Err(Void::Stray);
        };
        let stance = match (rec.event(), hold.committed) {
            (Event::Lease, _) => return Ok(None),
            // The first decision after a claim is the decision; a later
            // `committed` is a new attempt of the same run, a later
            // `yielded` nothing.
            (Event::Committed, Some(c)) => {
                // After a claim that was its own decision (R34), the first
                // `committed` marks the hold as decided by a record of its
                // own (a yield no longer undoes it, below).
                if c == hold.claim_pos {
                    hold.committed = Some(pos);
                }
                hold.attempt = hold.attempt.max(rec.attempt());
                return Ok(None);
            }
            (Event::Committed, None) => {
                hold.committed = Some(pos);
                hold.attempt = hold.attempt.max(rec.attempt());
                Stance::Committed
            }
            // R11: the writer's own yield after a claim read as its own
            // decision (R34) is the decision after all. A live writer never
            // writes it (its claim met no rival, so it runs the order); a
            // replay of a compacted log does meet it, where the rival
            // before the claim was erased (R42) and the writer, having
            // met that rival, yielded.
            (Event::Yielded, None) => {
                self.hold = None;
                Stance::Yielded
            }
            (Event::Yielded, Some(c)) if c == hold.claim_pos => {
                self.hold = None;
                Stance::Yielded
            }
            (Event::Yielded, Some(_)) => return Err(Void::Stray),
            // A completion closes the hold of its order. A valid completion
            // is written only after its writer's commit, but compaction may
            // have erased that commit (a void record of the same key
            // superseded it), so it is not required here.
            _ => {
                let (order, attempt) = (hold.order, hold.attempt);
                self.hold = None;
                let outcome = rec
                    .outcome()
                    .cloned()
                    .unwrap_or_else(|| Outcome::not_run(Status::Error, "missing outcome"));
                self.last_completed = Some(Completion {
                    order,
                    at: pos,
                    attempt,
                    outcome,
                });
                Stance::Completed
            }
        };
        Ok(Some(stance))
    }
}

/// Parked orders and keys (docs/protocol.md R54–R56): what a holder and an
/// idle instance ask of the View.
impl View {
    /// The orders parked and not claimed since, in order.
    pub fn parked(&self) -> impl Iterator<Item = (OrderId, &Parked)> {
        self.parked.iter().map(|(o, p)| (*o, p))
    }

    /// `order`, if it is parked.
    pub fn parked_order(&self, order: OrderId) -> Option<&Parked> {
        self.parked.get(&order)
    }

    /// Whether the order was ever parked: records about it are keyed
    /// `park:P:O` (R54).
    pub fn parked_once(&self, order: OrderId) -> bool {
        self.parked.contains_key(&order) || self.contests.get(&order).is_some_and(|c| c.parked_once)
    }

    /// How many holds of other instances than `me` have `key`, announced
    /// at a position before `at` (R56): those that go before a hold that
    /// got the key at `at`. Holds of `me`'s own order are not counted:
    /// they are rivals in its contest, and at most one of a contest runs
    /// (I1).
    pub fn key_ahead(&self, me: crate::record::InstanceNo, key: &str, at: Position) -> usize {
        let mine = self.hold(me).map(|h| h.order);
        self.holds_of_others(me)
            .filter(|h| Some(h.order) != mine)
            .filter_map(|h| h.key.as_ref())
            .filter(|(k, p)| k == key && *p < at)
            .count()
    }

    /// The open holds of every instance but `me` (R56's counts).
    fn holds_of_others(&self, me: crate::record::InstanceNo) -> impl Iterator<Item = &Hold> {
        self.instances
            .iter()
            .filter(move |(i, _)| **i != me)
            .filter_map(|(_, s)| s.hold.as_ref())
    }

    /// Whether a parked order of `key` due at `now` goes before `order`
    /// (a lower partition and offset): `order` waits behind it (R56).
    pub fn parked_ahead(&self, order: OrderId, key: &str, now: u64) -> bool {
        self.parked
            .range(..order)
            .any(|(_, p)| p.key.as_deref() == Some(key) && p.until.is_none_or(|u| u <= now))
    }

    /// Whether another instance than `me` holds an order of `key` in
    /// `order`'s lane with a lower offset whose key it announced after
    /// `at` (R56): a lower order claimed again (out of the park, or taken
    /// over) after `order` was claimed. [`View::key_ahead`] does not count
    /// it, yet `order` goes behind it.
    pub fn held_below(
        &self,
        me: crate::record::InstanceNo,
        order: OrderId,
        key: &str,
        at: Position,
    ) -> bool {
        self.holds_of_others(me)
            .filter(|h| h.order.lane() == order.lane() && h.order.offset < order.offset)
            .filter_map(|h| h.key.as_ref())
            .any(|(k, p)| k == key && *p > at)
    }

    /// The parked orders that an idle instance may claim at `now` (R55),
    /// in order: due (`until` passed), and, of a key, no more than it has
    /// room for (`limit` less its holds), first in order; and, at once,
    /// every one cancelled since (R52 completes it without running it).
    pub fn ready(&self, now: u64, limit: u32) -> Vec<OrderId> {
        let mut room: std::collections::BTreeMap<&str, usize> = Default::default();
        let mut out = Vec::new();
        for (o, p) in &self.parked {
            // Cancelled (R51): claimed again at once, to be completed
            // `cancelled` without running (R52), whatever it waits for.
            if self.cancels.contains_key(o) {
                out.push(*o);
                continue;
            }
            if p.until.is_some_and(|u| u > now) {
                continue;
            }
            if let Some(k) = p.key.as_deref() {
                let left = room.entry(k).or_insert_with(|| {
                    // Orders, not holds: rivals in one contest hold one
                    // order, and at most one of them runs it (I1).
                    let held: std::collections::BTreeSet<OrderId> = self
                        .instances
                        .values()
                        .filter_map(|s| s.hold.as_ref())
                        .filter(|h| h.key.as_ref().is_some_and(|(hk, _)| hk == k))
                        .map(|h| h.order)
                        .collect();
                    (limit as usize).saturating_sub(held.len())
                });
                if *left == 0 {
                    continue;
                }
                *left -= 1;
            }
            out.push(*o);
        }
        out
    }

    /// The earliest `until` of a parked order still ahead of `now`: when
    /// an idle instance looks again (R55).
    pub fn next_due(&self, now: u64) -> Option<u64> {
        self.parked
            .values()
            .filter_map(|p| p.until)
            .filter(|&u| u > now)
            .min()
    }
}
