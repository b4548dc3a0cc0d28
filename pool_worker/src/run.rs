//! Worker mode: one process, one incarnation, at most one order (or
//! `ORDERS_PER_PROCESS` orders), then exit.
//!
//! This is the shell around [`crate::worker::Worker`]. It owns the I/O and
//! the clock and nothing else: every decision is the machine's. The loop is
//!
//! 1. carry out the machine's actions in order — append a record (waiting
//!    for the broker's acknowledgment), report the orders' end offsets, start
//!    a job, exit;
//! 2. wait for the next event — a claims record (or "caught up"), a job's
//!    end, a new order while idle, a signal — and feed it to the machine.
//!
//! An idle worker blocks in the brokers' long polls on the claims and orders
//! topics; it burns no CPU while no order is waiting. SIGTERM or SIGINT
//! kills a running job's process group and exits 143: the order stays
//! committed, and the next incarnation runs it again as a retry.

mod appender; // the records and results going out, in order
mod job_runner; // the claimed order's way from its message to its outcome

use appender::{Appender, SIGNAL_ABORT, SIGNAL_FLUSH};
use job_runner::{fetch_timeout, job_base, job_context, log_order, Job};

use crate::clock::{new_incarnation, now_ms};
use crate::config::{Config, Fence};
use crate::job::JobContext;
use crate::kafka::{ClaimEvent, Kafka, OpenError, Stopped};
use crate::orders;
use crate::process_exit::{Exit, Signals};
use crate::record::{Event, Incarnation, InstanceNo, OrderId, Outcome, Position, Status};
use crate::schedule::{Firing, Idle, Scheduler};
use crate::supervise::{SupervisorLine, Went};
use crate::worker::{Action, Input, Phase, Settings, Worker};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::watch;

/// How long boot waits for unreachable brokers before giving up (the
/// supervisor then starts the process again).
const BROKER_PATIENCE: Duration = Duration::from_secs(120);

/// While idle, the orders' end offsets are also re-read this often, in case
/// a wake-up was missed.
const IDLE_RECHECK: Duration = Duration::from_secs(5);

/// While its job runs, how often a quiet worker looks at the claims topic
/// ([`crate::kafka::Kafka::hush`]): the most an operator's cancel of its
/// order waits beyond its own fetch. Longer than a short job (`sleep 0.1`
/// looks never), short beside a person's patience.
pub(crate) const HUSH_PEEK: Duration = Duration::from_millis(250);

/// How recently the orders' ends must have been asked for
/// [`Shell::find_order`] to tell them to the machine without asking again
/// when it is not idle yet (a process's first look for an order, or one
/// after a hold's end): a boot's standby asks them with the claims topic's
/// end, and again for the first record naming a new order it reads at
/// `go`, a few milliseconds before its `booted` is read back and it looks
/// (issue 35: a ListOffsets request per order). About one idle fetch's wait
/// ([`crate::kafka::client_config::CLAIMS_FETCH_WAIT_MS`]), so that an
/// order this misses is one the orders watch, which then starts from the
/// frontier, reads at once; ends told late are lower than the brokers',
/// never higher.
const ENDS_RECENT: Duration = Duration::from_millis(100);

/// Whether [`Shell::find_order`] may tell the machine the orders' ends it
/// asked at `asked` instead of asking again: only while idle (the orders
/// watch is reading the orders partitions from the frontier, and its
/// wake-up raises them to the orders it read), and for less than
/// [`IDLE_RECHECK`].
fn reuse_ends(asked: std::time::Instant, idle: bool, now: std::time::Instant) -> bool {
    idle && now.saturating_duration_since(asked) < IDLE_RECHECK
}

/// Runs one worker process to its end; returns the exit status.
pub async fn run(mut cfg: Config) -> anyhow::Result<Exit> {
    let mut signals = Signals::new()?;
    // A standby prepares only where the broker fences (R16): settling
    // (R17) counts from this process's start and must not begin before its
    // predecessor has exited, so here it waits for `go` first and then
    // starts as any process does. `supervise` starts no standby then.
    if cfg.standby && cfg.fence == Fence::Settle {
        let mut lines = SupervisorLines::stdin();
        let went = tokio::select! {
            went = lines.go(|| {}) => went,
            code = signals.recv() => return Ok(stopped_early(&cfg, code)),
        };
        if went.is_none() {
            tracing::info!(
                instance = cfg.instance,
                "standby dismissed (its supervisor is gone or stops): exiting"
            );
            return Ok(Exit::Ok);
        }
        cfg.standby = false;
    }
    // Before anything else: no job may read this process's memory or
    // environment, and no process a job leaves behind escapes it.
    if let Err(e) = crate::isolate::harden_worker() {
        tracing::warn!("{e}");
    }
    let mut job_base = job_base(&cfg)?;
    // R53: the machine's deadlines for the running job's guard, on
    // CLOCK_BOOTTIME (pool_worker/src/guard.rs).
    let (guard, deadlines) = watch::channel(None);
    job_base.guard = Some(crate::guard::GuardFeed::worker(deadlines));
    // A stop asked while the brokers cannot be reached (connect retries
    // for BROKER_PATIENCE) is heeded at once: nothing is appended or held
    // yet.
    let connected = tokio::select! {
        r = connect(&cfg) => r?,
        code = signals.recv() => return Ok(stopped_early(&cfg, code)),
    };
    let Some(kafka) = connected else {
        return Ok(Exit::Config);
    };
    Shell::boot(cfg, kafka, job_base, signals, guard)
        .await?
        .run()
        .await
}

/// How long a standby that reads nothing before `go` tries to learn the
/// orders' ends while it waits (R16, "Handed view").
const STANDBY_ENDS_PATIENCE: Duration = Duration::from_secs(5);

