//! Checkpoints (docs/protocol.md R20, R23, R24): a record
//! (`<instance>:checkpoint`) that carries a [`Snapshot`] of its writer's
//! [`View`](crate::boot::View) as it stood before position `at` (written
//! as structs of its own, src/record/wire.rs), so that
//! boot reads on from the newest checkpoint near the end of the log
//! (pool_worker/src/kafka/clients.rs) instead of replaying all of history. A snapshot leaves out settled contests, order
//! ids beyond the newest [`ID_MEMORY`] (or [`ID_MEMORY_BYTES`]) and counters;
//! why that and starting from any checkpoint are safe:
//! docs/protocol-proofs.md, "Checkpoints".

pub use crate::record::wire::{Snapshot, ID_MEMORY, ID_MEMORY_BYTES};
use crate::record::{Incarnation, Position};

/// What a process whose last transaction held its heir's `booted` leaves
/// that heir (docs/protocol.md R16, "Handed view"): its View as a
/// snapshot, which the heir boots from and reads on after, as from a
/// checkpoint (R24: any writer's will do), and where the newest checkpoint
/// in the log lies, so that the heir writes the next one when R23 says.
/// The shell passes it through the state directory
/// (pool_worker/src/settle.rs); the heir takes it only if it names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandedView {
    /// The incarnation it is for.
    pub heir: Incarnation,
    /// The newest checkpoint its giver read covers the log before this
    /// position.
    pub checkpoint: Position,
    pub snapshot: Snapshot,
}

/// A process writes a checkpoint at boot when the newest one it knows of
/// covers less than the log minus this many positions (about 80 orders of
/// three records). Small, so that a boot reads little (R20): a
/// checkpoint without order ids is a few hundred bytes.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 250;

/// How old a checkpoint may be and still be where a boot starts
/// (docs/protocol.md R24): younger than the claims topic's
/// `min.compaction.lag.ms` (7 days as scripts/create-topics.sh makes it),
/// so that nothing written after it can have been erased. Past it, a
/// `booted` written after the checkpoint may be gone while records of that
/// incarnation survive, and a replay from the checkpoint would take them
/// for a fenced incarnation's; a replay from the log's beginning does not.
pub const DEFAULT_CHECKPOINT_MAX_AGE_MS: u64 = 6 * 24 * 3600 * 1000;

