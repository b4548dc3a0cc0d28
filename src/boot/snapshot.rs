//! The View to and from a checkpoint's snapshot (docs/protocol.md R20,
//! R23, R24; src/checkpoint.rs). The snapshot is written as structs of its
//! own (src/record/wire.rs); every conversion here names each field on both
//! sides, so that a field added to the View or to the wire does not compile
//! until it is decided whether, and how, a checkpoint carries it.

use super::{
    Booted, Cancel, Completion, Contest, Hold, IdOwner, Instance, LastSeq, Parked, Stance, View,
};
use crate::record::wire::{self, Snapshot, ID_MEMORY, ID_MEMORY_BYTES};
use crate::record::{OrderId, Position};

impl View {
    /// This view as a checkpoint's snapshot (src/checkpoint.rs says what it
    /// leaves out and why that is safe).
    pub fn snapshot(&self) -> Snapshot {
        let instances = self
            .instances
            .iter()
            .map(|(i, inst)| (*i, wire::Instance::from(inst)))
            .collect();
        let contests = self
            .contests
            .iter()
            .filter(|(_, c)| !c.settled())
            .map(|(o, c)| (*o, wire::Contest::from(c)))
            .collect();
        // Cancels of orders still to run or running (a settled contest's
        // cancel has nothing left to do).
        let cancels = self
            .cancels
            .iter()
            .filter(|(o, _)| !self.contests.get(o).is_some_and(Contest::settled))
            .map(|(o, c)| (*o, c.at, c.reason.clone()))
            .collect();
        Snapshot {
            at: self.end,
            instances,
            frontier: self.frontier.clone(),
            contests,
            ids: self.newest_ids(),
            cancels,
            parked: self
                .parked
                .iter()
                .map(|(o, p)| (*o, wire::Parked::from(p)))
                .collect(),
        }
    }

    /// The newest order ids announced, newest first: at most [`ID_MEMORY`],
    /// in at most about [`ID_MEMORY_BYTES`] as written (JSON escaping
    /// included), so that the record stays well under Kafka's default
    /// `max.message.bytes` (1 MB).
    fn newest_ids(&self) -> Vec<(String, OrderId, Position)> {
        let mut ids: Vec<(String, OrderId, Position)> = self
            .ids
            .iter()
            .map(|(id, owner)| (id.clone(), owner.order, owner.at))
            .collect();
        ids.sort_by_key(|(_, _, at)| std::cmp::Reverse(*at));
        ids.truncate(ID_MEMORY);
        let mut bytes = 0;
        ids.retain(|(id, _, _)| {
            bytes += crate::record::json_len(id) + 40;
            bytes <= ID_MEMORY_BYTES
        });
        ids
    }

    /// The view a snapshot describes: read on from `snapshot.at`.
    pub fn from_snapshot(snap: &Snapshot) -> View {
        View {
            end: snap.at,
            instances: snap
                .instances
                .iter()
                .map(|(i, inst)| (*i, Instance::from(inst)))
                .collect(),
            frontier: snap.frontier.clone(),
            contests: snap
                .contests
                .iter()
                .map(|(o, c)| (*o, Contest::from(c)))
                .collect(),
            ids: snap
                .ids
                .iter()
                .map(|(id, order, at)| {
                    let owner = IdOwner {
                        order: *order,
                        at: *at,
                    };
                    (id.clone(), owner)
                })
                .collect(),
            checkpoint: snap.at,
            stale_before: snap.at,
            cancels: snap
                .cancels
                .iter()
                .map(|(o, at, reason)| {
                    let reason = reason.clone();
                    (*o, Cancel { at: *at, reason })
                })
                .collect(),
            parked: snap
                .parked
                .iter()
                .map(|(o, p)| (*o, Parked::from(p)))
                .collect(),
            ..View::default()
        }
    }
}

// Outcomes are written without their output tails: those are in the
// `completed` records, and a snapshot of many instances would not fit a
// record.

impl From<&Instance> for wire::Instance {
    fn from(inst: &Instance) -> Self {
        let Instance {
            booted,
            last_seq,
            hold,
            revoked,
            last_completed,
            last_ts,
            idle_ts,
            passed_over,
            exiting,
        } = inst;
        wire::Instance {
            booted: booted.as_ref().map(|b| (b.at, b.incarnation.clone())),
            last_seq: last_seq.as_ref().map(|l| (l.incarnation.clone(), l.seq)),
            hold: hold.as_ref().map(wire::Hold::from),
            revoked: revoked.clone(),
            last_completed: last_completed
                .as_ref()
                .map(|c| (c.order, c.at, c.attempt, c.outcome.without_output())),
            last_ts: *last_ts,
            idle_ts: *idle_ts,
            passed_over: *passed_over,
            exiting: *exiting,
        }
    }
}

