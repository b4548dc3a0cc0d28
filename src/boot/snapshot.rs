//! The View to and from a checkpoint's snapshot (docs/protocol.md R20,
//! R23, R24; src/checkpoint.rs).

use super::{Contest, View};
use crate::checkpoint::{Snapshot, ID_MEMORY, ID_MEMORY_BYTES};
use crate::record::OrderId;

impl View {
    /// This view as a checkpoint's snapshot (src/checkpoint.rs says what it
    /// leaves out and why that is safe).
    pub fn snapshot(&self) -> Snapshot {
        let mut ids: Vec<(String, OrderId, u64)> = self
            .ids
            .iter()
            .map(|(id, (o, pos))| (id.clone(), *o, *pos))
            .collect();
        ids.sort_by_key(|(_, _, pos)| std::cmp::Reverse(*pos));
        ids.truncate(ID_MEMORY);
        // Keep the record well under Kafka's default max.message.bytes (1 MB),
        // counting the ids as written (JSON escaping included).
        let mut bytes = 0;
        ids.retain(|(id, _, _)| {
            bytes += crate::record::json_len(id) + 40;
            bytes <= ID_MEMORY_BYTES
        });
        // Outcomes without their output tails: those are in the `completed`
        // records, and a snapshot of many instances would not fit a record.
        let mut instances = self.instances.clone();
        for inst in instances.values_mut() {
            if let Some((_, _, _, outcome)) = inst.last_completed.as_mut() {
                *outcome = outcome.without_output();
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
            .map(|(o, (p, r))| (*o, *p, r.clone()))
            .collect();
        Snapshot {
            at: self.end,
            instances,
            frontier: self.frontier.clone(),
            contests,
            ids,
            cancels,
        }
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
                .map(|(id, o, pos)| (id.clone(), (*o, *pos)))
                .collect(),
            checkpoint: snap.at,
            cancels: snap
                .cancels
                .iter()
                .map(|(o, p, r)| (*o, (*p, r.clone())))
                .collect(),
            ..View::default()
        }
    }
}
