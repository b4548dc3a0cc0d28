//! A job's process started without a copy of the worker: `clone` with
//! `CLONE_VM | CLONE_VFORK` (what glibc's `posix_spawn` does inside), the
//! child set up with raw system calls on data prepared before, then `exec`.
//!
//! Why not `fork`: the worker is a process of some 16 threads and tens of
//! megabytes mapped. `fork` copies its page tables and write-protects every
//! page it has touched; the child's `exec` then tears that copy down again,
//! and the worker takes a page fault for each page it writes next. For a
//! job as short as `true` that was about 1 ms of CPU per order of the
//! pool's 16 (bench/RESULTS.md, "Where an order's milliseconds go": the
//! job's spawn and the job's own CPU). A `vfork` child borrows the worker's
//! memory until its `exec`, so none of that happens.
//!
//! Why not `posix_spawn` (std's `Command` without `pre_exec`): the job
//! needs, between the new process and `exec`, resource limits, a job user
//! (groups, gid, uid, ambient capabilities cleared), the parent-death
//! signal and every inherited descriptor past the standard three marked
//! close-on-exec; `posix_spawn` offers none of these, and std falls back to
//! `fork` for any `pre_exec`. No maintained crate spawns with `vfork` and
//! such steps (rustix has no spawn; nix wraps `posix_spawn`), hence this
//! module.
//!
//! What the child may do, sharing the worker's memory and the calling
//! thread's TLS while the worker's thread waits: only system calls on
//! memory prepared before the `clone` (no allocation, no lock, no glibc
//! call that keeps state: `setuid` and friends go through raw system calls,
//! because glibc's wrappers would signal the worker's other threads to
//! change their credentials too). Every signal is blocked from before the
//! `clone` until just before `exec`, and the child first resets every
//! caught signal to its default, so no handler of the worker runs in it.
//! The child's stack is a buffer of its own. Its error, if any step fails,
//! is written into the shared [`Steps`] and it exits 127; the worker reads
//! the error once the `clone` returns (with `CLONE_VFORK`, after the
//! child's `exec` or exit) and reaps it.
//!
//! The process is waited for through its pidfd (`CLONE_PIDFD`), readable
//! once it exits, so that neither tokio's `SIGCHLD` handling nor a pid
//! reused after the reaping can be confused with it.

use crate::isolate::{JobUser, Limits};
use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// What to start: the program's path, its `argv[0]` and arguments, its
/// whole environment, the job user and limits.
pub(crate) struct Spec<'a> {
    pub(crate) path: &'a Path,
    pub(crate) arg0: &'a str,
    pub(crate) args: &'a [String],
    pub(crate) env: &'a BTreeMap<OsString, OsString>,
    pub(crate) user: Option<&'a JobUser>,
    pub(crate) limits: Limits,
}

/// A started job's main process: its own process group (its pid), standard
/// input `/dev/null`, standard output and error piped here. Killed (and
/// reaped in the background) if dropped before it was reaped.
pub(crate) struct Child {
    pid: i32,
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub(crate) stdout: Option<pipe::Receiver>,
    pub(crate) stderr: Option<pipe::Receiver>,
}

/// The child's stack: ample for the handful of system calls it makes.
const STACK: usize = 64 * 1024;

/// Everything the child reads, prepared before the `clone`, and where it
/// writes its error.
#[repr(C)]
struct Steps {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    limits: *const (libc::c_int, libc::rlimit),
    n_limits: usize,
    /// (uid, gid, groups, groups' count), for a job user.
    creds: Option<(libc::uid_t, libc::gid_t, *const libc::gid_t, usize)>,
    /// The worker's pid, for the parent-death signal's check.
    parent: libc::pid_t,
    /// The errno of the step that failed; 0 if none did.
    err: libc::c_int,
}

