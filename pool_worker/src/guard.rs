//! The guard of a running job: a dead man's switch that freezes the job
//! when the worker's hold of its order may have lapsed (docs/protocol.md
//! R53), even if the worker itself is stopped or cut off.
//!
//! The worker's machine says, with each renewal of its lease that it reads
//! back, how long the job may run ([`crate::worker::Action::Guard`]): the
//! record's `ts` plus two thirds of the lease. Past that, another instance
//! may soon revoke the hold and run the order again, so the job must not
//! run on. A check in the worker's own event loop would not do: a worker
//! that is SIGSTOPped (or starved, or swapped out) checks nothing. So the
//! guard is a separate, tiny process with a blocking loop of `poll(2)` on
//! a pipe from the worker and no async runtime. It depends on nothing the
//! worker must do except write to its pipe.
//!
//! In a worker it is the *guard host* ([`Host`]): a copy of the worker
//! process made by `fork` at its start, while it has one thread and has
//! read no configuration file nor connected to anything, which guards the
//! worker's jobs one after the other. Starting a job's guard is then a
//! line on a pipe; an exec of this 15 MB binary per job cost 2.7–3.9 ms of
//! CPU per order. Should the host fail (it does not confirm an `end`), or
//! where there is none (the unit tests), a job gets a guard process of its
//! own: a hidden subcommand of the same binary (`pool_worker guard`,
//! started through `/proc/self/exe`), with the wire format below on its
//! standard input and output. The host speaks the same lines, with `job`
//! and `ended` around each job ([`Host`]).
//!
//! ## The wire format
//!
//! Started as `pool_worker guard --pgid PGID --until BOOT_MS [--docker PATH
//! --container NAME]`, where `BOOT_MS` is a deadline on `CLOCK_BOOTTIME`
//! (ms, [`crate::clock::boottime_ms`]). On its standard input, one command
//! a line:
//!
//! * `until BOOT_MS`: the new deadline; one ahead of now thaws a frozen job;
//! * `end`: the job is over: exit quietly (status 0).
//!
//! On its standard output, one report a line, each with the
//! `CLOCK_BOOTTIME` reading (ms) when it acted:
//!
//! * `frozen BOOT_MS`: the deadline passed: the job's process group got
//!   `SIGSTOP` (and an image order's container was paused: stopping the
//!   docker CLI stops nothing);
//! * `thawed BOOT_MS`: a deadline ahead arrived: `SIGCONT` (`docker unpause`).
//!
//! The runner ([`GuardProc`]) ignores any other line. A malformed command
//! is reported on standard error and ignored.
//!
//! End of input without `end` means the worker died: the guard sends the
//! job's group `SIGKILL` (for a container: `docker unpause`, since a
//! paused container cannot be killed, then `docker kill`) and exits 0.
//!
//! The guard runs in a process group of its own (a terminal's Ctrl-C or a
//! signal to the worker's group does not reach it, nor does a `SIGSTOP`
//! of that group), ignores SIGINT, SIGTERM and SIGHUP (the worker stops the
//! job itself and then closes the pipe), closes every inherited file
//! descriptor above 2, makes itself non-dumpable, and keeps an environment
//! of only `PATH`, `HOME` and docker's variables (a guard process gets
//! only those; the host removes the rest of the worker's environment it
//! was copied with, but, a copy of the worker's memory, it is as
//! non-dumpable as the worker: no job can read either).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::watch;

/// The guard's command line (hidden subcommand `guard`).
#[derive(clap::Args, Debug, Clone)]
pub struct GuardArgs {
    /// The job's process group.
    #[arg(long)]
    pub pgid: i32,
    /// The first deadline (`CLOCK_BOOTTIME`, ms); 0 freezes at once.
    #[arg(long)]
    pub until: u64,
    /// The docker CLI, for an image order.
    #[arg(long, requires = "container")]
    pub docker: Option<PathBuf>,
    /// The image order's container.
    #[arg(long, requires = "docker")]
    pub container: Option<String>,
}

/// How long one docker command (pause, unpause, kill) may take.
const DOCKER_WAIT: Duration = Duration::from_secs(10);

/// Variables the guard keeps from the worker's environment (for the
/// docker CLI).
const KEPT_ENV: &[&str] = &[
    crate::account::VAR,
    "PATH",
    "HOME",
    "XDG_RUNTIME_DIR",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
];

