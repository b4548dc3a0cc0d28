//! Opt-in accounting points (issue 35: "account for every millisecond"):
//! with `POOL_WORKER_ACCOUNT=FILE` every `pool_worker` process that reads
//! it (the supervisor, each worker and standby, each job's guard) appends
//! one line to FILE at each point of an order's way, for the bench's
//! `account` section (pool_worker/benches/pool/account.rs) to add up:
//!
//! ```text
//! PID ROLE POINT WALL_US CPU_US CHILDREN_US [DETAIL]
//! ```
//!
//! WALL_US: `CLOCK_REALTIME` in microseconds (comparable across the
//! processes of one host); CPU_US: this process's CPU time so far, all its
//! threads, user and system (`CLOCK_PROCESS_CPUTIME_ID`); CHILDREN_US: the
//! CPU time of its reaped children (`getrusage(RUSAGE_CHILDREN)`: a
//! worker's job and guard, the supervisor's workers). ROLE is `worker`,
//! `standby` (a worker started as one), `supervise` or `guard`. Each line
//! is one `write` to a file opened with `O_APPEND`, so the processes'
//! lines do not mix.
//!
//! Unset (the default), [`init`] reads the variable once per process and
//! every [`mark`] is a check of an empty `OnceLock`: no clock is read and
//! nothing is written.

use crate::env::parse;
use serde::Deserialize;
use std::io::Write as _;
use std::sync::OnceLock;

/// The variable: a file to append the points to.
pub const VAR: &str = "POOL_WORKER_ACCOUNT";

/// The open file and this process's role, once [`init`] found the variable.
static SINK: OnceLock<(std::fs::File, &'static str)> = OnceLock::new();

#[derive(Deserialize, Default)]
#[serde(default)]
struct AccountEnv {
    #[serde(deserialize_with = "parse::text")]
    pool_worker_account: Option<String>,
    /// Set by `supervise` in a standby's environment.
    pool_worker_standby: Option<String>,
    /// `1`: a process's exit also lists its threads' CPU ([`mark_exit`]).
    pool_worker_account_threads: Option<String>,
}

/// [`mark_exit`] lists the threads (`POOL_WORKER_ACCOUNT_THREADS=1`).
static THREADS: OnceLock<bool> = OnceLock::new();

/// Reads `POOL_WORKER_ACCOUNT` (through [`crate::env::read_env`], as every
/// setting) and, if it is set, opens the file and marks `main`. Called first
/// thing in [`crate::cli::main`]; a file that cannot be opened leaves
/// accounting off (it is a measuring aid, never a reason to stop). The
/// guard, which closes every inherited descriptor first, calls
/// [`init_guard`] after that instead.
pub fn init() {
    let Ok(env) = crate::env::read_env::<AccountEnv>() else {
        return;
    };
    let role = match std::env::args().nth(1).as_deref() {
        Some("supervise") => "supervise",
        Some("guard") => return,
        Some(_) => "tool",
        None if env.pool_worker_standby.as_deref() == Some("1") => "standby",
        None => "worker",
    };
    open(env, role);
}

/// [`init`] for a job's guard (pool_worker/src/guard.rs), once it has
/// closed the descriptors it inherited.
pub fn init_guard() {
    if let Ok(env) = crate::env::read_env::<AccountEnv>() {
        open(env, "guard");
    }
}

fn open(env: AccountEnv, role: &'static str) {
    let Some(path) = env.pool_worker_account else {
        return;
    };
    let _ = THREADS.set(env.pool_worker_account_threads.as_deref() == Some("1"));
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    else {
        return;
    };
    let _ = SINK.set((file, role));
    mark("main");
}

/// Marks `point` (one word, no spaces) now.
#[inline]
pub fn mark(point: &str) {
    if SINK.get().is_some() {
        write(point, "");
    }
}

/// Marks `point` with a detail (the rest of the line: no newline), made
/// only when accounting is on.
#[inline]
pub fn mark_with(point: &str, detail: impl FnOnce() -> String) {
    if SINK.get().is_some() {
        write(point, &detail());
    }
}

fn clock_us(id: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(id)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
        .unwrap_or(0)
}

fn children_us() -> u64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| {
            let us =
                |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
            us(u.user_time()) + us(u.system_time())
        })
        .unwrap_or(0)
}

#[cold]
fn write(point: &str, detail: &str) {
    let Some((file, role)) = SINK.get() else {
        return;
    };
    let cpu = clock_us(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID);
    let wall = clock_us(nix::time::ClockId::CLOCK_REALTIME);
    let line = format!(
        "{} {role} {point} {wall} {cpu} {} {detail}\n",
        std::process::id(),
        children_us()
    );
    let mut f: &std::fs::File = file;
    let _ = f.write_all(line.as_bytes());
}

/// Marks `exit`; with `POOL_WORKER_ACCOUNT_THREADS=1` then a `threads`
/// line: each thread of this process, its name and CPU time so far in
/// microseconds (`/proc/self/task/*/schedstat` and `comm`), so that a
/// worker's CPU can be split between its own threads and librdkafka's.
/// That is opt-in on its own because it is not free where it does not
/// show: every /proc entry read stays cached until the process is reaped,
/// and the reaper (the supervisor, in `wait4`) pays for dropping them:
/// 5–15 ms of the supervisor's CPU per worker process on a 2-core VM,
/// against under 1 ms without the listing.
pub fn mark_exit() {
    if SINK.get().is_none() {
        return;
    }
    write("exit", "");
    if THREADS.get() != Some(&true) {
        return;
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    let mut detail = String::new();
    for e in dir.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let name: String = comm.trim().replace(' ', "_");
        detail.push_str(&format!("{name}={} ", ns / 1000));
    }
    write("threads", detail.trim_end());
}
