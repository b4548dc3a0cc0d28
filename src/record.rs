//! The records of the claims (coordination) topic.
//!
//! The claims topic is the only shared state of the pool: every instance writes
//! its story there and every instance reads everybody's story back. A record is
//! keyed `<instance>:<event>` (for example `3:claimed`) so that a compacted
//! topic keeps the newest record per instance and event type, as seed 002 asks;
//! its value is a small JSON object that a person can read with
//! `kcat -C -t work_claims -f '%k %s\n'`.
//!
//! This module only says what a record *is* and how it is written and parsed.
//! What records *mean* is in `boot.rs` (the replay) and `claim.rs` (the
//! negotiation); docs/protocol.md §2 and R2–R8 are the reference.
//!
//! Parsing is strict and never panics: anything pool_worker did not write (a
//! null key, a key that does not match the value, an unknown event, a field of
//! the wrong type, an instance number out of range) is a [`Foreign`] record,
//! which the replay skips with one warning.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

mod ids;
mod order_id;
mod result;
pub mod size;
pub mod text;
pub mod wire;
pub use ids::{Attempt, Incarnation, InstanceNo, Position};
pub use order_id::{Lane, OrderId, Topic, MAX_TOPICS, MAX_TOPIC_BYTES};
pub use result::ResultMessage;
pub use size::{
    fit_json, frontier_fits, json_len, MAX_FRONTIER_BYTES, MAX_REASON_BYTES, MAX_RECORD_BYTES,
    MAX_TAIL_BYTES, RECORD_LIMIT,
};
pub use text::describe;

/// Instance numbers are positive and at most this (a sanity bound, so that a
/// stray record cannot make the replay allocate for instance 4 billion).
pub const MAX_INSTANCE: u32 = 1_000_000;

/// The prefix of a cancel's key: `cancel:P:O` ([`Record::key`]).
pub const CANCEL_KEY: &str = "cancel:";

/// The key prefix of the records about an order once parked:
/// `park:P:O` (docs/protocol.md R54).
pub const PARK_KEY: &str = "park:";

/// The longest order `key` a record carries, as written in JSON
/// (docs/protocol.md R56); an order with a longer one is refused.
pub const MAX_ORDER_KEY_BYTES: usize = 256;

/// Most instances one claim may name in `passed_over` (a claim names those
/// ahead of its writer in one order's line, docs/protocol.md R30; the
/// writer names at most this many).
pub const MAX_PASSED_OVER: usize = 1_000;

/// The event types. The first four are seed 002's; the others are the fixes
/// and additions of docs/protocol.md §2.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// An incarnation of an instance starts; fences older incarnations.
    Booted,
    /// "I want this order."
    Claimed,
    /// "I won this order and run it."
    Committed,
    /// "I do not run this order."
    Yielded,
    /// "I still hold this order" (renewed while negotiating or running).
    Lease,
    /// A committed holder whose lease expired loses the order (always `by`).
    Revoked,
    /// "This order is done", with its outcome.
    Completed,
    /// A summary of the log before a position, so that boot need not replay
    /// all of it (src/checkpoint.rs).
    Checkpoint,
    /// An operator's `pool_worker cancel P:O`: the order is not to run (or
    /// to run no longer). Written by no instance: its `instance` is 0 and
    /// its key `cancel:P:O` (see [`Record::key`]); docs/protocol.md R51.
    Cancelled,
    /// "This order cannot run yet": its holder passes it over until it is
    /// due (`until`) or its key has room (`order_key`), and closes its
    /// hold. Keyed `park:P:O` (docs/protocol.md R54).
    Parked,
}

impl Event {
    pub const ALL: [Event; 10] = [
        Event::Booted,
        Event::Claimed,
        Event::Committed,
        Event::Yielded,
        Event::Lease,
        Event::Revoked,
        Event::Completed,
        Event::Checkpoint,
        Event::Cancelled,
        Event::Parked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::Booted => "booted",
            Event::Claimed => "claimed",
            Event::Committed => "committed",
            Event::Yielded => "yielded",
            Event::Lease => "lease",
            Event::Revoked => "revoked",
            Event::Completed => "completed",
            Event::Checkpoint => "checkpoint",
            Event::Cancelled => "cancelled",
            Event::Parked => "parked",
        }
    }

    fn parse(s: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// Events keyed by their order once it was parked (`park:P:O`,
    /// [`Record::key`]): a `parked` always, a `completed` of an order
    /// once parked.
    pub fn order_keyed(self) -> bool {
        matches!(self, Event::Completed | Event::Parked)
    }

    /// Events that concern one order and must name it.
    pub fn needs_order(self) -> bool {
        !matches!(self, Event::Booted | Event::Checkpoint)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an order ended.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The job ran and exited 0.
    Ok,
    /// The job ran and exited non-zero (or was killed by a signal).
    Failed,
    /// The job ran past its time limit and its process group was killed.
    TimedOut,
    /// The order could not be run: malformed, empty, program not found...
    Error,
    /// The order asked for something the pool's allow lists refuse.
    Refused,
    /// An order with the same `id` was already committed or completed.
    Duplicate,
    /// The order was attempted `MAX_ATTEMPTS` times, each attempt lost with
    /// its instance; it is not run again.
    GaveUp,
    /// The order was no longer in the orders topic when its instance went to
    /// read it: the broker had deleted it (retention, DeleteRecords). The
    /// reason names its offset and the partition's log start.
    Deleted,
    /// An operator cancelled the order (`pool_worker cancel`): it never ran,
    /// or its job was killed; the reason says which, and the operator's why.
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Error => "error",
            Status::Refused => "refused",
            Status::Duplicate => "duplicate",
            Status::GaveUp => "gave_up",
            Status::Deleted => "deleted",
            Status::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of running (or refusing to run) one order; carried by `completed`.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub duration_ms: u64,
    /// Why, for every status but `ok` and `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The last bytes of the job's standard output (bounded, lossy UTF-8).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout_tail: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// The order's W3C trace context (`traceparent`, from the order or its
    /// Kafka header; 55 bytes, checked), so a trace runs from the producer
    /// through the job to its completion. Added with issue 19: absent in
    /// older records, and ignored by older readers (an outcome, unlike a
    /// record, allows fields it does not know).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The order this one ran again (`PARTITION:OFFSET`; `pool_worker retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
}

impl Outcome {
    /// The outcome without its output tails (what a checkpoint keeps).
    pub fn without_output(&self) -> Outcome {
        Outcome {
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            ..self.clone()
        }
    }

    /// An order that never ran: `status` with a human reason.
    pub fn not_run(status: Status, reason: impl Into<String>) -> Self {
        Outcome {
            status,
            exit_code: None,
            duration_ms: 0,
            reason: Some(reason.into()),
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            traceparent: None,
            retry_of: None,
        }
    }
}

/// A record as it is on the wire: every field of every event, flat, in
/// the order written (docs/protocol.md §2). Only [`Record`]'s serde goes
/// through it: decoding checks it ([`Flat::validate`]) and then that it
/// carries no field of another event ([`Record::try_from`]).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Flat {
    /// The instance whose story this is (the key's instance).
    instance: InstanceNo,
    event: Event,
    /// The order's topic, when it is not the main one (docs/protocol.md
    /// R57).
    #[serde(default, skip_serializing_if = "Topic::is_main")]
    topic: Topic,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    /// The writer, when it is not `instance` (a forced `yielded`, a `revoked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    by: Option<InstanceNo>,
    /// The writer's incarnation (one per process start; see `booted`).
    incarnation: Incarnation,
    /// Writer's wall clock, milliseconds since the UNIX epoch.
    ts: u64,
    /// The writer incarnation's sequence number for this record (1, 2, ...).
    /// A producer retry can append a record twice; readers drop a record whose
    /// seq is not above the last one seen from that incarnation
    /// (docs/protocol.md R7).
    #[serde(default, skip_serializing_if = "is_zero64")]
    seq: u64,
    /// The position of the writer incarnation's own `booted`, on every
    /// record it writes once it read that back (docs/protocol.md R10): a
    /// reader whose log lost that `booted` to compaction still knows the
    /// incarnation is newer than a `booted` before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    booted_at: Option<Position>,
    /// Which run of the order this is (1 for the first; claims and commits).
    #[serde(default, skip_serializing_if = "is_zero")]
    attempt: Attempt,
    /// On a takeover claim: the hold it took over (its writer's revocation
    /// of that hold came first). See docs/protocol.md R39.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    takeover_of: Vec<Cite>,
    /// On claims and revocations: the claim's place in the negotiation (the
    /// lower wins). Absent: the writer's instance number. A takeover carries
    /// the rank of the hold it took over, so that it stands where that hold
    /// stood (docs/protocol.md R33).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rank: Option<u32>,
    /// On `revoked`: the incarnation of `instance` that loses its hold and
    /// whose later records are void (a fence, like `booted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fences: Option<Incarnation>,
    /// On `revoked`: the position of the newest record of the hold that the
    /// revoker saw. The revocation counts only if the hold has written
    /// nothing since (docs/protocol.md R37).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seen: Option<Position>,
    /// The writer's knowledge of the claim frontier: per orders partition,
    /// the lowest offset nobody has claimed yet. Carried by every record so
    /// that compaction never loses it (docs/protocol.md R8).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    next: BTreeMap<Lane, i64>,
    /// On a claim made after its writer deferred to other idle instances
    /// for the claim deferral time (`CLAIM_DEFER_MS`): those instances.
    /// Readers leave them out of the idle queue until they next write a
    /// record (docs/protocol.md R30).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    passed_over: Vec<InstanceNo>,
    /// On a claim of a parked order (docs/protocol.md R55). Absent: false.
    #[serde(default, skip_serializing_if = "is_false")]
    unpark: bool,
    /// On a claim of a parked order: the position of the park it ends
    /// (docs/protocol.md R55). Absent on an older writer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    park_at: Option<Position>,
    /// On `completed`: its writer's process exits after it (it has
    /// completed its `ORDERS_PER_PROCESS`). Readers leave the instance out
    /// of the idle queue until its next `booted` (docs/protocol.md
    /// R27). Absent: false (older writers never say it).
    #[serde(default, skip_serializing_if = "is_false")]
    exits: bool,
    /// The order's `id` (duplicate detection), on claims and completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    order_id: Option<String>,
    /// Human reason (yields, revocations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// On `parked`: not before this time (ms since the UNIX epoch), the
    /// order's `not_before` (docs/protocol.md R54).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<u64>,
    /// On `parked`, and on a `claimed` or a `lease` announcing it: the
    /// order's `key` (docs/protocol.md R56).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    order_key: Option<String>,
    /// On `completed`: how the order ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<Outcome>,
    /// On `checkpoint`: the writer's view of the log before a position
    /// (src/checkpoint.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<Box<wire::Snapshot>>,
}

