//! The shared harness of the integration tests.
//!
//! Integration tests run the real `pool_worker` binary as separate
//! processes, against the embedded Kafka-protocol broker, and judge the pool
//! by what it leaves in Kafka (the claims topic is the audit trail) and on
//! disk (ledger files written by the jobs). This module provides:
//!
//! * [`BrokerProc`]: `pool_worker broker --json` as a child process, with its
//!   fault injection (`down`, `up`, `rtt`) as methods that wait for the
//!   broker's acknowledgment;
//! * [`SupervisorProc`]: `pool_worker supervise --json` as a child process;
//!   its event lines are parsed on a thread into a [`SupState`] (current pid,
//!   starts and exits per instance) that tests wait on and use to kill
//!   instances;
//! * Kafka helpers on plain rdkafka clients: [`produce_orders`],
//!   [`read_claims`], [`decoded_claims`], [`wait_completed`], ...;
//! * small things: [`bin`], [`unique_topic`], [`ledger`], [`poll_until`].
//!
//! Conventions: every wait has a deadline; helpers whose failure means the
//! test cannot go on panic with a message (they are test code), helpers
//! whose failure a test may want to inspect return `Result`. Child processes
//! get a clean environment (only `PATH`, `HOME`, `TMPDIR`, `RUST_LOG`,
//! `RUST_BACKTRACE` and the locale pass through) plus what the test gives, so
//! a developer's `KAFKA_BROKERS` cannot leak into a test. Their stderr is
//! copied line by line into the test's captured output (shown when a test
//! fails) and the last lines are kept for error messages.
//!
//! Set `POOL_WORKER_BIN` to run the tests against another build of the
//! binary (a release build, say).

#![allow(dead_code)]

use pool_worker::record::{Event, Record};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a broker control command may take to be acknowledged.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long Kafka helpers wait for the broker by default.
pub const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);

/// Environment variables that child processes inherit from the test.
const PASS_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "LANG",
    "LC_ALL",
    "USER",
];

/// The `pool_worker` binary under test.
pub fn bin() -> PathBuf {
    std::env::var_os("POOL_WORKER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pool_worker")))
}

/// A command for the binary with the clean environment (see the module docs).
pub fn command() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_clear();
    for name in PASS_ENV {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd
}

/// A topic name no other test (or earlier run) uses.
pub fn unique_topic(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The lines of a ledger file (empty if it does not exist yet).
pub fn ledger(path: impl AsRef<Path>) -> Vec<String> {
    match std::fs::read_to_string(path.as_ref()) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("cannot read ledger {}: {e}", path.as_ref().display()),
    }
}

/// Calls `check` every `interval` until it returns true (→ true) or
/// `timeout` passes (→ false). For conditions nothing can be waited on for.
pub fn poll_until(timeout: Duration, interval: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(interval.min(deadline - now));
    }
}

/// The last lines a child wrote to stderr.
#[derive(Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    const KEEP: usize = 2000;

    pub fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Whether a line holds `needle`.
    pub fn has(&self, needle: &str) -> bool {
        self.lines().iter().any(|l| l.contains(needle))
    }

    /// Waits until a line holds `needle`; false if none did within
    /// `timeout`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        poll_until(timeout, Duration::from_millis(20), || self.has(needle))
    }

    /// The last `n` lines joined, for error messages.
    pub fn last(&self, n: usize) -> String {
        let lines = self.lines();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn push(&self, line: String) {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() == Self::KEEP {
            q.pop_front();
        }
        q.push_back(line);
    }
}

/// Copies a child's stderr into the test's output, keeping the tail.
pub fn forward_stderr(name: String, from: impl Read + Send + 'static) -> Tail {
    let tail = Tail::default();
    let keep = tail.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            eprintln!("{name}: {line}");
            keep.push(line);
        }
    });
    tail
}

