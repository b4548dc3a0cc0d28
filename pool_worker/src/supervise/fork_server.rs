//! The fork server: where `supervise` starts its workers from, so that a
//! process per order does not pay for an `exec` of this binary every time
//! (bench/RESULTS.md, issue 35: a worker's start was about 3.6 ms of CPU
//! per order, the dynamic loader, relocations and page faults of a 15 MB
//! binary with libssl and libcrypto, and the supervisor's own fork of a
//! multi-threaded process another 0.8).
//!
//! The supervisor starts this executable once, with [`VAR`] set and one
//! end of a Unix socket pair as its standard input. That process, the
//! server, stays single-threaded: it never starts a runtime, reads no
//! configuration, opens no client. For each worker the supervisor sends a
//! [`Request::Spawn`] with the child's environment changes and, as
//! `SCM_RIGHTS`, its standard input, output and error and the write end of
//! its ready pipe ([`super::ready`]). The server forks; the child puts those
//! descriptors in place, sets the environment, asks for `SIGKILL` when the
//! server dies (`PR_SET_PDEATHSIG`, as every supervised child), and returns
//! to [`crate::cli::main`], which runs worker mode exactly as after an
//! `exec` with no arguments. A worker is thus still a new process for every
//! order (seed 002: it exits after each order and is started again), with
//! nothing of an earlier worker in it: the server that it copies has never
//! run one.
//!
//! The server reaps its children (a `signalfd` for `SIGCHLD`) and reports
//! each exit ([`Reply::Exited`]: the wait status, and the CPU time of the
//! child and its reaped descendants, for crate::account). It signals a
//! child only while it has not reaped it ([`Request::Kill`]), so a signal
//! never reaches a pid the kernel has given to another process.
//!
//! It ignores `SIGINT`, `SIGTERM`, `SIGHUP` and `SIGQUIT` (a terminal's
//! Ctrl-C reaches the whole process group: the workers get it and stop as
//! they would; the server must not die first and take them down with
//! `SIGKILL`), and the child restores them. It dies with the supervisor's
//! spawning thread (`PR_SET_PDEATHSIG`), and its children with it.
//!
//! A new binary at the program's path (an upgrade) is picked up: before
//! each start the supervisor compares the file with the one the server was
//! started from, and if it changed it starts a new server and retires the
//! old one ([`Request::Retire`]: it exits once its last child has).
//!
//! No crate does this: a fork server is a few system calls around
//! `fork`, and the part that matters (what the child may do before it
//! becomes a worker) is ours to get right. `--no-fork-server` (or another
//! `--program`) starts every worker with `fork` and `exec` as before.

