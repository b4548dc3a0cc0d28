//! Checkpoints (docs/protocol.md R20, R23, R24): a record
//! (`<instance>:checkpoint`) that carries a [`Snapshot`] of its writer's
//! [`View`](crate::boot::View) as it stood before position `at`, so that
//! boot reads on from the newest checkpoint near the end of the log
//! (src/kafka.rs) instead of replaying all of history. A snapshot leaves out settled contests, order
//! ids beyond the newest [`ID_MEMORY`] (or [`ID_MEMORY_BYTES`]) and counters;
//! why that and starting from any checkpoint are safe:
//! docs/protocol-proofs.md, "Checkpoints".

use crate::boot::{Contest, Instance};
use crate::record::{InstanceNo, OrderId, Position};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Order ids a snapshot remembers (the newest announced), at most.
pub const ID_MEMORY: usize = 10_000;

/// ... and in at most about this many bytes, so that a checkpoint stays well
/// under Kafka's default `max.message.bytes` (1 MB).
pub const ID_MEMORY_BYTES: usize = 512 * 1024;

/// A process writes a checkpoint at boot when the newest one it knows of
/// covers less than the log minus this many positions (about 300 orders).
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 1_000;

/// How old a checkpoint may be and still be where a boot starts
/// (docs/protocol.md R24): younger than the claims topic's
/// `min.compaction.lag.ms` (7 days as scripts/create-topics.sh makes it),
/// so that nothing written after it can have been erased. Past it, a
/// `booted` written after the checkpoint may be gone while records of that
/// incarnation survive, and a replay from the checkpoint would take them
/// for a fenced incarnation's; a replay from the log's beginning does not.
pub const DEFAULT_CHECKPOINT_MAX_AGE_MS: u64 = 6 * 24 * 3600 * 1000;

/// A [`View`](crate::boot::View) as it stood before position `at`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// The view after every record before this position: read on from here.
    pub at: Position,
    /// Every instance number the log mentions.
    pub instances: BTreeMap<InstanceNo, Instance>,
    /// The claim frontier, per orders partition.
    pub frontier: BTreeMap<i32, i64>,
    /// Contests not settled yet.
    pub contests: Vec<(OrderId, Contest)>,
    /// The newest order ids announced: id, order, position.
    pub ids: Vec<(String, OrderId, Position)>,
    /// Operators' cancels of orders not completed yet: order, position,
    /// reason (docs/protocol.md R51, R52). Absent when none,
    /// so that older readers still read such a checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancels: Vec<(OrderId, Position, String)>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::boot::View;
    use crate::claim::decide;
    use crate::record::{Event, Outcome, Record, Status};

    /// Instance `i`'s record `seq` of event `ev` about order 0:`o`, as its
    /// writer appends it (with its frontier); also for src/claims.rs's test.
    pub(crate) fn rec(i: u32, ev: Event, inc: &str, seq: u64, o: i64) -> Record {
        let mut r = Record::of(i, ev, inc, 0);
        r.seq = seq;
        if ev.needs_order() {
            r = r.with_order(OrderId::new(0, o));
            r.set_attempt(1);
            r.next.insert(0, o + 1);
        }
        if ev == Event::Completed {
            r.set_outcome(Some(Outcome::not_run(Status::Ok, "x")));
        }
        r
    }

    /// A log with a completed order, an open negotiation, a committed hold
    /// and an announced id.
    fn log() -> Vec<Record> {
        let mut announce = rec(3, Event::Lease, "c", 4, 2);
        announce.set_order_id(Some("report-7".into()));
        vec![
            rec(1, Event::Booted, "a", 1, 0),
            rec(2, Event::Booted, "b", 1, 0),
            rec(3, Event::Booted, "c", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(1, Event::Committed, "a", 3, 0),
            rec(1, Event::Completed, "a", 4, 0),
            rec(2, Event::Claimed, "b", 2, 1),
            rec(3, Event::Claimed, "c", 2, 2),
            rec(3, Event::Committed, "c", 3, 2),
            announce,
            rec(1, Event::Booted, "a2", 1, 0),
            rec(1, Event::Claimed, "a2", 2, 1),
        ]
    }

    fn replay(from: View, log: &[Record], start: usize) -> View {
        let mut v = from;
        for (p, r) in log.iter().enumerate().skip(start) {
            let _ = v.apply(Position::new(p as u64), r);
        }
        v
    }

    #[test]
    fn a_view_loaded_from_a_checkpoint_decides_like_a_full_replay() {
        let log = log();
        let full = replay(View::new(), &log, 0);
        for cut in 0..=log.len() {
            let before = replay(View::new(), &log[..cut], 0);
            // Through the record's JSON, as the shell would read it.
            let mut r = Record::of(2, Event::Checkpoint, "b", 0);
            r.seq = 9;
            r.set_snapshot(Some(Box::new(before.snapshot())));
            let back =
                Record::decode(Some(r.key().as_bytes()), Some(&r.encode())).expect("decodes");
            let snap = back.snapshot().expect("snapshot");
            assert_eq!(snap.at, Position::new(cut as u64));
            let resumed = replay(View::from_snapshot(snap), &log, cut);
            assert_eq!(resumed.summary(), full.summary(), "cut at {cut}");
            assert_eq!(
                resumed.id_owner("report-7"),
                full.id_owner("report-7"),
                "cut at {cut}"
            );
            for i in (1..=3).map(InstanceNo::new) {
                if let Some(h) = full.hold(i) {
                    assert_eq!(
                        decide(&resumed, i, h.order),
                        decide(&full, i, h.order),
                        "cut at {cut}, instance {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_snapshot_leaves_out_settled_contests_and_a_late_claim_still_yields() {
        let log = log();
        let v = replay(View::new(), &log, 0);
        let snap = v.snapshot();
        assert!(
            snap.contests.iter().all(|(o, _)| *o != OrderId::new(0, 0)),
            "order 0:0 is settled"
        );
        // A stalled instance claims 0:0 again, after the checkpoint.
        let mut late = rec(4, Event::Claimed, "d", 2, 0);
        late.next.clear();
        let mut resumed = View::from_snapshot(&snap);
        let _ = resumed.apply(snap.at, &late);
        assert!(matches!(
            decide(&resumed, InstanceNo::new(4), OrderId::new(0, 0)),
            crate::claim::Decision::Yield(_)
        ));
    }

    #[test]
    fn a_checkpoint_without_a_snapshot_is_foreign() {
        let r = br#"{"instance":2,"event":"checkpoint","incarnation":"b","ts":0}"#;
        assert!(Record::decode(Some(b"2:checkpoint"), Some(r)).is_err());
    }
}