/// A child's stdout, line by line, on a channel.
fn stdout_lines(from: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn signal(pid: u32, sig: i32) -> bool {
    // SAFETY: kill(2) has no memory-safety preconditions.
    libc::pid_t::try_from(pid).is_ok_and(|p| unsafe { libc::kill(p, sig) } == 0)
}

/// Waits for a child with a deadline; `None` if it is still running.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

// ---------------------------------------------------------------- broker

/// What `BrokerProc` creates.
#[derive(Clone, Debug)]
pub struct BrokerOpts {
    pub orders_topic: String,
    pub orders_partitions: i32,
    pub coordination_topic: String,
    pub results_topic: Option<String>,
    pub brokers: i32,
    /// `--advertise HOST:PORT`: the address the broker tells clients to use.
    pub advertise: Option<String>,
}

impl Default for BrokerOpts {
    fn default() -> Self {
        BrokerOpts {
            orders_topic: "work_orders".into(),
            orders_partitions: 1,
            coordination_topic: "work_claims".into(),
            results_topic: None,
            brokers: 1,
            advertise: None,
        }
    }
}

/// `pool_worker broker --json` as a child process; killed on drop.
pub struct BrokerProc {
    child: Child,
    control: Mutex<(ChildStdin, mpsc::Receiver<String>)>,
    bootstrap: String,
    /// The settings the broker says workers need against it (its
    /// `worker_env`: pool_worker/src/kafka/broker.rs, `WORKER_ENV`).
    pub worker_env: Vec<(String, String)>,
    pub opts: BrokerOpts,
    pub stderr: Tail,
    /// The pool's `STATE_DIR` (clean-exit markers), removed with the broker.
    state: tempfile::TempDir,
}

impl BrokerProc {
    /// A broker with the default topics (`work_orders`, 1 partition, and
    /// `work_claims`).
    pub fn start() -> Self {
        Self::start_with(BrokerOpts::default())
    }

    /// A broker with `partitions` orders partitions and the default topic names.
    pub fn with_partitions(partitions: i32) -> Self {
        Self::start_with(BrokerOpts {
            orders_partitions: partitions,
            ..BrokerOpts::default()
        })
    }

    pub fn start_with(opts: BrokerOpts) -> Self {
        let mut cmd = command();
        cmd.arg("broker")
            .arg("--json")
            .args(["--orders-topic", &opts.orders_topic])
            .args(["--orders-partitions", &opts.orders_partitions.to_string()])
            .args(["--coordination-topic", &opts.coordination_topic])
            .args(["--brokers", &opts.brokers.to_string()]);
        if let Some(r) = &opts.results_topic {
            cmd.args(["--results-topic", r]);
        }
        if let Some(a) = &opts.advertise {
            cmd.args(["--advertise", a]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} broker: {e}", bin().display()));
        let stderr = forward_stderr("broker".into(), child.stderr.take().expect("piped stderr"));
        let lines = stdout_lines(child.stdout.take().expect("piped stdout"));
        let stdin = child.stdin.take().expect("piped stdin");
        let first = match lines.recv_timeout(KAFKA_TIMEOUT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the broker printed no bootstrap line; stderr:\n{}",
                    stderr.last(20)
                );
            }
        };
        let v = serde_json::from_str::<serde_json::Value>(&first).unwrap_or_default();
        let bootstrap = v["bootstrap"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| panic!("unexpected first line from the broker: {first}"));
        // What workers need against the embedded broker, as it says.
        let worker_env = v["worker_env"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let state = tempfile::tempdir().expect("a STATE_DIR for the pool");
        BrokerProc {
            child,
            control: Mutex::new((stdin, lines)),
            bootstrap,
            worker_env,
            opts,
            stderr,
            state,
        }
    }

    /// [`Self::env`] for a worker run by hand: with `INSTANCE_NUMBER`.
    pub fn instance_env(&self, instance: u32) -> Vec<(String, String)> {
        let mut env = self.env();
        env.push(("INSTANCE_NUMBER".into(), instance.to_string()));
        env
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The pool's environment for this broker: `KAFKA_BROKERS`,
    /// `ORDERS_TOPIC`, `COORDINATION_TOPIC` (and `RESULTS_TOPIC`), and the
    /// settings the embedded broker needs (its `worker_env`).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("KAFKA_BROKERS".to_string(), self.bootstrap.clone()),
            ("ORDERS_TOPIC".to_string(), self.opts.orders_topic.clone()),
            (
                "COORDINATION_TOPIC".to_string(),
                self.opts.coordination_topic.clone(),
            ),
            // A killed worker's requests reach this loopback broker within
            // milliseconds, so its successor need not wait the default 15 s
            // (docs/protocol.md R16; pool_worker/tests/live/e2e.rs checks the wait).
            ("SETTLE_MS".to_string(), "500".to_string()),
            (
                "STATE_DIR".to_string(),
                self.state.path().display().to_string(),
            ),
        ];
        if let Some(r) = &self.opts.results_topic {
            env.push(("RESULTS_TOPIC".to_string(), r.clone()));
        }
        env.extend(self.worker_env.iter().cloned());
        env
    }

    /// Sends one control line and waits for its answer: `Ok` with the text
    /// after `ok `, `Err` with the broker's `error ...` line (or a timeout).
    pub fn command(&self, line: &str) -> Result<String, String> {
        let mut guard = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let (stdin, lines) = &mut *guard;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("cannot write to the broker: {e}"))?;
        match lines.recv_timeout(CONTROL_TIMEOUT) {
            Ok(answer) => match answer.strip_prefix("ok ") {
                Some(ack) => Ok(ack.to_string()),
                None => Err(answer),
            },
            Err(_) => Err(format!(
                "no answer from the broker to '{line}' in {CONTROL_TIMEOUT:?}"
            )),
        }
    }

    fn must(&self, line: &str) {
        if let Err(e) = self.command(line) {
            panic!("broker command '{line}' failed: {e}");
        }
    }

    /// All brokers refuse connections (existing ones are closed).
    pub fn down(&self) {
        self.must("down");
    }

    pub fn up(&self) {
        self.must("up");
    }

    /// Delay every response by `ms` milliseconds (0 to stop).
    pub fn rtt(&self, ms: u64) {
        self.must(&format!("rtt {ms}"));
    }

    pub fn create_topic(&self, name: &str, partitions: i32) {
        self.must(&format!("create {name} {partitions}"));
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------ supervisor

/// How `SupervisorProc` runs `pool_worker supervise`.
#[derive(Clone, Debug, Default)]
pub struct SupervisorOpts {
    /// `--instances`: `N` or a list like `1-4,7`.
    pub instances: String,
    /// Environment of the supervisor and so of the workers.
    pub env: Vec<(String, String)>,
    /// The delay after a failure (`--restart-delay-ms`) and the longest
    /// delay after failures in a row (`--max-restart-delay-ms`); clean exits
    /// are restarted at once.
    pub restart_delay_ms: Option<u64>,
    pub max_restart_delay_ms: Option<u64>,
    pub max_runs: Option<u64>,
    pub stop_grace_ms: Option<u64>,
    /// A stand-in program (and its arguments) instead of worker mode.
    pub program: Option<(PathBuf, Vec<String>)>,
    /// Run the supervisor (and so its workers and their jobs) as this
    /// (uid, gid) instead of the test's user (tests/live/apache_network.rs
    /// cuts one user's packets off).
    pub user: Option<(u32, u32)>,
    /// Run this file as the `pool_worker` binary instead of [`bin`] (a copy
    /// the test may replace).
    pub bin: Option<PathBuf>,
}

/// One `exited` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    pub instance: u32,
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// What the supervisor has reported so far.
#[derive(Clone, Debug, Default)]
pub struct SupState {
    /// The pid of each instance's running process (absent between runs).
    pub pids: BTreeMap<u32, u32>,
    pub starts: BTreeMap<u32, u64>,
    pub exits: Vec<Exit>,
    /// Retired instances and why (`config_error`, `fenced`, `max_runs`).
    pub retired: BTreeMap<u32, String>,
    /// Every event line, parsed.
    pub events: Vec<serde_json::Value>,
    /// The supervisor's `done` code, once it printed it.
    pub done: Option<i32>,
    /// The supervisor's stdout is closed (it has exited).
    pub closed: bool,
}

impl SupState {
    pub fn starts(&self, instance: u32) -> u64 {
        self.starts.get(&instance).copied().unwrap_or(0)
    }

    pub fn total_starts(&self) -> u64 {
        self.starts.values().sum()
    }

    pub fn exits_of(&self, instance: u32) -> Vec<&Exit> {
        self.exits
            .iter()
            .filter(|e| e.instance == instance)
            .collect()
    }

    pub fn pid(&self, instance: u32) -> Option<u32> {
        self.pids.get(&instance).copied()
    }

    fn apply(&mut self, v: serde_json::Value) {
        let num = |k: &str| v[k].as_u64().and_then(|n| u32::try_from(n).ok());
        let int = |k: &str| v[k].as_i64().and_then(|n| i32::try_from(n).ok());
        match (v["event"].as_str(), num("instance")) {
            (Some("started"), Some(i)) => {
                *self.starts.entry(i).or_default() += 1;
                if let Some(pid) = num("pid") {
                    self.pids.insert(i, pid);
                }
            }
            (Some("exited"), Some(i)) => {
                let pid = num("pid").unwrap_or(0);
                if self.pids.get(&i) == Some(&pid) {
                    self.pids.remove(&i);
                }
                self.exits.push(Exit {
                    instance: i,
                    pid,
                    code: int("code"),
                    signal: int("signal"),
                });
            }
            (Some("retired"), Some(i)) => {
                self.retired
                    .insert(i, v["reason"].as_str().unwrap_or("").to_string());
            }
            (Some("done"), _) => self.done = int("code"),
            _ => {}
        }
        self.events.push(v);
    }
}

type Shared = Arc<(Mutex<SupState>, Condvar)>;

/// `pool_worker supervise --json` as a child process; stopped on drop
/// (SIGTERM, then SIGKILL).
pub struct SupervisorProc {
    child: Child,
    state: Shared,
    pub stderr: Tail,
}

impl SupervisorProc {
    /// Supervises worker-mode instances `instances` with `env`.
    pub fn start<K: AsRef<str>, V: AsRef<str>>(instances: &str, env: &[(K, V)]) -> Self {
        Self::start_with(SupervisorOpts {
            instances: instances.to_string(),
            env: env
                .iter()
                .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
                .collect(),
            ..SupervisorOpts::default()
        })
    }

    pub fn start_with(opts: SupervisorOpts) -> Self {
        let mut cmd = command();
        if let Some(b) = &opts.bin {
            let env: Vec<_> = cmd
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(OsStr::to_owned)))
                .collect();
            cmd = Command::new(b);
            cmd.env_clear();
            for (k, v) in env {
                if let Some(v) = v {
                    cmd.env(k, v);
                }
            }
        }
        cmd.args(["supervise", "--json", "--instances", &opts.instances]);
        if let Some(ms) = opts.restart_delay_ms {
            cmd.args(["--restart-delay-ms", &ms.to_string()]);
        }
        if let Some(ms) = opts.max_restart_delay_ms {
            cmd.args(["--max-restart-delay-ms", &ms.to_string()]);
        }
        if let Some(n) = opts.max_runs {
            cmd.args(["--max-runs", &n.to_string()]);
        }
        if let Some(ms) = opts.stop_grace_ms {
            cmd.args(["--stop-grace-ms", &ms.to_string()]);
        }
        if let Some((program, args)) = &opts.program {
            cmd.arg("--program").arg(program).arg("--").args(args);
        }
        cmd.envs(opts.env.iter().map(|(k, v)| (OsStr::new(k), OsStr::new(v))));
        if let Some((uid, gid)) = opts.user {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} supervise: {e}", bin().display()));
        let stderr = forward_stderr(
            "supervise".into(),
            child.stderr.take().expect("piped stderr"),
        );
        let state: Shared = Arc::default();
        let writer = state.clone();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    eprintln!("supervise (not an event): {line}");
                    continue;
                };
                let (lock, cv) = &*writer;
                lock.lock().unwrap_or_else(|e| e.into_inner()).apply(v);
                cv.notify_all();
            }
            let (lock, cv) = &*writer;
            lock.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
            cv.notify_all();
        });
        SupervisorProc {
            child,
            state,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A copy of what has been reported so far.
    pub fn snapshot(&self) -> SupState {
        self.state
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until `cond` holds for the reported events (→ true) or
    /// `timeout` passes (→ false). Wakes on every event, no polling.
    pub fn wait_for(&self, cond: impl Fn(&SupState) -> bool, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if cond(&state) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = cv
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Like [`wait_for`](Self::wait_for) but panics (with the events so far)
    /// on timeout.
    pub fn expect(&self, what: &str, cond: impl Fn(&SupState) -> bool, timeout: Duration) {
        if !self.wait_for(cond, timeout) {
            let s = self.snapshot();
            panic!(
                "supervisor: {what}: not within {timeout:?}; events:\n{}\nstderr:\n{}",
                s.events
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
                self.stderr.last(30)
            );
        }
    }

    /// The pid of `instance` once it runs (None on timeout).
    pub fn wait_pid(&self, instance: u32, timeout: Duration) -> Option<u32> {
        self.wait_for(|s| s.pid(instance).is_some(), timeout);
        self.snapshot().pid(instance)
    }

    /// Sends `signal` (e.g. `libc::SIGKILL`) to the running process of
    /// `instance`; returns its pid, or None if it is not running.
    pub fn kill_instance(&self, instance: u32, signal_number: i32) -> Option<u32> {
        let pid = self.snapshot().pid(instance)?;
        signal(pid, signal_number).then_some(pid)
    }

    /// Stops the supervisor (SIGTERM; SIGKILL after 15 s) and returns its
    /// exit code (None if it was killed by a signal).
    pub fn stop(&mut self) -> Option<i32> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return status.code();
        }
        signal(self.child.id(), libc::SIGTERM);
        if let Some(status) = wait_child(&mut self.child, Duration::from_secs(15)) {
            return status.code();
        }
        let _ = self.child.kill();
        self.child.wait().ok().and_then(|s| s.code())
    }

    /// Waits for the supervisor to exit by itself (e.g. all instances
    /// retired); its exit code, or None on timeout or a signal.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        wait_child(&mut self.child, timeout).and_then(|s| s.code())
    }
}