/// A hold named in a takeover: instance and the incarnation that held it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cite {
    pub instance: InstanceNo,
    pub incarnation: Incarnation,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &Attempt) -> bool {
    n.get() == 0
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

impl Flat {
    fn order(&self) -> Option<OrderId> {
        Some(Lane::new(self.topic, self.partition?).at(self.offset?))
    }

    /// The checks of a record as a whole (the old flat `Record`'s, with
    /// their messages): ranges, the order of events that need one, and
    /// the fields each event must have.
    fn validate(&self) -> Result<(), Foreign> {
        let in_range = |n: InstanceNo| (1..=MAX_INSTANCE).contains(&n.get());
        if self.event == Event::Cancelled {
            // No instance's: instance 0, nobody's `by`, and nothing but the
            // order and a bounded reason.
            let reason_ok = self
                .reason
                .as_deref()
                .is_none_or(|r| json_len(r) <= MAX_REASON_BYTES);
            if self.instance.get() != 0
                || self.by.is_some()
                || !reason_ok
                || !self.next.is_empty()
                || self.outcome.is_some()
                || self.snapshot.is_some()
                || !self.takeover_of.is_empty()
                || !self.passed_over.is_empty()
            {
                return Err(Foreign::BadValue(
                    "a cancel carries an order and a reason only".into(),
                ));
            }
        } else if !in_range(self.instance) || self.by.is_some_and(|b| !in_range(b)) {
            return Err(Foreign::Range(format!("instance {}", self.instance)));
        }
        // A `booted` names no earlier one of its own; a cancel is nobody's.
        if self.booted_at.is_some() && matches!(self.event, Event::Booted | Event::Cancelled) {
            return Err(Foreign::BadValue(format!(
                "booted_at on a {} record",
                self.event
            )));
        }
        if self.takeover_of.iter().any(|c| !in_range(c.instance))
            || self.rank.is_some_and(|r| r > MAX_INSTANCE)
        {
            return Err(Foreign::Range("takeover_of".into()));
        }
        if self.passed_over.iter().any(|&i| !in_range(i))
            || self.passed_over.len() > MAX_PASSED_OVER
        {
            return Err(Foreign::Range("passed_over".into()));
        }
        if self.event.needs_order() {
            match (self.partition, self.offset) {
                (Some(p), Some(o)) if p >= 0 && o >= 0 => {}
                _ => {
                    return Err(Foreign::Range(
                        "missing or negative partition/offset".into(),
                    ))
                }
            }
        }
        if self.next.iter().any(|(l, &o)| l.partition < 0 || o < 0) {
            return Err(Foreign::Range("negative frontier".into()));
        }
        if self.event == Event::Checkpoint && self.snapshot.is_none() {
            return Err(Foreign::BadValue("checkpoint without snapshot".into()));
        }
        if self.exits && self.event != Event::Completed {
            return Err(Foreign::BadValue(
                "exits on a record other than completed".into(),
            ));
        }
        if self.event == Event::Completed && self.outcome.is_none() {
            return Err(Foreign::BadValue("completed without outcome".into()));
        }
        if self.event == Event::Revoked
            && (self.fences.is_none() || self.by.is_none() || self.seen.is_none())
        {
            return Err(Foreign::BadValue("revoked without fences/by/seen".into()));
        }
        if self.park_at.is_some() && !self.unpark {
            return Err(Foreign::BadValue(
                "park_at on a claim without unpark".into(),
            ));
        }
        if self
            .order_key
            .as_deref()
            .is_some_and(|k| k.is_empty() || json_len(k) > MAX_ORDER_KEY_BYTES)
        {
            return Err(Foreign::Range("order_key".into()));
        }
        Ok(())
    }
}

/// One coordination record (the value; the key is derived from it): the
/// envelope every record has and its event's own fields ([`Body`]). On the
/// wire it is one flat JSON object (docs/protocol.md §2), written and read
/// through [`Flat`]: a field that belongs to another event makes a record
/// foreign.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(try_from = "Flat", into = "Flat")]
pub struct Record {
    /// The instance whose story this is (the key's instance; 0 for a
    /// cancel).
    pub instance: InstanceNo,
    /// The writer's incarnation (one per process start; see `booted`).
    pub incarnation: Incarnation,
    /// Writer's wall clock, milliseconds since the UNIX epoch.
    pub ts: u64,
    /// The writer incarnation's sequence number for this record (1, 2, ...;
    /// 0: not numbered). A producer retry can append a record twice;
    /// readers drop a record whose seq is not above the last one seen from
    /// that incarnation (docs/protocol.md R7).
    pub seq: u64,
    /// The position of the writer incarnation's own `booted` (the writer's:
    /// a revocation's `by`), once it read it back; `None` before, and on
    /// older writers' records (docs/protocol.md R10).
    pub booted_at: Option<Position>,
    /// The writer's knowledge of the claim frontier: per orders partition,
    /// the lowest offset nobody has claimed yet. Carried by every record so
    /// that compaction never loses it (docs/protocol.md R8).
    pub next: BTreeMap<Lane, i64>,
    /// The event and its fields.
    pub body: Body,
    /// Keyed by its order (`park:P:O`), as the completion of an order once
    /// parked is (docs/protocol.md R54); not in the value, the key says it
    /// ([`Record::key`]).
    pub order_keyed: bool,
}

/// What a record says: one variant per event, with that event's fields.
/// `attempt` is which run of the order this is (1 for the first; 0: not
/// said, as older writers did on some events).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Body {
    /// An incarnation of an instance starts; fences older incarnations.
    Booted,
    /// "I want this order."
    Claimed {
        order: OrderId,
        attempt: Attempt,
        /// On a takeover claim: the hold it took over (its writer's
        /// revocation of that hold came first). See docs/protocol.md R39.
        takeover_of: Vec<Cite>,
        /// The claim's place in the negotiation (the lower wins). Absent:
        /// the writer's instance number. A takeover carries the rank of the
        /// hold it took over (docs/protocol.md R33).
        rank: Option<u32>,
        /// After a deferral (`CLAIM_DEFER_MS`): the idle instances its
        /// writer deferred to. Readers leave them out of the idle queue
        /// until they next write a record (docs/protocol.md R30).
        passed_over: Vec<InstanceNo>,
        /// The order's `id`, on a takeover of a hold that announced it.
        order_id: Option<String>,
        /// A claim of a parked order (docs/protocol.md R55): behind the
        /// frontier by design, late only if stale (`park_at`).
        unpark: bool,
        /// On an unpark claim, the position of the park it ends, as its
        /// writer read it (R55).
        park_at: Option<Position>,
        /// The order's `key`, announced by the claim itself: its writer
        /// read the order before claiming it, or the order's park or the
        /// hold it takes over named it (docs/protocol.md R56).
        order_key: Option<String>,
    },
    /// "I won this order and run it", or a new attempt of that run.
    Committed { order: OrderId, attempt: Attempt },
    /// "I do not run this order."
    Yielded {
        order: OrderId,
        attempt: Attempt,
        reason: Option<String>,
    },
    /// "I still hold this order"; with `order_id`, the order's id
    /// announced (docs/protocol.md R46).
    Lease {
        order: OrderId,
        attempt: Attempt,
        order_id: Option<String>,
        /// The order's `key`, announced (docs/protocol.md R56).
        order_key: Option<String>,
    },
    /// A hold whose lease expired is closed by another instance, `by`; the
    /// record's `instance` is the holder's.
    Revoked {
        order: OrderId,
        /// The writer.
        by: InstanceNo,
        /// The holder's incarnation that loses its hold and whose later
        /// records are void (a fence, like `booted`).
        fences: Incarnation,
        /// The position of the newest record of the hold that the revoker
        /// saw: the revocation counts only if the hold has written nothing
        /// since (docs/protocol.md R37).
        seen: Position,
        /// The taker's place in the negotiation.
        rank: Option<u32>,
        /// The taker's attempt.
        attempt: Attempt,
        reason: Option<String>,
    },
    /// "This order is done", with its outcome.
    Completed {
        order: OrderId,
        attempt: Attempt,
        /// Its writer's process exits after it (it has completed its
        /// `ORDERS_PER_PROCESS`): readers leave the instance out of the
        /// idle queue until its next `booted` (docs/protocol.md R27).
        exits: bool,
        /// The order's `id` (duplicate detection).
        order_id: Option<String>,
        outcome: Outcome,
    },
    /// The writer's view of the log before a position (src/checkpoint.rs).
    Checkpoint { snapshot: Box<wire::Snapshot> },
    /// An operator's `pool_worker cancel P:O` (docs/protocol.md R51).
    Cancelled {
        order: OrderId,
        reason: Option<String>,
    },
    /// "Not yet": the order waits, held by nobody, until `until` (its
    /// `not_before`) and until its `order_key` has room (docs/protocol.md
    /// R54–R56).
    Parked {
        order: OrderId,
        attempt: Attempt,
        until: Option<u64>,
        order_key: Option<String>,
    },
}

