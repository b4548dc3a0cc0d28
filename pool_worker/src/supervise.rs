//! The supervisor: keep N instances of the worker running.
//!
//! A pool_worker process completes one order and exits (seed 002: "arrange
//! for instances to be restarted when they exit"), so in production systemd or
//! Docker restarts it (docs/deploy.md). For development and tests this module
//! is that supervisor in miniature: `pool_worker supervise --instances 1-4`
//! starts the current executable once per instance number, with no
//! subcommand (worker mode) and `INSTANCE_NUMBER` set, and starts each again
//! whenever it exits: at once after a clean exit (status 0, an order done),
//! with a growing delay after failures. It is also what the shipped compose
//! file and systemd unit run (docs/deploy.md), because neither Docker nor
//! systemd can restart clean exits at once and back off from crashes only.
//!
//! # Exit statuses decide what happens next
//!
//! | child exit | meaning | the supervisor |
//! | --- | --- | --- |
//! | 2 | configuration error | does not restart that instance: a bad configuration would only fail again, fast, forever |
//! | 3 | fenced: another process runs this instance number | does not restart it: that process owns the number now |
//! | 0 | an order done (or `ORDERS_PER_PROCESS` orders) | restarts it at once |
//! | anything else, or a signal | crashed (or stopped from outside) | restarts it after a delay: `--restart-delay-ms` after the first failure in a row, doubled for each further one up to `--max-restart-delay-ms` |
//!
//! A clean exit ends a run of failures, and so does a process that ran
//! longer than `--max-restart-delay-ms` before it failed: an isolated crash
//! is restarted after the first delay, a crash loop slows down to one start
//! per `--max-restart-delay-ms`. A busy worker, which exits 0 after every
//! order, is never slowed down.
//!
//! When no instance is left (all retired, or `--max-runs` starts used up), the
//! supervisor ends: status 2 if any instance had a configuration error, 3 if
//! all were fenced, 0 otherwise. SIGTERM or SIGINT ends it with status 0 after
//! stopping the children: each gets SIGTERM, and SIGKILL if it is still
//! running 5 seconds later.
//!
//! # Events
//!
//! Every start and exit is one line on standard output, for people:
//!
//! ```text
//! instance 3 started pid 1234
//! instance 3 exited code 0 after 1.2s (restarts: 5)
//! instance 3 not restarted: configuration error (exit 2)
//! ```
//!
//! or, with `--json`, for programs (the tests find pids to kill this way):
//!
//! ```text
//! {"event":"started","instance":3,"pid":1234,"run":6}
//! {"event":"exited","instance":3,"pid":1234,"code":0,"signal":null,"after_ms":1200,"restarts":5}
//! {"event":"retired","instance":3,"reason":"config_error"}
//! {"event":"spawn_failed","instance":3,"error":"..."}
//! {"event":"done","code":0}
//! ```
//!
//! `run` counts this instance's starts (1 for the first); `restarts` is
//! `run - 1`; `reason` is `config_error`, `fenced` or `max_runs`.
//!
//! # Children's output
//!
//! Standard output carries only events, so that it stays parseable. By
//! default (`--child-output prefix`) the supervisor reads each child's stdout
//! and stderr and copies every line to its own **stderr**, prefixed with the
//! instance number: `[3] ...`. `inherit` lets the children write to the
//! supervisor's stdout and stderr directly (their lines then mix with the
//! events); `null` discards their output.
//!
//! # No orphans
//!
//! The children stay in the supervisor's process group, so a terminal's
//! Ctrl-C, or `kill -- -PGID`, reaches all of them. If the supervisor itself
//! dies without cleaning up (SIGKILL), Linux kills the children too: each is
//! started with `PR_SET_PDEATHSIG = SIGKILL`. That signal fires when the
//! *thread* that forked the child ends, not the process, and tokio retires
//! idle threads, so every child is forked from one dedicated thread that
//! lives as long as the supervisor (see [`Spawner`]).
//!
//! # The fork server
//!
//! Workers of this executable are forked from a fork server
//! ([`fork_server`]): a copy of it started once from the spawning thread,
//! which forks a new process for every start without an `exec`
//! (`--no-fork-server` execs every one, as another `--program` always is).
//! The server dies with that thread, and its workers with it.
//!
//! # Library use
//!
//! [`supervise`] is the whole loop as an async function; `pool_worker dev`
//! runs it in-process through the [`Supervisor`] handle and prints the same
//! [`SupEvent`]s.

mod fork_server;
mod lines;
mod ready;
use crate::backoff::Backoff;
use crate::kafka::TxnSlot;
use crate::process_exit::Exit;
use anyhow::{anyhow, bail, Context as _};
pub(crate) use fork_server::{serve as fork_server, Served, VAR as FORK_SERVER};
pub(crate) use lines::{Line as SupervisorLine, Went};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
pub(crate) use ready::{booted as say_booted, done as say_done, take as take_ready};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{self, Write as _};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Most instances one supervisor runs (a typo like `1-100000` should not
/// fork a hundred thousand processes).
pub(crate) const MAX_SUPERVISED: usize = 1024;

/// Longest line of a child's output copied as one line; longer ones are split.
const MAX_LINE: u64 = 16 * 1024;

/// What becomes of the children's stdout and stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ChildOutput {
    /// Copied line by line to the supervisor's stderr, prefixed `[i] `.
    Prefix,
    /// The supervisor's own stdout and stderr.
    Inherit,
    /// Discarded.
    Null,
}

/// What to supervise and how.
#[derive(Clone, Debug)]
pub(crate) struct SupervisorConfig {
    /// Instance numbers, one child each.
    pub(crate) instances: Vec<u32>,
    /// The program to run (normally this executable).
    pub(crate) program: PathBuf,
    /// Its arguments (normally none: worker mode).
    pub(crate) args: Vec<OsString>,
    /// Set in each child's environment on top of the supervisor's own (then
    /// `INSTANCE_NUMBER`, which nothing overrides).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// The delay after a failure (see [`Backoff`]).
    pub(crate) restart_delay: Duration,
    /// The longest delay after failures in a row (see [`Backoff`]).
    pub(crate) max_restart_delay: Duration,
    /// Stop starting children after this many starts in total.
    pub(crate) max_runs: Option<u64>,
    /// How long a child has between SIGTERM and SIGKILL when stopping.
    pub(crate) stop_grace: Duration,
    pub(crate) output: ChildOutput,
    /// Keep a standby process per instance ([`STANDBY`]): started while the
    /// instance's process runs, once it has booted ([`ready`]), promoted the
    /// moment it exits.
    pub(crate) standby: bool,
    /// Start this executable's workers from a fork server
    /// ([`fork_server`]) rather than with `fork` and `exec` each time
    /// (`--program` and program arguments always `exec`).
    pub(crate) fork_server: bool,
}

impl SupervisorConfig {
    /// This executable in worker mode for `instances`, with the defaults
    /// (clean exits restarted at once, failures after 100 ms doubling up to
    /// 30 s, 5 s stop grace, prefixed output).
    pub(crate) fn new(instances: Vec<u32>) -> anyhow::Result<Self> {
        let program = std::env::current_exe().context("cannot find this executable")?;
        Ok(SupervisorConfig {
            instances,
            program,
            args: Vec::new(),
            env: Vec::new(),
            restart_delay: DEFAULT_RESTART_DELAY,
            max_restart_delay: DEFAULT_MAX_RESTART_DELAY,
            max_runs: None,
            stop_grace: Duration::from_secs(5),
            output: ChildOutput::Prefix,
            standby: false,
            fork_server: true,
        })
    }
}