impl Drop for SupervisorProc {
    fn drop(&mut self) {
        self.stop();
    }
}

// ------------------------------------------------------------------ kafka

/// One record as read: (offset, key, value).
pub type Raw = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// One record to produce: (key, value).
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// A delivery report: the record's (partition, offset), or why it failed.
type Delivery = Result<(i32, i64), String>;

struct Deliveries(Mutex<Vec<Option<Delivery>>>);

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let r = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.to_string()),
        };
        if let Some(slot) = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(index)
        {
            *slot = Some(r);
        }
    }
}

/// Produces (key, value) records with `acks=all`, to `partition` or wherever
/// the partitioner puts them, and returns each one's (partition, offset)
/// from its delivery report.
pub fn try_produce(
    bootstrap: &str,
    topic: &str,
    records: &[KeyValue],
    partition: Option<i32>,
) -> Result<Vec<(i32, i64)>, String> {
    try_produce_with(bootstrap, topic, records, partition, &[])
}

/// Produces orders (payloads without keys); panics if any is not delivered.
pub fn produce_orders<P: AsRef<[u8]>>(
    bootstrap: &str,
    topic: &str,
    payloads: &[P],
    partition: Option<i32>,
) -> Vec<(i32, i64)> {
    let records: Vec<_> = payloads.iter().map(|p| (None, Some(p.as_ref()))).collect();
    try_produce(bootstrap, topic, &records, partition)
        .unwrap_or_else(|e| panic!("cannot produce orders to {topic}: {e}"))
}