impl Body {
    /// The event (the body without its fields).
    pub fn event(&self) -> Event {
        match self {
            Body::Booted => Event::Booted,
            Body::Claimed { .. } => Event::Claimed,
            Body::Committed { .. } => Event::Committed,
            Body::Yielded { .. } => Event::Yielded,
            Body::Lease { .. } => Event::Lease,
            Body::Revoked { .. } => Event::Revoked,
            Body::Completed { .. } => Event::Completed,
            Body::Checkpoint { .. } => Event::Checkpoint,
            Body::Cancelled { .. } => Event::Cancelled,
            Body::Parked { .. } => Event::Parked,
        }
    }

    /// The order the body is about, if any.
    pub fn order(&self) -> Option<OrderId> {
        match self {
            Body::Booted | Body::Checkpoint { .. } => None,
            Body::Claimed { order, .. }
            | Body::Committed { order, .. }
            | Body::Yielded { order, .. }
            | Body::Lease { order, .. }
            | Body::Revoked { order, .. }
            | Body::Completed { order, .. }
            | Body::Cancelled { order, .. }
            | Body::Parked { order, .. } => Some(*order),
        }
    }

    /// A claim of `order` (attempt 1, no takeover, nobody passed over).
    pub fn claim(order: OrderId) -> Body {
        Body::Claimed {
            order,
            attempt: Attempt::FIRST,
            takeover_of: Vec::new(),
            rank: None,
            passed_over: Vec::new(),
            order_id: None,
            unpark: false,
            park_at: None,
            order_key: None,
        }
    }

    /// A completion of `order` with `outcome` (attempt 1).
    pub fn completed(order: OrderId, outcome: Outcome) -> Body {
        Body::Completed {
            order,
            attempt: Attempt::FIRST,
            exits: false,
            order_id: None,
            outcome,
        }
    }
}

impl From<Record> for Flat {
    fn from(r: Record) -> Flat {
        let mut f = Flat {
            instance: r.instance,
            event: r.body.event(),
            topic: Topic::MAIN,
            partition: None,
            offset: None,
            by: None,
            incarnation: r.incarnation,
            ts: r.ts,
            seq: r.seq,
            booted_at: r.booted_at,
            attempt: Attempt::default(),
            takeover_of: Vec::new(),
            rank: None,
            fences: None,
            seen: None,
            next: r.next,
            passed_over: Vec::new(),
            unpark: false,
            park_at: None,
            exits: false,
            order_id: None,
            reason: None,
            until: None,
            order_key: None,
            outcome: None,
            snapshot: None,
        };
        f.put_body(r.body);
        f
    }
}

impl Flat {
    /// Writes the fields of `body` (its order, and its event's own).
    fn put_body(&mut self, body: Body) {
        if let Some(o) = body.order() {
            (self.topic, self.partition, self.offset) =
                (o.topic, Some(o.partition), Some(o.offset));
        }
        let f = self;
        match body {
            Body::Booted => {}
            Body::Claimed {
                attempt,
                takeover_of,
                rank,
                passed_over,
                order_id,
                unpark,
                park_at,
                order_key,
                ..
            } => {
                (f.attempt, f.takeover_of, f.rank) = (attempt, takeover_of, rank);
                (f.passed_over, f.order_id, f.unpark) = (passed_over, order_id, unpark);
                (f.park_at, f.order_key) = (park_at, order_key);
            }
            Body::Committed { attempt, .. } => {
                f.attempt = attempt;
            }
            Body::Yielded {
                attempt, reason, ..
            } => {
                (f.attempt, f.reason) = (attempt, reason);
            }
            Body::Lease {
                attempt,
                order_id,
                order_key,
                ..
            } => {
                (f.attempt, f.order_id, f.order_key) = (attempt, order_id, order_key);
            }
            Body::Revoked {
                by,
                fences,
                seen,
                rank,
                attempt,
                reason,
                ..
            } => {
                (f.by, f.fences, f.seen) = (Some(by), Some(fences), Some(seen));
                (f.rank, f.attempt, f.reason) = (rank, attempt, reason);
            }
            Body::Completed {
                attempt,
                exits,
                order_id,
                outcome,
                ..
            } => {
                (f.attempt, f.exits, f.order_id) = (attempt, exits, order_id);
                f.outcome = Some(outcome);
            }
            Body::Checkpoint { snapshot } => {
                f.snapshot = Some(snapshot);
            }
            Body::Cancelled { reason, .. } => {
                f.reason = reason;
            }
            Body::Parked {
                attempt,
                until,
                order_key,
                ..
            } => {
                (f.attempt, f.until, f.order_key) = (attempt, until, order_key);
            }
        }
    }
}

impl TryFrom<Flat> for Record {
    type Error = Foreign;

    /// A flat record that passes [`Flat::validate`] and carries no field
    /// of another event.
    fn try_from(mut f: Flat) -> Result<Record, Foreign> {
        f.validate()?;
        f.own_fields_only()?;
        let incarnation = std::mem::take(&mut f.incarnation);
        let next = std::mem::take(&mut f.next);
        let (instance, ts, seq, booted_at) = (f.instance, f.ts, f.seq, f.booted_at);
        Ok(Record {
            instance,
            incarnation,
            ts,
            seq,
            booted_at,
            next,
            body: f.into_body()?,
            order_keyed: false,
        })
    }
}

