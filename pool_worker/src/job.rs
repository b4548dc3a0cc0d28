//! Running one work order: a process group, bounded output, a time limit.
//!
//! [`run`] turns a validated [`OrderSpec`] into an [`Outcome`]. It never
//! fails and never panics: a program that cannot be started is an `error`
//! outcome, one the allow list forbids is `refused`, and whatever the job does
//! (exit, crash, hang, print gigabytes, fork daemons) ends as a bounded
//! record that fits in a `completed` message.
//!
//! The design follows from three facts about running untrusted commands:
//!
//! * **A job is a process tree, not a process.** `sh -c 'a & b'` starts
//!   processes that outlive `sh`. Every job gets its own group
//!   (its id is the main process's pid) and the whole
//!   group is sent `SIGKILL` on timeout, on cancellation, and when the job
//!   ends. A process that leaves the group (`setsid`, `setpgid`) or is
//!   orphaned is still the worker's: worker mode makes the worker a child
//!   subreaper and, with [`JobContext::end_descendants`], ends every
//!   descendant when the job ends (`isolate::end_descendants`). Nothing a
//!   job starts survives the order, so an order that is run again elsewhere
//!   after a takeover cannot race its own leftovers.
//!
//!   If the worker itself is killed (SIGKILL), the job's main process gets
//!   SIGKILL too (`PR_SET_PDEATHSIG`); its own children outlive it unless
//!   they die with it (a shell's pipeline does), which is one more reason
//!   for `image` orders.
//!
//! * **A job is not a copy of the worker.** Its process is started with
//!   `clone(CLONE_VM | CLONE_VFORK)` and set up with raw system calls
//!   before its `exec` (`job/spawn.rs`, which says why): a `fork` of the
//!   worker, many threads and megabytes, cost about 1 ms of CPU per order.
//!
//! * **Output is unbounded, memory is not.** stdout and stderr are read
//!   concurrently (reading one while the job blocks writing the other would
//!   deadlock) into [`Tail`] buffers that keep only the last `output_limit`
//!   bytes: the end of the output is where the error usually is.
//!
//! * **Exit is not the end.** The main process may exit while a background
//!   child still holds the pipes open. After the exit the tails are read for
//!   at most [`EXIT_GRACE`], then the group is killed and reading stops.
//!
//! Before anything runs, the order is checked against the allow lists
//! (`policy`): its `env` against the fixed floor and `ORDER_ENV_ALLOW`, its
//! program against `ALLOWED_COMMANDS` (names resolved to absolute paths when
//! the worker started; a path canonicalized and matched on whole segments),
//! its image against `ALLOWED_IMAGES`. A crossing is a `refused` outcome
//! that names the list; nothing is started.
//!
//! The job's environment is the worker's, minus the operator's deny list
//! (so that, for example, the worker's Kafka credentials do not leak into
//! jobs), plus the order's `env` (as checked), plus six variables that tell
//! the job who it is (`ORDER_TOPIC`, `ORDER_PARTITION`, `ORDER_OFFSET`,
//! `INSTANCE_NUMBER`, `ORDER_ATTEMPT`, `ORDER_RETRY`), set last so an order
//! cannot forge them (`ORDER_TOPIC:ORDER_PARTITION:ORDER_OFFSET` is the
//! order's idempotency key, R45).
//! With a job user (`JOB_USER`), `HOME`, `USER` and `LOGNAME` are the job
//! user's, and the job runs with that user's uid, gid and groups and the
//! per-job limits (`isolate`).
//!
//! An image order runs a `docker run` line the pool builds itself (see
//! [`docker_args`]): the image (from `ALLOWED_IMAGES`) and the order's
//! arguments come after every option, so an order can add no mount, no
//! `--privileged`, no option at all. The docker CLI is found through the
//! worker's `PATH` when it starts, and is not an allowed command by virtue
//! of image orders being allowed.
//!
//! URL orders are fetched, not run (`fetch`); the caller parses the body
//! with `orders::parse_url_body` and runs the result.

use crate::guard::{GuardFeed, GuardProc, Report};
use crate::isolate::{JobUser, Limits};
use crate::orders::{OrderKind, OrderSpec};
use crate::policy::Commands;
use crate::record::size::Tail;
use crate::record::{OrderId, Outcome, Status};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use spawn::{Child, Spec};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::watch;
use tokio::time::Instant;

mod spawn;

/// Default time limit of an order that names none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long output is still read after the job's main process exits.
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(1);

/// How long reaping a killed process, or `docker kill`, may take.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// How long ending a job's leftover processes may take.
const END_DESCENDANTS: Duration = Duration::from_secs(5);

/// Everything about one run of one order that is not in the order itself.
#[derive(Clone, Debug)]
pub(crate) struct JobContext {
    pub(crate) order: OrderId,
    /// The Kafka name of the order's topic (`ORDER_TOPIC`; R57: the main
    /// topic's too, which the order id leaves unnamed).
    pub(crate) order_topic: String,
    /// This worker's instance number (`INSTANCE_NUMBER`).
    pub(crate) instance: u32,
    /// Which run of the order this is, 1 for the first (`ORDER_ATTEMPT`).
    pub(crate) attempt: u32,
    /// The limit for orders that do not set `timeout_secs`.
    pub(crate) default_timeout: Duration,
    /// Bytes kept of the end of each of stdout and stderr.
    pub(crate) output_limit: usize,
    /// Environment variable names removed from the job's environment: exact
    /// names, or prefixes written with a trailing `*` (`KAFKA_*`).
    pub(crate) env_deny: Vec<String>,
    /// `ORDER_ENV_ALLOW`: what an order's `env` may set (on top of the
    /// fixed floor, `policy::ENV_FLOOR`); `None` allows every other name.
    pub(crate) env_allow: Option<Vec<String>>,
    /// `ALLOWED_COMMANDS`, resolved; `None` allows every program.
    pub(crate) commands: Option<Arc<Commands>>,
    /// `ALLOWED_IMAGES`; `None` refuses every image order.
    pub(crate) allowed_images: Option<Vec<String>>,
    /// The docker CLI used for `image` orders (a name is looked up in the
    /// worker's `PATH`).
    pub(crate) docker_program: String,
    /// `JOB_USER`: run jobs as this user.
    pub(crate) user: Option<Arc<JobUser>>,
    /// Per-job resource limits.
    pub(crate) limits: Limits,
    /// End every descendant of this process when the job ends (worker
    /// mode, where every child is a job's; never in a process that runs
    /// several jobs at once).
    pub(crate) end_descendants: bool,
    /// The job's guard (R53, pool_worker/src/guard.rs) and its deadlines; `None`: the
    /// job runs unguarded (no leases: the tools' and the tests' jobs).
    pub(crate) guard: Option<GuardFeed>,
}