/// Set (to `1`) by the supervisor in the environment of a standby: a
/// worker started while its instance's current process still runs. It
/// connects, checks the topics and reads the claims topic like any worker
/// (to its end, then it stops fetching until `go`, and reads what was
/// written meanwhile at `go`: pool_worker/src/kafka/clients.rs, `ClaimsPause`),
/// but fences its predecessors and appends nothing (docs/protocol.md R16)
/// until it reads the line `go` on its standard input, which the supervisor
/// writes the moment the current process says `done` ([`ready`]) or else
/// has exited (after the restart delay, if it failed). End of input before `go` (the supervisor is gone,
/// or dismissed the standby) makes it exit 0, having appended nothing. A
/// busy instance's next process is thus started, connected and caught up
/// while the current one runs its order (issue 27); it is started once the
/// current one says it booted ([`ready`]), so as not to compete with its
/// fence and `booted` for the cores (issue 35).
pub(crate) const STANDBY: &str = "POOL_WORKER_STANDBY";

/// Set (to `0` or `1`) by the supervisor, when it keeps standbys, in the
/// environment of each worker: which of its instance's two transactional
/// ids the process writes under ([`crate::kafka::TxnSlot`],
/// docs/protocol.md R16). A standby gets the id its instance's current
/// process does not use and initialises its producer while it stands by,
/// once told (the line `booted` on its standard input) that the current
/// process has booted, its own fences done; its `go` says whether the current process ended with `done` (the line
/// `go done`: every append acknowledged, none to come, so no fence of its
/// id is needed) or otherwise (`go`: the standby fences that id before it
/// appends). A plain start fences both ids.
pub(crate) const TXN_SLOT: &str = "POOL_WORKER_TXN_SLOT";

/// Set by the supervisor, when it keeps standbys, in the environment of
/// each standby: the incarnation id the standby takes (16 hex digits, as a
/// worker draws its own). The supervisor tells it to the instance's
/// current process, a promoted standby or a plain start (the line `heir
/// <incarnation>` on its standard input),
/// whose last transaction then holds the heir's `booted` after its last
/// `completed`; it says so (`done handed <incarnation>`), and the standby,
/// let go with `go handed`, boots on that `booted` without a fence or an
/// append of its own (docs/protocol.md R16, "Handed boot").
pub(crate) const INCARNATION: &str = "POOL_WORKER_INCARNATION";

/// Whether workers started with `cfg` can stand by: this executable's
/// worker mode (not another `--program`), fencing with transactions (the
/// default; `CLAIMS_FENCE=settle`, in `cfg.env` or else in this process's
/// environment, settles from the process's start instead, so a standby
/// would gain nothing).
pub(crate) fn can_stand_by(cfg: &SupervisorConfig) -> bool {
    let own = std::env::current_exe().is_ok_and(|me| me == cfg.program) && cfg.args.is_empty();
    let fence = cfg
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "CLAIMS_FENCE")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("CLAIMS_FENCE"));
    own && fence.is_none_or(|v| v.to_string_lossy().trim() != "settle")
}

/// Set by the supervisor in its workers' environment once it has logged
/// that `ALLOWED_COMMANDS` is not set: the workers (each lives for one
/// order) then do not log it again (issue 19).
pub(crate) const WARNED_OPEN_COMMANDS: &str = "POOL_WORKER_WARNED_OPEN_COMMANDS";

/// Whether the workers `cfg` starts run without `ALLOWED_COMMANDS` (in
/// `cfg.env`, else in this process's environment); if so, says it once, for
/// every instance and every restart, and tells the workers it was said.
fn warn_open_commands(cfg: &mut SupervisorConfig) {
    let worker_mode =
        cfg.args.is_empty() && std::env::current_exe().is_ok_and(|exe| exe == cfg.program);
    let set = |v: &std::ffi::OsStr| v.to_string_lossy().split(',').any(|x| !x.trim().is_empty());
    let in_cfg = cfg
        .env
        .iter()
        .rev()
        .find(|(k, _)| k.as_os_str() == "ALLOWED_COMMANDS")
        .map(|(_, v)| set(v.as_os_str()));
    let open = !in_cfg.unwrap_or_else(|| {
        std::env::var_os("ALLOWED_COMMANDS").is_some_and(|v| set(v.as_os_str()))
    });
    if worker_mode && open {
        tracing::warn!(
            instances = cfg.instances.len(),
            "ALLOWED_COMMANDS is not set: orders may run any program (said once for every instance this supervisor runs)"
        );
        cfg.env.push((WARNED_OPEN_COMMANDS.into(), "1".into()));
    }
}

/// The delay after a first failure.
pub(crate) const DEFAULT_RESTART_DELAY: Duration = Duration::from_millis(100);
/// The longest delay after failures in a row.
pub(crate) const DEFAULT_MAX_RESTART_DELAY: Duration = Duration::from_secs(30);

/// When an instance is started again: at once after a clean exit; after
/// `first` after a failure, doubled for each failure in a row, at most
/// `max` (a [`Backoff`]). A clean exit, or a failure after a run longer
/// than `max`, ends the row.
#[derive(Clone, Debug)]
pub(crate) struct Restarts {
    backoff: Backoff,
    max: Duration,
}

impl Restarts {
    pub(crate) fn new(first: Duration, max: Duration) -> Restarts {
        Restarts {
            backoff: Backoff::new(first, max),
            max: max.max(first),
        }
    }

    /// The delay before the next start, after a process that ran for `ran`
    /// and exited cleanly or not.
    pub(crate) fn next(&mut self, clean: bool, ran: Duration) -> Duration {
        if clean {
            self.backoff.reset();
            return Duration::ZERO;
        }
        if ran > self.max {
            self.backoff.reset();
        }
        self.backoff.next_delay()
    }
}

/// Why an instance is no longer started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retirement {
    /// It exited with status 2.
    ConfigError,
    /// It exited with status 3.
    Fenced,
    /// `max_runs` starts were used up.
    MaxRuns,
}

impl Retirement {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Retirement::ConfigError => "config_error",
            Retirement::Fenced => "fenced",
            Retirement::MaxRuns => "max_runs",
        }
    }
}

/// Something that happened to a child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SupEvent {
    /// `run` counts this instance's starts, from 1. A promoted standby is
    /// started when it is promoted.
    Started { instance: u32, pid: u32, run: u64 },
    /// A standby ([`STANDBY`]) for the instance's next start is running.
    Standby { instance: u32, pid: u32 },
    /// Exactly one of `code` and `signal` is set (neither if waiting failed).
    Exited {
        instance: u32,
        pid: u32,
        code: Option<i32>,
        signal: Option<i32>,
        after: Duration,
        restarts: u64,
    },
    /// The program could not be started; retried after the restart delay.
    SpawnFailed { instance: u32, error: String },
    /// The instance will not be started again.
    Retired { instance: u32, reason: Retirement },
}