impl Flat {
    /// Refuses a field (as written: a default is not written) that belongs
    /// to another event (R3).
    fn own_fields_only(&self) -> Result<(), Foreign> {
        let f = self;
        let ev = f.event;
        // The fields it carries (as written: a default is not written).
        let carried = [
            ("topic", !f.topic.is_main()),
            ("partition", f.partition.is_some()),
            ("offset", f.offset.is_some()),
            ("by", f.by.is_some()),
            ("attempt", f.attempt.get() != 0),
            ("takeover_of", !f.takeover_of.is_empty()),
            ("rank", f.rank.is_some()),
            ("fences", f.fences.is_some()),
            ("seen", f.seen.is_some()),
            ("passed_over", !f.passed_over.is_empty()),
            ("unpark", f.unpark),
            ("park_at", f.park_at.is_some()),
            ("exits", f.exits),
            ("order_id", f.order_id.is_some()),
            ("reason", f.reason.is_some()),
            ("until", f.until.is_some()),
            ("order_key", f.order_key.is_some()),
            ("outcome", f.outcome.is_some()),
            ("snapshot", f.snapshot.is_some()),
        ];
        let order = ["topic", "partition", "offset"].as_slice();
        let own: &[&str] = match ev {
            Event::Booted => &[],
            Event::Claimed => &[
                "attempt",
                "takeover_of",
                "rank",
                "passed_over",
                "order_id",
                "unpark",
                "park_at",
                "order_key",
            ],
            Event::Committed => &["attempt"],
            Event::Yielded => &["attempt", "reason"],
            Event::Lease => &["attempt", "order_id", "order_key"],
            Event::Revoked => &["by", "fences", "seen", "rank", "attempt", "reason"],
            Event::Completed => &["attempt", "exits", "order_id", "outcome"],
            Event::Checkpoint => &["snapshot"],
            Event::Cancelled => &["reason"],
            Event::Parked => &["attempt", "until", "order_key"],
        };
        let needs_order = ev.needs_order();
        if let Some((field, _)) = carried
            .iter()
            .find(|(name, on)| *on && !own.contains(name) && !(needs_order && order.contains(name)))
        {
            return Err(Foreign::BadValue(format!("{field} on a {ev} record")));
        }
        Ok(())
    }

    /// The typed body of a flat record that passed [`Flat::validate`] and
    /// [`Flat::own_fields_only`].
    fn into_body(self) -> Result<Body, Foreign> {
        let f = self;
        let ev = f.event;
        // Present where needed: validate() checked.
        let missing = || Foreign::BadValue(format!("{ev} record without its fields"));
        let o = f.order();
        let order = || o.ok_or_else(missing);
        let body = match ev {
            Event::Booted => Body::Booted,
            Event::Claimed => Body::Claimed {
                order: order()?,
                attempt: f.attempt,
                takeover_of: f.takeover_of,
                rank: f.rank,
                passed_over: f.passed_over,
                order_id: f.order_id,
                unpark: f.unpark,
                park_at: f.park_at,
                order_key: f.order_key,
            },
            Event::Committed => Body::Committed {
                order: order()?,
                attempt: f.attempt,
            },
            Event::Yielded => Body::Yielded {
                order: order()?,
                attempt: f.attempt,
                reason: f.reason,
            },
            Event::Lease => Body::Lease {
                order: order()?,
                attempt: f.attempt,
                order_id: f.order_id,
                order_key: f.order_key,
            },
            Event::Revoked => Body::Revoked {
                order: order()?,
                by: f.by.ok_or_else(missing)?,
                fences: f.fences.ok_or_else(missing)?,
                seen: f.seen.ok_or_else(missing)?,
                rank: f.rank,
                attempt: f.attempt,
                reason: f.reason,
            },
            Event::Completed => Body::Completed {
                order: order()?,
                attempt: f.attempt,
                exits: f.exits,
                order_id: f.order_id,
                outcome: f.outcome.ok_or_else(missing)?,
            },
            Event::Checkpoint => Body::Checkpoint {
                snapshot: f.snapshot.ok_or_else(missing)?,
            },
            Event::Cancelled => Body::Cancelled {
                order: order()?,
                reason: f.reason,
            },
            Event::Parked => Body::Parked {
                order: order()?,
                attempt: f.attempt,
                until: f.until,
                order_key: f.order_key,
            },
        };
        Ok(body)
    }
}

impl Record {
    /// A record of `instance` by its writer's `incarnation` at `ts`, not
    /// numbered, with no frontier.
    pub fn new(instance: InstanceNo, body: Body, incarnation: &Incarnation, ts: u64) -> Self {
        Record {
            instance,
            incarnation: incarnation.clone(),
            ts,
            seq: 0,
            booted_at: None,
            next: BTreeMap::new(),
            body,
            order_keyed: false,
        }
    }

    /// The event.
    pub fn event(&self) -> Event {
        self.body.event()
    }

    /// The order this record concerns, if any.
    pub fn order(&self) -> Option<OrderId> {
        self.body.order()
    }

    /// The attempt the record names (0: none).
    pub fn attempt(&self) -> Attempt {
        match &self.body {
            Body::Claimed { attempt, .. }
            | Body::Committed { attempt, .. }
            | Body::Yielded { attempt, .. }
            | Body::Lease { attempt, .. }
            | Body::Revoked { attempt, .. }
            | Body::Completed { attempt, .. }
            | Body::Parked { attempt, .. } => *attempt,
            _ => Attempt::default(),
        }
    }

    /// The order's id, on a claim, lease or completion that names it.
    pub fn order_id(&self) -> Option<&str> {
        match &self.body {
            Body::Claimed { order_id, .. }
            | Body::Lease { order_id, .. }
            | Body::Completed { order_id, .. } => order_id.as_deref(),
            _ => None,
        }
    }