use anyhow::{anyhow, Context as _};
use nix::sys::signal::{SigHandler, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Set (to `1`) in the server's environment by the supervisor that starts
/// it; the server removes it before anything else.
pub(crate) const VAR: &str = "POOL_WORKER_FORK_SERVER";

/// The largest message either side sends (a request's environment changes
/// are a few variables; a larger one is started with `exec` instead).
const MAX_MESSAGE: usize = 60 * 1024;

/// The descriptors a [`Request::Spawn`] carries, in this order: standard
/// input, output, error, then the ready pipe's write end if `ready`.
const STDIO: [RawFd; 3] = [0, 1, 2];

/// The kernel name the server takes (`ps -o comm`), and the one its
/// children take back.
const SERVER_COMM: &str = "pw-fork-server";

type Env = Vec<(Vec<u8>, Option<Vec<u8>>)>;

#[derive(Serialize, Deserialize, Debug)]
enum Request {
    /// Fork a worker: its environment on top of the server's (`None`:
    /// removed), and whether a ready pipe comes with the descriptors.
    Spawn { id: u64, env: Env, ready: bool },
    /// Send `signal` to `pid` if it is a child not reaped yet.
    Kill { pid: i32, signal: i32 },
    /// Start nothing more; exit once the last child has exited.
    Retire,
}

#[derive(Serialize, Deserialize, Debug)]
enum Reply {
    Spawned {
        id: u64,
        pid: i32,
    },
    Failed {
        id: u64,
        error: String,
    },
    /// `status`: the wait status; `cpu_us`: the child's user and system
    /// time, its reaped descendants' included (`wait4`'s rusage).
    Exited {
        pid: i32,
        status: i32,
        cpu_us: u64,
    },
}

// ------------------------------------------------------------ the server

/// What [`serve`] ends with.
pub(crate) enum Served {
    /// This is a forked child, set up: run worker mode.
    Child,
    /// The server is done (its exit status).
    Done(u8),
}

/// The server's loop, in the process the supervisor started with [`VAR`]
/// set (called first thing in [`crate::cli::main`], while the process has
/// one thread). Returns [`Served::Child`] in each forked child, once its
/// descriptors, environment and signals are those of a worker started with
/// `exec`; [`Served::Done`] in the server when it ends.
pub(crate) fn serve() -> Served {
    // SAFETY: one thread (the caller's promise): nothing reads the
    // environment meanwhile.
    unsafe { std::env::remove_var(VAR) };
    // Only `supervise` sets the variable, with a socket pair as input: set
    // by hand, it must not turn a command into a server reading a terminal.
    let seqpacket = nix::sys::socket::getsockopt(
        &unsafe { BorrowedFd::borrow_raw(0) },
        nix::sys::socket::sockopt::SockType,
    );
    if !matches!(seqpacket, Ok(nix::sys::socket::SockType::SeqPacket)) {
        eprintln!("pool_worker: {VAR} is for the fork server that `pool_worker supervise` starts; unset it");
        return Served::Done(2);
    }
    match serve_loop() {
        Ok(Some(child)) => match child.become_worker() {
            Ok(()) => Served::Child,
            Err(e) => {
                eprintln!("pool_worker: fork server: cannot set up a worker: {e:#}");
                // Not the server's exit path: no destructors of its state.
                unsafe { libc::_exit(1) }
            }
        },
        Ok(None) => Served::Done(0),
        Err(e) => {
            eprintln!("pool_worker: fork server: {e:#}");
            Served::Done(1)
        }
    }
}

/// What a forked child needs to become a worker.
struct ChildSetup {
    server: nix::unistd::Pid,
    fds: Vec<OwnedFd>,
    env: Env,
}

const TERMINAL_SIGNALS: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

fn set_comm(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        let _ = nix::sys::prctl::set_name(&c);
    }
}