/// Starts reading the claims topic (and the orders after it): from the
/// View `handed` by the predecessor (R16, "Handed view") if it names this
/// process, else from the newest checkpoint near the end of the log, else
/// from its beginning.
async fn start_reading(
    kafka: &'static Kafka,
    w: &mut Worker,
    handed: Option<crate::checkpoint::HandedView>,
) -> anyhow::Result<()> {
    let me = w.me.get();
    let from = match handed {
        Some(v) if w.load_handed(&v, now_ms()) => {
            crate::account::mark_with("view_taken", || v.snapshot.at.to_string());
            tracing::info!(
                instance = me,
                at = v.snapshot.at.get(),
                "booting from the view the previous process handed over"
            );
            v.snapshot.at.get()
        }
        _ => match kafka.find_checkpoint().await {
            Some(snap) if w.load(&snap, now_ms()) => snap.at.get(),
            _ => 0,
        },
    };
    // `seek=false`: the replay starts among the records the checkpoint
    // search read (pool_worker/src/kafka/claims_reader.rs, `Kept`).
    let seek = kafka.read_claims_from(from).await?;
    crate::account::mark("replay");
    tracing::info!(instance = me, incarnation = %w.incarnation, pid = std::process::id(), from, seek, "booting: replaying the claims topic");
    Ok(())
}

/// A SIGTERM or SIGINT before the process connected: it exits with the
/// signal's status, having appended nothing.
fn stopped_early(cfg: &Config, code: Exit) -> Exit {
    tracing::info!(
        instance = cfg.instance,
        "stopped by a signal before joining the pool: exiting"
    );
    code
}

/// Connects to the brokers and checks the topics; `None` (logged) when the
/// operator must fix them.
async fn connect(cfg: &Config) -> anyhow::Result<Option<&'static Kafka>> {
    // Never dropped (leaked, so that the appender task can hold it):
    // destroying librdkafka's clients takes hundreds of milliseconds
    // (closing connections, joining threads), and the process exits right
    // after `run` returns, with every append and result already
    // acknowledged. The OS reclaims the rest.
    let kafka: &'static Kafka = Box::leak(Box::new(Kafka::connect(&cfg.kafka_setup())?));
    crate::account::mark("clients");
    match kafka.open(BROKER_PATIENCE).await {
        Ok(()) => {
            crate::account::mark("open");
            Ok(Some(kafka))
        }
        // Brokers down for the whole patience: an error like any other
        // (exit 1), restarted by the supervisor.
        Err(e @ (OpenError::Unreachable { .. } | OpenError::Task(_))) => Err(e.into()),
        // A missing or refused topic, a claims topic with several
        // partitions or not compacted is the operator's to fix: exit 2 so
        // that the supervisor does not loop.
        Err(e @ OpenError::Topic(_)) => {
            tracing::error!("pool_worker: {e}");
            Ok(None)
        }
    }
}

/// What a standby's supervisor writes on its standard input
/// (pool_worker/src/supervise.rs, STANDBY and TXN_SLOT).
struct SupervisorLines(tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>);

impl SupervisorLines {
    fn stdin() -> SupervisorLines {
        use tokio::io::AsyncBufReadExt as _;
        SupervisorLines(tokio::io::BufReader::new(tokio::io::stdin()).lines())
    }