/// The guard process: runs until `end` or the end of its input; its exit
/// status.
pub fn main(args: GuardArgs) -> i32 {
    if args.pgid <= 1 {
        eprintln!(
            "pool_worker guard: --pgid {} is not a job's process group",
            args.pgid
        );
        return 2;
    }
    prepare_process(None);
    crate::account::init_guard();
    let job = Target {
        pgid: nix::unistd::Pid::from_raw(args.pgid),
        docker: args.docker.zip(args.container),
    };
    let mut input = LineInput::new(0);
    let _ = guard_job(&mut input, 1, &job, args.until);
    0
}

/// How guarding one job ended.
#[derive(Debug, PartialEq, Eq)]
enum JobEnd {
    /// `end`: the job is over.
    End,
    /// End of input: the worker died; the job's group was killed.
    Closed,
}

/// Guards one job: freezes it when `until` (and every later deadline)
/// passes, thaws it on a deadline ahead, until `end` or the end of
/// `input`; reports on the descriptor `out`.
fn guard_job(input: &mut LineInput, out: i32, job: &Target, until: u64) -> JobEnd {
    let mut deadline = until;
    let mut frozen = false;
    loop {
        let now = crate::clock::boottime_ms();
        if !frozen && now >= deadline {
            job.freeze();
            frozen = true;
            report(out, &format!("frozen {now}"));
        }
        let timeout = if frozen {
            -1
        } else {
            i32::try_from(deadline - now).unwrap_or(i32::MAX)
        };
        let line = match input.next_line(timeout) {
            Line::Nothing => continue,
            Line::Closed => {
                job.kill(frozen);
                return JobEnd::Closed;
            }
            Line::Text(line) => line,
        };
        match parse(&line) {
            // The job is over; should it have been left frozen, its runner
            // kills it.
            Some(Command::End) => return JobEnd::End,
            Some(Command::Until(t)) => {
                deadline = t;
                let now = crate::clock::boottime_ms();
                if frozen && t > now {
                    job.thaw();
                    frozen = false;
                    report(out, &format!("thawed {now}"));
                }
            }
            None => eprintln!("pool_worker guard: ignoring the line '{line}'"),
        }
    }
}

/// One command of the worker.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Until(u64),
    End,
}

fn parse(line: &str) -> Option<Command> {
    match line.split_once(' ') {
        Some(("until", t)) => t.trim().parse().ok().map(Command::Until),
        None if line == "end" => Some(Command::End),
        _ => None,
    }
}

/// Ignores the signals that stop a worker, closes inherited descriptors
/// above 2 (but `keep`), and makes the process non-dumpable.
fn prepare_process(keep: Option<i32>) {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let close = |from: i32, to: i32| {
        if from <= to {
            // SAFETY: close_range on descriptors this process does not use
            // (the standard ones and `keep` stay); a kernel without it
            // returns ENOSYS, ignored.
            unsafe { libc::syscall(libc::SYS_close_range, from as u32, to as u32, 0u32) };
        }
    };
    match keep.filter(|&k| k > 2) {
        Some(k) => {
            close(3, k - 1);
            close(k + 1, i32::MAX);
        }
        None => close(3, i32::MAX),
    }
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// What one [`LineInput::next_line`] got.
enum Line {
    /// The timeout passed (or a signal interrupted the wait), or part of a
    /// line came.
    Nothing,
    Text(String),
    /// End of input, or it cannot be read.
    Closed,
}

/// Lines from a descriptor, read with `poll(2)` and `read(2)` (no
/// runtime, nothing buffered beyond the current line).
struct LineInput {
    fd: i32,
    buf: Vec<u8>,
}

impl LineInput {
    fn new(fd: i32) -> LineInput {
        LineInput {
            fd,
            buf: Vec::new(),
        }
    }

    /// The next whole line, waiting up to `timeout_ms` (-1: forever) for
    /// more input.
    fn next_line(&mut self, timeout_ms: i32) -> Line {
        if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=i).collect();
            return Line::Text(String::from_utf8_lossy(&line).trim().to_string());
        }
        if self.buf.len() > 4096 {
            eprintln!("pool_worker guard: ignoring an overlong line");
            self.buf.clear();
        }
        let mut fds = [libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one pollfd, which we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, timeout_ms) };
        if n < 0 {
            return match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted => Line::Nothing,
                _ => Line::Closed,
            };
        }
        if n == 0 {
            return Line::Nothing;
        }
        let mut buf = [0u8; 512];
        // SAFETY: reads at most buf.len() bytes into buf.
        let r = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        match r {
            0 => Line::Closed,
            r if r > 0 => {
                self.buf.extend_from_slice(&buf[..r as usize]);
                if self.buf.contains(&b'\n') {
                    self.next_line(0)
                } else {
                    Line::Nothing
                }
            }
            _ => match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => Line::Nothing,
                _ => Line::Closed,
            },
        }
    }
}