impl SupEvent {
    /// The event as one line of JSON, `event` first (see the module docs).
    pub(crate) fn json_line(&self) -> String {
        #[derive(serde::Serialize)]
        #[serde(tag = "event", rename_all = "snake_case")]
        enum Line<'a> {
            Started {
                instance: u32,
                pid: u32,
                run: u64,
            },
            Standby {
                instance: u32,
                pid: u32,
            },
            Exited {
                instance: u32,
                pid: u32,
                code: Option<i32>,
                signal: Option<i32>,
                after_ms: u64,
                restarts: u64,
            },
            SpawnFailed {
                instance: u32,
                error: &'a str,
            },
            Retired {
                instance: u32,
                reason: &'static str,
            },
        }
        let line = match self {
            SupEvent::Started { instance, pid, run } => Line::Started {
                instance: *instance,
                pid: *pid,
                run: *run,
            },
            SupEvent::Standby { instance, pid } => Line::Standby {
                instance: *instance,
                pid: *pid,
            },
            SupEvent::Exited {
                instance,
                pid,
                code,
                signal,
                after,
                restarts,
            } => Line::Exited {
                instance: *instance,
                pid: *pid,
                code: *code,
                signal: *signal,
                after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
                restarts: *restarts,
            },
            SupEvent::SpawnFailed { instance, error } => Line::SpawnFailed {
                instance: *instance,
                error,
            },
            SupEvent::Retired { instance, reason } => Line::Retired {
                instance: *instance,
                reason: reason.as_str(),
            },
        };
        serde_json::to_string(&line).unwrap_or_default()
    }

    /// The event as one line for people.
    pub(crate) fn human(&self) -> String {
        match self {
            SupEvent::Started { instance, pid, .. } => {
                format!("instance {instance} started pid {pid}")
            }
            SupEvent::Standby { instance, pid } => {
                format!("instance {instance} standby pid {pid} (connected and reading; takes over when the current process exits)")
            }
            SupEvent::Exited {
                instance,
                code,
                signal,
                after,
                restarts,
                ..
            } => {
                let how = match (code, signal) {
                    (Some(c), _) => format!("code {c}"),
                    (None, Some(s)) => format!("signal {s}{}", signal_name(*s)),
                    (None, None) => "(status unknown)".to_string(),
                };
                format!(
                    "instance {instance} exited {how} after {:.1}s (restarts: {restarts})",
                    after.as_secs_f64()
                )
            }
            SupEvent::SpawnFailed { instance, error } => {
                format!("instance {instance} could not be started: {error}")
            }
            SupEvent::Retired { instance, reason } => {
                let why = match reason {
                    Retirement::ConfigError => {
                        "configuration error (exit 2); fix the configuration and start again"
                    }
                    Retirement::Fenced => {
                        "fenced (exit 3): another process runs this instance number"
                    }
                    Retirement::MaxRuns => "the --max-runs limit is reached",
                };
                format!("instance {instance} not restarted: {why}")
            }
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match Signal::try_from(sig) {
        Ok(Signal::SIGKILL) => " (SIGKILL)",
        Ok(Signal::SIGTERM) => " (SIGTERM)",
        Ok(Signal::SIGINT) => " (SIGINT)",
        Ok(Signal::SIGSEGV) => " (SIGSEGV)",
        Ok(Signal::SIGABRT) => " (SIGABRT)",
        _ => "",
    }
}

/// How supervision ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Asked to stop.
    Stopped,
    /// `max_runs` starts were made and all children have exited.
    MaxRuns,
    /// No instance is left and at least one had a configuration error.
    ConfigError,
    /// Every instance was fenced.
    Fenced,
}

impl Ending {
    /// The supervisor's exit status.
    pub(crate) fn exit_code(self) -> Exit {
        match self {
            Ending::Stopped | Ending::MaxRuns => Exit::Ok,
            Ending::ConfigError => Exit::Config,
            Ending::Fenced => Exit::Fenced,
        }
    }
}

/// How one instance's loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Stopped,
    Retired(Retirement),
}

/// Runs the children of `cfg` until `stop` becomes true (or its sender is
/// dropped) or no instance is left, sending every [`SupEvent`] to `events`
/// (a closed receiver is fine). Returns once every child has exited.
pub(crate) async fn supervise(
    cfg: SupervisorConfig,
    stop: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<SupEvent>,
) -> anyhow::Result<Ending> {
    if cfg.instances.is_empty() {
        bail!("no instances to supervise");
    }
    if cfg.instances.len() > MAX_SUPERVISED {
        bail!(
            "at most {MAX_SUPERVISED} instances, not {}",
            cfg.instances.len()
        );
    }
    let forking = cfg.fork_server
        && cfg.args.is_empty()
        && std::env::current_exe().is_ok_and(|me| me == cfg.program);
    let shared = Arc::new(Shared {
        spawner: Spawner::start()?,
        forking,
        runs: AtomicU64::new(0),
        events,
        cfg,
    });
    let mut tasks = JoinSet::new();
    for &instance in &shared.cfg.instances {
        tasks.spawn(run_instance(instance, shared.clone(), stop.clone()));
    }
    let mut fates = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        fates.push(joined.map_err(|e| anyhow!("an instance's task failed: {e}"))?);
    }
    let retired = |r| fates.contains(&Fate::Retired(r));
    Ok(if fates.contains(&Fate::Stopped) {
        Ending::Stopped
    } else if retired(Retirement::MaxRuns) {
        Ending::MaxRuns
    } else if retired(Retirement::ConfigError) {
        Ending::ConfigError
    } else {
        Ending::Fenced
    })
}

/// A running [`supervise`] task.
pub(crate) struct Supervisor {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<anyhow::Result<Ending>>>,
    ended: Option<Ending>,
}

impl Supervisor {
    /// Starts supervising on the current tokio runtime; the events arrive on
    /// the returned receiver.
    pub(crate) fn spawn(
        mut cfg: SupervisorConfig,
    ) -> (Supervisor, mpsc::UnboundedReceiver<SupEvent>) {
        warn_open_commands(&mut cfg);
        let (stop, stop_rx) = watch::channel(false);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(supervise(cfg, stop_rx, tx));
        (
            Supervisor {
                stop,
                task: Some(task),
                ended: None,
            },
            rx,
        )
    }

    /// Asks for a stop (children get SIGTERM, then SIGKILL); see [`wait`](Self::wait).
    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until supervision ends. Cancel-safe, and may be called again
    /// after it returned.
    pub(crate) async fn wait(&mut self) -> anyhow::Result<Ending> {
        if let Some(e) = self.ended {
            return Ok(e);
        }
        let task = self
            .task
            .as_mut()
            .ok_or_else(|| anyhow!("the supervisor has failed"))?;
        let joined = task.await;
        self.task = None;
        let ending = joined.map_err(|e| anyhow!("the supervisor task failed: {e}"))??;
        self.ended = Some(ending);
        Ok(ending)
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // The task goes on in the background and stops the children.
        self.stop.send_replace(true);
    }
}

/// A spawned child, with the pipe on which it says it booted where
/// standbys are kept ([`ready`]).
struct Proc {
    child: Kid,
    ready: Option<ready::Ready>,
    /// Its standard input (where standbys are kept), once taken.
    stdin: Option<Input>,
    /// A standby's incarnation ([`INCARNATION`]).
    incarnation: Option<String>,
}

impl Proc {
    /// Its standard input, where the supervisor's lines go.
    fn input(&mut self) -> Option<&mut Input> {
        if self.stdin.is_none() {
            self.stdin = self.child.take_stdin();
        }
        self.stdin.as_mut()
    }
}

/// What a child of an instance is started as ([`Shared::spawn`]).
#[derive(Clone, Copy)]
struct ChildSpec<'a> {
    instance: u32,
    /// A standby ([`STANDBY`]).
    standby: bool,
    /// Its transactional id, where standbys are kept ([`TXN_SLOT`]).
    slot: Option<TxnSlot>,
    /// A standby's incarnation ([`INCARNATION`]).
    incarnation: Option<&'a str>,
}

impl ChildSpec<'_> {
    /// Whether the child reads the supervisor's lines on its standard
    /// input: where standbys are kept, a standby (`go`) and a plain start
    /// too, which is told its heir there (R16, "Handed boot").
    fn piped_stdin(&self) -> bool {
        self.standby || self.slot.is_some()
    }
}

/// A child started with `exec`, or by the fork server.
enum Kid {
    Own(Child),
    Forked(fork_server::Forked),
}

type Input = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;
type Output = Box<dyn AsyncRead + Unpin + Send>;

impl Kid {
    /// Its pid while it runs (`None` once reaped).
    fn id(&self) -> Option<u32> {
        match self {
            Kid::Own(c) => c.id(),
            Kid::Forked(f) => f.id(),
        }
    }

    async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            Kid::Own(c) => c.wait().await,
            Kid::Forked(f) => f.wait().await,
        }
    }

    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self {
            Kid::Own(c) => c.try_wait(),
            Kid::Forked(f) => f.try_wait(),
        }
    }

    /// Sends `signal` unless it has been reaped.
    fn signal(&mut self, signal: Signal) {
        match self {
            Kid::Own(c) => {
                // `id()` is None once the child has been reaped, so the
                // pid cannot have been reused by another process.
                if let Some(pid) = c.id().and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
                }
            }
            Kid::Forked(f) => f.signal(signal),
        }
    }

    fn take_stdin(&mut self) -> Option<Input> {
        match self {
            Kid::Own(c) => c.stdin.take().map(|i| Box::new(i) as Input),
            Kid::Forked(f) => f.stdin.take().map(|i| Box::new(i) as Input),
        }
    }

    fn take_output(&mut self) -> (Option<Output>, Option<Output>) {
        match self {
            Kid::Own(c) => (
                c.stdout.take().map(|o| Box::new(o) as Output),
                c.stderr.take().map(|o| Box::new(o) as Output),
            ),
            Kid::Forked(f) => (
                f.stdout.take().map(|o| Box::new(o) as Output),
                f.stderr.take().map(|o| Box::new(o) as Output),
            ),
        }
    }
}

