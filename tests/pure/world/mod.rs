//! The simulated world shared by the model check (tests/pure/model.rs) and the
//! deterministic simulation (tests/pure/simulation.rs): a claims log, the
//! processes of every instance (each one the real [`Worker`] machine of
//! src/worker.rs, fed exactly the inputs the shell feeds it), the appends in
//! flight, compaction, and the ghost history that the properties are judged
//! on.
//!
//! Nothing here re-implements a rule of the protocol. The world only moves
//! records around and feeds them to the machines; the judge (the *referee*)
//! is a [`View`] of src/boot.rs that reads every record ever delivered, in
//! log order, never compacted.
//!
//! ## The world
//!
//! * The log is a vector of entries; compaction marks an entry erased, it
//!   never moves one (positions are Kafka offsets).
//! * Each instance number has at most one live process (a [`Worker`]) with a
//!   read cursor, its appends not yet delivered (FIFO, like one producer),
//!   whether it asked for orders ([`Action::FindOrder`]) and the job it runs.
//! * A crash drops the process; its undelivered appends become *orphans*
//!   that may land later, in any order, or never. An append is a
//!   transaction ([`Txn`]): usually one record; a handing one
//!   (`Action::AppendAll`, [`Config::handover`]) lands whole, in order, or
//!   never, and ends its instance's other appends in flight.
//! * A duplicate delivery (a producer retry) lands a record and keeps a copy
//!   as an orphan, which may land again later.
//! * Compaction erases every record that has a newer record with the same
//!   key (`rec.key()`, i.e. instance and event) — but only below the
//!   *horizon*, the smallest of: every live process's read cursor, the
//!   position of each instance number's newest `booted`, and the position of
//!   every claim that the referee sees undecided ([`HorizonRule::Claim`]), or
//!   the position of the first record about the order of such a claim
//!   ([`HorizonRule::Contest`]). This stands for the claims topic's
//!   `min.compaction.lag.ms` protecting the records of open negotiations.

#![allow(dead_code)]

use pool_worker_core::boot::{priority, turns_with, Relabel, View};
use pool_worker_core::checkpoint::HandedView;
use pool_worker_core::record::describe as describe_record;
use pool_worker_core::record::{
    Body, Event, Incarnation, InstanceNo, Lane, OrderId, Outcome, Position, Record, Status, Topic,
};
use pool_worker_core::worker::{Action, Flaw, Input, Phase, Settings, Terms, Worker};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

mod commute;
#[allow(unused_imports)]
pub use commute::{depends, depends_unerased};

/// How a broken heir skips records (`Config::handed_view_skips`): it
/// reads on from the log's end at its start, not from its handed view's
/// `snapshot.at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViewSkip {
    /// Everything after the view, its own `booted` (at `snapshot.at`)
    /// first of all: it waits for that `booted` for ever
    /// (`Phase::Boot { seen: false }`), a live process that does nothing.
    ToEnd,
    /// Everything after the view but its own `booted`, which it reads
    /// first: it boots on a View that misses what the other instances
    /// wrote meanwhile.
    PastBooted,
}

/// What compaction must leave alone below an undecided claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HorizonRule {
    /// Protect the records from each undecided claim on.
    Claim,
    /// Protect the records from the first record about the order of each
    /// undecided claim on (the whole open negotiation, rivals included).
    Contest,
    /// Protect the records from the first record about the order of every
    /// hold on (undecided or committed): `min.compaction.lag.ms` longer than
    /// any order is held, takeovers included. Leases need it: a takeover
    /// claim is behind the frontier, and a reader that lost the order's
    /// first claim to compaction takes it for a late claim (see
    /// `takeover_after_compaction_is_late` in tests/pure/simulation.rs).
    Hold,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub instances: u32,
    pub orders: u32,
    pub max_crashes: u32,
    pub max_dups: u32,
    pub compaction: bool,
    pub horizon: HorizonRule,
    pub flaw: Option<Flaw>,
    /// The supervisor restarts a crashed instance (false: a broken
    /// supervisor, for the liveness check to catch).
    pub restart_crashed: bool,
    /// The settle rule (docs/protocol.md R16; pool_worker/src/settle.rs): a
    /// process appends its `booted` only once every append of its instance
    /// number's dead process has landed or been lost, so the next start of
    /// an instance drops that process's orphans (booted, records, retry
    /// copies). False: they may land after the successor's `booted` (the
    /// three checks `stale_booted_fences_its_successor`,
    /// `zombie_record_outlives_its_fence` and
    /// `zombie_fence_erased_by_the_next_boot` in tests/pure/model.rs show what
    /// happens then).
    pub settle: bool,
    /// The fence (docs/protocol.md R16; pool_worker/src/kafka/clients.rs `Kafka::fence`):
    /// processes start in `Phase::Fence`, and a step of its own
    /// ([`Step::Fence`]) fences the instance's older processes: every orphan
    /// of the instance is dropped (Kafka aborts the dead process's open
    /// transaction and refuses what it sends later), and the machine is told
    /// (`Input::Fenced`). Until then orphans may still land (transactions
    /// the dead process had committed). Use with `settle` false; an orphan
    /// landing after its writer's successor booted violates [`SETTLED`].
    pub fence: bool,
    /// With [`Config::fence`]: the handed boot (docs/protocol.md R16,
    /// "Handed boot"). Every process is told its heir at its start
    /// (`Input::Heir`, the name of its instance's next process); its last
    /// completion then goes with the heir's `booted` in one transaction
    /// (`Action::AppendAll`, [`Txn`]). A process that exits `Ok` with that
    /// transaction landed and nothing of its instance in flight (the
    /// shell's `done handed`) has handed over ([`Inst::handed`]): its
    /// instance's next process starts as the heir, with no
    /// [`Step::Fence`], told `Input::Handed` instead of `Input::Fenced`.
    /// After any other end (a crash, another exit status) the next process
    /// starts as without it; and the heir's standby may die before it runs
    /// ([`Step::StartPastHeir`], a crash), another incarnation starting
    /// instead, also as without it.
    pub handover: bool,
    /// With [`Config::handover`]: the handed view (docs/protocol.md R16,
    /// "Handed view"). A process that hands over leaves its heir its View
    /// (`Worker::hand_view`, kept in [`Inst::view`]), taken as it exits
    /// after reading back its last `completed`: a finished machine folds
    /// nothing more, so the view ends right before the heir's `booted`.
    /// The heir loads it (`Worker::load_handed`) instead of the newest
    /// checkpoint in the log and reads on from its `snapshot.at`. Any
    /// other start (`Step::StartPastHeir`) drops it and boots as without
    /// it; the world offers it to that machine first, which must refuse
    /// it, since it names another incarnation (the shell takes a view
    /// only at `go handed`, pool_worker/src/run.rs).
    pub handed_view: bool,
    /// Broken on purpose, with [`Config::handed_view`]: the heir loads the
    /// handed view but reads on from the log's end at its start instead of
    /// from the view's `snapshot.at`, skipping what landed between the
    /// view and its start ([`ViewSkip`]).
    pub handed_view_skips: Option<ViewSkip>,
    /// Simulation: the machines settle themselves (`Settings::settle_ms`,
    /// `Phase::Settle`) instead of the world dropping orphans at a start:
    /// a process that exits with nothing in flight leaves a clean-exit
    /// marker its instance's next process is given; the simulation loses
    /// every orphan not landed within a bound shorter than this after its
    /// writer died ([`World::expire_orphans`]), as librdkafka and the
    /// broker do; and an orphan landing after its writer's successor booted
    /// violates [`SETTLED`]. `None`: boot at once.
    pub settle_ms: Option<u64>,
    /// Simulation with settling: how long after its writer's death an
    /// orphan may still land ([`World::expire_orphans`]).
    pub orphan_ms: u64,
    /// Partial-order reduction: reads go on to the end of the log in one
    /// step, stopping as soon as the machine acts or is negotiating. Outside
    /// Negotiate the machine reacts only to its own records (whose
    /// positions are fixed) or to CaughtUp/Orders (which need the reader at
    /// the end), so what it does never depends on where a read stopped;
    /// a further cursor only raises the compaction horizon; a dead
    /// process's cursor does not matter. In Negotiate every record counts,
    /// so reads stay one at a time.
    pub batch_reads: bool,
    /// The lease (`Settings::lease_ms`); `None`: no leases, the clock does
    /// not matter and no Tick is sent.
    pub lease_ms: Option<u64>,
    /// Model check: how often the clock may jump past the lease
    /// ([`Step::Advance`]); the simulation moves the clock itself.
    pub max_jumps: u32,
    /// A broken rule emulated by the world, since the View cannot be
    /// changed from here: every revocation lands naming the hold's newest
    /// record (`seen` rewritten), which is what a View that did not check
    /// `seen` would accept — a hold that renewed in time is revoked anyway.
    pub forge_seen: bool,
    /// Appends may land late: a duplicate copy after later records, and
    /// (unless [`Config::settle`]) a dead process's appends after its
    /// successor started. False: neither; a producer retry lands right
    /// after the original or not at all. (With true, a
    /// void record landing late superseded a valid commit, or a valid
    /// completion, under compaction: docs/protocol-history.md, "Holes found
    /// in leases", 5.)
    pub late_appends: bool,
    /// Processes write checkpoints (`Settings::checkpoint_every`), and a
    /// process starts from the newest checkpoint left in the log instead of
    /// position 0 (src/checkpoint.rs).
    pub checkpoint_every: Option<u64>,
    /// `Settings::orders_per_process`: a process goes on to the next order
    /// after reading back its completion, up to this many.
    pub orders_per_process: u32,
    /// Compaction's horizon by causality instead of by position (the model
    /// check with commuting appends, tests/pure/model.rs): a superseded record
    /// may be erased unless a record the horizon protects is in its causal
    /// past ([`World::causal_pasts`]). Every erasure the positional horizon
    /// allows is still allowed; the extra ones are those it allows in an
    /// equivalent order of the same log.
    pub causal: bool,
    /// The horizon also protects the records about the order of every claim
    /// still in flight ([`World::in_flight_claim_orders`]); false only to
    /// show what that prevents.
    pub protect_in_flight: bool,
    /// Compaction may erase records at and above the cursor of a process
    /// still replaying the log (`Phase::Settle`, `Fence`, `Boot`): Kafka's
    /// log cleaner knows nothing of readers, and a replay reads records
    /// older than `min.compaction.lag.ms`, so a cleaner pass may overtake
    /// it (docs/protocol.md R42). False: every live reader's cursor bounds
    /// the horizon (as the model check's reduction 1 has it).
    pub cleaner_passes_replays: bool,
    /// Issue 18: someone who is not the pool can write to the claims topic
    /// and appends up to this many forged records ([`Step::Forge`]), at any
    /// moment. 0: nobody does (and records are not encoded to be read).
    pub max_forgeries: u32,
    /// The pool's `CLAIMS_KEY` (src/sign.rs): its processes sign their
    /// records; forged ones are unsigned or signed with another key.
    /// `None`: nothing is signed, and the forgeries are impossible claims
    /// (past the orders' end) instead.
    pub claims_key: Option<pool_worker_core::sign::ClaimsKey>,
    /// Broken on purpose: every reader (processes and referee) takes every
    /// record for the pool's, unchecked (no signature, no end offsets).
    pub trust_all: bool,
    /// `Settings::claim_defer_ms`: an idle instance defers to the idle
    /// instances ahead of it in an order's line (docs/protocol.md R29).
    /// 0: no deferral, every idle instance claims (the
    /// herd). In the model check a deferral runs out by a step of its own
    /// ([`Step::Expire`], at any moment: every timing); in the simulation
    /// by the simulated clock ([`Config::clocked`]).
    pub claim_defer_ms: u64,
    /// The fair schedule restarts an instance that crashed holding nothing
    /// (in the referee's view, nothing of it in flight). False: such an
    /// instance stays down for good — a host gone while idle — as long as
    /// another instance is up, so liveness must not depend on a preferred
    /// idle instance coming back (`Flaw::DeferForever` fails it).
    pub restart_idle: bool,
    /// Simulation: the clock is the simulation's (it moves it), and a
    /// process that asked to be woken (`Action::WakeAt`) gets a Tick once
    /// the clock reaches that time.
    pub clocked: bool,
    /// An operator cancels order 0 (`pool_worker cancel`, a signed
    /// `cancelled` record landing at once) up to this many times, at any
    /// moment ([`Step::Cancel`]). 0: nobody cancels.
    pub max_cancels: u32,
    /// Broken on purpose: compaction takes every cancel for one key (as a
    /// key `0:cancelled` shared by all cancels would be), so a cancel of
    /// one order erases the cancel of another that has not taken effect.
    pub shared_cancel_key: bool,
    /// Issue 33: each instance's clock, `(offset ms, rate error in parts
    /// per million)`: its processes read `offset + now + now * ppm / 10^6`
    /// for the world's (global) time `now` ([`World::local`]). Inputs,
    /// records' `ts`, `Action::WakeAt` and `Action::Guard` are in that
    /// local time. Empty: every clock is the world's.
    pub clocks: Vec<(u64, i64)>,
    /// Broken on purpose (issue 33): the guard freezes a job past its
    /// deadline only when the worker's loop runs (the process takes a
    /// step), not on its own, so the job of a stopped worker is never
    /// frozen.
    pub guard_in_loop: bool,
    /// Model check: how far the clock jumps ([`Step::Advance`]); `None`:
    /// past the lease at once (`lease + 1`).
    pub jump_ms: Option<u64>,
    /// Judge [`LEASE_RESPECTED`]; false only so that a check of a broken
    /// lease rule goes on to what a wrongful revocation leads to (two live
    /// runs, [`RUN_CONCURRENTLY`]).
    pub judge_leases: bool,
    /// Simulation: each seed draws each instance's clock
    /// ([`Config::clocks`]): an offset up to this many ms, a rate error up
    /// to this many parts per million either way.
    pub random_clocks: Option<(u64, i64)>,
    /// Simulation: some pauses are cut-offs instead ([`Step::Cut`]).
    pub cut_offs: bool,
    /// Issue 36: each order's terms (its body's `not_before`, on the
    /// instances' clocks, and `key`), by offset; missing: none. A process
    /// told to run an order with terms is told them at once
    /// (`Input::Terms`) and starts the job on `Action::Start`.
    pub terms: Vec<Terms>,
    /// `Settings::key_concurrency` (R56).
    pub key_concurrency: u32,
    /// The orders topics in priority order (`Settings::topics`, R57; the
    /// last is the main one): each holds `orders` orders in its partition
    /// 0, all at the same offsets, so that any confusion of two topics'
    /// orders shows.
    pub topics: Vec<Topic>,
}