impl Child {
    /// Starts `spec`'s program (see the module docs).
    pub(crate) fn spawn(spec: &Spec<'_>) -> io::Result<Child> {
        let c = |b: &[u8]| {
            CString::new(b).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command")
            })
        };
        let path = c(spec.path.as_os_str().as_bytes())?;
        let mut argv = vec![c(spec.arg0.as_bytes())?];
        for a in spec.args {
            argv.push(c(a.as_bytes())?);
        }
        let mut envp = Vec::with_capacity(spec.env.len());
        for (k, v) in spec.env {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(OsStr::as_bytes(v));
            envp.push(c(&kv)?);
        }
        let argv_p = null_terminated(&argv);
        let envp_p = null_terminated(&envp);
        let limits: Vec<(libc::c_int, libc::rlimit)> = [
            (libc::RLIMIT_AS, spec.limits.memory_bytes),
            (libc::RLIMIT_NPROC, spec.limits.processes),
            (libc::RLIMIT_NOFILE, spec.limits.open_files),
        ]
        .into_iter()
        .filter_map(|(r, v)| {
            v.map(|v| {
                (
                    r as libc::c_int,
                    libc::rlimit {
                        rlim_cur: v,
                        rlim_max: v,
                    },
                )
            })
        })
        .collect();
        let groups: Vec<libc::gid_t> = spec.user.map(|u| u.groups.clone()).unwrap_or_default();
        let devnull = std::fs::OpenOptions::new()
            .read(true)
            .open("/dev/null")
            .map(OwnedFd::from)?;
        let (out_r, out_w) = pipe2()?;
        let (err_r, err_w) = pipe2()?;
        let mut steps = Steps {
            path: path.as_ptr(),
            argv: argv_p.as_ptr(),
            envp: envp_p.as_ptr(),
            stdin: devnull.as_raw_fd(),
            stdout: out_w.as_raw_fd(),
            stderr: err_w.as_raw_fd(),
            limits: limits.as_ptr(),
            n_limits: limits.len(),
            creds: spec
                .user
                .map(|u| (u.uid, u.gid, groups.as_ptr(), groups.len())),
            parent: std::process::id() as libc::pid_t,
            err: 0,
        };
        let mut stack = vec![0u8; STACK];
        // The stack grows down from its end, 16-byte aligned.
        let top = (stack.as_mut_ptr() as usize + STACK) & !15;
        let mut pidfd: libc::c_int = -1;
        // SAFETY: every signal is blocked around the clone (restored
        // right after), so no handler runs in the child before it reset
        // them; the child runs `child` on its own stack, reads `steps` and
        // the buffers it points to (alive until this function returns,
        // and CLONE_VFORK holds this thread until the child's exec or
        // exit), and makes only system calls.
        let pid = unsafe {
            let mut all = std::mem::zeroed::<libc::sigset_t>();
            let mut old = std::mem::zeroed::<libc::sigset_t>();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::clone(
                child,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
                std::ptr::addr_of_mut!(steps).cast(),
                std::ptr::addr_of_mut!(pidfd),
            );
            let e = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            if pid < 0 {
                return Err(e);
            }
            pid
        };
        drop(stack);
        drop((devnull, out_w, err_w));
        // SAFETY: CLONE_PIDFD wrote a descriptor of our own.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        // SAFETY: read after the child's exec or exit (CLONE_VFORK).
        let err = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(steps.err)) };
        if err != 0 {
            let mut status = 0;
            // SAFETY: reaps our own child, which has exited.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            return Err(io::Error::from_raw_os_error(err));
        }
        let mut job = Child {
            pid,
            pidfd: None,
            status: None,
            stdout: None,
            stderr: None,
        };
        // SAFETY: an OwnedFd, open and ours for as long as the AsyncFd owns it.
        match unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) } {
            // From here on, dropping `job` kills and reaps the process.
            Ok(fd) => job.pidfd = Some(fd),
            Err(e) => {
                let e = io::Error::from(e);
                let mut status = 0;
                // SAFETY: our own child, not reaped yet: its pid is its own.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return Err(e);
            }
        }
        job.stdout = Some(pipe::Receiver::from_owned_fd(out_r)?);
        job.stderr = Some(pipe::Receiver::from_owned_fd(err_r)?);
        Ok(job)
    }

    /// The process's pid (its process group's id too).
    pub(crate) fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Waits until the process exits, and reaps it. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.status {
                return Ok(s);
            }
            if let Some(s) = self.try_reap()? {
                return Ok(s);
            }
            let Some(fd) = &self.pidfd else {
                return Err(io::Error::other("the job's process is not waitable"));
            };
            let mut ready = fd.readable().await?;
            ready.clear_ready();
        }
    }

    /// Reaps the process if it has exited.
    fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        let mut status = 0;
        // SAFETY: waits for our own child only.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        if r == 0 {
            return Ok(None);
        }
        let s = ExitStatus::from_raw(status);
        self.status = Some(s);
        Ok(Some(s))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let Some(fd) = self.pidfd.take() else { return };
        // Through the pidfd: the process cannot have been replaced by
        // another of the same pid while it is not reaped.
        // SAFETY: a signal to our own unreaped child.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        let pid = self.pid;
        let reap = async move {
            let _ = fd.readable().await;
            let mut status = 0;
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(reap);
        }
    }
}