    /// The standby's wait for its turn: how the line `go` that lets it go
    /// said its predecessor ended, or `None` at the end of standard input
    /// (the supervisor is gone or dismissed the standby). At the line
    /// `booted` (the instance's current process has booted), `booted` is
    /// called. Other lines are ignored.
    async fn go(&mut self, mut booted: impl FnMut()) -> Option<Went> {
        loop {
            match self.0.next_line().await {
                Ok(Some(line)) => match SupervisorLine::parse(&line) {
                    Some(SupervisorLine::Go(w)) => return Some(w),
                    Some(SupervisorLine::Booted) => booted(),
                    Some(SupervisorLine::Heir(_)) | None => {}
                },
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// After `go`, while the process runs: each heir the supervisor names
    /// (`heir <incarnation>`, the standby it started) goes to `heirs`, until
    /// standard input ends (docs/protocol.md R16, "Handed boot").
    async fn heirs(mut self, heirs: watch::Sender<Option<Incarnation>>) {
        while let Ok(Some(line)) = self.0.next_line().await {
            if let Some(SupervisorLine::Heir(h)) = SupervisorLine::parse(&line) {
                let _ = heirs.send(Some(Incarnation::new(h)));
            }
        }
    }
}

/// The machine's settings, from the configuration.
fn settings(cfg: &Config) -> Settings {
    // `..Settings::default()` fills what only the tests' build has (the
    // `testing` feature's `flaw`, always `None` here).
    #[cfg_attr(not(any(test, feature = "testing")), allow(clippy::needless_update))]
    Settings {
        max_attempts: cfg.max_attempts,
        lease_ms: Some(cfg.lease_ms),
        checkpoint_every: Some(crate::checkpoint::DEFAULT_CHECKPOINT_EVERY),
        orders_per_process: cfg.orders_per_process,
        settle_ms: cfg.settle_ms,
        fence: cfg.fence == Fence::Transactions,
        claim_defer_ms: cfg.claim_defer_ms,
        publish_results: cfg.results_topic.is_some(),
        key_concurrency: cfg.key_concurrency,
        topics: cfg.orders_topics.topics(),
        ..Settings::default()
    }
}

/// What the select loop turns an event into.
#[allow(clippy::large_enum_variant)] // made once per event and matched at once: boxing would allocate for each record
enum Next {
    /// Feed this to the machine.
    Input(Input),
    /// Nothing for the machine: carry out what is queued and wait again.
    Again,
    /// A signal stopped the process with this status.
    Stop(Exit),
}

/// Where the fence's outcome arrives (`Shell::fencing`): `None` for a
/// standby dismissed; else the fence's result and whether the predecessor
/// handed us our `booted` (R16, "Handed boot").
type Fencing = tokio::sync::oneshot::Receiver<Option<(Result<(), Stopped>, bool)>>;

/// The worker loop's state: the machine, the I/O it drives, and what is
/// under way.
struct Shell {
    cfg: Config,
    kafka: &'static Kafka,
    w: Worker,
    job_base: JobContext,
    signals: Signals,
    /// The lease's renewals (every lease/3).
    ticks: tokio::time::Interval,
    /// Where the clean-exit marker lives (`None` with SETTLE_MS=0), and the
    /// incarnation named by the one taken at boot.
    marker: Option<PathBuf>,
    clean: Option<String>,
    /// With `CLAIMS_FENCE=settle`: where this process keeps the deadline
    /// it settles until (removed before its `booted` is appended), and the
    /// deadline it inherited from a predecessor killed while it settled
    /// (docs/protocol.md R17).
    deadline: Option<PathBuf>,
    inherited: Option<u64>,
    /// The fence under way (docs/protocol.md R16): its outcome arrives here,
    /// and whether the predecessor handed us our `booted` (`go handed`).
    /// `None`: a standby dismissed before `go`.
    fencing: Option<Fencing>,
    /// The heir the supervisor names (R16, "Handed boot"), passed to the
    /// machine when it changes.
    heir: watch::Receiver<Option<Incarnation>>,
    /// The heir whose `booted` our last transaction held: said with `done`.
    handed: Option<Incarnation>,
    /// A standby that reads nothing before `go` (R16, "Handed view"):
    /// where its predecessor leaves its View. Taken at `go`.
    view: Option<PathBuf>,
    /// The machine's actions not carried out yet.
    todo: VecDeque<Action>,
    job: Job,
    /// Waiting for a new order (no order waiting, or deferring to others).
    idle: bool,
    /// The orders' end offsets last asked, and when: reused while idle
    /// ([`Shell::find_order`]); forgotten when the orders watch wakes.
    ends_asked: Option<(
        std::time::Instant,
        std::collections::BTreeMap<crate::record::Lane, i64>,
    )>,
    replay: Replay,
    appender: Appender,
    /// When the machine asked to be woken ([`Action::WakeAt`]).
    wake: Option<u64>,
    /// The newest [`Action::Guard`] deadline, on `CLOCK_BOOTTIME`: every job
    /// starts with it, and its guard gets each new one (R53).
    guard: watch::Sender<Option<u64>>,
    /// `SCHEDULE_FILE`'s schedules and the firings this process produced
    /// (src/schedule.rs).
    scheduler: Scheduler,
    /// Since when this process is idle (ms), while [`Shell::idle`].
    idle_since: u64,
    /// When to plan the schedules again (while idle).
    sched_wake: Option<u64>,
    /// Firings produced to the orders topic come back here with the
    /// outcome.
    fired_tx: tokio::sync::mpsc::UnboundedSender<(Firing, Result<OrderId, String>)>,
    fired_rx: tokio::sync::mpsc::UnboundedReceiver<(Firing, Result<OrderId, String>)>,
    /// The `seq` of the newest record this process appended, and of the
    /// newest of its own it read back ([`Shell::hush`]).
    own_appended: u64,
    own_read: u64,
    /// Whether the claims reader was told to go quiet ([`Shell::hush`]), and
    /// when to look next.
    quiet: Option<tokio::time::Instant>,
}

impl Shell {
    /// Takes the clean-exit marker, starts the machine and the claims
    /// reader (from the newest checkpoint near the end, else the start).
    async fn boot(
        cfg: Config,
        kafka: &'static Kafka,
        job_base: JobContext,
        signals: Signals,
        guard: watch::Sender<Option<u64>>,
    ) -> anyhow::Result<Shell> {
        let me = cfg.instance;
        let mut ticks = tokio::time::interval(Duration::from_millis((cfg.lease_ms / 3).max(100)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Settling (pool_worker/src/settle.rs): the marker is taken before anything is
        // appended, so a process that dies from here on leaves none.
        // With SETTLE_MS=0 there is no wait to spare, so no marker either.
        // With the fence (R16) the marker only spares a warning
        // (warn_open_commands).
        let marker = (cfg.settle_ms > 0 || cfg.fence == Fence::Transactions)
            .then(|| crate::settle::marker_path(&cfg));
        // A standby (pool_worker/src/supervise.rs, STANDBY) starts while its
        // predecessor runs: the marker that one leaves is not there yet,
        // and with the fence the marker only spares a warning.
        let standby = cfg.standby && cfg.fence == Fence::Transactions;
        let clean = marker
            .as_deref()
            .filter(|_| !standby)
            .and_then(crate::settle::take);
        warn_open_commands(&cfg, clean.is_some());
        let settling = cfg.fence == Fence::Settle && cfg.settle_ms > 0;
        // R17: the deadline a predecessor killed while it settled waited
        // for, taken and replaced by ours before anything is appended.
        let deadline = marker
            .as_deref()
            .filter(|_| settling)
            .map(crate::settle::deadline_path);
        let inherited = deadline
            .as_deref()
            .and_then(crate::settle::take)
            .and_then(|d| d.parse::<u64>().ok());
        let now = now_ms();
        let (mut w, first) = Worker::start_settling(
            InstanceNo::new(me),
            Incarnation::new(cfg.incarnation.clone().unwrap_or_else(new_incarnation)),
            settings(&cfg),
            now,
            clean.clone().map(Incarnation::new),
            inherited,
        );
        if let (Some(path), Phase::Settle { until, .. }) = (&deadline, &w.phase) {
            crate::settle::leave(path, &until.to_string());
        }
        // R16: fence the instance's previous processes while the log is
        // read; a standby only once the supervisor says its predecessor
        // has exited or is done (`go`): until then that process is the
        // instance's. With two transactional ids (`supervise`'s
        // TXN_SLOT), a standby initialises its own id once told the current
        // process has booted (that fences only the process before it, which
        // has ended), and after `go` fences the current one's id only if it
        // did not say `done`; a plain start fences both ids.
        let slotted = cfg.txn_slot.is_some();
        let (heir_tx, heir) = watch::channel(None);
        let fencing = (cfg.fence == Fence::Transactions).then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let mut t = std::time::Instant::now();
                let mut handed = false;
                let r = if standby {
                    tracing::info!(
                        instance = me,
                        "standing by: connected; taking over when instance {me}'s current process exits"
                    );
                    // Its own id, once the current process has booted (that
                    // one's fences done: a plain start fences both ids).
                    let mut own = None;
                    let mut lines = SupervisorLines::stdin();
                    let went = lines
                        .go(|| {
                            if slotted && own.is_none() {
                                own = Some(tokio::spawn(kafka.fence()));
                            }
                        })
                        .await;
                    let Some(went) = went else {
                        let _ = tx.send(None);
                        return;
                    };
                    handed = went == Went::Handed;
                    // Its own heir, named once it runs.
                    tokio::spawn(lines.heirs(heir_tx));
                    crate::account::mark_with("go", || format!("{went:?}"));
                    t = std::time::Instant::now();
                    // Reading again, beside the fence.
                    tokio::spawn(kafka.standby_go());
                    let other = async {
                        match went {
                            Went::Exited if slotted => kafka.fence_other().await,
                            _ => Ok(()),
                        }
                    };
                    let own = async {
                        match own {
                            Some(own) => own.await.unwrap_or(Err(Stopped::Failed)),
                            None => kafka.fence().await,
                        }
                    };
                    let (own, other) = tokio::join!(own, other);
                    own.and(other)
                } else if slotted {
                    // Under `supervise` with standbys: told its heir on its
                    // standard input too (R16, "Handed boot").
                    tokio::spawn(SupervisorLines::stdin().heirs(heir_tx));
                    let (own, other) = tokio::join!(kafka.fence(), kafka.fence_other());
                    own.and(other)
                } else {
                    kafka.fence().await
                };
                crate::account::mark("fenced");
                if handed {
                    tracing::info!(
                        instance = me,
                        "booted by the previous process: its last transaction held this one's booted"
                    );
                } else {
                    tracing::info!(
                        instance = me,
                        ms = t.elapsed().as_millis() as u64,
                        "fenced the instance's previous processes (init_transactions)"
                    );
                }
                let _ = tx.send(Some((r, handed)));
            });
            rx
        });
        // R16, "Handed view": a standby whose supervisor drew its
        // incarnation may be handed its predecessor's View at `go`: it
        // reads nothing before (Shell::start_reading).
        let view = marker
            .as_deref()
            .filter(|_| standby && cfg.incarnation.is_some())
            .map(crate::settle::view_path);
        if view.is_none() {
            start_reading(kafka, &mut w, None).await?;
        } else {
            // The orders' ends, so that at `go` the waiting order is read
            // at once, before the boot is done (Shell::read_waiting_orders;
            // a replay would have asked them). Beside the wait, and given
            // up after a while: brokers that do not answer must not hold a
            // standby back from its `go`.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(STANDBY_ENDS_PATIENCE, kafka.order_ends()).await;
                crate::account::mark("standing_by");
            });
        }
        let scheduler = Scheduler::new(cfg.schedules.clone());
        let (fired_tx, fired_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok(Shell {
            cfg,
            kafka,
            w,
            job_base,
            signals,
            ticks,
            marker,
            clean,
            deadline,
            inherited,
            fencing,
            heir,
            handed: None,
            view,
            todo: first.into(),
            job: Job::new(),
            idle: false,
            ends_asked: None,
            replay: Replay::new(),
            appender: Appender::start(kafka),
            wake: None,
            guard,
            scheduler,
            idle_since: 0,
            sched_wake: None,
            fired_tx,
            fired_rx,
            own_appended: 0,
            own_read: 0,
            quiet: None,
        })
    }