/// Writes one coordination record (key `<instance>:<event>`) to partition 0;
/// returns its offset.
pub fn produce_record(bootstrap: &str, topic: &str, record: &Record) -> i64 {
    let key = record.key();
    let value = record.encode();
    try_produce(
        bootstrap,
        topic,
        &[(Some(key.as_bytes()), Some(&value))],
        Some(0),
    )
    .unwrap_or_else(|e| panic!("cannot write {key} to {topic}: {e}"))[0]
        .1
}

/// Reads one partition from the beginning, incrementally.
pub struct TopicReader {
    consumer: BaseConsumer,
    topic: String,
    partition: i32,
    /// Every record read so far, in offset order.
    pub records: Vec<Raw>,
    next: i64,
    /// The last consumer error (transient errors are not fatal).
    pub last_error: Option<String>,
}

impl TopicReader {
    pub fn new(bootstrap: &str, topic: &str, partition: i32) -> Result<Self, String> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "pool_worker-tests")
            // Answer fetches quickly: tests wait for new records often.
            .set("fetch.wait.max.ms", "50")
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // The end: with transactions (docs/protocol.md R16) the last
            // offsets are commit markers, which no message carries; the
            // reader's position after the end says how far it got.
            .set("enable.partition.eof", "true")
            .create()
            .map_err(|e| format!("cannot create a consumer: {e}"))?;
        let mut tpl = TopicPartitionList::new();
        // Offset 0 rather than Offset::Beginning: the latter costs a
        // ListOffsets round that librdkafka delays by ~500 ms. If 0 is gone
        // (retention, compaction), auto.offset.reset starts at the earliest.
        tpl.add_partition_offset(topic, partition, Offset::Offset(0))
            .and_then(|()| consumer.assign(&tpl))
            .map_err(|e| format!("cannot assign {topic}/{partition}: {e}"))?;
        Ok(TopicReader {
            consumer,
            topic: topic.to_string(),
            partition,
            records: Vec::new(),
            next: 0,
            last_error: None,
        })
    }

    /// Waits up to `timeout` for the next record; true if one was read.
    pub fn poll(&mut self, timeout: Duration) -> bool {
        match self.consumer.poll(timeout) {
            Some(Ok(m)) => {
                self.next = m.offset() + 1;
                self.records.push((
                    m.offset(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                ));
                true
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {
                // Past the transaction markers at the end (they take
                // offsets but are never delivered).
                let at = self.consumer.position().ok().and_then(|t| {
                    match t.find_partition(&self.topic, self.partition)?.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    }
                });
                self.next = self.next.max(at.unwrap_or(0));
                false
            }
            Some(Err(e)) => {
                self.last_error = Some(e.to_string());
                false
            }
            None => false,
        }
    }

    /// Reads everything up to the high watermark as it is now.
    pub fn catch_up(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let (_, high) = self
            .consumer
            .fetch_watermarks(&self.topic, self.partition, timeout)
            .map_err(|e| format!("watermarks of {}/{}: {e}", self.topic, self.partition))?;
        while self.next < high {
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "read {}/{} up to offset {} of {high} in {timeout:?} (last error: {:?})",
                    self.topic, self.partition, self.next, self.last_error
                ));
            }
            self.poll((deadline - now).min(Duration::from_millis(500)));
        }
        Ok(())
    }

    /// The records read so far that are pool_worker records.
    pub fn decoded(&self) -> Vec<(i64, Record)> {
        decode_all(&self.records)
    }
}

pub fn decode_all(records: &[Raw]) -> Vec<(i64, Record)> {
    records
        .iter()
        .filter_map(|(o, k, v)| {
            Record::decode(k.as_deref(), v.as_deref())
                .ok()
                .map(|r| (*o, r))
        })
        .collect()
}