    /// The human reason of a yield, revocation or cancel.
    pub fn reason(&self) -> Option<&str> {
        match &self.body {
            Body::Yielded { reason, .. }
            | Body::Revoked { reason, .. }
            | Body::Cancelled { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// A completion's outcome.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.body {
            Body::Completed { outcome, .. } => Some(outcome),
            _ => None,
        }
    }

    /// The holds a takeover claim took over.
    pub fn takeover_of(&self) -> &[Cite] {
        match &self.body {
            Body::Claimed { takeover_of, .. } => takeover_of,
            _ => &[],
        }
    }

    /// The rank of a claim or revocation that names one.
    pub fn rank(&self) -> Option<u32> {
        match &self.body {
            Body::Claimed { rank, .. } | Body::Revoked { rank, .. } => *rank,
            _ => None,
        }
    }

    /// The instances a claim passed over.
    pub fn passed_over(&self) -> &[InstanceNo] {
        match &self.body {
            Body::Claimed { passed_over, .. } => passed_over,
            _ => &[],
        }
    }

    /// Whether a completion says its writer's process exits after it.
    pub fn exits(&self) -> bool {
        matches!(self.body, Body::Completed { exits: true, .. })
    }

    /// A checkpoint's snapshot.
    pub fn snapshot(&self) -> Option<&wire::Snapshot> {
        match &self.body {
            Body::Checkpoint { snapshot } => Some(snapshot),
            _ => None,
        }
    }

    /// The writer of a revocation (on another's behalf); `None` for every
    /// record its instance wrote.
    pub fn by(&self) -> Option<InstanceNo> {
        match &self.body {
            Body::Revoked { by, .. } => Some(*by),
            _ => None,
        }
    }

    /// The incarnation a revocation fences.
    pub fn fences(&self) -> Option<&Incarnation> {
        match &self.body {
            Body::Revoked { fences, .. } => Some(fences),
            _ => None,
        }
    }

    /// The position a revocation saw its hold at.
    pub fn seen(&self) -> Option<Position> {
        match &self.body {
            Body::Revoked { seen, .. } => Some(*seen),
            _ => None,
        }
    }

    /// The instance that wrote the record.
    pub fn writer(&self) -> InstanceNo {
        self.by().unwrap_or(self.instance)
    }

    /// The record's key: `<instance>:<event>`; a cancel's is
    /// `cancel:<partition>:<offset>`, one key per order, so that compaction
    /// never erases a cancel for another order's (docs/protocol.md
    /// R51).
    ///
    /// A `parked` record, and the completion of an order once parked
    /// ([`Record::order_keyed`]), is keyed `park:<partition>:<offset>`:
    /// compaction erases a `parked` only for a newer one of its order or
    /// for its completion, never for another order's (docs/protocol.md
    /// R54).
    pub fn key(&self) -> String {
        match &self.body {
            Body::Cancelled { order, .. } => format!("{CANCEL_KEY}{order}"),
            Body::Parked { order, .. } => format!("{PARK_KEY}{order}"),
            b if self.order_keyed => match b.order() {
                Some(order) => format!("{PARK_KEY}{order}"),
                None => format!("{}:{}", self.instance, self.event()),
            },
            _ => format!("{}:{}", self.instance, self.event()),
        }
    }

    /// An operator's cancel of `order` (`pool_worker cancel`), written by
    /// the tool's own `incarnation` (random, one per run) with its reason,
    /// cut to [`MAX_REASON_BYTES`].
    pub fn cancel(order: OrderId, incarnation: &str, ts: u64, reason: &str) -> Record {
        let reason = Some(fit_json(reason, MAX_REASON_BYTES, false));
        let incarnation = Incarnation::from(incarnation);
        let mut r = Record::new(
            InstanceNo::new(0),
            Body::Cancelled { order, reason },
            &incarnation,
            ts,
        );
        r.seq = 1;
        r
    }

    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain data to a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Makes the record smaller, for a broker that refused it as too large
    /// (its `max.message.bytes` is below [`RECORD_LIMIT`]): halves the output
    /// tails and the reasons, or drops a checkpoint's order ids. `false`
    /// when nothing is left to cut.
    pub fn shrink(&mut self) -> bool {
        let before = self.encode().len();
        let halve = |r: &mut Option<String>| {
            *r = r.take().map(|r| fit_json(&r, json_len(&r) / 2, false));
        };
        match &mut self.body {
            Body::Completed { outcome, .. } => {
                let half = size::halved_tail_budget(outcome);
                let mut o = std::mem::replace(outcome, Outcome::not_run(Status::Ok, "")).fit(half);
                halve(&mut o.reason);
                *outcome = o;
            }
            Body::Yielded { reason, .. }
            | Body::Revoked { reason, .. }
            | Body::Cancelled { reason, .. } => halve(reason),
            // Newest first: keep the newer half.
            Body::Checkpoint { snapshot } => snapshot.ids.truncate(snapshot.ids.len() / 2),
            _ => {}
        }
        self.encode().len() < before
    }

    /// [`Record::decode`], given what the record's signature is worth
    /// (src/sign.rs): with the pool's key set, an unsigned or badly signed
    /// record is foreign whatever it says.
    pub fn decode_with(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        verdict: crate::sign::Verdict,
    ) -> Result<Record, Foreign> {
        use crate::sign::Verdict;
        match verdict {
            Verdict::Unchecked | Verdict::Valid => Record::decode(key, value),
            Verdict::Unsigned => Err(Foreign::Unsigned),
            Verdict::Bad => Err(Foreign::BadSignature),
        }
    }

    /// Why the record cannot be true, given the orders topic's end offsets
    /// (`ends`, per partition, fetched after the record was read): it is
    /// about an order past the end of its partition or in a partition the
    /// topic does not have, or its frontier (`next`, or a checkpoint's) is
    /// beyond an end. Every record the pool writes passes: its writer saw
    /// the orders it names, and an end offset never falls. Such a record is
    /// foreign ([`Foreign::Impossible`]): it would otherwise make every
    /// reader skip orders that are yet to come.
    pub fn impossible(&self, ends: &BTreeMap<Lane, i64>) -> Option<String> {
        // A topic the reader does not read is not judged: `ends` holds
        // every partition of each topic it reads, so only a partition
        // missing from one of those is.
        let read = |l: Lane| ends.keys().any(|k| k.topic == l.topic);
        let judge = |l: Lane, o: i64, order: bool| -> Option<String> {
            let what = if order { "order" } else { "frontier" };
            let at = l.at(o);
            match ends.get(&l) {
                None if read(l) => Some(format!(
                    "{what} {at}: the orders topic has no partition {}",
                    l.partition
                )),
                Some(&e) if (order && o >= e) || o > e => Some(format!(
                    "{what} {at} is past the end of its partition ({e})"
                )),
                _ => None,
            }
        };
        if let Some(why) = self.order().and_then(|o| judge(o.lane(), o.offset, true)) {
            return Some(why);
        }
        let frontier = match &self.body {
            Body::Checkpoint { snapshot } => Some(&snapshot.frontier),
            _ => None,
        };
        let frontier = frontier.into_iter().flatten();
        self.next
            .iter()
            .chain(frontier)
            .find_map(|(&l, &o)| judge(l, o, false))
    }

    /// Parses a record from its key and value, refusing anything pool_worker
    /// would not have written.
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Record, Foreign> {
        let key = key.ok_or(Foreign::NoKey)?;
        let key = std::str::from_utf8(key).map_err(|_| Foreign::BadKey(lossy(key)))?;
        // `cancel:P:O` (an operator's cancel), `park:P:O` (a record about
        // an order once parked: its instance and event are the value's),
        // else `<instance>:<event>`.
        let parked_key = match key.strip_prefix(PARK_KEY) {
            Some(o) => Some(
                o.parse::<OrderId>()
                    .map_err(|_| Foreign::BadKey(key.into()))?,
            ),
            None => None,
        };
        let (inst, ev, order) = match key.strip_prefix(CANCEL_KEY) {
            Some(o) => {
                let o: OrderId = o.parse().map_err(|_| Foreign::BadKey(key.into()))?;
                (InstanceNo::new(0), Event::Cancelled, Some(o))
            }
            None if parked_key.is_some() => {
                let v = value.ok_or(Foreign::NoValue)?;
                if v.len() > MAX_RECORD_BYTES {
                    return Err(Foreign::BadValue(format!("{} bytes", v.len())));
                }
                let peek: Flat =
                    serde_json::from_slice(v).map_err(|e| Foreign::BadValue(e.to_string()))?;
                if !peek.event.order_keyed() {
                    return Err(Foreign::Mismatch(key.into()));
                }
                (peek.instance, peek.event, parked_key)
            }
            None => {
                let (inst, ev) = key
                    .split_once(':')
                    .ok_or_else(|| Foreign::BadKey(key.into()))?;
                let inst = InstanceNo::new(inst.parse().map_err(|_| Foreign::BadKey(key.into()))?);
                let ev = Event::parse(ev)
                    .filter(|e| !matches!(e, Event::Cancelled | Event::Parked))
                    .ok_or_else(|| Foreign::BadKey(key.into()))?;
                (inst, ev, None)
            }
        };
        let value = value.ok_or(Foreign::NoValue)?;
        if value.len() > MAX_RECORD_BYTES {
            return Err(Foreign::BadValue(format!("{} bytes", value.len())));
        }
        let rec: Flat =
            serde_json::from_slice(value).map_err(|e| Foreign::BadValue(e.to_string()))?;
        if rec.instance != inst || rec.event != ev || order.is_some_and(|o| rec.order() != Some(o))
        {
            return Err(Foreign::Mismatch(key.into()));
        }
        let mut rec = Record::try_from(rec)?;
        rec.order_keyed = parked_key.is_some() && rec.event() != Event::Parked;
        Ok(rec)
    }
}

/// `pub fn $name(&mut self, to)`: sets the field `$field` of the record's
/// body if its event is one of `$variant`s, else nothing ([`Record::of`]).
#[cfg(any(test, feature = "testing"))]
macro_rules! setter {
    ($name:ident, $field:ident: $t:ty, $($variant:ident)|+) => {
        pub fn $name(&mut self, to: $t) {
            match &mut self.body {
                $(Body::$variant { $field, .. })|+ => *$field = to,
                _ => self.no_field(stringify!($field)),
            }
        }
    };
}

/// For tests (and the model check, with the `testing` feature): records
/// built the way the flat record was, an event first and its fields set
/// one by one. A field set on an event that has no such field is left
/// out, as the typed record cannot carry it (a test of such a record
/// writes its JSON).
#[cfg(any(test, feature = "testing"))]
impl Record {
    /// A record of `event` with empty fields: order 0:0 ([`Record::with_order`]
    /// sets it), attempt 0, a revocation by nobody (instance 0) of
    /// incarnation "" seen at 0, a completion whose outcome is missing (an
    /// error, as a reader took a completion without one), an empty
    /// checkpoint.
    pub fn of(instance: u32, event: Event, incarnation: &str, ts: u64) -> Record {
        let order = OrderId::new(0, 0);
        let body = match event {
            Event::Booted => Body::Booted,
            Event::Claimed => Body::Claimed {
                order,
                attempt: Attempt::default(),
                takeover_of: Vec::new(),
                rank: None,
                passed_over: Vec::new(),
                order_id: None,
                unpark: false,
                park_at: None,
                order_key: None,
            },
            Event::Committed => Body::Committed {
                order,
                attempt: Attempt::default(),
            },
            Event::Yielded => Body::Yielded {
                order,
                attempt: Attempt::default(),
                reason: None,
            },
            Event::Lease => Body::Lease {
                order,
                attempt: Attempt::default(),
                order_id: None,
                order_key: None,
            },
            Event::Revoked => Body::Revoked {
                order,
                by: InstanceNo::new(0),
                fences: Incarnation::default(),
                seen: Position::new(0),
                rank: None,
                attempt: Attempt::default(),
                reason: None,
            },
            Event::Completed => Body::Completed {
                order,
                attempt: Attempt::default(),
                exits: false,
                order_id: None,
                outcome: Outcome::not_run(Status::Error, "missing outcome"),
            },
            Event::Checkpoint => Body::Checkpoint {
                snapshot: Box::new(wire::Snapshot {
                    at: Position::new(0),
                    instances: BTreeMap::new(),
                    frontier: BTreeMap::new(),
                    contests: Vec::new(),
                    ids: Vec::new(),
                    cancels: Vec::new(),
                    parked: Vec::new(),
                }),
            },
            Event::Cancelled => Body::Cancelled {
                order,
                reason: None,
            },
            Event::Parked => Body::Parked {
                order,
                attempt: Attempt::default(),
                until: None,
                order_key: None,
            },
        };
        Record::new(InstanceNo::new(instance), body, &incarnation.into(), ts)
    }