    /// Carries out the machine's actions, then waits for the next event and
    /// feeds it to the machine, until an action or a signal says exit.
    async fn run(mut self) -> anyhow::Result<Exit> {
        loop {
            if let Some(code) = self.act().await? {
                return Ok(code);
            }
            self.hush();
            self.schedule();
            match self.next().await {
                Next::Input(input) => {
                    self.pass_heir();
                    self.fold(input)
                }
                Next::Again => {}
                Next::Stop(code) => return Ok(code),
            }
        }
    }

    /// Carries out the machine's actions in order; the exit status once one
    /// says exit.
    async fn act(&mut self) -> anyhow::Result<Option<Exit>> {
        while let Some(action) = self.todo.pop_front() {
            match action {
                Action::Append(rec) => {
                    if let Some(code) = self.append(vec![rec]) {
                        return Ok(Some(code));
                    }
                }
                Action::AppendAll(recs) => {
                    if let Some(code) = self.append(recs) {
                        return Ok(Some(code));
                    }
                }
                Action::PublishResult(msg) => self.appender.publish(msg),
                Action::WakeAt(at) => self.wake_at(at),
                Action::FindOrder => self.find_order().await?,
                Action::Peek { order } => {
                    crate::account::mark("peek");
                    self.job.peek(self.kafka, order)
                }
                Action::Run {
                    order,
                    attempt,
                    retry,
                } => self.fetch(order, attempt.get(), retry),
                Action::Kill { order } => {
                    tracing::info!(instance = self.cfg.instance, %order, "cancelled by an operator: stopping its job");
                    self.job.kill();
                }
                Action::Start { .. } => self.job.start_prepared(),
                // R54: parked, its job never starts here.
                Action::Release { order } => {
                    tracing::info!(instance = self.cfg.instance, %order, "parked: it waits, held by nobody, until it is due and its key has room");
                    self.job.prepared = None;
                }
                // R53: the job may run until then; its guard freezes it
                // after (pool_worker/src/guard.rs).
                Action::Guard(until) => {
                    let boot = crate::clock::to_boottime(until);
                    tracing::debug!(instance = self.cfg.instance, until, boot, "guard deadline");
                    self.guard.send_replace(Some(boot));
                }
                Action::Exit(code) => return Ok(Some(self.exit(code).await)),
            }
        }
        Ok(None)
    }

    /// [`Action::Append`], [`Action::AppendAll`]: the records go out in one
    /// transaction, noted first: the newest own `seq` ([`Shell::hush`]);
    /// before an own `booted`, the settle deadline dropped (R17; the exit
    /// status when that fails); our heir's `booted` (R16, "Handed boot"),
    /// said with `done` once acknowledged.
    fn append(&mut self, recs: Vec<crate::record::Record>) -> Option<Exit> {
        for rec in &recs {
            if self.w.wrote(rec) {
                self.own_appended = self.own_appended.max(rec.seq);
                if rec.event() == Event::Booted {
                    if let Some(code) = self.drop_deadline() {
                        return Some(code);
                    }
                }
            } else if rec.event() == Event::Booted {
                self.handed = Some(rec.incarnation.clone());
            }
        }
        self.appender.append_all(recs);
        None
    }

