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
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::OnceLock;

/// The variable: a file to append the points to.
pub const VAR: &str = "POOL_WORKER_ACCOUNT";

/// The open file and this process's role, once [`init`] found the variable.
static SINK: OnceLock<(std::fs::File, &'static str)> = OnceLock::new();

/// The role a forked copy writes under instead of its parent's
/// ([`become_guard`]).
static ROLE: OnceLock<&'static str> = OnceLock::new();

/// The accounting file's descriptor, if accounting is on (the guard host
/// keeps it open when it closes what it inherited).
pub fn sink_fd() -> Option<i32> {
    use std::os::fd::AsRawFd as _;
    SINK.get().map(|(f, _)| f.as_raw_fd())
}

/// The worker's guard host (a forked copy of the worker) marks its points
/// as the guard.
pub fn become_guard() {
    let _ = ROLE.set("guard");
}

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

/// CPU time of this process's workers that another process reaped (the
/// supervisor's fork server: pool_worker/src/supervise/fork_server.rs),
/// added to CHILDREN_US so that it counts them as if it had reaped them.
static REAPED_ELSEWHERE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts `us` of CPU of a child reaped by the fork server in CHILDREN_US.
pub fn reaped_elsewhere(us: u64) {
    REAPED_ELSEWHERE.fetch_add(us, std::sync::atomic::Ordering::Relaxed);
}

fn children_us() -> u64 {
    use nix::sys::resource::{getrusage, UsageWho};
    REAPED_ELSEWHERE.load(std::sync::atomic::Ordering::Relaxed)
        + getrusage(UsageWho::RUSAGE_CHILDREN)
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
    let role = ROLE.get().unwrap_or(role);
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
    let mut detail = String::new();
    for (_, name, ns) in thread_cpu("self") {
        detail.push_str(&format!("{}={} ", name.replace(' ', "_"), ns / 1000));
    }
    write("threads", detail.trim_end());
}

// ------------------------------------------------- CPU time from /proc
// Read by the accounting above and by the bench (pool_worker/benches), so
// that both parse /proc the same way.

/// The fields of `/proc/PID/stat` this crate reads (clock ticks).
struct Stat {
    ppid: u32,
    /// utime + stime: the process's own CPU so far.
    own: u64,
    /// cutime + cstime: its reaped descendants'.
    reaped: u64,
}

/// Parses a `/proc/PID/stat` line; `None` if it is not one.
fn parse_stat(stat: &str) -> Option<Stat> {
    // The fields after the command name (which may hold spaces and
    // parentheses), from field 3 (state) on.
    let f: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let num = |k: usize| f.get(k - 3)?.parse::<u64>().ok();
    Some(Stat {
        ppid: u32::try_from(num(4)?).ok()?,
        own: num(14)? + num(15)?,
        reaped: num(16)? + num(17)?,
    })
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU time (user + system) of process `pid` so far, in clock ticks
/// (`/proc/PID/stat`); `None` once it is gone.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    read_stat(pid).map(|s| s.own)
}

/// CPU time so far, in clock ticks, of `root` and of every live process
/// under it: utime + stime + cutime + cstime of each (cutime and cstime
/// hold a process's reaped descendants; a live child's own times are not
/// in them yet, so nothing is counted twice). `None` if `root` is gone.
pub fn tree_ticks(root: u32) -> Option<u64> {
    let mut table: HashMap<u32, (u32, u64)> = HashMap::new();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(s) = read_stat(pid) {
            table.insert(pid, (s.ppid, s.own + s.reaped));
        }
    }
    table.get(&root)?;
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &(ppid, _)) in &table {
        children.entry(ppid).or_default().push(pid);
    }
    let (mut total, mut stack) = (0, vec![root]);
    while let Some(p) = stack.pop() {
        total += table.get(&p).map_or(0, |t| t.1);
        if let Some(c) = children.get(&p) {
            stack.extend(c);
        }
    }
    Some(total)
}

/// Each thread of process `pid` (a number, or `self`): its id, its kernel
/// name (`comm`, at most 15 characters) and its CPU time so far in
/// nanoseconds (`/proc/PID/task/TID/schedstat`; 0 when unreadable). Empty
/// if the process is gone.
pub fn thread_cpu(pid: impl std::fmt::Display) -> Vec<(u32, String, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        out.push((tid, comm.trim().to_string(), ns));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_parentheses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
        // majflt cmajflt utime stime cutime cstime ...
        let line = "42 (a (b) c) S 7 42 42 0 -1 4194560 10 0 0 0 5 3 11 13 20 0 1 0";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.ppid, s.own, s.reaped), (7, 8, 24));
        assert!(parse_stat("42 (cut short) S 7").is_none());
        assert!(parse_stat("no parenthesis").is_none());
    }

    #[test]
    fn this_process_and_its_threads_are_found() {
        let me = std::process::id();
        let own = cpu_ticks(me).unwrap();
        assert!(tree_ticks(me).unwrap() >= own);
        let threads = thread_cpu("self");
        assert!(threads.iter().any(|(tid, _, _)| *tid == me));
        assert!(!thread_cpu(me).is_empty());
        assert!(cpu_ticks(u32::MAX).is_none() && tree_ticks(u32::MAX).is_none());
    }
}
