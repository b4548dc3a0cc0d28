//! The idle queue and the lines of waiting orders (docs/protocol.md
//! R26–R30).

use super::View;
use crate::record::{Body, Event, InstanceNo, Lane, OrderId, Record, Topic};
use std::collections::BTreeMap;

impl View {
    /// Keeps the idle queue (docs/protocol.md R26, R30) after a
    /// valid record: its writer is back in the queue if it was passed over;
    /// an instance that came to hold nothing joins it as of the record's
    /// `ts`, unless its process exits after this record (a `completed` that
    /// says `exits`: it joins at its next `booted`); the instances a claim
    /// passed over leave it. Liveness only: no rule of the negotiation reads
    /// any of it.
    pub(super) fn note_idle(&mut self, rec: &Record) {
        if let Some(w) = self.instances.get_mut(&rec.writer()) {
            w.passed_over = false;
        }
        if let Some(inst) = self.instances.get_mut(&rec.instance) {
            match rec.event() {
                Event::Booted => inst.exiting = false,
                Event::Completed if matches!(rec.body, Body::Completed { exits: true, .. }) => {
                    inst.exiting = true
                }
                _ => {}
            }
        }
        let closes = matches!(
            rec.event(),
            Event::Booted | Event::Yielded | Event::Completed | Event::Revoked | Event::Parked
        );
        if let Some(inst) = self
            .instances
            .get_mut(&rec.instance)
            .filter(|s| closes && s.hold.is_none())
        {
            inst.idle_ts = rec.ts;
        }
        if let Body::Claimed { passed_over, .. } = &rec.body {
            for i in passed_over {
                if let Some(s) = self.instances.get_mut(i).filter(|_| *i != rec.writer()) {
                    s.passed_over = true;
                }
            }
        }
    }

    /// The idle queue: every instance whose current incarnation holds
    /// nothing, is not revoked, has not said that it exits and was not
    /// passed over since it last wrote, longest idle first (by `idle_ts`,
    /// then by number). Every reader of the same records computes the same
    /// queue.
    pub fn idle_queue(&self) -> Vec<InstanceNo> {
        let mut q: Vec<(u64, InstanceNo)> = self
            .instances
            .iter()
            .filter(|(_, s)| {
                s.hold.is_none()
                    && !s.passed_over
                    && !s.exiting
                    && s.booted
                        .as_ref()
                        .is_some_and(|b| s.revoked.as_ref() != Some(&b.incarnation))
            })
            .map(|(i, s)| (s.idle_ts, *i))
            .collect();
        q.sort_unstable();
        q.into_iter().map(|(_, i)| i).collect()
    }
}

/// An order waiting and an idle instance's place in its line
/// ([`turns`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub order: OrderId,
    /// The instances ahead in the order's line: none, the instance is
    /// preferred and claims at once; otherwise it defers to them, for
    /// `CLAIM_DEFER_MS` times their number (docs/protocol.md R28, R29).
    pub ahead: Vec<InstanceNo>,
}

/// The orders waiting (the frontier of each partition with one, in
/// partition order) and instance `me`'s place in each one's line. The line
/// of the j-th order waiting is the idle queue ([`View::idle_queue`])
/// starting from its j-th instance (wrapping around), so the j-th instance
/// of the queue is first in line for the j-th order; an instance out of the
/// queue stands at its end. Readers of the same records agree on the lines,
/// which is what keeps the herd away; disagreement costs time or a rival
/// claim, never safety: any set of claimants is settled by
/// [`crate::claim::decide`].
pub fn turns(view: &View, ends: &BTreeMap<Lane, i64>, me: InstanceNo) -> Vec<Turn> {
    turns_with(view, &[], ends, &[], me)
}

/// [`turns`], with the parked orders `ready` to be claimed again (R55)
/// and the orders topics in priority order (`topics`; R57): the orders
/// waiting are listed by their topic's place in `topics` (an order of a
/// topic not in it is left out; no topics: every topic alike), and in
/// each topic the parked orders ready come before those at the frontier.
pub fn turns_with(
    view: &View,
    ready: &[OrderId],
    ends: &BTreeMap<Lane, i64>,
    topics: &[Topic],
    me: InstanceNo,
) -> Vec<Turn> {
    let fresh = ends
        .iter()
        .map(|(&l, &end)| (l.at(view.next_offset(l)), end))
        .filter(|(o, end)| o.offset < *end)
        .map(|(o, _)| o);
    let mut waiting: Vec<(usize, OrderId)> = ready
        .iter()
        .copied()
        .chain(fresh)
        .filter_map(|o| priority(topics, o.topic).map(|r| (r, o)))
        .collect();
    // Stable: in one topic, ready parked orders stay ahead of new ones.
    waiting.sort_by_key(|&(r, _)| r);
    if waiting.is_empty() {
        return Vec::new();
    }
    let mut queue = view.idle_queue();
    if !queue.contains(&me) {
        queue.push(me);
    }
    let n = queue.len();
    let k = queue.iter().position(|&i| i == me).unwrap_or(n - 1);
    waiting
        .into_iter()
        .enumerate()
        .map(|(j, (_, order))| {
            let start = j % n;
            let place = (k + n - start) % n;
            Turn {
                order,
                ahead: (0..place).map(|m| queue[(start + m) % n]).collect(),
            }
        })
        .collect()
}

/// A topic's place in the priority list `topics` (0 first); `None` for a
/// topic not in it. No topics: every topic is first.
pub fn priority(topics: &[Topic], topic: Topic) -> Option<usize> {
    if topics.is_empty() {
        return Some(0);
    }
    topics.iter().position(|&t| t == topic)
}
