//! What keeps a job away from the worker: the worker's own hardening, the
//! job user, per-job resource limits, and ending every process a job left.
//!
//! * [`harden_worker`], at the start of worker mode: the process is not
//!   dumpable (`PR_SET_DUMPABLE` 0), so no process of another user, and none
//!   of its own user without `CAP_SYS_PTRACE`, can read its
//!   `/proc/<pid>/environ` or memory, or attach a debugger; and it is a child
//!   subreaper (`PR_SET_CHILD_SUBREAPER`), so a process a job orphans (a
//!   double fork, `setsid`) becomes the worker's child instead of init's,
//!   which lets [`end_descendants`] find and end it.
//! * [`JobUser`] (`JOB_USER`): jobs run under another uid, gid and that
//!   user's supplementary groups, set in the child before its `exec`
//!   (pool_worker/src/job/spawn.rs). A job user cannot read the worker's memory or environment (a
//!   worker running as root is not dumpable, and another uid may not ptrace
//!   it) nor files that only the worker's user can read: that is where
//!   credentials belong.
//! * [`Limits`] (`JOB_LIMIT_*`): `setrlimit` in the child (the same).
//!
//! `nix` wraps the system calls here: safe `prctl` and a thread-safe
//! `getpwnam_r` with its buffer handling, for a small crate (only some of
//! its parts are built); `rustix` lacks the user database. The job's own
//! `setrlimit`, `setgroups`, `setgid` and `setuid` are raw system calls in
//! pool_worker/src/job/spawn.rs, which says why.

use crate::env::ConfigError;
use nix::unistd::Uid;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::time::{Duration, Instant};

/// Makes this process non-dumpable and a child subreaper.
pub(crate) fn harden_worker() -> Result<(), String> {
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| format!("cannot make the worker non-dumpable: {e}"))?;
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot make the worker a subreaper: {e}"))?;
    Ok(())
}

/// The user jobs run as (`JOB_USER`: a name, or a numeric uid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JobUser {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Supplementary groups (the user's groups from the group database).
    pub(crate) groups: Vec<u32>,
    /// The user's home directory, for the job's `HOME`.
    pub(crate) home: Option<String>,
}

impl JobUser {
    /// Looks the user up, and checks that this process may become it.
    pub(crate) fn lookup(spec: &str) -> Result<JobUser, ConfigError> {
        let spec = spec.trim();
        let found = match spec.parse::<u32>() {
            Ok(uid) => nix::unistd::User::from_uid(Uid::from_raw(uid)),
            Err(_) => nix::unistd::User::from_name(spec),
        }
        .map_err(|e| {
            ConfigError(format!(
                "JOB_USER='{spec}': cannot read the user database: {e}"
            ))
        })?;
        let user = match (found, spec.parse::<u32>()) {
            (Some(u), _) => {
                let groups = CString::new(u.name.as_str())
                    .ok()
                    .and_then(|c| nix::unistd::getgrouplist(&c, u.gid).ok())
                    .unwrap_or_else(|| vec![u.gid]);
                JobUser {
                    name: u.name.clone(),
                    uid: u.uid.as_raw(),
                    gid: u.gid.as_raw(),
                    groups: groups.iter().map(|g| g.as_raw()).collect(),
                    home: u.dir.to_str().map(str::to_string),
                }
            }
            // A uid without an entry (containers): its own number as group.
            (None, Ok(uid)) => JobUser {
                name: uid.to_string(),
                uid,
                gid: uid,
                groups: vec![uid],
                home: None,
            },
            (None, Err(_)) => {
                return Err(ConfigError(format!(
                    "JOB_USER='{spec}' is not a user of this system"
                )))
            }
        };
        if user.uid == 0 {
            return Err(ConfigError(format!(
                "JOB_USER='{spec}' is root, which would give jobs the worker's power"
            )));
        }
        if !Uid::effective().is_root() && Uid::effective().as_raw() != user.uid && !has_setid_caps()
        {
            return Err(ConfigError(format!(
                "JOB_USER='{spec}' needs the worker to run as root (or with CAP_SETUID and CAP_SETGID) to switch users"
            )));
        }
        Ok(user)
    }
}

/// Whether this process has CAP_SETGID (6) and CAP_SETUID (7) in effect.
fn has_setid_caps() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & 0b1100_0000 == 0b1100_0000)
}

/// Per-job resource limits (`None`: the worker's own limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `RLIMIT_AS`, bytes of address space (`JOB_LIMIT_MEMORY_MB`).
    pub(crate) memory_bytes: Option<u64>,
    /// `RLIMIT_NPROC`, processes of the job's user (`JOB_LIMIT_PROCESSES`).
    pub(crate) processes: Option<u64>,
    /// `RLIMIT_NOFILE`, open files per process (`JOB_LIMIT_OPEN_FILES`).
    pub(crate) open_files: Option<u64>,
}

/// Parent pid of each process in `/proc` (`stat`'s fourth field; the name
/// in parentheses may itself hold spaces and parentheses).
fn parents() -> BTreeMap<i32, i32> {
    let mut map = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(ppid) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| stat_ppid(&s))
        {
            map.insert(pid, ppid);
        }
    }
    map
}

fn stat_ppid(stat: &str) -> Option<i32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Every descendant of `root` in a parent map.
fn descendants(root: i32, parents: &BTreeMap<i32, i32>) -> BTreeSet<i32> {
    let mut found = BTreeSet::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&child, &parent) in parents {
            if parent == p && child != root && found.insert(child) {
                frontier.push(child);
            }
        }
    }
    found
}