    /// The record about `order` (none for an event without one).
    pub fn with_order(mut self, to: OrderId) -> Self {
        match &mut self.body {
            Body::Booted | Body::Checkpoint { .. } => {}
            Body::Claimed { order, .. }
            | Body::Committed { order, .. }
            | Body::Yielded { order, .. }
            | Body::Lease { order, .. }
            | Body::Revoked { order, .. }
            | Body::Completed { order, .. }
            | Body::Cancelled { order, .. }
            | Body::Parked { order, .. } => *order = to,
        }
        self
    }

    /// A field set on an event without it: nothing (the typed record
    /// cannot carry it; a test of such a record writes its JSON).
    fn no_field(&self, _field: &str) {}

    pub fn set_attempt(&mut self, to: u32) {
        let to = Attempt::new(to);
        match &mut self.body {
            Body::Claimed { attempt, .. }
            | Body::Committed { attempt, .. }
            | Body::Yielded { attempt, .. }
            | Body::Lease { attempt, .. }
            | Body::Revoked { attempt, .. }
            | Body::Completed { attempt, .. }
            | Body::Parked { attempt, .. } => *attempt = to,
            _ => self.no_field("attempt"),
        }
    }

    setter!(set_rank, rank: Option<u32>, Claimed | Revoked);
    setter!(set_unpark, unpark: bool, Claimed);
    setter!(set_park_at, park_at: Option<Position>, Claimed);
    setter!(set_until, until: Option<u64>, Parked);
    setter!(set_order_key, order_key: Option<String>, Claimed | Lease | Parked);
    setter!(set_reason, reason: Option<String>, Yielded | Revoked | Cancelled);
    setter!(set_order_id, order_id: Option<String>, Claimed | Lease | Completed);
    setter!(set_takeover_of, takeover_of: Vec<Cite>, Claimed);
    setter!(set_exits, exits: bool, Completed);

    pub fn set_passed_over(&mut self, to: Vec<u32>) {
        let to = to.into_iter().map(InstanceNo::new).collect();
        match &mut self.body {
            Body::Claimed { passed_over, .. } => *passed_over = to,
            _ => self.no_field("passed_over"),
        }
    }

    pub fn set_outcome(&mut self, to: Option<Outcome>) {
        match (&mut self.body, to) {
            (Body::Completed { outcome, .. }, Some(to)) => *outcome = to,
            _ => self.no_field("outcome"),
        }
    }

    pub fn set_snapshot(&mut self, to: Option<Box<wire::Snapshot>>) {
        match (&mut self.body, to) {
            (Body::Checkpoint { snapshot }, Some(to)) => *snapshot = to,
            _ => self.no_field("snapshot"),
        }
    }

    pub fn set_by(&mut self, to: Option<u32>) {
        match (&mut self.body, to) {
            (Body::Revoked { by, .. }, Some(to)) => *by = InstanceNo::new(to),
            _ => self.no_field("by"),
        }
    }

    pub fn set_fences(&mut self, to: Option<String>) {
        match (&mut self.body, to) {
            (Body::Revoked { fences, .. }, Some(to)) => *fences = Incarnation::new(to),
            _ => self.no_field("fences"),
        }
    }

    pub fn set_seen(&mut self, to: Option<u64>) {
        match (&mut self.body, to) {
            (Body::Revoked { seen, .. }, Some(to)) => *seen = Position::new(to),
            _ => self.no_field("seen"),
        }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned()
}

/// Why a record of the claims topic is not ours. Skipped with a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Foreign {
    NoKey,
    NoValue,
    BadKey(String),
    BadValue(String),
    Mismatch(String),
    Range(String),
    /// The pool signs its records (`CLAIMS_KEY`) and this one is not signed.
    Unsigned,
    /// The pool signs its records and this signature is not the pool's.
    BadSignature,
    /// Its claims cannot be true ([`Record::impossible`]).
    Impossible(String),
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Foreign::NoKey => write!(f, "record has no key"),
            Foreign::NoValue => write!(f, "record has no value"),
            Foreign::BadKey(k) => write!(f, "key '{k}' is not <instance>:<event>"),
            Foreign::BadValue(e) => write!(f, "value is not a pool_worker record: {e}"),
            Foreign::Mismatch(k) => write!(f, "key '{k}' does not match its value"),
            Foreign::Range(e) => write!(f, "value out of range: {e}"),
            Foreign::Unsigned => write!(f, "record is not signed (CLAIMS_KEY is set)"),
            Foreign::BadSignature => write!(f, "record's signature is not the pool's (CLAIMS_KEY)"),
            Foreign::Impossible(e) => write!(f, "record's claims are impossible: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_by_its_length_as_written() {
        assert_eq!(json_len("a\"\\\n\u{1}é"), 1 + 2 + 2 + 2 + 6 + 2);
        for s in [
            "plain",
            "\u{1}\u{1f}\u{7f}\"\\",
            "ééé",
            "mixed \u{1} é \" end",
        ] {
            assert_eq!(
                json_len(s) + 2,
                serde_json::to_string(s).unwrap().len(),
                "{s:?}"
            );
        }
        assert_eq!(fit_json("short", 10, false), "short");
        let head = fit_json(&"é".repeat(100), 11, false);
        assert_eq!(head, "éééé…", "on a character boundary, with the mark");
        let tail = fit_json(&format!("start{}", "\u{1}".repeat(100)), 60, true);
        assert!(tail.starts_with('…') && json_len(&tail) <= 60, "{tail:?}");
        assert_eq!(
            tail.chars().filter(|&c| c == '\u{1}').count(),
            (60 - '…'.len_utf8()) / 6
        );
    }

    #[test]
    fn the_largest_completion_fits_a_record() {
        let worst = "\u{1}".repeat(2 * MAX_TAIL_BYTES);
        let mut r = Record::of(MAX_INSTANCE, Event::Completed, &"i".repeat(64), u64::MAX)
            .with_order(OrderId::new(i32::MAX, i64::MAX));
        r.set_order_id(Some("\u{1}".repeat(256)));
        r.next = (0..100).map(|p| (Lane::from(p), i64::MAX)).collect();
        r.set_exits(true);
        r.set_outcome(Some(
            Outcome {
                status: Status::Error,
                exit_code: Some(i32::MIN),
                duration_ms: u64::MAX,
                reason: Some(worst.clone()),
                stdout_tail: worst.clone(),
                stderr_tail: worst,
                traceparent: Some(format!("00-{}-{}-01", "f".repeat(32), "f".repeat(16))),
                retry_of: Some(OrderId::new(i32::MAX, i64::MAX).to_string()),
            }
            .fit(usize::MAX),
        ));
        let n = r.encode().len();
        assert!(n <= RECORD_LIMIT, "{n} bytes");
        assert!(Record::decode(Some(r.key().as_bytes()), Some(&r.encode())).is_ok());
    }

    #[test]
    fn shrinking_halves_what_can_be_cut() {
        let mut r = Record::of(1, Event::Completed, "a", 1).with_order(OrderId::new(0, 0));
        r.set_outcome(Some(Outcome {
            stdout_tail: "x".repeat(10_000),
            ..Outcome::not_run(Status::Ok, "why".repeat(100))
        }));
        let before = r.encode().len();
        assert!(r.shrink());
        assert!(
            r.encode().len() < before / 2 + 200,
            "{} of {before}",
            r.encode().len()
        );
        while r.shrink() {}
        assert!(
            r.encode().len() < 400,
            "down to the fixed fields: {}",
            r.encode().len()
        );
        let mut c = Record::of(1, Event::Claimed, "a", 1).with_order(OrderId::new(0, 0));
        assert!(!c.shrink(), "a claim has nothing to cut");
    }

    fn claim() -> Record {
        let mut r = Record::of(3, Event::Claimed, "a1", 1000).with_order(OrderId::new(0, 17));
        r.set_attempt(1);
        r.next.insert(0.into(), 18);
        r
    }