    /// Quiet while the job runs and every record this process appended is
    /// read back (the claims reader pauses, [`crate::kafka::Kafka::hush`]);
    /// reading again as soon as that ends: an append to read back, the
    /// job's end, another phase.
    fn hush(&mut self) {
        let quiet = matches!(self.w.phase, Phase::Run { .. })
            && self.job.running()
            && self.own_read >= self.own_appended;
        if quiet == self.quiet.is_some() {
            return;
        }
        self.kafka.hush(quiet);
        self.quiet = quiet.then(|| tokio::time::Instant::now() + HUSH_PEEK);
    }

    fn wake_at(&mut self, at: u64) {
        if let Phase::Settle { .. } = self.w.phase {
            self.log_settling(at);
        }
        self.wake = Some(at);
    }

    /// One line that says why a start waits, and how long
    /// (docs/protocol.md R18).
    fn log_settling(&self, at: u64) {
        let me = self.cfg.instance;
        let ms = at.saturating_sub(now_ms());
        let why = match &self.clean {
            None if self.inherited.is_some() => format!(
                "instance {me}'s previous process was stopped while it settled, so this one waits for the deadline it inherited"
            ),
            None => format!(
                "no clean exit of instance {me}'s previous process is recorded in {} (its first start on this host, or it crashed)",
                self.cfg.state_dir.display()
            ),
            Some(inc) => format!(
                "the clean exit recorded on this host ({inc}) is not instance {me}'s newest process in the claims topic (the number ran elsewhere since)"
            ),
        };
        tracing::info!(
            instance = me,
            ms,
            "settling: waiting {ms} ms (SETTLE_MS) before joining the pool: {why}, so records that process may have left in flight must land or expire first; a clean exit spares the next start this wait"
        );
    }

    /// Tells the machine the orders' end offsets; if it claims nothing,
    /// waits for orders arriving (idle).
    ///
    /// While idle, the ends asked last are told again instead of asking the
    /// brokers anew ([`reuse_ends`]): what moves the machine then is the log
    /// (a catch-up, a deferral run out), not the orders, whose arrivals the
    /// orders watch reports; its wake-up raises them to the orders it read
    /// (an order's message at offset `o`: its partition ends past `o`), and
    /// [`IDLE_RECHECK`] asks anew. Ends told late are lower than the
    /// brokers' (end offsets never fall), so the machine at worst sees an
    /// order later, never one that is not there. In a burst at N = 8 on one
    /// partition the idle instances asked four to eight times per order,
    /// one ListOffsets request each (bench/RESULTS.md).
    async fn find_order(&mut self) -> anyhow::Result<()> {
        let me = self.cfg.instance;
        let now = std::time::Instant::now();
        let ends = match &self.ends_asked {
            Some((at, ends)) if reuse_ends(*at, self.idle, now) => ends.clone(),
            _ => {
                let (at, ends) = match self.kafka.recent_order_ends(ENDS_RECENT) {
                    Some(recent) => recent,
                    None => (now, self.kafka.order_ends().await),
                };
                self.ends_asked = Some((at, ends.clone()));
                ends
            }
        };
        crate::account::mark("order_ends");
        tracing::debug!(instance = me, ?ends, "orders' end offsets");
        let frontier = self.w.view.frontier_for(&ends);
        self.todo
            .extend(self.w.handle(Input::Orders(ends), now_ms()));
        if !self.w.looking() {
            // Claimed: no more wake-ups for orders arriving.
            self.idle = false;
        } else if !self.idle {
            self.idle = true;
            self.idle_since = now_ms();
            self.kafka.watch_orders(frontier).await?;
            match self.w.deferring() {
                Some(until) => tracing::info!(
                    instance = me,
                    ms = until.saturating_sub(now_ms()),
                    "an order is waiting, but other idle instances are first in its line; deferring to them (CLAIM_DEFER_MS)"
                ),
                None => tracing::info!(instance = me, "no order waiting; idle"),
            }
        }
        Ok(())
    }

    /// At the fence, before `booted` is appended and read back: starts
    /// reading the orders partitions in which, by the View so far and the
    /// orders' ends known, an order waits, from the frontier on. The order
    /// this process claims once booted is then read already when the
    /// machine asks to read it before its claim (R56, `Action::Peek`),
    /// which otherwise waited for an orders fetch of its own on the way
    /// from `booted` to the claim (issue 35: bench/RESULTS.md). Messages
    /// read are kept among the [`crate::kafka::Kafka`]'s payloads whatever
    /// is claimed; with no order waiting (an idle pool) nothing is read
    /// until the idle watch starts ([`Shell::find_order`]). A failure
    /// costs only the head start.
    async fn read_waiting_orders(&mut self) {
        let Some((_, ends)) = self.kafka.recent_order_ends(Duration::MAX) else {
            return;
        };
        let from: std::collections::BTreeMap<_, _> = self
            .w
            .view
            .frontier_for(&ends)
            .into_iter()
            .filter(|(lane, next)| ends.get(lane).is_some_and(|end| end > next))
            .collect();
        if from.is_empty() {
            return;
        }
        crate::account::mark("orders_early");
        if let Err(e) = self.kafka.watch_orders(from).await {
            tracing::debug!(instance = self.cfg.instance, error = %format!("{e:#}"), "cannot read the waiting orders before booting");
        }
    }