/// `items` as a C array of pointers ending with a null one.
fn null_terminated(items: &[CString]) -> Vec<*const libc::c_char> {
    items
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A pipe whose both ends close on exec (the child's `dup2` of the write
/// end to 1 or 2 makes a copy that stays open).
fn pipe2() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors of our own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The child: runs on its own stack, in the worker's memory, until `exec`.
/// System calls only; on failure, the errno into `Steps::err` and exit 127.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Steps` the parent keeps alive and does not
    // touch until this process has exec'd or exited.
    unsafe {
        let s = &mut *arg.cast::<Steps>();
        // No handler of the worker may run here: every caught signal back
        // to its default (they are all blocked until just before exec).
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old = std::mem::zeroed::<libc::sigaction>();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN
                || sig == libc::SIGPIPE
            {
                let mut dfl = std::mem::zeroed::<libc::sigaction>();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        for (from, to) in [(s.stdin, 0), (s.stdout, 1), (s.stderr, 2)] {
            if libc::syscall(libc::SYS_dup3, from, to, 0) < 0 {
                fail(s);
            }
        }
        // Its own process group, its pid.
        if libc::syscall(libc::SYS_setpgid, 0, 0) != 0 {
            fail(s);
        }
        // Limits first (RLIMIT_NPROC is checked at fork and setuid), then
        // groups, gid and uid, in that order: once the uid is dropped the
        // rest could not be changed.
        for i in 0..s.n_limits {
            let (r, l) = &*s.limits.add(i);
            if libc::syscall(libc::SYS_prlimit64, 0, *r, l as *const libc::rlimit, 0usize) != 0 {
                fail(s);
            }
        }
        if let Some((uid, gid, groups, n)) = s.creds {
            // A worker given CAP_SETUID/CAP_SETGID as ambient capabilities
            // (systemd's AmbientCapabilities=) would pass them on through
            // exec: a non-root uid change keeps them. Clear them first
            // (EINVAL: a kernel without ambient capabilities).
            if !prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            ) && errno() != libc::EINVAL
            {
                fail(s);
            }
            if libc::syscall(libc::SYS_setgroups, n, groups) != 0
                || libc::syscall(libc::SYS_setgid, gid) != 0
                || libc::syscall(libc::SYS_setuid, uid) != 0
            {
                fail(s);
            }
        }
        // The parent-death signal after the credentials (changing them
        // clears it). Should the worker die (SIGKILL), its job's main
        // process dies with it; if it died before this, nobody would send
        // the signal. (The signal follows the thread that cloned: a runtime
        // worker thread, which lives as long as the process.)
        if !prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) {
            fail(s);
        }
        if libc::syscall(libc::SYS_getppid) as libc::pid_t != s.parent {
            *libc::__errno_location() = libc::ESRCH;
            fail(s);
        }
        // Every descriptor past the standard three closes at exec: the job
        // gets nothing else of the worker's (librdkafka's wakeup pipes have
        // no close-on-exec).
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        // An empty signal mask, as std's `Command` gives (the kernel's
        // set is 64 bits).
        let empty: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            std::ptr::addr_of!(empty),
            std::ptr::null_mut::<u64>(),
            std::mem::size_of::<u64>(),
        );
        libc::syscall(libc::SYS_execve, s.path, s.argv, s.envp);
        fail(s)
    }
}

/// `prctl(option, arg, 0, 0, 0)` as a raw system call; whether it succeeded.
/// (`syscall` is variadic: every argument is passed as the `unsigned long`
/// the kernel reads, not as a C `int` whose upper half is undefined.)
unsafe fn prctl(option: libc::c_int, arg: libc::c_ulong) -> bool {
    let zero: libc::c_ulong = 0;
    libc::syscall(libc::SYS_prctl, option, arg, zero, zero, zero) == 0
}

/// The child's way out: the errno of the step that failed into
/// `Steps::err`, then exit 127 (no exit handler runs: `_exit`).
unsafe fn fail(s: &mut Steps) -> ! {
    std::ptr::write_volatile(std::ptr::addr_of_mut!(s.err), errno().max(1));
    libc::_exit(127)
}