/// Every record of `topic`/`partition` from the beginning up to the high
/// watermark at the time of the call.
pub fn read_topic(bootstrap: &str, topic: &str, partition: i32) -> Vec<Raw> {
    let mut reader =
        TopicReader::new(bootstrap, topic, partition).unwrap_or_else(|e| panic!("{e}"));
    reader
        .catch_up(KAFKA_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"));
    reader.records
}

/// Every record of the claims topic (partition 0) up to its current end.
pub fn read_claims(bootstrap: &str, topic: &str) -> Vec<Raw> {
    read_topic(bootstrap, topic, 0)
}

/// The claims records that are pool_worker records (foreign ones skipped).
pub fn decoded_claims(bootstrap: &str, topic: &str) -> Vec<(i64, Record)> {
    decode_all(&read_claims(bootstrap, topic))
}

/// Waits until every order of `orders` (partition, offset) has a
/// `completed` record in the claims topic; returns the first such record of
/// each, in the order of `orders`. On timeout, says which are missing.
pub fn wait_completed(
    bootstrap: &str,
    topic: &str,
    orders: &[(i32, i64)],
    timeout: Duration,
) -> Result<Vec<Record>, String> {
    let deadline = Instant::now() + timeout;
    let mut reader = TopicReader::new(bootstrap, topic, 0)?;
    let mut done: BTreeMap<(i32, i64), Record> = BTreeMap::new();
    let mut seen = 0;
    loop {
        for (_, k, v) in &reader.records[seen..] {
            if let Ok(rec) = Record::decode(k.as_deref(), v.as_deref()) {
                if let (Event::Completed, Some(o)) = (rec.event(), rec.order()) {
                    done.entry((o.partition, o.offset)).or_insert(rec);
                }
            }
        }
        seen = reader.records.len();
        if orders.iter().all(|o| done.contains_key(o)) {
            return Ok(orders.iter().map(|o| done[o].clone()).collect());
        }
        let now = Instant::now();
        if now >= deadline {
            let missing: Vec<String> = orders
                .iter()
                .filter(|o| !done.contains_key(o))
                .map(|(p, o)| format!("{p}:{o}"))
                .collect();
            let recent: Vec<String> = reader.records[reader.records.len().saturating_sub(15)..]
                .iter()
                .map(|(o, k, v)| {
                    let s = |b: &Option<Vec<u8>>| {
                        b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
                    };
                    format!(
                        "  #{o} {} {}",
                        s(k).unwrap_or_default(),
                        s(v).unwrap_or_default()
                    )
                })
                .collect();
            return Err(format!(
                "orders not completed within {timeout:?}: {}; {} claims records read (last error: {:?}); the last:\n{}",
                missing.join(", "),
                reader.records.len(),
                reader.last_error,
                recent.join("\n")
            ));
        }
        reader.poll((deadline - now).min(Duration::from_millis(500)));
    }
}

// ------------------------------------------------------ worker processes

/// One worker-mode process started directly (not under a supervisor);
/// killed on drop.
pub struct WorkerProc {
    child: Child,
    pub stderr: Tail,
}

impl WorkerProc {
    /// Starts `pool_worker` in worker mode with `env` (plus the clean
    /// environment of [`command`]).
    pub fn start<K: AsRef<str>, V: AsRef<str>>(name: &str, env: &[(K, V)]) -> Self {
        let mut cmd = command();
        cmd.envs(
            env.iter()
                .map(|(k, v)| (OsStr::new(k.as_ref()), OsStr::new(v.as_ref()))),
        );
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin().display()));
        let stderr = forward_stderr(name.to_string(), child.stderr.take().expect("piped stderr"));
        WorkerProc { child, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited (without reaping it twice).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for the process to exit; its status, or None on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        wait_child(&mut self.child, timeout)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the binary in worker mode with exactly `env` and returns (exit
/// code, stderr); panics if it does not exit within `timeout`.
pub fn run_worker_once(env: &[(&str, &str)], timeout: Duration) -> (Option<i32>, String) {
    let mut cmd = command();
    cmd.envs(env.iter().map(|(k, v)| (OsStr::new(k), OsStr::new(v))));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin().display()));
    let mut err = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let Some(status) = wait_child(&mut child, timeout) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the worker did not exit within {timeout:?}");
    };
    (status.code(), reader.join().unwrap_or_default())
}

// ------------------------------------------------------------ the audit

/// What the claims topic says about one order.
#[derive(Clone, Debug, Default)]
pub struct OrderTrail {
    /// (position, instance, attempt) of every valid claim.
    pub claims: Vec<(i64, u32, u32)>,
    /// (position, instance, event, attempt) of every valid `committed` and
    /// `yielded` written by the instance itself.
    pub decisions: Vec<(i64, u32, Event, u32)>,
    /// Instances whose *first* decision after their claim was `committed`
    /// (the effective commits), with the position of that decision: the
    /// claim's own position for a first claim that met no rival, which is
    /// its own commit (docs/protocol.md R34).
    pub effective_commits: Vec<(i64, u32)>,
    /// Every valid `completed` (duplicates by incarnation+seq dropped).
    pub completions: Vec<(i64, Record)>,
    /// `completed` records not preceded by the writer's `committed` of the
    /// order (since its claim).
    pub completed_without_commit: Vec<i64>,
    /// Every record of the order, for error messages: "#pos inst:event attempt".
    pub lines: Vec<String>,
    /// (position, instance, incarnation, attempt) of every valid
    /// `committed` (first decisions and retries alike), and of every claim
    /// that was its own commit (R34).
    pub commits: Vec<(i64, u32, String, u32)>,
    /// Positions of the claims that were their own commit (R34) and not
    /// undone by their writer's yield.
    pub unrivalled_claims: Vec<i64>,
    /// Valid revocations of a hold on this order (docs/protocol.md R37,
    /// R38): (position, holder, holder's fenced incarnation, revoker).
    pub revocations: Vec<(i64, u32, String, u32)>,
    /// `parked` records about this order (docs/protocol.md R54): (position,
    /// parker). A park releases the parker's hold as a yield would.
    pub parks: Vec<(i64, u32)>,
}

impl OrderTrail {
    /// Pairs of effective commits by two instances that were both valid at
    /// once: (earlier committer, later committer). A commit stops being valid
    /// when the committer's hold is revoked (a lease takeover): an effective
    /// commit by B after A's is legitimate only if a valid revocation of A's
    /// hold on this order lies between A's commit and B's claim, or A
    /// parked the order (R54) between A's commit and B's.
    pub fn committed_by_two(&self) -> Vec<(u32, u32)> {
        let claim_before = |i: u32, pos: i64| {
            self.claims
                .iter()
                .filter(|c| c.1 == i && c.0 < pos)
                .map(|c| c.0)
                .max()
                .unwrap_or(pos)
        };
        let mut pairs = Vec::new();
        for (k, &(pa, a)) in self.effective_commits.iter().enumerate() {
            for &(pb, b) in &self.effective_commits[k + 1..] {
                if a == b {
                    continue;
                }
                let b_claim = claim_before(b, pb);
                let revoked = self
                    .revocations
                    .iter()
                    .any(|r| r.1 == a && r.0 > pa && r.0 < b_claim);
                let parked = self.parks.iter().any(|p| p.1 == a && p.0 > pa && p.0 < pb);
                if !revoked && !parked {
                    pairs.push((a, b));
                }
            }
        }
        pairs
    }
}

/// The whole claims topic, judged order by order.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    pub orders: BTreeMap<pool_worker::record::OrderId, OrderTrail>,
    /// Records of an incarnation older than its instance's newest `booted`
    /// (a zombie's), and duplicates: skipped.
    pub void: usize,
    /// What `pool_worker audit`'s checker (src/audit.rs, the product's own
    /// View) finds wrong with the same records.
    pub product_violations: Vec<String>,
}

