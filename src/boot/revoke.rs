//! Revocations and takeovers (docs/protocol.md R37–R39).

use super::{Hold, Stance, View, Void};
use crate::record::{Attempt, Body, Cite, OrderId, Position, Record};

impl View {
    /// A revocation at `pos` of instance `rec.instance`'s hold of `order`.
    /// Valid only if the hold wrote nothing since the revoker looked, so
    /// that every reader agrees (R37): it closes the hold, counts its
    /// holder as yielded and fences its incarnation (R38). A revoker that
    /// holds nothing holds the order from here, pending (R39).
    pub(super) fn apply_revoke(
        &mut self,
        pos: Position,
        rec: &Record,
        order: OrderId,
    ) -> Result<(), Void> {
        let Body::Revoked {
            by,
            fences,
            seen,
            rank,
            attempt,
            ..
        } = &rec.body
        else {
            return Ok(());
        };
        let i = rec.instance;
        let inst = self.instances.entry(i).or_default();
        let Some(hold) = inst
            .hold
            .take_if(|h| h.order == order && h.last_pos == *seen && h.incarnation == *fences)
        else {
            return Err(Void::Stray);
        };
        inst.revoked = Some(hold.incarnation.clone());
        // A revoked holder is out of the contest, like one that yielded.
        let contest = self.contests.entry(order).or_default();
        // A late claim stays late in its heir's hands (it may be a claim of
        // an order completed and forgotten); a committed hold was never
        // late to its holder.
        let late = hold.committed.is_none() && contest.late_for(i);
        contest.stances.insert(i, (hold.claim_pos, Stance::Yielded));
        let rank = rank.unwrap_or(contest.rank(i).0);
        // The revoker holds the order in the revoked hold's place until its
        // takeover claim lands: the two appends are not atomic, and a
        // revoker that dies between them must not leave the order held by
        // nobody (R39).
        let heir = self.instances.entry(*by).or_default();
        if heir.hold.is_some() {
            return Ok(());
        }
        heir.hold = Some(Hold {
            order,
            claim_pos: pos,
            attempt: (*attempt).max(Attempt::FIRST),
            committed: None,
            order_id: hold.order_id,
            last_ts: rec.ts,
            last_pos: pos,
            incarnation: rec.incarnation.clone(),
            rank,
            pending: true,
            took_over: Some(Cite {
                instance: i,
                incarnation: hold.incarnation,
            }),
            // The order's key stays held, from the revocation on; the
            // takeover claim announces it again (R56).
            key: hold.key.map(|(k, _)| (k, pos)),
        });
        contest.claim(*by, pos, rank);
        if late {
            contest.heirs.remove(by);
        } else {
            contest.heirs.insert(*by);
        }
        Ok(())
    }
}