struct Shared {
    cfg: SupervisorConfig,
    spawner: Spawner,
    /// Workers start from the fork server ([`SupervisorConfig::fork_server`],
    /// and the program is this executable in worker mode).
    forking: bool,
    runs: AtomicU64,
    events: mpsc::UnboundedSender<SupEvent>,
}

impl Shared {
    fn emit(&self, e: SupEvent) {
        let _ = self.events.send(e);
    }

    /// Takes one start from the `max_runs` budget.
    fn take_run(&self) -> bool {
        let Some(max) = self.cfg.max_runs else {
            return true;
        };
        self.runs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Spawns a child of `instance` (a standby, or a plain start) on the
    /// spawner thread; where standbys are kept, with the pipe on which it
    /// says it booted ([`ready`]).
    /// `slot`: the process's transactional id ([`TXN_SLOT`]), given only
    /// where standbys are kept.
    async fn spawn(&self, instance: u32, standby: bool, slot: TxnSlot) -> io::Result<Proc> {
        let incarnation = (standby && self.cfg.standby).then(crate::clock::new_incarnation);
        let spec = ChildSpec {
            instance,
            standby,
            slot: self.cfg.standby.then_some(slot),
            incarnation: incarnation.as_deref(),
        };
        let pipe = if self.cfg.standby {
            Some(ready::Pipe::new()?)
        } else {
            None
        };
        if self.forking {
            match self.fork(&spec, pipe.as_ref()).await {
                Ok(child) => {
                    return Ok(Proc {
                        child: Kid::Forked(child),
                        ready: pipe.and_then(ready::Pipe::spawned),
                        stdin: None,
                        incarnation,
                    })
                }
                // Started with exec instead (said once per reason: the
                // server logs its own failures to our stderr).
                Err(e) => {
                    tracing::debug!("fork server: {e}; starting instance {instance} with exec")
                }
            }
        }
        let mut cmd = self.command(&spec, pipe.is_some());
        if let Some(pipe) = &pipe {
            pipe.give(&mut cmd);
        }
        let child = self.spawner.spawn(cmd).await?;
        Ok(Proc {
            child: Kid::Own(child),
            ready: pipe.and_then(ready::Pipe::spawned),
            stdin: None,
            incarnation,
        })
    }

    /// Starts a child of `instance` from the fork server (started on the
    /// spawner thread if there is none, or anew if the program's file has
    /// changed).
    async fn fork(
        &self,
        spec: &ChildSpec<'_>,
        pipe: Option<&ready::Pipe>,
    ) -> io::Result<fork_server::Forked> {
        use std::os::fd::AsFd as _;
        let output = match self.cfg.output {
            ChildOutput::Prefix => fork_server::Output::Piped,
            ChildOutput::Inherit => fork_server::Output::Inherit,
            ChildOutput::Null => fork_server::Output::Null,
        };
        let stdio = fork_server::Stdio::new(
            spec.piped_stdin(),
            output,
            pipe.map(|p| p.write_end().as_fd()),
        )?;
        let env = self.child_env(spec, pipe.is_some());
        let server = self.spawner.fork_server(self.cfg.program.clone()).await?;
        fork_server::spawn(server, &env, stdio).await
    }

    /// The child's environment on top of the supervisor's (`None`: removed);
    /// `ready`: it gets the ready pipe, at [`ready::FD`].
    fn child_env(&self, spec: &ChildSpec<'_>, ready: bool) -> Vec<(OsString, Option<OsString>)> {
        let ChildSpec {
            instance,
            standby,
            slot,
            incarnation,
        } = *spec;
        let mut env: Vec<(OsString, Option<OsString>)> = self
            .cfg
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        env.push(("INSTANCE_NUMBER".into(), Some(instance.to_string().into())));
        env.push((STANDBY.into(), standby.then(|| OsString::from("1"))));
        env.push((TXN_SLOT.into(), slot.map(|s| OsString::from(s.as_str()))));
        env.push((INCARNATION.into(), incarnation.map(OsString::from)));
        if ready {
            env.push((ready::VAR.into(), Some(ready::FD.to_string().into())));
        }
        env
    }

    fn command(&self, spec: &ChildSpec<'_>, ready: bool) -> Command {
        let mut cmd = Command::new(&self.cfg.program);
        cmd.args(&self.cfg.args)
            .stdin(if spec.piped_stdin() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true);
        for (k, v) in self.child_env(spec, ready) {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let (out, err) = match self.cfg.output {
            ChildOutput::Prefix => (Stdio::piped(), Stdio::piped()),
            ChildOutput::Inherit => (Stdio::inherit(), Stdio::inherit()),
            ChildOutput::Null => (Stdio::null(), Stdio::null()),
        };
        cmd.stdout(out).stderr(err);
        die_with_parent(cmd.as_std_mut());
        cmd
    }
}

/// Resolves when a stop is asked for (or nobody can ask any more).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return;
        }
    }
}