/// One report line on the descriptor `out` (nobody may be reading any
/// more: errors are ignored). Written whole with `write(2)`: no lock a
/// forked copy could find held.
fn report(out: i32, what: &str) {
    let line = format!("{what}\n");
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        // SAFETY: writes at most rest.len() bytes from rest.
        let n = unsafe { libc::write(out, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// What the guard stops, continues and kills.
struct Target {
    pgid: nix::unistd::Pid,
    /// An image order's docker CLI and container.
    docker: Option<(PathBuf, String)>,
}

impl Target {
    fn signal(&self, sig: nix::sys::signal::Signal) {
        // ESRCH: the group is gone (the job ended); nothing to do.
        let _ = nix::sys::signal::killpg(self.pgid, sig);
    }

    /// Stops the group first: a docker CLI stopped before it created its
    /// container creates none meanwhile.
    fn freeze(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
        self.docker("pause");
    }

    fn thaw(&self) {
        self.docker("unpause");
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn kill(&self, frozen: bool) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        if frozen {
            self.docker("unpause");
        }
        self.docker("kill");
    }

    /// `docker VERB CONTAINER`, best effort, bounded.
    fn docker(&self, verb: &str) {
        let Some((docker, name)) = &self.docker else {
            return;
        };
        let child = std::process::Command::new(docker)
            .args([verb, name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("pool_worker guard: cannot run {} {verb}", docker.display());
            return;
        };
        let until = std::time::Instant::now() + DOCKER_WAIT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if std::time::Instant::now() >= until => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

/// The guard host (the worker's): a copy of the worker process made by
/// `fork` at its start, before any thread, runtime or Kafka client
/// exists ([`fork_host`]), that guards the worker's jobs one after the
/// other ([`host_main`]). Starting a job's guard is then a line on a pipe,
/// where an exec of this binary cost 2.7–3.9 ms of CPU per order
/// (bench/RESULTS.md). The host stays single-threaded, so it may do
/// anything a process may (allocate, run `docker`).
///
/// On its input, one command a line: `job PGID BOOT_MS [DOCKER CONTAINER]`
/// (the last two hex-encoded) starts guarding a job; then `until BOOT_MS`
/// and `end` as for the guard process; after `end` it reports `ended` and
/// waits for the next `job`. End of input (the worker died) kills the
/// guarded job's group, if any, and ends the host.
pub(crate) struct Host {
    pid: i32,
    /// The pipes to the host: raw until first used inside the runtime,
    /// then [`HostIo`]; `None` while a job's [`GuardProc`] holds them, or
    /// for good once the host failed (then jobs get a guard process of
    /// their own).
    io: std::sync::Mutex<HostPipes>,
}

enum HostPipes {
    Raw(std::os::fd::OwnedFd, std::os::fd::OwnedFd),
    Ready(HostIo),
    Taken,
}

/// The worker's ends of the host's pipes.
pub(crate) struct HostIo {
    tx: tokio::net::unix::pipe::Sender,
    lines: Lines<BufReader<tokio::net::unix::pipe::Receiver>>,
}

/// The worker's guard host, once forked ([`fork_host`]).
static HOST: std::sync::OnceLock<Host> = std::sync::OnceLock::new();

/// The guard host's pid, if this process has one: [`crate::isolate::end_descendants`]
/// leaves it (and what it runs) be.
pub(crate) fn host_pid() -> Option<i32> {
    HOST.get().map(|h| h.pid)
}

/// Forks the guard host. Only while the process is single-threaded (the
/// worker's `main`, before its runtime): the child is a copy of this one
/// thread. Without a host (the fork failed), every job gets a guard
/// process of its own, as before.
pub fn fork_host() {
    use nix::unistd::{fork, pipe2, ForkResult};
    let Ok((cmd_r, cmd_w)) = pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        return;
    };
    let Ok((rep_r, rep_w)) = pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        return;
    };
    // SAFETY: called before this process starts any thread (see above), so
    // the child may do anything.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            use std::os::fd::AsRawFd as _;
            // SAFETY: dup2 onto the standard descriptors (which closes the
            // worker's standard input and output in this copy: the
            // supervisor's `go` pipe is the worker's alone).
            unsafe {
                libc::dup2(cmd_r.as_raw_fd(), 0);
                libc::dup2(rep_w.as_raw_fd(), 1);
            }
            // Out of the worker's group: a signal to that group (Ctrl-C, a
            // SIGSTOP of the group) does not reach the host.
            let _ =
                nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
            let keep = crate::account::sink_fd();
            prepare_process(keep);
            // Single-threaded: changing the environment is safe. The host
            // keeps only what `docker` needs (KEPT_ENV).
            let names: Vec<OsString> = std::env::vars_os().map(|(k, _)| k).collect();
            for name in names {
                if !KEPT_ENV.iter().any(|k| name == *k) {
                    // SAFETY: no other thread exists in this process.
                    unsafe { std::env::remove_var(&name) };
                }
            }
            crate::account::become_guard();
            // `ps -o comm`, `top`: told apart from the worker it copies.
            let _ = nix::sys::prctl::set_name(c"pool_worker-grd");
            let code = host_main(0, 1);
            // SAFETY: ends this copy at once, running no destructor or
            // exit handler of the worker it was copied from.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop((cmd_r, rep_w));
            let _ = HOST.set(Host {
                pid: child.as_raw(),
                io: std::sync::Mutex::new(HostPipes::Raw(cmd_w, rep_r)),
            });
        }
        Err(_) => {}
    }
}

/// The host's loop: a job at a time, until the end of its input.
fn host_main(input_fd: i32, out: i32) -> i32 {
    let mut input = LineInput::new(input_fd);
    loop {
        let line = match input.next_line(-1) {
            Line::Nothing => continue,
            Line::Closed => return 0,
            Line::Text(line) => line,
        };
        let Some((pgid, until, docker)) = parse_job(&line) else {
            // A stray `until` or `end` between jobs: nothing to guard.
            continue;
        };
        crate::account::mark_with("main", || "hosted".into());
        let job = Target {
            pgid: nix::unistd::Pid::from_raw(pgid),
            docker,
        };
        let end = guard_job(&mut input, out, &job, until);
        crate::account::mark("exit");
        match end {
            JobEnd::End => report(out, "ended"),
            JobEnd::Closed => return 0,
        }
    }
}

/// An image order's docker CLI and container.
type Container = (PathBuf, String);

/// `job PGID BOOT_MS [DOCKER CONTAINER]` (the last two hex-encoded).
fn parse_job(line: &str) -> Option<(i32, u64, Option<Container>)> {
    let mut words = line.split(' ');
    if words.next()? != "job" {
        return None;
    }
    let pgid: i32 = words.next()?.parse().ok().filter(|&p| p > 1)?;
    let until: u64 = words.next()?.parse().ok()?;
    let docker = match (words.next(), words.next()) {
        (None, None) => None,
        (Some(d), Some(c)) => {
            use std::os::unix::ffi::OsStringExt as _;
            let d = OsString::from_vec(unhex(d)?);
            let c = String::from_utf8(unhex(c)?).ok()?;
            Some((PathBuf::from(d), c))
        }
        _ => return None,
    };
    words.next().is_none().then_some((pgid, until, docker))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The `job` line for a job's group, first deadline and container.
fn job_line(pgid: i32, until: u64, container: Option<(&Path, &str)>) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    match container {
        Some((docker, name)) => format!(
            "job {pgid} {until} {} {}\n",
            hex(docker.as_os_str().as_bytes()),
            hex(name.as_bytes())
        ),
        None => format!("job {pgid} {until}\n"),
    }
}

impl Host {
    /// The host's pipes for one job, if it can take one.
    fn take(&self) -> Option<HostIo> {
        let mut io = self.io.lock().ok()?;
        match std::mem::replace(&mut *io, HostPipes::Taken) {
            HostPipes::Ready(h) => Some(h),
            HostPipes::Raw(tx, rx) => {
                let tx = tokio::net::unix::pipe::Sender::from_owned_fd(tx).ok()?;
                let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(rx).ok()?;
                Some(HostIo {
                    tx,
                    lines: BufReader::new(rx).lines(),
                })
            }
            HostPipes::Taken => None,
        }
    }

    /// A job's guarding ended cleanly: the pipes serve the next.
    fn put_back(&self, io: HostIo) {
        if let Ok(mut slot) = self.io.lock() {
            *slot = HostPipes::Ready(io);
        }
    }

    /// The host failed (did not confirm an `end`): killed, and no job is
    /// given to it again.
    fn fail(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(self.pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
    }
}

/// How a runner starts the guard of its jobs, and the deadlines it feeds
/// them (`CLOCK_BOOTTIME`, ms; `None` before the first, which freezes a job
/// started then at once).
#[derive(Clone)]
pub(crate) struct GuardFeed {
    /// The guard's program: this binary.
    pub(crate) program: PathBuf,
    /// Arguments before the guard's own.
    pub(crate) prefix: Vec<OsString>,
    /// Pass the guard's arguments in this variable (one a line) instead
    /// of on the command line (the unit tests' hook).
    pub(crate) args_var: Option<&'static str>,
    pub(crate) deadlines: watch::Receiver<Option<u64>>,
    /// The guard host, if there is one: jobs are guarded there, and by a
    /// process of their own only when it cannot take them.
    pub(crate) host: Option<&'static Host>,
}

impl std::fmt::Debug for GuardFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardFeed")
            .field("program", &self.program)
            .field("host", &self.host.map(|h| h.pid))
            .finish()
    }
}

impl GuardFeed {
    /// The worker's: its guard host ([`fork_host`]), or else
    /// `/proc/self/exe guard ...` (the running binary, even if its file
    /// was replaced since).
    pub(crate) fn worker(deadlines: watch::Receiver<Option<u64>>) -> GuardFeed {
        GuardFeed {
            program: PathBuf::from("/proc/self/exe"),
            prefix: vec!["guard".into()],
            args_var: None,
            deadlines,
            host: HOST.get(),
        }
    }
}

/// What the guard reported.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Report {
    Frozen(u64),
    Thawed(u64),
    /// Its output ended: it exited.
    Gone,
}