/// The server: `Ok(None)` when it is done, `Ok(Some)` in a forked child.
fn serve_loop() -> anyhow::Result<Option<ChildSetup>> {
    let server = nix::unistd::getpid();
    // SAFETY: descriptor 0 is the socket the supervisor gave us, and
    // nothing else in this process uses standard input.
    let sock = unsafe { OwnedFd::from_raw_fd(0) };
    set_comm(SERVER_COMM);
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    chld.thread_block().context("cannot block SIGCHLD")?;
    let sigfd = SignalFd::with_flags(&chld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .context("cannot make a signalfd")?;
    for s in TERMINAL_SIGNALS {
        // SAFETY: SIG_IGN installs no handler.
        unsafe { nix::sys::signal::signal(s, SigHandler::SigIgn) }.context("cannot ignore")?;
    }
    librdkafka_global_init();
    let mut live: HashSet<i32> = HashSet::new();
    let mut open = true;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        if !open && live.is_empty() {
            return Ok(None);
        }
        let (sock_ready, sig_ready) = {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let mut fds = vec![PollFd::new(sigfd.as_fd(), PollFlags::POLLIN)];
            if open {
                fds.push(PollFd::new(sock.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e).context("poll"),
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (fds.get(1).is_some_and(ready), ready(&fds[0]))
        };
        if sig_ready {
            while let Ok(Some(_)) = sigfd.read_signal() {}
            reap(&sock, &mut live);
        }
        if !sock_ready {
            continue;
        }
        let (request, fds) = match receive(sock.as_raw_fd(), &mut buf) {
            Ok(None) => {
                // The supervisor is gone: its children die with it (their
                // parent-death signal fires when this process exits).
                open = false;
                continue;
            }
            Ok(Some(r)) => r,
            Err(e) => {
                eprintln!("pool_worker: fork server: {e:#}");
                // The socket itself failed: nothing more can come.
                if e.downcast_ref::<nix::errno::Errno>().is_some() {
                    open = false;
                }
                continue;
            }
        };
        match request {
            Request::Retire => open = false,
            Request::Kill { pid, signal } => {
                if live.contains(&pid) {
                    if let Ok(s) = Signal::try_from(signal) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), s);
                    }
                }
            }
            Request::Spawn { id, env, ready } => {
                let want = STDIO.len() + usize::from(ready);
                if fds.len() != want {
                    send(
                        &sock,
                        &Reply::Failed {
                            id,
                            error: format!("{} descriptors, not {want}", fds.len()),
                        },
                    );
                    continue;
                }
                // SAFETY: this process has one thread, so the child may do
                // anything; it returns to `main` (see `become_worker`).
                match unsafe { nix::unistd::fork() } {
                    Ok(nix::unistd::ForkResult::Child) => {
                        drop(sigfd);
                        // Descriptor 0 is closed here and given the
                        // child's standard input in `become_worker`.
                        drop(sock);
                        return Ok(Some(ChildSetup { server, fds, env }));
                    }
                    Ok(nix::unistd::ForkResult::Parent { child }) => {
                        drop(fds);
                        live.insert(child.as_raw());
                        send(
                            &sock,
                            &Reply::Spawned {
                                id,
                                pid: child.as_raw(),
                            },
                        );
                    }
                    Err(e) => send(
                        &sock,
                        &Reply::Failed {
                            id,
                            error: format!("fork: {e}"),
                        },
                    ),
                }
            }
        }
    }
}

/// librdkafka's once-per-process set-up, done here once for every worker
/// (its CRC-32C tables: `crc32c_zeros` was the hottest function of a
/// worker's main thread, about 0.1 ms per process; bench/RESULTS.md). It
/// starts no thread, so the server stays single-threaded. No public call
/// does only that; clearing a certificate on a fresh configuration runs
/// it first (librdkafka's `rd_kafka_conf_set_ssl_cert` with no buffer).
fn librdkafka_global_init() {
    use rdkafka::bindings as rd;
    // SAFETY: a configuration object of our own, destroyed before return;
    // a null buffer with size 0 only clears the (unset) certificate; the
    // error buffer is ours and its size is given.
    unsafe {
        let conf = rd::rd_kafka_conf_new();
        if conf.is_null() {
            return;
        }
        let mut err = [0 as std::ffi::c_char; 256];
        rd::rd_kafka_conf_set_ssl_cert(
            conf,
            rd::rd_kafka_cert_type_t::RD_KAFKA_CERT_PUBLIC_KEY,
            rd::rd_kafka_cert_enc_t::RD_KAFKA_CERT_ENC_PEM,
            std::ptr::null(),
            0,
            err.as_mut_ptr(),
            err.len(),
        );
        rd::rd_kafka_conf_destroy(conf);
    }
}

/// Reports every child that has exited, then reaps it. The exit is told
/// first (`waitid` with `WNOWAIT`, which leaves the child a zombie and
/// gives its status and rusage): reaping a worker costs the reaper a few
/// hundred microseconds of the kernel's own (dropping the worker's cached
/// /proc entries: `release_task`, `d_walk`; bench/RESULTS.md), and the
/// supervisor's `go` to the instance's standby waits for the word, not for
/// that. A zombie's pid is not reused, so a `Kill` meanwhile is safe; it is
/// ignored, the child being gone from `live`.
fn reap(sock: &OwnedFd, live: &mut HashSet<i32>) {
    loop {
        // SAFETY: all-zero siginfo and rusage are valid, and waitid fills
        // them (si_pid stays 0 when no child has exited: WNOHANG).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: the raw system call (its fifth argument, the rusage, is
        // Linux's and not in libc's wrapper) on our own out-parameters.
        let r = unsafe {
            libc::syscall(
                libc::SYS_waitid,
                libc::P_ALL,
                0,
                &mut info as *mut libc::siginfo_t,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                &mut usage as *mut libc::rusage,
            )
        };
        // SAFETY: waitid filled a SIGCHLD siginfo (or left it zero).
        let (pid, code, value) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
        if r != 0 || pid <= 0 {
            return;
        }
        live.remove(&pid);
        let status = wait_status(code, value);
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        send(
            sock,
            &Reply::Exited {
                pid,
                status,
                cpu_us: us(usage.ru_utime) + us(usage.ru_stime),
            },
        );
        let mut reaped = 0;
        // SAFETY: plain system call; the child has exited, so it returns at once.
        unsafe { libc::waitpid(pid, &mut reaped, 0) };
    }
}