impl Audit {
    /// Reads the claims records in order and applies the rules: fences
    /// (only the newest incarnation of an instance number speaks),
    /// duplicates (a repeated incarnation+seq is dropped), first decision
    /// after a claim counts, and a first claim that met no rival is that
    /// decision, a commit (docs/protocol.md R34).
    ///
    /// R34 is judged here on this checker's own bookkeeping, not the
    /// product's View: a claim without `takeover_of` is its own commit when,
    /// at its position, the order has no completion (valid or void), the
    /// claim is not late (the order behind the frontier the records' `next`
    /// fields raised, with no claim of it seen before), and every other
    /// instance that claimed the order has since yielded (explicitly, or by
    /// a valid revocation of its hold) or completed it. A `yielded` by the
    /// writer after such a claim, before any `committed` of its own, is
    /// that claim's decision after all and undoes the commit (R11).
    pub fn of(records: &[(i64, Record)]) -> Audit {
        use pool_worker::record::OrderId;
        let mut audit = Audit::default();
        // Attempts are the tests' own business (they set MAX_ATTEMPTS).
        let report =
            pool_worker::audit::audit(records.iter().map(|(p, r)| (*p as u64, Some(r))), u32::MAX);
        audit.product_violations = report
            .violations
            .iter()
            .map(|v| format!("{:?} {:?} at {:?}: {}", v.rule, v.order, v.pos, v.detail))
            .collect();
        let mut current: BTreeMap<u32, String> = BTreeMap::new();
        let mut seen: std::collections::BTreeSet<(String, u64)> = Default::default();
        // Instance → (order of its newest claim, its first decision, whether
        // that decision is the claim itself (R34) with no `committed` since).
        let mut holds: BTreeMap<u32, (OrderId, Option<Event>, bool)> = BTreeMap::new();
        // Order → instance → its stance (`Claimed` for undecided), and the
        // orders with a `completed` record of any validity (R15).
        let mut stances: BTreeMap<OrderId, BTreeMap<u32, Event>> = BTreeMap::new();
        let mut finished: std::collections::BTreeSet<OrderId> = Default::default();
        // Partition → the frontier the valid records' `next` raised (R13);
        // orders with a late first claim (R14).
        let mut frontier: BTreeMap<pool_worker::record::Lane, i64> = BTreeMap::new();
        let mut late: std::collections::BTreeSet<OrderId> = Default::default();
        // Instance → its open hold as the replay sees it (order, position of
        // the hold's newest claim/commit/lease, incarnation), for judging
        // revocations; and the incarnation a valid revocation fenced.
        let mut live: BTreeMap<u32, (OrderId, i64, String)> = BTreeMap::new();
        let mut fenced: BTreeMap<u32, String> = BTreeMap::new();
        for (pos, rec) in records {
            if rec.event() == Event::Completed {
                // Even a void completion ends the order (R15).
                if let Some(o) = rec.order() {
                    finished.insert(o);
                }
            }
            // The harness keeps bare numbers and names.
            let instance = rec.instance.get();
            let incarnation = rec.incarnation.to_string();
            let (attempt, by, writer) = (
                rec.attempt().get(),
                rec.by().map(|b| b.get()),
                rec.writer().get(),
            );
            if rec.event() == Event::Booted {
                current.insert(instance, incarnation.clone());
                fenced.remove(&instance);
            } else if rec.by().is_none()
                && (current.get(&instance).is_some_and(|c| *c != incarnation)
                    || fenced.get(&instance) == Some(&incarnation))
            {
                audit.void += 1;
                continue;
            }
            if let Some(w) = by {
                // Written on another's behalf: the writer must not be fenced.
                if current.get(&w).is_some_and(|c| *c != incarnation)
                    || fenced.get(&w) == Some(&incarnation)
                {
                    audit.void += 1;
                    continue;
                }
            }
            if rec.event() == Event::Revoked {
                // Valid only if the hold wrote nothing since the revoker saw
                // it (the replay's rule, src/boot.rs).
                let Some(order) = rec.order() else { continue };
                let valid = live.get(&instance).is_some_and(|(o, last, inc)| {
                    *o == order
                        && rec.seen().map(|s| s.get()) == u64::try_from(*last).ok()
                        && rec.fences().map(|f| f.as_str()) == Some(inc.as_str())
                });
                let t = audit.orders.entry(order).or_default();
                t.lines.push(format!(
                    "  #{pos} {}:revoked by {} attempt {}{}",
                    instance,
                    writer,
                    attempt,
                    if valid {
                        ""
                    } else {
                        " (stray: the hold moved on)"
                    }
                ));
                if valid {
                    let (_, _, inc) = live.remove(&instance).expect("checked above");
                    t.revocations.push((*pos, instance, inc.clone(), writer));
                    fenced.insert(instance, inc);
                    holds.remove(&instance);
                    // The holder counts as yielded in the contest (R38).
                    if let Some(s) = stances.entry(order).or_default().get_mut(&instance) {
                        *s = Event::Yielded;
                    }
                } else {
                    audit.void += 1;
                }
                continue;
            }
            if rec.by().is_none() && rec.seq > 0 && !seen.insert((incarnation.clone(), rec.seq)) {
                audit.void += 1;
                continue;
            }
            // Whether a claim's order was behind the frontier before this
            // record (its own `next` counts the claim itself).
            let behind = rec
                .order()
                .is_some_and(|o| frontier.get(&o.lane()).is_some_and(|f| o.offset < *f));
            for (&p, &o) in &rec.next {
                let f = frontier.entry(p).or_insert(o);
                *f = (*f).max(o);
            }
            let Some(order) = rec.order() else { continue };
            let t = audit.orders.entry(order).or_default();
            t.lines.push(format!(
                "  #{pos} {}:{}{} attempt {}{}",
                instance,
                rec.event(),
                by.map(|b| format!(" by {b}")).unwrap_or_default(),
                attempt,
                rec.reason().map(|r| format!(" ({r})")).unwrap_or_default()
            ));
            if rec.by().is_some() {
                continue;
            }
            let i = instance;
            match rec.event() {
                Event::Claimed => {
                    t.claims.push((*pos, i, attempt));
                    let takeover = !rec.takeover_of().is_empty();
                    let known = stances.contains_key(&order) || finished.contains(&order);
                    if !takeover && !known && behind {
                        late.insert(order);
                    }
                    let contest = stances.entry(order).or_default();
                    // R34: a first claim that met no rival is its own commit.
                    let unrivalled = !takeover
                        && !late.contains(&order)
                        && !finished.contains(&order)
                        && contest.iter().all(|(j, s)| {
                            *j == i || matches!(s, Event::Yielded | Event::Completed)
                        });
                    contest.insert(
                        i,
                        if unrivalled {
                            Event::Committed
                        } else {
                            Event::Claimed
                        },
                    );
                    if unrivalled {
                        if let Some(l) = t.lines.last_mut() {
                            l.push_str(" (its own commit, R34)");
                        }
                        t.effective_commits.push((*pos, i));
                        t.commits.push((*pos, i, incarnation.clone(), attempt));
                        t.unrivalled_claims.push(*pos);
                        holds.insert(i, (order, Some(Event::Committed), true));
                    } else {
                        holds.insert(i, (order, None, false));
                    }
                    live.insert(i, (order, *pos, incarnation.clone()));
                }
                Event::Committed | Event::Yielded => {
                    t.decisions.push((*pos, i, rec.event(), attempt));
                    if rec.event() == Event::Committed {
                        t.commits.push((*pos, i, incarnation.clone(), attempt));
                        if let Some((o, last, inc)) = live.get_mut(&i) {
                            if *o == order {
                                *last = *pos;
                                *inc = incarnation.clone();
                            }
                        }
                    }
                    match holds.get_mut(&i) {
                        Some((o, first @ None, _)) if *o == order => {
                            *first = Some(rec.event());
                            if rec.event() == Event::Committed {
                                t.effective_commits.push((*pos, i));
                            } else {
                                live.remove(&i);
                            }
                            stances.entry(order).or_default().insert(i, rec.event());
                        }
                        Some((o, first, unrivalled @ true)) if *o == order => {
                            // After a claim that was its own commit: an
                            // explicit `committed` (a retry's, or an older
                            // writer's) is its decision record from now on;
                            // a `yielded` is the decision after all (R11,
                            // R34, met in compacted logs), and undoes it.
                            *unrivalled = false;
                            if rec.event() == Event::Yielded {
                                *first = Some(Event::Yielded);
                                let claim = t.claims.iter().rev().find(|c| c.1 == i).map(|c| c.0);
                                t.effective_commits
                                    .retain(|c| !(c.1 == i && Some(c.0) == claim));
                                t.commits.retain(|c| !(c.1 == i && Some(c.0) == claim));
                                t.unrivalled_claims.retain(|p| Some(*p) != claim);
                                live.remove(&i);
                                stances.entry(order).or_default().insert(i, Event::Yielded);
                            }
                        }
                        _ => {}
                    }
                }
                Event::Lease => {
                    if let Some((o, last, inc)) = live.get_mut(&i) {
                        if *o == order {
                            *last = *pos;
                            *inc = incarnation.clone();
                        }
                    }
                }
                Event::Completed => {
                    let committed = matches!(holds.get(&i), Some((o, Some(Event::Committed), _)) if *o == order);
                    // A completion closes its writer's hold of the order
                    // (whether or not its commit is in the log).
                    if holds.get(&i).is_some_and(|h| h.0 == order) {
                        stances
                            .entry(order)
                            .or_default()
                            .insert(i, Event::Completed);
                    }
                    if !committed {
                        t.completed_without_commit.push(*pos);
                    } else if live.get(&i).is_some_and(|(o, _, _)| *o == order) {
                        live.remove(&i);
                    }
                    t.completions.push((*pos, rec.clone()));
                }
                // R54: the parker's committed hold ends, as yielded; the
                // order waits, held by nobody, for a claim (not late).
                Event::Parked => {
                    t.parks.push((*pos, i));
                    if holds.get(&i).is_some_and(|h| h.0 == order) {
                        holds.remove(&i);
                    }
                    if live.get(&i).is_some_and(|(o, _, _)| *o == order) {
                        live.remove(&i);
                    }
                    if let Some(s) = stances.entry(order).or_default().get_mut(&i) {
                        *s = Event::Yielded;
                    }
                }
                _ => {}
            }
        }
        audit
    }