/// The calling thread's errno.
fn errno() -> libc::c_int {
    // SAFETY: the thread's own errno location.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn env() -> BTreeMap<OsString, OsString> {
        [("PATH".into(), "/usr/bin:/bin".into())].into()
    }

    async fn run(path: &str, args: &[&str], limits: Limits) -> (ExitStatus, String, String) {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env = env();
        let mut job = Child::spawn(&Spec {
            path: Path::new(path),
            arg0: "prog",
            args: &args,
            env: &env,
            user: None,
            limits,
        })
        .expect("spawned");
        let (mut out, mut err) = (String::new(), String::new());
        let (mut o, mut e) = (job.stdout.take().unwrap(), job.stderr.take().unwrap());
        let (a, b) = tokio::join!(o.read_to_string(&mut out), e.read_to_string(&mut err));
        a.unwrap();
        b.unwrap();
        (job.wait().await.unwrap(), out, err)
    }

    /// Output, error, exit codes and signals, the environment given and no
    /// other, its own process group, `argv[0]`, no signal blocked.
    #[tokio::test]
    async fn a_job_runs_with_what_it_is_given_and_nothing_else() {
        let (st, out, err) = run(
            "/bin/sh",
            &[
                "-c",
                "echo \"$0 $1 $(env | sort | tr '\\n' ' ')\"; echo oops >&2; \
                 ps -o pgid= -p $$ | tr -d ' '; echo $$; grep SigBlk /proc/self/status; \
                 tr '\\0' ' ' < /proc/$$/cmdline; echo; exit 7",
                "zero",
                "one",
            ],
            Limits::default(),
        )
        .await;
        assert_eq!(st.code(), Some(7), "{out} {err}");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("zero one "), "{out}");
        assert!(lines[4].starts_with("prog -c "), "argv[0]: {out}");
        assert!(lines[0].contains("PATH=/usr/bin:/bin"), "{out}");
        assert!(
            !lines[0].contains("HOME="),
            "only the environment given: {out}"
        );
        assert_eq!(
            lines[1], lines[2],
            "the job leads a process group of its own"
        );
        assert_eq!(lines[3], "SigBlk:\t0000000000000000", "no signal blocked");
        assert_eq!(err, "oops\n");
        let (st, _, _) = run("/bin/sh", &["-c", "kill -TERM $$"], Limits::default()).await;
        assert_eq!(st.signal(), Some(libc::SIGTERM));
    }

    /// A program that cannot be run is the spawn's error (nothing to
    /// reap), as with std's `Command`.
    #[tokio::test]
    async fn a_missing_program_is_the_spawns_error() {
        let env = env();
        let e = Child::spawn(&Spec {
            path: Path::new("/nonexistent/program"),
            arg0: "x",
            args: &[],
            env: &env,
            user: None,
            limits: Limits::default(),
        })
        .err()
        .expect("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }

    /// Limits are the job's; no descriptor of the worker's past the
    /// standard three reaches it, even one without close-on-exec.
    #[tokio::test]
    async fn limits_and_no_descriptor_of_the_workers() {
        // A descriptor without close-on-exec, as librdkafka's pipes are.
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (st, out, err) = run(
            "/bin/sh",
            &["-c", "ulimit -n; ls /proc/self/fd | tr '\\n' ' '"],
            Limits {
                memory_bytes: None,
                processes: None,
                open_files: Some(64),
            },
        )
        .await;
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert!(st.success(), "{st:?} {err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "64", "{out}");
        // 0, 1, 2 and the one `ls` opens to read the directory.
        assert_eq!(lines[1].split_whitespace().count(), 4, "{out}");
    }

    /// Dropped before it exits, the job is killed and reaped.
    #[tokio::test]
    async fn a_dropped_job_is_killed() {
        let env = env();
        let args = vec!["-c".to_string(), "sleep 30".to_string()];
        let job = Child::spawn(&Spec {
            path: Path::new("/bin/sh"),
            arg0: "sh",
            args: &args,
            env: &env,
            user: None,
            limits: Limits::default(),
        })
        .unwrap();
        let pid = job.id() as i32;
        drop(job);
        let gone = async {
            loop {
                // Reaped: no such process (a zombie would still answer).
                if unsafe { libc::kill(pid, 0) } != 0 {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), gone)
            .await
            .expect("the dropped job was killed and reaped");
    }
}