/// The wait status (as `wait4` gives it) of a child that `waitid`
/// reported with `si_code` and `si_status`.
fn wait_status(code: i32, value: i32) -> i32 {
    match code {
        libc::CLD_EXITED => (value & 0xff) << 8,
        libc::CLD_DUMPED => (value & 0x7f) | 0x80,
        _ => value & 0x7f,
    }
}

impl ChildSetup {
    /// In the forked child (one thread): its descriptors, environment,
    /// signals and name as a worker started with `exec` would have them.
    fn become_worker(self) -> anyhow::Result<()> {
        use nix::fcntl::{fcntl, FcntlArg};
        // Out of the way of 0-3 first, whatever numbers they came as.
        let mut high = Vec::with_capacity(self.fds.len());
        for fd in &self.fds {
            let raw = fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(64)).context("F_DUPFD")?;
            // SAFETY: fcntl just made this descriptor, and nothing else owns it.
            high.push(unsafe { OwnedFd::from_raw_fd(raw) });
        }
        drop(self.fds);
        for (fd, target) in high.iter().zip(STDIO.into_iter().chain([super::ready::FD])) {
            // dup2 leaves the copy without close-on-exec: a job inherits
            // 0-2 as from an exec'd worker, and the worker itself closes
            // the ready pipe on exec (ready::take).
            // SAFETY: plain system call on descriptors of our own.
            if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
                return Err(io::Error::last_os_error()).context("dup2");
            }
        }
        drop(high);
        for (k, v) in &self.env {
            let k = OsStr::from_bytes(k);
            // SAFETY: one thread: nothing reads the environment meanwhile.
            match v {
                Some(v) => unsafe { std::env::set_var(k, OsStr::from_bytes(v)) },
                None => unsafe { std::env::remove_var(k) },
            }
        }
        for s in TERMINAL_SIGNALS {
            // SAFETY: SIG_DFL installs no handler.
            unsafe { nix::sys::signal::signal(s, SigHandler::SigDfl) }.context("signal")?;
        }
        SigSet::all().thread_unblock().context("sigprocmask")?;
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).context("PR_SET_PDEATHSIG")?;
        // The server may have died before prctl: then nobody would send it.
        if nix::unistd::getppid() != self.server {
            return Err(anyhow!("the fork server is gone"));
        }
        set_comm("pool_worker");
        Ok(())
    }
}

/// Sends `message` with `fds`; one datagram (`SOCK_SEQPACKET`).
fn send_with(sock: RawFd, message: &[u8], fds: &[RawFd], flags: MsgFlags) -> nix::Result<()> {
    let iov = [IoSlice::new(message)];
    let cmsgs = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsgs };
    nix::sys::socket::sendmsg::<()>(sock, &iov, cmsgs, flags, None).map(|_| ())
}

/// The server's replies: a reply that cannot be sent (the supervisor is
/// gone) is dropped.
fn send(sock: &OwnedFd, reply: &Reply) {
    if let Ok(bytes) = serde_json::to_vec(reply) {
        let _ = send_with(sock.as_raw_fd(), &bytes, &[], MsgFlags::empty());
    }
}

