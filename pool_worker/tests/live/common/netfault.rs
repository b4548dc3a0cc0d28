//! Network and host faults for the live tests (issue 33 item 5,
//! pool_worker/tests/live/apache_network.rs):
//!
//! * [`in_netns`]: a test runs in a network namespace of its own, loopback
//!   only: the test re-executes its own test binary under `unshare -n` for
//!   just that test (with [`CHILD_ENV`] set), the child brings `lo` up and
//!   runs the scenario (its own Apache Kafka included), the parent asserts
//!   that the child passed. Rules added in the child die with its namespace.
//! * [`cut_user`] and [`Cut`]: a dedicated user for the instance to be cut
//!   off, and an iptables rule (`-m owner --uid-owner`) that drops that
//!   user's packets to 127.0.0.0/8; healed by deleting the rule (or on drop).
//! * [`heartbeat_order`] and [`Heartbeats`]: orders whose job appends
//!   `order instance attempt time_ms` to a file of its own every
//!   [`BEAT_MS`], and a checker that reads them back: per order, the
//!   intervals during which each run (instance, attempt) was alive (a gap
//!   longer than [`GAP_MS`] means the run was frozen), overlaps of two runs
//!   of one order, freezes, resumptions, runs that never ended.

use super::{poll_until, sh_order, shq};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child that runs a scenario inside its own namespace.
pub const CHILD_ENV: &str = "POOL_TEST_NETNS_CHILD";

/// The longest a scenario may take in its namespace (Apache Kafka's start
/// included) before the parent kills it.
pub const CHILD_LIMIT: Duration = Duration::from_secs(300);

/// The heartbeat period of [`heartbeat_order`]'s jobs.
pub const BEAT_MS: u64 = 200;

/// A gap between two heartbeats of one run longer than this means the run
/// was frozen (5 periods: a loaded 2-core machine delays a beat's `date`
/// and `sleep` by a period now and then, not by five).
pub const GAP_MS: u64 = 5 * BEAT_MS;

/// Milliseconds since the epoch (the clock the jobs' `date` reads).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// True in the child that runs inside the namespace.
pub fn inside() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

fn run(prog: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {prog}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{prog} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(prog: &str, args: &[&str]) -> String {
    run(prog, args).unwrap_or_else(|e| panic!("{e}"))
}

/// Panics unless this process is the child in a namespace of its own whose
/// only interface is `lo`: rules are added only there.
fn assert_private_namespace() {
    assert!(inside(), "network faults only inside the test's namespace");
    let links = must("ip", &["-o", "link", "show"]);
    let names: Vec<&str> = links
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(str::trim))
        .collect();
    assert_eq!(
        names,
        ["lo"],
        "the namespace has interfaces besides lo: {links}"
    );
}

/// Runs `scenario` in a network namespace of its own. In the test process
/// (the parent), re-executes this test binary under `unshare -n` for test
/// `name` only (`module::function`), forwards its output into the test's
/// and asserts that it passed within [`CHILD_LIMIT`]; in that child, brings
/// `lo` up and runs `scenario`.
pub fn in_netns(name: &str, scenario: impl FnOnce()) {
    if inside() {
        must("ip", &["link", "set", "lo", "up"]);
        assert_private_namespace();
        scenario();
        return;
    }
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "{name} needs root: unshare -n, iptables and useradd (CI runs as root)"
    );
    let exe = std::env::current_exe().expect("the test binary's path");
    let started = Instant::now();
    let mut child = Command::new("unshare")
        .arg("-n")
        .arg("--")
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run unshare -n (util-linux): {e}"));
    let out = forward("netns", child.stdout.take().expect("piped stdout"));
    let err = forward("netns", child.stderr.take().expect("piped stderr"));
    let mut status = None;
    poll_until(CHILD_LIMIT, Duration::from_millis(100), || {
        status = child.try_wait().ok().flatten();
        status.is_some()
    });
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{name} did not end within {CHILD_LIMIT:?} in its namespace");
    };
    let out = out.join().unwrap_or_default();
    let _ = err.join();
    assert!(
        status.success(),
        "{name} failed in its namespace ({status})"
    );
    // The child's harness says "1 passed" (and not "0 passed": a name
    // that matched no test would pass silently).
    assert!(
        out.contains("1 passed"),
        "{name}: the child ran no such test:\n{out}"
    );
    eprintln!(
        "{name}: passed in its namespace in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Copies a child's lines into the test's output (shown when it fails);
/// returns everything on join.
fn forward(
    name: &'static str,
    from: impl Read + Send + 'static,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            eprintln!("{name}: {line}");
            all.push_str(&line);
            all.push('\n');
        }
        all
    })
}