async fn run_instance(instance: u32, sh: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Fate {
    let mut run: u64 = 0;
    let mut restarts = Restarts::new(sh.cfg.restart_delay, sh.cfg.max_restart_delay);
    // The next process, started while the current one runs (dropped, and
    // so killed, with this task), and let go already if the current one
    // said `done` before its exit.
    let mut standby: Option<Next> = None;
    // The transactional id of the instance's current process ([`TXN_SLOT`]);
    // its standby gets the other.
    let mut slot = TxnSlot::Zero;
    loop {
        if *stop.borrow() {
            stop_gone(&mut standby, &sh).await;
            return Fate::Stopped;
        }
        // A standby let go already took its run from the budget then.
        let gone = matches!(standby, Some(Next::Gone(_)));
        if !gone && !sh.take_run() {
            sh.emit(SupEvent::Retired {
                instance,
                reason: Retirement::MaxRuns,
            });
            return Fate::Retired(Retirement::MaxRuns);
        }
        run += 1;
        let promoted = match standby.take() {
            Some(Next::Standby(p)) => promote(p, Went::Exited).await,
            Some(Next::Gone(p)) => Some(p),
            None => None,
        };
        let child = match promoted {
            Some(p) => {
                slot = slot.other();
                Ok((p, true))
            }
            None => {
                crate::account::mark("spawn");
                let c = sh.spawn(instance, false, slot).await;
                crate::account::mark_with("spawned", || spawned_pid(&c));
                // Its standard input, where it is told its heir.
                c.map(|mut c| {
                    c.input();
                    (c, false)
                })
            }
        };
        let delay = match child {
            Err(e) => {
                sh.emit(SupEvent::SpawnFailed {
                    instance,
                    error: e.to_string(),
                });
                restarts.next(false, Duration::ZERO)
            }
            Ok((
                Proc {
                    child,
                    ready,
                    stdin,
                    ..
                },
                relayed,
            )) => {
                let running =
                    run_child(instance, run, &sh, &mut stop, child, relayed, &mut restarts);
                let ran = match ready {
                    Some(ready) => {
                        let (ran, next) = standby_once_booted(
                            instance,
                            &sh,
                            slot.other(),
                            (ready, stdin),
                            running,
                        )
                        .await;
                        standby = next;
                        ran
                    }
                    None => running.await,
                };
                match ran {
                    Ok(delay) => delay,
                    Err(fate) => {
                        stop_gone(&mut standby, &sh).await;
                        return fate;
                    }
                }
            }
        };
        // The next process runs already: no delay to keep.
        if delay.is_zero() || matches!(standby, Some(Next::Gone(_))) {
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stopped(&mut stop) => return Fate::Stopped,
        }
    }
}

/// Runs the current child (`running`: its [`run_child`]) and, once it says
/// it booted ([`ready`]), starts the instance's next standby: not before,
/// so that the standby's own start does not compete with the child's fence
/// and `booted` for the cores (bench/RESULTS.md, issue 35). Without a word
/// within [`ready::PATIENCE`] (a program that is no worker, a first start
/// that settles), the standby starts then; a child that closes the pipe
/// without it (it exits before it boots) gets none: the next start is a
/// plain one.
///
/// A child that says `done` ([`ready::done`]: a clean end, all it does
/// after is exit) lets its standby go at once ([`Next::Gone`]), not once its
/// exit has been torn down and reaped.
///
/// `current`: the child's pipe and its standard input, where it is told
/// its heir, the standby's incarnation
/// ([`INCARNATION`]); a `done` naming that heir lets the standby go with
/// `go handed` (docs/protocol.md R16, "Handed boot").
async fn standby_once_booted(
    instance: u32,
    sh: &Shared,
    slot: TxnSlot,
    current: (ready::Ready, Option<Input>),
    running: impl std::future::Future<Output = Result<Duration, Fate>>,
) -> (Result<Duration, Fate>, Option<Next>) {
    let (mut ready, mut input) = current;
    let mut running = std::pin::pin!(running);
    let said = tokio::select! {
        // A word and the exit can come together: the word first.
        biased;
        said = ready.booted(ready::PATIENCE) => said,
        ran = &mut running => {
            // Its word may have come just before its exit, unseen yet.
            let next = if ready.booted_already() {
                start_standby(instance, sh, slot).await.map(Next::Standby)
            } else {
                None
            };
            return (ran, next);
        }
    };
    let standby = match said {
        ready::Said::Booted | ready::Said::Nothing => start_standby(instance, sh, slot).await,
        ready::Said::Done | ready::Said::Closed => None,
    };
    let Some(mut standby) = standby else {
        return (running.await, None);
    };
    // The standby may initialise its own transactional id only once the
    // current process has booted ([`TXN_SLOT`]): a plain start fences both
    // ids before it boots, and would fence the standby's too. Told now, or
    // when the word comes (a standby started after [`ready::PATIENCE`]).
    // (The line `booted`: whether the standby was told.)
    let mut told = said == ready::Said::Booted && tell(&mut standby, &SupervisorLine::Booted).await;
    // Its heir, told once the standby runs (R16, "Handed boot").
    if let (Some(input), Some(heir)) = (input.as_mut(), standby.incarnation.as_deref()) {
        write_line(input, &SupervisorLine::Heir(heir.into())).await;
    }
    // The child's end, when it came before its word was seen.
    let mut ran_first = None;
    let said = loop {
        tokio::select! {
            biased;
            said = ready.next() => match said {
                ready::Said::Booted => {
                    if !told {
                        told = tell(&mut standby, &SupervisorLine::Booted).await;
                    }
                }
                said => break said,
            },
            ran = &mut running => {
                // Its `done` may have come just before its exit, unseen
                // yet (tokio may learn of the exit first): a `go` instead
                // of `go done` or `go handed` would cost the standby a
                // fence, or a `booted` of its own.
                ran_first = Some(ran);
                break if ready.done_already() {
                    ready::Said::Done
                } else {
                    ready::Said::Closed
                };
            }
        }
    };
    // Let go only within the `max_runs` budget (else it is dismissed as
    // before, once the current process has exited).
    let next = if said == ready::Said::Done && sh.take_run() {
        crate::account::mark("done");
        let went = match (ready.handed(), standby.incarnation.as_deref()) {
            (Some(h), Some(s)) if h == s => Went::Handed,
            _ => Went::Done,
        };
        promote(standby, went).await.map(Next::Gone)
    } else {
        Some(Next::Standby(standby))
    };
    let ran = match ran_first {
        Some(ran) => ran,
        None => running.await,
    };
    (ran, next)
}

/// A standby let go already ([`Next::Gone`]) may hold an order: when the
/// instance stops, it stops as a running process does (SIGTERM, then
/// SIGKILL after the grace), not killed with the rest.
async fn stop_gone(standby: &mut Option<Next>, sh: &Shared) {
    if let Some(Next::Gone(mut p)) = standby.take() {
        terminate(&mut p.child, sh.cfg.stop_grace).await.ok();
    }
}

/// An instance's next process, started while the current one runs.
enum Next {
    /// Standing by: told `go` once the current one has exited.
    Standby(Proc),
    /// Told `go` already: the current one said `done`.
    Gone(Proc),
}

/// Starts a standby for `instance`'s next start ([`STANDBY`]), its output
/// relayed like any child's; `None` (the next start is a plain one) if it
/// cannot be started.
async fn start_standby(instance: u32, sh: &Shared, slot: TxnSlot) -> Option<Proc> {
    crate::account::mark("spawn_standby");
    let spawned = sh.spawn(instance, true, slot).await;
    crate::account::mark_with("spawned_standby", || spawned_pid(&spawned));
    let mut p = spawned.ok()?;
    sh.emit(SupEvent::Standby {
        instance,
        pid: p.child.id().unwrap_or(0),
    });
    if sh.cfg.output == ChildOutput::Prefix {
        relay_output(instance, &mut p.child);
    }
    Some(p)
}

/// A spawned child's pid, for crate::account (0: none).
fn spawned_pid(c: &io::Result<Proc>) -> String {
    c.as_ref()
        .ok()
        .and_then(|p| p.child.id())
        .unwrap_or(0)
        .to_string()
}

/// Writes `line` on a standby's standard input; whether it was written.
async fn tell(p: &mut Proc, line: &SupervisorLine) -> bool {
    let Some(input) = p.input() else {
        return false;
    };
    write_line(input, line).await
}

/// Writes `line` on a child's standard input; whether it was written.
async fn write_line(input: &mut Input, line: &SupervisorLine) -> bool {
    use tokio::io::AsyncWriteExt as _;
    input.write_all(line.text().as_bytes()).await.is_ok() && input.flush().await.is_ok()
}

/// Tells a standby to take over: `go done` when the current process said
/// `done` (`done`: it appends nothing more), `go handed` when that `done`
/// named the standby as its heir ([`INCARNATION`]), else `go`
/// ([`TXN_SLOT`]); `None` if it has exited meanwhile or cannot be told (it
/// is then killed, having appended nothing). Its standard input stays open:
/// once it runs, it is told its own heir there.
async fn promote(mut p: Proc, went: Went) -> Option<Proc> {
    if !matches!(p.child.try_wait(), Ok(None)) {
        return None;
    }
    if !tell(&mut p, &SupervisorLine::Go(went)).await {
        return None;
    }
    crate::account::mark_with("go_sent", || p.child.id().unwrap_or(0).to_string());
    Some(p)
}

/// One run of an instance's child, from its start to its exit: the delay
/// before the next start, or the instance's fate. `relayed`: its output is
/// relayed already (a promoted standby).
async fn run_child(
    instance: u32,
    run: u64,
    sh: &Shared,
    stop: &mut watch::Receiver<bool>,
    mut child: Kid,
    relayed: bool,
    restarts: &mut Restarts,
) -> Result<Duration, Fate> {
    let started = Instant::now();
    let pid = child.id().unwrap_or(0);
    sh.emit(SupEvent::Started { instance, pid, run });
    if sh.cfg.output == ChildOutput::Prefix && !relayed {
        relay_output(instance, &mut child);
    }
    let status = tokio::select! {
        status = child.wait() => status,
        () = stopped(stop) => terminate(&mut child, sh.cfg.stop_grace).await,
    };
    crate::account::mark_with("reaped", || pid.to_string());
    let (code, signal) = match &status {
        Ok(s) => (s.code(), s.signal()),
        Err(_) => (None, None),
    };
    sh.emit(SupEvent::Exited {
        instance,
        pid,
        code,
        signal,
        after: started.elapsed(),
        restarts: run - 1,
    });
    if *stop.borrow() {
        return Err(Fate::Stopped);
    }
    // A configuration error or a fenced worker is not restarted.
    let retire = match code.and_then(Exit::from_code) {
        Some(Exit::Config) => Some(Retirement::ConfigError),
        Some(Exit::Fenced) => Some(Retirement::Fenced),
        _ => None,
    };
    if let Some(reason) = retire {
        sh.emit(SupEvent::Retired { instance, reason });
        return Err(Fate::Retired(reason));
    }
    Ok(restarts.next(code == Some(Exit::Ok.code()), started.elapsed()))
}

/// SIGTERM, then SIGKILL after `grace`; returns the child's exit status.
async fn terminate(child: &mut Kid, grace: Duration) -> io::Result<ExitStatus> {
    child.signal(Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            child.signal(Signal::SIGKILL);
            child.wait().await
        }
    }
}