impl Config {
    /// Whether no record is ever erased: compaction is off, or no process
    /// ever dies (no crash, no lease, and no process completes as many
    /// orders as make it exit). Then each instance has one incarnation, its
    /// `booted` stays the newest, which the horizon protects, and every
    /// later record of the instance has it in its causal past
    /// ([`Config::causal`]), so nothing is erasable. (`World::fingerprint`
    /// asserts it where it relies on it.)
    pub fn never_erases(&self) -> bool {
        !self.compaction
            || (self.max_crashes == 0
                && self.lease_ms.is_none()
                && self.orders_per_process > self.total_orders())
    }

    /// Orders in all, over every topic.
    pub fn total_orders(&self) -> u32 {
        self.orders * self.topics.len() as u32
    }

    /// The orders topics' end offsets, as Answer reports them: the orders,
    /// all present from the start, in partition 0 of each topic.
    pub fn order_ends(&self) -> BTreeMap<Lane, i64> {
        self.topics
            .iter()
            .map(|&t| (Lane::new(t, 0), self.orders as i64))
            .collect()
    }

    pub fn settings(&self) -> Settings {
        Settings {
            flaw: self.flaw,
            lease_ms: self.lease_ms,
            checkpoint_every: self.checkpoint_every,
            orders_per_process: self.orders_per_process,
            settle_ms: self.settle_ms.unwrap_or(0),
            fence: self.fence,
            claim_defer_ms: self.claim_defer_ms,
            key_concurrency: self.key_concurrency,
            topics: self.topics.clone(),
            ..Settings::default()
        }
    }
}

/// One position of the log.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Shared by every copy of the world: a landed record never changes,
    /// and the model check copies the world at every step (copying the
    /// records was an eighth of its time).
    pub rec: Arc<Record>,
    pub erased: bool,
    /// Who wrote it: the pool (signed with `Config::claims_key`, if any) or
    /// a forger ([`Step::Forge`]).
    pub sig: Sig,
    /// How readers take it ([`World::admit`], decided as it lands: the
    /// same bytes and signature always get the same verdict), so a read
    /// costs no encoding and no HMAC. Follows from `rec` and `sig`, so left
    /// out of equality and hashing.
    pub foreign: bool,
    /// For [`World::fingerprint`], computed as the record lands
    /// ([`commute::landed`]): functions of the records up to this one, so
    /// left out of equality and hashing.
    pub(crate) cached: commute::Landed,
}

/// An entry is its record and whether it is erased (`cached` follows from
/// the log).
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (&self.rec, self.erased, self.sig) == (&other.rec, other.erased, other.sig)
    }
}

impl Eq for Entry {}

impl std::hash::Hash for Entry {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (&self.rec, self.erased, self.sig).hash(h);
    }
}

/// Who wrote a record of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Sig {
    /// The pool: signed with its key, when it has one.
    #[default]
    Pool,
    /// A forger, without a signature.
    Unsigned,
    /// A forger, signed with a key of its own.
    OtherKey,
}

/// The forger's own key ([`Sig::OtherKey`]).
fn forger_key() -> pool_worker_core::sign::ClaimsKey {
    pool_worker_core::sign::ClaimsKey::new(b"a key that is not the pool's").expect("long enough")
}

/// One append in flight: the records of one Kafka transaction, in order,
/// which land together, adjacent and in this order, or not at all. One
/// record for `Action::Append`; the records of an `Action::AppendAll` (a
/// process's last `completed` and its heir's `booted`, docs/protocol.md
/// R16, "Handed boot"). A crash leaves it an orphan whole: Kafka commits
/// or aborts a transaction whole, so its records never land apart (apart,
/// the heir's `booted` could land alone, or before the `completed`, which
/// would then be void and an orphan landing after a newer incarnation's
/// `booted`: a false alarm of [`SETTLED`]).
pub type Txn = Vec<Record>;

/// One instance number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Inst {
    /// The live process, if any.
    pub worker: Option<Worker>,
    /// Next log position to read.
    pub cursor: usize,
    /// Appends not yet delivered, oldest first (each a transaction,
    /// [`Txn`]).
    pub pending: VecDeque<Txn>,
    /// The process asked for orders and has not been answered.
    pub asked: bool,
    /// The job the process runs.
    pub running: Option<OrderId>,
    /// The order the process was told to run, whose job waits for
    /// `Action::Start` (it has terms), and its attempt.
    pub fetched: Option<(OrderId, u32)>,
    /// Ghost: the order the process was told to run, until it dies or exits
    /// (a run is over only once its `completed` is read back).
    pub ran: Option<OrderId>,
    /// Processes started so far (names incarnations `<i>.<starts>`).
    pub starts: u32,
    /// The last process died by a crash (not by exiting).
    pub crashed: bool,
    /// Simulation: the live process is frozen (a GC pause, a network
    /// partition) until this time: it reads, delivers, ticks nothing.
    pub frozen_until: u64,
    /// Simulation: the dead instance is not restarted before this time.
    pub down_until: u64,
    /// Simulation: when the shell's timer next sends Tick.
    pub next_tick: u64,
    /// Simulation with settling: the incarnation whose clean exit left the
    /// marker, taken by the next start.
    pub marker: Option<Incarnation>,
    /// When the last process died or exited.
    pub died_at: u64,
    /// With [`Config::fence`]: the live process has fenced the instance's
    /// older processes ([`Step::Fence`]).
    pub fenced: bool,
    /// Simulation with settling: the deadline a process that settles keeps
    /// in `STATE_DIR` (docs/protocol.md R17), inherited by the next start;
    /// removed when the process appends its `booted`.
    pub deadline: Option<u64>,
    /// Simulation ([`Config::clocked`]): the process asked for a Tick at
    /// this time (`Action::WakeAt`).
    pub wake_at: Option<u64>,
    /// The guard's newest deadline (R53; the process's local time): the
    /// job is frozen while the process's clock is past it.
    pub guard: Option<u64>,
    /// The job was killed (`Action::Kill`: the process read its own
    /// revocation, R38): it is no longer live, whatever its JobDone says.
    pub killed: bool,
    /// With [`Config::guard_in_loop`] (broken): the job was frozen when the
    /// worker's loop last ran past the deadline.
    pub loop_frozen: bool,
    /// Simulation: the process is cut off from the brokers until this time
    /// (global): its appends do not land, it reads nothing, but its loop
    /// (Tick, JobDone) and its guard go on.
    pub cut_until: u64,
    /// Simulation ([`Config::clocked`]): when each dead process that may
    /// still have orphans in flight died, by incarnation: an orphan expires
    /// by its own writer's death ([`World::expire_orphans`]), not by a
    /// later process's of its instance.
    pub deaths: Vec<(Incarnation, u64)>,
    /// With [`Config::handover`]: the live process's handing transaction
    /// (its last `completed` and its heir's `booted`, `Action::AppendAll`)
    /// has landed.
    pub handing: bool,
    /// With [`Config::handover`]: the last process exited `Ok` after its
    /// handing transaction landed, with nothing of the instance pending
    /// or orphaned (the shell's `done handed`, the supervisor's `go
    /// handed`): the next process is its heir, started with
    /// `Input::Handed` and no fence. False after a crash or any other exit.
    pub handed: bool,
    /// With [`Config::handed_view`]: the View the last process handed its
    /// heir as it exited (with [`Inst::handed`]); taken by the next start,
    /// whether it loads it (the heir) or not (`Step::StartPastHeir`).
    pub view: Option<HandedView>,
}

/// Ghost history of one order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct OrderGhost {
    /// The instance that ran it (Action::Run).
    pub runner: Option<u32>,
    pub runs: u32,
    /// How often the runner died while running it.
    pub deaths_running: u32,
    /// `completed` records the referee accepted.
    pub completions: u32,
    /// Position of the first `committed` of it the referee accepted.
    pub first_commit: Option<usize>,
    /// A void `completed` (its writer was revoked or fenced, or compaction
    /// erased what made it valid) came before any valid one: the job ran to
    /// its end, and the protocol does not run it again (src/boot.rs,
    /// `note_completion`). It counts as completed for liveness, not for
    /// "completed twice".
    pub finished_void: bool,
    /// A claim of it was accepted.
    pub claimed: bool,
    /// A job of it started ([`KEY_ORDER`]).
    pub started: bool,
    /// Position of the first record about it.
    pub first_pos: Option<usize>,
    /// Instances whose `committed` for it the referee accepted.
    pub committed_by: Vec<u32>,
    /// Leases: the newest run has not ended (by a completion, a valid
    /// revocation of its runner's hold, or its runner's death).
    pub open: bool,
    /// Leases: how the newest run ended, when it did without a completion.
    pub ended: Option<RunEnd>,
}

/// How a run ended without a completion (leases).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunEnd {
    /// The runner's hold was validly revoked (a lease takeover).
    Revoked,
    /// The runner's process died while running it.
    Died,
}