/// Receives one message and the descriptors with it; `None` at the end of
/// the socket.
fn receive<T: for<'de> Deserialize<'de>>(
    sock: RawFd,
    buf: &mut [u8],
) -> anyhow::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut space = nix::cmsg_space!([RawFd; 8]);
    let (n, fds, truncated) = loop {
        let mut iov = [IoSliceMut::new(buf)];
        match nix::sys::socket::recvmsg::<()>(
            sock,
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("recvmsg"),
            Ok(msg) => {
                let mut fds = Vec::new();
                for c in msg.cmsgs().context("control messages")? {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: the kernel just installed these in this
                        // process for us alone.
                        fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
                    }
                }
                let truncated = msg
                    .flags
                    .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
                break (msg.bytes, fds, truncated);
            }
        }
    };
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    if truncated {
        return Err(anyhow!("a message cut short"));
    }
    let message = serde_json::from_slice(&buf[..n]).context("not a message")?;
    Ok(Some((message, fds)))
}

// -------------------------------------------------------- the supervisor

/// Which file a server was started from: a different one at the path
/// (an upgrade) gets a new server.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FileId {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

fn file_id(path: &Path) -> io::Result<FileId> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path)?;
    Ok(FileId {
        dev: m.dev(),
        ino: m.ino(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        len: m.len(),
    })
}

/// What a spawn request waits for: the child's pid and its exit.
type Spawned = io::Result<(i32, oneshot::Receiver<(ExitStatus, u64)>)>;

/// Replies the reader thread has yet to route.
#[derive(Default)]
struct Routes {
    spawns: HashMap<u64, oneshot::Sender<Spawned>>,
    exits: HashMap<i32, oneshot::Sender<(ExitStatus, u64)>>,
    /// The server has closed its end (it died, or retired and exited).
    closed: bool,
}

/// One running server, as the supervisor sees it.
pub(crate) struct Server {
    sock: OwnedFd,
    routes: Arc<Mutex<Routes>>,
    file: FileId,
    next_id: std::sync::atomic::AtomicU64,
}