/// Copies the child's stdout and stderr to our stderr, line by line, with
/// the `[instance] ` prefix. The copiers end at end of file.
fn relay_output(instance: u32, child: &mut Kid) {
    let prefix = format!("[{instance}] ");
    let (out, err) = child.take_output();
    if let Some(out) = out {
        tokio::spawn(relay(prefix.clone(), out));
    }
    if let Some(err) = err {
        tokio::spawn(relay(prefix, err));
    }
}

async fn relay(prefix: String, from: impl AsyncRead + Unpin) {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut from)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        let mut out = Vec::with_capacity(prefix.len() + line.len());
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(&line);
        // One write per line, so lines of different children do not mix.
        let _ = io::stderr().lock().write_all(&out);
    }
}

/// Makes the child get SIGKILL when the *thread* that forks it ends (Linux's
/// `PR_SET_PDEATHSIG`): for a long-lived thread, when the process dies, even
/// by SIGKILL. Used for supervised instances and the fork server (a job's
/// process sets it itself: pool_worker/src/job/spawn.rs).
pub(crate) fn die_with_parent(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt as _;
        let parent = nix::unistd::getpid();
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid). Its error is a bare
        // errno (no allocation): the child then exits 1 without exec.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The parent may have died before prctl: then nobody would
                // send the signal.
                if nix::unistd::getppid() != parent {
                    return Err(nix::errno::Errno::ESRCH.into());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

enum SpawnRequest {
    Exec(Command, oneshot::Sender<io::Result<Child>>),
    /// The fork server for this program (started if there is none, or its
    /// file has changed).
    Server(
        PathBuf,
        oneshot::Sender<io::Result<Arc<fork_server::Server>>>,
    ),
}

/// The one thread that forks every child, and starts the fork server (see
/// "No orphans" in the module docs). It ends when the supervisor drops it.
struct Spawner {
    tx: std::sync::mpsc::Sender<SpawnRequest>,
}

impl Spawner {
    fn start() -> anyhow::Result<Spawner> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow!("the supervisor needs a tokio runtime"))?;
        let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("supervise-spawn".into())
            .spawn(move || {
                // tokio::process registers children with the runtime.
                let _guard = handle.enter();
                let mut server: Option<Arc<fork_server::Server>> = None;
                // A server that could not start is not tried again.
                let mut failed = false;
                while let Ok(request) = rx.recv() {
                    match request {
                        // If the requester is gone, the child is dropped
                        // and, being kill_on_drop, killed.
                        SpawnRequest::Exec(mut cmd, reply) => {
                            let _ = reply.send(cmd.spawn());
                        }
                        SpawnRequest::Server(program, reply) => {
                            let _ = reply.send(serve(&program, &mut server, &mut failed));
                        }
                    }
                }
            })
            .context("cannot start the spawner thread")?;
        Ok(Spawner { tx })
    }

    async fn spawn(&self, cmd: Command) -> io::Result<Child> {
        self.ask(|reply| SpawnRequest::Exec(cmd, reply)).await
    }

    async fn fork_server(&self, program: PathBuf) -> io::Result<Arc<fork_server::Server>> {
        self.ask(|reply| SpawnRequest::Server(program, reply)).await
    }

    /// Sends the spawner thread the request `make` builds around its reply
    /// channel, and waits for the reply.
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<io::Result<T>>) -> SpawnRequest,
    ) -> io::Result<T> {
        let (reply, rx) = oneshot::channel();
        let gone = || io::Error::other("the spawner thread has ended");
        self.tx.send(make(reply)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// The spawner thread's fork server for `program`: the running one, or a
/// new one if there is none, it has ended, or the file at `program` is no
/// longer the one it was started from (the old one is retired: it exits
/// after its last child).
fn serve(
    program: &std::path::Path,
    server: &mut Option<Arc<fork_server::Server>>,
    failed: &mut bool,
) -> io::Result<Arc<fork_server::Server>> {
    if let Some(s) = server.as_ref().filter(|s| s.usable(program)) {
        return Ok(s.clone());
    }
    if *failed {
        return Err(io::Error::other("the fork server could not start"));
    }
    if let Some(old) = server.take() {
        old.retire();
    }
    match fork_server::Server::start(program) {
        Ok(s) => {
            *server = Some(s.clone());
            Ok(s)
        }
        Err(e) => {
            *failed = true;
            tracing::warn!("{e:#}: workers are started with exec");
            Err(io::Error::other(format!("{e:#}")))
        }
    }
}

/// Parses `--instances`: `N` means 1..=N; otherwise a comma-separated list
/// of numbers and inclusive ranges, like `1-4,7` (so instance 7 alone is
/// `7-7`).
pub(crate) fn parse_instances(spec: &str) -> Result<Vec<u32>, String> {
    let spec = spec.trim();
    let number = |s: &str| -> Result<u32, String> {
        let n: u32 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not an instance number"))?;
        if !(1..=crate::record::MAX_INSTANCE).contains(&n) {
            return Err(format!(
                "instance numbers run from 1 to {}, not {n}",
                crate::record::MAX_INSTANCE
            ));
        }
        Ok(n)
    };
    let too_many = || format!("at most {MAX_SUPERVISED} instances");
    if !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()) {
        let n = number(spec)?;
        if n as usize > MAX_SUPERVISED {
            return Err(too_many());
        }
        return Ok((1..=n).collect());
    }
    let mut set = BTreeSet::new();
    for part in spec.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(part)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(format!("range '{}' runs backwards", part.trim()));
        }
        if (hi - lo) as usize >= MAX_SUPERVISED {
            return Err(too_many());
        }
        set.extend(lo..=hi);
        if set.len() > MAX_SUPERVISED {
            return Err(too_many());
        }
    }
    Ok(set.into_iter().collect())
}

/// The parsed `--instances` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instances(pub Vec<u32>);

impl std::str::FromStr for Instances {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_instances(s).map(Instances)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_specs() {
        assert_eq!(parse_instances("3"), Ok(vec![1, 2, 3]));
        assert_eq!(parse_instances(" 1-4,7 "), Ok(vec![1, 2, 3, 4, 7]));
        assert_eq!(parse_instances("7-7"), Ok(vec![7]));
        assert_eq!(parse_instances("2,1,2"), Ok(vec![1, 2]));
        for bad in [
            "", "0", "-1", "1-", "4-2", "a", "1,,2", "1-2-3", "1-100000", "2000", "1,0",
        ] {
            assert!(parse_instances(bad).is_err(), "{bad}");
        }
    }

    fn sh(instances: Vec<u32>, script: &str) -> SupervisorConfig {
        let mut cfg = SupervisorConfig::new(instances).unwrap();
        cfg.program = "/bin/sh".into();
        cfg.args = vec!["-c".into(), script.into()];
        cfg.restart_delay = Duration::from_millis(10);
        cfg.output = ChildOutput::Null;
        cfg
    }

    fn count(events: &[SupEvent], which: impl Fn(&SupEvent) -> bool) -> usize {
        events.iter().filter(|e| which(e)).count()
    }