/// A running guard, seen from the job's runner.
pub(crate) struct GuardProc {
    kind: Kind,
}

enum Kind {
    /// A guard process of the job's own.
    Proc {
        child: Child,
        stdin: Option<ChildStdin>,
        lines: Lines<BufReader<ChildStdout>>,
    },
    /// The guard host, guarding this job.
    Hosted {
        host: &'static Host,
        /// `None` once it failed.
        io: Option<HostIo>,
    },
}

/// How long a guard told `end` may take to exit (or the host to confirm).
const END_WAIT: Duration = Duration::from_secs(2);

/// How long a write to the guard may take.
const WRITE_WAIT: Duration = Duration::from_secs(1);

impl GuardProc {
    /// Starts guarding the job whose group is `pgid`, with the first
    /// deadline `until`: on the guard host if it can take the job, else in
    /// a guard process of its own.
    pub(crate) async fn start(
        feed: &GuardFeed,
        pgid: i32,
        until: u64,
        container: Option<(&Path, &str)>,
    ) -> std::io::Result<GuardProc> {
        if let Some(host) = feed.host {
            if let Some(mut io) = host.take() {
                let line = job_line(pgid, until, container);
                if send_to(&mut io.tx, &line).await {
                    return Ok(GuardProc {
                        kind: Kind::Hosted { host, io: Some(io) },
                    });
                }
                tracing::warn!("the guard host does not answer: guarding jobs with a process each");
                host.fail();
            }
        }
        GuardProc::spawn(feed, pgid, until, container)
    }