    /// While idle, produces the schedules' firings that are this process's
    /// turn (src/schedule.rs), each in a task of its own (the loop goes on
    /// reading the log meanwhile), and notes when to look again.
    fn schedule(&mut self) {
        if !self.idle || self.scheduler.schedules().is_empty() {
            self.sched_wake = None;
            return;
        }
        let idle = Idle {
            me: self.w.me,
            since: self.idle_since,
            waiting: self.w.deferring().is_some(),
            defer_ms: self.cfg.claim_defer_ms,
        };
        let plan = self.scheduler.plan(&self.w.view, idle, now_ms());
        self.sched_wake = plan.wake_at;
        for firing in plan.produce {
            tracing::debug!(instance = self.cfg.instance, id = %firing.id, since = self.idle_since, "producing a schedule's firing (its turn)");
            let src = crate::kafka::tools::Source {
                brokers: self.cfg.brokers.clone(),
                orders_topic: self.cfg.orders_topics.to_var(),
                coordination_topic: self.cfg.coordination_topic.clone(),
                json: false,
                claims_key_file: None,
                schedule_file: None,
            };
            let tx = self.fired_tx.clone();
            tokio::spawn(async move {
                let r = src
                    .send_order(firing.order.as_bytes())
                    .await
                    .map_err(|e| format!("{e:#}"));
                let _ = tx.send((firing, r));
            });
        }
    }

    /// A firing's produce ended: logged; one that failed is produced again
    /// at a later plan, by this process or another.
    fn fired(&mut self, firing: Firing, r: Result<OrderId, String>) {
        let me = self.cfg.instance;
        match r {
            Ok(order) => {
                tracing::info!(instance = me, id = %firing.id, %order, "produced a schedule's firing")
            }
            Err(e) => {
                tracing::warn!(instance = me, id = %firing.id, error = %e, "producing a schedule's firing failed; trying again later");
                self.scheduler.failed(&firing);
            }
        }
    }

    /// Fetches the order claimed ([`Action::Run`]).
    fn fetch(&mut self, order: OrderId, attempt: u32, retry: bool) {
        self.idle = false;
        crate::account::mark("fetch");
        tracing::info!(instance = self.cfg.instance, %order, attempt, retry, "running");
        let timeout = fetch_timeout(self.cfg.lease_ms);
        let allowed_urls = self.cfg.allowed_urls.clone();
        self.job
            .fetch(self.kafka, order, attempt, allowed_urls, timeout);
    }

    /// [`Action::Exit`]: stops the job, waits for every append, leaves the
    /// clean-exit marker.
    async fn exit(&mut self, code: Exit) -> Exit {
        crate::account::mark("exit_begin");
        self.job.stop().await;
        // Every append acknowledged before exiting, unless a signal says
        // stop (brokers unreachable for good): then as on any signal.
        tokio::select! {
            _ = self.appender.flush(None) => {}
            code = self.signals.recv() => return self.on_signal(code).await,
        }
        crate::account::mark("flushed");
        // Every append acknowledged: the next process of our number need
        // not wait (a fenced one is not ours to vouch for: another process
        // holds the number).
        if code != Exit::Fenced {
            self.leave_marker();
        }
        if code == Exit::Ok {
            // R16, "Handed view": the heir boots from our View.
            if let (Some(heir), Some(marker)) = (&self.handed, &self.marker) {
                let view = self.w.hand_view(heir);
                crate::settle::leave_view(&crate::settle::view_path(marker), &view);
                crate::account::mark_with("view_left", || view.snapshot.at.to_string());
            }
            // All this process does from here is exit: the supervisor may
            // let the instance's standby go now (pool_worker/src/supervise/ready.rs).
            crate::supervise::say_done(self.handed.as_ref().map(Incarnation::as_str));
        }
        let me = self.cfg.instance;
        if code == Exit::Revoked {
            tracing::error!(
                instance = me,
                "revoked: this instance's lease expired and another instance took its order over; stopping"
            );
        }
        if code == Exit::Fenced {
            tracing::error!(
                instance = me,
                "fenced: a newer process with INSTANCE_NUMBER={me} started; this one stops"
            );
        }
        code
    }

    /// SIGTERM or SIGINT: stops the job, waits a little for the appends in
    /// flight (each commits its transaction), and exits with `code`. An
    /// append still in flight then has its transaction aborted: a process
    /// never exits on a signal leaving one open, which would hold back
    /// every read_committed reader until `transaction.timeout.ms`
    /// (docs/protocol.md R16).
    async fn on_signal(&mut self, code: Exit) -> Exit {
        self.job.stop().await;
        if self.appender.flush(Some(SIGNAL_FLUSH)).await {
            self.leave_marker();
        } else {
            self.kafka.abort_open(SIGNAL_ABORT).await;
        }
        code
    }

