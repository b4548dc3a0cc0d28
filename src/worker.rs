//! One incarnation of an instance, as a pure state machine.
//!
//! This is the whole life of a `pool_worker` process, from `booted` to
//! `completed`, with the I/O taken out (in the spirit of quinn-proto): the
//! shell (pool_worker's `run`) feeds it [`Input`]s — records read from the claims
//! topic, "caught up with the log", the orders waiting, a job's outcome — and
//! carries out the [`Action`]s it returns — append a record, publish a
//! result, look for orders, run a job, exit. The model check and the simulation (tests/) drive the
//! very same machine against a simulated log.
//!
//! ```text
//!  Fence ──the predecessor fenced (Input::Fenced): append booted──► Boot
//!  Settle ──SETTLE_MS over, or a clean exit the log confirms: append booted──► Boot
//!  Boot ──own booted read, caught up──► resume? ─ committed hold ─► Retry ──own commit read──► Run
//!                                          │     └ undecided hold ─► Negotiate
//!                                          └ nothing held ─► Choose ─ order ─► Claim
//!  Claim ──own claim read──► Negotiate ──decide: commit/yield──► Decide
//!  Decide ──own decision read── committed ─► Run ─ job done ─► Complete ──own completion read──► Exit(0)
//!                            └─ yielded ──► Choose
//!  (below ORDERS_PER_PROCESS completions, own completion read ──► Choose)
//! ```
//!
//! The machine acts on a record only once it has *read it back* from the
//! log: a produce that failed is not assumed written, one that timed out may
//! have been written, and only the log says which (docs/protocol.md R6).
//! Its own records are recognised by incarnation and `seq`.

#[cfg(any(test, feature = "testing"))]
use crate::boot::Relabel;
use crate::boot::{priority, turns_with, Hold, Turn, View, Void};
use crate::claim::{decide, Decision};
use crate::exit_status::Exit;
use crate::record::{
    Attempt, Body, Event, Incarnation, InstanceNo, Lane, OrderId, Outcome, Position, Record,
    ResultMessage, Status, Topic,
};
use std::collections::BTreeMap;
use std::hash::Hash;

/// Attempts of one order before it is completed as `gave_up`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// What the shell tells the machine.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // records are the common variant: boxing would allocate for each one
pub enum Input {
    /// The record at this position of the claims topic.
    Record(Position, Record),
    /// A record at this position that is not pool_worker's (skipped).
    Foreign(Position),
    /// The reader has read everything the log held when asked.
    CaughtUp,
    /// The orders topic's end offsets (per partition), asked for by
    /// [`Action::FindOrder`].
    Orders(BTreeMap<Lane, i64>),
    /// The orders topic may have moved (an order arrived, or the shell's
    /// periodic recheck while idle): a machine that is looking asks for the
    /// end offsets again.
    OrdersMoved,
    /// The job of the order being run ended.
    JobDone(Outcome),
    /// Time passed (the shell sends one every lease/3): renew our lease,
    /// look for expired ones.
    Tick,
    /// The order being run (after [`Action::Run`]) has these terms (an
    /// `id`, a `not_before`, a `key`); the shell waits for
    /// [`Action::Start`] before running it, or [`Action::Release`].
    Terms(Terms),
    /// The key of the order asked about by [`Action::Peek`]: `None` when it
    /// has none, or could not be read (the claim then carries no key, and
    /// the holder announces it on a lease if the order has one after all).
    Peeked { order: OrderId, key: Option<String> },
    /// The shell fenced the instance's previous processes
    /// (docs/protocol.md R16): whatever they appended has landed or never
    /// will. Ends [`Phase::Fence`].
    Fenced,
    /// The instance's next process will be this incarnation (its standby,
    /// docs/protocol.md R16, "Handed boot"): with [`Settings::fence`], the
    /// `completed` after which this process exits carries that
    /// incarnation's `booted` in its transaction ([`Action::AppendAll`]).
    /// The newest one told counts.
    Heir(Incarnation),
    /// Instead of [`Input::Fenced`]: the predecessor ended done, its last
    /// transaction holding our `booted` (R16, "Handed boot"), which we
    /// read back instead of appending one. Ends [`Phase::Fence`].
    Handed,
}

/// What an order's body says that the protocol reads: its `id` (R46),
/// `not_before` (ms since the UNIX epoch; R54) and `key` (R56). The shell
/// reads them from a JSON order and refuses one whose terms are malformed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Terms {
    pub id: Option<String>,
    pub not_before: Option<u64>,
    pub key: Option<String>,
}

impl Terms {
    /// Whether the order has any term, so that the shell must ask before
    /// it runs the job.
    pub fn any(&self) -> bool {
        self.id.is_some() || self.not_before.is_some() || self.key.is_some()
    }
}

/// What the machine asks the shell to do.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // records are the common variant: boxing would allocate for each one
pub enum Action {
    /// Append this record to the claims topic (retrying until it is
    /// acknowledged; a duplicate is harmless).
    Append(Record),
    /// Append these records to the claims topic in one transaction, in
    /// this order: all of them land, together, or none (retrying until
    /// acknowledged, as [`Action::Append`]). A process's last `completed`
    /// and its heir's `booted` (docs/protocol.md R16, "Handed boot").
    AppendAll(Vec<Record>),
    /// Publish this completion's result to the results topic (retrying
    /// until it is acknowledged; a duplicate is harmless: subscribers key
    /// results by order), before the [`Action::Append`] of the `completed`
    /// record that follows it, so that a crash in between publishes the
    /// result again rather than never (docs/protocol.md R47). Only with
    /// [`Settings::publish_results`].
    PublishResult(ResultMessage),
    /// Report the orders topic's end offsets when caught up with the log; if
    /// no order is waiting, the shell waits for a new order or a new record.
    FindOrder,
    /// Read the order (it waits at the frontier) and report its key with
    /// [`Input::Peeked`], before the machine claims it: the claim
    /// announces the key (docs/protocol.md R56). The shell may keep the
    /// order's message for the [`Action::Run`] that may follow.
    Peek { order: OrderId },
    /// Fetch the order and run it. `retry` when an earlier attempt was lost.
    /// If the order names an `id`, report it with [`Input::OrderId`] and
    /// run only on [`Action::Start`].
    Run {
        order: OrderId,
        attempt: Attempt,
        retry: bool,
    },
    /// The order's id is its own (not a duplicate): run it now.
    Start { order: OrderId },
    /// The order being run (after [`Action::Run`]) was cancelled: kill its
    /// job (its process group), or do not start it if it has not started,
    /// and report the end with [`Input::JobDone`] as usual.
    Kill { order: OrderId },
    /// The order being run (after [`Action::Run`]) is parked (R54): do
    /// not start its job, end its guard, and report nothing.
    Release { order: OrderId },
    /// Send [`Input::Tick`] when the clock reaches this time (ms).
    WakeAt(u64),
    /// The job of the order we hold may run until this time (our clock,
    /// ms), and no longer: the shell's guard freezes the job's processes
    /// then, even if the worker itself is stopped, unless a later `Guard`
    /// arrives first; one arriving while the job is frozen (a time still
    /// ahead) thaws it (docs/protocol.md R53). Only with leases; the first
    /// comes before the [`Action::Run`] or [`Action::Start`] of the job.
    Guard(u64),
    /// End the process with this status: [`Exit::Ok`] (its orders done),
    /// [`Exit::Fenced`] (it found a newer incarnation of its instance
    /// number in the log: a zombie) or [`Exit::Revoked`] (its hold was
    /// revoked after its lease expired: it was too slow or cut off; unlike
    /// a fenced one, it is restarted).
    Exit(Exit),
}

/// Where the machine is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not booted yet (docs/protocol.md R16): the shell fences the previous
    /// processes of our number (Kafka's `init_transactions`), so that none
    /// of their appends can land after our `booted`. Reading the log
    /// meanwhile; `booted` is appended on [`Input::Fenced`].
    Fence,
    /// Not booted yet, where no broker can fence (docs/protocol.md R17): the previous process of
    /// our number may have died with appends in flight, and our `booted`
    /// must come after every one of them that will ever land. Reading the
    /// log meanwhile; `booted` is appended once the clock reaches `until`,
    /// or at once when caught up if the log's current incarnation of our
    /// number is `clean`, the one this host saw exit with nothing in flight.
    Settle {
        clean: Option<Incarnation>,
        until: u64,
    },
    /// Our `booted` is appended; waiting to read it and catch up.
    Boot { seen: bool },
    /// Waiting for the orders' end offsets.
    Choose,
    /// Our revocation of an expired hold is appended; waiting to read it
    /// (valid: we hold the order in its place and claim it).
    Takeover { order: OrderId, seq: u64 },
    /// Our claim is appended; waiting to read it.
    Claim { order: OrderId, seq: u64 },
    /// Reading the log after our claim until [`decide`] is not `Wait`.
    Negotiate { order: OrderId },
    /// Our decision is appended; waiting to read it.
    Decide { order: OrderId, seq: u64 },
    /// Our `committed` for a new attempt of a lost run is appended; waiting
    /// to read it before running (boot's resume).
    Retry {
        order: OrderId,
        attempt: Attempt,
        seq: u64,
    },
    /// The job runs (or is being fetched).
    Run { order: OrderId, attempt: Attempt },
    /// The order's `id` or `key` is announced; waiting to read it back.
    Announce {
        order: OrderId,
        attempt: Attempt,
        terms: Terms,
        seq: u64,
    },
    /// Our `parked` is appended; waiting to read it (R54).
    Park { order: OrderId, seq: u64 },
    /// Our `completed` is appended; waiting to read it.
    Complete { order: OrderId, seq: u64 },
    /// Finished (the shell exits with the status).
    Done(Exit),
}

impl Phase {
    /// Still booting: fencing, settling, or replaying the log until its
    /// own `booted` is read back and it caught up (a replay in progress).
    pub fn booting(&self) -> bool {
        matches!(
            self,
            Phase::Fence | Phase::Settle { .. } | Phase::Boot { .. }
        )
    }

    /// Before the own `booted` was read back: until then, another
    /// incarnation of the instance that is current is not newer than us.
    pub fn before_own_booted(&self) -> bool {
        matches!(
            self,
            Phase::Fence | Phase::Settle { .. } | Phase::Boot { seen: false }
        )
    }
}

/// Knobs of the protocol that are the operator's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Settings {
    pub max_attempts: u32,
    /// A rule deliberately broken, so that the model check and the
    /// simulation can show that they catch it (tests/pure/model.rs). Only
    /// with the `testing` feature (Cargo.toml): absent from the binary.
    #[cfg(any(test, feature = "testing"))]
    pub flaw: Option<Flaw>,
    /// The lease: a hold whose instance wrote nothing about it for this long
    /// (ms, by the reader's clock against the writer's `ts`) may be revoked
    /// and taken over. `None`: no leases (an order waits for its instance).
    pub lease_ms: Option<u64>,
    /// Write a checkpoint at boot when the newest one read covers less than
    /// the log minus this many positions (src/checkpoint.rs). `None`: never.
    pub checkpoint_every: Option<u64>,
    /// Orders one incarnation completes before it exits (`ORDERS_PER_PROCESS`;
    /// 1, seed 002's "exit after each order", by default). After reading back
    /// its own `completed`, an incarnation below the limit chooses the next
    /// order, exactly as it does after reading back a `yielded`.
    pub orders_per_process: u32,
    /// How long (ms) a process whose predecessor may have died with appends
    /// in flight waits before appending its `booted` (`SETTLE_MS`;
    /// docs/protocol.md R16). 0: boot at once — the model check and the
    /// simulation, whose world enforces the rule itself (a dead process's
    /// appends land or are lost before its successor starts).
    pub settle_ms: u64,
    /// Fence the instance's previous processes before booting
    /// (`CLAIMS_FENCE=transactions`; docs/protocol.md R16): start in
    /// [`Phase::Fence`] and append `booted` on [`Input::Fenced`]. Takes
    /// precedence over `settle_ms`.
    pub fence: bool,
    /// How long (ms) an idle instance defers to each instance ahead of it
    /// in an order's line before it claims the order anyway
    /// (`CLAIM_DEFER_MS`; docs/protocol.md R29, R31). 0: no
    /// deferral, every idle instance claims the order it sees first (the
    /// herd: about 2N-1 records per order with N idle instances).
    pub claim_defer_ms: u64,
    /// Publish each completion's result ([`Action::PublishResult`]) before
    /// appending its `completed` (`RESULTS_TOPIC`; docs/protocol.md R47).
    pub publish_results: bool,
    /// Runs of one order key live at once across the pool, at most
    /// (`KEY_CONCURRENCY`, 1 by default; docs/protocol.md R56). The same
    /// in every instance.
    pub key_concurrency: u32,
    /// The orders topics in priority order (`ORDERS_TOPIC`, a list; the
    /// last is [`Topic::MAIN`]; docs/protocol.md R57): an idle instance
    /// takes the waiting order of the first topic it may take one of.
    /// Orders of other topics are not taken.
    pub topics: Vec<Topic>,
}

impl Settings {
    /// How long after sending its newest record of a hold that it read back
    /// valid a holder may let the hold's job run (R53): two thirds of the
    /// lease, so that the job is frozen a third of a lease before anyone can
    /// revoke the hold, which leaves margin for clock rate error and for the
    /// freeze to take effect. `None`: no leases, the job is never frozen.
    pub fn jeopardy_ms(&self) -> Option<u64> {
        self.lease_ms.map(|l| l * 2 / 3)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            #[cfg(any(test, feature = "testing"))]
            flaw: None,
            lease_ms: None,
            checkpoint_every: None,
            orders_per_process: 1,
            settle_ms: 0,
            fence: false,
            claim_defer_ms: 0,
            publish_results: false,
            key_concurrency: 1,
            topics: vec![Topic::MAIN],
        }
    }
}

/// Broken rules for the checks to catch (see [`Settings::flaw`]). Only
/// with the `testing` feature.
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flaw {
    /// Seed 002 read literally: on boot, start work whenever a claim is
    /// outstanding, decided or not.
    ResumeBlindly,
    /// Decide as soon as the claim is appended, without reading the log up
    /// to it.
    DecideWithoutReading,
    /// Ignore rivals with higher numbers instead of waiting for them.
    IgnoreHigherRivals,
    /// Take the next order one past the frontier, leaving a gap.
    SkipAnOrder,
    /// Do not drop duplicate records.
    KeepDuplicates,
    /// Records do not name their writer's `booted` (`booted_at`, R10), as
    /// older writers': a replay that the log cleaner passed takes a newer
    /// incarnation whose `booted` it erased for a fenced one.
    NoBootedAt,
    /// Never claim an order this instance is not first in line for: an
    /// order whose preferred instance is dead waits for it for ever.
    DeferForever,
    /// Run a committed order although a cancel of it was read first (and
    /// do not kill a job whose order is cancelled while it runs).
    IgnoreCancel,
    /// With `Settings::fence`: append `booted` at once, before the fence
    /// has completed (docs/protocol.md R16).
    BootBeforeFence,
    /// A hold's age is the reader's clock minus the writer's `ts` (the rule
    /// before R36 counted on the reader's own clock): a reader whose clock
    /// runs ahead revokes live holds.
    AgeFromTs,
    /// No jeopardy (R53): never ask the guard to freeze the job, so a cut
    /// off or stopped holder's job runs on beside its takeover.
    NoJeopardy,
    /// A claim read back commits itself (R34) although a rival's claim came
    /// first: the claimant runs the order without negotiating.
    FuseDespiteRival,
    /// Run an order whose `not_before` is still ahead (R54).
    StartEarly,
    /// Run an order with a key whatever the key's other holds (R56).
    IgnoreKeyLimit,
    /// Claim without reading the order first (the rule before R56's key
    /// on the claim): the holder announces the key on a lease after its
    /// claim, so a later order of the key whose holder announces first
    /// runs first.
    KeyAfterClaim,
    /// An order goes behind parked lower orders of its key only, not
    /// behind one claimed again (out of the park) after its own claim
    /// (R56's rule before `View::held_below`).
    OnlyParkedGoFirst,
    /// Keep the frontier per partition, whatever the topic (the rule
    /// before R57): every record's `next` raises each listed topic's lane
    /// of a partition to the highest frontier of that partition in any
    /// topic, so a claim of `urgent:0:0` moves the main topic's frontier
    /// past `0:0`, which nobody then claims.
    FrontierPerPartition,
    /// Ignore the topics' priorities (R57): line the orders waiting up by
    /// topic name and partition, and claim of those it may the one seen
    /// waiting longest, whatever its topic.
    IgnorePriority,
    /// Hand the heir its `booted` in a transaction of its own before the
    /// last `completed`, not in the completion's transaction after it
    /// (R16, "Handed boot"): the completion then comes after a newer
    /// incarnation's `booted`, void, and the order's hold stays open.
    HandBeforeCompletion,
}