    /// The trail of one order, for error messages.
    pub fn show(&self, order: (i32, i64)) -> String {
        self.show_id(pool_worker::record::OrderId::new(order.0, order.1))
    }

    /// [`Audit::show`] of an order of any orders topic (R57).
    pub fn show_id(&self, id: pool_worker::record::OrderId) -> String {
        match self.orders.get(&id) {
            Some(t) => format!("claims trail of {id}:\n{}", t.lines.join("\n")),
            None => format!("no claims record names {id}"),
        }
    }

    /// Checks that each of `orders` was completed exactly once, committed
    /// (effectively) by exactly one instance at a time, by the instance that
    /// completes it, and that no completion lacks its writer's commit.
    ///
    /// "At a time": with leases, a holder whose lease expired loses its
    /// hold to a valid `revoked` record, and the revoker then claims and
    /// commits the order itself (a takeover). Both commits are in the log,
    /// but the first stopped counting at the revocation (its incarnation is
    /// fenced from there on, so its later records are void here as in the
    /// replay). Only two commits with no revocation of the first between
    /// them are an error ([`OrderTrail::committed_by_two`]).
    pub fn check_exactly_once(&self, orders: &[(i32, i64)]) -> Result<(), String> {
        let ids: Vec<pool_worker::record::OrderId> = orders
            .iter()
            .map(|&(p, o)| pool_worker::record::OrderId::new(p, o))
            .collect();
        self.check_exactly_once_ids(&ids)
    }