/// The descendants of `root` from the kernel's own lists of each thread's
/// children (`/proc/PID/task/TID/children`), without entering `skip`'s
/// subtree: only the tree is read, where [`parents`] reads every process of
/// the machine (a whole `/proc` scan per order: 0.9 ms of a worker's CPU on
/// a quiet machine, more on a busy one; bench/RESULTS.md). `None`: this
/// kernel keeps no such lists (built without `CONFIG_PROC_CHILDREN`).
/// A process may fork or exit while its list is read; [`end_descendants`]
/// goes round again until none is left.
fn tree(root: i32, skip: Option<i32>) -> Option<BTreeSet<i32>> {
    static LISTS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*LISTS.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists()) {
        return None;
    }
    let mut found = BTreeSet::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        // A process gone meanwhile has no tasks left to list.
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in list
                .split_ascii_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                if Some(child) != skip && child != root && found.insert(child) {
                    frontier.push(child);
                }
            }
        }
    }
    Some(found)
}

/// The descendants of this process `me` that may be a job's: all but the
/// guard host (pool_worker/src/guard.rs), which guards the worker's next
/// jobs, and what it runs. By [`tree`], else by a scan of `/proc`.
fn jobs_descendants(me: i32) -> BTreeSet<i32> {
    let host = crate::guard::host_pid();
    if let Some(found) = tree(me, host) {
        return found;
    }
    let parents = parents();
    let hosts: BTreeSet<i32> = host
        .map(|h| {
            let mut set = descendants(h, &parents);
            set.insert(h);
            set
        })
        .unwrap_or_default();
    descendants(me, &parents)
        .into_iter()
        .filter(|pid| !hosts.contains(pid))
        .collect()
}

/// Ends every descendant of this process (SIGKILL) and reaps those that are
/// its children, round after round until none is left (a process being
/// killed may have forked; its orphans come to this subreaper) or `limit`
/// has passed. Returns how many processes were sent a signal. Only for a
/// process whose children are all jobs' (worker mode).
pub(crate) fn end_descendants(limit: Duration) -> usize {
    let me = std::process::id() as i32;
    let until = Instant::now() + limit;
    let mut killed = BTreeSet::new();
    loop {
        let live: Vec<i32> = jobs_descendants(me)
            .into_iter()
            .filter(|pid| !is_zombie(*pid))
            .collect();
        for &pid in &live {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            killed.insert(pid);
        }
        // Reap our own children among them (orphans reparented to us; for
        // any other pid `waitpid` fails with ECHILD, harmlessly); a job's
        // main process is already reaped by its runner.
        for &pid in &killed {
            let _ = nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
        if live.is_empty() || Instant::now() >= until {
            return killed.len();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_names() {
        assert_eq!(stat_ppid("123 (sh) S 45 123 123 0"), Some(45));
        assert_eq!(stat_ppid("123 (a) b (c) R 7 1 1"), Some(7));
        assert_eq!(stat_ppid("garbage"), None);
    }

    #[test]
    fn descendants_follow_the_tree() {
        let p = BTreeMap::from([(10, 1), (11, 10), (12, 11), (13, 1), (14, 12), (15, 13)]);
        assert_eq!(descendants(10, &p), BTreeSet::from([11, 12, 14]));
        assert_eq!(descendants(15, &p), BTreeSet::new());
    }

    #[test]
    fn the_kernels_lists_give_the_tree_and_leave_the_skipped_subtree() {
        let Some(_) = tree(std::process::id() as i32, None) else {
            eprintln!("this kernel keeps no lists of children: the /proc scan is used");
            return;
        };
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .expect("sh runs");
        let sh_pid = sh.id() as i32;
        let me = std::process::id() as i32;
        // The shell's two sleeps, by the full scan (the reference).
        let mut sleeps = BTreeSet::new();
        for _ in 0..400 {
            sleeps = descendants(sh_pid, &parents());
            if sleeps.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let found = tree(me, None).expect("lists were there a moment ago");
        let skipped = tree(me, Some(sh_pid)).expect("lists were there a moment ago");
        let _ = sh.kill();
        for pid in &sleeps {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = sh.wait();
        assert_eq!(sleeps.len(), 2, "the shell started its two sleeps");
        assert!(
            found.contains(&sh_pid),
            "{found:?} lacks the child {sh_pid}"
        );
        assert!(
            found.is_superset(&sleeps),
            "{found:?} lacks the grandchildren {sleeps:?}"
        );
        assert!(
            !skipped.contains(&sh_pid),
            "{skipped:?} holds the skipped {sh_pid}"
        );
        assert!(
            skipped.is_disjoint(&sleeps),
            "{skipped:?} entered the skipped subtree"
        );
    }

    #[test]
    fn users_are_looked_up() {
        if !Uid::effective().is_root() && !has_setid_caps() {
            let e = JobUser::lookup("nobody").unwrap_err();
            assert!(e.0.contains("needs the worker to run as root"), "{e}");
            return;
        }
        let nobody = JobUser::lookup("nobody").expect("nobody exists on the test machine");
        assert_ne!(nobody.uid, 0);
        assert!(JobUser::lookup("no-such-user-pw")
            .unwrap_err()
            .0
            .contains("not a user"));
        assert!(JobUser::lookup("root").unwrap_err().0.contains("root"));
        assert!(JobUser::lookup("0").is_err());
        let by_number = JobUser::lookup(&nobody.uid.to_string()).unwrap();
        assert_eq!(by_number.name, nobody.name);
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(crate::clock::random_u64(), crate::clock::random_u64());
    }
}