impl JobContext {
    /// A context with the default limits, no deny list and no allow list
    /// (image orders refused).
    pub(crate) fn new(order: OrderId, instance: u32, attempt: u32) -> Self {
        JobContext {
            order,
            order_topic: String::new(),
            instance,
            attempt,
            default_timeout: DEFAULT_TIMEOUT,
            output_limit: crate::record::size::DEFAULT_OUTPUT_LIMIT,
            env_deny: Vec::new(),
            env_allow: None,
            commands: None,
            allowed_images: None,
            docker_program: "docker".into(),
            user: None,
            limits: Limits::default(),
            end_descendants: false,
            guard: None,
        }
    }

    /// The container name of an `image` order: unique per order and attempt,
    /// so that a timed-out container can be found and killed.
    fn container_name(&self) -> String {
        // An order of a priority topic (R57) has its topic in the name: the
        // same partition and offset in two topics are two orders.
        let topic = match self.order.topic.name() {
            Some(t) => format!("{t}-"),
            None => String::new(),
        };
        format!(
            "pool_worker-{}-{topic}{}-{}-a{}",
            self.instance, self.order.partition, self.order.offset, self.attempt
        )
    }
}

/// What to run for an order: the file, its `argv[0]` and arguments, or the
/// refusal (or error) that ends it before anything starts.
#[allow(clippy::result_large_err)] // the Err is the order's completion, made once per order: boxing buys nothing
fn choose(spec: &OrderSpec, ctx: &JobContext) -> Result<(PathBuf, String, Vec<String>), Outcome> {
    let image = matches!(spec.kind, OrderKind::Image { .. });
    if let Err(why) = crate::policy::check_env(&spec.env, &ctx.env_allow, image) {
        return Err(Outcome::not_run(Status::Refused, why.to_string()));
    }
    let (program, args) = match &spec.kind {
        OrderKind::Url { .. } => {
            return Err(Outcome::not_run(
                Status::Error,
                "URL orders must be fetched before running",
            ))
        }
        // `parse` guarantees one script; a hand-built spec gets its words joined.
        OrderKind::Command { argv } if spec.shell => {
            ("sh".to_string(), vec!["-c".into(), argv.join(" ")])
        }
        OrderKind::Command { argv } => match argv.split_first() {
            Some((p, rest)) if !p.is_empty() => (p.clone(), rest.to_vec()),
            _ => return Err(Outcome::not_run(Status::Error, "the order has no program")),
        },
        OrderKind::Image { image, args } => {
            if let Err(why) = crate::policy::check_image(image, &ctx.allowed_images) {
                return Err(Outcome::not_run(Status::Refused, why.to_string()));
            }
            let Some(path) = resolve(&ctx.docker_program) else {
                let why = format!(
                    "cannot run image orders: '{}' not found in PATH",
                    ctx.docker_program
                );
                return Err(Outcome::not_run(Status::Error, why));
            };
            return Ok((path, "docker".into(), docker_args(spec, ctx, image, args)));
        }
    };
    let path = match &ctx.commands {
        Some(commands) => {
            let real = if program.contains('/') {
                crate::policy::canonical(&program)
            } else {
                None
            };
            commands
                .decide(&program, real.as_deref())
                .map_err(|why| Outcome::not_run(Status::Refused, why.to_string()))?
        }
        None => resolve(&program).ok_or_else(|| {
            Outcome::not_run(
                Status::Error,
                format!("cannot run '{program}': not found in PATH"),
            )
        })?,
    };
    Ok((path, program, args))
}

/// Runs one order to its end and says how it ended. When `cancel` becomes
/// `true` the job's process group is killed and the outcome is an `error`
/// starting with `cancelled:`. A dropped sender never cancels.
pub(crate) async fn run(
    spec: &OrderSpec,
    ctx: &JobContext,
    mut cancel: watch::Receiver<bool>,
) -> Outcome {
    let (path, program, args) = match choose(spec, ctx) {
        Ok(chosen) => chosen,
        Err(outcome) => return outcome,
    };
    if *cancel.borrow() {
        return Outcome::not_run(Status::Error, "cancelled: before the job started");
    }
    let env = job_env(std::env::vars_os(), spec, ctx);
    let started = Instant::now();
    crate::account::mark("job_spawn");
    let spawned = Child::spawn(&command(spec, ctx, &path, &program, &args, &env));
    crate::account::mark("job_started");
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let mut o = Outcome::not_run(Status::Error, format!("cannot run '{program}': {e}"));
            o.duration_ms = millis(started.elapsed());
            return o;
        }
    };
    // (killpg(0) or killpg(1) would hit the worker or everything: never.)
    let group = i32::try_from(child.id())
        .ok()
        .filter(|&pid| pid > 1)
        .map(|pid| Group(Pid::from_raw(pid)));
    let limit = spec.timeout.unwrap_or(ctx.default_timeout);
    // An absurd limit is "never", not an overflow.
    let deadline = started
        .checked_add(limit)
        .unwrap_or_else(|| started + Duration::from_secs(30 * 365 * 86400));
    let guard = start_guard(ctx, group.as_ref(), spec, &path).await;
    crate::account::mark("guard_started");
    let (end, out, err) = wait(
        &mut child,
        group.as_ref(),
        Limit {
            deadline,
            guard,
            frozen: None,
        },
        &mut cancel,
        spec,
        ctx,
    )
    .await;
    crate::account::mark("job_reaped");
    // Kills whatever the job left behind. The main process is reaped by
    // now, but Linux does not reuse a pid while a group of that id has members.
    drop(group);
    if ctx.end_descendants {
        end_descendants(ctx.order).await;
    }
    let mut outcome = match end {
        End::Exited(Ok(status)) => exited(status),
        End::Exited(Err(e)) => Outcome::not_run(
            Status::Error,
            format!("waiting for '{program}' failed: {e}"),
        ),
        End::TimedOut => Outcome::not_run(
            Status::TimedOut,
            format!("time limit of {} s passed", limit.as_secs_f64()),
        ),
        End::Cancelled => Outcome::not_run(Status::Error, "cancelled: the worker stopped the job"),
        End::Unguarded(why) => Outcome::not_run(
            Status::Error,
            format!("{why}: the job was killed rather than run unguarded (R53)"),
        ),
    };
    outcome.duration_ms = millis(started.elapsed());
    outcome.stdout_tail = out.into_string();
    outcome.stderr_tail = err.into_string();
    outcome
}