impl Server {
    /// Starts a server from `program` (on the calling thread, which must
    /// live as long as the supervisor: the server's parent-death signal).
    pub(crate) fn start(program: &Path) -> anyhow::Result<Arc<Server>> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let file = file_id(program).context("the program")?;
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .context("socketpair")?;
        let mut cmd = std::process::Command::new(program);
        cmd.env(VAR, "1")
            .stdin(std::process::Stdio::from(theirs))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        super::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().context("cannot start the fork server")?;
        let pid = child.id();
        let read = ours.try_clone().context("dup")?;
        let routes = Arc::new(Mutex::new(Routes::default()));
        let r = routes.clone();
        std::thread::Builder::new()
            .name("fork-server-rx".into())
            .spawn(move || {
                read_replies(read, &r);
                // Reaps the server (it is this process's child).
                let _ = child.wait();
            })
            .context("cannot start the fork server's reader")?;
        tracing::debug!(pid, "fork server started");
        Ok(Arc::new(Server {
            sock: ours,
            routes,
            file,
            next_id: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// Whether the server still runs and `program` is still the file it
    /// was started from.
    pub(crate) fn usable(&self, program: &Path) -> bool {
        !self.lock().closed && file_id(program).is_ok_and(|f| f == self.file)
    }

    /// Tells the server to start nothing more and to exit after its last
    /// child.
    pub(crate) fn retire(&self) {
        self.request(&Request::Retire, &[]);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn request(&self, r: &Request, fds: &[RawFd]) -> bool {
        let Ok(bytes) = serde_json::to_vec(r) else {
            return false;
        };
        bytes.len() <= MAX_MESSAGE
            && send_with(
                self.sock.as_raw_fd(),
                &bytes,
                fds,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            )
            .is_ok()
    }

    /// Sends `signal` to the server's child `pid`, unless reaped already.
    /// If the server cannot be told (gone, or not reading), the signal goes
    /// straight to `pid`: the server gone, its children have died with it.
    fn kill(&self, pid: i32, signal: Signal) {
        if !self.request(
            &Request::Kill {
                pid,
                signal: signal as i32,
            },
            &[],
        ) && !self.lock().closed
        {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// Asks for a child with `env` (on top of the server's environment,
    /// which is the supervisor's at the server's start) and `fds` (standard
    /// input, output, error, and the ready pipe's write end if any); the
    /// answer comes on the returned receiver. `Err` if it cannot be asked
    /// (the caller then starts the child with `exec`).
    pub(crate) fn spawn(
        &self,
        env: &[(OsString, Option<OsString>)],
        fds: &[RawFd],
    ) -> io::Result<oneshot::Receiver<Spawned>> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let env: Env = env
            .iter()
            .map(|(k, v)| (k.clone().into_vec(), v.clone().map(OsString::into_vec)))
            .collect();
        let (tx, rx) = oneshot::channel();
        {
            let mut routes = self.lock();
            if routes.closed {
                return Err(io::Error::other("the fork server is gone"));
            }
            routes.spawns.insert(id, tx);
        }
        let request = Request::Spawn {
            id,
            env,
            ready: fds.len() > STDIO.len(),
        };
        if !self.request(&request, fds) {
            self.lock().spawns.remove(&id);
            return Err(io::Error::other("cannot reach the fork server"));
        }
        Ok(rx)
    }
}

/// The reader thread: routes each reply until the server closes its end.
fn read_replies(sock: OwnedFd, routes: &Mutex<Routes>) {
    let lock = || routes.lock().unwrap_or_else(|p| p.into_inner());
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let reply = match receive::<Reply>(sock.as_raw_fd(), &mut buf) {
            Ok(Some((r, _))) => r,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("fork server: {e:#}");
                // A socket error ends the server's use; a bad message
                // (none of ours is) is skipped.
                if e.downcast_ref::<nix::errno::Errno>().is_some() {
                    break;
                }
                continue;
            }
        };
        match reply {
            Reply::Spawned { id, pid } => {
                let (tx, rx) = oneshot::channel();
                let mut r = lock();
                r.exits.insert(pid, tx);
                let asked = r.spawns.remove(&id);
                if asked.is_none_or(|s| s.send(Ok((pid, rx))).is_err()) {
                    // Nobody waits for this child any more: it must not run.
                    r.exits.remove(&pid);
                    let kill = Request::Kill {
                        pid,
                        signal: Signal::SIGKILL as i32,
                    };
                    if let Ok(bytes) = serde_json::to_vec(&kill) {
                        let _ = send_with(sock.as_raw_fd(), &bytes, &[], MsgFlags::MSG_NOSIGNAL);
                    }
                }
            }
            Reply::Failed { id, error } => {
                if let Some(s) = lock().spawns.remove(&id) {
                    let _ = s.send(Err(io::Error::other(error)));
                }
            }
            Reply::Exited {
                pid,
                status,
                cpu_us,
            } => {
                if let Some(s) = lock().exits.remove(&pid) {
                    let _ = s.send((ExitStatus::from_raw(status), cpu_us));
                }
            }
        }
    }
    // Unanswered spawns fail; children not reported exited died with the
    // server (their parent-death signal): their receivers see the senders
    // dropped ([`Forked::wait`]).
    let mut r = lock();
    r.closed = true;
    r.spawns.clear();
    r.exits.clear();
}

/// A worker the fork server started: its pid, its exit once reported, and
/// the supervisor's ends of its standard streams. Killed if dropped before
/// it exits (as a `kill_on_drop` child).
pub(crate) struct Forked {
    pid: i32,
    server: Arc<Server>,
    exit: oneshot::Receiver<(ExitStatus, u64)>,
    status: Option<ExitStatus>,
    pub(crate) stdin: Option<tokio::net::unix::pipe::Sender>,
    pub(crate) stdout: Option<tokio::net::unix::pipe::Receiver>,
    pub(crate) stderr: Option<tokio::net::unix::pipe::Receiver>,
}

/// The status of a child whose server died before reporting its exit: it
/// died of its parent-death signal.
fn killed() -> ExitStatus {
    ExitStatus::from_raw(libc::SIGKILL)
}

impl Forked {
    /// The pid while the child runs (`None` once its exit is known).
    pub(crate) fn id(&self) -> Option<u32> {
        match self.status {
            None => u32::try_from(self.pid).ok(),
            Some(_) => None,
        }
    }

    fn exited(&mut self, got: Option<(ExitStatus, u64)>) -> ExitStatus {
        let status = match got {
            Some((s, cpu_us)) => {
                crate::account::reaped_elsewhere(cpu_us);
                s
            }
            None => killed(),
        };
        self.status = Some(status);
        status
    }

    /// Waits for the child's exit. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let got = (&mut self.exit).await.ok();
        Ok(self.exited(got))
    }

    /// The exit status if the child has exited, without waiting.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        use tokio::sync::oneshot::error::TryRecvError;
        Ok(match self.exit.try_recv() {
            Ok(got) => Some(self.exited(Some(got))),
            Err(TryRecvError::Closed) => Some(self.exited(None)),
            Err(TryRecvError::Empty) => None,
        })
    }

    /// Sends `signal` to the child unless it has exited.
    pub(crate) fn signal(&mut self, signal: Signal) {
        if matches!(self.try_wait(), Ok(None)) {
            self.server.kill(self.pid, signal);
        }
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// One of the descriptors a start sends.
enum Slot {
    /// Made for this child (sent, then closed here).
    Own(OwnedFd),
    /// The supervisor's own standard output or error (`inherit`).
    Lent(RawFd),
}

/// The supervisor's side of one start: the descriptors to send, and the
/// ends it keeps.
pub(crate) struct Stdio {
    /// Standard input, output, error, then the ready pipe's write end.
    give: Vec<Slot>,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

/// How the child's standard output and error are given.
#[derive(Clone, Copy)]
pub(crate) enum Output {
    Piped,
    Inherit,
    Null,
}

impl Stdio {
    /// The child's streams: stdin a pipe (`piped_stdin`) or `/dev/null`;
    /// stdout and stderr as `output` says; then `ready`, the ready pipe's
    /// write end.
    pub(crate) fn new(
        piped_stdin: bool,
        output: Output,
        ready: Option<BorrowedFd<'_>>,
    ) -> io::Result<Stdio> {
        let pipe = || -> io::Result<(OwnedFd, OwnedFd)> {
            Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
        };
        let null = || -> io::Result<Slot> {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")?;
            Ok(Slot::Own(f.into()))
        };
        let mut s = Stdio {
            give: Vec::with_capacity(4),
            stdin: None,
            stdout: None,
            stderr: None,
        };
        if piped_stdin {
            let (r, w) = pipe()?;
            s.give.push(Slot::Own(r));
            s.stdin = Some(w);
        } else {
            s.give.push(null()?);
        }
        for (fd, keep) in [(1, &mut s.stdout), (2, &mut s.stderr)] {
            match output {
                Output::Piped => {
                    let (r, w) = pipe()?;
                    s.give.push(Slot::Own(w));
                    *keep = Some(r);
                }
                Output::Null => s.give.push(null()?),
                Output::Inherit => s.give.push(Slot::Lent(fd)),
            }
        }
        if let Some(r) = ready {
            s.give.push(Slot::Own(r.try_clone_to_owned()?));
        }
        Ok(s)
    }

    /// The raw descriptors in the order a spawn request sends them.
    fn raw(&self) -> Vec<RawFd> {
        self.give
            .iter()
            .map(|s| match s {
                Slot::Own(f) => f.as_raw_fd(),
                Slot::Lent(fd) => *fd,
            })
            .collect()
    }
}

/// Starts a child through `server` with `env` and `stdio`; `Err` if the
/// server cannot be asked or answers with a failure (the caller may then
/// start it with `exec`).
pub(crate) async fn spawn(
    server: Arc<Server>,
    env: &[(OsString, Option<OsString>)],
    stdio: Stdio,
) -> io::Result<Forked> {
    let rx = server.spawn(env, &stdio.raw())?;
    let Stdio {
        give,
        stdin,
        stdout,
        stderr,
        ..
    } = stdio;
    // The child has its copies (or will never need them).
    drop(give);
    let (pid, exit) = rx
        .await
        .map_err(|_| io::Error::other("the fork server is gone"))??;
    let mut forked = Forked {
        pid,
        server,
        exit,
        status: None,
        stdin: None,
        stdout: None,
        stderr: None,
    };
    forked.stdin = stdin
        .map(tokio::net::unix::pipe::Sender::from_owned_fd)
        .transpose()?;
    forked.stdout = stdout
        .map(tokio::net::unix::pipe::Receiver::from_owned_fd)
        .transpose()?;
    forked.stderr = stderr
        .map(tokio::net::unix::pipe::Receiver::from_owned_fd)
        .transpose()?;
    Ok(forked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    /// A child's exit as `waitid` reports it is the status `wait4` would
    /// have given: its code, or the signal that ended it.
    #[test]
    fn waitid_reports_become_wait_statuses() {
        let st = |code, value| ExitStatus::from_raw(wait_status(code, value));
        assert_eq!(st(libc::CLD_EXITED, 0).code(), Some(0));
        assert_eq!(st(libc::CLD_EXITED, 3).code(), Some(3));
        assert_eq!(st(libc::CLD_EXITED, 143).code(), Some(143));
        let killed = st(libc::CLD_KILLED, libc::SIGKILL);
        assert_eq!(
            (killed.code(), killed.signal()),
            (None, Some(libc::SIGKILL))
        );
        let dumped = st(libc::CLD_DUMPED, libc::SIGSEGV);
        assert_eq!(
            (dumped.signal(), dumped.core_dumped()),
            (Some(libc::SIGSEGV), true)
        );
    }

    /// A spawn request crosses the socket whole, with its descriptors in
    /// order, the supervisor's own (`inherit`) among them; a message too
    /// large for one datagram is refused before it is sent.
    #[test]
    fn a_request_and_its_descriptors_cross_in_order() {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let stdio = Stdio::new(true, Output::Piped, Some(ready_w.as_fd())).unwrap();
        drop(ready_w);
        let raw = stdio.raw();
        assert_eq!(raw.len(), 4);
        let request = Request::Spawn {
            id: 7,
            env: vec![
                (b"INSTANCE_NUMBER".to_vec(), Some(b"3".to_vec())),
                (b"X".to_vec(), None),
            ],
            ready: true,
        };
        let bytes = serde_json::to_vec(&request).unwrap();
        send_with(a.as_raw_fd(), &bytes, &raw, MsgFlags::empty()).unwrap();
        let mut buf = vec![0u8; MAX_MESSAGE];
        let (got, fds): (Request, Vec<OwnedFd>) =
            receive(b.as_raw_fd(), &mut buf).unwrap().unwrap();
        match got {
            Request::Spawn { id, env, ready } => {
                assert_eq!((id, ready, env.len()), (7, true, 2));
                assert_eq!(env[1], (b"X".to_vec(), None));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fds.len(), 4);
        // The child's stdout (fds[1]) reaches the supervisor's end, and its
        // ready pipe (fds[3]) the ready pipe's reader; its stdin (fds[0])
        // is what the supervisor writes.
        let Stdio {
            stdin,
            stdout,
            give,
            ..
        } = stdio;
        drop(give);
        std::fs::File::from(fds[1].try_clone().unwrap())
            .write_all(b"out\n")
            .unwrap();
        std::fs::File::from(fds[3].try_clone().unwrap())
            .write_all(b"booted\n")
            .unwrap();
        std::fs::File::from(stdin.unwrap())
            .write_all(b"go\n")
            .unwrap();
        drop(fds);
        let mut s = String::new();
        std::fs::File::from(stdout.unwrap())
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "out\n");
        s.clear();
        std::fs::File::from(ready_r).read_to_string(&mut s).unwrap();
        assert_eq!(s, "booted\n");

        // Inherit lends our own 1 and 2.
        let lent = Stdio::new(false, Output::Inherit, None).unwrap();
        assert_eq!(&lent.raw()[1..], &[1, 2]);

        // The end of the socket is the end, not an error.
        drop(a);
        assert!(receive::<Request>(b.as_raw_fd(), &mut buf)
            .unwrap()
            .is_none());
    }
}