    /// Waits for the next event: a claims record (or "caught up"), a fetch's
    /// or a job's end, a new order while idle, a tick, a signal.
    async fn next(&mut self) -> Next {
        let kafka = self.kafka;
        let wake_in = Duration::from_millis(self.wake.unwrap_or(0).saturating_sub(now_ms()));
        let sched_in = Duration::from_millis(self.sched_wake.unwrap_or(0).saturating_sub(now_ms()));
        tokio::select! {
            ev = kafka.next_claim() => self.claim_input(ev).map_or(Next::Again, Next::Input),
            Some((order, attempt, spec)) = self.job.prep_rx.recv() => self.prepared(order, attempt, spec),
            Some((order, key)) = self.job.peek_rx.recv() => {
                crate::account::mark("peeked");
                Next::Input(Input::Peeked { order, key })
            }
            Some(outcome) = self.job.out_rx.recv() => {
                crate::account::mark("job_done");
                self.job.ended();
                Next::Input(Input::JobDone(outcome))
            }
            _ = kafka.order_arrived(), if self.idle => {
                crate::account::mark("order_arrived");
                // The ends asked last, raised to the orders read since (the
                // one that arrived among them), not asked again: told late,
                // an end is lower than the brokers', never higher
                // (find_order). Asked anew after IDLE_RECHECK.
                if let Some((_, ends)) = &mut self.ends_asked {
                    kafka.raise_to_read(ends);
                }
                Next::Input(Input::OrdersMoved)
            }
            _ = tokio::time::sleep(IDLE_RECHECK), if self.idle => {
                self.ends_asked = None;
                Next::Input(Input::OrdersMoved)
            }
            _ = self.ticks.tick() => Next::Input(Input::Tick),
            // Quiet while the job runs: a look at the log now and then.
            _ = tokio::time::sleep_until(self.quiet.unwrap_or_else(tokio::time::Instant::now)), if self.quiet.is_some() => {
                self.kafka.peek();
                self.quiet = Some(tokio::time::Instant::now() + HUSH_PEEK);
                Next::Again
            }
            // A schedule's firing is due: plan again (Shell::schedule).
            _ = tokio::time::sleep(sched_in), if self.idle && self.sched_wake.is_some() => {
                self.sched_wake = None;
                Next::Again
            }
            Some((firing, r)) = self.fired_rx.recv() => {
                self.fired(firing, r);
                Next::Again
            }
            _ = tokio::time::sleep(wake_in), if self.wake.is_some() => {
                self.wake = None;
                Next::Input(Input::Tick)
            }
            code = self.signals.recv() => Next::Stop(self.on_signal(code).await),
            r = async {
                match self.fencing.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            }, if self.fencing.is_some() => {
                self.fencing = None;
                match r {
                    Ok(Some((Ok(()), handed))) => {
                        if let Some(path) = self.view.take() {
                            let view = handed.then(|| crate::settle::take_view(&path)).flatten();
                            if let Err(e) = start_reading(self.kafka, &mut self.w, view).await {
                                tracing::error!(instance = self.cfg.instance, error = %format!("{e:#}"), "cannot read the claims topic");
                                return Next::Stop(Exit::Failure);
                            }
                        }
                        self.read_waiting_orders().await;
                        Next::Input(if handed { Input::Handed } else { Input::Fenced })
                    }
                    Ok(Some((Err(stop), _))) => Next::Stop(self.on_stopped(stop).await),
                    // A standby that is not needed: it appended nothing and
                    // took no marker.
                    Ok(None) => {
                        tracing::info!(instance = self.cfg.instance, "standby dismissed (its supervisor is gone or stops): exiting");
                        Next::Stop(Exit::Ok)
                    }
                    Err(_) => Next::Stop(self.on_stopped(Stopped::Failed).await),
                }
            }
            stop = self.appender.stopped() => Next::Stop(self.on_stopped(stop).await),
        }
    }

    /// The producer stopped for good (fenced by a newer process of our
    /// number, or failed): stop the job and exit without appending more
    /// and without a clean-exit marker (docs/protocol.md R16).
    async fn on_stopped(&mut self, stop: Stopped) -> Exit {
        self.job.stop().await;
        let me = self.cfg.instance;
        match stop {
            Stopped::Fenced => {
                tracing::error!(
                    instance = me,
                    "fenced: a newer process with INSTANCE_NUMBER={me} started (Kafka fenced this process's transactional producer); this one stops"
                );
                Exit::Fenced
            }
            Stopped::Unauthorized => {
                tracing::error!(
                    instance = me,
                    transactional_id = %crate::kafka::transactional_id(&self.cfg.kafka_setup()),
                    "the brokers refuse this instance's transactional id: grant the pool Write and Describe on transactional ids prefixed pool_worker.<claims topic>. (docs/deploy.md, \"Kafka ACLs\"), or run against a broker without ACLs"
                );
                Exit::Config
            }
            Stopped::Failed => {
                tracing::error!(
                    instance = me,
                    "the claims producer failed for good and could not be replaced; stopping (the supervisor starts the instance again)"
                );
                Exit::Failure
            }
        }
    }