    #[test]
    fn round_trip_and_key() {
        let r = claim();
        assert_eq!(r.key(), "3:claimed");
        let back = Record::decode(Some(b"3:claimed"), Some(&r.encode())).unwrap();
        assert_eq!(back, r);
        let text = String::from_utf8(r.encode()).unwrap();
        assert!(
            text.starts_with(r#"{"instance":3,"event":"claimed","partition":0,"offset":17"#),
            "{text}"
        );
    }

    #[test]
    fn a_cancel_has_a_key_of_its_order_and_nothing_of_an_instance() {
        let o = OrderId::new(2, 40);
        let c = Record::cancel(o, "op", 7, &"é".repeat(5000));
        assert_eq!(c.key(), "cancel:2:40");
        assert!(json_len(c.reason().unwrap()) <= MAX_REASON_BYTES);
        let v = c.encode();
        assert_eq!(
            Record::decode(Some(b"cancel:2:40"), Some(&v)),
            Ok(c.clone())
        );
        for key in [
            &b"cancel:2:41"[..],
            b"0:cancelled",
            b"1:cancelled",
            b"cancel:x",
        ] {
            assert!(Record::decode(Some(key), Some(&v)).is_err(), "{key:?}");
        }
        // An instance's record cannot pose as a cancel, nor a cancel carry
        // an instance's fields.
        let mut bad = c.clone();
        bad.instance = InstanceNo::new(3);
        assert!(Record::decode(Some(b"cancel:2:40"), Some(&bad.encode())).is_err());
        let mut bad = c.clone();
        bad.next.insert(2.into(), 99);
        assert!(Record::decode(Some(b"cancel:2:40"), Some(&bad.encode())).is_err());
        let mut bad = c;
        bad.set_reason(Some("x".repeat(MAX_REASON_BYTES + 1)));
        assert!(Record::decode(Some(b"cancel:2:40"), Some(&bad.encode())).is_err());
    }

    #[test]
    fn foreign_records_are_refused() {
        let v = claim().encode();
        assert_eq!(Record::decode(None, Some(&v)), Err(Foreign::NoKey));
        assert_eq!(
            Record::decode(Some(b"3:claimed"), None),
            Err(Foreign::NoValue)
        );
        assert!(matches!(
            Record::decode(Some(b"3:exploded"), Some(&v)),
            Err(Foreign::BadKey(_))
        ));
        assert!(matches!(
            Record::decode(Some(b"x:claimed"), Some(&v)),
            Err(Foreign::BadKey(_))
        ));
        assert!(matches!(
            Record::decode(Some(b"4:claimed"), Some(&v)),
            Err(Foreign::Mismatch(_))
        ));
        assert!(matches!(
            Record::decode(Some(b"3:claimed"), Some(b"{oops")),
            Err(Foreign::BadValue(_))
        ));
        assert!(matches!(
            Record::decode(Some(&[0xff, 0xfe]), Some(&v)),
            Err(Foreign::BadKey(_))
        ));
        let wrong_type = br#"{"instance":"3","event":"claimed","incarnation":"a","ts":1}"#;
        assert!(Record::decode(Some(b"3:claimed"), Some(wrong_type)).is_err());
        let zero = br#"{"instance":0,"event":"booted","incarnation":"a","ts":1}"#;
        assert!(matches!(
            Record::decode(Some(b"0:booted"), Some(zero)),
            Err(Foreign::Range(_))
        ));
        let no_order = br#"{"instance":3,"event":"claimed","incarnation":"a","ts":1}"#;
        assert!(matches!(
            Record::decode(Some(b"3:claimed"), Some(no_order)),
            Err(Foreign::Range(_))
        ));
        let done = br#"{"instance":3,"event":"completed","partition":0,"offset":1,"incarnation":"a","ts":1}"#;
        assert!(Record::decode(Some(b"3:completed"), Some(done)).is_err());
    }

    #[test]
    fn exits_is_written_only_when_true_and_only_on_completions() {
        // An older writer's completion, without the field: false.
        let old = br#"{"instance":3,"event":"completed","partition":0,"offset":1,"incarnation":"a","ts":1,"outcome":{"status":"ok","duration_ms":0}}"#;
        let r = Record::decode(Some(b"3:completed"), Some(old)).unwrap();
        assert!(!r.exits());
        assert!(!String::from_utf8(r.encode()).unwrap().contains("exits"));
        let mut e = r.clone();
        e.set_exits(true);
        let text = String::from_utf8(e.encode()).unwrap();
        assert!(text.contains(r#""exits":true"#), "{text}");
        assert_eq!(
            Record::decode(Some(b"3:completed"), Some(text.as_bytes())),
            Ok(e)
        );
        let c = String::from_utf8(claim().encode()).unwrap();
        let c = c.replacen('{', r#"{"exits":true,"#, 1);
        assert!(matches!(
            Record::decode(Some(b"3:claimed"), Some(c.as_bytes())),
            Err(Foreign::BadValue(_))
        ));
    }

    /// R10: `booted_at` travels on any record of an instance but its
    /// `booted` (which names no earlier one of its own) and a cancel.
    #[test]
    fn booted_at_round_trips_and_is_foreign_on_a_booted() {
        let mut r = Record::of(3, Event::Claimed, "a", 5).with_order(OrderId::new(0, 1));
        r.booted_at = Some(Position::new(7));
        let back = Record::decode(Some(r.key().as_bytes()), Some(&r.encode())).unwrap();
        assert_eq!(back, r);
        assert!(String::from_utf8(r.encode())
            .unwrap()
            .contains(r#""booted_at":7"#));
        let mut b = Record::of(3, Event::Booted, "a", 5);
        b.booted_at = Some(Position::new(7));
        let err = Record::decode(Some(b.key().as_bytes()), Some(&b.encode())).unwrap_err();
        assert!(format!("{err:?}").contains("booted_at"), "{err:?}");
    }

    /// A field of another event makes a record foreign: the typed record
    /// could not carry it, and a reader must not read it (a `by` on a
    /// commit would have skipped its fence check).
    #[test]
    fn a_field_of_another_event_is_foreign() {
        let text = include_str!("../testdata/records.txt");
        let extra = [
            ("by", "4"),
            ("fences", r#""a1""#),
            ("seen", "1"),
            ("rank", "0"),
            ("attempt", "1"),
            ("order_id", r#""x""#),
            ("reason", r#""x""#),
            ("passed_over", "[1]"),
            ("takeover_of", r#"[{"instance":1,"incarnation":"a"}]"#),
            ("outcome", r#"{"status":"ok","duration_ms":0}"#),
            ("partition", "0"),
            ("until", "1"),
            ("order_key", r#""k""#),
            ("unpark", "true"),
            ("park_at", "1"),
        ];
        let mut refused = 0;
        for line in text.lines() {
            let (key, value) = line.split_once('\t').unwrap();
            let r = Record::decode(Some(key.as_bytes()), Some(value.as_bytes())).unwrap();
            for (field, v) in extra {
                if value.contains(&format!("\"{field}\":")) {
                    continue;
                }
                let bad = value.replacen('{', &format!("{{\"{field}\":{v},"), 1);
                let own = match (r.event(), field) {
                    (
                        Event::Claimed,
                        "order_id" | "rank" | "attempt" | "takeover_of" | "passed_over" | "unpark",
                    ) => true,
                    (Event::Lease | Event::Completed, "order_id") => true,
                    (Event::Claimed | Event::Lease | Event::Parked, "order_key") => true,
                    // Only on a claim out of the park.
                    (Event::Claimed, "park_at") => value.contains(r#""unpark":true"#),
                    (Event::Parked, "until") => true,
                    (Event::Yielded | Event::Cancelled, "reason") => true,
                    (Event::Cancelled, "attempt") => false,
                    (_, "attempt") => r.order().is_some(),
                    _ => false,
                };
                let got = Record::decode(Some(key.as_bytes()), Some(bad.as_bytes()));
                if own {
                    assert!(got.is_ok(), "{key} with {field}: {got:?}");
                } else {
                    assert!(got.is_err(), "{key} with {field}");
                    refused += 1;
                }
            }
        }
        assert!(refused > 50, "{refused}");
    }

    #[test]
    fn an_unsigned_or_badly_signed_record_is_foreign_with_a_key() {
        use crate::sign::{verdict, ClaimsKey, Verdict};
        let v = claim().encode();
        let k = ClaimsKey::new(b"the pool's key, 16+ bytes").unwrap();
        let sig = k.sign(&v);
        let dec = |sig: Option<&[u8]>, key: Option<&ClaimsKey>| {
            Record::decode_with(Some(b"3:claimed"), Some(&v), verdict(key, Some(&v), sig))
        };
        assert_eq!(dec(Some(sig.as_bytes()), Some(&k)), Ok(claim()));
        assert_eq!(dec(None, Some(&k)), Err(Foreign::Unsigned));
        let forged = ClaimsKey::new(b"the attacker's own key").unwrap().sign(&v);
        assert_eq!(
            dec(Some(forged.as_bytes()), Some(&k)),
            Err(Foreign::BadSignature)
        );
        assert_eq!(dec(None, None), Ok(claim()), "no key: nothing checked");
        assert_eq!(
            Record::decode_with(None, Some(&v), Verdict::Valid),
            Err(Foreign::NoKey),
            "a valid signature is not enough"
        );
    }

    #[test]
    fn claims_past_the_orders_end_are_impossible() {
        let ends = BTreeMap::from([(0.into(), 18), (1.into(), 5)]);
        assert_eq!(
            claim().impossible(&ends),
            None,
            "order 0:17, frontier 0:18: the end is 18"
        );
        let r = claim().with_order(OrderId::new(0, 18));
        assert!(r.impossible(&ends).unwrap().contains("past the end"));
        let r = claim().with_order(OrderId::new(2, 17));
        assert!(r.impossible(&ends).unwrap().contains("no partition 2"));
        let mut r = claim();
        r.next.insert(0.into(), 19);
        assert!(r.impossible(&ends).unwrap().contains("frontier 0:19"));
        let mut r = claim();
        r.next.insert(7.into(), 0);
        assert!(
            r.impossible(&ends).is_some(),
            "a frontier in a partition that does not exist"
        );
        let mut b = Record::of(3, Event::Booted, "a", 1);
        b.next.insert(1.into(), 5);
        assert_eq!(
            b.impossible(&ends),
            None,
            "a frontier at the end is possible"
        );
        b.next.insert(1.into(), i64::MAX);
        assert!(b.impossible(&ends).is_some());
        let mut cp = Record::of(3, Event::Checkpoint, "a", 1);
        let snap = wire::Snapshot {
            at: Position::new(0),
            instances: BTreeMap::new(),
            frontier: BTreeMap::from([(0.into(), 1000)]),
            contests: Vec::new(),
            ids: Vec::new(),
            cancels: Vec::new(),
            parked: Vec::new(),
        };
        cp.set_snapshot(Some(Box::new(snap)));
        assert!(
            cp.impossible(&ends).unwrap().contains("frontier 0:1000"),
            "a checkpoint's frontier"
        );
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// Whatever lands in the claims topic, decoding never panics.
            #[test]
            fn decode_never_panics(key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                                   value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300))) {
                let _ = Record::decode(key.as_deref(), value.as_deref());
            }

            /// Nor on a real record with bytes changed here and there, which
            /// reaches deep into the JSON and the validation.
            #[test]
            fn decode_never_panics_on_mutated_records(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
                let mut r = claim();
                r.set_outcome(Some(Outcome::not_run(Status::Error, "x")));
                let mut v = r.encode();
                for (at, b) in edits {
                    let n = v.len();
                    v[at % n] = b;
                }
                if let Ok(back) = Record::decode(Some(b"3:claimed"), Some(&v)) {
                    prop_assert_eq!(back.instance.get(), 3);
                }
            }
        }
    }

    /// Records as the pool writes them (testdata/records.txt: one per
    /// line, key TAB value; written by the flat `Record` before records were
    /// typed, but for the last three, about an order of a named topic,
    /// R57) read back and write out byte for byte the same: the wire
    /// format is the spec's (docs/protocol.md §2), and old logs replay.
    #[test]
    fn the_wire_format_is_unchanged() {
        let text = include_str!("../testdata/records.txt");
        let mut events = std::collections::BTreeSet::new();
        for line in text.lines() {
            let (key, value) = line.split_once('\t').unwrap();
            let r = Record::decode(Some(key.as_bytes()), Some(value.as_bytes()))
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(r.key(), key);
            assert_eq!(String::from_utf8(r.encode()).unwrap(), value, "{key}");
            events.insert(r.event());
        }
        assert_eq!(events.len(), Event::ALL.len(), "every event: {events:?}");
    }

    /// A `parked` is keyed by its order and by nothing else; the completion
    /// of an order once parked may be keyed by that order, but not by
    /// another; no other record is.
    #[test]
    fn park_keys_name_their_order() {
        let o = OrderId::new(0, 17);
        let mut p = Record::of(3, Event::Parked, "a1", 5).with_order(o);
        p.set_attempt(1);
        p.set_until(Some(99));
        p.set_order_key(Some("k".into()));
        assert_eq!(p.key(), "park:0:17");
        let v = p.encode();
        assert_eq!(Record::decode(Some(b"park:0:17"), Some(&v)), Ok(p.clone()));
        for key in [&b"park:0:18"[..], b"3:parked", b"park:x"] {
            assert!(Record::decode(Some(key), Some(&v)).is_err(), "{key:?}");
        }
        let mut c = Record::of(4, Event::Completed, "b1", 6).with_order(o);
        c.set_outcome(Some(Outcome::not_run(Status::Ok, "x")));
        c.order_keyed = true;
        assert_eq!(c.key(), "park:0:17");
        assert_eq!(
            Record::decode(Some(b"park:0:17"), Some(&c.encode())),
            Ok(c.clone())
        );
        assert!(Record::decode(Some(b"park:0:16"), Some(&c.encode())).is_err());
        // A claim about it keeps its instance's key.
        assert!(Record::decode(Some(b"park:0:17"), Some(&claim().encode())).is_err());
        let mut r = Record::of(3, Event::Revoked, "b1", 5).with_order(o);
        r.set_by(Some(4));
        r.set_fences(Some("a1".into()));
        r.set_seen(Some(1));
        assert!(Record::decode(Some(b"park:0:17"), Some(&r.encode())).is_err());
        let long = "k".repeat(MAX_ORDER_KEY_BYTES + 1);
        p.set_order_key(Some(long));
        assert!(Record::decode(Some(b"park:0:17"), Some(&p.encode())).is_err());
        p.set_order_key(Some(String::new()));
        assert!(Record::decode(Some(b"park:0:17"), Some(&p.encode())).is_err());
    }

    /// R57: a record about an order of a named topic carries `topic`, its
    /// keys name it (`park:urgent:0:3`, `cancel:urgent:0:3`), and it reads
    /// back as it was written; the same key without the topic, or another
    /// topic, is not its key; a record of the main topic names none.
    #[test]
    fn records_of_a_named_topic_round_trip() {
        let urgent = Topic::named("urgent").unwrap();
        let o = Lane::new(urgent, 0).at(3);
        let mut c = Record::of(3, Event::Claimed, "a1", 5).with_order(o);
        c.set_attempt(1);
        c.next = BTreeMap::from([(Lane::from(0), 19), (o.lane(), 4)]);
        let v = String::from_utf8(c.encode()).unwrap();
        assert!(
            v.contains(r#""topic":"urgent","partition":0,"offset":3"#),
            "{v}"
        );
        assert!(v.contains(r#""next":{"0":19,"urgent:0":4}"#), "{v}");
        assert_eq!(c.key(), "3:claimed");
        let back = Record::decode(Some(b"3:claimed"), Some(v.as_bytes())).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.order(), Some(o));
        assert_ne!(back.order(), Some(OrderId::new(0, 3)));
        let mut p = Record::of(3, Event::Parked, "a1", 6).with_order(o);
        p.set_attempt(1);
        p.set_until(Some(99));
        assert_eq!(p.key(), "park:urgent:0:3");
        let v = p.encode();
        assert_eq!(Record::decode(Some(b"park:urgent:0:3"), Some(&v)), Ok(p));
        let cancel = Record::cancel(o, "op", 7, "not wanted");
        assert_eq!(cancel.key(), "cancel:urgent:0:3");
        let v = cancel.encode();
        assert_eq!(
            Record::decode(Some(b"cancel:urgent:0:3"), Some(&v)),
            Ok(cancel)
        );
        for key in [
            &b"cancel:0:3"[..],
            b"cancel:other:0:3",
            b"cancel:urgent:0:4",
        ] {
            assert!(Record::decode(Some(key), Some(&v)).is_err(), "{key:?}");
        }
        // The main topic's order at the same partition and offset.
        let main = Record::cancel(OrderId::new(0, 3), "op", 7, "x");
        assert_eq!(main.key(), "cancel:0:3");
        assert!(!String::from_utf8(main.encode()).unwrap().contains("topic"));
        // A topic the reader does not read is not judged impossible; a
        // partition missing from one it reads, or an offset past its end,
        // is.
        let ends = BTreeMap::from([(Lane::from(0), 20)]);
        assert_eq!(c.impossible(&ends), None);
        let ends = BTreeMap::from([(Lane::from(0), 20), (Lane::new(urgent, 1), 9)]);
        assert!(c.impossible(&ends).is_some());
        let ends = BTreeMap::from([(Lane::from(0), 20), (o.lane(), 3)]);
        assert!(c.impossible(&ends).is_some());
        let ends = BTreeMap::from([(Lane::from(0), 20), (o.lane(), 4)]);
        assert_eq!(c.impossible(&ends), None);
    }

    #[test]
    fn order_id_parses() {
        assert_eq!("2:40".parse::<OrderId>(), Ok(OrderId::new(2, 40)));
        assert!("2".parse::<OrderId>().is_err());
        assert!("-1:4".parse::<OrderId>().is_err());
    }
}