impl From<&wire::Instance> for Instance {
    fn from(inst: &wire::Instance) -> Self {
        let wire::Instance {
            booted,
            last_seq,
            hold,
            revoked,
            last_completed,
            last_ts,
            idle_ts,
            passed_over,
            exiting,
        } = inst;
        Instance {
            booted: booted.as_ref().map(|(at, incarnation)| Booted {
                at: *at,
                incarnation: incarnation.clone(),
            }),
            last_seq: last_seq.as_ref().map(|(incarnation, seq)| LastSeq {
                incarnation: incarnation.clone(),
                seq: *seq,
            }),
            hold: hold.as_ref().map(Hold::from),
            revoked: revoked.clone(),
            last_completed: last_completed
                .as_ref()
                .map(|(order, at, attempt, outcome)| Completion {
                    order: *order,
                    at: *at,
                    attempt: *attempt,
                    outcome: outcome.clone(),
                }),
            last_ts: *last_ts,
            idle_ts: *idle_ts,
            passed_over: *passed_over,
            exiting: *exiting,
        }
    }
}

impl From<&Hold> for wire::Hold {
    fn from(h: &Hold) -> Self {
        let Hold {
            order,
            claim_pos,
            attempt,
            committed,
            order_id,
            last_ts,
            last_pos,
            incarnation,
            rank,
            pending,
            took_over,
            key,
        } = h;
        wire::Hold {
            order: *order,
            claim_pos: *claim_pos,
            attempt: *attempt,
            committed: *committed,
            order_id: order_id.clone(),
            last_ts: *last_ts,
            last_pos: *last_pos,
            incarnation: incarnation.clone(),
            rank: *rank,
            pending: *pending,
            took_over: took_over.clone(),
            key: key.clone(),
        }
    }
}

impl From<&wire::Hold> for Hold {
    fn from(h: &wire::Hold) -> Self {
        let wire::Hold {
            order,
            claim_pos,
            attempt,
            committed,
            order_id,
            last_ts,
            last_pos,
            incarnation,
            rank,
            pending,
            took_over,
            key,
        } = h;
        Hold {
            order: *order,
            claim_pos: *claim_pos,
            attempt: *attempt,
            committed: *committed,
            order_id: order_id.clone(),
            last_ts: *last_ts,
            last_pos: *last_pos,
            incarnation: incarnation.clone(),
            rank: *rank,
            pending: *pending,
            took_over: took_over.clone(),
            key: key.clone(),
        }
    }
}

impl From<&Parked> for wire::Parked {
    fn from(p: &Parked) -> Self {
        let Parked {
            at,
            attempt,
            until,
            key,
        } = p;
        wire::Parked {
            at: *at,
            attempt: *attempt,
            until: *until,
            key: key.clone(),
        }
    }
}

impl From<&wire::Parked> for Parked {
    fn from(p: &wire::Parked) -> Self {
        let wire::Parked {
            at,
            attempt,
            until,
            key,
        } = p;
        Parked {
            at: *at,
            attempt: *attempt,
            until: *until,
            key: key.clone(),
        }
    }
}

impl From<&Contest> for wire::Contest {
    fn from(c: &Contest) -> Self {
        let Contest {
            stances,
            late,
            completed_at,
            finished,
            ranks,
            heirs,
            parked_once,
            round,
            stale,
        } = c;
        wire::Contest {
            stances: stances
                .iter()
                .map(|(i, (at, s))| (*i, (*at, wire::Stance::from(*s))))
                .collect(),
            late: *late,
            completed_at: *completed_at,
            finished: finished
                .as_ref()
                .map(|(at, outcome)| (*at, outcome.without_output())),
            ranks: ranks.clone(),
            heirs: heirs.clone(),
            parked_once: *parked_once,
            round: *round,
            stale: stale.clone(),
        }
    }
}

impl From<&wire::Contest> for Contest {
    fn from(c: &wire::Contest) -> Self {
        let wire::Contest {
            stances,
            late,
            completed_at,
            finished,
            ranks,
            heirs,
            parked_once,
            round,
            stale,
        } = c;
        Contest {
            stances: stances
                .iter()
                .map(|(i, (at, s))| (*i, (*at, Stance::from(*s))))
                .collect(),
            late: *late,
            completed_at: *completed_at,
            finished: finished.clone(),
            ranks: ranks.clone(),
            heirs: heirs.clone(),
            parked_once: *parked_once,
            round: *round,
            stale: stale.clone(),
        }
    }
}

impl From<Stance> for wire::Stance {
    fn from(s: Stance) -> Self {
        match s {
            Stance::Undecided => wire::Stance::Undecided,
            Stance::Committed => wire::Stance::Committed,
            Stance::Yielded => wire::Stance::Yielded,
            Stance::Completed => wire::Stance::Completed,
        }
    }
}

impl From<wire::Stance> for Stance {
    fn from(s: wire::Stance) -> Self {
        match s {
            wire::Stance::Undecided => Stance::Undecided,
            wire::Stance::Committed => Stance::Committed,
            wire::Stance::Yielded => Stance::Yielded,
            wire::Stance::Completed => Stance::Completed,
        }
    }
}