    async fn collect(cfg: SupervisorConfig) -> (Ending, Vec<SupEvent>) {
        let (_stop_tx, stop) = watch::channel(false);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let ending = tokio::time::timeout(Duration::from_secs(30), supervise(cfg, stop, tx))
            .await
            .expect("supervise ends")
            .unwrap();
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        (ending, events)
    }

    #[tokio::test]
    async fn restarts_until_max_runs() {
        let mut cfg = sh(vec![1, 2], "exit 0");
        cfg.max_runs = Some(5);
        let (ending, events) = collect(cfg).await;
        assert_eq!(ending, Ending::MaxRuns);
        let starts = count(&events, |e| matches!(e, SupEvent::Started { .. }));
        let exits = count(&events, |e| {
            matches!(e, SupEvent::Exited { code: Some(0), .. })
        });
        assert_eq!((starts, exits), (5, 5), "{events:?}");
    }

    /// A standby waits for `go` on its input, then runs; a plain start
    /// runs at once. Each run appends a line to a file: who ran, in order,
    /// then says it booted (as a worker does once it can claim).
    #[tokio::test]
    async fn standbys_take_over_only_when_told() {
        let (runs, events) = runs_with_standbys(4, |dir| {
            format!(
                r#"if [ "$POOL_WORKER_STANDBY" = 1 ]; then until read line || exit 0; [ "$line" != booted ]; do :; done; [ "$line" = go ] || exit 9; echo "standby $$" >> {log}; else echo "plain $$" >> {log}; fi; echo booted >&$POOL_WORKER_READY_FD; exit 0"#,
                log = dir.join("runs").display()
            )
        })
        .await;
        assert_eq!(runs.len(), 4, "{runs:?} {events:?}");
        assert!(
            runs[0].starts_with("plain "),
            "the first start is plain: {runs:?}"
        );
        for r in &runs[1..] {
            assert!(
                r.starts_with("standby "),
                "later starts are promoted standbys: {runs:?}"
            );
        }
        // Every start after the first is of a process that stood by.
        let standbys: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                SupEvent::Standby { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect();
        let started: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                SupEvent::Started { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect();
        assert_eq!(started.len(), 4, "{events:?}");
        assert_eq!(&started[1..], &standbys[..3], "{events:?}");
        // The ran pids are the started ones, in order.
        let ran: Vec<u32> = runs
            .iter()
            .map(|r| r.split(' ').nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(ran, started);
    }

    /// The next standby starts once the current process says it booted
    /// (ready.rs), not with it: each process notes its start, and the first
    /// notes when it says so, after a pause that a standby started at once
    /// would have filled.
    #[tokio::test]
    async fn the_standby_starts_once_the_process_booted() {
        let (runs, events) = two_runs_with_a_standby(|dir| {
            let log = dir.join("runs");
            format!(
                r#"if [ "$POOL_WORKER_STANDBY" = 1 ]; then echo "standby started" >> {log}; until read line || exit 0; [ "$line" != booted ]; do :; done; exit 0; fi; sleep 0.3; echo "plain booted" >> {log}; echo booted >&$POOL_WORKER_READY_FD; sleep 0.3; exit 0"#,
                log = log.display()
            )
        })
        .await;
        assert_eq!(runs, ["plain booted", "standby started"], "{events:?}");
    }

    /// Two runs of one instance with standbys ([`runs_with_standbys`]).
    async fn two_runs_with_a_standby(
        script: impl FnOnce(&std::path::Path) -> String,
    ) -> (Vec<String>, Vec<SupEvent>) {
        runs_with_standbys(2, script).await
    }

    /// `runs` runs of one instance with standbys, `script(dir)` each, in a
    /// temporary `dir`: the lines the script wrote to `dir/runs`, and the
    /// supervisor's events.
    async fn runs_with_standbys(
        runs: u64,
        script: impl FnOnce(&std::path::Path) -> String,
    ) -> (Vec<String>, Vec<SupEvent>) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = sh(vec![1], &script(dir.path()));
        cfg.standby = true;
        cfg.max_runs = Some(runs);
        let (ending, events) = collect(cfg).await;
        assert_eq!(ending, Ending::MaxRuns);
        let runs = std::fs::read_to_string(dir.path().join("runs")).unwrap();
        (runs.lines().map(String::from).collect(), events)
    }

    /// A process that says `done` (ready.rs) lets its standby go at once,
    /// not at its exit: the first process waits (bounded) for the standby
    /// to run before it exits, and notes whether it saw that.
    #[tokio::test]
    async fn done_lets_the_standby_go_before_the_exit() {
        let (runs, events) = two_runs_with_a_standby(|dir| {
            format!(
                r#"if [ "$POOL_WORKER_STANDBY" = 1 ]; then until read line || exit 0; [ "$line" != booted ]; do :; done; [ "$line" = "go done" ] || exit 9; touch {ran}; echo "standby ran" >> {log}; echo booted >&$POOL_WORKER_READY_FD; exit 0; fi; echo booted >&$POOL_WORKER_READY_FD; echo done >&$POOL_WORKER_READY_FD; for i in $(seq 200); do [ -e {ran} ] && break; sleep 0.05; done; if [ -e {ran} ]; then echo "plain saw it" >> {log}; else echo "plain waited in vain" >> {log}; fi; exit 0"#,
                log = dir.join("runs").display(),
                ran = dir.join("standby-ran").display(),
            )
        })
        .await;
        assert_eq!(runs, ["standby ran", "plain saw it"], "{events:?}");
        // The events still tell one process at a time: the first's exit,
        // then the second's start.
        let kinds: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                SupEvent::Started { .. } => Some("started"),
                SupEvent::Exited { .. } => Some("exited"),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            ["started", "exited", "started", "exited"],
            "{events:?}"
        );
    }

    /// With standbys, each process is given one of its instance's two
    /// transactional ids (TXN_SLOT): a standby the one its instance's
    /// current process does not have; it is told once that process has
    /// booted (`booted`), and its `go` says whether that process said
    /// `done` (`go done`) or just exited (`go`). Each run notes its id, the
    /// line that let it go and how many `booted` came before; odd runs say
    /// `done`.
    #[tokio::test]
    async fn standbys_alternate_the_transactional_ids_and_learn_how_the_last_ended() {
        let (runs, events) = runs_with_standbys(4, |dir| {
            format!(
                r#"if [ "$POOL_WORKER_STANDBY" = 1 ]; then b=0; until read line || exit 0; [ "$line" != booted ]; do b=$((b+1)); done; else line=-; b=0; fi; echo "${{POOL_WORKER_TXN_SLOT:-none}} $line $b" >> {log}; n=$(wc -l < {log}); echo booted >&$POOL_WORKER_READY_FD; if [ $((n % 2)) = 1 ]; then echo done >&$POOL_WORKER_READY_FD; fi; exit 0"#,
                log = dir.join("runs").display()
            )
        })
        .await;
        assert_eq!(
            runs,
            ["0 - 0", "1 go done 1", "0 go 1", "1 go done 1"],
            "{events:?}"
        );
        // Without standbys there is one id, and no slot is given.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("runs");
        let mut cfg = sh(
            vec![1],
            &format!(
                r#"echo "${{POOL_WORKER_TXN_SLOT:-none}}" >> {}"#,
                log.display()
            ),
        );
        cfg.max_runs = Some(2);
        collect(cfg).await;
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "none\nnone\n");
    }

