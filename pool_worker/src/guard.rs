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
//! guard is a separate, tiny process, a hidden subcommand of the same
//! binary (`pool_worker guard`, started through `/proc/self/exe`), with a
//! blocking loop of `poll(2)` on its standard input and no async runtime.
//! It depends on nothing the worker must do except write to its pipe.
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
//! descriptor above 2, makes itself non-dumpable, and gets an environment
//! of only `PATH`, `HOME` and docker's variables: it never sees the
//! worker's credentials.

use std::ffi::OsString;
use std::io::Write as _;
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
    prepare_process();
    crate::account::init_guard();
    let job = Target {
        pgid: nix::unistd::Pid::from_raw(args.pgid),
        docker: args.docker.zip(args.container),
    };
    let mut deadline = args.until;
    let mut frozen = false;
    let mut input = Vec::new();
    loop {
        let now = crate::clock::boottime_ms();
        if !frozen && now >= deadline {
            job.freeze();
            frozen = true;
            report("frozen", now);
        }
        let timeout = if frozen {
            -1
        } else {
            i32::try_from(deadline - now).unwrap_or(i32::MAX)
        };
        match wait_input(timeout) {
            Input::Nothing => continue,
            Input::Closed => {
                job.kill(frozen);
                return 0;
            }
            Input::Bytes(bytes) => input.extend_from_slice(&bytes),
        }
        while let Some(i) = input.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = input.drain(..=i).collect();
            let line = String::from_utf8_lossy(&line);
            match parse(line.trim()) {
                Some(Command::End) => {
                    // The job is over; should it have been left frozen, its
                    // runner kills it.
                    return 0;
                }
                Some(Command::Until(t)) => {
                    deadline = t;
                    let now = crate::clock::boottime_ms();
                    if frozen && t > now {
                        job.thaw();
                        frozen = false;
                        report("thawed", now);
                    }
                }
                None => eprintln!("pool_worker guard: ignoring the line '{}'", line.trim()),
            }
        }
        if input.len() > 4096 {
            eprintln!("pool_worker guard: ignoring an overlong line");
            input.clear();
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

/// Ignores the signals that stop a worker, closes inherited descriptors,
/// and makes the process non-dumpable.
fn prepare_process() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    // SAFETY: close_range on descriptors this process does not use (the
    // standard ones stay); a kernel without it returns ENOSYS, ignored.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    let _ = nix::sys::prctl::set_dumpable(false);
}

enum Input {
    /// The timeout passed (or a signal interrupted the wait).
    Nothing,
    Bytes(Vec<u8>),
    /// End of input, or it cannot be read.
    Closed,
}

/// Waits up to `timeout_ms` (-1: forever) for standard input.
fn wait_input(timeout_ms: i32) -> Input {
    let mut fds = [libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: one pollfd, which we own.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, timeout_ms) };
    if n < 0 {
        return match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::Interrupted => Input::Nothing,
            _ => Input::Closed,
        };
    }
    if n == 0 {
        return Input::Nothing;
    }
    let mut buf = [0u8; 512];
    // SAFETY: reads at most buf.len() bytes into buf.
    let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
    match r {
        0 => Input::Closed,
        r if r > 0 => Input::Bytes(buf[..r as usize].to_vec()),
        _ => match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => Input::Nothing,
            _ => Input::Closed,
        },
    }
}

/// One report line on standard output (nobody may be reading any more:
/// errors are ignored).
fn report(what: &str, at: u64) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{what} {at}");
    let _ = out.flush();
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

/// How a runner starts the guard of its jobs, and the deadlines it feeds
/// them (`CLOCK_BOOTTIME`, ms; `None` before the first, which freezes a job
/// started then at once).
#[derive(Clone, Debug)]
pub(crate) struct GuardFeed {
    /// The guard's program: this binary.
    pub(crate) program: PathBuf,
    /// Arguments before the guard's own.
    pub(crate) prefix: Vec<OsString>,
    /// Pass the guard's arguments in this variable (one a line) instead
    /// of on the command line (the unit tests' hook).
    pub(crate) args_var: Option<&'static str>,
    pub(crate) deadlines: watch::Receiver<Option<u64>>,
}