    /// [`Audit::check_exactly_once`] of orders of any orders topic (R57).
    pub fn check_exactly_once_ids(
        &self,
        orders: &[pool_worker::record::OrderId],
    ) -> Result<(), String> {
        let mut errors: Vec<String> = self
            .product_violations
            .iter()
            .map(|v| format!("pool_worker audit: {v}"))
            .collect();
        for &id in orders {
            let Some(t) = self.orders.get(&id) else {
                errors.push(format!("{id}: no record at all"));
                continue;
            };
            let mut problems = Vec::new();
            if t.completions.len() != 1 {
                problems.push(format!("{} completions", t.completions.len()));
            }
            let committers: std::collections::BTreeSet<u32> =
                t.effective_commits.iter().map(|(_, i)| *i).collect();
            // Two committers are fine only when a lease takeover separates
            // them (the first's hold was revoked before the second claimed).
            let two = t.committed_by_two();
            if committers.is_empty() || !two.is_empty() {
                problems.push(format!(
                    "effectively committed by {committers:?} (at once: {two:?})"
                ));
            }
            if !t.completed_without_commit.is_empty() {
                problems.push(format!(
                    "completed without commit at {:?}",
                    t.completed_without_commit
                ));
            }
            for (pos, c) in &t.completions {
                if !committers.contains(&c.instance.get()) {
                    problems.push(format!(
                        "completed at #{pos} by {} which did not commit",
                        c.instance
                    ));
                }
            }
            if !problems.is_empty() {
                errors.push(format!(
                    "{id}: {}\n{}",
                    problems.join("; "),
                    self.show_id(id)
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }
}

/// Waits for every order to complete and returns the audit of the claims
/// topic at that moment; panics with the missing orders on timeout.
pub fn wait_and_audit(
    bootstrap: &str,
    topic: &str,
    orders: &[(i32, i64)],
    timeout: Duration,
) -> Audit {
    if let Err(e) = wait_completed(bootstrap, topic, orders, timeout) {
        panic!("{e}");
    }
    Audit::of(&decoded_claims(bootstrap, topic))
}

/// An order that appends "$ORDER_PARTITION:$ORDER_OFFSET" to `ledger`.
pub fn ledger_order(ledger: &Path) -> String {
    sh_order(
        &format!("echo $ORDER_PARTITION:$ORDER_OFFSET >> {}", shq(ledger)),
        None,
    )
}

/// A JSON order running `script` with `sh -c` (as an argv, so no word
/// splitting surprises), with an optional time limit.
pub fn sh_order(script: &str, timeout_secs: Option<u64>) -> String {
    let mut v = serde_json::json!({ "cmd": ["sh", "-c", script] });
    if let Some(t) = timeout_secs {
        v["timeout_secs"] = t.into();
    }
    v.to_string()
}

/// Single-quotes a path for a shell script.
pub fn shq(p: impl AsRef<Path>) -> String {
    format!(
        "'{}'",
        p.as_ref().display().to_string().replace('\'', r"'\''")
    )
}

/// Like [`try_produce`], with extra producer properties (for example a
/// larger `message.max.bytes` for oversized orders).
pub fn try_produce_with(
    bootstrap: &str,
    topic: &str,
    records: &[KeyValue],
    partition: Option<i32>,
    props: &[(&str, &str)],
) -> Result<Vec<(i32, i64)>, String> {
    let ctx = Deliveries(Mutex::new(vec![None; records.len()]));
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("message.timeout.ms", KAFKA_TIMEOUT.as_millis().to_string());
    for (k, v) in props {
        config.set(*k, *v);
    }
    let producer: BaseProducer<Deliveries> = config
        .create_with_context(ctx)
        .map_err(|e| format!("cannot create a producer: {e}"))?;
    for (i, (key, value)) in records.iter().enumerate() {
        let mut rec = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, i);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        if let Some(v) = value {
            rec = rec.payload(v);
        }
        if let Some(p) = partition {
            rec = rec.partition(p);
        }
        producer
            .send(rec)
            .map_err(|(e, _)| format!("cannot send record {i}: {e}"))?;
    }
    producer
        .flush(KAFKA_TIMEOUT)
        .map_err(|e| format!("flush: {e}"))?;
    let results = std::mem::take(
        &mut *producer
            .context()
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| Err(format!("no delivery report for record {i}"))))
        .collect()
}

pub mod apache;
#[path = "../../../../tests/shared/figures.rs"]
mod figures;
pub mod netfault;
pub use figures::record_figures;

/// The claims records, one readable line each (for assertion messages).
pub fn show_all(recs: &[(i64, Record)]) -> String {
    recs.iter()
        .map(|(p, r)| {
            // Records about a parked order are keyed `park:P:O` (R54):
            // their writer and event are said beside the key.
            let key = r.key();
            let who = if key.starts_with("park:") {
                format!(" {}:{}", r.instance, r.event())
            } else {
                String::new()
            };
            format!(
                "  #{p} {key}{who}{} {} {:?} attempt {} seq {}",
                r.by().map(|b| format!(" by {b}")).unwrap_or_default(),
                r.incarnation,
                r.order(),
                r.attempt(),
                r.seq
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits (at most `KAFKA_TIMEOUT`) until the claims topic holds a record
/// matching `pred`; returns the records read. Panics naming `what`.
pub fn wait_record(
    broker: &BrokerProc,
    claims: &str,
    what: &str,
    pred: impl Fn(&Record) -> bool,
) -> Vec<(i64, Record)> {
    wait_record_within(broker, claims, what, KAFKA_TIMEOUT, pred)
}

/// [`wait_record`] with its own time limit.
pub fn wait_record_within(
    broker: &BrokerProc,
    claims: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Record) -> bool,
) -> Vec<(i64, Record)> {
    let mut recs = Vec::new();
    let ok = poll_until(timeout, Duration::from_millis(50), || {
        recs = decoded_claims(broker.bootstrap(), claims);
        recs.iter().any(|(_, r)| pred(r))
    });
    assert!(
        ok,
        "no {what} in the claims topic within {timeout:?}; it holds:\n{}",
        show_all(&recs)
    );
    recs
}

/// The pid in a ledger's "start:A:R:PID" line for attempt `attempt`.
pub fn started_pid(ledger: &Path, attempt: u32) -> Option<i32> {
    self::ledger(ledger).iter().find_map(|l| {
        l.strip_prefix(&format!("start:{attempt}:"))?
            .split(':')
            .nth(1)?
            .parse()
            .ok()
    })
}

/// A broker process with fresh orders (`partitions` partitions) and claims
/// topics.
pub fn broker(partitions: i32) -> BrokerProc {
    BrokerProc::start_with(BrokerOpts {
        orders_topic: unique_topic("orders"),
        orders_partitions: partitions,
        coordination_topic: unique_topic("claims"),
        ..BrokerOpts::default()
    })
}

/// A supervised pool of `instances` (e.g. "4" or "1-3") in worker mode
/// against `broker`, with `extra` environment.
pub fn pool(broker: &BrokerProc, instances: &str, extra: &[(&str, &str)]) -> SupervisorProc {
    pool_with(broker.env(), instances, extra)
}

/// [`pool`] with the environment `env` (any broker's, e.g. Apache Kafka's)
/// and `extra`.
pub fn pool_with(
    mut env: Vec<(String, String)>,
    instances: &str,
    extra: &[(&str, &str)],
) -> SupervisorProc {
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    SupervisorProc::start_with(SupervisorOpts {
        instances: instances.into(),
        env,
        restart_delay_ms: Some(20),
        // The tests' SIGKILLs are no crash loop: an instance killed again
        // and again (chaos) still comes back within a fifth of a second.
        max_restart_delay_ms: Some(200),
        ..SupervisorOpts::default()
    })
}