    /// R16, "Handed boot": each standby gets an incarnation of the
    /// supervisor's drawing ([`INCARNATION`]), the current process is told
    /// it (`heir X`) once its standby runs, and a `done` naming that heir
    /// lets the standby go with `go handed`; a `done` naming another
    /// incarnation is a plain `go done`.
    #[tokio::test]
    async fn a_done_naming_the_standby_as_heir_lets_it_go_handed() {
        let (runs, events) = runs_with_standbys(4, |dir| {
            format!(
                r#"if [ "$POOL_WORKER_STANDBY" = 1 ]; then until read line || exit 0; [ "$line" != booted ]; do :; done; else line=-; fi; echo "${{POOL_WORKER_INCARNATION:-none}} $line" >> {log}; n=$(wc -l < {log}); echo booted >&$POOL_WORKER_READY_FD; if [ "$POOL_WORKER_STANDBY" != 1 ]; then echo done >&$POOL_WORKER_READY_FD; exit 0; fi; read h || exit 0; if [ "$n" = 2 ]; then echo "done handed ${{h#heir }}" >&$POOL_WORKER_READY_FD; else echo "done handed 0000000000000000" >&$POOL_WORKER_READY_FD; fi; exit 0"#,
                log = dir.join("runs").display(),
            )
        })
        .await;
        assert_eq!(runs.len(), 4, "{runs:?} {events:?}");
        let (incs, lines): (Vec<&str>, Vec<&str>) =
            runs.iter().map(|r| r.split_once(' ').unwrap()).unzip();
        assert_eq!(lines, ["-", "go done", "go handed", "go done"], "{runs:?}");
        assert_eq!(incs[0], "none", "a plain start draws its own");
        for inc in &incs[1..] {
            assert!(crate::config::is_incarnation(inc), "{inc}");
        }
        assert_ne!(incs[1], incs[2]);
    }

    /// A process that ends without saying it booted gets no standby: the
    /// next start is a plain one (no standby waits for a `go`).
    #[tokio::test]
    async fn no_standby_for_a_process_that_never_booted() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("runs");
        let script = format!(
            r#"if [ "$POOL_WORKER_STANDBY" = 1 ]; then echo standby >> {log}; else echo plain >> {log}; fi; exit 0"#,
            log = log.display()
        );
        let mut cfg = sh(vec![1], &script);
        cfg.standby = true;
        cfg.max_runs = Some(3);
        let (ending, events) = collect(cfg).await;
        assert_eq!(ending, Ending::MaxRuns);
        let runs = std::fs::read_to_string(&log).unwrap();
        assert_eq!(runs, "plain\nplain\nplain\n", "{events:?}");
        assert_eq!(count(&events, |e| matches!(e, SupEvent::Standby { .. })), 0);
    }

    /// A process that says nothing (a program that is no worker) still
    /// gets its standby, after [`ready::PATIENCE`], while it runs.
    #[tokio::test]
    async fn a_silent_process_gets_its_standby_after_the_patience() {
        let mut cfg = sh(
            vec![1],
            r#"if [ "$POOL_WORKER_STANDBY" = 1 ]; then until read line || exit 0; [ "$line" != booted ]; do :; done; exit 0; fi; sleep 3; exit 0"#,
        );
        cfg.standby = true;
        cfg.max_runs = Some(1);
        let (ending, events) = collect(cfg).await;
        assert_eq!(ending, Ending::MaxRuns);
        let standby = events
            .iter()
            .position(|e| matches!(e, SupEvent::Standby { .. }));
        let exited = events
            .iter()
            .position(|e| matches!(e, SupEvent::Exited { .. }));
        assert!(
            matches!((standby, exited), (Some(s), Some(x)) if s < x),
            "a standby while the silent process ran: {events:?}"
        );
    }

    #[test]
    fn backoff_after_failures_only() {
        let (ms, s) = (Duration::from_millis, Duration::from_secs);
        let mut b = Restarts::new(ms(100), s(1));
        assert_eq!(b.next(true, ms(5)), Duration::ZERO, "a clean exit: at once");
        let row: Vec<Duration> = (0..6).map(|_| b.next(false, ms(5))).collect();
        assert_eq!(
            row,
            [ms(100), ms(200), ms(400), ms(800), s(1), s(1)],
            "doubling, capped"
        );
        assert_eq!(
            b.next(true, ms(5)),
            Duration::ZERO,
            "clean exits are never delayed"
        );
        assert_eq!(b.next(false, ms(5)), ms(100), "a clean exit ends the row");
        assert_eq!(b.next(false, ms(5)), ms(200));
        assert_eq!(
            b.next(false, s(2)),
            ms(100),
            "a long run before the failure ends the row"
        );
        let mut b = Restarts::new(ms(100), s(30));
        assert_eq!(
            (0..100).map(|_| b.next(false, ms(1))).last(),
            Some(s(30)),
            "no overflow"
        );
    }

    #[tokio::test]
    async fn clean_exits_restart_at_once() {
        // With an hour's delay after a failure, three runs of a child that
        // exits 0 end only if a clean exit is restarted without it.
        let mut cfg = sh(vec![1], "exit 0");
        cfg.restart_delay = Duration::from_secs(3600);
        cfg.max_restart_delay = Duration::from_secs(3600);
        cfg.max_runs = Some(3);
        let (ending, events) = collect(cfg).await;
        assert_eq!(ending, Ending::MaxRuns);
        assert_eq!(
            count(&events, |e| matches!(
                e,
                SupEvent::Exited { code: Some(0), .. }
            )),
            3
        );
    }

    #[tokio::test]
    async fn config_error_and_fence_retire() {
        let (ending, events) = collect(sh(vec![1, 2], "exit 2")).await;
        assert_eq!(ending, Ending::ConfigError);
        assert_eq!(count(&events, |e| matches!(e, SupEvent::Started { .. })), 2);
        let script = r#"[ "$INSTANCE_NUMBER" = 1 ] && exit 2; exit 3"#;
        let (ending, events) = collect(sh(vec![1, 2], script)).await;
        assert_eq!(ending, Ending::ConfigError);
        assert!(events.contains(&SupEvent::Retired {
            instance: 2,
            reason: Retirement::Fenced
        }));
        let (ending, _) = collect(sh(vec![4], "exit 3")).await;
        assert_eq!(ending, Ending::Fenced);
    }

    #[tokio::test]
    async fn stop_terms_then_kills() {
        // The child ignores SIGTERM (and says so in a file once it does), so
        // stopping needs the SIGKILL.
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let script = format!(
            "trap '' TERM; : > '{}'; while :; do sleep 1; done",
            ready.display()
        );
        let mut cfg = sh(vec![1], &script);
        cfg.stop_grace = Duration::from_millis(300);
        let (mut sup, mut events) = Supervisor::spawn(cfg);
        let first = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .unwrap();
        assert!(
            matches!(
                first,
                Some(SupEvent::Started {
                    instance: 1,
                    run: 1,
                    ..
                })
            ),
            "{first:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "the child never became ready");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        sup.stop();
        let ending = tokio::time::timeout(Duration::from_secs(10), sup.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ending, Ending::Stopped);
        let exited = events.recv().await;
        assert!(
            matches!(
                exited,
                Some(SupEvent::Exited {
                    signal: Some(s),
                    ..
                }) if s == Signal::SIGKILL as i32
            ),
            "{exited:?}"
        );
    }

    #[tokio::test]
    async fn spawn_failure_is_an_event() {
        let mut cfg = sh(vec![1], "");
        cfg.program = "/nonexistent/pool_worker".into();
        cfg.max_runs = Some(2);
        let (ending, events) = collect(cfg).await;
        assert_eq!(ending, Ending::MaxRuns);
        assert_eq!(
            count(&events, |e| matches!(e, SupEvent::SpawnFailed { .. })),
            2
        );
    }

    #[test]
    fn event_lines() {
        let e = SupEvent::Exited {
            instance: 3,
            pid: 1234,
            code: Some(0),
            signal: None,
            after: Duration::from_millis(1200),
            restarts: 5,
        };
        assert_eq!(
            e.human(),
            "instance 3 exited code 0 after 1.2s (restarts: 5)"
        );
        assert_eq!(
            e.json_line(),
            r#"{"event":"exited","instance":3,"pid":1234,"code":0,"signal":null,"after_ms":1200,"restarts":5}"#
        );
        let s = SupEvent::Started {
            instance: 3,
            pid: 1234,
            run: 1,
        };
        assert_eq!(s.human(), "instance 3 started pid 1234");
        assert_eq!(
            s.json_line(),
            r#"{"event":"started","instance":3,"pid":1234,"run":1}"#
        );
    }
}