impl GuardFeed {
    /// The worker's: `/proc/self/exe guard ...` (the running binary, even
    /// if its file was replaced since).
    pub(crate) fn worker(deadlines: watch::Receiver<Option<u64>>) -> GuardFeed {
        GuardFeed {
            program: PathBuf::from("/proc/self/exe"),
            prefix: vec!["guard".into()],
            args_var: None,
            deadlines,
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
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

/// How long a guard told `end` may take to exit.
const END_WAIT: Duration = Duration::from_secs(2);

/// How long a write to the guard may take.
const WRITE_WAIT: Duration = Duration::from_secs(1);

impl GuardProc {
    /// Starts the guard of the job whose group is `pgid`, with the first
    /// deadline `until`.
    pub(crate) fn start(
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
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The guard's next report (cancel-safe).
    pub(crate) async fn report(&mut self) -> Report {
        loop {
            match self.lines.next_line().await {
                Ok(Some(line)) => {
                    let parsed = line.trim().split_once(' ').and_then(|(what, at)| {
                        let at = at.trim().parse::<u64>().ok()?;
                        match what {
                            "frozen" => Some(Report::Frozen(at)),
                            "thawed" => Some(Report::Thawed(at)),
                            _ => None,
                        }
                    });
                    if let Some(r) = parsed {
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
        let Some(stdin) = self.stdin.as_mut() else {
            return false;
        };
        let write = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        };
        matches!(tokio::time::timeout(WRITE_WAIT, write).await, Ok(Ok(())))
    }

    /// The job is over: tells the guard to exit and waits for it (killing
    /// it if it does not exit in time).
    pub(crate) async fn end(mut self) {
        self.send("end\n").await;
        drop(self.stdin.take());
        if tokio::time::timeout(END_WAIT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = tokio::time::timeout(END_WAIT, self.child.wait()).await;
        }
    }

    /// The guard's pid (for the tests).
    #[cfg(test)]
    pub(crate) fn id(&self) -> Option<u32> {
        self.child.id()
    }
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
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: GuardArgs,
        }
        let cli = Cli::try_parse_from(std::iter::once("guard").chain(args.lines()))
            .unwrap_or_else(|e| e.exit());
        std::process::exit(main(cli.args));
    }

    /// A feed whose guard is this test binary running [`as_guard`], with
    /// its deadlines' sender. Its command line ends with a tag of its own
    /// (a test filter that matches no test), for [`guard_pid`].
    pub(crate) fn test_feed() -> (watch::Sender<Option<u64>>, GuardFeed) {
        let (tx, rx) = watch::channel(None);
        let tag = format!("tag-{:016x}", crate::isolate::random_u64());
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

    /// The dead man's switch: nothing more is sent after the first
    /// deadline, and the guard freezes the job when it passes; a later
    /// deadline thaws it; `end` lets the guard exit, leaving the job be.
    #[tokio::test]
    async fn the_guard_freezes_when_no_new_deadline_comes_and_thaws_on_one() {
        let mut job = sleeper();
        let pid = job.id().unwrap();
        let (_tx, feed) = test_feed();
        let now = crate::clock::boottime_ms();
        let mut g = GuardProc::start(&feed, pid as i32, now + 300, None).unwrap();
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
            let mut g = GuardProc::start(&feed, pid as i32, until, None).unwrap();
            if until == 0 {
                let r = g.report().await;
                assert!(matches!(r, Report::Frozen(_)), "{r:?}");
            }
            let gpid = g.id().unwrap();
            // The worker's side goes away: only its pipe closes.
            drop(g.stdin.take());
            let status = tokio::time::timeout(Duration::from_secs(10), job.wait())
                .await
                .unwrap()
                .unwrap();
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(status.signal(), Some(libc::SIGKILL), "until {until}");
            let _ = tokio::time::timeout(Duration::from_secs(10), g.child.wait()).await;
            assert_eq!(state(gpid), None);
        }
    }
}