/// Whether the broken rule `Flaw::$flaw` is on in `$settings`: never
/// without the `testing` feature, where there are no flaws.
#[cfg(any(test, feature = "testing"))]
macro_rules! flawed {
    ($settings:expr, $flaw:ident) => {
        $settings.flaw == Some(Flaw::$flaw)
    };
}
#[cfg(not(any(test, feature = "testing")))]
macro_rules! flawed {
    ($settings:expr, $flaw:ident) => {
        false
    };
}

/// One incarnation of instance `me`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Worker {
    pub me: InstanceNo,
    pub incarnation: Incarnation,
    pub view: View,
    pub phase: Phase,
    settings: Settings,
    /// Seq of our newest record.
    seq: u64,
    /// Time (ms since the epoch) given with the newest input; stamps records.
    now: u64,
    /// When we last wrote about our hold.
    renewed: u64,
    /// Per instance whose hold we know: the position of the hold's newest
    /// record and when (our clock) we first read the hold there. A hold's
    /// age counts from that time, on our clock alone (R36).
    heard: BTreeMap<InstanceNo, (Position, u64)>,
    /// Until when (our clock) our hold is safe: the `ts` of our newest
    /// record of it read back valid, plus [`Settings::jeopardy_ms`]; the
    /// shell's guard freezes the job past it (R53). 0: not yet.
    safe_until: u64,
    /// Revocations we appended: (instance, position of the hold's record).
    revoking: std::collections::BTreeSet<(InstanceNo, Position)>,
    /// Orders this incarnation has completed (read back).
    completed: u32,
    /// While choosing: each order seen waiting, and when (our clock) we
    /// first saw it, since we last claimed. An order is ours to claim once
    /// it has waited `claim_defer_ms` per instance ahead of us in its line
    /// (docs/protocol.md R29).
    waiting_since: BTreeMap<OrderId, u64>,
    /// While deferring: when the next deferral runs out.
    defer_until: Option<u64>,
    /// Every deferral is over, whatever the clock says (the model check's
    /// nondeterministic expiry, `Worker::end_deferrals`).
    defer_over: bool,
    /// Choosing, and the last answer about the orders gave nothing to claim
    /// (none waiting, or every one waiting some other instance's turn): the
    /// next catch-up with the log, or news from the orders topic, asks
    /// again ([`Action::FindOrder`]): a record may have moved the frontier
    /// or the idle queue, an order may have arrived. False while a question
    /// is open.
    looking: bool,
    /// The order we are reading before we claim it ([`Action::Peek`]).
    peek: Option<Peek>,
    /// Whether our hold must wait for its key (R56), judged as its
    /// decision was read back ([`Worker::run`]), until its job would
    /// start.
    key_verdict: Option<bool>,
    /// The incarnation of the instance's next process, when the shell
    /// knows it ([`Input::Heir`]): its `booted` goes with our last
    /// `completed` (R16, "Handed boot").
    heir: Option<Incarnation>,
}

/// An order we read before claiming it (R56), and the instances its
/// claim passes over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Peek {
    order: OrderId,
    passed_over: Vec<InstanceNo>,
}

impl Worker {
    /// A new incarnation that knows nothing of how its predecessor ended;
    /// see [`Worker::start_after`]. Only the tests start one this way (the
    /// shell always says how the predecessor ended).
    #[cfg(any(test, feature = "testing"))]
    pub fn start(
        me: InstanceNo,
        incarnation: Incarnation,
        settings: Settings,
        now: u64,
    ) -> (Worker, Vec<Action>) {
        Worker::start_after(me, incarnation, settings, now, None)
    }

    /// A new incarnation; returns it with its first actions. `clean` names
    /// the incarnation that this host saw exit with every append
    /// acknowledged (pool_worker/src/settle.rs). With `settle_ms` 0 the first action is
    /// to append `booted`; otherwise the machine settles first
    /// ([`Phase::Settle`]).
    pub fn start_after(
        me: InstanceNo,
        incarnation: Incarnation,
        settings: Settings,
        now: u64,
        clean: Option<Incarnation>,
    ) -> (Worker, Vec<Action>) {
        Worker::start_settling(me, incarnation, settings, now, clean, None)
    }

    /// [`Worker::start_after`], settling at most until `inherited`: the
    /// deadline a predecessor that was killed while it settled was waiting
    /// for (it appended nothing, so nothing of its own can be in flight;
    /// docs/protocol.md R17). Without settling (`settle_ms` 0, or `fence`),
    /// `inherited` is ignored.
    pub fn start_settling(
        me: InstanceNo,
        incarnation: Incarnation,
        settings: Settings,
        now: u64,
        clean: Option<Incarnation>,
        inherited: Option<u64>,
    ) -> (Worker, Vec<Action>) {
        let view = View::new();
        #[cfg(any(test, feature = "testing"))]
        let view = {
            let mut view = view;
            view.keep_duplicates = flawed!(settings, KeepDuplicates);
            view
        };
        let settle_ms = settings.settle_ms;
        let fence = settings.fence;
        let until = (now + settle_ms).min(inherited.unwrap_or(u64::MAX));
        let mut w = Worker {
            me,
            incarnation,
            view,
            phase: Phase::Settle {
                clean: clean.clone(),
                until,
            },
            settings,
            seq: 0,
            now,
            renewed: now,
            heard: BTreeMap::new(),
            safe_until: 0,
            revoking: Default::default(),
            completed: 0,
            waiting_since: BTreeMap::new(),
            defer_until: None,
            defer_over: false,
            looking: false,
            peek: None,
            key_verdict: None,
            heir: None,
        };
        if fence {
            // R16: boot once the shell has fenced our predecessors.
            w.phase = Phase::Fence;
            if flawed!(w.settings, BootBeforeFence) {
                let acts = w.boot();
                return (w, acts);
            }
            return (w, Vec::new());
        }
        if settle_ms == 0 {
            let acts = w.boot();
            return (w, acts);
        }
        // A clean predecessor is confirmed against the log once caught up;
        // without one there is nothing to confirm, only the wait.
        let acts = if clean.is_some() {
            Vec::new()
        } else {
            vec![Action::WakeAt(until)]
        };
        (w, acts)
    }

    /// Append our `booted` (docs/protocol.md R16).
    fn boot(&mut self) -> Vec<Action> {
        self.phase = Phase::Boot { seen: false };
        let mut booted = self.record(Body::Booted);
        // A `booted` names no `booted` (R10; a reader takes one that does
        // for foreign, R3): not even a handed one read already, which a
        // heir let go with a plain `go` boots on again (R16).
        booted.booted_at = None;
        vec![Action::Append(booted)]
    }

    /// R16, "Handed boot": our `booted` is our predecessor's, numbered 1,
    /// in its last transaction; read back already, boot is over (every
    /// record of the predecessor lies before it); else wait for it, as
    /// for an own `booted`.
    fn handed(&mut self) -> Vec<Action> {
        self.seq = 1;
        if self.view.booted_at(self.me, &self.incarnation).is_some() {
            self.phase = Phase::Boot { seen: true };
            return self.resume();
        }
        self.phase = Phase::Boot { seen: false };
        Vec::new()
    }

    /// Settling: boot once the wait is over, or once caught up with a log
    /// whose current incarnation of our number is the one that exited clean
    /// (docs/protocol.md R18).
    fn settle(&mut self, caught_up: bool) -> Vec<Action> {
        let Phase::Settle { clean, until } = &self.phase else {
            return Vec::new();
        };
        let confirmed =
            caught_up && clean.is_some() && clean.as_ref() == self.view.incarnation(self.me);
        if confirmed || self.now >= *until {
            return self.boot();
        }
        if caught_up && clean.is_some() {
            // The log does not confirm it (another process of our number
            // ran since, elsewhere, or the marker is stale): wait after all.
            let until = *until;
            self.phase = Phase::Settle { clean: None, until };
            return vec![Action::WakeAt(until)];
        }
        Vec::new()
    }

    /// Starts the replay from a checkpoint's snapshot instead of from
    /// position 0: the shell then reads on from `snapshot.at`. Only before
    /// the first record is read; refused (false) after. `now`: the time it
    /// is loaded (a standby loads a handed view at `go`, long after its
    /// start), from which the ages of the holds in it count.
    pub fn load(&mut self, snapshot: &crate::checkpoint::Snapshot, now: u64) -> bool {
        if !self.phase.before_own_booted() || self.view.end() > Position::new(0) {
            return false;
        }
        self.now = self.now.max(now);
        #[cfg(any(test, feature = "testing"))]
        let keep = self.view.keep_duplicates;
        self.view = View::from_snapshot(snapshot);
        // The snapshot's holds are read now: their ages count from here.
        self.hear();
        #[cfg(any(test, feature = "testing"))]
        {
            self.view.keep_duplicates = keep;
        }
        true
    }

    /// R16, "Handed view": this process's View for `heir`, the incarnation
    /// whose `booted` its last transaction held (the shell passes it on).
    pub fn hand_view(&self, heir: &Incarnation) -> crate::checkpoint::HandedView {
        crate::checkpoint::HandedView {
            heir: heir.clone(),
            checkpoint: self.view.checkpoint(),
            snapshot: self.view.snapshot(),
        }
    }

    /// R16, "Handed view": starts from the View the predecessor handed
    /// us, as from a checkpoint ([`Worker::load`]), keeping where it knew
    /// the newest checkpoint. Refused (false) when it names another
    /// incarnation, or after the first record is read.
    pub fn load_handed(&mut self, v: &crate::checkpoint::HandedView, now: u64) -> bool {
        if v.heir != self.incarnation || !self.load(&v.snapshot, now) {
            return false;
        }
        self.view.set_checkpoint(v.checkpoint);
        true
    }