/// A user of its own for an instance to be cut off.
#[derive(Clone, Copy, Debug)]
pub struct CutUser {
    pub uid: u32,
    pub gid: u32,
}

/// The system user `name` (made with `useradd --system --no-create-home`
/// if missing).
pub fn cut_user(name: &str) -> CutUser {
    let ids = || -> Option<CutUser> {
        let uid = run("id", &["-u", name]).ok()?.trim().parse().ok()?;
        let gid = run("id", &["-g", name]).ok()?.trim().parse().ok()?;
        Some(CutUser { uid, gid })
    };
    if let Some(u) = ids() {
        return u;
    }
    // Two tests' children may add it at once: the loser's useradd fails and
    // finds the user there.
    let made = run(
        "useradd",
        &[
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
    );
    ids().unwrap_or_else(|| panic!("cannot make user {name}: {made:?}"))
}

/// A drop rule for one user's packets; healed by [`Cut::heal`] or on drop.
pub struct Cut {
    rule: Vec<String>,
    on: bool,
    /// When the rule went in (ms since the epoch).
    pub at_ms: u64,
}

impl Cut {
    /// Drops every packet `uid` sends to 127.0.0.0/8 (loopback is all the
    /// namespace has), from now on.
    pub fn user(uid: u32) -> Cut {
        Cut::rule(uid, &[])
    }

    /// Drops only the packets `uid` sends to 127.0.0.0/8 that carry `text`
    /// (iptables' string match): with a claims record's key, such as
    /// `1:committed`, the instance's claim goes out and its decision does
    /// not (claims records are produced uncompressed). A dropped segment
    /// stalls the TCP stream it belongs to, so the connection that carries
    /// it is cut from then on.
    pub fn carrying(uid: u32, text: &str) -> Cut {
        Cut::rule(uid, &["-m", "string", "--algo", "bm", "--string", text])
    }

    fn rule(uid: u32, extra: &[&str]) -> Cut {
        assert_private_namespace();
        let uid = uid.to_string();
        let mut rule: Vec<String> = [
            "OUTPUT",
            "-d",
            "127.0.0.0/8",
            "-m",
            "owner",
            "--uid-owner",
            &uid,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        rule.extend(extra.iter().map(|s| s.to_string()));
        rule.extend(["-j".to_string(), "DROP".to_string()]);
        let mut args = vec!["-w", "-A"];
        args.extend(rule.iter().map(String::as_str));
        must("iptables", &args);
        Cut {
            rule,
            on: true,
            at_ms: now_ms(),
        }
    }

    /// Deletes the rule; returns when (ms since the epoch).
    pub fn heal(&mut self) -> u64 {
        if self.on {
            let mut args = vec!["-w", "-D"];
            args.extend(self.rule.iter().map(String::as_str));
            must("iptables", &args);
            self.on = false;
        }
        now_ms()
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        if self.on {
            let mut args = vec!["-w", "-D"];
            args.extend(self.rule.iter().map(String::as_str));
            let _ = run("iptables", &args);
        }
    }
}

/// An order whose job writes `beats` heartbeats, one every [`BEAT_MS`], to
/// `dir/PARTITION-OFFSET-INSTANCE-ATTEMPT` (a file per run): lines
/// `P:O INSTANCE ATTEMPT TIME_MS`, then the same with ` end`.
pub fn heartbeat_order(dir: &Path, beats: u32) -> String {
    let d = shq(dir);
    let period = BEAT_MS as f64 / 1000.0;
    sh_order(
        &format!(
            "f={d}/$ORDER_PARTITION-$ORDER_OFFSET-$INSTANCE_NUMBER-$ORDER_ATTEMPT; \
             who=\"$ORDER_PARTITION:$ORDER_OFFSET $INSTANCE_NUMBER $ORDER_ATTEMPT\"; i=0; \
             while [ $i -lt {beats} ]; do echo \"$who $(date +%s%3N)\" >> \"$f\"; \
             i=$((i + 1)); sleep {period}; done; echo \"$who $(date +%s%3N) end\" >> \"$f\""
        ),
        None,
    )
}

/// A directory the jobs of every user may write heartbeats to.
pub fn heartbeat_dir(under: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = under.join("heartbeats");
    std::fs::create_dir_all(&dir).expect("the heartbeat directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .expect("chmod the heartbeat directory");
    dir
}

/// One run of one order, as its heartbeats show it.
#[derive(Clone, Debug)]
pub struct Run {
    /// "P:O".
    pub order: String,
    pub instance: u32,
    pub attempt: u32,
    /// Every beat's time (ms since the epoch), in order.
    pub beats: Vec<u64>,
    /// It wrote its `end` line (the job finished its loop).
    pub ended: bool,
}

impl Run {
    /// The intervals during which the run was alive: beats closer than
    /// [`GAP_MS`] belong to one interval.
    pub fn alive(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &t in &self.beats {
            match out.last_mut() {
                Some(last) if t.saturating_sub(last.1) <= GAP_MS => last.1 = t,
                _ => out.push((t, t)),
            }
        }
        out
    }

    /// Gaps longer than [`GAP_MS`] (frozen, then resumed): (from, to).
    pub fn gaps(&self) -> Vec<(u64, u64)> {
        self.alive().windows(2).map(|w| (w[0].1, w[1].0)).collect()
    }

    pub fn first(&self) -> u64 {
        self.beats.first().copied().unwrap_or(0)
    }

    pub fn last(&self) -> u64 {
        self.beats.last().copied().unwrap_or(0)
    }
}

/// Two runs of one order alive at once.
#[derive(Clone, Debug)]
pub struct Overlap {
    pub order: String,
    pub a: (u32, u32),
    pub b: (u32, u32),
    /// How long both were alive.
    pub ms: u64,
}

/// Every run the heartbeat files show, read at one moment.
#[derive(Clone, Debug, Default)]
pub struct Heartbeats {
    pub runs: Vec<Run>,
}

impl Heartbeats {
    /// Reads every heartbeat file in `dir`.
    pub fn read(dir: &Path) -> Heartbeats {
        let mut runs: BTreeMap<(String, u32, u32), Run> = BTreeMap::new();
        let entries = std::fs::read_dir(dir).expect("the heartbeat directory");
        for e in entries.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                let (Some(order), Some(i), Some(a), Some(t)) = (
                    f.first(),
                    f.get(1).and_then(|s| s.parse().ok()),
                    f.get(2).and_then(|s| s.parse().ok()),
                    f.get(3).and_then(|s| s.parse::<u64>().ok()),
                ) else {
                    continue;
                };
                let run = runs
                    .entry((order.to_string(), i, a))
                    .or_insert_with(|| Run {
                        order: order.to_string(),
                        instance: i,
                        attempt: a,
                        beats: Vec::new(),
                        ended: false,
                    });
                if f.get(4) == Some(&"end") {
                    run.ended = true;
                } else {
                    run.beats.push(t);
                }
            }
        }
        let mut runs: Vec<Run> = runs.into_values().collect();
        for r in &mut runs {
            r.beats.sort_unstable();
        }
        Heartbeats { runs }
    }

    /// The runs of `order` ("P:O").
    pub fn of(&self, order: &str) -> Vec<&Run> {
        self.runs.iter().filter(|r| r.order == order).collect()
    }

    /// Every pair of runs of one order alive at the same time.
    pub fn overlaps(&self) -> Vec<Overlap> {
        let mut out = Vec::new();
        for (k, a) in self.runs.iter().enumerate() {
            for b in &self.runs[k + 1..] {
                if a.order != b.order {
                    continue;
                }
                let mut ms = 0;
                let mut touch = false;
                for x in a.alive() {
                    for y in b.alive() {
                        let (from, to) = (x.0.max(y.0), x.1.min(y.1));
                        if from <= to {
                            touch = true;
                            ms += to - from;
                        }
                    }
                }
                if touch {
                    out.push(Overlap {
                        order: a.order.clone(),
                        a: (a.instance, a.attempt),
                        b: (b.instance, b.attempt),
                        ms,
                    });
                }
            }
        }
        out
    }

    /// The shortest time between the last beat of one run of an order and
    /// the first beat of a later run of it (None if no order ran twice).
    pub fn closest_handover_ms(&self) -> Option<i64> {
        let mut best: Option<i64> = None;
        for a in &self.runs {
            for b in &self.runs {
                if a.order == b.order && a.first() < b.first() && !std::ptr::eq(a, b) {
                    let d = b.first() as i64 - a.last() as i64;
                    best = Some(best.map_or(d, |x| x.min(d)));
                }
            }
        }
        best
    }

    /// Runs that finished their loop, per order.
    pub fn ended_per_order(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in &self.runs {
            *m.entry(r.order.clone()).or_default() += usize::from(r.ended);
        }
        m
    }

    /// (frozen, resumed, killed): runs that stopped beating for longer than
    /// [`GAP_MS`] before `until_ms` (the heal) and resumed (a gap) or never
    /// beat again; gaps after which a run beat again; runs that never wrote
    /// their `end` line.
    pub fn fates(&self, until_ms: u64) -> (usize, usize, usize) {
        let mut frozen = 0;
        let mut resumed = 0;
        let mut killed = 0;
        for r in &self.runs {
            let gaps = r.gaps();
            resumed += gaps.len();
            let stopped_early = !r.ended && r.last() + GAP_MS < until_ms;
            if !gaps.is_empty() || stopped_early {
                frozen += 1;
            }
            killed += usize::from(!r.ended);
        }
        (frozen, resumed, killed)
    }

    /// Every run, one line each, for messages.
    pub fn show(&self) -> String {
        self.runs
            .iter()
            .map(|r| {
                format!(
                    "  {} instance {} attempt {}: {} beats {}..{}, alive {:?}{}",
                    r.order,
                    r.instance,
                    r.attempt,
                    r.beats.len(),
                    r.first(),
                    r.last(),
                    r.alive(),
                    if r.ended { ", ended" } else { ", never ended" }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Panics if two runs of one order were alive at once.
    pub fn assert_no_overlap(&self) {
        let o = self.overlaps();
        assert!(
            o.is_empty(),
            "runs of one order alive at once: {o:?}\n{}",
            self.show()
        );
    }
}

/// Waits (at most `timeout`) until the run of `order` ("P:O") by
/// `instance` has written `beats` heartbeats; panics otherwise.
pub fn wait_beats(dir: &Path, order: &str, instance: u32, beats: usize, timeout: Duration) -> Run {
    let mut found = None;
    let ok = poll_until(timeout, Duration::from_millis(50), || {
        found = Heartbeats::read(dir)
            .runs
            .into_iter()
            .find(|r| r.order == order && r.instance == instance && r.beats.len() >= beats);
        found.is_some()
    });
    assert!(
        ok,
        "no {beats} heartbeats of {order} by instance {instance} within {timeout:?}:\n{}",
        Heartbeats::read(dir).show()
    );
    found.expect("found above")
}
