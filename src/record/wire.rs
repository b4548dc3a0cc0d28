//! A checkpoint's snapshot as it is written (docs/protocol.md R20, R23,
//! R24; src/checkpoint.rs says what a checkpoint is for). These structs are
//! the wire format and nothing else: the View's own bookkeeping
//! (`boot::View`, `boot::Instance`, `boot::Contest`, ...) is converted to
//! and from them field by field in src/boot/snapshot.rs, so that changing
//! the View cannot silently change the records already on the topic.
//! Checkpoints written before these structs existed decode and encode byte
//! for byte the same (testdata/records.txt).

use super::{Attempt, Cite, Incarnation, InstanceNo, Lane, OrderId, Outcome, Position};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Order ids a snapshot remembers (the newest announced), at most.
pub const ID_MEMORY: usize = 10_000;

/// ... and in at most about this many bytes, so that a checkpoint stays well
/// under Kafka's default `max.message.bytes` (1 MB).
pub const ID_MEMORY_BYTES: usize = 512 * 1024;

/// The pool as a View saw it before position `at`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// The view after every record before this position: read on from here.
    pub at: Position,
    /// Every instance number the log mentions.
    pub instances: BTreeMap<InstanceNo, Instance>,
    /// The claim frontier, per orders partition.
    pub frontier: BTreeMap<Lane, i64>,
    /// Contests not settled yet.
    pub contests: Vec<(OrderId, Contest)>,
    /// The newest order ids announced: id, order, position.
    pub ids: Vec<(String, OrderId, Position)>,
    /// Operators' cancels of orders not completed yet: order, position,
    /// reason (docs/protocol.md R51, R52). Absent when none,
    /// so that older readers still read such a checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancels: Vec<(OrderId, Position, String)>,
    /// Orders parked, waiting to be claimed again (docs/protocol.md R54).
    /// Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parked: Vec<(OrderId, Parked)>,
}

/// A parked order: where, its attempt, until when, its key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parked {
    pub at: Position,
    pub attempt: Attempt,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// What the log says of one instance number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// The newest `booted`: position, incarnation.
    pub booted: Option<(Position, Incarnation)>,
    /// The last `seq` accepted (R7): incarnation, seq.
    pub last_seq: Option<(Incarnation, u64)>,
    pub hold: Option<Hold>,
    /// An incarnation whose hold was revoked.
    pub revoked: Option<Incarnation>,
    /// The newest completion: order, position, attempt, outcome (without
    /// its output tails).
    pub last_completed: Option<(OrderId, Position, Attempt, Outcome)>,
    /// Newest timestamp written by this instance.
    pub last_ts: u64,
    /// The writer's clock when the instance last came to hold nothing.
    #[serde(default)]
    pub idle_ts: u64,
    /// Passed over in its turn, and silent since. Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub passed_over: bool,
    /// Its incarnation's `completed` said it exits. Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub exiting: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// An instance's newest claim, while it is open.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    pub order: OrderId,
    pub claim_pos: Position,
    pub attempt: Attempt,
    pub committed: Option<Position>,
    pub order_id: Option<String>,
    pub last_ts: u64,
    pub last_pos: Position,
    pub incarnation: Incarnation,
    pub rank: u32,
    pub pending: bool,
    pub took_over: Option<Cite>,
    /// The order's key and where the hold announced it (R56). Absent:
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<(String, Position)>,
}

/// Every instance's stance on one order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contest {
    /// Instance → (position of its claim, its stance).
    pub stances: BTreeMap<InstanceNo, (Position, Stance)>,
    pub late: bool,
    pub completed_at: Option<Position>,
    /// A void `completed` of the order: position, outcome (without its
    /// output tails).
    pub finished: Option<(Position, Outcome)>,
    pub ranks: BTreeMap<InstanceNo, u32>,
    pub heirs: BTreeSet<InstanceNo>,
    /// The order was parked once (R54). Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub parked_once: bool,
    /// Position of its newest park (R55). Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<Position>,
    /// Claimants after the park without `unpark` (R55). Absent: none.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub stale: BTreeSet<InstanceNo>,
}

/// An instance's stance on one order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stance {
    Undecided,
    Committed,
    Yielded,
    Completed,
}