    /// Renames the log positions this machine stores, and passes the
    /// outcomes it stores through `g` (see [`View::relabel`]; for the model
    /// check only: with the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn relabel(&mut self, r: &Relabel) {
        self.view.relabel(r);
        let f = r.position;
        self.revoking = self.revoking.iter().map(|&(i, p)| (i, f(p))).collect();
        self.heard = self
            .heard
            .iter()
            .map(|(&i, &(p, t))| (i, (f(p), t)))
            .collect();
    }

    /// Feeds `h` exactly what hashing a copy of this machine after
    /// [`Worker::relabel`]`(r)` would, without making the copy (see
    /// [`View::hash_relabeled`]; for the model check only: with the
    /// `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn hash_relabeled<H: std::hash::Hasher>(&self, r: &Relabel, h: &mut H) {
        // Destructured, so that a field added to Worker must be placed here
        // (in declaration order: that is the order the derived Hash uses).
        let Worker {
            me,
            incarnation,
            view,
            phase,
            settings,
            seq,
            now,
            renewed,
            heard,
            safe_until,
            revoking,
            completed,
            waiting_since,
            defer_until,
            defer_over,
            looking,
            peek,
            key_verdict,
            heir,
        } = self;
        (me, incarnation).hash(h);
        view.hash_relabeled(r, h);
        (phase, settings, seq, now, renewed).hash(h);
        let f = r.position;
        let heard: BTreeMap<InstanceNo, (Position, u64)> =
            heard.iter().map(|(&i, &(p, t))| (i, (f(p), t))).collect();
        (heard, safe_until).hash(h);
        // The renamed set, in its own order (the set's hash is its length
        // and its elements in order).
        let mut renamed: Vec<(InstanceNo, Position)> =
            revoking.iter().map(|&(i, p)| (i, f(p))).collect();
        renamed.sort_unstable();
        renamed.dedup();
        renamed.len().hash(h);
        for x in &renamed {
            x.hash(h);
        }
        (
            completed,
            waiting_since,
            defer_until,
            defer_over,
            looking,
            peek,
            key_verdict,
            heir,
        )
            .hash(h);
    }

    /// While choosing and deferring to instances ahead in an order's line:
    /// when the deferral runs out (our clock).
    pub fn deferring(&self) -> Option<u64> {
        self.defer_until.filter(|_| self.phase == Phase::Choose)
    }

    /// Ends every deferral now, whatever the clock says: the next Tick asks
    /// for the orders again, and every order waiting may be claimed. For
    /// the model check, where the expiry of a deferral is a step that may
    /// come at any moment (tests/pure/world; with the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn end_deferrals(&mut self) {
        self.defer_over = true;
    }

    /// Whether the process has finished.
    pub fn done(&self) -> Option<Exit> {
        match self.phase {
            Phase::Done(code) => Some(code),
            _ => None,
        }
    }

    /// A new record of ours, numbered.
    fn record(&mut self, body: Body) -> Record {
        self.seq += 1;
        let mut r = Record::new(self.me, body, &self.incarnation, self.now);
        r.seq = self.seq;
        // R10: where our own `booted` is, once read back.
        if !flawed!(self.settings, NoBootedAt) {
            r.booted_at = self.view.booted_at(self.me, &self.incarnation);
        }
        // Every record carries our frontier (record.rs, `next`): compaction
        // keeps only the newest record per key, and that one may be void (a
        // dead incarnation's claim landing late), so the frontier must not
        // live in claims alone (tests/pure/model.rs found the double run).
        r.next = self.view.frontier().clone();
        if flawed!(self.settings, FrontierPerPartition) {
            self.per_partition(&mut r.next);
        }
        // R54: about an order once parked, keyed by the order.
        r.order_keyed =
            r.event().order_keyed() && r.order().is_some_and(|o| self.view.parked_once(o));
        r
    }

    /// `Flaw::FrontierPerPartition`: every listed topic's lane of a
    /// partition raised to the partition's highest frontier in any topic.
    #[cfg(any(test, feature = "testing"))]
    fn per_partition(&self, next: &mut BTreeMap<Lane, i64>) {
        let mut top: BTreeMap<i32, i64> = BTreeMap::new();
        for (l, &o) in next.iter() {
            let e = top.entry(l.partition).or_insert(o);
            *e = (*e).max(o);
        }
        for (p, o) in top {
            for &t in &self.settings.topics {
                next.insert(Lane::new(t, p), o);
            }
        }
    }

    #[cfg(not(any(test, feature = "testing")))]
    fn per_partition(&self, _next: &mut BTreeMap<Lane, i64>) {}

    /// Whether this incarnation wrote `rec` (on its own behalf, or a
    /// revocation on another's).
    pub fn wrote(&self, rec: &Record) -> bool {
        rec.writer() == self.me && rec.incarnation == self.incarnation
    }

    /// Whether `rec` is the record numbered `seq` that this incarnation
    /// wrote ([`Worker::wrote`]).
    fn is_ours(&self, rec: &Record, seq: u64) -> bool {
        self.wrote(rec) && rec.seq == seq
    }

    /// Feeds one input at time `now`; returns what to do.
    pub fn handle(&mut self, input: Input, now: u64) -> Vec<Action> {
        self.now = self.now.max(now);
        if self.done().is_some() {
            return Vec::new();
        }
        let renewed = self.renewed;
        let mut out = self.on_input(input);
        // A hold was written about: wake for its next renewal exactly a third
        // of a lease later (R36), not at the next periodic Tick, which may
        // come up to a third of a lease after that: the guard's deadline
        // (R53) leaves the renewal a third of a lease to be read back.
        if let Some(lease) = self.settings.lease_ms {
            if self.renewed != renewed && self.done().is_none() {
                out.push(Action::WakeAt(self.renewed + lease / 3));
            }
        }
        out
    }

    fn on_input(&mut self, input: Input) -> Vec<Action> {
        match input {
            Input::Foreign(pos) => {
                self.view.skip(pos);
                Vec::new()
            }
            Input::Record(pos, rec) => self.on_record(pos, rec),
            Input::CaughtUp => self.on_caught_up(),
            Input::Orders(ends) => self.on_orders(&ends),
            Input::Peeked { order, key } => self.on_peeked(order, key),
            Input::OrdersMoved => self.look_again(),
            Input::JobDone(outcome) => self.on_job_done(outcome),
            Input::Tick => self.on_tick(),
            Input::Terms(terms) => self.on_terms(terms),
            Input::Fenced => match self.phase {
                Phase::Fence => self.boot(),
                _ => Vec::new(),
            },
            Input::Heir(inc) => {
                if self.settings.fence && inc != self.incarnation {
                    self.heir = Some(inc);
                }
                Vec::new()
            }
            Input::Handed => match self.phase {
                Phase::Fence => self.handed(),
                _ => Vec::new(),
            },
        }
    }

    /// The order's terms, before its job starts: park it while it is not
    /// due (R54); announce its id (R46) and its key (R56) in the log, the
    /// first order to announce an id owns it; or start it.
    fn on_terms(&mut self, terms: Terms) -> Vec<Action> {
        let Phase::Run { order, attempt } = self.phase else {
            return Vec::new();
        };
        // R56: the key a record of our hold announced (its claim's, read
        // before the claim) is the order's key for the protocol, also
        // where the order's body differs (a URL order's body names
        // another, or none).
        let announced = self.announced_key();
        let keyed = announced.is_some();
        let terms = Terms {
            key: announced.or(terms.key),
            ..terms
        };
        if terms.not_before.is_some_and(|t| t > self.now) && !flawed!(self.settings, StartEarly) {
            return self.park(order, attempt, &terms);
        }
        let order_key = terms.key.clone().filter(|_| !keyed);
        if terms.id.is_none() && order_key.is_none() {
            return self.start_job(order, attempt, &terms);
        }
        let r = self.record(Body::Lease {
            order,
            attempt,
            order_id: terms.id.clone(),
            order_key,
        });
        self.renewed = self.now;
        self.phase = Phase::Announce {
            order,
            attempt,
            terms,
            seq: r.seq,
        };
        vec![Action::Append(r)]
    }

    /// The order's job may start but for its key: park it if the key has
    /// no room (`key_concurrency` holds of it went before ours, R56) or a
    /// parked order of its key that is due goes before it; else start it.
    fn start_job(&mut self, order: OrderId, attempt: Attempt, terms: &Terms) -> Vec<Action> {
        if let Some(k) = terms.key.as_deref() {
            // Judged as the hold's decision was read back, if the key was
            // known then (announced by the claim); else now, as the lease
            // that announced it is read back.
            let blocked = match self.key_verdict.take() {
                Some(v) => v,
                None => self.key_blocked(order, attempt, k),
            };
            if blocked && !flawed!(self.settings, IgnoreKeyLimit) {
                return self.park(order, attempt, terms);
            }
        }
        self.phase = Phase::Run { order, attempt };
        vec![Action::Start { order }]
    }

    /// Whether our hold of `order` with key `k` must wait (R56): the key
    /// has no room (`key_concurrency` holds of other orders announced it
    /// before ours), or an order of the key with a lower offset goes first
    /// (I15).
    fn key_blocked(&self, order: OrderId, attempt: Attempt, k: &str) -> bool {
        let hold = self.view.hold(self.me);
        let at = hold
            .and_then(|h| h.key.as_ref())
            .map_or(Position::new(u64::MAX), |(_, at)| *at);
        let full = self.view.key_ahead(self.me, k, at) >= self.settings.key_concurrency as usize;
        // Order: a due parked order of the key goes first, and so does a
        // lower order of the key claimed again after ours (out of the
        // park, or taken over). On a first run, and on a takeover's; not
        // on a retry of our own instance's hold (R21): its first run may
        // have started, and a park would hand it to another instance
        // without a revocation.
        let own_retry = attempt > Attempt::FIRST && hold.is_none_or(|h| h.took_over.is_none());
        let behind = !own_retry
            && (self.view.parked_ahead(order, k, self.now)
                || (self.view.held_below(self.me, order, k, at)
                    && !flawed!(self.settings, OnlyParkedGoFirst)));
        full || behind
    }

    /// Our hold's decision (or a retry's commit) is read back, and the
    /// order is to run: if its claim announced its key, judge R56 now, on
    /// the log as it stands at that record, as every reader of it would.
    fn run(&mut self, order: OrderId, attempt: Attempt, retry: bool) -> Vec<Action> {
        // R15: a void completion of the order landed after our decision
        // was made (its revoked writer ran the job to its end).
        if let Some(done) = self.complete_ran_elsewhere(order, attempt) {
            return done;
        }
        self.key_verdict = self
            .announced_key()
            .map(|k| self.key_blocked(order, attempt, &k));
        self.phase = Phase::Run { order, attempt };
        vec![Action::Run {
            order,
            attempt,
            retry,
        }]
    }

    /// The key a record of our hold announced (its claim, a lease; R56).
    fn announced_key(&self) -> Option<String> {
        let (k, _) = self.view.hold(self.me)?.key.as_ref()?;
        Some(k.clone())
    }

    /// Park the order we hold committed, before its job starts (R54): it
    /// waits, held by nobody, until it is due and its key has room.
    fn park(&mut self, order: OrderId, attempt: Attempt, terms: &Terms) -> Vec<Action> {
        // R15, as in `run`: finished while its body was fetched.
        if let Some(done) = self.complete_ran_elsewhere(order, attempt) {
            return done;
        }
        let r = self.record(Body::Parked {
            order,
            attempt,
            until: terms.not_before.filter(|&t| t > self.now),
            order_key: terms.key.clone(),
        });
        self.phase = Phase::Park { order, seq: r.seq };
        vec![Action::Release { order }, Action::Append(r)]
    }

    /// The order we hold, in the phases where our hold is in the log.
    fn held(&self) -> Option<OrderId> {
        match self.phase {
            Phase::Negotiate { order }
            | Phase::Decide { order, .. }
            | Phase::Retry { order, .. }
            | Phase::Announce { order, .. }
            | Phase::Park { order, .. }
            | Phase::Run { order, .. } => Some(order),
            _ => None,
        }
    }

    /// Whether instance `j`'s hold `h` has outlived its lease: we first
    /// read its newest record over `LEASE_MS` ago, by our own clock (R36).
    /// A hold we have not read at that record is not expired.
    fn expired(&self, j: InstanceNo, h: &Hold) -> bool {
        let Some(lease) = self.settings.lease_ms else {
            return false;
        };
        if flawed!(self.settings, AgeFromTs) {
            return self.now.saturating_sub(h.last_ts) > lease;
        }
        self.heard_at(j, h)
            .is_some_and(|t| self.now.saturating_sub(t) > lease)
    }

    /// When (our clock) we first read instance `j`'s hold `h` at its newest
    /// record.
    fn heard_at(&self, j: InstanceNo, h: &Hold) -> Option<u64> {
        match self.heard.get(&j) {
            Some(&(pos, t)) if pos == h.last_pos => Some(t),
            _ => None,
        }
    }

    /// Notes, for every hold in the View, when we first read it at its
    /// newest record (R36); forgets instances that hold nothing. For a View
    /// that did not come record by record (a checkpoint's snapshot), and on
    /// every Tick.
    fn hear(&mut self) {
        if self.settings.lease_ms.is_none() {
            return;
        }
        let all: Vec<InstanceNo> = self
            .heard
            .keys()
            .copied()
            .chain(self.view.instances().map(|(j, _)| j))
            .collect();
        for j in all {
            self.hear_of(j);
        }
    }

    /// [`Worker::hear`] for instance `j` alone: when we first read its hold
    /// at the hold's newest record; forgotten if it holds nothing. A record
    /// changes the holds of its key's instance and its writer only (a
    /// revocation closes the holder's and opens its writer's), so reading
    /// one needs only theirs noted.
    fn hear_of(&mut self, j: InstanceNo) {
        if self.settings.lease_ms.is_none() {
            return;
        }
        match self.view.hold(j).map(|h| h.last_pos) {
            Some(pos) => {
                let now = self.now;
                let e = self.heard.entry(j).or_insert((pos, now));
                if e.0 != pos {
                    *e = (pos, now);
                }
            }
            None => {
                self.heard.remove(&j);
            }
        }
    }

    /// Our record at `pos` was read back: if it is a record of our hold and
    /// the hold stands at it (it is valid, and nothing revoked it before
    /// it), the hold is safe until its `ts` (when we made it) plus
    /// [`Settings::jeopardy_ms`]: nobody can revoke it before a whole lease
    /// has passed on their clock since they read it, which is after we sent
    /// it (R53). Returns the new deadline for the guard, if it moved.
    fn renew_guard(&mut self, pos: Position, rec: &Record, applied: bool) -> Option<Action> {
        let jeopardy = self.settings.jeopardy_ms()?;
        if flawed!(self.settings, NoJeopardy) || !applied {
            return None;
        }
        let hold_record = matches!(
            rec.event(),
            Event::Claimed | Event::Committed | Event::Lease
        );
        let ours = rec.writer() == self.me && rec.incarnation == self.incarnation;
        let stands = self.view.hold(self.me).is_some_and(|h| h.last_pos == pos);
        if !(hold_record && ours && stands) {
            return None;
        }
        let until = rec.ts.saturating_add(jeopardy);
        if until <= self.safe_until {
            return None;
        }
        self.safe_until = until;
        Some(Action::Guard(until))
    }

    fn on_tick(&mut self) -> Vec<Action> {
        match self.phase {
            Phase::Settle { .. } => return self.settle(false),
            Phase::Fence => return Vec::new(),
            _ => {}
        }
        self.hear();
        let mut out = self.on_tick_leases();
        // A deferral ran out: look at the orders again, and claim.
        let due = self.defer_over || self.defer_until.is_some_and(|t| self.now >= t);
        if self.phase == Phase::Choose && self.defer_until.is_some() && due {
            self.defer_until = None;
            out.push(Action::FindOrder);
        }
        out
    }

    fn on_tick_leases(&mut self) -> Vec<Action> {
        let Some(lease) = self.settings.lease_ms else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(order) = self.held() {
            if self.now.saturating_sub(self.renewed) >= lease / 3 {
                self.renewed = self.now;
                let hold = self.view.hold(self.me);
                let attempt = hold.map_or(Attempt::FIRST, |h| h.attempt);
                let order_id = hold.and_then(|h| h.order_id.clone());
                out.push(Action::Append(self.record(Body::Lease {
                    order,
                    attempt,
                    order_id,
                    order_key: None,
                })));
            }
        }
        match self.phase {
            Phase::Negotiate { order } => out.extend(self.negotiate(order)),
            Phase::Choose => out.extend(self.take_over()),
            _ => {}
        }
        out
    }

    /// A revocation of instance `j`'s hold, which we saw at its newest record.
    /// It carries the hold's rank and the attempt a taker runs: an idle
    /// revoker holds the order in the hold's place once it reads it back.
    fn revoke(&mut self, j: InstanceNo, h: &Hold) -> Record {
        self.revoking.insert((j, h.last_pos));
        let body = Body::Revoked {
            order: h.order,
            by: self.me,
            fences: h.incarnation.clone(),
            seen: h.last_pos,
            // The taker stands where the hold stood: at its rank if it was
            // undecided; before every claim (rank 0) if it had committed, as
            // a committed hold did (rivals that saw the commit yield; the
            // taker must not yield to them in turn).
            rank: Some(if h.committed.is_some() { 0 } else { h.rank }),
            // A committed hold may have run: the takeover's run is a retry.
            attempt: if h.committed.is_some() {
                h.attempt.next()
            } else {
                h.attempt
            },
            reason: Some(format!(
                "lease expired: nothing from instance {j} about this order for over {} ms",
                self.settings.lease_ms.unwrap_or(0)
            )),
        };
        let mut r = self.record(body);
        r.instance = j;
        r
    }

    /// While idle: take over the oldest hold whose lease expired — revoke
    /// it; once the revocation is read back valid, we hold the order in its
    /// place and claim it, and negotiate like any claim (docs/protocol.md
    /// R37, R39).
    fn take_over(&mut self) -> Vec<Action> {
        if self.phase != Phase::Choose {
            return Vec::new();
        }
        let victim = self
            .view
            .instances()
            .filter(|(j, _)| *j != self.me)
            .filter_map(|(j, s)| s.hold.clone().map(|h| (j, h)))
            .filter(|(j, h)| self.expired(*j, h) && !self.revoking.contains(&(*j, h.last_pos)))
            .min_by_key(|(j, h)| (self.heard_at(*j, h), h.order));
        let Some((j, h)) = victim else {
            return Vec::new();
        };
        self.waiting_since.clear();
        self.defer_until = None;
        let revoke = self.revoke(j, &h);
        self.phase = Phase::Takeover {
            order: h.order,
            seq: revoke.seq,
        };
        self.renewed = self.now;
        vec![Action::Append(revoke)]
    }

    /// Our revocation was read back. Valid, we hold the order pending: claim
    /// it under our own key (the revocation is keyed by the old holder, and
    /// compaction keeps only its newest), then negotiate. Void (the holder
    /// renewed in time, or another revoked it first): take other work.
    fn after_takeover(&mut self, order: OrderId) -> Vec<Action> {
        match self.view.hold(self.me).cloned() {
            Some(h) if h.order == order && h.pending => self.claim_takeover(&h),
            _ => {
                self.phase = Phase::Choose;
                vec![Action::FindOrder]
            }
        }
    }

    /// The takeover claim of a pending hold (after our revocation, or at
    /// boot when the last process died between the two).
    fn claim_takeover(&mut self, h: &Hold) -> Vec<Action> {
        let claim = self.record(Body::Claimed {
            order: h.order,
            attempt: h.attempt,
            rank: Some(h.rank),
            takeover_of: h.took_over.iter().cloned().collect(),
            passed_over: Vec::new(),
            order_id: h.order_id.clone(),
            unpark: false,
            park_at: None,
            order_key: h.key.as_ref().map(|(k, _)| k.clone()),
        });
        self.phase = Phase::Claim {
            order: h.order,
            seq: claim.seq,
        };
        self.renewed = self.now;
        vec![Action::Append(claim)]
    }

    /// A `booted` of our instance number by another incarnation, read at
    /// `pos`: a newer incarnation fences us (R10) — once our own `booted`
    /// is read; before, a newer one is not newer.
    fn on_other_booted(&mut self, pos: Position, rec: &Record) -> Vec<Action> {
        let seen = self.own_booted_seen();
        let _ = self.view.apply(pos, rec);
        if seen {
            return self.finish(Exit::Fenced);
        }
        Vec::new()
    }

    /// Whether our own `booted` was read back: from then on, another
    /// incarnation of ours that becomes current is newer than us.
    fn own_booted_seen(&self) -> bool {
        !self.phase.before_own_booted()
    }

    fn on_record(&mut self, pos: Position, rec: Record) -> Vec<Action> {
        if rec.event() == Event::Booted
            && rec.instance == self.me
            && rec.incarnation != self.incarnation
        {
            return self.on_other_booted(pos, &rec);
        }
        let result = self.view.apply(pos, &rec);
        // R10: once our `booted` is read, we stay our instance's current
        // incarnation until a newer one's `booted` (on_other_booted) or,
        // that `booted` erased by compaction, a record naming it
        // (`booted_at`, View::adopt_newer) makes another current: that
        // fences us as the `booted` would have.
        let superseded = self.view.incarnation(self.me) != Some(&self.incarnation);
        if superseded && self.own_booted_seen() {
            return self.finish(Exit::Fenced);
        }
        let applied = result.is_ok();
        let revokes_us =
            matches!(&rec.body, Body::Revoked { fences, .. } if *fences == self.incarnation);
        if applied && revokes_us && rec.instance == self.me {
            return self.finish(Exit::Revoked);
        }
        self.hear_of(rec.instance);
        self.hear_of(rec.writer());
        // R53: the guard's new deadline goes first, before the job it
        // guards is started below.
        let guard = self.renew_guard(pos, &rec, applied);
        let mut out = self.after_record(rec, result, applied);
        if let Some(g) = guard {
            if self.done().is_none() {
                out.insert(0, g);
            }
        }
        out
    }

    /// What the record just applied means in our phase.
    fn after_record(
        &mut self,
        rec: Record,
        result: Result<(), Void>,
        applied: bool,
    ) -> Vec<Action> {
        match self.phase.clone() {
            Phase::Boot { seen: false } if self.is_ours(&rec, 1) => {
                self.phase = Phase::Boot { seen: true };
                Vec::new()
            }
            Phase::Takeover { order, seq } if self.is_ours(&rec, seq) => self.after_takeover(order),
            Phase::Claim { order, seq } if self.is_ours(&rec, seq) => {
                if let Err(void) = result {
                    return self.own_record_void(void);
                }
                // R34: a claim that met no rival is its own commit.
                let fused = self
                    .view
                    .hold(self.me)
                    .is_some_and(|h| h.fused_at(order, h.claim_pos));
                if fused {
                    return self.after_decision(order);
                }
                if flawed!(self.settings, FuseDespiteRival) {
                    // The broken rule: run as if the claim were its own
                    // commit although a rival's claim came first.
                    return self.run(order, Attempt::FIRST, false);
                }
                self.phase = Phase::Negotiate { order };
                self.negotiate(order)
            }
            Phase::Negotiate { order } => self.negotiate(order),
            Phase::Decide { order, seq } if self.is_ours(&rec, seq) => self.after_decision(order),
            Phase::Announce {
                order,
                attempt,
                terms,
                seq,
            } if self.is_ours(&rec, seq) => self
                .before_start(result, order, attempt)
                .unwrap_or_else(|| self.after_announce(order, attempt, &terms)),
            // Our park closed our hold: choose again, as after a yield.
            Phase::Park { order, seq } if self.is_ours(&rec, seq) => match result {
                // R15: a void completion of the order landed between our
                // park's decision and the park, which is stray: our hold
                // is still open, and closes with that outcome.
                Err(Void::Stray) => self
                    .view
                    .hold(self.me)
                    .filter(|h| h.order == order && h.committed.is_some())
                    .map(|h| h.attempt)
                    .and_then(|attempt| self.complete_ran_elsewhere(order, attempt))
                    .unwrap_or_else(|| self.own_record_void(Void::Stray)),
                Err(void) => self.own_record_void(void),
                Ok(()) => {
                    self.phase = Phase::Choose;
                    vec![Action::FindOrder]
                }
            },
            Phase::Retry {
                order,
                attempt,
                seq,
            } if self.is_ours(&rec, seq) => self
                .before_start(result, order, attempt)
                .unwrap_or_else(|| self.run(order, attempt, true)),
            // The order we run is cancelled: kill the job; its end is
            // completed `cancelled` (on_job_done).
            Phase::Run { order, .. }
                if applied
                    && rec.event() == Event::Cancelled
                    && rec.order() == Some(order)
                    && !flawed!(self.settings, IgnoreCancel) =>
            {
                vec![Action::Kill { order }]
            }
            Phase::Complete { seq, .. } if self.is_ours(&rec, seq) => {
                self.after_completion(applied)
            }
            _ => Vec::new(),
        }
    }

    /// Our record that lets a job start (a retry's commit, the lease
    /// announcing the order's id) is read back: what to do instead of
    /// starting it, if anything — it came back void, or the order is
    /// cancelled (R52).
    fn before_start(
        &mut self,
        result: Result<(), Void>,
        order: OrderId,
        attempt: Attempt,
    ) -> Option<Vec<Action>> {
        if let Err(void) = result {
            return Some(self.own_record_void(void));
        }
        let cancelled = self.cancelled(order)?;
        Some(self.complete(order, attempt, cancelled))
    }

    /// Our announcement of the order's `id` is read back: run the order if
    /// it is the first to announce the id, else complete it `duplicate`
    /// (R46).
    fn after_announce(&mut self, order: OrderId, attempt: Attempt, terms: &Terms) -> Vec<Action> {
        let first = terms
            .id
            .as_deref()
            .and_then(|id| Some((id, self.view.id_owner(id)?)));
        match first {
            Some((id, first)) if first != order => {
                let reason = format!("duplicate: order {first} has the same id '{id}'");
                self.complete(order, attempt, Outcome::not_run(Status::Duplicate, reason))
            }
            _ => self.start_job(order, attempt, terms),
        }
    }

    /// Our completion is read back (`applied`: valid). Exit as it said
    /// (`exits`, [`Worker::last_order`]); below ORDERS_PER_PROCESS it
    /// closed our hold, so choose the next order as after a yield (R35).
    fn after_completion(&mut self, applied: bool) -> Vec<Action> {
        let last = self.last_order();
        self.completed += 1;
        if applied && !last {
            self.phase = Phase::Choose;
            return vec![Action::FindOrder];
        }
        self.finish(Exit::Ok)
    }

    /// Our own record came back void. Fenced: a newer process has our
    /// number, stop for good. Stray: the hold it was about is gone — an
    /// earlier incarnation's hold was revoked and taken over before our
    /// retry landed — so this process holds nothing and takes new work.
    fn own_record_void(&mut self, void: Void) -> Vec<Action> {
        match void {
            Void::Stray => {
                self.phase = Phase::Choose;
                vec![Action::FindOrder]
            }
            _ => self.finish(Exit::Fenced),
        }
    }

    fn on_caught_up(&mut self) -> Vec<Action> {
        match self.phase {
            Phase::Boot { seen: true } => self.resume(),
            Phase::Settle { .. } => self.settle(true),
            Phase::Choose => self.look_again(),
            _ => Vec::new(),
        }
    }

    /// Idle and looking (the last answer gave nothing to claim): ask for the
    /// orders again, once, until the answer comes.
    fn look_again(&mut self) -> Vec<Action> {
        if self.phase != Phase::Choose || !self.looking {
            return Vec::new();
        }
        self.looking = false;
        vec![Action::FindOrder]
    }

    /// Whether the machine is idle and looking for an order: the shell then
    /// watches the orders topic for new orders and reports them
    /// ([`Input::OrdersMoved`]).
    pub fn looking(&self) -> bool {
        self.phase == Phase::Choose && self.looking
    }

    /// Whether an [`Input::CaughtUp`] now would make the machine act: at
    /// the end of a boot's replay, of a settling read, or while looking for
    /// an order. (The model check offers the step only then.)
    pub fn awaits_caught_up(&self) -> bool {
        match &self.phase {
            Phase::Boot { seen } => *seen,
            Phase::Settle { clean, .. } => clean.is_some(),
            Phase::Choose => self.looking,
            _ => false,
        }
    }

    /// Boot is over: resume what our instance number holds, or take the next
    /// order (docs/protocol.md R21); first leave a checkpoint if the newest
    /// one is far behind, so that the next boots read less.
    fn resume(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(every) = self.settings.checkpoint_every {
            if self.view.end().get() >= self.view.checkpoint().get() + every {
                let snapshot = Box::new(self.view.snapshot());
                out.push(Action::Append(self.record(Body::Checkpoint { snapshot })));
            }
        }
        out.extend(self.resume_hold());
        out
    }

    fn resume_hold(&mut self) -> Vec<Action> {
        let Some(hold) = self.view.hold(self.me).cloned() else {
            self.phase = Phase::Choose;
            return vec![Action::FindOrder];
        };
        if hold.pending {
            // The last process revoked a hold and died before its takeover
            // claim: claim it now, in the revoked hold's place.
            return self.claim_takeover(&hold);
        }
        if hold.committed.is_none() && !flawed!(self.settings, ResumeBlindly) {
            // Claimed but undecided when the last incarnation died: negotiate
            // again, never start work blindly (hole 1 of seed 002).
            self.phase = Phase::Negotiate { order: hold.order };
            return self.negotiate(hold.order);
        }
        // Committed but not completed: the job was lost with the process —
        // unless a fenced process of ours ran it to its end (a zombie, or a
        // process whose `completed` landed after our `booted`). Only we
        // hold the order, so that void completion is nobody's valid one:
        // record its outcome validly instead of running the job again.
        if let Some(done) = self.ran_elsewhere(hold.order) {
            return self.complete(hold.order, hold.attempt, done);
        }
        // Cancelled since (or before) the lost run: not run again.
        if let Some(cancelled) = self.cancelled(hold.order) {
            return self.complete(hold.order, hold.attempt, cancelled);
        }
        let attempt = hold.attempt.next();
        if attempt.get() > self.settings.max_attempts {
            let reason = format!(
                "gave up after {} attempts: each run was lost with its instance",
                hold.attempt
            );
            return self.complete(
                hold.order,
                hold.attempt,
                Outcome::not_run(Status::GaveUp, reason),
            );
        }
        let commit = self.record(Body::Committed {
            order: hold.order,
            attempt,
        });
        // Run only once the new attempt is in the log (R6, R22): a fenced
        // incarnation's retry must not run.
        self.phase = Phase::Retry {
            order: hold.order,
            attempt,
            seq: commit.seq,
        };
        vec![Action::Append(commit)]
    }

    fn on_orders(&mut self, ends: &BTreeMap<Lane, i64>) -> Vec<Action> {
        if self.phase != Phase::Choose {
            return Vec::new();
        }
        self.looking = false;
        let takeover = self.take_over();
        if !takeover.is_empty() {
            return takeover;
        }
        let Some((mut order, passed_over)) = self.choose(ends) else {
            self.looking = true;
            return self.defer_until.map(Action::WakeAt).into_iter().collect();
        };
        if flawed!(self.settings, SkipAnOrder) && order.offset + 1 < ends[&order.lane()] {
            order.offset += 1;
        }
        // R55: a parked order is claimed again at the attempt it waits
        // with; it is behind the frontier already.
        let parked = self
            .view
            .parked_order(order)
            .map(|p| (p.attempt, p.key.clone(), p.at));
        // R56: the claim announces the order's key: its park's, or read
        // from the order first.
        let order_key = match &parked {
            Some((_, key, _)) => key.clone(),
            None if flawed!(self.settings, KeyAfterClaim) => None,
            None => {
                self.peek = Some(Peek { order, passed_over });
                return vec![Action::Peek { order }];
            }
        };
        self.claim(order, passed_over, parked.map(|p| (p.0, p.2)), order_key)
    }

    /// Our claim of `order` (a first claim, or out of the park at the
    /// attempt it waits with, naming the park it ends), announcing its key.
    fn claim(
        &mut self,
        order: OrderId,
        passed_over: Vec<InstanceNo>,
        parked: Option<(Attempt, Position)>,
        order_key: Option<String>,
    ) -> Vec<Action> {
        let mut claim = self.record(Body::Claimed {
            order,
            attempt: parked.map_or(Attempt::FIRST, |p| p.0),
            takeover_of: Vec::new(),
            rank: None,
            passed_over,
            order_id: None,
            unpark: parked.is_some(),
            park_at: parked.map(|p| p.1),
            order_key,
        });
        if parked.is_none() {
            claim.next.insert(order.lane(), order.offset + 1);
            if flawed!(self.settings, FrontierPerPartition) {
                self.per_partition(&mut claim.next);
            }
        }
        self.phase = Phase::Claim {
            order,
            seq: claim.seq,
        };
        self.renewed = self.now;
        if flawed!(self.settings, DecideWithoutReading) {
            // The broken rule: decide on the log as read *before* the claim.
            let mut view = self.view.clone();
            let _ = view.apply(Position::new(u64::MAX - 1), &claim);
            let mut out = vec![Action::Append(claim)];
            if decide(&view, self.me, order) == Decision::Commit {
                let c = self.record(Body::Committed {
                    order,
                    attempt: Attempt::FIRST,
                });
                self.phase = Phase::Decide { order, seq: c.seq };
                out.push(Action::Append(c));
            }
            return out;
        }
        vec![Action::Append(claim)]
    }

    /// The key of the order we read before claiming it (R56): claim it,
    /// unless we stopped choosing meanwhile, or a record read meanwhile
    /// moved the frontier past it (another instance claimed it): then ask
    /// for the orders again.
    fn on_peeked(&mut self, order: OrderId, key: Option<String>) -> Vec<Action> {
        let Some(peek) = self.peek.take_if(|p| p.order == order) else {
            return Vec::new();
        };
        if self.phase != Phase::Choose {
            return Vec::new();
        }
        if self.view.next_offset(order.lane()) > order.offset {
            return vec![Action::FindOrder];
        }
        self.claim(order, peek.passed_over, None, key)
    }

    /// The order to claim now, with the instances passed over to claim it;
    /// `None` when no order is waiting, or when every order waiting is some
    /// other idle instance's turn (then `defer_until` says until when).
    /// docs/protocol.md R29, R30: an idle instance claims at
    /// once an order it is first in line for; any other order waiting once
    /// it has seen it waiting for `claim_defer_ms` per instance ahead of it
    /// in the order's line (it then names them in `passed_over`); of the
    /// orders it may claim, one of the first topic (R57) with one, the one
    /// it has seen waiting longest.
    fn choose(&mut self, ends: &BTreeMap<Lane, i64>) -> Option<(OrderId, Vec<InstanceNo>)> {
        let over = std::mem::take(&mut self.defer_over);
        self.defer_until = None;
        let ready = self.view.ready(self.now, self.settings.key_concurrency);
        let ignore = flawed!(self.settings, IgnorePriority);
        let topics: &[Topic] = if ignore { &[] } else { &self.settings.topics };
        let turns = turns_with(&self.view, &ready, ends, topics, self.me);
        self.waiting_since
            .retain(|o, _| turns.iter().any(|t| t.order == *o));
        let now = self.now;
        for t in &turns {
            self.waiting_since.entry(t.order).or_insert(now);
        }
        let never = flawed!(self.settings, DeferForever);
        let since = |t: &Turn| self.waiting_since.get(&t.order).copied().unwrap_or(now);
        let until = |t: &Turn| {
            since(t).saturating_add(
                self.settings
                    .claim_defer_ms
                    .saturating_mul(t.ahead.len() as u64),
            )
        };
        let due = |t: &&Turn| t.ahead.is_empty() || (!never && (over || now >= until(t)));
        match turns.iter().filter(due).min_by_key(|t| {
            (
                priority(topics, t.order.topic),
                since(t),
                t.ahead.len(),
                t.order,
            )
        }) {
            Some(t) => {
                self.waiting_since.clear();
                // Without deferral nobody waited for its turn: nobody was
                // passed over.
                let mut passed = if self.settings.claim_defer_ms == 0 {
                    Vec::new()
                } else {
                    t.ahead.clone()
                };
                passed.truncate(crate::record::MAX_PASSED_OVER);
                Some((t.order, passed))
            }
            None => {
                // A parked order falls due (R55): look again then.
                let due = self.view.next_due(now);
                self.defer_until = turns.iter().filter(|_| !never).map(until).chain(due).min();
                None
            }
        }
    }

    fn negotiate(&mut self, order: OrderId) -> Vec<Action> {
        let mut decision = decide(&self.view, self.me, order);
        if flawed!(self.settings, IgnoreHigherRivals) && matches!(decision, Decision::Wait { .. }) {
            decision = Decision::Commit;
        }
        let reason = match decision {
            Decision::Wait { on } => {
                // A rival we wait on whose lease expired is revoked, so that
                // a dead rival does not block the order forever.
                let mut out = Vec::new();
                for j in on {
                    if let Some(h) = self.view.hold(j).filter(|h| h.order == order).cloned() {
                        if self.expired(j, &h) && !self.revoking.contains(&(j, h.last_pos)) {
                            out.push(Action::Append(self.revoke(j, &h)));
                        }
                    }
                }
                return out;
            }
            Decision::Commit => None,
            Decision::Yield(why) => Some(why),
        };
        let attempt = self
            .view
            .hold(self.me)
            .map_or(Attempt::FIRST, |h| h.attempt);
        let r = self.record(match reason {
            None => Body::Committed { order, attempt },
            reason => Body::Yielded {
                order,
                attempt,
                reason,
            },
        });
        self.phase = Phase::Decide { order, seq: r.seq };
        vec![Action::Append(r)]
    }

    /// Our decision is in the log; the log's first decision is the one that
    /// counts (a decision of a crashed incarnation may have landed first).
    fn after_decision(&mut self, order: OrderId) -> Vec<Action> {
        match self.view.hold(self.me) {
            Some(h) if h.order == order && h.committed.is_some() => {
                let attempt = h.attempt;
                if let Some(cancelled) = self.cancelled(order) {
                    return self.complete(order, attempt, cancelled);
                }
                if attempt.get() > self.settings.max_attempts {
                    let reason = format!(
                        "gave up after {} attempts: each run was lost with its instance",
                        attempt.get() - 1
                    );
                    return self.complete(order, attempt, Outcome::not_run(Status::GaveUp, reason));
                }
                self.run(order, attempt, attempt > Attempt::FIRST)
            }
            _ => {
                self.phase = Phase::Choose;
                vec![Action::FindOrder]
            }
        }
    }

    /// The cancel of `order` in the log read so far, as the outcome of an
    /// order that is not run (docs/protocol.md R51, R52):
    /// we hold it committed, and the cancel came before the commit we act
    /// on, so every reader agrees that it never runs.
    fn cancelled(&self, order: OrderId) -> Option<Outcome> {
        if flawed!(self.settings, IgnoreCancel) {
            return None;
        }
        let (at, reason) = self.view.cancel(order)?;
        Some(Outcome::not_run(
            Status::Cancelled,
            format!("cancelled before it ran (claims #{at}): {reason}"),
        ))
    }

    /// R15: our committed hold of `order`, which a revoked or fenced process
    /// ran to its end, is completed with that run's outcome (recorded
    /// validly, which closes the hold) instead of being run again or
    /// parked: a park of a finished order is stray, and would leave the hold
    /// open, its key full, until a lease ran out. `None` if no such run.
    fn complete_ran_elsewhere(&mut self, order: OrderId, attempt: Attempt) -> Option<Vec<Action>> {
        let done = self.ran_elsewhere(order)?;
        Some(self.complete(order, attempt, done))
    }

    /// The outcome of a run of `order` that ended in a process whose records
    /// are void (revoked or fenced), for our committed hold of it: resumed,
    /// or read back after that void completion (R15).
    fn ran_elsewhere(&self, order: OrderId) -> Option<Outcome> {
        let c = self.view.contest(order)?;
        if c.completed_at.is_some() {
            return None;
        }
        let (at, outcome) = c.finished.clone()?;
        let mut o = outcome;
        o.reason = Some(format!(
            "not run again: a revoked or fenced process ran it to its end (void completion, claims #{at}){}",
            o.reason.as_deref().map(|r| format!("; its reason: {r}")).unwrap_or_default()
        ));
        Some(o)
    }

    fn on_job_done(&mut self, mut outcome: Outcome) -> Vec<Action> {
        let Phase::Run { order, attempt } = self.phase else {
            return Vec::new();
        };
        // A cancel read while the job ran (one read before our commit
        // stopped it from starting): the log put the cancel before our
        // completion, so the order ends `cancelled`, whatever the killed
        // job's own end, with what it wrote and how long it ran.
        if let Some((at, reason)) = self
            .view
            .cancel(order)
            .filter(|_| !flawed!(self.settings, IgnoreCancel))
        {
            outcome.status = Status::Cancelled;
            outcome.reason = Some(format!(
                "cancelled while it ran, its job killed (claims #{at}): {reason}"
            ));
        }
        self.complete(order, attempt, outcome)
    }

    /// Whether the completion we write now is this process's last: it
    /// reaches `ORDERS_PER_PROCESS`, and the process exits once it reads it
    /// back. The completion says so (`exits`), and readers leave our
    /// instance out of the idle queue until its next `booted`
    /// (docs/protocol.md R27).
    fn last_order(&self) -> bool {
        self.completed + 1 >= self.settings.orders_per_process.max(1)
    }

    fn complete(&mut self, order: OrderId, attempt: Attempt, outcome: Outcome) -> Vec<Action> {
        let body = Body::Completed {
            order,
            attempt,
            exits: self.last_order(),
            order_id: self.view.hold(self.me).and_then(|h| h.order_id.clone()),
            // Every record fits by construction (record::RECORD_LIMIT).
            outcome: outcome.fit(crate::record::MAX_TAIL_BYTES),
        };
        let r = self.record(body);
        self.phase = Phase::Complete { order, seq: r.seq };
        // R47: the result first, then the record.
        let result = ResultMessage::of(&r)
            .filter(|_| self.settings.publish_results)
            .map(Action::PublishResult);
        // R16, "Handed boot": the last completion carries the heir's
        // `booted`, after it, in its transaction.
        let heir = self
            .heir
            .clone()
            .filter(|_| r.exits() && self.settings.fence)
            .map(|inc| self.heir_booted(&inc));
        let append = match heir {
            Some(b) if flawed!(self.settings, HandBeforeCompletion) => {
                vec![Action::Append(b), Action::Append(r)]
            }
            Some(b) => vec![Action::AppendAll(vec![r, b])],
            None => vec![Action::Append(r)],
        };
        result.into_iter().chain(append).collect()
    }

    /// The heir's `booted` (R16, "Handed boot"): its incarnation's first
    /// record (seq 1), with our clock and our frontier.
    fn heir_booted(&self, heir: &Incarnation) -> Record {
        let mut b = Record::new(self.me, Body::Booted, heir, self.now);
        b.seq = 1;
        b.next = self.view.frontier().clone();
        b
    }

    fn finish(&mut self, code: Exit) -> Vec<Action> {
        self.phase = Phase::Done(code);
        vec![Action::Exit(code)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Worker::handle`], answering the machine's [`Action::Peek`] (the
    /// order read before its claim) with no key, as the shell does for an
    /// order without one.
    trait Peeks {
        fn handle_peeked(&mut self, input: Input, now: u64) -> Vec<Action>;
    }

    impl Peeks for Worker {
        fn handle_peeked(&mut self, input: Input, now: u64) -> Vec<Action> {
            let mut out = self.handle(input, now);
            for _ in 0..4 {
                let [Action::Peek { order }] = out.as_slice() else {
                    break;
                };
                let order = *order;
                out = self.handle(Input::Peeked { order, key: None }, now);
            }
            out
        }
    }

    /// A tiny log that worker machines append to and read from in turn.
    struct Log(Vec<Record>);

    impl Log {
        fn feed(&mut self, w: &mut Worker, cursor: &mut usize) -> Vec<Action> {
            let mut out = Vec::new();
            while *cursor < self.0.len() {
                out.extend(w.handle(
                    Input::Record(Position::new(*cursor as u64), self.0[*cursor].clone()),
                    0,
                ));
                *cursor += 1;
            }
            out.extend(w.handle(Input::CaughtUp, 0));
            out
        }
        fn append(&mut self, actions: &[Action]) {
            for a in actions {
                match a {
                    Action::Append(r) => self.0.push(r.clone()),
                    Action::AppendAll(rs) => self.0.extend(rs.iter().cloned()),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn one_worker_runs_one_order_and_exits() {
        let mut log = Log(Vec::new());
        let (mut w, a) = Worker::start(1.into(), "i1".into(), Settings::default(), 0);
        log.append(&a);
        let mut cur = 0;
        let a = log.feed(&mut w, &mut cur);
        assert_eq!(a, vec![Action::FindOrder]);
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 1)])), 0);
        assert!(matches!(&a[..], [Action::Append(r)] if r.event() == Event::Claimed));
        log.append(&a);
        // R34: the claim met no rival, so it is the commit: the order runs
        // once it is read back.
        let a = log.feed(&mut w, &mut cur);
        assert_eq!(a, run((0, 0), 1, false));
        let a = w.handle(Input::JobDone(Outcome::not_run(Status::Ok, "")), 0);
        assert!(
            matches!(&a[..], [Action::Append(r)] if r.event() == Event::Completed && r.exits()),
            "the completion says that the process exits after it: {a:?}"
        );
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::Exit(Exit::Ok)]);
        assert!(w.view.instance(1.into()).unwrap().exiting);
        assert!(w.view.idle_queue().is_empty());
    }

    /// docs/protocol.md R47: with a results topic, the machine asks for the
    /// result to be published first, then for its `completed` to be
    /// appended; without one, only the append.
    #[test]
    fn the_result_is_published_before_the_completion_is_appended() {
        let settings = Settings {
            publish_results: true,
            ..Settings::default()
        };
        let mut log = Log(Vec::new());
        let (mut w, a) = Worker::start(1.into(), "i1".into(), settings, 0);
        log.append(&a);
        let mut cur = 0;
        log.feed(&mut w, &mut cur);
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 1)])), 0);
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), run((0, 0), 1, false));
        let a = w.handle(Input::JobDone(Outcome::not_run(Status::Ok, "")), 0);
        match &a[..] {
            [Action::PublishResult(msg), Action::Append(r)] => {
                assert_eq!(r.event(), Event::Completed);
                assert_eq!(Some(msg), ResultMessage::of(r).as_ref());
                assert_eq!(msg.key, "0:0");
            }
            _ => panic!("the result, then the completion: {a:?}"),
        }
        // Only completions have results.
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::Exit(Exit::Ok)]);
    }

    /// The run of order `p:o`, attempt `attempt`.
    fn run((p, o): (i32, i64), attempt: u32, retry: bool) -> Vec<Action> {
        vec![Action::Run {
            order: OrderId::new(p, o),
            attempt: Attempt::new(attempt),
            retry,
        }]
    }

    /// Whether `a` is one commit, of attempt `attempt`.
    /// Whether `a` is the append of a commit of `attempt` (after the
    /// guard's deadline that reading back a claim gives with leases, R53).
    fn commits(a: &[Action], attempt: u32) -> bool {
        matches!(a, [Action::Append(r)] | [Action::Guard(_), Action::Append(r)]
            if r.event() == Event::Committed && r.attempt().get() == attempt)
    }

    fn completed_in(a: &[Action]) -> Option<&Outcome> {
        a.iter().find_map(|a| match a {
            Action::Append(r) if r.event() == Event::Completed => r.outcome(),
            _ => None,
        })
    }

    /// A worker that has booted and appended its claim of order 0:0 (not
    /// yet read back; it met no rival, so it is the commit, R34), with
    /// `cancel_first` appended before the claim.
    fn committing(log: &mut Log, flaw: Option<Flaw>, cancel_first: bool) -> (Worker, usize) {
        let settings = Settings {
            flaw,
            ..Settings::default()
        };
        let (mut w, cur) = boot_in(log, 1, "i1", settings);
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 1)])), 0);
        assert!(matches!(&a[..], [Action::Append(r)] if r.event() == Event::Claimed));
        if cancel_first {
            log.0
                .push(Record::cancel(OrderId::new(0, 0), "op", 0, "not wanted"));
        }
        log.append(&a);
        (w, cur)
    }

    #[test]
    fn a_commit_after_a_cancel_completes_cancelled_without_running() {
        let mut log = Log(Vec::new());
        let (mut w, mut cur) = committing(&mut log, None, true);
        let a = log.feed(&mut w, &mut cur);
        assert!(!a.iter().any(|a| matches!(a, Action::Run { .. })), "{a:?}");
        let out = completed_in(&a).expect("completed at once");
        assert_eq!(out.status, Status::Cancelled);
        let reason = out.reason.as_deref().unwrap();
        assert!(
            reason.contains("before it ran") && reason.contains("not wanted"),
            "{reason}"
        );
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::Exit(Exit::Ok)]);
        // The flaw runs it anyway.
        let mut log = Log(Vec::new());
        let (mut w, mut cur) = committing(&mut log, Some(Flaw::IgnoreCancel), true);
        let a = log.feed(&mut w, &mut cur);
        assert!(matches!(&a[..], [Action::Run { .. }]), "{a:?}");
    }

    #[test]
    fn a_cancel_read_while_running_kills_the_job_and_completes_cancelled() {
        let mut log = Log(Vec::new());
        let (mut w, mut cur) = committing(&mut log, None, false);
        let order = OrderId::new(0, 0);
        let a = log.feed(&mut w, &mut cur);
        assert!(matches!(&a[..], [Action::Run { .. }]), "{a:?}");
        log.0.push(Record::cancel(order, "op", 0, "stop it"));
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::Kill { order }]);
        // The killed job's end, with its exit code and output kept.
        let killed = Outcome {
            exit_code: Some(-9),
            stdout_tail: "half way".into(),
            duration_ms: 40,
            ..Outcome::not_run(Status::Error, "cancelled: the worker stopped the job")
        };
        let a = w.handle(Input::JobDone(killed), 0);
        let out = completed_in(&a).expect("completed");
        assert_eq!(
            (
                out.status,
                out.exit_code,
                out.stdout_tail.as_str(),
                out.duration_ms
            ),
            (Status::Cancelled, Some(-9), "half way", 40)
        );
        assert!(
            out.reason.as_deref().unwrap().contains("while it ran")
                && out.reason.as_deref().unwrap().contains("stop it"),
            "{out:?}"
        );
        // A second cancel changes nothing: the first one counts.
        log.0.push(Record::cancel(order, "op2", 0, "again"));
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::Exit(Exit::Ok)]);
    }

    #[test]
    fn a_lost_run_cancelled_meanwhile_is_not_run_again() {
        let mut log = Log(Vec::new());
        let (mut w, mut cur) = committing(&mut log, None, false);
        let a = log.feed(&mut w, &mut cur);
        assert!(matches!(&a[..], [Action::Run { .. }]), "{a:?}");
        // The process dies running it; the cancel lands; the next process
        // resumes the committed hold.
        log.0
            .push(Record::cancel(OrderId::new(0, 0), "op", 0, "never mind"));
        let (mut w, a) = Worker::start(1.into(), "i2".into(), Settings::default(), 0);
        log.append(&a);
        let mut cur = 0;
        let a = log.feed(&mut w, &mut cur);
        assert!(!a.iter().any(|a| matches!(a, Action::Run { .. })), "{a:?}");
        assert_eq!(completed_in(&a).map(|o| o.status), Some(Status::Cancelled));
    }

    #[test]
    fn below_orders_per_process_a_completion_leads_to_the_next_order() {
        let mut log = Log(Vec::new());
        let settings = Settings {
            orders_per_process: 2,
            ..Settings::default()
        };
        let (mut w, a) = Worker::start(1.into(), "i1".into(), settings, 0);
        log.append(&a);
        let mut cur = 0;
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::FindOrder]);
        for offset in 0..2 {
            let order = OrderId::new(0, offset);
            let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 3)])), 0);
            assert!(
                matches!(&a[..], [Action::Append(r)]
                if r.event() == Event::Claimed && r.order() == Some(order) && r.attempt().get() == 1),
                "{a:?}"
            );
            log.append(&a);
            // R34: the claim, unrivalled, is the commit.
            assert_eq!(log.feed(&mut w, &mut cur), run((0, offset), 1, false));
            let a = w.handle(Input::JobDone(Outcome::not_run(Status::Ok, "")), 0);
            // The completion says whether the process exits after it.
            assert!(
                matches!(&a[..], [Action::Append(r)]
                if r.event() == Event::Completed && r.exits() == (offset == 1)),
                "{a:?}"
            );
            log.append(&a);
            let a = log.feed(&mut w, &mut cur);
            if offset == 0 {
                // The first completion is read back: no exit, the hold is
                // closed, and the machine chooses again (as after a yield).
                assert_eq!(a, vec![Action::FindOrder]);
                assert_eq!(w.phase, Phase::Choose);
                assert!(w.view.hold(1.into()).is_none());
                assert!(
                    w.handle(Input::Tick, 0).is_empty(),
                    "nothing held, nothing to renew"
                );
            } else {
                assert_eq!(
                    a,
                    vec![Action::Exit(Exit::Ok)],
                    "the second completion is the last"
                );
            }
        }
        // One incarnation, one booted, records numbered 1..=5 in order, each
        // order claimed and completed once (its claim is its commit, R34).
        assert_eq!(
            log.0.iter().filter(|r| r.event() == Event::Booted).count(),
            1
        );
        assert_eq!(
            log.0.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=5).collect::<Vec<_>>()
        );
        for o in 0..2 {
            let n = |ev| {
                log.0
                    .iter()
                    .filter(|r| r.event() == ev && r.order() == Some(OrderId::new(0, o)))
                    .count()
            };
            assert_eq!(
                (n(Event::Claimed), n(Event::Committed), n(Event::Completed)),
                (1, 0, 1)
            );
        }
    }

    #[test]
    fn a_committed_hold_is_run_again_as_a_retry_then_given_up() {
        let mut log = Log(Vec::new());
        let (mut w, mut cur) = boot_in(&mut log, 1, "i1", Settings::default());
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 1)])), 0);
        log.append(&a);
        let a = log.feed(&mut w, &mut cur);
        log.append(&a);
        log.feed(&mut w, &mut cur);
        // Killed while running: each new incarnation retries, until the limit.
        for (n, inc) in ["i2", "i3"].iter().enumerate() {
            let (mut w, a) = Worker::start(1.into(), (*inc).into(), Settings::default(), 0);
            log.append(&a);
            let mut cur = 0;
            let a = log.feed(&mut w, &mut cur);
            let attempt = n as u32 + 2;
            assert!(commits(&a, attempt), "{a:?}");
            log.append(&a);
            let a = log.feed(&mut w, &mut cur);
            assert_eq!(a, run((0, 0), attempt, true));
        }
        let (mut w, a) = Worker::start(1.into(), "i4".into(), Settings::default(), 0);
        log.append(&a);
        let mut cur = 0;
        let a = log.feed(&mut w, &mut cur);
        assert!(matches!(&a[..], [Action::Append(r)]
            if r.event() == Event::Completed && r.outcome().unwrap().status == Status::GaveUp));
    }

    fn leased(me: u32, inc: &str, now: u64) -> (Worker, Vec<Action>) {
        let settings = Settings {
            lease_ms: Some(1000),
            ..Settings::default()
        };
        Worker::start(me.into(), inc.into(), settings, now)
    }

    /// A leased incarnation whose `booted` is appended and that has read
    /// the log to its end; returns it with its read cursor.
    fn booted(log: &mut Log, me: u32, inc: &str, now: u64) -> (Worker, usize) {
        let (mut w, a) = leased(me, inc, now);
        log.append(&a);
        let mut cursor = 0;
        log.feed(&mut w, &mut cursor);
        (w, cursor)
    }

    /// Instance `me`'s incarnation `inc` with `settings`, booted on `log`
    /// and caught up: the worker and its cursor.
    fn boot_in(log: &mut Log, me: u32, inc: &str, settings: Settings) -> (Worker, usize) {
        let (mut w, a) = Worker::start(me.into(), inc.into(), settings, 0);
        log.append(&a);
        let mut cursor = 0;
        log.feed(&mut w, &mut cursor);
        (w, cursor)
    }

    /// Instance 1 claims and commits order 0:0 at time 0, then goes silent.
    fn silent_holder(log: &mut Log) -> (Worker, usize) {
        let (mut w1, mut c1) = booted(log, 1, "one", 0);
        let a = w1.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), 0);
        log.append(&a);
        // With leases, the guard's deadline (R53) comes with the claim read
        // back (its time plus two thirds of the lease), before the run: the
        // claim met no rival, so it is the commit (R34).
        assert!(matches!(
            &log.feed(&mut w1, &mut c1)[..],
            [Action::Guard(666), Action::Run { .. }]
        ));
        assert_eq!(w1.safe_until, 666);
        (w1, c1)
    }

    /// A snapshot's holds are heard when it is loaded, at the time given
    /// (docs/protocol.md R16, "Handed view"): a standby loads its handed
    /// view at `go`, long after it started, and must not count a hold's
    /// age from its own start, or it would revoke a live lease early.
    #[test]
    fn a_view_loaded_late_counts_the_ages_of_its_holds_from_the_load() {
        let mut log = Log(Vec::new());
        let (w1, c1) = silent_holder(&mut log);
        let snap = w1.view.snapshot();
        assert_eq!(snap.at, Position::new(c1 as u64));
        // Started at 0, standing by; loads the view at 5000.
        let fencing = Settings {
            lease_ms: Some(1000),
            fence: true,
            ..Settings::default()
        };
        let (mut w2, a) = Worker::start(2.into(), "two".into(), fencing, 0);
        assert_eq!(a, vec![]);
        assert!(w2.load(&snap, 5000));
        assert_eq!(w2.heard.get(&InstanceNo::new(1)).map(|h| h.1), Some(5000));
        let a = w2.handle(Input::Fenced, 5000);
        assert!(booted_in(&a), "{a:?}");
        log.append(&a);
        let mut c2 = c1;
        assert_eq!(log.feed(&mut w2, &mut c2), vec![Action::FindOrder]);
        // Half a lease after the load: the hold is not expired for it.
        let a = w2.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), 5500);
        assert!(
            !a.iter()
                .any(|a| matches!(a, Action::Append(r) if r.event() == Event::Revoked)),
            "revoked a hold heard 500 ms before: {a:?}"
        );
    }

    #[test]
    fn an_expired_hold_is_taken_over_and_its_holder_stops() {
        let mut log = Log(Vec::new());
        let (mut w1, mut c1) = silent_holder(&mut log);
        let (mut w2, a) = leased(2, "two", 5000);
        log.append(&a);
        let mut c2 = 0;
        let _ = w2.handle(Input::CaughtUp, 5000);
        let a = log.feed(&mut w2, &mut c2);
        assert_eq!(a, vec![Action::FindOrder]);
        // Idle with an expired hold in sight: revoke it; read back, claim
        // its order in the hold's place.
        let a = w2.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), 7000);
        assert!(
            matches!(&a[..], [Action::Append(r), Action::WakeAt(_)]
            if r.event() == Event::Revoked && r.instance.get() == 1 && r.rank() == Some(0) && r.attempt().get() == 2),
            "{a:?}"
        );
        log.append(&a);
        let a = log.feed(&mut w2, &mut c2);
        assert!(
            matches!(&a[..], [Action::Append(c)]
            if c.event() == Event::Claimed && c.order() == Some(OrderId::new(0, 0)) && c.attempt().get() == 2
               && c.rank() == Some(0) && c.takeover_of().len() == 1),
            "{a:?}"
        );
        log.append(&a);
        let a = log.feed(&mut w2, &mut c2);
        assert!(
            matches!(&a[..], [Action::Guard(7666), Action::Append(r)] if r.event() == Event::Committed),
            "{a:?}"
        );
        log.append(&a);
        let a = log.feed(&mut w2, &mut c2);
        assert_eq!(a, run((0, 0), 2, true));
        assert_eq!(w2.safe_until, 7000 + 666);
        // The old holder, cut off until now, reads the revocation and stops.
        assert_eq!(
            log.feed(&mut w1, &mut c1),
            vec![Action::Exit(Exit::Revoked)]
        );
    }

    /// R15: the revoked holder's job ran to its end, and its completion
    /// (void) landed after the taker's claim, before the taker's commit
    /// came back: the taker records that outcome validly instead of
    /// running the order again.
    #[test]
    fn a_taker_whose_commit_follows_a_void_completion_does_not_run_it_again() {
        let mut log = Log(Vec::new());
        let (mut w1, _) = silent_holder(&mut log);
        let (mut w2, a) = leased(2, "two", 5000);
        log.append(&a);
        let mut c2 = 0;
        let _ = w2.handle(Input::CaughtUp, 5000);
        log.feed(&mut w2, &mut c2);
        let a = w2.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), 7000);
        log.append(&a);
        let a = log.feed(&mut w2, &mut c2);
        log.append(&a);
        let decision = log.feed(&mut w2, &mut c2);
        assert!(commits(&decision, 2), "{decision:?}");
        // The revoked holder, which has not read its revocation, ends its
        // job: its completion lands before the taker's commit.
        let done = w1.handle(Input::JobDone(Outcome::not_run(Status::Ok, "ran")), 7100);
        assert!(
            matches!(&done[..], [Action::Append(r)] if r.event() == Event::Completed),
            "{done:?}"
        );
        log.append(&done);
        log.append(&decision);
        let a = log.feed(&mut w2, &mut c2);
        let outcome = completed_in(&a).unwrap_or_else(|| panic!("completed, not run: {a:?}"));
        assert_eq!(outcome.status, Status::Ok);
        assert!(
            outcome
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("not run again")),
            "{outcome:?}"
        );
        // That completion is the order's valid one: it closes the hold.
        log.append(&a);
        log.feed(&mut w2, &mut c2);
        assert!(w2.view.hold(2.into()).is_none());
        let c = w2.view.contest(OrderId::new(0, 0)).expect("its contest");
        assert!(c.completed_at.is_some());
    }

    #[test]
    fn a_reader_whose_clock_runs_ahead_revokes_no_live_holder() {
        // R36: the age counts on the reader's clock from when it read the
        // hold's newest record, whatever the writer's `ts` says.
        let mut log = Log(Vec::new());
        let (_w1, _) = silent_holder(&mut log);
        let far = 3_600_000; // an hour ahead of instance 1's clock
        let (mut w2, _) = booted(&mut log, 2, "two", far);
        // No order waits but the held one: idle, it looks for expired holds.
        let orders = || Input::Orders(BTreeMap::from([(0.into(), 1)]));
        let a = w2.handle_peeked(orders(), far + 1000);
        assert!(
            !a.iter()
                .any(|a| matches!(a, Action::Append(r) if r.event() == Event::Revoked)),
            "a lease read a second ago is not expired: {a:?}"
        );
        let a = w2.handle_peeked(orders(), far + 1001);
        assert!(
            matches!(&a[..], [Action::Append(r), Action::WakeAt(_)] if r.event() == Event::Revoked),
            "{a:?}"
        );
    }

    #[test]
    fn ages_from_the_writers_ts_revoke_a_live_holder() {
        // The broken rule (Flaw::AgeFromTs): an instance whose clock runs
        // ahead revokes at once a hold it has just read.
        let mut log = Log(Vec::new());
        let (_w1, _) = silent_holder(&mut log);
        let settings = Settings {
            lease_ms: Some(1000),
            flaw: Some(Flaw::AgeFromTs),
            ..Settings::default()
        };
        let far = 3_600_000;
        let (mut w2, a) = Worker::start(2.into(), "two".into(), settings, far);
        log.append(&a);
        let mut c2 = 0;
        log.feed(&mut w2, &mut c2);
        let a = w2.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), far);
        assert!(
            matches!(&a[..], [Action::Append(r)] if r.event() == Event::Revoked),
            "{a:?}"
        );
    }

    #[test]
    fn the_guard_counts_from_when_a_record_was_made_not_read() {
        // R53: a renewal read back late gives a deadline counted from when
        // it was made, so a hold in jeopardy is not thawed by a renewal
        // that was already old when read back (the holder was cut off).
        let mut log = Log(Vec::new());
        let (mut w1, mut c1) = silent_holder(&mut log);
        let renew = w1.handle(Input::Tick, 400);
        assert!(
            matches!(&renew[..], [Action::Append(r), Action::WakeAt(733)] if r.event() == Event::Lease && r.ts == 400)
        );
        log.append(&renew);
        // Read back 10 s later: the deadline is 400 + 666, long past.
        let mut out = Vec::new();
        while c1 < log.0.len() {
            let rec = log.0[c1].clone();
            out.extend(w1.handle(Input::Record(Position::new(c1 as u64), rec), 10_400));
            c1 += 1;
        }
        assert_eq!(out, vec![Action::Guard(400 + 666)]);
        // Without leases there is no guard at all.
        let mut log = Log(Vec::new());
        let (mut w, mut cur) = boot_in(&mut log, 1, "i1", Settings::default());
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 1)])), 0);
        log.append(&a);
        let a = log.feed(&mut w, &mut cur);
        log.append(&a);
        let a = log.feed(&mut w, &mut cur);
        assert!(!a.iter().any(|a| matches!(a, Action::Guard(_))), "{a:?}");
    }

    #[test]
    fn a_retry_that_lands_after_a_takeover_takes_new_work() {
        let mut log = Log(Vec::new());
        let (_dead, _) = silent_holder(&mut log);
        // Instance 1 restarts and appends its retry; before it lands,
        // instance 2 revokes the old incarnation's expired hold.
        let (mut w1, a) = leased(1, "one-again", 5000);
        log.append(&a);
        let mut c1 = 0;
        let retry = log.feed(&mut w1, &mut c1);
        assert!(commits(&retry, 2));
        let (mut w2, _) = booted(&mut log, 2, "two", 5000);
        let takeover = w2.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), 7000);
        log.append(&takeover);
        log.append(&retry);
        assert_eq!(
            log.feed(&mut w1, &mut c1),
            vec![Action::FindOrder],
            "not fenced: it takes new work"
        );
        assert_eq!(w1.phase, Phase::Choose);
    }

    #[test]
    fn a_revocation_after_a_renewal_is_void() {
        let mut log = Log(Vec::new());
        let (mut w1, mut c1) = silent_holder(&mut log);
        let (mut w2, mut c2) = booted(&mut log, 2, "two", 5000);
        let a = w2.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), 7000);
        // Instance 1 renews its lease before the revocation lands.
        let renew = w1.handle(Input::Tick, 7000);
        assert!(
            matches!(&renew[..], [Action::Append(r), Action::WakeAt(7333)] if r.event() == Event::Lease)
        );
        log.append(&renew);
        log.append(&a);
        let a = log.feed(&mut w2, &mut c2);
        assert_eq!(
            a,
            vec![Action::FindOrder],
            "a void revocation: no takeover claim, other work"
        );
        assert!(w2.view.hold(2.into()).is_none());
        assert_eq!(
            log.feed(&mut w1, &mut c1),
            vec![Action::Guard(7000 + 666)],
            "instance 1 keeps its order, safe for 2/3 of a lease from its renewal"
        );
        assert!(w2
            .view
            .hold(1.into())
            .is_some_and(|h| h.committed.is_some()));
    }

    #[test]
    fn a_revoker_that_dies_before_its_takeover_claim_claims_at_its_next_boot() {
        let mut log = Log(Vec::new());
        let (_w1, _) = silent_holder(&mut log);
        let (mut w2, _) = booted(&mut log, 2, "two", 5000);
        let a = w2.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 2)])), 7000);
        log.append(&a);
        // Instance 2 dies with only its revocation in the log: it holds the
        // order nonetheless (nobody else may take it but by its lease).
        let (w3, _) = booted(&mut log, 3, "three", 5000);
        assert!(w3
            .view
            .hold(2.into())
            .is_some_and(|h| h.pending && h.order == OrderId::new(0, 0) && h.rank == 0));
        let (mut w2, a) = leased(2, "two-again", 5100);
        log.append(&a);
        let mut c2 = 0;
        let a = log.feed(&mut w2, &mut c2);
        assert!(
            matches!(&a[..], [Action::Append(c)]
            if c.event() == Event::Claimed && c.attempt().get() == 2 && c.rank() == Some(0)),
            "{a:?}"
        );
        log.append(&a);
        let a = log.feed(&mut w2, &mut c2);
        assert!(commits(&a, 2), "{a:?}");
    }

    /// Runs one worker of a fresh incarnation through the claim (its
    /// commit, R34) of the next order, then reports `id`; returns what it
    /// does next.
    fn run_with_id(log: &mut Log, me: u32, inc: &str, id: &str, ends: i64) -> Vec<Action> {
        let (mut w, mut cur) = boot_in(log, me, inc, Settings::default());
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), ends)])), 0);
        log.append(&a);
        assert!(matches!(
            &log.feed(&mut w, &mut cur)[..],
            [Action::Run { .. }]
        ));
        let terms = Terms {
            id: Some(id.into()),
            ..Terms::default()
        };
        let a = w.handle(Input::Terms(terms), 0);
        assert!(matches!(&a[..], [Action::Append(r)] if r.order_id() == Some(id)));
        log.append(&a);
        log.feed(&mut w, &mut cur)
    }

    /// The start of order `p:o`'s job.
    fn start(p: i32, o: i64) -> Vec<Action> {
        vec![Action::Start {
            order: OrderId::new(p, o),
        }]
    }

    #[test]
    fn the_second_order_with_an_id_is_a_duplicate() {
        let mut log = Log(Vec::new());
        let a = run_with_id(&mut log, 1, "one", "backup-1", 2);
        assert_eq!(a, start(0, 0));
        let a = run_with_id(&mut log, 2, "two", "backup-1", 2);
        assert!(
            matches!(&a[..], [Action::Append(r)] if r.event() == Event::Completed
            && r.outcome().is_some_and(|o| o.status == Status::Duplicate
                && o.reason.as_deref().is_some_and(|x| x.contains("0:0")))),
            "{a:?}"
        );
        let mut log2 = Log(Vec::new());
        let a = run_with_id(&mut log2, 1, "one", "a", 2);
        assert_eq!(a, start(0, 0));
        let a = run_with_id(&mut log2, 2, "two", "b", 2);
        assert_eq!(a, start(0, 1), "another id runs");
    }

    fn deferring(flaw: Option<Flaw>) -> Settings {
        Settings {
            claim_defer_ms: 1000,
            flaw,
            ..Settings::default()
        }
    }

    /// Three idle instances (1, 2, 3 in the idle queue) that have read the
    /// log to its end.
    fn three_idle(log: &mut Log, flaw: Option<Flaw>) -> Vec<(Worker, usize)> {
        let mut ws: Vec<(Worker, usize)> = (1..=3)
            .map(|i| {
                let (w, a) = Worker::start(
                    i.into(),
                    Incarnation::new(format!("i{i}")),
                    deferring(flaw),
                    0,
                );
                log.append(&a);
                (w, 0)
            })
            .collect();
        for (w, c) in &mut ws {
            assert_eq!(log.feed(w, c), vec![Action::FindOrder]);
        }
        ws
    }

    /// Whether `a` is one claim of order `p:o` that passes over `passed`.
    fn claims(a: &[Action], (p, o): (i32, i64), passed: &[u32]) -> bool {
        let passed: Vec<InstanceNo> = passed.iter().copied().map(InstanceNo::new).collect();
        matches!(a, [Action::Append(r)] if r.event() == Event::Claimed
            && r.order() == Some(OrderId::new(p, o))
            && r.passed_over() == passed)
    }

    /// docs/protocol.md R29: the first in line claims at once,
    /// the others defer, and re-evaluate when the log moves.
    #[test]
    fn idle_instances_claim_in_turn() {
        let mut log = Log(Vec::new());
        let mut ws = three_idle(&mut log, None);
        let ends = BTreeMap::from([(0.into(), 2)]);
        assert_eq!(
            ws[1].0.handle_peeked(Input::Orders(ends.clone()), 0),
            vec![Action::WakeAt(1000)]
        );
        assert_eq!(
            ws[2].0.handle_peeked(Input::Orders(ends.clone()), 0),
            vec![Action::WakeAt(2000)],
            "two ahead"
        );
        assert_eq!(ws[1].0.deferring(), Some(1000));
        let a = ws[0].0.handle_peeked(Input::Orders(ends.clone()), 0);
        assert!(claims(&a, (0, 0), &[]), "{a:?}");
        log.append(&a);
        // Instance 2 reads the claim and catches up: the log moved, so it
        // looks at the orders again; it is now first in line for 0:1.
        let (w2, c2) = &mut ws[1];
        assert_eq!(log.feed(w2, c2), vec![Action::FindOrder]);
        let a = w2.handle_peeked(Input::Orders(ends.clone()), 5);
        assert!(claims(&a, (0, 1), &[]), "{a:?}");
        log.append(&a);
        // Instance 3 reads both: nothing waits any more.
        let (w3, c3) = &mut ws[2];
        assert_eq!(log.feed(w3, c3), vec![Action::FindOrder]);
        assert!(w3.handle_peeked(Input::Orders(ends), 6).is_empty());
        assert_eq!(w3.deferring(), None);
        // Idle and looking: an order arriving makes it ask again, once.
        assert!(w3.looking());
        assert_eq!(w3.handle(Input::OrdersMoved, 7), vec![Action::FindOrder]);
        assert!(
            w3.handle(Input::OrdersMoved, 8).is_empty(),
            "one question at a time"
        );
        assert!(w3.handle(Input::CaughtUp, 9).is_empty());
        assert_eq!(
            log.0.iter().filter(|r| r.event() == Event::Claimed).count(),
            2,
            "one claim per order"
        );
    }

    /// A preferred instance that is gone delays the order by the deferral,
    /// once: the claim that passes it over takes it out of the queue.
    #[test]
    fn a_dead_first_in_line_only_delays() {
        let mut log = Log(Vec::new());
        let mut ws = three_idle(&mut log, None);
        let ends = BTreeMap::from([(0.into(), 2)]);
        let (w2, c2) = &mut ws[1];
        assert_eq!(
            w2.handle_peeked(Input::Orders(ends.clone()), 0),
            vec![Action::WakeAt(1000)]
        );
        assert!(w2.handle(Input::Tick, 999).is_empty());
        assert_eq!(w2.handle(Input::Tick, 1000), vec![Action::FindOrder]);
        let a = w2.handle_peeked(Input::Orders(ends.clone()), 1000);
        assert!(claims(&a, (0, 0), &[1]), "{a:?}");
        log.append(&a);
        assert!(log
            .feed(w2, c2)
            .iter()
            .any(|a| matches!(a, Action::Run { .. })));
        // Instance 3 had seen 0:0 at 0 (two ahead: until 2000); once 2's
        // claim is read, 1 is passed over and 2 holds: 0:1 is its at once.
        let (w3, c3) = &mut ws[2];
        assert_eq!(
            w3.handle_peeked(Input::Orders(ends.clone()), 0),
            vec![Action::WakeAt(2000)]
        );
        log.feed(w3, c3);
        assert_eq!(w3.view.idle_queue(), vec![3.into()]);
        let a = w3.handle_peeked(Input::Orders(ends), 1001);
        assert!(claims(&a, (0, 1), &[]), "{a:?}");
    }

    /// Of the orders an instance may claim, the one it has seen waiting
    /// longest: a busy partition it is first in line for does not keep an
    /// order whose first in line is gone waiting.
    #[test]
    fn an_order_past_its_deadline_goes_before_one_first_in_line() {
        let mut log = Log(Vec::new());
        let mut ws = three_idle(&mut log, None);
        let w2 = &mut ws[1].0;
        // Only 0:0 waits; 1 is first in its line, 2 behind it.
        assert_eq!(
            w2.handle_peeked(
                Input::Orders(BTreeMap::from([(0.into(), 1), (1.into(), 0)])),
                0
            ),
            vec![Action::WakeAt(1000)]
        );
        // 1:0 arrives, and 2 is first in its line; but 0:0 has waited its turn.
        let a = w2.handle_peeked(
            Input::Orders(BTreeMap::from([(0.into(), 1), (1.into(), 1)])),
            1500,
        );
        assert!(claims(&a, (0, 0), &[1]), "{a:?}");
        // Before the deadline, its own turn comes first.
        let w3 = &mut ws[2].0;
        assert_eq!(
            w3.handle_peeked(
                Input::Orders(BTreeMap::from([(0.into(), 1), (1.into(), 0)])),
                0
            ),
            vec![Action::WakeAt(2000)]
        );
        let a = w3.handle_peeked(
            Input::Orders(BTreeMap::from([
                (0.into(), 1),
                (1.into(), 1),
                (2.into(), 1),
            ])),
            10,
        );
        assert!(claims(&a, (2, 0), &[]), "{a:?}");
    }

    #[test]
    fn defer_forever_never_claims_out_of_turn() {
        let mut log = Log(Vec::new());
        let mut ws = three_idle(&mut log, Some(Flaw::DeferForever));
        let ends = BTreeMap::from([(0.into(), 1)]);
        let w2 = &mut ws[1].0;
        assert!(w2.handle_peeked(Input::Orders(ends.clone()), 0).is_empty());
        assert!(w2.handle(Input::Tick, 1_000_000).is_empty());
        assert!(w2.handle_peeked(Input::Orders(ends), 1_000_000).is_empty());
    }

    fn settling(ms: u64) -> Settings {
        Settings {
            settle_ms: ms,
            ..Settings::default()
        }
    }

    /// Instance 1's incarnation "new", started at 1,000 ms with a settle
    /// of 15,000 ms, whose host saw `clean` exit cleanly.
    fn successor_of(clean: Option<&str>) -> (Worker, Vec<Action>) {
        let clean = clean.map(Incarnation::from);
        Worker::start_after(1.into(), "new".into(), settling(15_000), 1_000, clean)
    }

    fn booted_in(a: &[Action]) -> bool {
        matches!(a, [Action::Append(r)] if r.event() == Event::Booted && r.seq == 1)
    }

    /// docs/protocol.md R16, R18: without a clean predecessor, nothing is
    /// appended before the wait is over, whatever is read meanwhile.
    #[test]
    fn an_unknown_predecessor_is_waited_out() {
        let mut log = Log(Vec::new());
        let (w0, a) = Worker::start(1.into(), "old".into(), Settings::default(), 0);
        log.append(&a);
        let (mut w, a) = successor_of(None);
        assert_eq!(
            w.phase,
            Phase::Settle {
                clean: None,
                until: 16_000
            }
        );
        assert_eq!(a, vec![Action::WakeAt(16_000)]);
        let mut cur = 0;
        assert_eq!(
            log.feed(&mut w, &mut cur),
            vec![],
            "caught up: still settling"
        );
        assert_eq!(
            w.view.incarnation(1.into()),
            Some(&w0.incarnation),
            "the old booted is read, not a fence"
        );
        assert_eq!(w.handle(Input::Tick, 15_999), vec![]);
        let a = w.handle(Input::Tick, 16_000);
        assert!(booted_in(&a), "{a:?}");
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::FindOrder]);
    }

    /// A predecessor that exited with every append acknowledged, and that
    /// the log confirms is still the current incarnation: boot at once.
    #[test]
    fn a_confirmed_clean_predecessor_is_not_waited_for() {
        let mut log = Log(Vec::new());
        let (_, a) = Worker::start(1.into(), "old".into(), Settings::default(), 0);
        log.append(&a);
        let (mut w, a) = successor_of(Some("old"));
        assert_eq!(a, vec![], "nothing appended before the log is read");
        let mut cur = 0;
        let a = log.feed(&mut w, &mut cur);
        assert!(booted_in(&a), "{a:?}");
        assert!(matches!(&a[..], [Action::Append(r)] if r.ts == 1_000));
    }

    /// A marker the log does not confirm (another process of the number
    /// booted since, e.g. on another host) is no better than none.
    #[test]
    fn a_stale_clean_marker_falls_back_to_the_wait() {
        let mut log = Log(Vec::new());
        for inc in ["old", "elsewhere"] {
            let (_, a) = Worker::start(1.into(), inc.into(), Settings::default(), 0);
            log.append(&a);
        }
        let (mut w, _) = successor_of(Some("old"));
        let mut cur = 0;
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::WakeAt(16_000)]);
        assert_eq!(
            w.phase,
            Phase::Settle {
                clean: None,
                until: 16_000
            }
        );
        assert_eq!(
            w.handle(Input::CaughtUp, 2_000),
            vec![],
            "caught up again: still waiting"
        );
        assert!(booted_in(&w.handle(Input::Tick, 16_000)));
    }

    /// docs/protocol.md R16: with the fence, nothing is appended before
    /// the shell says the fence completed, whatever else happens; then
    /// `booted` at once (no wait, no marker needed).
    #[test]
    fn the_fence_comes_before_booted() {
        let fencing = Settings {
            fence: true,
            settle_ms: 15_000,
            ..Settings::default()
        };
        let (mut w, first) = Worker::start_after(
            1.into(),
            "new".into(),
            fencing.clone(),
            1_000,
            Some("old".into()),
        );
        assert_eq!(first, vec![], "nothing before the fence, not even a wait");
        assert_eq!(w.phase, Phase::Fence);
        let mut log = Log(Vec::new());
        let (_, a) = Worker::start(1.into(), "old".into(), Settings::default(), 0);
        log.append(&a);
        let mut cur = 0;
        assert_eq!(log.feed(&mut w, &mut cur), vec![], "reads meanwhile");
        assert_eq!(w.handle(Input::CaughtUp, 2_000), vec![]);
        assert_eq!(w.handle(Input::Tick, 100_000), vec![], "no deadline");
        assert!(booted_in(&w.handle(Input::Fenced, 100_001)));
        assert_eq!(w.phase, Phase::Boot { seen: false });
        assert_eq!(w.handle(Input::Fenced, 100_002), vec![], "fenced once");
        // The broken rule the model check catches.
        let flawed = Settings {
            flaw: Some(Flaw::BootBeforeFence),
            ..fencing
        };
        let (_, first) = Worker::start(1.into(), "x".into(), flawed, 0);
        assert!(booted_in(&first));
    }

    /// Instance 1's incarnation "p", fencing, told its heirs (`heirs`, the
    /// last counts), boots on `log`, claims order 0:0 and runs it; what it
    /// does at the job's end (not appended).
    fn last_order_with_heirs(log: &mut Log, settings: &Settings, heirs: &[&str]) -> Vec<Action> {
        last_order_of(log, settings, heirs).1
    }

    /// [`last_order_with_heirs`], and the process that ran it.
    fn last_order_of(log: &mut Log, settings: &Settings, heirs: &[&str]) -> (Worker, Vec<Action>) {
        let (mut w, a) = Worker::start(1.into(), "p".into(), settings.clone(), 0);
        assert_eq!(a, vec![]);
        log.append(&w.handle(Input::Fenced, 0));
        let mut cur = 0;
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::FindOrder]);
        for h in heirs {
            assert_eq!(w.handle(Input::Heir((*h).into()), 0), vec![]);
        }
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(0.into(), 1)])), 0);
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), run((0, 0), 1, false));
        let a = w.handle(Input::JobDone(Outcome::not_run(Status::Ok, "")), 7);
        (w, a)
    }
    /// docs/protocol.md R16, "Handed boot": told its heir, a process's
    /// last completion carries the heir's `booted` (its first record, seq
    /// one) after it, in one transaction; the heir, let go with `Handed`,
    /// appends no `booted` of its own, boots on that one (read before or
    /// after it is let go), and numbers its next record 2.

    #[test]
    fn the_last_completion_hands_the_heir_its_booted() {
        let fencing = Settings {
            fence: true,
            ..Settings::default()
        };
        let mut log = Log(Vec::new());
        // Not its own heir; the newest named counts.
        let a = last_order_with_heirs(&mut log, &fencing, &["p", "old", "h"]);
        let [Action::AppendAll(recs)] = &a[..] else {
            panic!("one transaction: {a:?}");
        };
        let [done, booted] = &recs[..] else {
            panic!("{recs:?}");
        };
        assert!(done.event() == Event::Completed && done.exits());
        assert_eq!(done.incarnation, Incarnation::from("p"));
        assert_eq!(booted.event(), Event::Booted);
        assert_eq!((booted.instance, booted.seq), (1.into(), 1));
        assert_eq!(booted.incarnation, Incarnation::from("h"));
        log.append(&a);
        // The heir, standing by, may read its booted before its `go` or
        // after.
        for read_first in [true, false] {
            let (mut h, first) = Worker::start(1.into(), "h".into(), fencing.clone(), 10);
            assert_eq!(first, vec![]);
            let mut hc = 0;
            let upto = if read_first {
                log.0.len()
            } else {
                log.0.len() - 2
            };
            let mut early = Vec::new();
            while hc < upto {
                early.extend(h.handle(
                    Input::Record(Position::new(hc as u64), log.0[hc].clone()),
                    10,
                ));
                hc += 1;
            }
            assert_eq!(early, vec![], "nothing while standing by");
            let a = h.handle(Input::Handed, 11);
            let a = if read_first {
                a
            } else {
                assert_eq!(a, vec![], "waits for its booted");
                assert_eq!(h.phase, Phase::Boot { seen: false });
                log.feed(&mut h, &mut hc)
            };
            assert_eq!(
                a,
                vec![Action::FindOrder],
                "booted, no booted of its own appended"
            );
            assert_eq!(h.view.incarnation(1.into()), Some(&Incarnation::from("h")));
            assert!(!h.view.instance(1.into()).unwrap().exiting);
            assert_eq!(h.handle(Input::Fenced, 12), vec![], "booted already");
            let next = h.record(Body::Booted);
            assert_eq!(next.seq, 2, "its booted was record 1");
            assert!(next.booted_at.is_some());
        }
        // The broken rule the model check catches: the heir's booted in a
        // transaction of its own, before the completion.
        let flawed = Settings {
            flaw: Some(Flaw::HandBeforeCompletion),
            ..fencing
        };
        let a = last_order_with_heirs(&mut Log(Vec::new()), &flawed, &["h"]);
        assert!(
            matches!(&a[..], [Action::Append(b), Action::Append(c)] if b.event() == Event::Booted && c.event() == Event::Completed),
            "{a:?}"
        );
    }

    /// docs/protocol.md R16, "Handed view": the heir boots from the View
    /// its predecessor handed it, whether that view ends before the
    /// handed `booted` (read on from there) or after it (booted at once),
    /// and keeps where the newest checkpoint lies; a view for another
    /// incarnation, or one offered after a record was read, is refused.
    #[test]
    fn a_heir_boots_from_the_view_its_predecessor_handed_it() {
        let fencing = Settings {
            fence: true,
            checkpoint_every: Some(1000),
            ..Settings::default()
        };
        let mut log = Log(Vec::new());
        let (mut p, a) = last_order_of(&mut log, &fencing, &["h"]);
        log.append(&a);
        // The predecessor reads its `completed` back and is done: the
        // handed `booted` after it is not folded (a finished machine reads
        // nothing more), so its view ends right before it.
        let booted = log.0.len() - 1;
        let mut pc = p.view.end().get() as usize;
        let done = log.feed(&mut p, &mut pc);
        assert_eq!(done, vec![Action::Exit(Exit::Ok)]);
        assert_eq!(p.view.end(), Position::new(booted as u64));
        let v = p.hand_view(&"h".into());
        assert_eq!(v.snapshot.at, Position::new(booted as u64));
        assert_eq!(v.checkpoint, p.view.checkpoint());
        let (mut other, _) = Worker::start(1.into(), "x".into(), fencing.clone(), 10);
        assert!(!other.load_handed(&v, 10), "not its heir");
        let (mut h, _) = Worker::start(1.into(), "h".into(), fencing.clone(), 10);
        assert!(h.load_handed(&v, 10));
        assert_eq!(
            h.view.checkpoint(),
            v.checkpoint,
            "not the snapshot's position"
        );
        assert_eq!(h.handle(Input::Handed, 11), vec![], "waits for its booted");
        assert_eq!(h.phase, Phase::Boot { seen: false });
        let mut hc = booted;
        let a = log.feed(&mut h, &mut hc);
        assert_eq!(a, vec![Action::FindOrder], "booted from the handed view");
        assert_eq!(h.view.incarnation(1.into()), Some(&Incarnation::from("h")));
        assert_eq!(
            h.view.hold(1.into()),
            None,
            "the predecessor's order is done"
        );
        assert_eq!(h.record(Body::Booted).seq, 2, "its booted was record 1");
        let (mut late, _) = Worker::start(1.into(), "h".into(), fencing, 10);
        let mut lc = 0;
        log.feed(&mut late, &mut lc);
        assert!(!late.load_handed(&v, 10), "a record read already");
    }

    /// R16: a heir let go with a plain `go` (its predecessor did not say
    /// `done`) after its handed `booted` landed appends its own anyway: a
    /// second record 1, which the View drops as a copy (R7), and boots on
    /// it.
    #[test]
    fn a_heir_fenced_after_a_handed_booted_boots_on_its_copy() {
        let fencing = Settings {
            fence: true,
            ..Settings::default()
        };
        let mut log = Log(Vec::new());
        let a = last_order_with_heirs(&mut log, &fencing, &["h"]);
        log.append(&a);
        let (mut h, _) = Worker::start(1.into(), "h".into(), fencing, 10);
        let mut hc = 0;
        log.feed(&mut h, &mut hc);
        let a = h.handle(Input::Fenced, 11);
        assert!(booted_in(&a), "{a:?}");
        // Its copy is a pool record for every reader, not a foreign one
        // (a `booted` naming a `booted` is, R3): it read the handed one
        // first.
        for r in log.0.iter().chain(a.iter().filter_map(|a| match a {
            Action::Append(r) => Some(r),
            _ => None,
        })) {
            let key = r.key();
            let decoded = Record::decode(Some(key.as_bytes()), Some(&r.encode()));
            assert!(decoded.is_ok(), "{r:?}: {decoded:?}");
        }
        log.append(&a);
        assert_eq!(log.feed(&mut h, &mut hc), vec![Action::FindOrder]);
        assert_eq!(h.view.incarnation(1.into()), Some(&Incarnation::from("h")));
    }

    /// docs/protocol.md R17: a process started after one that was stopped
    /// while it settled waits for the deadline that one inherited or set,
    /// not for a whole `SETTLE_MS` of its own; never longer than its own.
    #[test]
    fn an_inherited_settle_deadline_is_waited_for_not_started_over() {
        let start = |inherited| {
            Worker::start_settling(
                1.into(),
                "new".into(),
                settling(15_000),
                10_000,
                None,
                inherited,
            )
        };
        let (mut w, first) = start(Some(12_000));
        assert_eq!(first, vec![Action::WakeAt(12_000)]);
        assert_eq!(w.handle(Input::Tick, 11_999), vec![]);
        assert!(booted_in(&w.handle(Input::Tick, 12_000)));
        let (_, first) = start(Some(99_000));
        assert_eq!(first, vec![Action::WakeAt(25_000)], "never past its own");
        let (mut w, first) = start(Some(3_000));
        assert_eq!(first, vec![Action::WakeAt(3_000)], "already over");
        assert!(booted_in(&w.handle(Input::Tick, 10_000)));
    }

    /// The snapshot of a checkpoint may be loaded while settling.
    #[test]
    fn a_settling_machine_loads_a_checkpoint() {
        let (mut w, _) = Worker::start_after(1.into(), "new".into(), settling(1), 0, None);
        let (donor, _) = Worker::start(2.into(), "d".into(), Settings::default(), 0);
        let mut snap = donor.view.snapshot();
        snap.at = Position::new(7);
        assert!(w.load(&snap, 0));
    }

    #[test]
    fn an_older_incarnation_stops_when_a_newer_boots() {
        let mut log = Log(Vec::new());
        let (mut old, mut cur) = boot_in(&mut log, 1, "old", Settings::default());
        let (_new, a) = Worker::start(1.into(), "new".into(), Settings::default(), 0);
        log.append(&a);
        assert_eq!(
            log.feed(&mut old, &mut cur),
            vec![Action::Exit(Exit::Fenced)]
        );
    }

    /// R10: a record of a newer incarnation of our instance whose `booted`
    /// we never read (compaction erased it), known by its `booted_at`,
    /// stops us as that `booted` would; a record naming our own `booted`
    /// or an older one does not.
    #[test]
    fn an_older_incarnation_stops_at_a_newer_ones_record_by_booted_at() {
        let mut log = Log(Vec::new());
        let (mut old, mut cur) = boot_in(&mut log, 1, "old", Settings::default());
        let own = old.view.booted_at(1.into(), &"old".into()).unwrap();
        let mut stale = Record::new(1.into(), Body::Booted, &"older".into(), 0);
        stale.body = Body::Yielded {
            order: OrderId::new(0, 0),
            attempt: Attempt::FIRST,
            reason: None,
        };
        stale.booted_at = Some(own);
        log.0.push(stale.clone());
        assert_eq!(log.feed(&mut old, &mut cur), vec![], "not newer");
        let mut newer = stale;
        newer.incarnation = "new".into();
        newer.booted_at = Some(Position::new(log.0.len() as u64 - 1));
        log.0.push(newer);
        assert_eq!(
            log.feed(&mut old, &mut cur),
            vec![Action::Exit(Exit::Fenced)]
        );
    }

    fn urgent() -> Topic {
        Topic::named("urgent").unwrap()
    }

    /// Deferring instances reading the topics `urgent` then the main one
    /// (docs/protocol.md R57).
    fn prioritized(flaw: Option<Flaw>) -> Settings {
        Settings {
            topics: vec![urgent(), Topic::MAIN],
            ..deferring(flaw)
        }
    }

    /// `n` idle instances (1, …, n in the idle queue) with `settings`, that
    /// have read the log to its end.
    fn idle_with(log: &mut Log, n: u32, settings: Settings) -> Vec<(Worker, usize)> {
        let mut ws: Vec<(Worker, usize)> = (1..=n)
            .map(|i| {
                let (w, a) = Worker::start(
                    i.into(),
                    Incarnation::new(format!("i{i}")),
                    settings.clone(),
                    0,
                );
                log.append(&a);
                (w, 0)
            })
            .collect();
        for (w, c) in &mut ws {
            assert_eq!(log.feed(w, c), vec![Action::FindOrder]);
        }
        ws
    }

    /// Whether `a` is one claim of `order`.
    fn claims_order(a: &[Action], order: OrderId) -> bool {
        matches!(a, [Action::Append(r)] if r.event() == Event::Claimed && r.order() == Some(order))
    }

    /// R57, R29: an idle instance whose View shows an urgent and a main
    /// order waiting, both its turn, claims the urgent one; the main
    /// topic's order, at the same partition and offset, is another order,
    /// still waiting at the main topic's frontier, and is claimed next.
    #[test]
    fn an_idle_instance_claims_the_urgent_order_first() {
        let u = Lane::new(urgent(), 0);
        let ends = BTreeMap::from([(Lane::from(0), 1), (u, 1)]);
        let mut log = Log(Vec::new());
        let settings = Settings {
            orders_per_process: 2,
            ..prioritized(None)
        };
        let (mut w, mut cur) = boot_in(&mut log, 1, "i1", settings);
        let a = w.handle_peeked(Input::Orders(ends.clone()), 0);
        assert!(claims_order(&a, u.at(0)), "{a:?}");
        let Action::Append(claim) = &a[0] else {
            unreachable!()
        };
        // Its `next` names the urgent lane only (R8, R57).
        assert_eq!(claim.next, BTreeMap::from([(u, 1)]));
        log.append(&a);
        let a = log.feed(&mut w, &mut cur);
        assert_eq!(
            a,
            vec![Action::Run {
                order: u.at(0),
                attempt: Attempt::FIRST,
                retry: false,
            }]
        );
        assert_eq!(w.view.next_offset(u), 1);
        assert_eq!(w.view.next_offset(0.into()), 0, "0:0 is still waiting");
        let a = w.handle(Input::JobDone(Outcome::not_run(Status::Ok, "")), 0);
        log.append(&a);
        assert_eq!(log.feed(&mut w, &mut cur), vec![Action::FindOrder]);
        let a = w.handle_peeked(Input::Orders(ends), 0);
        assert!(claims_order(&a, OrderId::new(0, 0)), "{a:?}");
    }

    /// R28, R29, R57 with more idle instances than urgent orders waiting:
    /// the lines are by topic, so the first instance of the queue is first
    /// in line for the urgent order and the second for the main one, and
    /// both claim at once; the third defers. An instance whose deferral
    /// for the urgent order ran out while it is first in line for the main
    /// one takes the urgent one (of those it may claim, the first topic).
    /// With `Flaw::IgnorePriority` the first instance takes the main order.
    #[test]
    fn surplus_instances_take_main_orders_at_once() {
        let u = Lane::new(urgent(), 0);
        let ends = BTreeMap::from([(Lane::from(0), 1), (u, 1)]);
        let mut log = Log(Vec::new());
        let mut ws = idle_with(&mut log, 3, prioritized(None));
        let a = ws[0].0.handle_peeked(Input::Orders(ends.clone()), 0);
        assert!(claims_order(&a, u.at(0)), "{a:?}");
        let a = ws[1].0.handle_peeked(Input::Orders(ends.clone()), 0);
        assert!(claims_order(&a, OrderId::new(0, 0)), "{a:?}");
        assert_eq!(
            ws[2].0.handle_peeked(Input::Orders(ends.clone()), 0),
            vec![Action::WakeAt(1000)],
            "3 is behind 1 for urgent:0:0 and behind 2 for 0:0"
        );
        // Instance 2 saw both waiting at 0 and, at 1500, may take either:
        // the urgent one, passing over 1.
        let mut log = Log(Vec::new());
        let mut ws = idle_with(&mut log, 3, prioritized(None));
        let w2 = &mut ws[1].0;
        let only_urgent = BTreeMap::from([(Lane::from(0), 0), (u, 1)]);
        assert_eq!(
            w2.handle_peeked(Input::Orders(only_urgent), 0),
            vec![Action::WakeAt(1000)]
        );
        let a = w2.handle_peeked(Input::Orders(ends.clone()), 1500);
        assert!(claims_order(&a, u.at(0)), "the urgent one: {a:?}");
        let Action::Append(r) = &a[0] else {
            unreachable!()
        };
        assert_eq!(r.passed_over(), vec![InstanceNo::new(1)]);
        // The broken rule: the first of the queue takes the main order.
        let mut log = Log(Vec::new());
        let mut ws = idle_with(&mut log, 3, prioritized(Some(Flaw::IgnorePriority)));
        let a = ws[0].0.handle_peeked(Input::Orders(ends), 0);
        assert!(claims_order(&a, OrderId::new(0, 0)), "{a:?}");
    }

    /// R57: orders of a topic that is not listed are not claimed.
    #[test]
    fn unlisted_topics_are_not_claimed() {
        let other = Lane::new(Topic::named("other").unwrap(), 0);
        let mut log = Log(Vec::new());
        let (mut w, _) = boot_in(&mut log, 1, "i1", prioritized(None));
        let a = w.handle_peeked(Input::Orders(BTreeMap::from([(other, 5)])), 0);
        assert!(a.is_empty(), "{a:?}");
        let a = w.handle_peeked(
            Input::Orders(BTreeMap::from([(other, 5), (0.into(), 1)])),
            0,
        );
        assert!(claims_order(&a, OrderId::new(0, 0)), "{a:?}");
    }

    /// `Flaw::FrontierPerPartition`, the broken rule the checks catch: a
    /// claim of `urgent:0:0` raises the main topic's frontier too.
    #[test]
    fn a_frontier_per_partition_skips_the_main_order() {
        let u = Lane::new(urgent(), 0);
        let ends = BTreeMap::from([(Lane::from(0), 1), (u, 1)]);
        let mut log = Log(Vec::new());
        let settings = prioritized(Some(Flaw::FrontierPerPartition));
        let (mut w, _) = boot_in(&mut log, 1, "i1", settings);
        let a = w.handle_peeked(Input::Orders(ends), 0);
        let [Action::Append(claim)] = &a[..] else {
            panic!("{a:?}")
        };
        assert_eq!(claim.order(), Some(u.at(0)));
        assert_eq!(claim.next, BTreeMap::from([(Lane::from(0), 1), (u, 1)]));
    }
}
