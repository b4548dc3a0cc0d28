//! Holds and contests: claims, decisions, completions (docs/protocol.md
//! R11–R15), order ids (R46).

use super::{
    raise, Completion, Contest, Hold, IdOwner, Instance, Settled, Stance, View, Void,
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
            ..
        } = &rec.body
        else {
            return;
        };
        let i = rec.instance;
        let takeover = !takeover_of.is_empty();
        let continues = takeover
            && self
                .instances
                .get(&i)
                .and_then(|s| s.hold.as_ref())
                .is_some_and(|h| h.pending && h.order == order);
        let contest = self.contests.entry(order).or_insert_with(|| Contest {
            late: behind && !takeover,
            ..Contest::default()
        });
        let rank = rank.unwrap_or(i.get());
        contest.claim(i, pos, rank);
        if continues {
            // As the pending hold was.
        } else if takeover {
            contest.heirs.insert(i);
        } else {
            contest.heirs.remove(&i);
        }
        // R34: a first claim that met no rival is its own decision, a
        // commit at the claim's own position (no `committed` follows it).
        let fused = !takeover && contest.unrivalled_for(i);
        if fused {
            contest.stances.insert(i, (pos, Stance::Committed));
        }
        raise(&mut self.frontier, order.partition, order.offset + 1);
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
        });
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