    /// A guard process of the job's own (`pool_worker guard ...`).
    fn spawn(
        feed: &GuardFeed,
        pgid: i32,
        until: u64,
        container: Option<(&Path, &str)>,
    ) -> std::io::Result<GuardProc> {
        let mut args: Vec<OsString> = vec![
            "--pgid".into(),
            pgid.to_string().into(),
            "--until".into(),
            until.to_string().into(),
        ];
        if let Some((docker, name)) = container {
            args.extend([
                "--docker".into(),
                docker.into(),
                "--container".into(),
                name.into(),
            ]);
        }
        let mut cmd = tokio::process::Command::new(&feed.program);
        cmd.args(&feed.prefix).env_clear();
        for name in KEPT_ENV {
            if let Some(v) = std::env::var_os(name) {
                cmd.env(name, v);
            }
        }
        match feed.args_var {
            Some(var) => {
                let joined: Vec<String> = args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                cmd.env(var, joined.join("\n"));
            }
            None => {
                cmd.args(&args);
            }
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Out of the worker's group: a signal to that group (Ctrl-C, a
            // SIGSTOP of the group) does not reach the guard.
            .process_group(0)
            // Dropped, the guard's input closes and it kills the job.
            .kill_on_drop(false);
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        let Some(stdout) = child.stdout.take() else {
            let _ = child.start_kill();
            return Err(std::io::Error::other("the guard has no standard output"));
        };
        Ok(GuardProc {
            kind: Kind::Proc {
                child,
                stdin,
                lines: BufReader::new(stdout).lines(),
            },
        })
    }

    /// The guard's next report (cancel-safe).
    pub(crate) async fn report(&mut self) -> Report {
        loop {
            let next = match &mut self.kind {
                Kind::Proc { lines, .. } => lines.next_line().await,
                Kind::Hosted { io: Some(io), .. } => io.lines.next_line().await,
                Kind::Hosted { io: None, .. } => return Report::Gone,
            };
            match next {
                Ok(Some(line)) => {
                    if let Some(r) = parse_report(&line) {
                        return r;
                    }
                }
                Ok(None) | Err(_) => return Report::Gone,
            }
        }
    }

    /// Sends a new deadline; false if the guard cannot be reached.
    pub(crate) async fn until(&mut self, until: u64) -> bool {
        self.send(&format!("until {until}\n")).await
    }

    async fn send(&mut self, line: &str) -> bool {
        match &mut self.kind {
            Kind::Proc { stdin, .. } => {
                let Some(stdin) = stdin.as_mut() else {
                    return false;
                };
                send_to(stdin, line).await
            }
            Kind::Hosted { io: Some(io), .. } => send_to(&mut io.tx, line).await,
            Kind::Hosted { io: None, .. } => false,
        }
    }

    /// The job is over: tells the guard to stop, and waits for it to exit
    /// (killing it if it does not in time), or for the host to confirm
    /// (failing the host if it does not).
    pub(crate) async fn end(mut self) {
        self.send("end\n").await;
        match self.kind {
            Kind::Proc {
                mut child, stdin, ..
            } => {
                drop(stdin);
                if tokio::time::timeout(END_WAIT, child.wait()).await.is_err() {
                    let _ = child.start_kill();
                    let _ = tokio::time::timeout(END_WAIT, child.wait()).await;
                }
            }
            Kind::Hosted { host, io } => {
                let Some(mut io) = io else { return };
                let ended = async {
                    loop {
                        match io.lines.next_line().await {
                            Ok(Some(l)) if l.trim() == "ended" => return true,
                            Ok(Some(_)) => {}
                            Ok(None) | Err(_) => return false,
                        }
                    }
                };
                match tokio::time::timeout(END_WAIT, ended).await {
                    Ok(true) => host.put_back(io),
                    _ => {
                        tracing::warn!("the guard host did not confirm a job's end: guarding jobs with a process each");
                        host.fail();
                    }
                }
            }
        }
    }

    /// The guard's pid (for the tests): its own process's, or the host's.
    #[cfg(test)]
    pub(crate) fn id(&self) -> Option<u32> {
        match &self.kind {
            Kind::Proc { child, .. } => child.id(),
            Kind::Hosted { host, .. } => u32::try_from(host.pid).ok(),
        }
    }
}

/// A `frozen BOOT_MS` or `thawed BOOT_MS` report.
fn parse_report(line: &str) -> Option<Report> {
    let (what, at) = line.trim().split_once(' ')?;
    let at = at.trim().parse::<u64>().ok()?;
    match what {
        "frozen" => Some(Report::Frozen(at)),
        "thawed" => Some(Report::Thawed(at)),
        _ => None,
    }
}

/// Writes `line` whole, within [`WRITE_WAIT`].
async fn send_to<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, line: &str) -> bool {
    let write = async {
        w.write_all(line.as_bytes()).await?;
        w.flush().await
    };
    matches!(tokio::time::timeout(WRITE_WAIT, write).await, Ok(Ok(())))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The variable through which [`test_feed`] passes the guard's arguments.
    const ARGS_VAR: &str = "POOL_TEST_GUARD_ARGS";

    /// Not a test: the guard, when this test binary is started by
    /// [`test_feed`]'s program (a unit test cannot name the `pool_worker`
    /// binary). Without the variable it does nothing.
    #[test]
    fn as_guard() {
        let Ok(args) = std::env::var(ARGS_VAR) else {
            return;
        };
        let args = crate::cli::guard_args(std::iter::once("guard").chain(args.lines()))
            .unwrap_or_else(|e| e.exit());
        std::process::exit(main(args));
    }

    /// A feed whose guard is this test binary running [`as_guard`], with
    /// its deadlines' sender. Its command line ends with a tag of its own
    /// (a test filter that matches no test), for [`guard_pid`].
    pub(crate) fn test_feed() -> (watch::Sender<Option<u64>>, GuardFeed) {
        let (tx, rx) = watch::channel(None);
        let tag = format!("tag-{:016x}", crate::clock::random_u64());
        let feed = GuardFeed {
            program: std::env::current_exe().expect("the test binary's path"),
            prefix: [
                "guard::tests::as_guard",
                "--exact",
                "--nocapture",
                "--quiet",
                "--test-threads=1",
                &tag,
            ]
            .into_iter()
            .map(OsString::from)
            .collect(),
            args_var: Some(ARGS_VAR),
            deadlines: rx,
            host: None,
        };
        (tx, feed)
    }

    /// The pid of the running guard started from `feed` (polls /proc for
    /// its tag, at most 10 s).
    pub(crate) async fn guard_pid(feed: &GuardFeed) -> u32 {
        let tag = feed.prefix.last().unwrap().as_encoded_bytes().to_vec();
        for _ in 0..2000 {
            for e in std::fs::read_dir("/proc").unwrap().flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                if cmdline.split(|&b| b == 0).any(|a| a == tag) {
                    return pid;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("no guard process found");
    }

    /// Not a test: the guard host's loop on this test binary's standard
    /// input and output, when [`test_host`] starts it.
    #[test]
    fn as_host() {
        if std::env::var_os(HOST_VAR).is_none() {
            return;
        }
        prepare_process(None);
        std::process::exit(host_main(0, 1));
    }

    /// The variable under which [`as_host`] runs the host's loop.
    const HOST_VAR: &str = "POOL_TEST_GUARD_HOST";

    /// A guard host: this test binary running [`as_host`] (a unit test
    /// cannot fork its multi-threaded harness), as the worker's fork would
    /// be, and a feed that guards jobs there.
    fn test_host() -> (watch::Sender<Option<u64>>, GuardFeed, std::process::Child) {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["guard::tests::as_host", "--exact", "--nocapture", "--quiet"])
            .env(HOST_VAR, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let tx: std::os::fd::OwnedFd = child.stdin.take().unwrap().into();
        let rx: std::os::fd::OwnedFd = child.stdout.take().unwrap().into();
        let host: &'static Host = Box::leak(Box::new(Host {
            pid: child.id() as i32,
            io: std::sync::Mutex::new(HostPipes::Raw(tx, rx)),
        }));
        let (dtx, mut feed) = test_feed();
        feed.host = Some(host);
        (dtx, feed, child)
    }

    /// The host guards one job after another: freezes and thaws the first,
    /// confirms its end and stays; the second is killed with its group when
    /// the worker's side of the pipe closes, and the host exits.
    #[tokio::test]
    async fn the_host_guards_jobs_one_after_another() {
        let (_tx, feed, mut host) = test_host();
        let mut job = sleeper();
        let pid = job.id().unwrap();
        let g = freeze_then_thaw(&feed, pid).await;
        assert_eq!(g.id(), Some(host.id()), "guarded by the host");
        g.end().await;
        assert!(
            state(host.id()).is_some(),
            "the host stays for the next job"
        );
        assert!(
            matches!(state(pid), Some('S' | 'R')),
            "the ended job is left be"
        );
        job.kill().await.unwrap();

        let mut second = sleeper();
        let pid2 = second.id().unwrap();
        let g = GuardProc::start(&feed, pid2 as i32, u64::MAX, None)
            .await
            .unwrap();
        assert_eq!(g.id(), Some(host.id()), "the second job is the host's too");
        // The worker dies: its side of the pipes goes away unannounced.
        drop(g);
        let status = tokio::time::timeout(Duration::from_secs(10), second.wait())
            .await
            .unwrap()
            .unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        let code = host.wait().unwrap();
        assert_eq!(code.code(), Some(0), "the host exits");
        // A third job finds no host: a guard process of its own.
        let mut third = sleeper();
        let g = GuardProc::start(&feed, third.id().unwrap() as i32, u64::MAX, None)
            .await
            .unwrap();
        assert_ne!(g.id(), Some(host.id()));
        g.end().await;
        third.kill().await.unwrap();
    }

    #[test]
    fn job_lines_round_trip() {
        let line = job_line(42, 7, Some((Path::new("/usr/bin/docker x"), "pool-1 2")));
        assert_eq!(
            parse_job(line.trim()),
            Some((
                42,
                7,
                Some((PathBuf::from("/usr/bin/docker x"), "pool-1 2".to_string()))
            ))
        );
        assert_eq!(parse_job(job_line(42, 7, None).trim()), Some((42, 7, None)));
        assert_eq!(parse_job("job 1 7"), None, "not a job's group");
        assert_eq!(parse_job("job 42 7 abc"), None);
        assert_eq!(parse_job("job 42 7 zz 00"), None);
        assert_eq!(parse_job("until 7"), None);
    }

    #[test]
    fn commands_parse() {
        assert_eq!(parse("until 123"), Some(Command::Until(123)));
        assert_eq!(parse("end"), Some(Command::End));
        assert_eq!(parse("until"), None);
        assert_eq!(parse("until -5"), None);
        assert_eq!(parse("stop"), None);
    }

    /// A process's state letter in /proc (`None`: gone or a zombie).
    pub(crate) fn state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let c = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
        (c != 'Z' && c != 'X').then_some(c)
    }

    /// Polls until `pid`'s state satisfies `ok` (at most 10 s).
    pub(crate) async fn until_state(pid: u32, ok: impl Fn(Option<char>) -> bool) {
        for _ in 0..2000 {
            if ok(state(pid)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("process {pid} stayed in state {:?}", state(pid));
    }

    /// A `sleep` in a group of its own.
    fn sleeper() -> tokio::process::Child {
        tokio::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    /// Guards the job `pid` from `feed` with a deadline 300 ms ahead and
    /// no other: the guard freezes it when that passes (not before), and a
    /// later deadline thaws it. The guard, still guarding.
    async fn freeze_then_thaw(feed: &GuardFeed, pid: u32) -> GuardProc {
        let now = crate::clock::boottime_ms();
        let mut g = GuardProc::start(feed, pid as i32, now + 300, None)
            .await
            .unwrap();
        let frozen = tokio::time::timeout(Duration::from_secs(10), g.report())
            .await
            .unwrap();
        let Report::Frozen(at) = frozen else {
            panic!("{frozen:?}")
        };
        assert!(at >= now + 300, "frozen early: {at} < {}", now + 300);
        until_state(pid, |s| s == Some('T')).await;
        assert!(g.until(crate::clock::boottime_ms() + 60_000).await);
        let thawed = tokio::time::timeout(Duration::from_secs(10), g.report())
            .await
            .unwrap();
        assert!(matches!(thawed, Report::Thawed(_)), "{thawed:?}");
        until_state(pid, |s| matches!(s, Some('S' | 'R'))).await;
        g
    }

    /// The dead man's switch: nothing more is sent after the first
    /// deadline, and the guard freezes the job when it passes; a later
    /// deadline thaws it; `end` lets the guard exit, leaving the job be.
    #[tokio::test]
    async fn the_guard_freezes_when_no_new_deadline_comes_and_thaws_on_one() {
        let mut job = sleeper();
        let pid = job.id().unwrap();
        let (_tx, feed) = test_feed();
        let g = freeze_then_thaw(&feed, pid).await;
        let gpid = g.id().unwrap();
        g.end().await;
        assert_eq!(state(gpid), None);
        assert!(matches!(state(pid), Some('S' | 'R')));
        job.kill().await.unwrap();
    }

    /// The worker died (its end of the pipe closed without `end`): the guard
    /// kills the job's whole group, frozen or not.
    #[tokio::test]
    async fn end_of_input_without_end_kills_the_group() {
        for until in [0, u64::MAX] {
            let mut job = sleeper();
            let pid = job.id().unwrap();
            let (_tx, feed) = test_feed();
            let mut g = GuardProc::start(&feed, pid as i32, until, None)
                .await
                .unwrap();
            if until == 0 {
                let r = g.report().await;
                assert!(matches!(r, Report::Frozen(_)), "{r:?}");
            }
            let gpid = g.id().unwrap();
            // The worker's side goes away: only its pipe closes.
            let Kind::Proc { stdin, child, .. } = &mut g.kind else {
                panic!("a guard process")
            };
            drop(stdin.take());
            let status = tokio::time::timeout(Duration::from_secs(10), job.wait())
                .await
                .unwrap()
                .unwrap();
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(status.signal(), Some(libc::SIGKILL), "until {until}");
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
            assert_eq!(state(gpid), None);
        }
    }
}
