//! The View to and from a checkpoint's snapshot (docs/protocol.md R20,
//! R23, R24; src/checkpoint.rs).

use super::{Cancel, Contest, IdOwner, View};
use crate::checkpoint::{Snapshot, ID_MEMORY, ID_MEMORY_BYTES};
use crate::record::{OrderId, Position};

impl View {
    /// This view as a checkpoint's snapshot (src/checkpoint.rs says what it
    /// leaves out and why that is safe).
    pub fn snapshot(&self) -> Snapshot {
        // Outcomes without their output tails: those are in the `completed`
        // records, and a snapshot of many instances would not fit a record.
        let mut instances = self.instances.clone();
        for inst in instances.values_mut() {
            if let Some(c) = inst.last_completed.as_mut() {
                c.outcome = c.outcome.without_output();
            }
        }
        let contests = self
            .contests
            .iter()
            .filter(|(_, c)| !c.settled())
            .map(|(o, c)| {
                let mut c = c.clone();
                if let Some((_, outcome)) = c.finished.as_mut() {
                    *outcome = outcome.without_output();
                }
                (*o, c)
            })
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
            instances: snap.instances.clone(),
            frontier: snap.frontier.clone(),
            contests: snap.contests.iter().cloned().collect(),
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
            cancels: snap
                .cancels
                .iter()
                .map(|(o, at, reason)| {
                    let reason = reason.clone();
                    (*o, Cancel { at: *at, reason })
                })
                .collect(),
            ..View::default()
        }
    }
}