/// The job's command: its own process group, the job's environment, no
/// stdin, piped output, the job user and limits, the parent-death signal
/// and no descriptor of the worker's beyond the standard three (see
/// pool_worker/src/job/spawn.rs). Should the worker be killed (SIGKILL),
/// its job's main process dies with it instead of running on as an orphan
/// beside the retry that the next incarnation starts. (A process the job
/// started that left the job's main process behind is not covered: see the
/// module doc.) An image order's limits are the container's, set by
/// `docker run`: the docker CLI itself needs more address space than a job
/// may get.
fn command<'a>(
    spec: &OrderSpec,
    ctx: &'a JobContext,
    path: &'a Path,
    program: &'a str,
    args: &'a [String],
    env: &'a BTreeMap<OsString, OsString>,
) -> Spec<'a> {
    let limits = if matches!(spec.kind, OrderKind::Image { .. }) {
        Limits::default()
    } else {
        ctx.limits
    };
    Spec {
        path,
        arg0: program,
        args,
        env,
        user: ctx.user.as_deref(),
        limits,
    }
}

/// Reads the job's output until it exits, times out or is cancelled; kills
/// its group unless it exited. How it ended, and the tails of stdout and stderr.
async fn wait(
    child: &mut Child,
    group: Option<&Group>,
    mut limit: Limit,
    cancel: &mut watch::Receiver<bool>,
    spec: &OrderSpec,
    ctx: &JobContext,
) -> (End, Tail, Tail) {
    let mut out = Tail::new(ctx.output_limit);
    let mut err = Tail::new(ctx.output_limit);
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let mut ever_frozen = false;
    let end = {
        let reading = async {
            tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err));
        };
        tokio::pin!(reading);
        let mut read_done = false;
        let end = loop {
            if let Some(Err(why)) = &limit.guard {
                break End::Unguarded(why.clone());
            }
            tokio::select! {
                // The guard first: a job frozen while the worker was
                // stopped must not time out for the time it was frozen.
                biased;
                step = guard_step(&mut limit.guard) => match step {
                    GuardStep::Report(Report::Frozen(at)) => {
                        limit.frozen = Some(at);
                        ever_frozen = true;
                        tracing::info!(order = %ctx.order, instance = ctx.instance, attempt = ctx.attempt, "job frozen: its hold's deadline passed with no newer renewal read back (R53)");
                    }
                    GuardStep::Report(Report::Thawed(at)) => {
                        let ms = limit.frozen.take().map_or(0, |f| at.saturating_sub(f));
                        // Frozen time does not count toward the time limit.
                        limit.deadline += Duration::from_millis(ms);
                        tracing::info!(order = %ctx.order, instance = ctx.instance, attempt = ctx.attempt, frozen_ms = ms, "job thawed: a renewal of its hold was read back (R53)");
                    }
                    GuardStep::Report(Report::Gone) => {
                        break End::Unguarded("the job's guard exited unexpectedly".into())
                    }
                    GuardStep::Deadline(Some(until)) => {
                        if let Some(Ok(g)) = limit.guard.as_mut() {
                            // A guard that cannot be reached is gone: its
                            // report says so next.
                            g.proc.until(until).await;
                        }
                    }
                    GuardStep::Deadline(None) => {}
                    GuardStep::NoMoreDeadlines => {
                        if let Some(Ok(g)) = limit.guard.as_mut() {
                            g.deadlines = None;
                        }
                    }
                },
                status = child.wait() => break End::Exited(status),
                () = &mut reading, if !read_done => read_done = true,
                () = tokio::time::sleep_until(limit.deadline), if limit.frozen.is_none() => break End::TimedOut,
                () = cancelled(cancel) => break End::Cancelled,
            }
        };
        // The guard first, so that it no longer freezes or thaws what is
        // killed below.
        if let Some(Ok(g)) = limit.guard.take() {
            g.proc.end().await;
        }
        if !matches!(end, End::Exited(_)) {
            // Kill before reaping: while the main process is an unreaped
            // zombie its pid, hence the group id, cannot be reused.
            // (SIGKILL ends stopped processes too.)
            if let Some(g) = group {
                g.kill();
            }
            let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
            if matches!(spec.kind, OrderKind::Image { .. }) {
                // A paused container cannot be killed: unpause it first.
                if ever_frozen {
                    docker(ctx, "unpause").await;
                }
                // Killing the docker CLI does not stop its container.
                docker(ctx, "kill").await;
            }
        }
        if !read_done {
            let _ = tokio::time::timeout(EXIT_GRACE, &mut reading).await;
        }
        end
    };
    (end, out, err)
}

/// Ends the processes that left the job's group (setsid) or were orphaned:
/// a subreaper's.
async fn end_descendants(order: OrderId) {
    let ended =
        tokio::task::spawn_blocking(|| crate::isolate::end_descendants(END_DESCENDANTS)).await;
    if let Ok(n @ 1..) = ended {
        tracing::info!(order = %order, processes = n, "ended processes the job left behind");
    }
}

enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
    /// The job's guard could not be started, or exited while the job ran.
    Unguarded(String),
}

/// The job's time limit, which frozen time does not count toward, and its
/// guard (`Err`: it could not be started).
struct Limit {
    deadline: Instant,
    guard: Option<Result<Guarded, String>>,
    /// Since when (`CLOCK_BOOTTIME`, ms) the guard says the job is frozen.
    frozen: Option<u64>,
}

/// A running guard and the deadlines to forward to it.
struct Guarded {
    proc: GuardProc,
    deadlines: Option<watch::Receiver<Option<u64>>>,
}

/// Starts the job's guard, with the newest deadline (none yet: freeze at
/// once). `None` without a guard feed.
async fn start_guard(
    ctx: &JobContext,
    group: Option<&Group>,
    spec: &OrderSpec,
    path: &Path,
) -> Option<Result<Guarded, String>> {
    let feed = ctx.guard.as_ref()?;
    let Some(group) = group else {
        return Some(Err("the job has no process group to guard".into()));
    };
    let mut deadlines = feed.deadlines.clone();
    let until = deadlines.borrow_and_update().unwrap_or(0);
    let name = ctx.container_name();
    let container = matches!(spec.kind, OrderKind::Image { .. }).then_some((path, name.as_str()));
    Some(
        GuardProc::start(feed, group.0.as_raw(), until, container)
            .await
            .map(|proc| Guarded {
                proc,
                deadlines: Some(deadlines),
            })
            .map_err(|e| format!("cannot start the job's guard: {e}")),
    )
}