/// One nondeterministic step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Start a process for a dead instance.
    Start(u32),
    /// With [`Config::handover`]: the standby named its predecessor's heir
    /// dies before it runs (a crash, counted), and the instance's next
    /// process is another incarnation (`<i>.<starts + 2>`), which starts
    /// as without a handover, fence and own `booted` (docs/protocol.md
    /// R16, "Handed boot": the heir's `booted`, if it landed, names an
    /// incarnation that appends nothing).
    StartPastHeir(u32),
    /// Deliver the instance's oldest pending append (a whole transaction,
    /// [`Txn`]: its records land one after the other in this step).
    Deliver(u32),
    /// Deliver it and keep a copy that may land again (a producer retry).
    /// Only for an append of one record: a transaction of several (a
    /// handing one, R16) is delivered once, with no copy.
    DeliverDup(u32),
    /// An orphan (append of a dead process, or a retry copy) lands (a
    /// whole transaction, [`Txn`]).
    Land(usize),
    /// An orphan is lost for good (a whole transaction).
    Lose(usize),
    /// Read the next record (erased positions skipped).
    Read(u32),
    /// Tell the process it has read everything.
    CaughtUp(u32),
    /// Answer FindOrder with the orders' end offsets.
    Answer(u32),
    /// The running job ends ok.
    JobDone(u32),
    /// The process dies.
    Crash(u32),
    /// Compaction below the horizon.
    Compact,
    /// Compaction of the erasable records below this position only: the
    /// Kafka log cleaner cleans a prefix of the log (the part older than
    /// `min.compaction.lag.ms`), so any prefix of what the horizon allows
    /// may be cleaned (tests/pure/model.rs, where readers never lag).
    CompactBelow(usize),
    /// Compaction of the erasable records in this position's causal past
    /// and at it ([`Config::causal`]): what a cleaner that cleaned a prefix
    /// of some equivalent order of the log could have erased.
    CompactUpTo(usize),
    /// The shell's timer: Input::Tick (leases only).
    Tick(u32),
    /// The clock moves on by this many ms.
    Advance(u64),
    /// The live process freezes for this many ms (simulation).
    Pause(u32, u64),
    /// The live process is cut off from the brokers for this many ms
    /// (simulation; [`Inst::cut_until`]).
    Cut(u32, u64),
    /// The process dies and its instance stays down for this many ms
    /// (simulation: a host that is gone for a while).
    Outage(u32, u64),
    /// A writer of the claims topic who is not the pool appends a forged
    /// record ([`World::forgery`] says which), at once.
    Forge(u8),
    /// Model check: the process's deferral runs out now
    /// (`Worker::end_deferrals`, then Tick), whatever the clock says.
    Expire(u32),
    /// An operator cancels this order (`pool_worker cancel`): a `cancelled`
    /// record, signed as the pool's, lands at once.
    Cancel(OrderId),
    /// With [`Config::fence`]: the live process fences the instance's older
    /// processes (Kafka's `init_transactions` completes): their orphans are
    /// dropped, and the machine is told (`Input::Fenced`).
    Fence(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub log: Vec<Entry>,
    /// Instance `i` is `insts[i - 1]`.
    pub insts: Vec<Inst>,
    /// Appends in flight whose writer died, and retry copies: each a
    /// transaction ([`Txn`]), landing whole or never.
    pub orphans: Vec<Txn>,
    pub crashes: u32,
    pub dups: u32,
    /// Reads every delivered record, in order, never compacted.
    pub referee: View,
    pub orders: Vec<OrderGhost>,
    pub newest_booted: Vec<Option<usize>>,
    /// Per topic (by its place in `Config::topics`): the highest offset
    /// claimed, and how many orders were claimed.
    pub max_claimed: Vec<Option<i64>>,
    pub claimed_count: Vec<i64>,
    /// Orders with at least one accepted completion.
    pub completed: u32,
    /// The first property violated: (property, what happened).
    pub violation: Option<(&'static str, String)>,
    /// The clock (ms), given with every input.
    pub now: u64,
    /// Clock jumps taken (model check, bounded by `Config::max_jumps`).
    pub jumps: u32,
    /// Copied from the config: `Config::terms`, `Config::key_concurrency`.
    terms: Arc<Vec<Terms>>,
    key_concurrency: u32,
    /// Copied from the config: `Config::topics`, `Config::orders` (per
    /// topic) and `Config::order_ends`. An order's ghost is
    /// `orders[slot]`, [`World::slot`].
    topics: Arc<Vec<Topic>>,
    per_topic: u32,
    ends: Arc<BTreeMap<Lane, i64>>,
    /// Parked records the referee accepted, and jobs started after a park.
    pub parks: u32,
    pub unparked_runs: u32,
    /// Pauses and outages so far (simulation).
    pub pauses: u32,
    pub outages: u32,
    /// Revocations the referee accepted (lease takeovers).
    pub takeovers: u32,
    /// Runs of an order after an earlier run of it ended by a valid
    /// revocation (the one case of a second run that leases add), and
    /// after its runner's death.
    pub second_runs_takeover: u32,
    pub second_runs_death: u32,
    /// Of the second runs after a takeover: runs started by a process
    /// whose hold was already revoked in the log (it had not read it yet).
    pub stale_runs: u32,
    /// Copied from the config: `Config::lease_ms`, `Config::forge_seen`.
    pub lease_ms: Option<u64>,
    pub forge_seen: bool,
    leases: bool,
    /// Decisions (`committed`, `yielded`) the referee found stray: their
    /// writer held no claim of their order. The protocol writes none
    /// without compaction; [`World::fingerprint`] with `unerased` relies on
    /// that and checks it.
    pub strays: u32,
    /// Copied from the config: `Config::settle_ms` is set, or
    /// `Config::fence`: [`SETTLED`] is checked.
    settling: bool,
    /// Copied from the config: `Config::fence`.
    pub fence: bool,
    /// Copied from the config: `Config::handover` (and `Config::fence`).
    pub handover: bool,
    /// Copied from the config: `Config::clocked`.
    clocked: bool,
    /// Simulation with settling: processes started with a clean-exit
    /// marker, and without one (they wait).
    pub starts_marked: u32,
    pub starts_unmarked: u32,
    /// With `Config::handover`: processes started as their predecessor's
    /// heir (`Input::Handed`; figures only, left out of the fingerprint).
    pub starts_handed: u32,
    /// Copied from the config: `Config::handed_view` (with
    /// `Config::handover` and `Config::fence`), `Config::handed_view_skips`.
    handed_view: bool,
    handed_view_skips: Option<ViewSkip>,
    /// With `Config::handed_view`: views handed to a heir that it loaded
    /// (`Worker::load_handed`), and views dropped at a start past the heir
    /// (`Step::StartPastHeir`), the machine refusing them (figures; with
    /// every handed start loading one, the first is `starts_handed`).
    pub views_loaded: u32,
    pub views_refused: u32,
    /// Forged records appended so far ([`Step::Forge`]).
    pub forged: u32,
    /// Cancels appended so far ([`Step::Cancel`]).
    pub cancels: u32,
    /// Copied from the config: `Config::shared_cancel_key`.
    shared_cancel_key: bool,
    /// Copied from the config: how readers judge records
    /// (`Config::max_forgeries` above 0, `claims_key`, `trust_all`, the
    /// orders' end).
    trust: Option<(Option<pool_worker_core::sign::ClaimsKey>, bool)>,
    /// Copied from the config: `Config::clocks` (shared: never changes).
    clocks: Arc<Vec<(u64, i64)>>,
    /// Copied from the config: `Config::guard_in_loop`,
    /// `Config::judge_leases`.
    guard_in_loop: bool,
    judge_leases: bool,
    /// Cut-offs so far (simulation).
    pub cuts: u32,
    /// Jobs frozen by their guard, counted as they freeze (a live job
    /// whose clock passed its deadline), and thawed by a later deadline.
    pub freezes: u32,
    pub thaws: u32,
}

pub const RUN_BY_TWO: &str = "no order is run by two instances";
pub const RUN_TWICE: &str = "an order is run again only after its runner died running it";
pub const COMPLETED_TWICE: &str = "no order is completed twice";
pub const COMPLETED_UNCOMMITTED: &str = "every completion follows a commit by the same instance";
pub const SKIPPED: &str = "no order is left unclaimed below the highest claimed";
/// With leases, RUN_BY_TWO and RUN_TWICE read: an order is run again (by
/// anyone) only after the earlier run ended without a completion — its
/// runner's hold was validly revoked or its runner died running it.
pub const RUN_AFTER_REVOKED: &str =
    "a process never runs an order after reading its own revocation";
/// The settle rule (docs/protocol.md R16, I7), checked where the
/// machines keep it themselves ([`Config::settle_ms`]).
pub const SETTLED: &str = "a dead process's append lands before its successor's booted or never";
pub const TWO_HOLDS: &str = "no two instances hold a valid committed hold on the same order";
pub const LEASE_RESPECTED: &str =
    "a hold is revoked only if nothing of it was written within the lease before the revocation";
/// `pool_worker cancel` (docs/protocol.md R51, R52): the
/// log's order decides, so a cancel that precedes an order's first valid
/// commit means no job of it ever starts, and no process starts a job of
/// an order whose cancel it has read.
pub const RUN_CANCELLED: &str =
    "no job starts for an order cancelled before its first commit, or by a process that read its cancel";
/// Issue 33 (R36, R53): at no moment do two jobs of one order run: a
/// job is *live* from its start (`Action::Run`) until it ends (JobDone,
/// its process dies or exits, `Action::Kill`) or its guard freezes it
/// (the process's clock past the newest `Action::Guard` deadline; with
/// [`Config::guard_in_loop`], only once the worker's loop has run past
/// it). Checked after every step.
pub const RUN_CONCURRENTLY: &str = "no two jobs of one order are live at the same time";
/// Issue 36, R54: by its starter's clock.
pub const RUN_EARLY: &str = "no order's job starts before its not_before";
/// Issue 36, R56: live as in [`RUN_CONCURRENTLY`].
pub const KEY_LIMIT: &str = "no more than KEY_CONCURRENCY jobs of one key are live at once";
/// Issue 36, R56: with `KEY_CONCURRENCY` 1, the orders of one key in one
/// partition start in offset order: when a job of such an order first
/// starts, every order of the key below it in its lane has started or
/// ended (completed, also without running: cancelled, given up). Orders
/// with a `not_before` are left out (one not due yet lets later ones go
/// first, R56), and so is a start by a retry of its instance's own hold
/// after a crash (R21: the first run may have started; I15).
pub const KEY_ORDER: &str = "the orders of one key in one partition start in offset order";
/// R29, R57: an instance that is first in line for an order of a topic
/// claims no order of a later topic instead (of the orders it may claim,
/// it takes one of the first topic), and claims no order of a topic not
/// listed. Judged on the View the claimant chose with, as it appends its
/// claim (a first claim or an unpark, not a takeover).
pub const PRIORITY: &str =
    "no instance first in line for an order of a topic claims an order of a later topic";
pub const SAFETY: [&str; 14] = [
    RUN_BY_TWO,
    RUN_TWICE,
    COMPLETED_TWICE,
    COMPLETED_UNCOMMITTED,
    SKIPPED,
    RUN_AFTER_REVOKED,
    TWO_HOLDS,
    LEASE_RESPECTED,
    RUN_CANCELLED,
    RUN_CONCURRENTLY,
    RUN_EARLY,
    KEY_LIMIT,
    KEY_ORDER,
    PRIORITY,
];

fn ok_outcome() -> Outcome {
    Outcome {
        status: Status::Ok,
        exit_code: Some(0),
        duration_ms: 0,
        reason: None,
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        traceparent: None,
        retry_of: None,
    }
}

impl World {
    pub fn new(cfg: &Config) -> World {
        World {
            log: Vec::new(),
            insts: vec![Inst::default(); cfg.instances as usize],
            orphans: Vec::new(),
            crashes: 0,
            dups: 0,
            referee: View::new(),
            orders: vec![OrderGhost::default(); cfg.total_orders() as usize],
            newest_booted: vec![None; cfg.instances as usize],
            max_claimed: vec![None; cfg.topics.len()],
            claimed_count: vec![0; cfg.topics.len()],
            completed: 0,
            violation: None,
            now: 0,
            jumps: 0,
            terms: Arc::new(cfg.terms.clone()),
            key_concurrency: cfg.key_concurrency,
            topics: Arc::new(cfg.topics.clone()),
            per_topic: cfg.orders,
            ends: Arc::new(cfg.order_ends()),
            parks: 0,
            unparked_runs: 0,
            pauses: 0,
            outages: 0,
            takeovers: 0,
            second_runs_takeover: 0,
            second_runs_death: 0,
            stale_runs: 0,
            lease_ms: cfg.lease_ms,
            forge_seen: cfg.forge_seen,
            leases: cfg.lease_ms.is_some(),
            strays: 0,
            settling: cfg.settle_ms.is_some() || cfg.fence,
            fence: cfg.fence,
            handover: cfg.handover && cfg.fence,
            clocked: cfg.clocked,
            starts_marked: 0,
            starts_unmarked: 0,
            starts_handed: 0,
            handed_view: cfg.handed_view && cfg.handover && cfg.fence,
            handed_view_skips: cfg.handed_view_skips,
            views_loaded: 0,
            views_refused: 0,
            forged: 0,
            cancels: 0,
            shared_cancel_key: cfg.shared_cancel_key,
            trust: (cfg.max_forgeries > 0).then(|| (cfg.claims_key.clone(), cfg.trust_all)),
            clocks: Arc::new(cfg.clocks.clone()),
            guard_in_loop: cfg.guard_in_loop,
            judge_leases: cfg.judge_leases,
            cuts: 0,
            freezes: 0,
            thaws: 0,
        }
    }

    /// Where the ghost of `order` is in [`World::orders`]: its topic's
    /// place in `Config::topics` times the orders per topic, plus its
    /// offset; `None` for an order that does not exist.
    pub fn slot(&self, order: OrderId) -> Option<usize> {
        let t = self.topics.iter().position(|&t| t == order.topic)?;
        let ok = order.partition == 0 && (0..self.per_topic as i64).contains(&order.offset);
        ok.then(|| t * self.per_topic as usize + order.offset as usize)
    }

    /// The order whose ghost is `orders[slot]` ([`World::slot`]).
    pub fn order_at(&self, slot: usize) -> OrderId {
        let n = self.per_topic as usize;
        Lane::new(self.topics[slot / n], 0).at((slot % n) as i64)
    }

    /// Instance `i`'s clock at the world's time `g` ([`Config::clocks`]).
    pub fn local_at(&self, i: u32, g: u64) -> u64 {
        match self.clocks.get(i as usize - 1) {
            None => g,
            Some(&(off, ppm)) => {
                let skew = (g as i128 * ppm as i128).div_euclid(1_000_000);
                (off as i128 + g as i128 + skew).max(0) as u64
            }
        }
    }

    /// Instance `i`'s clock now.
    pub fn local(&self, i: u32) -> u64 {
        self.local_at(i, self.now)
    }

    /// The world's earliest time at which instance `i`'s clock reads `t`
    /// or more (0 if it always does).
    pub fn global_of(&self, i: u32, t: u64) -> u64 {
        let Some(&(off, ppm)) = self.clocks.get(i as usize - 1) else {
            return t;
        };
        let est = (t as i128 - off as i128) * 1_000_000 / (1_000_000 + ppm as i128);
        let mut g = est.max(0) as u64;
        while g > 0 && self.local_at(i, g - 1) >= t {
            g -= 1;
        }
        while self.local_at(i, g) < t {
            g += 1;
        }
        g
    }

    /// The order whose job instance `i`'s process runs and is live (see
    /// [`RUN_CONCURRENTLY`]).
    pub fn live_job(&self, i: u32) -> Option<OrderId> {
        let inst = self.inst(i);
        let order = inst
            .running
            .filter(|_| !inst.killed && inst.worker.is_some())?;
        let frozen = if self.guard_in_loop {
            inst.loop_frozen
        } else {
            inst.guard.is_some_and(|d| self.local(i) > d)
        };
        (!frozen).then_some(order)
    }

    /// The terms of `order` (none if the config gives none), by offset:
    /// the orders at one offset of every topic have the same terms.
    pub fn terms_of(&self, order: OrderId) -> Option<&Terms> {
        self.terms.get(order.offset as usize)
    }

    /// [`RUN_CONCURRENTLY`] and [`KEY_LIMIT`], after every step.
    fn judge_live(&mut self) {
        let n = self.insts.len() as u32;
        let live: Vec<(u32, OrderId)> = (1..=n)
            .filter_map(|i| self.live_job(i).map(|o| (i, o)))
            .collect();
        let mut per_key: BTreeMap<String, Vec<(u32, OrderId)>> = BTreeMap::new();
        for &(i, o) in &live {
            if let Some(k) = self.terms_of(o).and_then(|t| t.key.as_ref()) {
                per_key.entry(k.clone()).or_default().push((i, o));
            }
        }
        if let Some((k, jobs)) = per_key
            .into_iter()
            .find(|(_, jobs)| jobs.len() > self.key_concurrency as usize)
        {
            let what = format!(
                "at {} ms, {} jobs of key {k:?} are live at once: {jobs:?} (KEY_CONCURRENCY {})",
                self.now,
                jobs.len(),
                self.key_concurrency
            );
            return self.violate(KEY_LIMIT, what);
        }
        for (k, &(i, o)) in live.iter().enumerate() {
            if let Some(&(j, _)) = live[k + 1..].iter().find(|(_, p)| *p == o) {
                let (gi, gj) = (self.inst(i).guard, self.inst(j).guard);
                let what = format!(
                    "at {} ms, the jobs of order {o} run in instances {i} (clock {} ms, guard {gi:?}) and {j} (clock {} ms, guard {gj:?}) at once",
                    self.now,
                    self.local(i),
                    self.local(j)
                );
                return self.violate(RUN_CONCURRENTLY, what);
            }
        }
    }

    /// Forgery `k` ([`Step::Forge`]), made from what the log shows (a
    /// forger who can write the claims topic can read it too), with the
    /// signature it carries. With the pool's key: 0, a completion of order
    /// 0 by instance 1 in its current incarnation (as if it ran it), with
    /// no signature; 1, a claim of order 0 by instance 2 ranked first,
    /// signed with another key. Without: 2, a claim of the order past the
    /// last (the orders' end) moving the frontier past it, unsigned.
    pub fn forgery(&self, k: u8) -> (Record, Sig) {
        let inc = |i: u32| {
            self.insts
                .get(i as usize - 1)
                .and_then(|s| s.worker.as_ref())
                .map_or(format!("{i}.1"), |w| w.incarnation.to_string())
        };
        let seq = 1_000 + self.forged as u64;
        let n = self.per_topic as i64;
        match k {
            0 => {
                let mut r = Record::of(1, Event::Completed, &inc(1), self.now)
                    .with_order(OrderId::new(0, 0));
                r.seq = seq;
                r.set_attempt(1);
                r.set_outcome(Some(ok_outcome()));
                r.next.insert(0.into(), 1);
                (r, Sig::Unsigned)
            }
            1 => {
                let mut r =
                    Record::of(2, Event::Claimed, &inc(2), self.now).with_order(OrderId::new(0, 0));
                r.seq = seq;
                r.set_attempt(1);
                r.set_rank(Some(0));
                r.next.insert(0.into(), 1);
                (r, Sig::OtherKey)
            }
            _ => {
                let mut r =
                    Record::of(2, Event::Claimed, &inc(2), self.now).with_order(OrderId::new(0, n));
                r.seq = seq;
                r.set_attempt(1);
                r.next.insert(0.into(), n + 1);
                (r, Sig::Unsigned)
            }
        }
    }

    /// [`World::admit`] for a record about to land.
    fn admit_new(&mut self, r: &Record, sig: Sig) -> Result<(), pool_worker_core::record::Foreign> {
        let cached = commute::landed(&self.log, r);
        self.log.push(Entry {
            rec: Arc::new(r.clone()),
            erased: false,
            sig,
            foreign: false,
            cached,
        });
        let verdict = self.admit(self.log.len() - 1).map(drop);
        self.log.pop();
        verdict
    }

    /// The forgeries a forger may append in this configuration.
    fn forgeries(cfg: &Config) -> &'static [u8] {
        if cfg.claims_key.is_some() {
            &[0, 1]
        } else {
            &[2]
        }
    }

    /// The record at `pos` as a reader takes it: the pool's, or foreign —
    /// through the shell's own decoding (pool_worker/src/kafka/claims_reader.rs, `Gate`): the value's
    /// bytes and its signature header as they would be in Kafka, the
    /// verdict on the signature (src/sign.rs), `Record::decode_with`, and
    /// `Record::impossible` against the orders' end offsets.
    fn admit(&self, pos: usize) -> Result<Record, pool_worker_core::record::Foreign> {
        let e = &self.log[pos];
        let Some((key, trust_all)) = &self.trust else {
            return Ok(Record::clone(&e.rec));
        };
        if *trust_all {
            return Ok(Record::clone(&e.rec));
        }
        let value = e.rec.encode();
        let sig = match e.sig {
            Sig::Pool => key.as_ref().map(|k| k.sign(&value)),
            Sig::Unsigned => None,
            Sig::OtherKey => Some(forger_key().sign(&value)),
        };
        let verdict = pool_worker_core::sign::verdict(
            key.as_ref(),
            Some(&value),
            sig.as_deref().map(str::as_bytes),
        );
        let rec = Record::decode_with(Some(e.rec.key().as_bytes()), Some(&value), verdict)?;
        match rec.impossible(&self.ends) {
            Some(why) => Err(pool_worker_core::record::Foreign::Impossible(why)),
            None => Ok(rec),
        }
    }

    pub fn all_completed(&self, cfg: &Config) -> bool {
        self.completed == cfg.total_orders()
    }

    fn inst(&self, i: u32) -> &Inst {
        &self.insts[i as usize - 1]
    }

    fn inst_mut(&mut self, i: u32) -> &mut Inst {
        &mut self.insts[i as usize - 1]
    }

    /// The next present position at or after `from`.
    pub fn next_present(&self, from: usize) -> Option<usize> {
        (from..self.log.len()).find(|&p| !self.log[p].erased)
    }

    fn violate(&mut self, prop: &'static str, what: String) {
        if self.violation.is_none() {
            self.violation = Some((prop, what));
        }
    }

    /// The steps one instance can take (not Crash, not DeliverDup).
    pub fn instance_steps(&self, i: u32, out: &mut Vec<Step>) {
        let inst = self.inst(i);
        let Some(w) = &inst.worker else {
            if self.now >= inst.down_until {
                out.push(Step::Start(i));
            }
            return;
        };
        if self.now < inst.frozen_until {
            return;
        }
        if self.now < inst.cut_until {
            // Cut off: only the job and the loop (Tick) go on.
            if inst.running.is_some() {
                out.push(Step::JobDone(i));
            }
            return;
        }
        if !inst.pending.is_empty() {
            out.push(Step::Deliver(i));
        }
        let at_end = self.next_present(inst.cursor).is_none();
        if !at_end {
            out.push(Step::Read(i));
        } else {
            // CaughtUp is a step where the machine says it would act on it
            // (Worker::awaits_caught_up): the end of a boot's or a settling
            // read. A choosing machine that is looking gets it within the
            // read that reached the end (World::read), as the shell's reader
            // reports the end once each time it reaches it.
            if w.awaits_caught_up() && w.phase != Phase::Choose {
                out.push(Step::CaughtUp(i));
            }
            if inst.asked {
                out.push(Step::Answer(i));
            }
        }
        if inst.running.is_some() {
            out.push(Step::JobDone(i));
        }
        if self.fence && !inst.fenced {
            out.push(Step::Fence(i));
        }
    }

    /// Every step enabled (the model check's branching).
    pub fn steps(&self, cfg: &Config, out: &mut Vec<Step>) {
        for i in 1..=cfg.instances {
            self.instance_steps(i, out);
            let inst = self.inst(i);
            if self.past_heir(cfg, i) {
                out.push(Step::StartPastHeir(i));
            }
            if inst.worker.is_some() {
                // A transaction of several records is never duplicated
                // (`Step::DeliverDup`).
                let single = inst.pending.front().is_some_and(|t| t.len() == 1);
                if single && self.dups < cfg.max_dups {
                    out.push(Step::DeliverDup(i));
                }
                if self.crashes < cfg.max_crashes {
                    out.push(Step::Crash(i));
                }
                if cfg.lease_ms.is_some() {
                    out.push(Step::Tick(i));
                }
                if self.expirable(i) {
                    out.push(Step::Expire(i));
                }
            }
        }
        if let Some(lease) = cfg.lease_ms {
            if self.jumps < cfg.max_jumps {
                out.push(Step::Advance(cfg.jump_ms.unwrap_or(lease + 1)));
            }
        } else if self.jumps < cfg.max_jumps && cfg.terms.iter().any(|t| t.not_before.is_some()) {
            // Delayed orders: time passes without leases too.
            out.push(Step::Advance(cfg.jump_ms.unwrap_or(1)));
        }
        for k in 0..self.orphans.len() {
            // Identical orphans give identical successors.
            if !self.orphans[..k].contains(&self.orphans[k]) {
                out.push(Step::Land(k));
            }
        }
        if cfg.compaction && !self.erasable(cfg).is_empty() {
            out.push(Step::Compact);
        }
        if self.forged < cfg.max_forgeries {
            out.extend(Self::forgeries(cfg).iter().map(|&k| Step::Forge(k)));
        }
        if self.cancels < cfg.max_cancels {
            out.push(Step::Cancel(OrderId::new(0, 0)));
        }
    }

    /// Whether [`Step::StartPastHeir`] may start instance `i`: handover,
    /// a dead instance that had a process (so a heir named), a crash left.
    pub fn past_heir(&self, cfg: &Config, i: u32) -> bool {
        let inst = self.inst(i);
        self.handover
            && inst.worker.is_none()
            && inst.starts > 0
            && self.now >= inst.down_until
            && self.crashes < cfg.max_crashes
    }

    /// Whether instance `i`'s live process defers to other idle instances
    /// (and is not frozen): its deferral may run out ([`Step::Expire`]).
    pub fn expirable(&self, i: u32) -> bool {
        let inst = self.inst(i);
        self.now >= inst.frozen_until
            && inst
                .worker
                .as_ref()
                .is_some_and(|w| w.deferring().is_some())
    }

    pub fn step(&mut self, cfg: &Config, s: &Step) {
        self.step_inner(cfg, s);
        self.count_freezes();
        self.judge_live();
    }

    /// Counts the live jobs that froze or thawed since the last step
    /// (figures only).
    fn count_freezes(&mut self) {
        // Not in the model check, where counters would split states.
        if self.guard_in_loop || !self.clocked {
            return;
        }
        for k in 0..self.insts.len() {
            let i = k as u32 + 1;
            let inst = &self.insts[k];
            let runs = inst.running.is_some() && !inst.killed && inst.worker.is_some();
            let frozen = runs && inst.guard.is_some_and(|d| self.local(i) > d);
            if frozen != inst.loop_frozen {
                if frozen {
                    self.freezes += 1;
                } else if runs {
                    self.thaws += 1;
                }
                self.insts[k].loop_frozen = frozen;
            }
        }
    }

    fn step_inner(&mut self, cfg: &Config, s: &Step) {
        match *s {
            Step::Start(i) => {
                if cfg.settle || !cfg.late_appends {
                    self.orphans.retain(|t| !Self::of_instance(t, i));
                }
                let now = self.local(i);
                let inst = self.inst_mut(i);
                inst.starts += 1;
                let inc = Incarnation::new(format!("{i}.{}", inst.starts));
                let clean = inst.marker.take();
                inst.fenced = false;
                if self.settling && !self.fence {
                    *if clean.is_some() {
                        &mut self.starts_marked
                    } else {
                        &mut self.starts_unmarked
                    } += 1;
                }
                let inherited = if self.settling && !self.fence {
                    self.inst_mut(i).deadline.take()
                } else {
                    None
                };
                let (mut w, acts) =
                    Worker::start_settling(i.into(), inc, cfg.settings(), now, clean, inherited);
                if let Phase::Settle { until, .. } = w.phase {
                    if self.settling && !self.fence {
                        // R17: kept for a successor, should this one die
                        // before it boots.
                        self.inst_mut(i).deadline = Some(until);
                    }
                }
                // R16, "Handed boot": the process that exited last handed
                // over to this one (its heir, named `<i>.<starts>` when it
                // started): no fence; its `booted` is in the log.
                let handed = std::mem::take(&mut self.inst_mut(i).handed);
                // R16, "Handed view": the view it handed its heir, which
                // the heir boots from. Taken by this start whatever it
                // is: a view serves the one start it was for, or none.
                let view = self.inst_mut(i).view.take();
                let from_view = match view {
                    Some(v) if handed => {
                        assert!(w.load_handed(&v, now), "the heir refuses its handed view");
                        self.views_loaded += 1;
                        let at = v.snapshot.at;
                        Some(match self.handed_view_skips {
                            None => at.get() as usize,
                            // Broken on purpose: on from the log's end.
                            Some(ViewSkip::ToEnd) => self.log.len(),
                            Some(ViewSkip::PastBooted) => {
                                // Its `booted` (at the view's end), then
                                // on from the log's end.
                                let r = Record::clone(&self.log[at.get() as usize].rec);
                                let acts = w.handle(Input::Record(at, r), now);
                                assert_eq!(acts, vec![], "the heir acted on its booted");
                                self.log.len()
                            }
                        })
                    }
                    Some(v) => {
                        // A start past the heir: offered the view (the
                        // shell would not even take it, at a plain `go`),
                        // the machine refuses it: it names the heir, not
                        // this incarnation.
                        assert!(
                            !w.load_handed(&v, now),
                            "{} loads the view handed to {}",
                            w.incarnation,
                            v.heir
                        );
                        self.views_refused += 1;
                        None
                    }
                    None => {
                        assert!(
                            !(handed && self.handed_view),
                            "a handed start without a handed view"
                        );
                        None
                    }
                };
                // Else boot from the newest checkpoint the log still
                // holds, as the shell does (pool_worker/src/kafka/clients.rs).
                let snap = self
                    .log
                    .iter()
                    .filter(|e| !e.erased && e.rec.event() == Event::Checkpoint)
                    .filter_map(|e| e.rec.snapshot())
                    .max_by_key(|s| s.at)
                    .filter(|_| cfg.checkpoint_every.is_some() && from_view.is_none())
                    .cloned();
                let cursor = match (&snap, from_view) {
                    (_, Some(at)) => at,
                    (Some(s), None) if w.load(s, now) => s.at.get() as usize,
                    _ => 0,
                };
                let inst = self.inst_mut(i);
                inst.worker = Some(w);
                inst.cursor = cursor;
                inst.handing = false;
                inst.asked = false;
                inst.running = None;
                inst.crashed = false;
                inst.frozen_until = 0;
                inst.cut_until = 0;
                inst.wake_at = None;
                inst.guard = None;
                inst.killed = false;
                inst.loop_frozen = false;
                if let Some(lease) = cfg.lease_ms {
                    // Every lease/3 on the process's own clock, as the
                    // shell's timer.
                    let next = self.global_of(i, now + lease / 3);
                    self.inst_mut(i).next_tick = next;
                }
                self.act(i, acts);
                if self.handover {
                    // Every process is told its heir: its instance's next
                    // process, `<i>.<starts + 1>`.
                    let starts = self.inst(i).starts;
                    let heir = Incarnation::new(format!("{i}.{}", starts + 1));
                    self.feed(i, Input::Heir(heir));
                    if handed {
                        self.starts_handed += 1;
                        self.inst_mut(i).fenced = true;
                        self.feed(i, Input::Handed);
                    }
                }
            }
            Step::StartPastHeir(i) => {
                self.crashes += 1;
                let inst = self.inst_mut(i);
                inst.starts += 1;
                inst.handed = false;
                self.step_inner(cfg, &Step::Start(i));
            }
            Step::Deliver(i) => {
                let t = self.inst_mut(i).pending.pop_front().expect("pending");
                self.deliver(i, t);
            }
            Step::DeliverDup(i) => {
                let t = self.inst_mut(i).pending.pop_front().expect("pending");
                if t.len() > 1 {
                    // A transaction of several records (a handing one,
                    // `Action::AppendAll`) is not duplicated: a
                    // transactional producer's retry never lands twice.
                    // Only the simulation asks this (the model check does
                    // not offer it): delivered once.
                    return self.deliver(i, t);
                }
                self.dups += 1;
                if cfg.late_appends {
                    self.orphans.push(t.clone());
                } else {
                    // The retry lands next (or, if the process dies, never).
                    self.inst_mut(i).pending.push_front(t.clone());
                }
                self.deliver(i, t);
            }
            Step::Land(k) => {
                let t = self.orphans.remove(k);
                self.land_txn(t, true);
            }
            Step::Lose(k) => {
                self.orphans.remove(k);
            }
            Step::Read(i) => self.read(cfg, i),
            Step::Fence(i) => {
                self.orphans.retain(|t| !Self::of_instance(t, i));
                self.inst_mut(i).fenced = true;
                self.feed(i, Input::Fenced);
            }
            Step::Expire(i) => {
                if let Some(w) = &mut self.inst_mut(i).worker {
                    w.end_deferrals();
                }
                self.feed(i, Input::Tick);
                self.answer_now(cfg, i);
            }
            Step::CaughtUp(i) => {
                self.inst_mut(i).cursor = self.log.len();
                self.feed(i, Input::CaughtUp);
            }
            Step::Answer(i) => {
                self.inst_mut(i).asked = false;
                self.inst_mut(i).cursor = self.log.len();
                self.feed(i, Input::Orders(cfg.order_ends()));
            }
            Step::JobDone(i) => {
                self.inst_mut(i).running = None;
                self.feed(i, Input::JobDone(ok_outcome()));
            }
            Step::Crash(i) => self.crash(i),
            Step::Outage(i, ms) => {
                self.outages += 1;
                self.crash(i);
                self.inst_mut(i).down_until = self.now + ms;
            }
            Step::Tick(i) => {
                let now = self.now;
                if let Some(lease) = cfg.lease_ms {
                    let next = self.global_of(i, self.local(i) + lease / 3);
                    self.inst_mut(i).next_tick = next;
                }
                let inst = self.inst_mut(i);
                inst.wake_at = inst.wake_at.filter(|&t| t > now);
                self.feed(i, Input::Tick);
            }
            Step::Advance(ms) => {
                self.now += ms;
                self.jumps += 1;
            }
            Step::Pause(i, ms) => {
                self.pauses += 1;
                let now = self.now;
                self.inst_mut(i).frozen_until = now + ms;
            }
            Step::Cut(i, ms) => {
                self.cuts += 1;
                let now = self.now;
                self.inst_mut(i).cut_until = now + ms;
            }
            Step::Forge(k) => {
                let (r, sig) = self.forgery(k);
                self.forged += 1;
                self.land(r, sig);
            }
            Step::Cancel(order) => {
                self.cancels += 1;
                let r =
                    Record::cancel(order, &format!("op.{}", self.cancels), self.now, "operator");
                self.land(r, Sig::Pool);
            }
            Step::Compact => {
                for p in self.erasable(cfg) {
                    self.log[p].erased = true;
                }
            }
            Step::CompactUpTo(p) => {
                let pasts = self.causal_pasts();
                let past = pasts[p] | 1 << p;
                for q in self
                    .erasable_causal_in(cfg, &pasts)
                    .into_iter()
                    .filter(|&q| past >> q & 1 == 1)
                {
                    self.log[q].erased = true;
                }
            }
            Step::CompactBelow(h) => {
                for p in self.erasable(cfg).into_iter().filter(|&p| p < h) {
                    self.log[p].erased = true;
                }
            }
        }
    }

    /// Whether a record of transaction `t` is instance `i`'s (written by
    /// its processes: of its number and no other writer's, or a revocation
    /// it wrote): what the instance's next start (with `Config::settle`)
    /// and its fence drop.
    fn of_instance(t: &Txn, i: u32) -> bool {
        t.iter()
            .any(|r| (r.instance.get() == i && r.by().is_none()) || r.by() == Some(i.into()))
    }

    /// Whether `t` is a handing transaction (R16, "Handed boot": a
    /// process's last `completed` and its heir's `booted`).
    fn handing(t: &Txn) -> bool {
        t.len() > 1 && t.iter().any(|r| r.event() == Event::Booted)
    }

    /// Lands live instance `i`'s transaction `t` ([`World::land_txn`]);
    /// a handing one is noted ([`Inst::handing`]).
    fn deliver(&mut self, i: u32, t: Txn) {
        if Self::handing(&t) {
            self.inst_mut(i).handing = true;
        }
        self.land_txn(t, false);
    }

    /// Lands transaction `t`, its records one after the other; an
    /// `orphan`'s records are judged by [`SETTLED`] as they land. A
    /// handing transaction is its writer's last: it ends whatever of its
    /// instance is still in flight, which can only be its writer's own
    /// appends (its fence dropped the older processes', and a handed
    /// start has none): a transactional producer's transactions commit
    /// in order, and a retry never lands after a later transaction of the
    /// same producer committed (the world's late copies and its orphans
    /// landing in any order stand for more than Kafka allows). Without
    /// this, a retry copy of the writer's claim landed after its heir's
    /// `booted` and broke [`SETTLED`] (2 × 1, a crash and a duplicate).
    fn land_txn(&mut self, t: Txn, orphan: bool) {
        if Self::handing(&t) {
            let i = t[0].writer().get();
            self.orphans.retain(|o| !Self::of_instance(o, i));
        }
        for r in t {
            if orphan && self.settling {
                self.check_settled(&r);
            }
            self.append(r);
        }
    }

    /// Reads the next record (with `batch_reads`, on until the machine acts
    /// or negotiates), and tells a looking machine that reached the end.
    fn read(&mut self, cfg: &Config, i: u32) {
        while let Some(pos) = self.next_present(self.inst(i).cursor) {
            let input = match self.log[pos].foreign {
                false => {
                    Input::Record(Position::new(pos as u64), Record::clone(&self.log[pos].rec))
                }
                true => Input::Foreign(Position::new(pos as u64)),
            };
            self.inst_mut(i).cursor = pos + 1;
            if self.feed(i, input) || !cfg.batch_reads {
                break;
            }
            match &self.inst(i).worker {
                Some(w) if !matches!(w.phase, Phase::Negotiate { .. }) => {}
                _ => break,
            }
        }
        // The reader reached the end: the shell's reader says so
        // (Input::CaughtUp), and a machine looking for an order asks for
        // the orders again (Worker::on_caught_up: the log moved, and an
        // order may now be its to claim), answered at once.
        let looking = self.inst(i).worker.as_ref().is_some_and(|w| w.looking());
        if looking && self.next_present(self.inst(i).cursor).is_none() {
            self.feed(i, Input::CaughtUp);
            self.answer_now(cfg, i);
        }
    }

    /// A process that asked for orders while deferring (the log moved, or
    /// its deferral ran out) is answered at once, if it has read to the
    /// end: the answer depends only on its view, its clock and the orders
    /// (fixed in the model and the simulation), none of which another step
    /// changes before it reads on; and an answer taken later is the same
    /// answer with its claim still pending, which `Deliver` already
    /// interleaves. (Without this, the model check counted every state
    /// once with the question open and once answered.)
    fn answer_now(&mut self, cfg: &Config, i: u32) {
        let inst = self.inst(i);
        if inst.asked
            && self.next_present(inst.cursor).is_none()
            && self.now >= inst.frozen_until
            && self.now >= inst.cut_until
        {
            self.step(cfg, &Step::Answer(i));
        }
    }

    fn crash(&mut self, i: u32) {
        self.crashes += 1;
        if let Some(o) = self.inst(i).ran.and_then(|o| self.slot(o)) {
            let og = &mut self.orders[o];
            og.deaths_running += 1;
            if og.open && og.runner == Some(i) {
                og.open = false;
                og.ended = Some(RunEnd::Died);
            }
        }
        self.kill(i);
        self.inst_mut(i).crashed = true;
    }

    /// Feeds one input; whether the machine acted.
    fn feed(&mut self, i: u32, input: Input) -> bool {
        let now = self.local(i);
        let guard_in_loop = self.guard_in_loop;
        let inst = self.inst_mut(i);
        if guard_in_loop && inst.guard.is_some_and(|d| now > d) {
            // Broken: the freeze takes effect only as the loop runs.
            inst.loop_frozen = true;
        }
        let acts = match &mut self.inst_mut(i).worker {
            Some(w) => w.handle(input, now),
            None => return false,
        };
        let acted = !acts.is_empty();
        self.act(i, acts);
        acted
    }

    fn kill(&mut self, i: u32) {
        let now = self.now;
        let clocked = self.clocked;
        let inst = self.inst_mut(i);
        inst.died_at = now;
        if clocked {
            if let Some(w) = &inst.worker {
                inst.deaths.push((w.incarnation.clone(), now));
            }
        }
        inst.worker = None;
        inst.cursor = 0;
        inst.asked = false;
        inst.running = None;
        inst.fetched = None;
        inst.ran = None;
        inst.guard = None;
        inst.killed = false;
        inst.loop_frozen = false;
        inst.cut_until = 0;
        inst.handing = false;
        inst.handed = false;
        inst.view = None;
        let pending: Vec<Txn> = inst.pending.drain(..).collect();
        self.orphans.extend(pending);
        let orphans = &self.orphans;
        self.insts[i as usize - 1]
            .deaths
            .retain(|(inc, _)| orphans.iter().flatten().any(|r| r.incarnation == *inc));
    }

    /// The start number of an incarnation the world named `<i>.<n>`.
    fn start_no(incarnation: &str) -> u32 {
        incarnation
            .rsplit('.')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// [`SETTLED`]: `r`, an orphan, lands after a `booted` of a later
    /// process of its writer's instance number.
    fn check_settled(&mut self, r: &Record) {
        let writer = r.writer().get();
        let Some(pos) = self.newest_booted[writer as usize - 1] else {
            return;
        };
        let newest = &self.log[pos].rec.incarnation;
        if Self::start_no(newest.as_str()) > Self::start_no(r.incarnation.as_str()) {
            let what = format!(
                "{} of {} lands after {newest} booted at #{pos}",
                r.key(),
                r.incarnation
            );
            self.violate(SETTLED, what);
        }
    }

    /// Simulation with settling: an orphan whose writer died more than
    /// `limit` ms ago is lost (an append lands within librdkafka's
    /// `message.timeout.ms` or never; a dead process sends nothing new).
    pub fn expire_orphans(&mut self, limit: u64) {
        let now = self.now;
        let insts = &self.insts;
        // A transaction by its first record (its writer's own: a handing
        // transaction's second is its heir's `booted`).
        self.orphans.retain(|t| {
            let r = &t[0];
            let inst = &insts[r.writer().get() as usize - 1];
            let alive = inst
                .worker
                .as_ref()
                .is_some_and(|w| w.incarnation == r.incarnation);
            // By the writer's own death (once, pre-clocks, by the
            // instance's latest: a successor that died settling extended
            // its predecessor's orphans past the deadline it handed on).
            let died = inst
                .deaths
                .iter()
                .find(|(inc, _)| *inc == r.incarnation)
                .map_or(inst.died_at, |d| d.1);
            alive || now < died + limit
        });
        // Forget the deaths whose orphans are all gone.
        let orphans = &self.orphans;
        for inst in &mut self.insts {
            inst.deaths
                .retain(|(inc, _)| orphans.iter().flatten().any(|r| r.incarnation == *inc));
        }
    }

    fn act(&mut self, i: u32, acts: Vec<Action>) {
        for a in acts {
            match a {
                Action::Append(r) => {
                    if r.event() == Event::Claimed && r.takeover_of().is_empty() {
                        self.judge_priority(i, &r);
                    }
                    if r.event() == Event::Booted {
                        // R17: removed before booted is appended.
                        self.inst_mut(i).deadline = None;
                    }
                    self.inst_mut(i).pending.push_back(vec![r])
                }
                // One transaction (R16, "Handed boot": the last completion
                // and the heir's `booted`), delivered whole ([`Txn`]).
                Action::AppendAll(rs) => {
                    for r in &rs {
                        if r.event() == Event::Claimed && r.takeover_of().is_empty() {
                            self.judge_priority(i, r);
                        }
                    }
                    self.inst_mut(i).pending.push_back(rs)
                }
                Action::FindOrder => {
                    // Choosing: no job of this process runs any more (its
                    // completion was read back, with ORDERS_PER_PROCESS).
                    let inst = self.inst_mut(i);
                    inst.asked = true;
                    inst.running = None;
                    inst.fetched = None;
                    inst.ran = None;
                }
                // The shell reads the order before its claim (R56) and
                // reports its key at once.
                Action::Peek { order } => {
                    let key = self.terms_of(order).and_then(|t| t.key.clone());
                    self.feed(i, Input::Peeked { order, key });
                }
                Action::Run { order, attempt, .. }
                    if self.terms_of(order).is_some_and(Terms::any) =>
                {
                    // The shell fetches the order and reports its terms.
                    self.inst_mut(i).fetched = Some((order, attempt.get()));
                    let terms = self.terms_of(order).cloned().unwrap_or_default();
                    self.feed(i, Input::Terms(terms));
                }
                Action::Start { order } => {
                    if let Some((o, attempt)) = self.inst_mut(i).fetched.take() {
                        debug_assert_eq!(o, order);
                        self.start_job(i, order, attempt);
                    }
                }
                Action::Release { .. } => self.inst_mut(i).fetched = None,
                Action::Run { order, attempt, .. } => self.start_job(i, order, attempt.get()),
                // The job ends at a JobDone step, which may come at any
                // moment: killed or not, every timing is explored; but a
                // killed job is no longer live (RUN_CONCURRENTLY).
                Action::Kill { .. } => {
                    let inst = self.inst_mut(i);
                    if inst.running.is_some() {
                        inst.killed = true;
                    }
                }
                // The guard's newest deadline (R53), on the process's
                // clock; one still ahead thaws a frozen job.
                Action::Guard(until) => {
                    let ahead = until >= self.local(i);
                    let guard_in_loop = self.guard_in_loop;
                    let inst = self.inst_mut(i);
                    inst.guard = Some(until);
                    if guard_in_loop && ahead {
                        inst.loop_frozen = false;
                    }
                }
                // Only with `Settings::publish_results`, which the world
                // leaves off: it has no results topic.
                Action::PublishResult(_) => {}
                // Only with `Settings::settle_ms` above 0; the world keeps
                // the settle rule itself (`Config::settle`).
                Action::WakeAt(at) => {
                    let clocked = self.clocked;
                    // `at` is on the process's clock.
                    let at = self.global_of(i, at);
                    let inst = self.inst_mut(i);
                    inst.next_tick = inst.next_tick.min(at);
                    if clocked {
                        inst.wake_at = Some(at);
                    }
                }
                Action::Exit(code) => {
                    // The shell leaves the marker once every append is
                    // acknowledged (pool_worker/src/run.rs); here: nothing pending and
                    // no copy of this incarnation's records in flight.
                    let inst = self.inst(i);
                    let inc = inst
                        .worker
                        .as_ref()
                        .map(|w| w.incarnation.clone())
                        .unwrap_or_default();
                    let clean = self.settling
                        && code != pool_worker_core::exit_status::Exit::Fenced
                        && inst.pending.is_empty()
                        && !self.orphans.iter().flatten().any(|r| r.incarnation == inc);
                    // R16, "Handed boot": the shell says `done handed` once
                    // every append is acknowledged, its handing transaction
                    // among them; here: it landed, and nothing of the
                    // instance is pending or orphaned.
                    let handed = self.handover
                        && code == pool_worker_core::exit_status::Exit::Ok
                        && inst.handing
                        && inst.pending.is_empty()
                        && !self.orphans.iter().any(|t| Self::of_instance(t, i));
                    // R16, "Handed view": the handing process leaves its
                    // heir its View, taken now, after reading back its last
                    // `completed` (it ends right before the heir's
                    // `booted`: a finished machine folds nothing more).
                    let view = (handed && self.handed_view)
                        .then(|| {
                            let w = inst.worker.as_ref()?;
                            let heir = Incarnation::new(format!("{i}.{}", inst.starts + 1));
                            Some(w.hand_view(&heir))
                        })
                        .flatten();
                    if let Some(v) = &view {
                        let at = self.log.get(v.snapshot.at.get() as usize);
                        assert!(
                            at.is_some_and(
                                |e| e.rec.event() == Event::Booted && e.rec.incarnation == v.heir
                            ),
                            "the view handed to {} does not end right before its booted",
                            v.heir
                        );
                    }
                    self.kill(i);
                    self.inst_mut(i).marker = clean.then_some(inc);
                    self.inst_mut(i).handed = handed;
                    self.inst_mut(i).view = view;
                }
            }
        }
    }

    /// [`PRIORITY`], as instance `i`'s process appends claim `r`, judged
    /// on the View it chose with (a claim is made on `Input::Orders`, which
    /// changes no View): the lines of the orders waiting in that View
    /// (`boot::turns_with`, with the orders' end offsets the world answers
    /// and the parked orders ready on the claimant's clock); if it is first
    /// in line for an order of a topic, the claimed order's topic must not
    /// come after it in `Config::topics`.
    fn judge_priority(&mut self, i: u32, r: &Record) {
        let (Some(w), Some(o)) = (&self.inst(i).worker, r.order()) else {
            return;
        };
        let topics = &self.topics[..];
        let Some(mine) = priority(topics, o.topic) else {
            let what = format!("instance {i} claims order {o}, of a topic not listed");
            return self.violate(PRIORITY, what);
        };
        let ready = w.view.ready(self.local(i), self.key_concurrency);
        let first = turns_with(&w.view, &ready, &self.ends, topics, i.into())
            .into_iter()
            .filter(|t| t.ahead.is_empty())
            .filter_map(|t| priority(topics, t.order.topic).map(|p| (p, t.order)))
            .min();
        if let Some((p, u)) = first.filter(|&(p, _)| p < mine) {
            let name = |t: Topic| t.name().unwrap_or("main");
            let what = format!(
                "instance {i} claims order {o} (topic {}, {mine} in the list) while first in line for order {u} (topic {}, {p} in the list)",
                name(o.topic),
                name(u.topic)
            );
            self.violate(PRIORITY, what);
        }
    }

    /// Instance `i`'s process starts the job of `order` (attempt
    /// `attempt`): the run's ghost history and its checks.
    fn start_job(&mut self, i: u32, order: OrderId, attempt: u32) {
        self.inst_mut(i).killed = false;
        if let Some(nb) = self.terms_of(order).and_then(|t| t.not_before) {
            if self.local(i) < nb {
                let what = format!("instance {i} starts order {order}'s job at {} ms on its clock, before its not_before {nb}", self.local(i));
                self.violate(RUN_EARLY, what);
            }
        }
        if self.referee.contest(order).is_some_and(|c| c.parked_once) {
            self.unparked_runs += 1;
        }
        self.judge_key_order(i, order, attempt);
        self.inst_mut(i).running = Some(order);
        self.inst_mut(i).ran = Some(order);
        self.judge_cancel(i, order);
        if let Some(w) = &self.inst(i).worker {
            let own = w.view.instance(i.into()).and_then(|s| s.revoked.as_ref());
            if own == Some(&w.incarnation) {
                let what = format!(
                    "instance {i} ({}) runs order {order} after reading its own revocation",
                    w.incarnation
                );
                self.violate(RUN_AFTER_REVOKED, what);
            }
        }
        if self.leases {
            self.leased_run(i, order, attempt);
            return;
        }
        let Some(k) = self.slot(order) else {
            return self.violate(
                RUN_BY_TWO,
                format!("instance {i} runs order {order}, which does not exist"),
            );
        };
        let og = &mut self.orders[k];
        og.runs += 1;
        let (prev, runs, deaths) = (og.runner, og.runs, og.deaths_running);
        og.runner = Some(i);
        if let Some(j) = prev.filter(|j| *j != i) {
            self.violate(
                RUN_BY_TWO,
                format!(
                    "instance {i} runs order {order} (attempt {attempt}), which instance {j} ran"
                ),
            );
        } else if runs > 1 + deaths {
            self.violate(RUN_TWICE, format!("instance {i} runs order {order} for the {runs}th time (attempt {attempt}) but died running it only {deaths} times"));
        }
    }

    /// [`KEY_ORDER`], as instance `i` starts a job of `order`; notes the
    /// start. A retry of the instance's own hold (R21, not a takeover) is
    /// not judged: its first run may have started (docs/protocol.md I15).
    fn judge_key_order(&mut self, i: u32, order: OrderId, attempt: u32) {
        let Some(k) = self.slot(order) else {
            return;
        };
        let first = !self.orders[k].started;
        self.orders[k].started = true;
        let own_retry = attempt > 1
            && self
                .inst(i)
                .worker
                .as_ref()
                .is_none_or(|w| w.view.hold(i.into()).is_none_or(|h| h.took_over.is_none()));
        if own_retry {
            return;
        }
        let plain_key = |w: &World, o: OrderId| {
            w.terms_of(o)
                .filter(|t| t.not_before.is_none())
                .and_then(|t| t.key.clone())
        };
        let Some(key) = plain_key(self, order).filter(|_| first && self.key_concurrency == 1)
        else {
            return;
        };
        let pending = (0..order.offset)
            .map(|offset| order.lane().at(offset))
            .filter(|o| plain_key(self, *o).as_ref() == Some(&key))
            .find(|o| {
                self.slot(*o).is_some_and(|j| {
                    let g = &self.orders[j];
                    !g.started && g.completions == 0 && !g.finished_void
                })
            });
        if let Some(o) = pending {
            let what = format!(
                "instance {i} starts order {order} of key {key:?} before order {o} of the same key, which has not started"
            );
            self.violate(KEY_ORDER, what);
        }
    }

    /// [`RUN_CANCELLED`], as instance `i` starts a job of `order`.
    fn judge_cancel(&mut self, i: u32, order: OrderId) {
        let read = self
            .inst(i)
            .worker
            .as_ref()
            .and_then(|w| w.view.cancel(order).map(|(p, _)| p));
        if let Some(p) = read {
            let what =
                format!("instance {i} starts order {order}'s job after reading its cancel (#{p})");
            return self.violate(RUN_CANCELLED, what);
        }
        let first = self.slot(order).and_then(|k| self.orders[k].first_commit);
        if let (Some((c, _)), Some(f)) = (self.referee.cancel(order), first) {
            if (c.get() as usize) < f {
                let what = format!("instance {i} starts order {order}'s job, cancelled at #{c} before its first commit at #{f}");
                self.violate(RUN_CANCELLED, what);
            }
        }
    }

    /// A run with leases: an order is run again (by anyone) only once the
    /// earlier run ended without a completion — or by a process whose hold
    /// the log has already revoked and that has not read it yet (a *stale*
    /// run: it read its own commit, then was paused or cut off past the
    /// lease; docs/protocol.md R41, I5).
    fn leased_run(&mut self, i: u32, order: OrderId, attempt: u32) {
        let inc = self
            .inst(i)
            .worker
            .as_ref()
            .map(|w| w.incarnation.clone())
            .unwrap_or_default();
        let holds = self
            .referee
            .hold(i.into())
            .is_some_and(|h| h.order == order && h.committed.is_some() && h.incarnation == inc);
        let Some(k) = self.slot(order) else {
            let what = format!("instance {i} runs order {order}, which does not exist");
            return self.violate(RUN_BY_TWO, what);
        };
        if !holds {
            let revoked = self
                .referee
                .instance(i.into())
                .and_then(|s| s.revoked.as_ref())
                == Some(&inc);
            self.orders[k].runs += 1;
            if revoked {
                self.second_runs_takeover += 1;
                self.stale_runs += 1;
            } else {
                let what = format!("instance {i} ({inc}) runs order {order} (attempt {attempt}), which the log says it does not hold, and its hold was not revoked");
                self.violate(RUN_BY_TWO, what);
            }
            return;
        }
        let og = &mut self.orders[k];
        og.runs += 1;
        let (prev, open, completions, ended, runs) =
            (og.runner, og.open, og.completions, og.ended, og.runs);
        og.runner = Some(i);
        og.open = true;
        og.ended = None;
        let Some(j) = prev.filter(|_| runs > 1) else {
            return;
        };
        let prop = if j != i { RUN_BY_TWO } else { RUN_TWICE };
        if completions > 0 {
            self.violate(
                prop,
                format!("instance {i} runs order {order} (attempt {attempt}), which is completed"),
            );
        } else if open {
            self.violate(prop, format!("instance {i} runs order {order} (attempt {attempt}) while instance {j}'s run of it has not ended (no valid revocation of its hold, no death)"));
        } else if ended == Some(RunEnd::Revoked) {
            self.second_runs_takeover += 1;
        } else {
            self.second_runs_death += 1;
        }
    }

    /// Lands a record of the pool at the end of the log and lets the
    /// referee judge it.
    fn append(&mut self, r: Record) {
        self.land(r, Sig::Pool)
    }

    /// Lands a record written by `sig`'s writer. The referee reads it as
    /// every reader does ([`World::admit`]): a foreign record is skipped
    /// and judged by nobody.
    fn land(&mut self, mut r: Record, sig: Sig) {
        let pos = self.log.len();
        if (sig != Sig::Pool || self.trust.is_some()) && self.admit_new(&r, sig).is_err() {
            self.referee.skip(Position::new(pos as u64));
            let cached = commute::landed(&self.log, &r);
            self.log.push(Entry {
                rec: Arc::new(r),
                erased: false,
                sig,
                foreign: true,
                cached,
            });
            return;
        }
        // The hold a revocation is about, as the referee sees it before.
        let revoked = (r.event() == Event::Revoked)
            .then(|| {
                self.referee
                    .hold(r.instance)
                    .filter(|h| Some(h.order) == r.order())
                    .cloned()
            })
            .flatten();
        if self.forge_seen {
            if let Some(h) = &revoked {
                r.set_seen(Some(h.last_pos.get()));
            }
        }
        if r.event() == Event::Booted {
            self.newest_booted[r.instance.get() as usize - 1] = Some(pos);
        }
        if let Some(k) = r.order().and_then(|o| self.slot(o)) {
            self.orders[k].first_pos.get_or_insert(pos);
        }
        let verdict = self.referee.apply(Position::new(pos as u64), &r);
        if verdict == Err(pool_worker_core::boot::Void::Stray)
            && matches!(r.event(), Event::Committed | Event::Yielded)
        {
            self.strays += 1;
        }
        let accepted = verdict.is_ok();
        if accepted && r.event() == Event::Parked {
            self.parks += 1;
        }
        let slot = r.order().and_then(|o| self.slot(o));
        if let (false, Event::Completed, Some(k)) = (accepted, r.event(), slot) {
            if let Some(og) = self.orders.get_mut(k) {
                if og.completions == 0 && !og.finished_void {
                    og.finished_void = true;
                    self.completed += 1;
                }
            }
        }
        if accepted {
            if let Some(o) = r.order() {
                self.judge(pos, &r, o);
            }
            if let (Some(h), Event::Revoked) = (&revoked, r.event()) {
                self.judge_revocation(pos, &r, h);
            }
            if self.leases {
                self.judge_holds(pos);
            }
        }
        let cached = commute::landed(&self.log, &r);
        self.log.push(Entry {
            rec: Arc::new(r),
            erased: false,
            sig,
            foreign: false,
            cached,
        });
    }

    /// A valid revocation: the lease had expired, and it ends the holder's run.
    fn judge_revocation(&mut self, pos: usize, r: &Record, h: &pool_worker_core::boot::Hold) {
        self.takeovers += 1;
        let lease = self.lease_ms.unwrap_or(0);
        // Both times on the revoker's clock: the hold's newest record was
        // made (by the hold's instance, on its clock) at `made` in the
        // world's time, no later than anyone read it.
        let by = r.by().map_or(r.instance.get(), |b| b.get());
        let made = self.global_of(r.instance.get(), h.last_ts);
        let wrote = self.local_at(by, made);
        if self.judge_leases && r.ts.saturating_sub(wrote) <= lease {
            let what = format!(
                "#{pos}: instance {}'s hold of order {} is revoked by instance {by} at {} ms, but it wrote about it at {} ms on its clock, {wrote} ms on the revoker's (lease {lease} ms)",
                r.instance, h.order, r.ts, h.last_ts
            );
            self.violate(LEASE_RESPECTED, what);
        }
        let slot = self.slot(h.order);
        if let Some(og) = slot.and_then(|k| self.orders.get_mut(k)) {
            if og.open && og.runner == Some(r.instance.get()) {
                og.open = false;
                og.ended = Some(RunEnd::Revoked);
            }
        }
    }

    /// No two valid committed holds on one order, in the referee's view.
    fn judge_holds(&mut self, pos: usize) {
        let mut seen: Vec<(OrderId, u32)> = Vec::new();
        let mut clash = None;
        for (i, inst) in self.referee.instances() {
            if let Some(h) = inst.hold.as_ref().filter(|h| h.committed.is_some()) {
                if let Some((_, j)) = seen.iter().find(|(o, _)| *o == h.order) {
                    clash = Some(format!(
                        "#{pos}: instances {j} and {i} both hold order {} committed",
                        h.order
                    ));
                    break;
                }
                seen.push((h.order, i.get()));
            }
        }
        if let Some(what) = clash {
            self.violate(TWO_HOLDS, what);
        }
    }

    fn judge(&mut self, pos: usize, r: &Record, o: OrderId) {
        let Some(k) = self.slot(o) else {
            return self.violate(
                SKIPPED,
                format!("#{pos}: a record about order {o}, which does not exist"),
            );
        };
        let t = k / self.per_topic as usize;
        // R34: a claim that met no rival is its writer's commit (the
        // referee, which has read it, says so).
        let fused = r.event() == Event::Claimed
            && self
                .referee
                .hold(r.instance)
                .is_some_and(|h| h.fused_at(o, Position::new(pos as u64)));
        let og = &mut self.orders[k];
        if fused {
            og.first_commit.get_or_insert(pos);
            if !og.committed_by.contains(&r.instance.get()) {
                og.committed_by.push(r.instance.get());
            }
        }
        match r.event() {
            Event::Claimed => {
                if !og.claimed {
                    og.claimed = true;
                    self.claimed_count[t] += 1;
                }
                // Per topic: each has a frontier of its own (R57).
                let max = self.max_claimed[t].map_or(o.offset, |m| m.max(o.offset));
                self.max_claimed[t] = Some(max);
                if self.claimed_count[t] != max + 1 {
                    self.violate(SKIPPED, format!("#{pos}: order {o} is claimed but {} orders of its topic below {max} were never claimed", max + 1 - self.claimed_count[t]));
                }
            }
            Event::Committed => {
                og.first_commit.get_or_insert(pos);
                if !og.committed_by.contains(&r.instance.get()) {
                    og.committed_by.push(r.instance.get());
                }
            }
            Event::Completed => {
                og.completions += 1;
                let (c, by) = (og.completions, og.committed_by.contains(&r.instance.get()));
                if c == 1 && !og.finished_void {
                    self.completed += 1;
                }
                if !by {
                    self.violate(
                        COMPLETED_UNCOMMITTED,
                        format!(
                            "#{pos}: instance {} completed order {o} without a commit of its own",
                            r.instance
                        ),
                    );
                } else if c > 1 {
                    self.violate(
                        COMPLETED_TWICE,
                        format!("#{pos}: order {o} completed for the {c}th time"),
                    );
                }
            }
            _ => {}
        }
    }

    /// The compaction horizon (see the module doc).
    pub fn horizon(&self, cfg: &Config) -> usize {
        let mut h = self.log.len();
        for inst in &self.insts {
            let Some(w) = &inst.worker else {
                continue;
            };
            if !(cfg.cleaner_passes_replays && w.phase.booting()) {
                h = h.min(inst.cursor);
            }
        }
        for p in self.newest_booted.iter().flatten() {
            h = h.min(*p);
        }
        for (_, inst) in self.referee.instances() {
            if let Some(hold) = inst
                .hold
                .as_ref()
                .filter(|h| h.committed.is_none() || cfg.horizon == HorizonRule::Hold)
            {
                h = h.min(hold.claim_pos.get() as usize);
            }
        }
        for o in self.open_orders(cfg) {
            if let Some(f) = self.slot(o).and_then(|k| self.orders[k].first_pos) {
                h = h.min(f);
            }
        }
        h
    }

    /// The orders whose every record the horizon protects: with
    /// [`HorizonRule::Contest`], those of the undecided holds, with
    /// [`HorizonRule::Hold`] of every hold; and those of the claims still in
    /// flight ([`World::in_flight_claim_orders`]). None with
    /// [`HorizonRule::Claim`], which protects only the undecided claims.
    pub fn open_orders(&self, cfg: &Config) -> Vec<OrderId> {
        if cfg.horizon == HorizonRule::Claim {
            return Vec::new();
        }
        let holds = self
            .referee
            .instances()
            .filter_map(|(_, inst)| inst.hold.as_ref());
        let held = holds
            .filter(|h| h.committed.is_none() || cfg.horizon == HorizonRule::Hold)
            .map(|h| h.order);
        let mut orders: Vec<OrderId> = held.collect();
        if cfg.protect_in_flight {
            orders.extend(self.in_flight_claim_orders());
        }
        orders.sort();
        orders.dedup();
        orders
    }

    /// The orders of the claims still in flight: a live process's pending
    /// appends and the orphans of dead ones. Kafka's cleaner erases a record
    /// only for a newer one of its key that is older than
    /// `min.compaction.lag.ms`, and an append lands within the producer's
    /// `message.timeout.ms` (10 s; the lag is 7 days) or never: so when a
    /// claim lands, every record superseded after it was sent still stands.
    /// Its writer had read no record about its order (it claims at its
    /// frontier, past every order a record it read names), so that is every
    /// record about the order: the horizon protects them all while the claim
    /// is in flight, as it does once it has landed, undecided
    /// ([`HorizonRule::Contest`]). Without this, a dead process's claim
    /// landed after its order's commit and completion were erased, was
    /// committed by its instance's next process, and the order ran twice
    /// (3 × 2 with a crash, `in_flight_claim_needs_its_order_kept`).
    pub fn in_flight_claim_orders(&self) -> impl Iterator<Item = OrderId> + '_ {
        let pending = self.insts.iter().flat_map(|i| i.pending.iter());
        pending
            .chain(self.orphans.iter())
            .flatten()
            .filter(|r| r.event() == Event::Claimed)
            .filter_map(|r| r.order())
    }

    /// Positions that compaction would erase now.
    pub fn erasable(&self, cfg: &Config) -> Vec<usize> {
        if cfg.causal {
            return self.erasable_causal(cfg);
        }
        let h = self.horizon(cfg);
        if h == 0 {
            return Vec::new();
        }
        let superseded = self.superseded();
        (0..h).filter(|&p| superseded[p]).collect()
    }

    /// For each position, whether its record is present and a newer present
    /// record has the same key (what compaction may erase, horizon aside).
    pub fn superseded(&self) -> Vec<bool> {
        // key() is `<instance>:<event>`, `cancel:P:O` for a cancel, or
        // `park:P:O`: (instance, event, the cancel's order) is the same key. With
        // `Config::shared_cancel_key` (broken on purpose) every cancel has
        // one key, as `0:cancelled` would.
        let shared = self.shared_cancel_key;
        let key = |e: &Entry| {
            // `park:P:O`: every record about an order once parked, of any
            // instance and event (R54).
            if e.rec.order_keyed || e.rec.event() == Event::Parked {
                return (InstanceNo::new(0), Event::Parked, e.rec.order());
            }
            let order = (e.rec.event() == Event::Cancelled && !shared)
                .then(|| e.rec.order())
                .flatten();
            (e.rec.instance, e.rec.event(), order)
        };
        let mut newest: HashMap<(InstanceNo, Event, Option<OrderId>), usize> = HashMap::new();
        // A forged record takes part in no compaction here: the model
        // checks that *reading* foreign records changes nothing. (In Kafka,
        // a writer of the topic can erase any record by compaction, with a
        // record or a tombstone of the same key: docs/deploy.md, "The
        // claims topic"; only ACLs stop that.)
        for (p, e) in self.log.iter().enumerate() {
            if !e.erased && e.sig == Sig::Pool {
                newest.insert(key(e), p);
            }
        }
        self.log
            .iter()
            .enumerate()
            .map(|(p, e)| !e.erased && e.sig == Sig::Pool && newest[&key(e)] > p)
            .collect()
    }

    /// The deterministic fair schedule without crashes: the first enabled of
    /// deliver, land an orphan, read, caught up, answer, finish a job,
    /// restart a dead instance. Every category but the last is exhausted in
    /// finitely many steps, so every process gets to move.
    pub fn fair_step(&self, cfg: &Config) -> Option<Step> {
        let ids = 1..=cfg.instances;
        let mut steps = Vec::new();
        for i in ids.clone() {
            if self.inst(i).worker.is_some() {
                self.instance_steps(i, &mut steps);
                if !cfg.clocked && self.expirable(i) {
                    steps.push(Step::Expire(i));
                }
            }
        }
        let rank = |s: &Step| match s {
            Step::Deliver(_) => 0,
            Step::Fence(_) => 1,
            Step::Read(_) => 2,
            Step::CaughtUp(_) => 3,
            Step::Answer(_) => 4,
            Step::JobDone(_) => 5,
            Step::Expire(_) => 6,
            _ => 9,
        };
        if let Some(s) = steps.iter().find(|s| rank(s) == 0) {
            return Some(s.clone());
        }
        if !self.orphans.is_empty() {
            return Some(Step::Land(0));
        }
        // A parked order falls due later (R55): when nothing but a
        // deferral is left to do, the clock moves on to it.
        if steps.iter().all(|s| rank(s) >= 6) {
            if let Some(to) = self.next_due() {
                return Some(Step::Advance(to - self.now));
            }
        }
        if let Some(s) = steps.iter().min_by_key(|s| rank(s)) {
            return Some(s.clone());
        }
        if self.all_completed(cfg) {
            return None;
        }
        ids.into_iter()
            .find(|&i| self.startable(cfg, i) && !self.stays_down(cfg, i))
            .map(Step::Start)
    }

    /// The world's earliest time at which a parked order falls due on the
    /// clock of a live process that is choosing (R55), if one is ahead.
    pub fn next_due(&self) -> Option<u64> {
        (1..=self.insts.len() as u32)
            .filter_map(|i| {
                let w = self.inst(i).worker.as_ref()?;
                let due = w.view.next_due(self.local(i))?;
                (w.phase == Phase::Choose).then(|| self.global_of(i, due))
            })
            .filter(|&g| g > self.now)
            .min()
    }

    /// Whether instance `i` has no process and may start one now.
    fn startable(&self, cfg: &Config, i: u32) -> bool {
        let inst = self.inst(i);
        inst.worker.is_none()
            && (cfg.restart_crashed || !inst.crashed)
            && self.now >= inst.down_until
    }

    /// Whether instance `i`, down, stays down for good: it crashed idle
    /// (nothing of it held or in flight), the configuration says such a
    /// host is gone (`Config::restart_idle` false), and another instance
    /// can move. The fair schedule and the simulation both keep it down.
    pub fn stays_down(&self, cfg: &Config, i: u32) -> bool {
        let gone = |i: u32| {
            let inst = self.inst(i);
            !cfg.restart_idle
                && inst.crashed
                && self.referee.hold(i.into()).is_none()
                && !self
                    .orphans
                    .iter()
                    .flatten()
                    .any(|r| r.instance.get() == i || r.by() == Some(i.into()))
        };
        gone(i)
            && (1..=cfg.instances)
                .filter(|&j| j != i)
                .any(|j| self.inst(j).worker.is_some() || (self.startable(cfg, j) && !gone(j)))
    }

    /// One line per log entry.
    pub fn describe_log(&self) -> String {
        let mut s = String::new();
        for (p, e) in self.log.iter().enumerate() {
            let _ = writeln!(s, "{}", self.describe_entry(p));
            let _ = e;
        }
        s
    }

    pub fn describe_entry(&self, p: usize) -> String {
        let e = &self.log[p];
        let r = &e.rec;
        let verdict = {
            // What the referee said of it: replay the prefix.
            let mut v = View::new();
            let mut out = Ok(());
            for (q, f) in self.log[..=p].iter().enumerate() {
                out = v.apply(Position::new(q as u64), &f.rec);
            }
            match out {
                Ok(()) => String::new(),
                Err(why) => format!(" VOID({why:?})"),
            }
        };
        let lease = if r.event() == Event::Revoked {
            format!(
                " by {} seen #{}",
                r.by().map_or(0, |b| b.get()),
                r.seen().map_or(-1, |s| s.get() as i64)
            )
        } else {
            String::new()
        };
        let ts = if self.leases {
            format!(" ts {}", r.ts)
        } else {
            String::new()
        };
        format!(
            "  #{p:<3} {:<13} {}{lease}  [inc {} seq {}{ts}]{}{}",
            r.key(),
            describe_record(r),
            r.incarnation,
            r.seq,
            verdict,
            match (e.sig, self.admit(p)) {
                (Sig::Pool, _) if e.erased => " (erased by compaction)".to_string(),
                (Sig::Pool, _) => String::new(),
                (sig, Ok(_)) => format!(" FORGED ({sig:?}), ACCEPTED"),
                (sig, Err(why)) => format!(" FORGED ({sig:?}), foreign: {why}"),
            }
        )
    }

    pub fn describe_processes(&self) -> String {
        let mut s = String::new();
        if self.leases {
            let _ = writeln!(s, "  clock: {} ms", self.now);
        }
        for (k, inst) in self.insts.iter().enumerate() {
            let i = k + 1;
            match &inst.worker {
                None => {
                    let down = if inst.down_until > self.now {
                        format!(" (down until {} ms)", inst.down_until)
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        s,
                        "  instance {i}: dead{}{}{down}",
                        if inst.crashed { " (crashed)" } else { "" },
                        if inst.handed {
                            " (handed over: its heir starts next)"
                        } else {
                            ""
                        }
                    );
                }
                Some(w) => {
                    let _ = writeln!(
                        s,
                        "  instance {i}: {} {:?}, cursor {}, pending {}, asked {}, running {:?}",
                        w.incarnation,
                        w.phase,
                        inst.cursor,
                        inst.pending.len(),
                        inst.asked,
                        inst.running
                    );
                    if inst.frozen_until > self.now {
                        let _ = writeln!(s, "    frozen until {} ms", inst.frozen_until);
                    }
                    if inst.cut_until > self.now {
                        let _ = writeln!(s, "    cut off until {} ms", inst.cut_until);
                    }
                    if self.leases {
                        let live = match self.live_job(i as u32) {
                            Some(o) => format!("job of {o} live"),
                            None if inst.running.is_some() => "job frozen or killed".to_string(),
                            None => "no job".to_string(),
                        };
                        let _ = writeln!(
                            s,
                            "    clock {} ms, guard {:?}, {live}",
                            self.local(i as u32),
                            inst.guard
                        );
                    }
                }
            }
        }
        if !self.orphans.is_empty() {
            let o: Vec<String> = self
                .orphans
                .iter()
                .map(|t| {
                    let rs: Vec<String> = t
                        .iter()
                        .map(|r| format!("{} {}", r.key(), describe_record(r)))
                        .collect();
                    rs.join(" + ")
                })
                .collect();
            let _ = writeln!(s, "  orphans in flight: {}", o.join("; "));
        }
        s
    }

    /// Orders claimed, not completed, and held by nobody in the referee's
    /// view: no process will ever claim them again (they are behind the
    /// frontier), unless a record in flight changes that.
    pub fn stranded(&self) -> Vec<OrderId> {
        let held: Vec<OrderId> = self
            .referee
            .instances()
            .filter_map(|(_, s)| s.hold.as_ref().map(|h| h.order))
            .collect();
        (0..self.orders.len())
            .filter(|&k| {
                self.orders[k].claimed
                    && self.orders[k].completions == 0
                    && !self.orders[k].finished_void
            })
            .map(|k| self.order_at(k))
            .filter(|o| !held.contains(o))
            // A parked order is held by nobody and waits (R55).
            .filter(|o| self.referee.parked_order(*o).is_none())
            .collect()
    }

    /// Nothing in flight: no append pending or orphaned, every live process
    /// choosing with no question open.
    pub fn quiet(&self) -> bool {
        self.orphans.is_empty()
            && self.insts.iter().all(|inst| {
                inst.pending.is_empty()
                    && !inst.asked
                    && inst
                        .worker
                        .as_ref()
                        .is_none_or(|w| w.phase == Phase::Choose)
            })
    }

    /// The orders not completed yet, with what the referee knows of them.
    pub fn describe_open_orders(&self) -> String {
        let mut s = String::new();
        for (k, og) in self
            .orders
            .iter()
            .enumerate()
            .filter(|(_, og)| og.completions == 0)
        {
            let o = self.order_at(k);
            if !og.claimed {
                continue;
            }
            let holders: Vec<String> = self
                .referee
                .instances()
                .filter_map(|(i, st)| {
                    st.hold
                        .as_ref()
                        .filter(|h| h.order == o)
                        .map(|h| format!("{i}: {h:?}"))
                })
                .collect();
            let _ = writeln!(
                s,
                "  order {o}: runs {}, runner {:?}, contest {:?}, holds [{}]",
                og.runs,
                og.runner,
                self.referee.contest(o),
                holders.join("; ")
            );
        }
        s
    }

    /// Runs the fair schedule from here for at most `bound` steps. Ok(steps)
    /// when every order is completed; Err(the world where it got stuck).
    #[allow(clippy::result_large_err)] // the Err is the run's one verdict (where it got stuck), returned once
    pub fn fair_run(&self, cfg: &Config, bound: usize) -> Result<usize, (World, Vec<Step>)> {
        let mut w = self.clone();
        let mut taken = Vec::new();
        for n in 0..bound {
            if w.all_completed(cfg) {
                return Ok(n);
            }
            match w.fair_step(cfg) {
                Some(s) => {
                    w.step(cfg, &s);
                    taken.push(s);
                }
                None => return Err((w, taken)),
            }
        }
        if w.all_completed(cfg) {
            Ok(bound)
        } else {
            Err((w, taken))
        }
    }
}

/// A readable account of a run: every step, with the records it landed.
pub fn describe_run(cfg: &Config, start: &World, steps: &[Step]) -> String {
    let mut w = start.clone();
    let mut s = String::new();
    for (n, st) in steps.iter().enumerate() {
        let before = w.log.len();
        let erased_before = w.log.iter().filter(|e| e.erased).count();
        w.step(cfg, st);
        let mut line = format!("  step {:<3} {:?}", n + 1, st);
        if let Step::Read(i) = st {
            let _ = write!(
                line,
                " (instance {i} has read up to #{})",
                w.insts[*i as usize - 1].cursor as i64 - 1
            );
        }
        if let Step::Compact | Step::CompactBelow(_) | Step::CompactUpTo(_) = st {
            let _ = write!(
                line,
                " ({} records erased)",
                w.log.iter().filter(|e| e.erased).count() - erased_before
            );
        }
        let _ = writeln!(s, "{line}");
        for p in before..w.log.len() {
            let _ = writeln!(s, "        lands {}", w.describe_entry(p).trim_start());
        }
    }
    s
}

#[path = "../../shared/figures.rs"]
mod figures;
pub use figures::record_figures;