/// Instance `i`'s record `seq` of event `ev` about order 0:`o`, as its
/// writer appends it (with its frontier); for the tests here and
/// pool_worker/src/kafka/tools.rs's (a test hook: the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub fn test_record(
    i: u32,
    ev: crate::record::Event,
    inc: &str,
    seq: u64,
    o: i64,
) -> crate::record::Record {
    use crate::record::{Event, OrderId, Outcome, Record, Status};
    let mut r = Record::of(i, ev, inc, 0);
    r.seq = seq;
    if ev.needs_order() {
        r = r.with_order(OrderId::new(0, o));
        r.set_attempt(1);
        r.next.insert(0.into(), o + 1);
    }
    if ev == Event::Completed {
        r.set_outcome(Some(Outcome::not_run(Status::Ok, "x")));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::test_record as rec;
    use super::*;
    use crate::boot::View;
    use crate::claim::decide;
    use crate::record::{Event, InstanceNo, OrderId, Position, Record};
    use std::collections::BTreeSet;

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

    /// `view`'s checkpoint, through the record's JSON as the shell writes
    /// and reads it: the snapshot and the record's bytes.
    fn through_a_record(view: &View) -> (Snapshot, Vec<u8>) {
        let mut r = Record::of(2, Event::Checkpoint, "b", 0);
        r.seq = 9;
        r.set_snapshot(Some(Box::new(view.snapshot())));
        let bytes = r.encode();
        let back = Record::decode(Some(r.key().as_bytes()), Some(&bytes)).expect("decodes");
        (back.snapshot().expect("snapshot").clone(), bytes)
    }

    /// The log, and after it what only some snapshots write: an instance
    /// that exits after its completion, and a cancel of an order still
    /// being negotiated.
    fn fuller_log() -> Vec<Record> {
        let mut log = log();
        let mut done = rec(3, Event::Completed, "c", 5, 2);
        done.set_exits(true);
        log.push(done);
        log.push(Record::cancel(OrderId::new(0, 1), "op", 0, "by hand"));
        log
    }

    /// A View as a checkpoint keeps it comes back from the checkpoint's
    /// record the same, field for field (`View`'s own `==`).
    #[test]
    fn a_view_comes_back_from_its_checkpoint_the_same() {
        let log = fuller_log();
        for cut in 0..=log.len() {
            let kept = View::from_snapshot(&replay(View::new(), &log[..cut], 0).snapshot());
            let (snap, _) = through_a_record(&kept);
            assert_eq!(View::from_snapshot(&snap), kept, "cut at {cut}");
            assert_eq!(snap, kept.snapshot(), "cut at {cut}");
        }
    }

    /// The keys a checkpoint writes are the wire format's (docs/protocol.md
    /// R20; src/record/wire.rs), whatever the View keeps: a key that is not
    /// listed here is bookkeeping of the View leaking into records that
    /// every later version must read.
    #[test]
    fn a_checkpoint_writes_the_wire_keys_and_no_others() {
        use serde_json::Value;
        fn keys(v: &Value) -> BTreeSet<&str> {
            v.as_object()
                .expect("an object")
                .keys()
                .map(String::as_str)
                .collect()
        }
        /// `got` is `always`, and some of `sometimes`.
        fn check(what: &str, got: BTreeSet<&str>, always: &[&str], sometimes: &[&str]) {
            let always: BTreeSet<&str> = always.iter().copied().collect();
            let extra: BTreeSet<&str> = got.difference(&always).copied().collect();
            assert!(always.is_subset(&got), "{what}: {got:?}");
            assert!(
                extra.iter().all(|k| sometimes.contains(k)),
                "{what}: {extra:?}"
            );
        }
        let (_, bytes) = through_a_record(&replay(View::new(), &fuller_log(), 0));
        let json: Value = serde_json::from_slice(&bytes).unwrap();
        let snap = &json["snapshot"];
        check(
            "snapshot",
            keys(snap),
            &["at", "instances", "frontier", "contests", "ids"],
            &["cancels"],
        );
        assert!(snap["cancels"].is_array(), "the log cancels an order");
        let (mut holds, mut exiting) = (0, 0);
        for inst in snap["instances"].as_object().unwrap().values() {
            check(
                "instance",
                keys(inst),
                &[
                    "booted",
                    "last_seq",
                    "hold",
                    "revoked",
                    "last_completed",
                    "last_ts",
                    "idle_ts",
                ],
                &["passed_over", "exiting"],
            );
            exiting += usize::from(inst.get("exiting").is_some());
            if !inst["hold"].is_null() {
                holds += 1;
                check(
                    "hold",
                    keys(&inst["hold"]),
                    &[
                        "order",
                        "claim_pos",
                        "attempt",
                        "committed",
                        "order_id",
                        "last_ts",
                        "last_pos",
                        "incarnation",
                        "rank",
                        "pending",
                        "took_over",
                    ],
                    &[],
                );
            }
        }
        assert!(holds > 0 && exiting > 0, "{snap}");
        let contests = snap["contests"].as_array().unwrap();
        assert!(!contests.is_empty());
        for c in contests {
            check(
                "contest",
                keys(&c[1]),
                &[
                    "stances",
                    "late",
                    "completed_at",
                    "finished",
                    "ranks",
                    "heirs",
                ],
                &[],
            );
        }
    }

    #[test]
    fn a_checkpoint_without_a_snapshot_is_foreign() {
        let r = br#"{"instance":2,"event":"checkpoint","incarnation":"b","ts":0}"#;
        assert!(Record::decode(Some(b"2:checkpoint"), Some(r)).is_err());
    }
}