/// What the guard or its deadlines brought.
enum GuardStep {
    Report(Report),
    Deadline(Option<u64>),
    /// The deadlines' sender is gone: no more come.
    NoMoreDeadlines,
}

/// The next thing about the guard; never, without one.
async fn guard_step(guard: &mut Option<Result<Guarded, String>>) -> GuardStep {
    let Some(Ok(g)) = guard else {
        return std::future::pending().await;
    };
    let deadline = async {
        match g.deadlines.as_mut() {
            Some(d) => match d.changed().await {
                Ok(()) => GuardStep::Deadline(*d.borrow_and_update()),
                Err(_) => GuardStep::NoMoreDeadlines,
            },
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        r = g.proc.report() => GuardStep::Report(r),
        step = deadline => step,
    }
}

fn exited(status: ExitStatus) -> Outcome {
    let mut o = Outcome::not_run(Status::Ok, "");
    o.reason = None;
    match (status.code(), status.signal()) {
        (Some(0), _) => o.exit_code = Some(0),
        (Some(code), _) => {
            o.status = Status::Failed;
            o.exit_code = Some(code);
        }
        (None, signal) => {
            o.status = Status::Failed;
            o.reason = Some(match signal {
                Some(s) => format!("killed by signal {s}"),
                None => format!("ended with {status}"),
            });
        }
    }
    o
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Resolves once `cancel` is `true`; never, if its sender is gone.
async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A job's process group, killed when this is dropped.
struct Group(Pid);

impl Group {
    fn kill(&self) {
        // A group that is already gone is ESRCH, which is fine.
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `program` itself if it names a path, else the first executable file of
/// that name in the worker's `PATH`.
fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    crate::policy::find_in_path(program, std::env::var_os("PATH").as_deref())
}

/// The job's environment, from the worker's (`inherited`): see the module docs.
fn job_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    spec: &OrderSpec,
    ctx: &JobContext,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = inherited.into_iter().collect();
    env.extend(spec.env.iter().map(|(k, v)| (k.into(), v.into())));
    env.retain(|name, _| !denied(name, &ctx.env_deny));
    if let Some(user) = &ctx.user {
        let home = user.home.clone().unwrap_or_else(|| "/".into());
        for (name, value) in [
            ("HOME", home),
            ("USER", user.name.clone()),
            ("LOGNAME", user.name.clone()),
        ] {
            env.insert(name.into(), value.into());
        }
    }
    for (name, value) in own_vars(ctx) {
        env.insert(name.into(), value.into());
    }
    // The order's trace context (checked when it was parsed), set last too.
    if let Some(t) = &spec.traceparent {
        env.insert(TRACEPARENT.into(), t.into());
    }
    env
}

/// The variable that carries an order's W3C trace context to its job.
pub(crate) const TRACEPARENT: &str = "TRACEPARENT";

/// The variables that tell a job which order and run it is.
fn own_vars(ctx: &JobContext) -> [(&'static str, String); 6] {
    [
        ("ORDER_TOPIC", ctx.order_topic.clone()),
        ("ORDER_PARTITION", ctx.order.partition.to_string()),
        ("ORDER_OFFSET", ctx.order.offset.to_string()),
        ("INSTANCE_NUMBER", ctx.instance.to_string()),
        ("ORDER_ATTEMPT", ctx.attempt.to_string()),
        (
            "ORDER_RETRY",
            if ctx.attempt > 1 { "1" } else { "0" }.to_string(),
        ),
    ]
}

fn denied(name: &OsStr, deny: &[String]) -> bool {
    let name = name.as_bytes();
    deny.iter().any(|d| match d.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix.as_bytes()),
        None => name == d.as_bytes(),
    })
}

/// `docker run` arguments for an image order, built by the pool: options
/// first, then the image, then the order's arguments (which docker passes
/// to the container, never reads as its own options), so an order can add
/// no mount, no `--privileged`, no capability. The container gets no new
/// privileges (no setuid escalation inside) and the per-job limits.
/// Variables are passed as `-e NAME`, which copies the value from the docker
/// CLI's own environment (the job environment built above, the order's part
/// checked by `policy::check_env`): values never appear on a command line
/// that every local user can read in /proc.
fn docker_args(spec: &OrderSpec, ctx: &JobContext, image: &str, args: &[String]) -> Vec<String> {
    let mut v = vec![
        "run".into(),
        "--rm".into(),
        "--name".into(),
        ctx.container_name(),
        "--security-opt".into(),
        "no-new-privileges".into(),
    ];
    if let Some(bytes) = ctx.limits.memory_bytes {
        v.push(format!("--memory={bytes}b"));
    }
    if let Some(n) = ctx.limits.processes {
        v.push(format!("--pids-limit={n}"));
    }
    if let Some(n) = ctx.limits.open_files {
        v.push(format!("--ulimit=nofile={n}:{n}"));
    }
    let own = own_vars(ctx).map(|(name, _)| name);
    let trace = spec.traceparent.as_ref().map(|_| TRACEPARENT);
    let from_order = spec.env.keys().map(String::as_str);
    let from_order = from_order
        .filter(|k| !denied(OsStr::new(k), &ctx.env_deny) && !own.contains(k) && trace != Some(*k));
    for name in from_order.chain(own).chain(trace) {
        v.push("-e".into());
        v.push(name.into());
    }
    v.push(image.into());
    v.extend(args.iter().cloned());
    v
}

/// Best effort: `docker VERB CONTAINER` for a killed image order (`kill`
/// stops its container; `unpause` first if it was frozen).
async fn docker(ctx: &JobContext, verb: &str) {
    let Some(path) = resolve(&ctx.docker_program) else {
        return;
    };
    let mut cmd = Command::new(path);
    cmd.args([verb, &ctx.container_name()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Ok(mut child) = cmd.spawn() {
        let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
    }
}

/// Reads a pipe to its end, keeping the tail.
async fn drain<R: AsyncRead + Unpin>(pipe: Option<R>, tail: &mut Tail) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => tail.push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The pid a job wrote to `path`.
    fn read_pid(path: &Path) -> u32 {
        std::fs::read_to_string(path)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn cmd(argv: &[&str]) -> OrderSpec {
        OrderSpec::command(argv.iter().map(|s| s.to_string()).collect())
    }

    fn sh(script: &str) -> OrderSpec {
        OrderSpec {
            shell: true,
            ..cmd(&[script])
        }
    }

    fn ctx() -> JobContext {
        JobContext::new(OrderId::new(2, 40), 3, 1)
    }

    fn never() -> watch::Receiver<bool> {
        watch::channel(false).1
    }

    async fn run_(spec: &OrderSpec, ctx: &JobContext) -> Outcome {
        run(spec, ctx, never()).await
    }

    /// Whether the process is gone: no /proc entry, or a zombie waiting for
    /// an init that may not reap.
    fn dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    /// SIGKILL is delivered asynchronously; allow a dying process a moment.
    async fn assert_dies(pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !dead(pid) {
            assert!(Instant::now() < deadline, "process {pid} survived its job");
            tokio::task::yield_now().await;
        }
    }

    /// Writes an executable script from a child process, so that no fd open
    /// for writing leaks into a concurrent fork (which would make exec fail
    /// with ETXTBSY).
    fn script(path: &Path, body: &str) {
        let ok = std::process::Command::new("sh")
            .args([
                "-c",
                r#"printf '%s\n' "$1" > "$2" && chmod +x "$2""#,
                "sh",
                body,
            ])
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    #[tokio::test]
    async fn exit_codes() {
        let o = run_(&cmd(&["true"]), &ctx()).await;
        assert_eq!(
            (o.status, o.exit_code, o.reason),
            (Status::Ok, Some(0), None)
        );
        let o = run_(&sh("echo out; echo err >&2; exit 3"), &ctx()).await;
        assert_eq!((o.status, o.exit_code), (Status::Failed, Some(3)));
        assert_eq!(
            (o.stdout_tail.as_str(), o.stderr_tail.as_str()),
            ("out\n", "err\n")
        );
        let o = run_(&sh("kill -TERM $$"), &ctx()).await;
        assert_eq!((o.status, o.exit_code), (Status::Failed, None));
        assert_eq!(o.reason.as_deref(), Some("killed by signal 15"));
    }

    #[tokio::test]
    async fn output_tail_is_bounded_and_is_the_end() {
        let mut c = ctx();
        c.output_limit = 1000;
        let job = sh("head -c 1000000 /dev/zero | tr '\\0' a; printf END; head -c 3000000 /dev/zero >&2; printf ERR >&2");
        let o = run_(&job, &c).await;
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.stdout_tail.len(), 1000);
        assert!(o.stdout_tail.ends_with("aaaEND"));
        assert_eq!(o.stderr_tail.len(), 1000);
        assert!(o.stderr_tail.ends_with("\0ERR"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg");
        let mut job = sh(&format!(
            "sleep 30 & echo $! > {}; sleep 30",
            pidfile.display()
        ));
        job.timeout = Some(Duration::from_millis(700));
        let o = run_(&job, &ctx()).await;
        assert_eq!(o.status, Status::TimedOut);
        assert_eq!(o.reason.as_deref(), Some("time limit of 0.7 s passed"));
        assert!((700..10_000).contains(&o.duration_ms), "{}", o.duration_ms);
        assert_dies(read_pid(&pidfile)).await;
    }

    #[tokio::test]
    async fn default_timeout_applies() {
        let mut c = ctx();
        c.default_timeout = Duration::from_millis(300);
        let o = run_(&cmd(&["sleep", "30"]), &c).await;
        assert_eq!(o.status, Status::TimedOut);
        assert_eq!(o.reason.as_deref(), Some("time limit of 0.3 s passed"));
    }

    #[tokio::test]
    async fn leftovers_holding_the_pipes_are_killed_after_exit() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg");
        let job = sh(&format!(
            "sleep 30 & echo $! > {}; echo main done",
            pidfile.display()
        ));
        let o = run_(&job, &ctx()).await;
        assert_eq!(
            (o.status, o.stdout_tail.as_str()),
            (Status::Ok, "main done\n")
        );
        assert!(o.duration_ms < 10_000);
        assert_dies(read_pid(&pidfile)).await;
    }

    #[test]
    fn environment_is_built_in_layers() {
        let inherited = [
            ("PATH", "/bin"),
            ("KAFKA_PASSWORD", "s"),
            ("KAFKA_X", "s"),
            ("SECRET", "s"),
            ("SECRETS", "ok"),
            ("ORDER_OFFSET", "forged"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let mut spec = cmd(&["x"]);
        spec.env.insert("FOO".into(), "bar".into());
        spec.env.insert("ORDER_ATTEMPT".into(), "99".into());
        spec.env.insert("ORDER_TOPIC".into(), "forged".into());
        spec.env.insert("KAFKA_FROM_ORDER".into(), "x".into());
        let mut c = JobContext::new(OrderId::new(2, 40), 3, 2);
        c.order_topic = "work_orders".into();
        c.env_deny = vec!["KAFKA_*".into(), "SECRET".into()];
        let env = job_env(inherited, &spec, &c);
        let get = |k: &str| env.get(OsStr::new(k)).map(|v| v.to_str().unwrap());
        assert_eq!(get("PATH"), Some("/bin"));
        assert_eq!(get("FOO"), Some("bar"));
        assert_eq!(get("SECRETS"), Some("ok"));
        for gone in ["KAFKA_PASSWORD", "KAFKA_X", "SECRET", "KAFKA_FROM_ORDER"] {
            assert_eq!(get(gone), None, "{gone}");
        }
        assert_eq!(get("ORDER_TOPIC"), Some("work_orders"), "R45's key");
        assert_eq!(get("ORDER_PARTITION"), Some("2"));
        assert_eq!(get("ORDER_OFFSET"), Some("40"));
        assert_eq!(get("INSTANCE_NUMBER"), Some("3"));
        assert_eq!(get("ORDER_ATTEMPT"), Some("2"));
        assert_eq!(get("ORDER_RETRY"), Some("1"));
    }

    /// An order's trace context reaches its job as TRACEPARENT, over the
    /// order's own `env` (issue 19, part 4).
    #[tokio::test]
    async fn job_sees_the_orders_traceparent() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut spec = sh(r#"echo "[${TRACEPARENT-none}]""#);
        spec.env.insert("TRACEPARENT".into(), "forged".into());
        spec.traceparent = Some(tp.into());
        let o = run_(&spec, &ctx()).await;
        assert_eq!(o.stdout_tail, format!("[{tp}]\n"), "{o:?}");
        let docker = docker_args(&spec, &ctx(), "alpine", &[]);
        assert_eq!(
            docker.iter().filter(|a| *a == "TRACEPARENT").count(),
            1,
            "{docker:?}"
        );
    }

    #[tokio::test]
    async fn job_sees_its_environment() {
        let mut spec = sh(
            r#"echo "$ORDER_PARTITION $ORDER_OFFSET $INSTANCE_NUMBER $ORDER_ATTEMPT $ORDER_RETRY $FOO ${PATH:+path} ${HOME-nohome}""#,
        );
        spec.env.insert("FOO".into(), "bar baz".into());
        spec.env.insert("ORDER_RETRY".into(), "forged".into());
        let mut c = ctx();
        c.env_deny = vec!["HOME".into()];
        let o = run_(&spec, &c).await;
        assert_eq!(o.stdout_tail, "2 40 3 1 0 bar baz path nohome\n");
    }

    #[tokio::test]
    async fn order_path_does_not_choose_the_program() {
        let dir = tempfile::tempdir().unwrap();
        script(&dir.path().join("true"), "#!/bin/sh\necho hijacked");
        let mut spec = cmd(&["true"]);
        spec.env
            .insert("PATH".into(), dir.path().display().to_string());
        let o = run_(&spec, &ctx()).await;
        assert_eq!((o.status, o.stdout_tail.as_str()), (Status::Refused, ""));
        assert!(o.reason.unwrap_or_default().contains("PATH"));
        // Nor does the worker's PATH at run time, with an allow list: the
        // name was resolved when the list was.
        let mut c = ctx();
        c.commands = commands(&["true"]);
        let o = run_(&cmd(&["true"]), &c).await;
        assert_eq!((o.status, o.stdout_tail.as_str()), (Status::Ok, ""));
    }

    #[tokio::test]
    async fn unrunnable_programs_are_errors() {
        let o = run_(&cmd(&["no-such-program-pw"]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
        assert_eq!(
            o.reason.as_deref(),
            Some("cannot run 'no-such-program-pw': not found in PATH")
        );
        let o = run_(&cmd(&["/nonexistent/prog"]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
        let reason = o.reason.unwrap();
        assert!(
            reason.contains("/nonexistent/prog") && reason.contains("No such file"),
            "{reason}"
        );
        let dir = tempfile::tempdir().unwrap();
        let o = run_(&cmd(&[dir.path().to_str().unwrap()]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
        assert!(o.reason.unwrap().contains("ermission denied"));
        let o = run_(&cmd(&[]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
    }

    /// `ALLOWED_COMMANDS` resolved with the test process's `PATH`.
    fn commands(entries: &[&str]) -> Option<Arc<Commands>> {
        let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        Some(Arc::new(
            Commands::resolve(&entries, std::env::var_os("PATH").as_deref()).unwrap(),
        ))
    }

    /// Issue 18, row 1: `LD_PRELOAD` from the order would load the
    /// attacker's library into an allowed `echo`. (The library here is a
    /// path that does not exist: the loader would print an error on stderr;
    /// the point is that the order is refused and nothing runs.)
    #[tokio::test]
    async fn an_order_cannot_set_the_loaders_variables() {
        let mut c = ctx();
        c.commands = commands(&["echo"]);
        for (name, value) in [
            ("LD_PRELOAD", "/tmp/pw-no-such-evil.so"),
            ("LD_LIBRARY_PATH", "/tmp"),
            ("GCONV_PATH", "/tmp"),
            ("PATH", "/tmp"),
            ("DOCKER_HOST", "tcp://127.0.0.1:9"),
        ] {
            let mut spec = cmd(&["echo", "x"]);
            spec.env.insert(name.into(), value.into());
            let o = run_(&spec, &c).await;
            assert_eq!(o.status, Status::Refused, "{name}: {o:?}");
            let reason = o.reason.unwrap_or_default();
            assert!(reason.contains(name), "{reason}");
            assert!(o.stdout_tail.is_empty() && o.stderr_tail.is_empty() && o.exit_code.is_none());
        }
    }

    /// Issue 18, row 2: `BASH_ENV` makes a non-interactive bash source a
    /// file (and expand the value first: `$(id)` would run) before the
    /// allowed script.
    #[tokio::test]
    async fn an_order_cannot_set_shell_start_up_variables() {
        if crate::policy::find_in_path("bash", std::env::var_os("PATH").as_deref()).is_none() {
            eprintln!("no bash on this machine: the check of the refusal still runs");
        }
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        std::fs::create_dir(&jobs).unwrap();
        let report = jobs.join("report.sh");
        script(&report, "#!/usr/bin/env bash\necho report");
        let marker = dir.path().join("pwned");
        let evil = dir.path().join("evil.sh");
        script(&evil, &format!("touch {}", marker.display()));
        let mut c = ctx();
        c.commands = commands(&[&format!("{}/", jobs.display())]);
        for (name, value) in [
            ("BASH_ENV", format!("$(touch {})", marker.display())),
            ("BASH_ENV", evil.display().to_string()),
            ("ENV", evil.display().to_string()),
            (
                "BASH_FUNC_echo%%",
                format!("() {{ touch {}; }}", marker.display()),
            ),
            ("SHELLOPTS", "xtrace".into()),
        ] {
            let mut spec = cmd(&[report.to_str().unwrap()]);
            spec.env.insert(name.into(), value);
            let o = run_(&spec, &c).await;
            assert_eq!(o.status, Status::Refused, "{name}: {o:?}");
            assert!(o.reason.unwrap_or_default().contains(name));
        }
        assert!(!marker.exists(), "the attacker's code ran");
        let o = run_(&cmd(&[report.to_str().unwrap()]), &c).await;
        assert_eq!(o.stdout_tail, "report\n", "{o:?}");
    }

    #[tokio::test]
    async fn order_env_allow_list() {
        let mut c = ctx();
        c.env_allow = Some(vec!["DEST".into(), "APP_*".into()]);
        let mut spec = sh("echo $DEST $APP_X");
        spec.env.insert("DEST".into(), "d".into());
        spec.env.insert("APP_X".into(), "x".into());
        let o = run_(&spec, &c).await;
        assert_eq!((o.status, o.stdout_tail.as_str()), (Status::Ok, "d x\n"));
        spec.env.insert("OTHER".into(), "o".into());
        let o = run_(&spec, &c).await;
        assert_eq!(o.status, Status::Refused);
        assert_eq!(
            o.reason.as_deref(),
            Some("the order sets OTHER, which ORDER_ENV_ALLOW does not allow")
        );
    }

    /// Issue 18, row 3: an earlier allowed job copies a shell to `./cp`; a
    /// name entry runs only the file found through the worker's `PATH`.
    #[tokio::test]
    async fn a_name_entry_runs_only_the_file_found_in_the_workers_path() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("cp");
        std::fs::copy("/bin/sh", &fake).unwrap();
        let mut c = ctx();
        c.commands = commands(&["cp"]);
        let marker = dir.path().join("shell-ran");
        let touch = format!("touch {}", marker.display());
        let cwd = std::env::current_dir().unwrap();
        for argv0 in [
            fake.to_str().unwrap().to_string(),
            format!("{}/./cp", dir.path().display()),
        ] {
            let o = run_(&cmd(&[&argv0, "-c", &touch]), &c).await;
            assert_eq!(o.status, Status::Refused, "{argv0}: {o:?}");
        }
        // Relative to the worker's directory, as the job would see it.
        let rel = pathdiff(&fake, &cwd);
        let o = run_(&cmd(&[&rel, "-c", &touch]), &c).await;
        assert_eq!(o.status, Status::Refused, "{rel}: {o:?}");
        assert!(!marker.exists(), "the copied shell ran");
        // The real cp still runs, by name and by its own path.
        let real = crate::policy::find_in_path("cp", std::env::var_os("PATH").as_deref()).unwrap();
        let copy = dir.path().join("copy");
        let o = run_(
            &cmd(&["cp", fake.to_str().unwrap(), copy.to_str().unwrap()]),
            &c,
        )
        .await;
        assert_eq!(o.status, Status::Ok, "{o:?}");
        let o = run_(&cmd(&[real.to_str().unwrap(), "--version"]), &c).await;
        assert_eq!(o.status, Status::Ok, "{o:?}");
    }

    /// `../../..` from `base` to `path` (both absolute), for a relative argv0.
    fn pathdiff(path: &Path, base: &Path) -> String {
        let ups = base.components().count() - 1;
        format!(
            "{}{}",
            "../".repeat(ups),
            path.strip_prefix("/").unwrap().display()
        )
    }

    #[tokio::test]
    async fn path_entries_are_compared_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        std::fs::create_dir(&jobs).unwrap();
        script(&jobs.join("ok"), "#!/bin/sh\necho ok");
        std::os::unix::fs::symlink("/bin/sh", jobs.join("sh")).unwrap();
        let mut c = ctx();
        c.commands = commands(&[&jobs.display().to_string()]);
        let o = run_(&cmd(&[jobs.join("ok").to_str().unwrap()]), &c).await;
        assert_eq!((o.status, o.stdout_tail.as_str()), (Status::Ok, "ok\n"));
        for p in [
            jobs.join("sh"),
            jobs.join("../jobs/../../../bin/sh"),
            PathBuf::from(format!("{}2/x", jobs.display())),
        ] {
            let o = run_(&cmd(&[p.to_str().unwrap(), "-c", "echo pwned"]), &c).await;
            assert_eq!(o.status, Status::Refused, "{}: {o:?}", p.display());
        }
    }

    #[tokio::test]
    async fn image_orders_need_allowed_images_and_do_not_allow_docker() {
        let mut c = ctx();
        c.commands = commands(&["echo"]);
        let mut spec = cmd(&[]);
        spec.kind = OrderKind::Image {
            image: "alpine".into(),
            args: vec![],
        };
        let o = run_(&spec, &c).await;
        assert_eq!(o.status, Status::Refused);
        assert!(o
            .reason
            .unwrap_or_default()
            .contains("ALLOWED_IMAGES is not set"));
        c.allowed_images = Some(vec!["busybox".into()]);
        let o = run_(&spec, &c).await;
        assert_eq!(
            o.reason.as_deref(),
            Some("image 'alpine' is not in ALLOWED_IMAGES")
        );
        c.allowed_images = Some(vec!["alpine".into()]);
        // Row 5: docker as a command stays refused.
        let o = run_(
            &cmd(&["docker", "run", "--privileged", "-v", "/:/host", "alpine"]),
            &c,
        )
        .await;
        assert_eq!(o.status, Status::Refused, "{o:?}");
        assert!(o.reason.unwrap_or_default().contains("'docker'"));
        // Row 6: the order cannot point the docker CLI elsewhere.
        spec.env
            .insert("DOCKER_HOST".into(), "tcp://127.0.0.1:2375".into());
        let o = run_(&spec, &c).await;
        assert_eq!(o.status, Status::Refused, "{o:?}");
        assert!(o.reason.unwrap_or_default().contains("DOCKER_HOST"));
    }

    #[tokio::test]
    async fn refused_commands_never_run() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let mut c = ctx();
        c.commands = commands(&["true"]);
        let o = run_(&cmd(&["touch", marker.to_str().unwrap()]), &c).await;
        assert_eq!(o.status, Status::Refused);
        assert!(o.reason.unwrap().contains("'touch'"));
        let o = run_(&sh(&format!("touch {}", marker.display())), &c).await;
        assert_eq!(
            o.status,
            Status::Refused,
            "shell orders are checked as 'sh'"
        );
        assert!(!marker.exists());
        c.commands = commands(&["sh"]);
        assert_eq!(run_(&sh("exit 0"), &c).await.status, Status::Ok);
    }

    #[tokio::test]
    async fn cancel_kills_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = watch::channel(false);
        let spec = sh(&format!("sleep 30 & echo $! > {}; wait", fifo.display()));
        let job = tokio::spawn(async move { run(&spec, &ctx(), rx).await });
        // Opening the FIFO blocks until the job writes: the job is running.
        let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo));
        let pid: u32 = tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        tx.send(true).unwrap();
        let o = tokio::time::timeout(Duration::from_secs(10), job)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.status, Status::Error);
        assert!(o.reason.unwrap().starts_with("cancelled: "));
        assert_dies(pid).await;

        let (tx, rx) = watch::channel(true);
        let o = run(&cmd(&["true"]), &ctx(), rx).await;
        assert_eq!(
            o.reason.as_deref(),
            Some("cancelled: before the job started")
        );
        drop(tx);
        // A dropped sender is not a cancellation.
        let (tx, rx) = watch::channel(false);
        drop(tx);
        assert_eq!(run(&cmd(&["true"]), &ctx(), rx).await.status, Status::Ok);
    }

    #[tokio::test]
    async fn image_orders_run_docker() {
        let dir = tempfile::tempdir().unwrap();
        let docker = dir.path().join("docker");
        script(
            &docker,
            r#"#!/bin/sh
d=$(dirname "$0")
if [ "$1" = kill ]; then echo "$@" >> "$d/killed"; exit 0; fi
printf '%s\n' "$@" > "$d/argv"
echo "A=$A ORDER_OFFSET=$ORDER_OFFSET"
exec sleep 30
"#,
        );
        let mut c = ctx();
        c.docker_program = docker.to_str().unwrap().into();
        c.allowed_images = Some(vec!["alpine".into()]);
        c.commands = commands(&["true"]);
        let mut spec = cmd(&[]);
        spec.kind = OrderKind::Image {
            image: "alpine:3".into(),
            args: vec!["echo".into(), "a b".into()],
        };
        spec.env.insert("A".into(), "secret value".into());
        spec.timeout = Some(Duration::from_millis(1500));
        let o = run_(&spec, &c).await;
        assert_eq!(o.status, Status::TimedOut);
        assert_eq!(o.stdout_tail, "A=secret value ORDER_OFFSET=40\n");
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        let expected = [
            "run",
            "--rm",
            "--name",
            "pool_worker-3-2-40-a1",
            "--security-opt",
            "no-new-privileges",
            "-e",
            "A",
            "-e",
            "ORDER_TOPIC",
            "-e",
            "ORDER_PARTITION",
            "-e",
            "ORDER_OFFSET",
            "-e",
            "INSTANCE_NUMBER",
            "-e",
            "ORDER_ATTEMPT",
            "-e",
            "ORDER_RETRY",
            "alpine:3",
            "echo",
            "a b",
        ];
        assert_eq!(argv.lines().collect::<Vec<_>>(), expected);
        let killed = std::fs::read_to_string(dir.path().join("killed")).unwrap();
        assert_eq!(killed, "kill pool_worker-3-2-40-a1\n");

        c.allowed_images = Some(vec!["busybox".into()]);
        assert_eq!(run_(&spec, &c).await.status, Status::Refused);
    }

    #[tokio::test]
    async fn url_orders_are_not_run() {
        let mut spec = cmd(&[]);
        spec.kind = OrderKind::Url {
            url: "http://h/".into(),
        };
        let o = run_(&spec, &ctx()).await;
        assert_eq!(
            (o.status, o.reason.as_deref()),
            (
                Status::Error,
                Some("URL orders must be fetched before running")
            )
        );
    }

    /// A context whose jobs get the unit tests' guard (pool_worker/src/guard.rs), with
    /// the first deadline `until` (`CLOCK_BOOTTIME`, ms).
    fn guarded(until: u64) -> (watch::Sender<Option<u64>>, JobContext) {
        let (tx, feed) = crate::guard::tests::test_feed();
        tx.send_replace(Some(until));
        let mut c = ctx();
        c.guard = Some(feed);
        (tx, c)
    }

    /// The pid the job writes to `fifo` (opening it blocks until it does).
    async fn pid_from(fifo: &Path) -> u32 {
        let fifo = fifo.to_path_buf();
        let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo));
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn fifo_in(dir: &Path) -> PathBuf {
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        fifo
    }

    /// R53: a job whose deadline passes with no newer one is stopped
    /// (state `T`), stays stopped while none comes, and a later deadline
    /// thaws it; it then finishes, and the time it was frozen did not count
    /// toward its time limit.
    #[tokio::test]
    async fn a_job_past_its_deadline_is_frozen_and_thawed_and_frozen_time_is_not_timed() {
        use crate::guard::tests::{state, until_state};
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo_in(dir.path());
        let (tx, c) = guarded(crate::clock::boottime_ms() + 300);
        // About a second of work in small steps, with a limit of 2.5 s.
        let mut spec = sh(&format!(
            "echo $$ > {}; i=0; while [ $i -lt 20 ]; do sleep 0.05; i=$((i+1)); done; echo done",
            fifo.display()
        ));
        spec.timeout = Some(Duration::from_millis(2500));
        let job = tokio::spawn(async move { run(&spec, &c, never()).await });
        let pid = pid_from(&fifo).await;
        until_state(pid, |s| s == Some('T')).await;
        // Frozen for 3 s, longer than the whole limit: nothing is sent, and
        // the guard keeps it frozen on its own.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(state(pid), Some('T'));
        tx.send_replace(Some(crate::clock::boottime_ms() + 60_000));
        until_state(pid, |s| matches!(s, Some('S' | 'R') | None)).await;
        let o = tokio::time::timeout(Duration::from_secs(20), job)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (o.status, o.stdout_tail.as_str()),
            (Status::Ok, "done\n"),
            "{o:?}"
        );
        assert!(o.duration_ms > 3000, "{o:?}");
    }

    /// A frozen job is killed as any other (SIGKILL ends stopped processes):
    /// on cancellation and on its time limit... which frozen time does not
    /// count toward, so here the cancellation.
    #[tokio::test]
    async fn a_frozen_job_can_be_cancelled() {
        use crate::guard::tests::until_state;
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo_in(dir.path());
        let (tx, c) = guarded(crate::clock::boottime_ms() + 60_000);
        let (cancel_tx, cancel) = watch::channel(false);
        let spec = sh(&format!("echo $$ > {}; exec sleep 30", fifo.display()));
        let job = tokio::spawn(async move { run(&spec, &c, cancel).await });
        let pid = pid_from(&fifo).await;
        // A deadline in the past: the guard freezes the job at once.
        tx.send_replace(Some(1));
        until_state(pid, |s| s == Some('T')).await;
        cancel_tx.send(true).unwrap();
        let o = tokio::time::timeout(Duration::from_secs(10), job)
            .await
            .unwrap()
            .unwrap();
        assert!(o.reason.unwrap_or_default().starts_with("cancelled: "));
        assert_dies(pid).await;
    }

    /// The guard dies while the job runs: the job is killed rather than run
    /// unguarded, and the outcome says why. A guard that cannot start
    /// ends the job at once too.
    #[tokio::test]
    async fn a_job_whose_guard_dies_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo_in(dir.path());
        let (_tx, c) = guarded(crate::clock::boottime_ms() + 60_000);
        let feed = c.guard.clone().unwrap();
        let spec = sh(&format!("echo $$ > {}; exec sleep 30", fifo.display()));
        let job = tokio::spawn(async move { run(&spec, &c, never()).await });
        let pid = pid_from(&fifo).await;
        let guard = crate::guard::tests::guard_pid(&feed).await;
        nix::sys::signal::kill(Pid::from_raw(guard as i32), Signal::SIGKILL).unwrap();
        let o = tokio::time::timeout(Duration::from_secs(10), job)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.status, Status::Error);
        let reason = o.reason.unwrap_or_default();
        assert!(reason.contains("guard exited unexpectedly"), "{reason}");
        assert_dies(pid).await;

        let (_tx, mut c) = guarded(crate::clock::boottime_ms() + 60_000);
        if let Some(g) = c.guard.as_mut() {
            g.program = "/nonexistent/pool_worker".into();
        }
        // (The job is spawned before its guard: it is killed at once.)
        let o = tokio::time::timeout(Duration::from_secs(10), run_(&cmd(&["sleep", "30"]), &c))
            .await
            .unwrap();
        assert_eq!(o.status, Status::Error);
        let reason = o.reason.unwrap_or_default();
        assert!(reason.contains("cannot start the job's guard"), "{reason}");
    }
}