    /// R17: before our `booted` is appended, the settle deadline we kept
    /// must go: from now on our own appends may be in flight, and a
    /// successor must wait for them in full. `Some` (exit) if it cannot be
    /// removed.
    fn drop_deadline(&mut self) -> Option<Exit> {
        let path = self.deadline.take()?;
        match std::fs::remove_file(&path) {
            Ok(()) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::error!(instance = self.cfg.instance, path = %path.display(), error = %e, "cannot remove the settle deadline before booting; stopping");
                Some(Exit::Failure)
            }
        }
    }

    /// A fetched order: its job starts now, or, with terms (an `id`, a
    /// `not_before`, a `key`), once the machine says so (Action::Start,
    /// or Action::Release: parked); a bad one is its own outcome.
    fn prepared(
        &mut self,
        order: OrderId,
        attempt: u32,
        spec: Result<orders::OrderSpec, Outcome>,
    ) -> Next {
        self.job.prep_task = None;
        crate::account::mark("fetched");
        if std::mem::take(&mut self.job.killed) {
            return Next::Input(Input::JobDone(Outcome::not_run(
                Status::Cancelled,
                "cancelled before its job started",
            )));
        }
        let topic = self
            .cfg
            .orders_topics
            .name_of(order.topic)
            .unwrap_or_default();
        let ctx = job_context(&self.job_base, order, topic, attempt);
        if let Ok(spec) = &spec {
            log_order(self.cfg.instance, order, attempt, spec);
        }
        match spec {
            // An order with terms runs only once the machine says so: its
            // id is the first, it is due, its key has room (Action::Start).
            Ok(spec) if spec.terms().any() => {
                let terms = spec.terms();
                self.job.prepared = Some((spec, ctx));
                Next::Input(Input::Terms(terms))
            }
            Ok(spec) => {
                self.job.start(spec, ctx);
                Next::Again
            }
            Err(outcome) => Next::Input(Input::JobDone(outcome.fit(self.cfg.output_limit))),
        }
    }

    /// The heir the supervisor named last, to the machine once (R16,
    /// "Handed boot").
    fn pass_heir(&mut self) {
        if !self.heir.has_changed().unwrap_or(false) {
            return;
        }
        let heir = self.heir.borrow_and_update().clone();
        if let Some(h) = heir {
            self.todo.extend(self.w.handle(Input::Heir(h), now_ms()));
        }
    }

    /// Feeds the input to the machine, then every claims event already
    /// received, until the machine asks for something (a replay goes batch
    /// by batch, not once around the select! per record).
    fn fold(&mut self, mut input: Input) {
        loop {
            if let Input::Record(pos, _) | Input::Foreign(pos) = &input {
                self.replay.read(pos.get());
            }
            let was_booting = self.w.phase.booting();
            self.todo.extend(self.w.handle(input, now_ms()));
            if was_booting && !self.w.phase.booting() {
                crate::account::mark("boot_done");
                // Ready to claim: the supervisor starts the next standby now.
                crate::supervise::say_booted();
                self.replay.report(&self.w);
            }
            if self.w.phase != Phase::Choose {
                self.idle = false;
            }
            if !self.todo.is_empty() || self.w.done().is_some() {
                break;
            }
            let mut next = None;
            while let Some(ev) = self.kafka.try_next_claim() {
                next = self.claim_input(ev);
                if next.is_some() {
                    break;
                }
            }
            match next {
                Some(next) => input = next,
                None => break,
            }
        }
    }

    /// The machine's input for an event of the claims reader; `None`: an
    /// event the machine has no use for now.
    fn claim_input(&mut self, ev: ClaimEvent) -> Option<Input> {
        Some(match ev {
            ClaimEvent::Record(pos, rec) => {
                let own = self.w.wrote(&rec);
                if own {
                    self.own_read = self.own_read.max(rec.seq);
                }
                crate::account::mark_with("read", || {
                    format!(
                        "{} {}",
                        rec.event().as_str(),
                        if own { "own" } else { "other" }
                    )
                });
                Input::Record(Position::new(pos), rec)
            }
            ClaimEvent::Foreign(pos, why) => {
                tracing::warn!(
                    instance = self.cfg.instance,
                    pos,
                    "skipping a record of the claims topic: {why}"
                );
                Input::Foreign(Position::new(pos))
            }
            // Caught up while idle, the machine looks at the orders again
            // (a record may have moved the frontier): Worker::on_caught_up.
            ClaimEvent::CaughtUp => {
                if !std::mem::replace(&mut self.replay.caught_up, true) {
                    crate::account::mark("caught_up");
                }
                tracing::debug!(
                    instance = self.cfg.instance,
                    end = self.w.view.end().get(),
                    "caught up with the claims topic"
                );
                Input::CaughtUp
            }
            // Every record sent so far read (ClaimEvent::Drained): caught
            // up as of the last fetch's answer, which for the machine is
            // CaughtUp (a CaughtUp is taken with records landed after it
            // unread in any case: tests/pure/model.rs, "Readers never
            // lag"). Only where the machine would act on it, and not while
            // it settles: there a clean exit is confirmed by the newest
            // process of its number in the log, which an answer cut at the
            // fetch size (a long replay) may not have reached yet.
            ClaimEvent::Drained => {
                if !self.w.awaits_caught_up() || matches!(self.w.phase, Phase::Settle { .. }) {
                    return None;
                }
                Input::CaughtUp
            }
        })
    }

    /// Leaves the clean-exit marker once every append is acknowledged:
    /// naming this incarnation, or, if it appended nothing (stopped while
    /// settling), handing on the marker it took, since the log is as its
    /// predecessor left it.
    fn leave_marker(&self) {
        let Some(path) = &self.marker else { return };
        match (self.appender.sent.get(), &self.clean) {
            (0, Some(prev)) => crate::settle::leave(path, prev),
            (0, None) => {}
            _ => crate::settle::leave(path, self.w.incarnation.as_str()),
        }
    }
}

/// The order's place in a trace, and the order it runs again, on a line of
/// its own (issue 19).
/// `ALLOWED_COMMANDS` unset: orders may run any program. A process lives
/// for one order, so saying it at every start said it once per order
/// (issue 19). It is said when this process starts after an unclean exit
/// or a first start (no clean-exit marker of its predecessor: with one,
/// the predecessor said it, or was spared for the same reason), unless the
/// supervisor that started it said it already for all its workers
/// ([`crate::supervise::WARNED_OPEN_COMMANDS`]).
fn warn_open_commands(cfg: &Config, clean_predecessor: bool) {
    if cfg.allowed_commands.is_some() {
        return;
    }
    if clean_predecessor || cfg.open_commands_warned {
        tracing::debug!(
            instance = cfg.instance,
            "ALLOWED_COMMANDS is not set: orders may run any program"
        );
    } else {
        tracing::warn!(
            instance = cfg.instance,
            "ALLOWED_COMMANDS is not set: orders may run any program"
        );
    }
}

/// What boot replayed, for one log line when it is over (and for the
/// benchmark, which checks that the whole history was read).
struct Replay {
    started: std::time::Instant,
    records: u64,
    first: Option<u64>,
    /// The first "caught up" was marked (crate::account).
    caught_up: bool,
}

impl Replay {
    fn new() -> Replay {
        Replay {
            started: std::time::Instant::now(),
            records: 0,
            first: None,
            caught_up: false,
        }
    }

    fn read(&mut self, pos: u64) {
        self.records += 1;
        self.first.get_or_insert(pos);
    }

    fn report(&self, w: &Worker) {
        tracing::info!(
            instance = w.me.get(),
            records = self.records,
            first = self.first.unwrap_or(0),
            end = w.view.end().get(),
            foreign = w.view.foreign,
            void = w.view.void,
            adopted = w.view.adopted,
            completions = w.view.completions,
            ms = self.started.elapsed().as_millis() as u64,
            "replayed the claims topic"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The orders' ends are told again only while idle, and never once
    /// IDLE_RECHECK has passed since they were asked: a process that is not
    /// idle (booting, after a yield or a completion) has no orders watch to
    /// report the orders that arrived since.
    #[test]
    fn the_orders_ends_are_told_again_only_while_idle_and_fresh() {
        let asked = Instant::now();
        assert!(reuse_ends(asked, true, asked));
        assert!(reuse_ends(asked, true, asked + IDLE_RECHECK / 2));
        assert!(!reuse_ends(asked, false, asked));
        assert!(!reuse_ends(asked, true, asked + IDLE_RECHECK));
        assert!(!reuse_ends(asked, true, asked + IDLE_RECHECK * 2));
        // A clock that went back (asked after now) reuses: the age is zero.
        assert!(reuse_ends(asked + IDLE_RECHECK, true, asked));
    }
}
