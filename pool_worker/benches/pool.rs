//! Performance figures for the pool ("Performance", part 1).
//!
//! Run with
//!
//! ```text
//! cargo bench --bench pool
//! ```
//!
//! It builds the release binary (cargo builds `pool_worker` for a bench and
//! hands its path over as `CARGO_BIN_EXE_pool_worker`), starts the embedded
//! broker as a child process (`pool_worker broker`), and for each N in
//! {1, 4, 8}:
//!
//! * **pool**: `pool_worker supervise --instances 1-N --json --child-output
//!   null --restart-delay-ms 0` on a fresh orders/claims topic pair (orders
//!   topic with N partitions), a burst of M trivial orders (`true`), then L
//!   orders sent one at a time (each after the previous completed);
//! * **pool, ORDERS_PER_PROCESS=K**: the same with each process completing
//!   up to K orders before it exits (BENCH_OPP);
//! * **baseline**: N plain rdkafka consumer-group members (threads of this
//!   program, one shared `group.id`, `enable.auto.commit=false`, each message
//!   run with `std::process::Command` and its offset committed synchronously
//!   afterwards) on a fresh topic with the same payloads and partitions.
//!
//! Then the **idle pool** (issue 16): for each N in BENCH_IDLE_NS, N
//! instances idle on one orders partition, their CPU over a quiet interval
//! (from /proc/<pid>/stat), then orders sent one at a time, each after the
//! previous completed: claims records per order, instances that claimed it,
//! send → `completed` latency; once with the workers' defaults (as for a
//! real Kafka cluster) and once with the embedded broker's settings
//! (`pool_worker::kafka::broker::WORKER_ENV`, which every other case uses).
//!
//! Then boot time against the size of the claims history (K pre-filled
//! orders; the mock broker keeps 5 MB per partition, so the pre-fill is
//! compressed and the case reports how much of the history the broker kept
//! and the worker replayed, and the replay's in-process cost for every K). Everything prints to stdout and goes to bench/RESULTS.md. This
//! is a report: nothing here asserts on a timing. Every wait is bounded; a
//! case that does not finish in time is reported as incomplete.
//!
//! The broker: BENCH_BROKER=`embedded` (the default; `pool_worker broker`,
//! with the embedded broker's worker settings) or `apache` (Apache Kafka from
//! scripts/kafka.sh, one KRaft node on loopback; workers and baseline with
//! their defaults; sections of RESULTS.md headed "on Apache Kafka X.Y.Z").
//!
//! On Apache Kafka each N also runs the **share group** peer (KIP-932):
//! N members of one share group (`bench/ShareGroup.java`, run by `java` on
//! the broker's jars), each running the order and acknowledging it (ACCEPT)
//! afterwards, on a fresh topic like the baseline's (BENCH_SHARE=0 skips it;
//! acquisition as in the peers below, BENCH_SHARE_MAX_POLL).
//!
//! **The peers** (issue 27, section 1; the `matrix` section): on the same
//! broker and the same orders, three systems of N members each:
//!
//! * **pool**: `pool_worker supervise --instances 1-N` as the shipped
//!   configuration runs it (only the topics, `STATE_DIR` and, for the
//!   first start of each instance, before the clock, `SETTLE_MS=1000`);
//! * **share group** (Apache Kafka only): `bench/ShareGroup.java`, N
//!   `KafkaShareConsumer` threads of one JVM, each running the order and
//!   acknowledging it (explicit ACCEPT) after the job; by default with
//!   `share.acquire.mode=record_limit`, `max.poll.records=1`, so that one
//!   partition's records are spread over the members (BENCH_SHARE_MAX_POLL=K
//!   for K records at a time, 0 for Kafka's `batch_optimized` default;
//!   BENCH_SHARE_CONFIG=`k=v,k=v` for further consumer settings);
//! * **consumer group**: N rdkafka consumers (threads) of one `group.id` in
//!   a child process (this bench program run with `--consumer-group`), each
//!   running the order and committing its offset synchronously after the
//!   job.
//!
//! Cases: each job of BENCH_MATRIX_JOBS (default `true,sleep 0.1`) × an
//! orders topic of 1 partition and of N partitions (BENCH_MATRIX_LAYOUTS,
//! default `1,N`; at N = 1 the two are one case, measured once) × N in
//! BENCH_MATRIX_NS (default `1,4,8`); BENCH_MATRIX_SYSTEMS (default
//! `pool,share,group`; add `pool-long` for the pool with
//! `ORDERS_PER_PROCESS`=BENCH_LONG_ORDERS, default 100, an opt-in that is
//! not the workers' default). Each system gets a fresh orders topic, is started
//! and waited for (every instance booted; every member joined and assigned)
//! before the clock starts, then a burst of M orders: M from
//! BENCH_TRUE_ORDERS for `true` (per N, default `200`) and
//! BENCH_SLEEP_ORDERS for any other job (per N, default `40,100,160`; a
//! list's last value holds for the Ns after it). Figures per case and
//! system: orders/s (done ÷ first send → last done), send → done p50/p99,
//! CPU per order of everything the system runs (utime + stime + cutime +
//! cstime of its root process — the supervisor, the JVM, the consumer-group
//! process — and of every live process under it, from /proc, just before
//! the first send and at the last done: workers and jobs included, the
//! bench's own threads not), the broker process's CPU per order over the
//! same interval, and for the pool its claims records per order. A table
//! per job and layout, the three systems side by side, then issue 27's
//! target ratios (one orders partition, N = 8). A burst that is not done
//! within BENCH_MATRIX_CASE_SECS (default 300) is reported incomplete.
//! Before the first case, each system runs BENCH_MATRIX_WARM (default 2500
//! on Apache Kafka, 0 on the embedded broker) orders of `true` at the
//! largest N on topics of its own, not reported: the figures are of a
//! warm broker (steady state), not of its JIT compilers' first minutes
//! (with 300, the broker's compilers still took about half of its CPU per
//! order of the pool: bench/RESULTS.md, "the broker's CPU per order, by
//! thread, as the broker ages"). The
//! full matrix takes about 12–15 minutes on 2 cores, and a minute more for
//! the warm-up (estimated from smoke
//! runs at the pool's rates of 2026-11-26: 4.5–12 orders/s; the share
//! group's join, ~12–25 s per case, is a good part of it):
//!
//! ```text
//! BENCH_BROKER=apache BENCH_SECTIONS=matrix cargo bench --bench pool
//! ```
//!
//! On the embedded broker (`BENCH_SECTIONS=matrix cargo bench --bench
//! pool`) the matrix runs the pool and the consumer group: the mock broker
//! has no share groups. The sections are headed "Peers…" (and "— on Apache
//! Kafka X.Y.Z" there); a run with any matrix knob set labels them "partial
//! or smoke run". BENCH_SECTIONS (default `throughput,matrix,idle,history`) picks
//! the sections: `throughput` (pool, baseline and share group per N above),
//! `matrix` (the peers), `idle` (the idle pool), `history` (boot time
//! against history), and `account`, not in the default: where one order's
//! wall and CPU time go, phase by phase, in the pool's processes and in the
//! broker (issue 35; pool_worker/benches/pool/account.rs:
//! `BENCH_BROKER=apache BENCH_SECTIONS=account cargo bench --bench pool`),
//! and `floor`, not in the default either: each primitive one order needs
//! (a process start, clients created, a fence, a transaction) measured
//! alone on a warm broker, and their sum as a floor for the CPU per order
//! (issue 35; pool_worker/benches/pool/floor.rs: `BENCH_BROKER=apache
//! BENCH_SECTIONS=floor cargo bench --bench pool`).
//!
//! Knobs (environment): BENCH_NS (default `1,4,8`), BENCH_MS (orders per
//! burst for each N, default `60,150,250`, sized so that each burst fits
//! the case time limit at the pool's measured rate), BENCH_SEQ (orders sent
//! one at a time, default 10), BENCH_KS (history sizes, default
//! `1000,10000,35000,100000`, empty to skip), BENCH_K_RUNS (boots per K, default 3),
//! BENCH_OPP (ORDERS_PER_PROCESS of each pool row, default `1,100`; 1 is
//! the default pool, without the variable), BENCH_RESTART_DELAY_MS (the
//! supervisor's delay after a failure; default: not given, the supervisor's
//! own default, as the shipped compose file and systemd unit run it; clean
//! exits are restarted at once either way), BENCH_CASE_SECS (default 120),
//! BENCH_IDLE_NS (idle-pool sizes, default `1,4,8,16`, empty to skip),
//! BENCH_IDLE_SETTINGS (default `embedded,defaults`), BENCH_IDLE_SEQ (orders
//! one at a time per idle case, default 20 with the embedded broker's
//! settings, a quarter of it with the defaults, whose every step waits out
//! the mock broker's 500 ms fetch), BENCH_IDLE_SECS (the quiet interval of
//! the CPU figure, default 10),
//! BENCH_OUT (default bench/RESULTS.md; `-` for none), BENCH_TRACE (a
//! file: append each pool burst's claims records and process starts to it,
//! one line each, by time from the first send), BENCH_PERF (a
//! directory: run each history boot under `perf record --call-graph dwarf` into it),
//! BENCH_CHECKPOINTS (0: a history pre-fill without checkpoints, so that
//! boot replays all of it; default 1, checkpoints as the pool leaves them),
//! BENCH_PREFILL_COMPRESSION (compression of the history pre-fill, default
//! `lz4`: the mock broker keeps only 5 MB per partition, see history_case).

#[path = "pool/account.rs"]
mod account; // the `account` section: where one order's milliseconds go
#[path = "pool/floor.rs"]
mod floor; // the `floor` section: one order's primitives, each alone

use pool_worker::account::{cpu_ticks, tree_ticks};
use pool_worker::record::{Event, OrderId, Outcome, Position, Record, Status};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BUILT_BIN: &str = env!("CARGO_BIN_EXE_pool_worker");

/// The `pool_worker` binary the bench runs: this build's, or
/// `POOL_WORKER_BIN` (another build, to compare two with one bench
/// executable).
fn bin() -> String {
    std::env::var("POOL_WORKER_BIN").unwrap_or_else(|_| BUILT_BIN.to_string())
}
const PAYLOAD: &str = "true";

/// The pool's `fetch.wait.max.ms` against the embedded broker.
const EMBEDDED_FETCH_WAIT_MS: &str = "2";

/// The workers' environment for the embedded broker's settings.
fn embedded_env() -> Vec<(&'static str, String)> {
    let env: Vec<(&'static str, String)> = pool_worker::kafka::broker::WORKER_ENV
        .iter()
        .map(|(k, v)| (*k, v.to_string()))
        .collect();
    assert!(
        env.contains(&(
            "KAFKA_FETCH_WAIT_MAX_MS",
            EMBEDDED_FETCH_WAIT_MS.to_string()
        )),
        "the baseline's fetch wait must be the pool's: {env:?}"
    );
    env
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_micros() as f64 / 1000.0)
}

/// The pool with `ORDERS_PER_PROCESS` above 1 (BENCH_LONG_ORDERS, default
/// 100): a worker process does that many orders before it exits. Opt-in
/// (`pool-long` in BENCH_MATRIX_SYSTEMS), not the workers' default, which
/// is seed 002's one order per process; it shows what exiting costs.
const POOL_LONG: &str = "pool, ORDERS_PER_PROCESS";

fn long_orders() -> u32 {
    env_or("BENCH_LONG_ORDERS", "100").parse().unwrap_or(100)
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    env_or(name, default)
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn progress(msg: impl AsRef<str>) {
    println!("# {}", msg.as_ref());
    let _ = std::io::stdout().flush();
}

/// Nearest-rank percentile of unsorted data (None when empty).
fn pct(data: &[f64], p: f64) -> Option<f64> {
    if data.is_empty() {
        return None;
    }
    let mut v = data.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

fn fmt_ms(v: Option<f64>) -> String {
    match v {
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
        None => "-".into(),
    }
}

// ---------------------------------------------------------------- broker

/// The broker the bench runs on (BENCH_BROKER): `embedded`, the default,
/// is `pool_worker broker` as a child (topics created over its stdin);
/// `apache` is Apache Kafka started by scripts/kafka.sh (one node, KRaft, on
/// loopback), where the workers run with their defaults.
struct BrokerProc {
    bootstrap: String,
    kind: BrokerKind,
}

enum BrokerKind {
    Embedded {
        child: Child,
        stdin: ChildStdin,
        stdout: BufReader<std::process::ChildStdout>,
    },
    Apache {
        dir: String,
        pid: u32,
        version: String,
        /// The broker's jars (scripts/kafka.sh's cache), for the share
        /// group's Java program.
        lib: String,
    },
}

fn apache_wanted() -> bool {
    env_or("BENCH_BROKER", "embedded") == "apache"
}

impl BrokerProc {
    fn start(run: &str) -> BrokerProc {
        if apache_wanted() {
            return BrokerProc::start_apache();
        }
        let mut child = Command::new(bin())
            .args(["broker", "--orders-partitions", "1"])
            .args(["--orders-topic", &format!("{run}-init-orders")])
            .args(["--coordination-topic", &format!("{run}-init-claims")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot start `pool_worker broker`");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("broker output");
        let bootstrap = line
            .trim()
            .strip_prefix("bootstrap ")
            .expect("bootstrap line")
            .to_string();
        BrokerProc {
            bootstrap,
            kind: BrokerKind::Embedded {
                child,
                stdin,
                stdout,
            },
        }
    }

    /// Apache Kafka from scripts/kafka.sh, stopped by `quit` (or by the
    /// script's watcher when the bench process is gone).
    fn start_apache() -> BrokerProc {
        let out = Command::new(concat!(
            concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
            "/scripts/kafka.sh"
        ))
        .args(["start", "--port", "auto", "--heap", "1g"])
        .args(["--watch", &std::process::id().to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("cannot run scripts/kafka.sh");
        assert!(out.status.success(), "scripts/kafka.sh start failed");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")).map(str::to_string))
                .unwrap_or_else(|| panic!("scripts/kafka.sh printed no {k}="))
        };
        let pid = get("node.1")
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("node pid");
        BrokerProc {
            bootstrap: get("bootstrap"),
            kind: BrokerKind::Apache {
                dir: get("dir"),
                pid,
                version: get("version"),
                lib: get("tools").trim_end_matches("/bin").to_string() + "/lib",
            },
        }
    }

    /// "embedded broker" or "Apache Kafka X.Y.Z".
    fn name(&self) -> String {
        match &self.kind {
            BrokerKind::Embedded { .. } => "embedded broker".into(),
            BrokerKind::Apache { version, .. } => format!("Apache Kafka {version}"),
        }
    }

    fn is_apache(&self) -> bool {
        matches!(self.kind, BrokerKind::Apache { .. })
    }

    fn pid(&self) -> u32 {
        match &self.kind {
            BrokerKind::Embedded { child, .. } => child.id(),
            BrokerKind::Apache { pid, .. } => *pid,
        }
    }

    /// Creates `topic`; on Apache Kafka a claims topic (every bench claims
    /// topic's name ends in `-claims`) gets scripts/create-topics.sh's
    /// settings.
    fn create(&mut self, topic: &str, partitions: i32) -> Result<(), String> {
        match &mut self.kind {
            BrokerKind::Embedded { stdin, stdout, .. } => {
                let gone = |e: std::io::Error| format!("the broker is gone ({e})");
                writeln!(stdin, "create {topic} {partitions}").map_err(gone)?;
                stdin.flush().map_err(gone)?;
                let mut line = String::new();
                stdout.read_line(&mut line).map_err(gone)?;
                if !line.starts_with("ok create") {
                    return Err(format!("broker: '{}'", line.trim()));
                }
                Ok(())
            }
            BrokerKind::Apache { .. } => {
                use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
                let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
                    .set("bootstrap.servers", &self.bootstrap)
                    .create()
                    .map_err(|e| e.to_string())?;
                let mut t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
                if topic.ends_with("-claims") {
                    for (k, v) in [
                        ("cleanup.policy", "compact"),
                        ("min.compaction.lag.ms", "604800000"),
                        ("max.compaction.lag.ms", "691200000"),
                        ("segment.ms", "3600000"),
                        ("min.cleanable.dirty.ratio", "0.1"),
                    ] {
                        t = t.set(k, v);
                    }
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                let res = rt
                    .block_on(admin.create_topics(
                        [&t],
                        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
                    ))
                    .map_err(|e| e.to_string())?;
                for r in res {
                    r.map_err(|(t, e)| format!("cannot create {t}: {e}"))?;
                }
                Ok(())
            }
        }
    }

    /// The broker's exit status, if it has ended.
    fn ended(&mut self) -> Option<String> {
        match &mut self.kind {
            BrokerKind::Embedded { child, .. } => {
                child.try_wait().ok().flatten().map(|s| s.to_string())
            }
            BrokerKind::Apache { pid, .. } => (!std::path::Path::new(&format!("/proc/{pid}"))
                .exists())
            .then(|| "Apache Kafka's process is gone".to_string()),
        }
    }

    fn quit(self) {
        match self.kind {
            BrokerKind::Embedded {
                mut child,
                mut stdin,
                ..
            } => {
                let _ = writeln!(stdin, "quit");
                let _ = stdin.flush();
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
            BrokerKind::Apache { dir, .. } => {
                let _ = Command::new(concat!(
                    concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
                    "/scripts/kafka.sh"
                ))
                .args(["stop", "--dir", &dir])
                .status();
            }
        }
    }
}

// ---------------------------------------------------------------- producing

/// Delivery reports: index of the send -> (partition, offset).
#[derive(Default)]
struct Acks {
    acks: Mutex<HashMap<usize, (i32, i64)>>,
    failed: AtomicUsize,
}

struct AckCtx(Arc<Acks>);

impl ClientContext for AckCtx {}

impl ProducerContext for AckCtx {
    type DeliveryOpaque = usize;
    fn delivery(&self, r: &DeliveryResult<'_>, idx: usize) {
        match r {
            Ok(m) => {
                self.0
                    .acks
                    .lock()
                    .unwrap()
                    .insert(idx, (m.partition(), m.offset()));
            }
            Err(_) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A producer of orders that remembers when each was sent.
struct Sender {
    producer: ThreadedProducer<AckCtx>,
    acks: Arc<Acks>,
    sent: Vec<f64>,
    /// Every order's text (PAYLOAD unless `with_payload`).
    payload: String,
}

impl Sender {
    fn new(bootstrap: &str) -> Sender {
        let acks = Arc::new(Acks::default());
        let producer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("linger.ms", "0")
            .set("acks", "all")
            .create_with_context(AckCtx(acks.clone()))
            .expect("producer");
        Sender {
            producer,
            acks,
            sent: Vec::new(),
            payload: PAYLOAD.to_string(),
        }
    }

    fn with_payload(mut self, payload: &str) -> Sender {
        self.payload = payload.to_string();
        self
    }

    /// Sends one order; returns its index.
    fn send(&mut self, topic: &str, partition: i32) -> usize {
        let idx = self.sent.len();
        self.sent.push(now_ms());
        let mut rec: BaseRecord<'_, (), str, usize> = BaseRecord::with_opaque_to(topic, idx)
            .payload(self.payload.as_str())
            .partition(partition);
        loop {
            match self.producer.send(rec) {
                Ok(()) => return idx,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
    }

    /// (partition, offset) -> send time of the given sends, once acknowledged.
    fn positions(&self, idxs: &[usize]) -> HashMap<(i32, i64), f64> {
        let _ = self.producer.flush(Duration::from_secs(30));
        let acks = self.acks.acks.lock().unwrap();
        idxs.iter()
            .filter_map(|i| acks.get(i).map(|&po| (po, self.sent[*i])))
            .collect()
    }
}

// ---------------------------------------------------------------- claims reader

struct Seen {
    /// Arrival (bench wall clock, ms), log position, record.
    recs: Vec<(f64, i64, Record)>,
}

/// Reads a claims topic on a thread into a shared list.
struct Reader {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    fn start(bootstrap: &str, topic: &str, from: Offset) -> Reader {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", format!("{topic}-bench-reader"))
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "5")
            .create()
            .expect("reader");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, from).unwrap();
        consumer.assign(&tpl).expect("assign");
        let seen = Arc::new(Mutex::new(Seen { recs: Vec::new() }));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st2.load(Ordering::Relaxed) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(20)) {
                    if let Ok(r) = Record::decode(m.key(), m.payload()) {
                        s2.lock().unwrap().recs.push((now_ms(), m.offset(), r));
                    }
                }
            }
        });
        Reader {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn snapshot(&self) -> Vec<(f64, i64, Record)> {
        self.seen.lock().unwrap().recs.clone()
    }

    /// Completed orders so far: order -> the record's ts (worker clock).
    fn completions(&self) -> HashMap<(i32, i64), f64> {
        let seen = self.seen.lock().unwrap();
        seen.recs
            .iter()
            .filter(|(_, _, r)| r.event() == Event::Completed && r.by().is_none())
            .filter_map(|(_, _, r)| r.order().map(|o| ((o.partition, o.offset), r.ts as f64)))
            .collect()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------- RSS sampling

/// Samples VmHWM of live pids every few milliseconds.
struct Sampler {
    live: Arc<Mutex<HashSet<u32>>>,
    hwm: Arc<Mutex<HashMap<u32, u64>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Sampler {
    fn start() -> Sampler {
        let live = Arc::new(Mutex::new(HashSet::new()));
        let hwm = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l2, h2, s2) = (live.clone(), hwm.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                let pids: Vec<u32> = l2.lock().unwrap().iter().copied().collect();
                for pid in pids {
                    match vm_hwm_kb(pid) {
                        Some(kb) => {
                            let mut h = h2.lock().unwrap();
                            let e = h.entry(pid).or_insert(0);
                            *e = (*e).max(kb);
                        }
                        None => {
                            l2.lock().unwrap().remove(&pid);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Sampler {
            live,
            hwm,
            stop,
            thread: Some(thread),
        }
    }

    /// One that reads nothing: for the sections that report no memory.
    /// Its reads (/proc/PID/status of every pool process every 5 ms) took
    /// the pool's cores and made each process's reaping dearer (the
    /// dentries of its /proc entries dropped: `d_walk`), which the peers,
    /// one process each, were spared.
    fn none() -> Sampler {
        Sampler {
            live: Arc::default(),
            hwm: Arc::default(),
            stop: Arc::default(),
            thread: None,
        }
    }

    fn peaks_kb(&self) -> Vec<f64> {
        self.hwm
            .lock()
            .unwrap()
            .values()
            .map(|&k| k as f64)
            .collect()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------- supervisor

#[derive(Clone, Debug)]
struct Started {
    at: f64,
    pid: u32,
    instance: u32,
}

/// A worker process's exit, as the supervisor reported it (`exited`).
struct Exited {
    /// When the bench read the event (its wall clock, ms).
    at: f64,
    instance: u32,
    /// How long the process ran (`after_ms`: from its start, or its
    /// promotion from standby, to its exit).
    ran_ms: f64,
}

struct Supervisor {
    child: Child,
    started: Arc<Mutex<Vec<Started>>>,
    exited: Arc<Mutex<Vec<Exited>>>,
    reader: Option<JoinHandle<()>>,
}

impl Supervisor {
    fn start(
        n: usize,
        env: &[(&str, String)],
        restart_delay_ms: Option<u64>,
        sampler: &Sampler,
    ) -> Supervisor {
        let mut cmd = Command::new(bin());
        cmd.args([
            "supervise",
            "--instances",
            &format!("1-{n}"),
            "--json",
            "--child-output",
            "null",
        ])
        .args(["--stop-grace-ms", "2000"]);
        if let Some(ms) = restart_delay_ms {
            cmd.args(["--restart-delay-ms", &ms.to_string()]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // Only what the case gives: the defaults mean the defaults.
        cmd.env_remove("KAFKA_FETCH_WAIT_MAX_MS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("cannot start `pool_worker supervise`");
        let out = BufReader::new(child.stdout.take().unwrap());
        let started = Arc::new(Mutex::new(Vec::new()));
        let exited = Arc::new(Mutex::new(Vec::new()));
        let (st2, ex2, live) = (started.clone(), exited.clone(), sampler.live.clone());
        let reader = std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                let at = now_ms();
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if v["event"].as_str() == Some("started") {
                    let pid = v["pid"].as_u64().unwrap_or(0) as u32;
                    let instance = v["instance"].as_u64().unwrap_or(0) as u32;
                    live.lock().unwrap().insert(pid);
                    st2.lock().unwrap().push(Started { at, pid, instance });
                }
                if v["event"].as_str() == Some("exited") {
                    let instance = v["instance"].as_u64().unwrap_or(0) as u32;
                    let ran_ms = v["after_ms"].as_f64().unwrap_or(0.0);
                    ex2.lock().unwrap().push(Exited {
                        at,
                        instance,
                        ran_ms,
                    });
                }
            }
        });
        Supervisor {
            child,
            started,
            exited,
            reader: Some(reader),
        }
    }

    fn stop(mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// The pid an incarnation id starts with (`{pid:x}-{hash}`, see run.rs).

// ---------------------------------------------------------------- results

#[derive(Default, Clone)]
struct CaseResult {
    what: String,
    n: usize,
    m: usize,
    done: usize,
    secs: f64,
    incomplete: Option<String>,
    /// Burst latencies (send -> completion), ms.
    burst_lat: Vec<f64>,
    /// Latencies of orders sent one at a time, ms.
    seq_lat: Vec<f64>,
    seq_sent: usize,
    /// Pool only.
    boot_ready: Vec<f64>,
    boot_connect: Vec<f64>,
    processes: usize,
    rss_kb: Vec<f64>,
    records_per_order: f64,
    yields: usize,
    rebalance_ms: Option<f64>,
    /// Pool only: ORDERS_PER_PROCESS.
    opp: u32,
}

impl CaseResult {
    fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.done as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// Waits until `done()` reaches `want` or `deadline`; prints progress.
fn wait_for(label: &str, want: usize, deadline: Instant, mut done: impl FnMut() -> usize) -> usize {
    let mut last_print = Instant::now();
    loop {
        let d = done();
        if d >= want || Instant::now() > deadline {
            return d;
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            progress(format!("{label}: {d}/{want}"));
            last_print = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Bench {
    broker: BrokerProc,
    run: String,
    restart_delay_ms: Option<u64>,
    case_secs: u64,
    seq: usize,
    /// BENCH_PERF: profile each history run's worker into this directory.
    perf_dir: Option<String>,
    /// BENCH_PREFILL_COMPRESSION: the history pre-fill's compression.type.
    prefill_compression: String,
    /// The history pre-fill carries checkpoints, as the pool leaves them
    /// (BENCH_CHECKPOINTS, default 1).
    checkpoints: bool,
}

impl Bench {
    /// `opp`: ORDERS_PER_PROCESS for the workers (None: the default, 1).
    fn pool_case(&mut self, n: usize, m: usize, opp: Option<u32>) -> CaseResult {
        let tag = opp.map(|k| format!("-opp{k}")).unwrap_or_default();
        let orders = format!("{}-n{n}{tag}-orders", self.run);
        let claims = format!("{}-n{n}{tag}-claims", self.run);
        let what = match opp {
            Some(k) => format!("pool, ORDERS_PER_PROCESS={k}"),
            None => "pool".into(),
        };
        let mut res = CaseResult {
            what,
            n,
            m,
            opp: opp.unwrap_or(1),
            ..Default::default()
        };
        if let Err(e) = self
            .broker
            .create(&orders, n as i32)
            .and_then(|()| self.broker.create(&claims, 1))
        {
            res.incomplete = Some(e);
            return res;
        }
        let reader = Reader::start(&self.broker.bootstrap, &claims, Offset::Beginning);
        let sampler = Sampler::none();
        let state_dir = std::env::temp_dir().join(format!("pool_worker-bench-{claims}"));
        let mut env = vec![
            ("KAFKA_BROKERS", self.broker.bootstrap.clone()),
            ("ORDERS_TOPIC", orders.clone()),
            ("COORDINATION_TOPIC", claims.clone()),
            // Settling as deployed (docs/protocol.md R16–R18): each
            // start after a clean exit takes the marker its predecessor
            // left and boots once the log confirms it. Only the first start
            // of each instance has none and waits, 1 s here (a loopback
            // broker) instead of 15, before the bench begins.
            ("SETTLE_MS", "1000".to_string()),
            ("STATE_DIR", state_dir.display().to_string()),
        ];
        if let Some(k) = opp {
            env.push(("ORDERS_PER_PROCESS", k.to_string()));
        }
        if !self.broker.is_apache() {
            env.extend(embedded_env());
        }
        let sup = Supervisor::start(n, &env, self.restart_delay_ms, &sampler);
        // Ready: every instance has booted (and, a moment later, is idle).
        let booted = |r: &Reader| {
            let s = r.seen.lock().unwrap();
            s.recs
                .iter()
                .filter(|(_, _, r)| r.event() == Event::Booted)
                .map(|(_, _, r)| r.instance)
                .collect::<HashSet<_>>()
                .len()
        };
        let b = wait_for(
            &format!("pool N={n} booting"),
            n,
            Instant::now() + Duration::from_secs(60),
            || booted(&reader),
        );
        if b < n {
            res.incomplete = Some(format!("only {b}/{n} instances booted in 60 s"));
            sup.stop();
            let _ = std::fs::remove_dir_all(&state_dir);
            return res;
        }
        std::thread::sleep(Duration::from_millis(1000));

        progress(format!("pool N={n}: sending {m} orders"));
        let mut sender = Sender::new(&self.broker.bootstrap);
        let t0 = now_ms();
        let idxs: Vec<usize> = (0..m)
            .map(|i| sender.send(&orders, (i % n) as i32))
            .collect();
        let sent = sender.positions(&idxs);
        let deadline = Instant::now() + Duration::from_secs(self.case_secs);
        let done = wait_for(&format!("pool N={n} completed"), m, deadline, || {
            let c = reader.completions();
            sent.keys().filter(|k| c.contains_key(k)).count()
        });
        let comp = reader.completions();
        let ends: Vec<f64> = sent.keys().filter_map(|k| comp.get(k)).copied().collect();
        res.done = done;
        let last = ends.iter().cloned().fold(t0, f64::max);
        res.secs = (last - t0) / 1000.0;
        res.burst_lat = sent
            .iter()
            .filter_map(|(k, s)| comp.get(k).map(|c| c - s))
            .collect();
        if done < m {
            res.incomplete = Some(format!("{done}/{m} completed in {} s", self.case_secs));
        }
        let burst_end = last;

        // Orders one at a time.
        if res.incomplete.is_none() {
            progress(format!("pool N={n}: {} orders one at a time", self.seq));
            for j in 0..self.seq {
                let idx = sender.send(&orders, (j % n) as i32);
                let pos = sender.positions(&[idx]);
                let Some((&key, &s)) = pos.iter().next() else {
                    break;
                };
                let dl = Instant::now() + Duration::from_secs(20);
                let got = wait_for("pool one order", 1, dl, || {
                    reader.completions().contains_key(&key) as usize
                });
                res.seq_sent += 1;
                if got == 0 {
                    res.incomplete = Some(format!(
                        "order {j} of the one-at-a-time phase did not complete in 20 s"
                    ));
                    break;
                }
                res.seq_lat.push(reader.completions()[&key] - s);
            }
        }
        let started = sup.started.lock().unwrap().clone();
        sup.stop();
        let _ = std::fs::remove_dir_all(&state_dir);

        // The claims log of the burst.
        let recs = reader.snapshot();
        if let Ok(path) = std::env::var("BENCH_TRACE") {
            trace_burst(&path, &res.what, n, t0, burst_end, &recs, &started);
        }
        let burst_orders: HashSet<(i32, i64)> = sent.keys().copied().collect();
        let mut per_order: HashMap<(i32, i64), usize> = HashMap::new();
        for (_, _, r) in &recs {
            if let Some(o) = r.order() {
                if burst_orders.contains(&(o.partition, o.offset)) {
                    *per_order.entry((o.partition, o.offset)).or_default() += 1;
                    if r.event() == Event::Yielded {
                        res.yields += 1;
                    }
                }
            }
        }
        res.records_per_order =
            per_order.values().sum::<usize>() as f64 / per_order.len().max(1) as f64;
        // Boot: per incarnation started during the burst, supervisor's
        // `started` -> its `booted` ts (connect) and -> its first `claimed` ts
        // (ready to claim: the replay has caught up and it picked an order).
        // The incarnation id is random (it names no PID): a process is
        // matched to the first `booted` of its instance number written
        // after it started, and to that incarnation's first claim.
        let mut boots: HashMap<u32, Vec<(f64, String)>> = HashMap::new();
        let mut claimed_ts: HashMap<String, f64> = HashMap::new();
        for (_, _, r) in &recs {
            if r.by().is_some() {
                continue;
            }
            match r.event() {
                Event::Booted => boots
                    .entry(r.instance.get())
                    .or_default()
                    .push((r.ts as f64, r.incarnation.to_string())),
                Event::Claimed => {
                    claimed_ts
                        .entry(r.incarnation.to_string())
                        .or_insert(r.ts as f64);
                }
                _ => {}
            }
        }
        for s in started.iter().filter(|s| s.at >= t0 && s.at < burst_end) {
            res.processes += 1;
            // Same machine, same clock; a millisecond of rounding.
            let boot = boots
                .get(&s.instance)
                .and_then(|b| b.iter().find(|(ts, _)| *ts + 1.0 >= s.at));
            if let Some((b, inc)) = boot {
                res.boot_connect.push(b - s.at);
                if let Some(c) = claimed_ts.get(inc) {
                    if *c <= burst_end {
                        res.boot_ready.push(c - s.at);
                    }
                }
            }
        }
        res.rss_kb = sampler.peaks_kb();
        res
    }

    fn baseline_case(&mut self, n: usize, m: usize) -> CaseResult {
        let topic = format!("{}-n{n}-baseline", self.run);
        let mut res = CaseResult {
            what: "baseline".into(),
            n,
            m,
            ..Default::default()
        };
        if let Err(e) = self.broker.create(&topic, n as i32) {
            res.incomplete = Some(e);
            return res;
        }
        let group = format!("{}-n{n}-group", self.run);
        let stop = Arc::new(AtomicBool::new(false));
        let assigned: Arc<Vec<AtomicUsize>> =
            Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
        let done: Arc<Mutex<HashMap<(i32, i64), f64>>> = Arc::new(Mutex::new(HashMap::new()));
        let t_join = Instant::now();
        let threads: Vec<JoinHandle<()>> = (0..n)
            .map(|i| {
                let mut config = ClientConfig::new();
                config
                    .set("bootstrap.servers", &self.broker.bootstrap)
                    .set("group.id", &group)
                    .set("enable.auto.commit", "false")
                    .set("auto.offset.reset", "earliest");
                if !self.broker.is_apache() {
                    // Same long-poll bound as the pool's consumers against
                    // this broker (pool_worker/src/kafka/broker.rs, WORKER_ENV); Apache Kafka
                    // answers a fetch when data arrives, with the defaults.
                    config.set("fetch.wait.max.ms", EMBEDDED_FETCH_WAIT_MS);
                }
                let consumer: BaseConsumer = config.create().expect("consumer");
                consumer.subscribe(&[&topic]).expect("subscribe");
                let (stop, assigned, done) = (stop.clone(), assigned.clone(), done.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let msg = consumer.poll(Duration::from_millis(50));
                        if let Ok(a) = consumer.assignment() {
                            assigned[i].store(a.count(), Ordering::Relaxed);
                        }
                        let Some(Ok(m)) = msg else { continue };
                        run_and_commit(&consumer, &m, "baseline");
                        done.lock()
                            .unwrap()
                            .insert((m.partition(), m.offset()), now_ms());
                    }
                })
            })
            .collect();
        let ok = wait_for(
            &format!("baseline N={n} joining the group"),
            n,
            Instant::now() + Duration::from_secs(60),
            || {
                let counts: Vec<usize> =
                    assigned.iter().map(|a| a.load(Ordering::Relaxed)).collect();
                if counts.iter().all(|&c| c >= 1) && counts.iter().sum::<usize>() == n {
                    n
                } else {
                    0
                }
            },
        );
        res.rebalance_ms = Some(t_join.elapsed().as_secs_f64() * 1000.0);
        if ok < n {
            res.incomplete =
                Some("the group did not assign every member a partition in 60 s".into());
        } else {
            std::thread::sleep(Duration::from_millis(500));
            progress(format!(
                "baseline N={n}: sending {m} orders (group assigned after {:.0} ms)",
                res.rebalance_ms.unwrap()
            ));
            self.measure("baseline", &topic, n, m, &done, &mut res);
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        res
    }

    /// Sends a burst of `m` orders to `topic` (round robin over its `n`
    /// partitions), waits until `done` (order → completion time, filled by
    /// the system under test) has them all, then sends `self.seq` orders one
    /// at a time: the figures of `res`.
    fn measure(
        &mut self,
        label: &str,
        topic: &str,
        n: usize,
        m: usize,
        done: &Mutex<HashMap<(i32, i64), f64>>,
        res: &mut CaseResult,
    ) {
        let mut sender = Sender::new(&self.broker.bootstrap);
        let t0 = now_ms();
        let idxs: Vec<usize> = (0..m).map(|i| sender.send(topic, (i % n) as i32)).collect();
        let sent = sender.positions(&idxs);
        let deadline = Instant::now() + Duration::from_secs(self.case_secs);
        let got = wait_for(&format!("{label} N={n} completed"), m, deadline, || {
            let d = done.lock().unwrap();
            sent.keys().filter(|k| d.contains_key(k)).count()
        });
        let comp = done.lock().unwrap().clone();
        res.done = got;
        let last = sent
            .keys()
            .filter_map(|k| comp.get(k))
            .cloned()
            .fold(t0, f64::max);
        res.secs = (last - t0) / 1000.0;
        res.burst_lat = sent
            .iter()
            .filter_map(|(k, s)| comp.get(k).map(|c| c - s))
            .collect();
        if got < m {
            res.incomplete = Some(format!("{got}/{m} completed in {} s", self.case_secs));
            return;
        }
        progress(format!("{label} N={n}: {} orders one at a time", self.seq));
        for j in 0..self.seq {
            let idx = sender.send(topic, (j % n) as i32);
            let pos = sender.positions(&[idx]);
            let Some((&key, &s)) = pos.iter().next() else {
                break;
            };
            let dl = Instant::now() + Duration::from_secs(20);
            let got = wait_for(&format!("{label} one order"), 1, dl, || {
                done.lock().unwrap().contains_key(&key) as usize
            });
            res.seq_sent += 1;
            if got == 0 {
                res.incomplete = Some(format!(
                    "order {j} of the one-at-a-time phase did not complete in 20 s"
                ));
                break;
            }
            res.seq_lat.push(done.lock().unwrap()[&key] - s);
        }
    }

    /// The share-group peer (Apache Kafka only): N members of one share
    /// group (KIP-932), `bench/ShareGroup.java` run by `java` on the
    /// broker's own jars, each running every order's command and
    /// acknowledging it (ACCEPT) after it; same broker, a fresh topic with
    /// the same payloads and partitions as the baseline.
    fn share_case(&mut self, n: usize, m: usize) -> CaseResult {
        let topic = format!("{}-n{n}-share", self.run);
        let mut res = CaseResult {
            what: "share group".into(),
            n,
            m,
            ..Default::default()
        };
        let lib = match &self.broker.kind {
            BrokerKind::Apache { lib, .. } => lib.clone(),
            BrokerKind::Embedded { .. } => {
                res.incomplete =
                    Some("share groups need Apache Kafka (BENCH_BROKER=apache)".into());
                return res;
            }
        };
        if let Err(e) = self.broker.create(&topic, n as i32) {
            res.incomplete = Some(e);
            return res;
        }
        let t_join = Instant::now();
        let mut child = match Command::new("java")
            .arg("-cp")
            .arg(format!("{lib}/*"))
            .arg(concat!(
                "-Dlog4j2.configurationFile=",
                concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
                "/scripts/kafka/log4j2-tools.properties"
            ))
            .arg(concat!(
                concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
                "/bench/ShareGroup.java"
            ))
            .args([&self.broker.bootstrap, &topic, &format!("{topic}-group")])
            .args([
                n.to_string(),
                (m + self.seq).to_string(),
                (self.case_secs + 90).to_string(),
                env_or("BENCH_SHARE_MAX_POLL", "1"),
            ])
            .env("SHARE_CONSUMER_CONFIG", env_or("BENCH_SHARE_CONFIG", ""))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                res.incomplete = Some(format!("cannot run java: {e}"));
                return res;
            }
        };
        let done: Arc<Mutex<HashMap<(i32, i64), f64>>> = Arc::new(Mutex::new(HashMap::new()));
        let ready = Arc::new(AtomicBool::new(false));
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let (d2, r2) = (done.clone(), ready.clone());
        let reader = std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let w: Vec<&str> = line.split_whitespace().collect();
                match w.as_slice() {
                    ["ready"] => r2.store(true, Ordering::Relaxed),
                    ["done", p, o, at] => {
                        if let (Ok(p), Ok(o), Ok(at)) = (p.parse(), o.parse(), at.parse::<f64>()) {
                            d2.lock().unwrap().insert((p, o), at);
                        }
                    }
                    _ => {}
                }
            }
        });
        let joined = wait_for(
            &format!("share group N={n} joining"),
            1,
            Instant::now() + Duration::from_secs(90),
            || ready.load(Ordering::Relaxed) as usize,
        );
        res.rebalance_ms = Some(t_join.elapsed().as_secs_f64() * 1000.0);
        if joined == 0 {
            res.incomplete = Some("the share group's members did not poll within 90 s".into());
        } else {
            std::thread::sleep(Duration::from_millis(500));
            progress(format!(
                "share group N={n}: sending {m} orders (members polling after {:.0} ms, JVM start included)",
                res.rebalance_ms.unwrap()
            ));
            self.measure("share group", &topic, n, m, &done, &mut res);
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
        res
    }

    /// Boot time of one instance against K completed orders in the claims
    /// topic (each pre-filled as booted/claimed/committed/completed).
    fn history_case(&mut self, k: usize, runs: usize) -> HistResult {
        let orders = format!("{}-k{k}-orders", self.run);
        let claims = format!("{}-k{k}-claims", self.run);
        let mut res = HistResult {
            k,
            ..Default::default()
        };
        if let Err(e) = self
            .broker
            .create(&orders, 1)
            .and_then(|()| self.broker.create(&claims, 1))
        {
            res.incomplete = Some(e);
            return res;
        }
        progress(format!(
            "history K={k}: pre-filling {k} orders and {} claims records",
            HISTORY_RECORDS_PER_ORDER * k
        ));
        let t = Instant::now();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.broker.bootstrap)
            .set("linger.ms", "20")
            .set("batch.num.messages", "10000")
            .set("batch.size", "4000000")
            .set("message.max.bytes", "8000000")
            // The mock broker keeps at most 5 MB per partition and drops the
            // oldest batches beyond that (rdkafka_mock.c, max_size): without
            // compression it would silently keep only the last ~20,000
            // records, and boot would replay only those. The worker's
            // consumer decompresses; the bench checks the log start below.
            .set("compression.type", self.prefill_compression.as_str())
            .set("queue.buffering.max.messages", "1000000")
            .set("queue.buffering.max.kbytes", "1048576")
            .create()
            .expect("producer");
        let produce = |topic: &str, key: Option<&str>, value: &[u8]| {
            let mut rec: BaseRecord<'_, str, [u8]> =
                BaseRecord::to(topic).payload(value).partition(0);
            if let Some(k) = key {
                rec = rec.key(k);
            }
            loop {
                match producer.send(rec) {
                    Ok(()) => return,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        rec = r;
                        producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => panic!("produce: {e}"),
                }
            }
        };
        for i in 0..k {
            produce(&orders, None, PAYLOAD.as_bytes());
            if i % 10_000 == 0 {
                producer.poll(Duration::ZERO);
            }
        }
        let history = history_records(k, now_ms() as u64, self.checkpoints);
        let total = history.len();
        let bytes: usize = history.iter().map(|(k, v)| k.len() + v.len()).sum();
        for (i, (key, value)) in history.iter().enumerate() {
            produce(&claims, Some(key), value);
            if i % 40_000 == 0 {
                producer.poll(Duration::ZERO);
            }
        }
        if producer.flush(Duration::from_secs(120)).is_err() {
            res.incomplete = Some("pre-fill not flushed in 120 s".into());
            return res;
        }
        res.prefill_secs = t.elapsed().as_secs_f64();
        // The replay's own cost, without a broker: decode and fold the same
        // records in this process (best of 3).
        res.in_process_ms = (0..3)
            .map(|_| replay_in_process(&history))
            .fold(f64::MAX, f64::min);
        drop(history);
        res.record_bytes = bytes as f64 / total.max(1) as f64;
        let meta: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.broker.bootstrap)
            .set("group.id", format!("{claims}-meta"))
            .create()
            .expect("consumer");
        // Did the broker keep the whole history?
        let (low, high) = meta
            .fetch_watermarks(&claims, 0, Duration::from_secs(10))
            .expect("watermarks");
        res.log_start = low;
        progress(format!(
            "history K={k}: pre-filled in {:.1} s, {:.0} bytes per record (key + value), claims log {low}..{high}",
            res.prefill_secs, res.record_bytes
        ));
        if low > 0 || high != total as i64 {
            res.incomplete = Some(format!(
                "the broker kept only records {low}..{high} of {total}"
            ));
        }
        let mut sender = Sender::new(&self.broker.bootstrap);
        for run in 0..runs {
            let (_, high) = meta
                .fetch_watermarks(&claims, 0, Duration::from_secs(10))
                .expect("watermarks");
            let reader = Reader::start(&self.broker.bootstrap, &claims, Offset::Offset(high));
            let idx = sender.send(&orders, 0);
            let _ = sender.positions(&[idx]);
            let log_path = std::env::temp_dir().join(format!("{claims}-run{run}.log"));
            let log_file = std::fs::File::create(&log_path).expect("worker log file");
            // BENCH_PERF=DIR: run the worker under `perf record -g` (one
            // profile per run in DIR).
            let mut cmd = match &self.perf_dir {
                Some(dir) => {
                    let mut c = Command::new("perf");
                    c.args([
                        "record",
                        "--call-graph",
                        "dwarf,16384",
                        "-q",
                        "-o",
                        &format!("{dir}/boot-k{k}-run{run}.data"),
                        "--",
                        &bin(),
                    ]);
                    c
                }
                None => Command::new(bin()),
            };
            let start_ms = now_ms();
            let t = Instant::now();
            let mut child = cmd
                .env("LOG_FORMAT", "json")
                .env("RUST_LOG", "info")
                .env("KAFKA_BROKERS", &self.broker.bootstrap)
                .env("ORDERS_TOPIC", &orders)
                .env("COORDINATION_TOPIC", &claims)
                .env("INSTANCE_NUMBER", "1")
                // One process per run on a quiet log: boot as it was, so
                // that the figures show the replay alone.
                .env("SETTLE_MS", "0")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file)
                .spawn()
                .expect("worker");
            let pid = child.id();
            let mut peak = 0;
            let exited = loop {
                if let Some(kb) = vm_hwm_kb(pid) {
                    peak = peak.max(kb);
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break true;
                }
                if t.elapsed() > Duration::from_secs(self.case_secs) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break false;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let exit_ms = t.elapsed().as_secs_f64() * 1000.0;
            std::thread::sleep(Duration::from_millis(300));
            let recs = reader.snapshot();
            // The reader starts at the end of the history: instance 1's
            // records are this run's.
            let mine = |ev: Event| {
                recs.iter()
                    .find(|(_, _, r)| r.event() == ev && r.by().is_none() && r.instance.get() == 1)
                    .map(|(_, _, r)| r.ts as f64 - start_ms)
            };
            // The worker's own account of its replay (run.rs logs it once).
            let replayed = std::fs::read_to_string(&log_path).ok().and_then(|log| {
                log.lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .find(|v| v["fields"]["message"] == "replayed the claims topic")
                    .map(|v| v["fields"].clone())
            });
            let _ = std::fs::remove_file(&log_path);
            let field = |name: &str| replayed.as_ref().and_then(|v| v[name].as_u64());
            let replay = Replayed {
                records: field("records"),
                first: field("first"),
                foreign: field("foreign"),
                void: field("void"),
                completions: field("completions"),
                ms: field("ms"),
            };
            progress(format!(
                "history K={k} run {run}: worker replayed {replay:?}"
            ));
            // With checkpoints the worker replays only the tail after one.
            let short = !self.checkpoints
                && replay
                    .records
                    .is_some_and(|n| n < (HISTORY_RECORDS_PER_ORDER * k) as u64);
            if short || replay.foreign.is_some_and(|n| n > 0) || replay.void.is_some_and(|n| n > 0)
            {
                res.incomplete.get_or_insert(format!(
                    "run {run}: the worker replayed {replay:?}, not the {} records of the history",
                    HISTORY_RECORDS_PER_ORDER * k
                ));
            }
            if !exited {
                res.incomplete = Some(format!(
                    "run {run}: the worker did not finish in {} s",
                    self.case_secs
                ));
            }
            res.runs.push(HistRun {
                connect: mine(Event::Booted),
                ready: mine(Event::Claimed),
                done: mine(Event::Completed),
                exit_ms,
                rss_kb: peak,
                replay,
            });
            let _ = pid;
            progress(format!(
                "history K={k} run {run}: start->booted {} ms, start->claimed {} ms, exit after {:.0} ms, peak RSS {} kB",
                fmt_ms(mine(Event::Booted)),
                fmt_ms(mine(Event::Claimed)),
                exit_ms,
                peak
            ));
            if !exited {
                break;
            }
        }
        res
    }
}

/// The claims records of K completed orders, as the pool writes them: one
/// process per order, a fresh incarnation (pid-like, as run.rs makes them)
/// on one of 100 instance numbers, booted/claimed/committed/completed, every
/// record carrying the writer's frontier. (key, value) each.
/// K completed orders as the pool writes them; with `checkpoints`, also a
/// checkpoint every `DEFAULT_CHECKPOINT_EVERY` positions (written by
/// instance 999, its snapshot the View of the history before it), as the
/// pool's booting processes leave them.
/// BENCH_TRACE: appends to `path` one line per process start and per
/// claims record of a burst, by time from the first send (ms; a record at
/// its writer's `ts`, a start at the supervisor's report), so that a burst
/// can be read: who claims when, who defers to whom (`passed_over`), who
/// exits (`exits`), how long a restart takes.
fn trace_burst(
    path: &str,
    what: &str,
    n: usize,
    t0: f64,
    end: f64,
    recs: &[(f64, i64, Record)],
    started: &[Started],
) {
    let mut lines: Vec<(f64, String)> = started
        .iter()
        .filter(|s| s.at >= t0 && s.at <= end)
        .map(|s| (s.at - t0, format!("start    {}", s.instance)))
        .collect();
    for (_, pos, r) in recs {
        let t = r.ts as f64 - t0;
        if t < -1000.0 || r.ts as f64 > end {
            continue;
        }
        let mut l = format!(
            "#{pos:<5} {} {:<9} {}",
            r.writer(),
            format!("{:?}", r.event()).to_lowercase(),
            &r.incarnation.as_str()[..r.incarnation.as_str().len().min(6)]
        );
        if let Some(o) = r.order() {
            l.push_str(&format!(" {o}"));
        }
        if !r.passed_over().is_empty() {
            l.push_str(&format!(" passed_over={:?}", r.passed_over()));
        }
        if r.exits() {
            l.push_str(" exits");
        }
        lines.push((t, l));
    }
    lines.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    let mut out = format!(
        "=== {what}, N={n}, CLAIM_DEFER_MS={}\n",
        env_or("CLAIM_DEFER_MS", "(default)")
    );
    for (t, l) in lines {
        out.push_str(&format!("{t:>9.1} {l}\n"));
    }
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(out.as_bytes()));
}

/// Claims records per completed order in [`history_records`]: `booted`,
/// `claimed` (its own commit, R34), `completed`.
const HISTORY_RECORDS_PER_ORDER: usize = 3;

fn history_records(k: usize, ts: u64, checkpoints: bool) -> Vec<(String, Vec<u8>)> {
    use pool_worker::checkpoint::DEFAULT_CHECKPOINT_EVERY;
    let mut out = Vec::with_capacity(HISTORY_RECORDS_PER_ORDER * k);
    let mut view = pool_worker::boot::View::new();
    let mut cp_seq = 0;
    for i in 0..k {
        if checkpoints && out.len() as u64 >= view.checkpoint().get() + DEFAULT_CHECKPOINT_EVERY {
            cp_seq += 1;
            let mut r = Record::of(999, Event::Checkpoint, "bench-checkpoints", ts + i as u64);
            r.seq = cp_seq;
            r.set_snapshot(Some(Box::new(view.snapshot())));
            let _ = view.apply(Position::new(out.len() as u64), &r);
            out.push((r.key(), r.encode()));
        }
        let inst = 1000 + (i % 100) as u32;
        let inc = format!(
            "{:x}-{:08x}",
            100_000 + i,
            (i as u32).wrapping_mul(2_654_435_761)
        );
        let order = OrderId::new(0, i as i64);
        let ts = ts + i as u64;
        let mut b = Record::of(inst, Event::Booted, &inc, ts);
        b.seq = 1;
        b.next.insert(0.into(), i as i64);
        let mut c = Record::of(inst, Event::Claimed, &inc, ts).with_order(order);
        c.seq = 2;
        c.set_attempt(1);
        c.next.insert(0.into(), i as i64 + 1);
        // The claim met no rival: it is the commit (R34), no `committed`.
        let mut d = Record::of(inst, Event::Completed, &inc, ts).with_order(order);
        d.seq = 3;
        d.set_attempt(1);
        d.next = c.next.clone();
        d.set_outcome(Some(Outcome {
            status: Status::Ok,
            exit_code: Some(0),
            duration_ms: 1,
            reason: None,
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            traceparent: None,
            retry_of: None,
        }));
        for r in [b, c, d] {
            if checkpoints {
                let _ = view.apply(Position::new(out.len() as u64), &r);
            }
            out.push((r.key(), r.encode()));
        }
    }
    out
}

/// Decodes and folds `history` into a fresh View, as boot does; returns the
/// milliseconds it took. Panics if a record is foreign or void: the
/// history must be one the replay accepts.
fn replay_in_process(history: &[(String, Vec<u8>)]) -> f64 {
    let t = Instant::now();
    let mut view = pool_worker::boot::View::new();
    for (pos, (k, v)) in history.iter().enumerate() {
        let rec =
            Record::decode(Some(k.as_bytes()), Some(v)).expect("the pre-fill writes valid records");
        view.apply(Position::new(pos as u64), &rec)
            .expect("the pre-fill's records are all applied");
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let checkpoints = history
        .iter()
        .filter(|(k, _)| k.ends_with(":checkpoint"))
        .count();
    assert_eq!(
        view.completions as usize,
        (history.len() - checkpoints) / HISTORY_RECORDS_PER_ORDER
    );
    ms
}

#[derive(Default)]
struct HistRun {
    connect: Option<f64>,
    ready: Option<f64>,
    done: Option<f64>,
    exit_ms: f64,
    rss_kb: u64,
    replay: Replayed,
}

/// What the worker says it replayed at boot (its "replayed the claims
/// topic" log line).
#[derive(Default, Debug, Clone)]
#[allow(dead_code)]
struct Replayed {
    records: Option<u64>,
    first: Option<u64>,
    foreign: Option<u64>,
    void: Option<u64>,
    completions: Option<u64>,
    ms: Option<u64>,
}

#[derive(Default)]
struct HistResult {
    k: usize,
    prefill_secs: f64,
    record_bytes: f64,
    log_start: i64,
    in_process_ms: f64,
    runs: Vec<HistRun>,
    incomplete: Option<String>,
}

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The CPU each of `pids` used over `secs` of wall time, in % of a core
/// (processes that ended meanwhile are left out).
fn cpu_percent(pids: &[u32], secs: f64) -> Vec<Option<f64>> {
    let before: Vec<Option<u64>> = pids.iter().map(|&p| cpu_ticks(p)).collect();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let wall = t.elapsed().as_secs_f64();
    let hz = clock_ticks_per_sec();
    pids.iter()
        .zip(before)
        .map(|(&p, b)| Some((cpu_ticks(p)?.checked_sub(b?)? as f64 / hz) / wall * 100.0))
        .collect()
}

/// One idle-pool case.
#[derive(Default)]
struct IdleResult {
    n: usize,
    embedded: bool,
    /// % of a core, per idle instance, over the quiet interval.
    cpu: Vec<f64>,
    /// % of a core of the embedded broker process over the same interval.
    broker_cpu: Option<f64>,
    sent: usize,
    lat: Vec<f64>,
    /// Claims records naming each order.
    records: Vec<f64>,
    /// Instances that appended `claimed` for each order.
    rivals: Vec<f64>,
    incomplete: Option<String>,
}

impl IdleResult {
    fn settings(&self) -> String {
        if self.embedded {
            format!(
                "embedded broker's (`{}`)",
                pool_worker::kafka::broker::worker_env_line()
            )
        } else {
            format!(
                "defaults (`fetch.wait.max.ms` {}, one consumer for both topics)",
                pool_worker::kafka::client_config::CLAIMS_FETCH_WAIT_MS
            )
        }
    }
}

impl Bench {
    /// N idle instances on one orders partition: their CPU over a quiet
    /// interval, then `seq` orders one at a time, each sent once the
    /// previous one completed and the instance that ran it was started
    /// again and booted.
    fn idle_case(&mut self, n: usize, embedded: bool, seq: usize, quiet_secs: f64) -> IdleResult {
        let tag = if embedded { "emb" } else { "def" };
        let orders = format!("{}-idle{n}{tag}-orders", self.run);
        let claims = format!("{}-idle{n}{tag}-claims", self.run);
        let mut res = IdleResult {
            n,
            embedded,
            ..Default::default()
        };
        if let Err(e) = self
            .broker
            .create(&orders, 1)
            .and_then(|()| self.broker.create(&claims, 1))
        {
            res.incomplete = Some(e);
            return res;
        }
        let reader = Reader::start(&self.broker.bootstrap, &claims, Offset::Beginning);
        let sampler = Sampler::none();
        let state_dir = std::env::temp_dir().join(format!("pool_worker-bench-{claims}"));
        let mut env = vec![
            ("KAFKA_BROKERS", self.broker.bootstrap.clone()),
            ("ORDERS_TOPIC", orders.clone()),
            ("COORDINATION_TOPIC", claims.clone()),
            ("SETTLE_MS", "1000".to_string()),
            ("STATE_DIR", state_dir.display().to_string()),
        ];
        if embedded {
            env.extend(embedded_env());
        }
        let sup = Supervisor::start(n, &env, None, &sampler);
        let booted = |r: &Reader| {
            r.seen
                .lock()
                .unwrap()
                .recs
                .iter()
                .filter(|(_, _, r)| r.event() == Event::Booted)
                .count()
        };
        let label = format!("idle N={n} {tag}");
        let b = wait_for(
            &format!("{label} booting"),
            n,
            Instant::now() + Duration::from_secs(90),
            || booted(&reader),
        );
        // Booted, then caught up with the claims topic and idle: a few of
        // the broker's fetch waits (500 ms each with the defaults).
        let settle = if embedded { 1.0 } else { 3.0 };
        std::thread::sleep(Duration::from_secs_f64(settle));
        if b < n {
            res.incomplete = Some(format!("only {b}/{n} instances booted in 90 s"));
        } else {
            let pids: Vec<u32> = sup.started.lock().unwrap().iter().map(|s| s.pid).collect();
            progress(format!(
                "{label}: CPU of {} idle instances over {quiet_secs} s",
                pids.len()
            ));
            let mut all = pids.clone();
            all.push(self.broker.pid());
            let cpu = cpu_percent(&all, quiet_secs);
            res.broker_cpu = cpu.last().copied().flatten();
            res.cpu = cpu[..pids.len()].iter().flatten().copied().collect();
            progress(format!("{label}: {seq} orders one at a time"));
            let mut sender = Sender::new(&self.broker.bootstrap);
            let mut keys = Vec::new();
            for j in 0..seq {
                let idx = sender.send(&orders, 0);
                let pos = sender.positions(&[idx]);
                let Some((&key, &s)) = pos.iter().next() else {
                    break;
                };
                keys.push(key);
                res.sent += 1;
                let got = wait_for(&label, 1, Instant::now() + Duration::from_secs(30), || {
                    reader.completions().contains_key(&key) as usize
                });
                if got == 0 {
                    res.incomplete = Some(format!("order {j} did not complete in 30 s"));
                    break;
                }
                res.lat.push(reader.completions()[&key] - s);
                // The instance that ran it exits; the pool is idle again once
                // its successor has booted and caught up.
                let want = n + j + 1;
                if wait_for(
                    &label,
                    want,
                    Instant::now() + Duration::from_secs(30),
                    || booted(&reader),
                ) < want
                {
                    res.incomplete = Some(format!("no instance booted after order {j} in 30 s"));
                    break;
                }
                std::thread::sleep(Duration::from_secs_f64(settle / 2.0));
            }
            // Late records about the orders (a rival's `yielded`).
            std::thread::sleep(Duration::from_secs(1));
            let recs = reader.snapshot();
            for key in &keys {
                let about: Vec<&Record> = recs
                    .iter()
                    .map(|(_, _, r)| r)
                    .filter(|r| r.order().is_some_and(|o| (o.partition, o.offset) == *key))
                    .collect();
                res.records.push(about.len() as f64);
                let claimants: HashSet<u32> = about
                    .iter()
                    .filter(|r| r.event() == Event::Claimed)
                    .map(|r| r.instance.get())
                    .collect();
                res.rivals.push(claimants.len() as f64);
            }
        }
        sup.stop();
        let _ = std::fs::remove_dir_all(&state_dir);
        res
    }
}

// ---------------------------------------------------------------- peers (issue 27)

/// A peer run as a child process that prints `ready` once its members have
/// joined and `done PARTITION OFFSET EPOCH_MS` per order whose job ended
/// (bench/ShareGroup.java; this program with `--consumer-group`).
struct PeerProc {
    child: Child,
    done: Arc<Mutex<HashMap<(i32, i64), f64>>>,
    ready: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl PeerProc {
    fn spawn(cmd: &mut Command) -> std::io::Result<PeerProc> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let done: Arc<Mutex<HashMap<(i32, i64), f64>>> = Arc::default();
        let ready = Arc::new(AtomicBool::new(false));
        let (d2, r2) = (done.clone(), ready.clone());
        let reader = std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let w: Vec<&str> = line.split_whitespace().collect();
                match w.as_slice() {
                    ["ready"] => r2.store(true, Ordering::Relaxed),
                    ["done", p, o, at] => {
                        if let (Ok(p), Ok(o), Ok(at)) = (p.parse(), o.parse(), at.parse::<f64>()) {
                            d2.lock().unwrap().insert((p, o), at);
                        }
                    }
                    _ => {}
                }
            }
        });
        Ok(PeerProc {
            child,
            done,
            ready,
            reader: Some(reader),
        })
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// The consumer-group peer, a child process of the bench (so that its CPU
/// and its jobs' are its own): `--consumer-group BOOTSTRAP TOPIC GROUP
/// MEMBERS PARTITIONS FETCH_WAIT_MS|-`. MEMBERS rdkafka consumers (threads),
/// one `group.id`, `enable.auto.commit=false`; each message's command is
/// run to its end, then its offset is committed synchronously. Prints
/// `ready` once the group is stable with every member in it and every
/// partition assigned, then `done PARTITION OFFSET EPOCH_MS` per message;
/// exits when its stdin closes.
fn consumer_group_main(args: &[String]) {
    let [bootstrap, topic, group, members, partitions, fetch_wait] = args else {
        panic!("--consumer-group BOOTSTRAP TOPIC GROUP MEMBERS PARTITIONS FETCH_WAIT_MS|-");
    };
    let n: usize = members.parse().expect("MEMBERS");
    let parts: usize = partitions.parse().expect("PARTITIONS");
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let out = Arc::new(Mutex::new(()));
    let assigned: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
    let polled: Arc<AtomicUsize> = Arc::default();
    let config = |group: Option<&str>| {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", bootstrap);
        if let Some(g) = group {
            c.set("group.id", g)
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest");
        }
        if fetch_wait != "-" {
            c.set("fetch.wait.max.ms", fetch_wait);
        }
        c
    };
    let threads: Vec<JoinHandle<()>> = (0..n)
        .map(|i| {
            let consumer: BaseConsumer = config(Some(group)).create().expect("consumer");
            consumer.subscribe(&[topic]).expect("subscribe");
            let (out, assigned, polled) = (out.clone(), assigned.clone(), polled.clone());
            std::thread::spawn(move || {
                let mut first = true;
                loop {
                    let msg = consumer.poll(Duration::from_millis(50));
                    if first {
                        polled.fetch_add(1, Ordering::Relaxed);
                        first = false;
                    }
                    if let Ok(a) = consumer.assignment() {
                        assigned[i].store(a.count(), Ordering::Relaxed);
                    }
                    let Some(Ok(m)) = msg else { continue };
                    run_and_commit(&consumer, &m, "consumer group");
                    let _g = out.lock().unwrap();
                    println!("done {} {} {:.3}", m.partition(), m.offset(), now_ms());
                    let _ = std::io::stdout().flush();
                }
            })
        })
        .collect();
    // Ready: every member polled, every partition assigned (each member
    // one at least when there are as many), the group Stable with all N
    // members where the broker describes groups, and no change for 1 s.
    let admin: BaseConsumer = config(None).create().expect("admin client");
    let mut last: Option<(Vec<usize>, Instant)> = None;
    loop {
        let counts: Vec<usize> = assigned.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let spread = counts.iter().sum::<usize>() == parts
            && (parts < n || counts.iter().all(|&c| c >= 1))
            && polled.load(Ordering::Relaxed) == n;
        // A broker that does not describe the group (the embedded broker
        // may not) leaves the other conditions to decide.
        let stable = match admin.fetch_group_list(Some(group), Duration::from_secs(2)) {
            Ok(list) => list
                .groups()
                .iter()
                .filter(|g| g.name() == group.as_str() && !g.members().is_empty())
                .all(|g| g.state() == "Stable" && g.members().len() == n),
            Err(_) => true,
        };
        if spread && stable {
            match &last {
                Some((c, at)) if *c == counts && at.elapsed() >= Duration::from_secs(1) => break,
                Some((c, _)) if *c == counts => {}
                _ => last = Some((counts, Instant::now())),
            }
        } else {
            last = None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    {
        let _g = out.lock().unwrap();
        println!("ready");
        let _ = std::io::stdout().flush();
    }
    for t in threads {
        let _ = t.join();
    }
}

/// One system's figures for one case of the matrix.
#[derive(Default, Clone)]
struct MatrixResult {
    /// "pool", "share group", "consumer group".
    system: &'static str,
    job: String,
    /// "1" (one orders partition) or "N" (one per member).
    layout: &'static str,
    n: usize,
    m: usize,
    done: usize,
    secs: f64,
    /// send → done, ms.
    lat: Vec<f64>,
    /// CPU over the measured interval, ms: the system's processes and
    /// their jobs; the broker's.
    cpu_ms: Option<f64>,
    broker_cpu_ms: Option<f64>,
    /// Pool only: claims records naming an order (mean), and all claims
    /// records written in the interval per order.
    records_naming: Option<f64>,
    records_all: Option<f64>,
    /// Start → ready (booted / joined), ms.
    ready_ms: Option<f64>,
    /// Pool only: a worker process's exit (the supervisor's `exited`, as
    /// the bench read it) → the `booted` record of the instance's next
    /// process (its timestamp, the worker's clock; same machine), ms, for
    /// every exit while the burst ran: issue 27's "next process ready".
    exit_to_booted: Vec<f64>,
    incomplete: Option<String>,
    /// N = 1: the same case as the one-partition layout's.
    same_as_one: bool,
    /// A warm-up run (BENCH_MATRIX_WARM), not reported: topics of its own.
    warm: bool,
}

impl MatrixResult {
    /// ", exit → booted p50 … ms, p99 … ms (K exits)", for the pool.
    fn exit_to_booted_text(&self) -> String {
        if self.exit_to_booted.is_empty() {
            return String::new();
        }
        format!(
            ", exit → next booted p50 {} ms, p99 {} ms ({} exits)",
            fmt_ms(pct(&self.exit_to_booted, 50.0)),
            fmt_ms(pct(&self.exit_to_booted, 99.0)),
            self.exit_to_booted.len()
        )
    }

    fn rate(&self) -> Option<f64> {
        (self.secs > 0.0 && self.done > 0).then(|| self.done as f64 / self.secs)
    }
    fn cpu_per_order(&self) -> Option<f64> {
        self.cpu_ms
            .filter(|_| self.done > 0)
            .map(|c| c / self.done as f64)
    }
    fn broker_per_order(&self) -> Option<f64> {
        self.broker_cpu_ms
            .filter(|_| self.done > 0)
            .map(|c| c / self.done as f64)
    }
}

/// What `matrix_measure` saw: first send (ms), last done (ms), and the
/// orders sent with their send times.
struct Measured {
    t0: f64,
    last: f64,
    sent: HashMap<(i32, i64), f64>,
}

impl Bench {
    /// Sends `res.m` orders (`res.job`) round robin over the `partitions`
    /// of `topic` to a system that is up and idle, waits until `done` has
    /// them all (or the case time runs out); the CPU of `pid` and the
    /// processes under it, and of the broker, from just before the first
    /// send to when the last order was seen done.
    fn matrix_measure(
        &self,
        res: &mut MatrixResult,
        topic: &str,
        partitions: usize,
        pid: u32,
        done: &dyn Fn() -> HashMap<(i32, i64), f64>,
    ) -> Measured {
        let hz = clock_ticks_per_sec();
        let mut sender = Sender::new(&self.broker.bootstrap).with_payload(&res.job);
        let (cpu0, broker0) = (tree_ticks(pid), tree_ticks(self.broker.pid()));
        let t0 = now_ms();
        let idxs: Vec<usize> = (0..res.m)
            .map(|i| sender.send(topic, (i % partitions) as i32))
            .collect();
        let sent = sender.positions(&idxs);
        let secs = matrix_case_secs();
        let deadline = Instant::now() + Duration::from_secs(secs);
        let label = format!("{} N={} `{}`", res.system, res.n, res.job);
        let got = wait_for(&label, res.m, deadline, || {
            let d = done();
            sent.keys().filter(|k| d.contains_key(k)).count()
        });
        let (cpu1, broker1) = (tree_ticks(pid), tree_ticks(self.broker.pid()));
        let ms = |a: Option<u64>, b: Option<u64>| Some(b?.checked_sub(a?)? as f64 * 1000.0 / hz);
        res.cpu_ms = ms(cpu0, cpu1);
        res.broker_cpu_ms = ms(broker0, broker1);
        let comp = done();
        res.done = got;
        res.lat = sent
            .iter()
            .filter_map(|(k, s)| comp.get(k).map(|c| c - s))
            .collect();
        let last = sent
            .keys()
            .filter_map(|k| comp.get(k))
            .cloned()
            .fold(t0, f64::max);
        res.secs = (last - t0) / 1000.0;
        if got < res.m {
            res.incomplete = Some(format!("{got}/{} done in {secs} s", res.m));
        }
        Measured { t0, last, sent }
    }

    /// For each exit of a worker process between the first send and the last
    /// completion: the time from it to the `booted` record of the
    /// instance's next process, ms; 0 when that came first. The next process
    /// is let go when this one says `done`, after its `completed`, so its
    /// `booted` is the first of the instance stamped at or after the
    /// exiting process's last `completed` (after its start); for a process
    /// that completed nothing, the first at or after the exit (1 ms early
    /// allowed: a record's timestamp is whole milliseconds).
    fn exit_to_booted(exits: &[Exited], recs: &[(f64, i64, Record)], seen: &Measured) -> Vec<f64> {
        exits
            .iter()
            .filter(|e| e.at >= seen.t0 && e.at <= seen.last)
            .filter_map(|e| {
                let of = |ev: Event| {
                    recs.iter()
                        .filter(move |(_, _, r)| r.event() == ev && r.instance.get() == e.instance)
                        .map(|(_, _, r)| r.ts as f64)
                };
                let since = e.at - e.ran_ms;
                let from = of(Event::Completed)
                    .filter(|&ts| ts + 1.0 >= since && ts <= e.at + 1.0)
                    .max_by(f64::total_cmp)
                    .unwrap_or(e.at - 1.0);
                of(Event::Booted)
                    .filter(|&ts| ts >= from)
                    .min_by(f64::total_cmp)
                    .map(|ts| (ts - e.at).max(0.0))
            })
            .collect()
    }

    /// One system on one case: a fresh orders topic of `partitions`.
    fn matrix_case(&mut self, mut res: MatrixResult, partitions: usize) -> MatrixResult {
        let job_tag: String = res
            .job
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let sys_tag: String = res
            .system
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == ' ')
            .map(|c| if c == ' ' { '_' } else { c })
            .collect();
        let base = format!(
            "{}-x{}-{job_tag}-p{partitions}-n{}-{sys_tag}",
            self.run,
            if res.warm { "warm" } else { "" },
            res.n
        );
        match res.system {
            "pool" | POOL_LONG => self.matrix_pool(&mut res, &base, partitions),
            _ => self.matrix_peer(&mut res, &base, partitions),
        }
        res
    }

    fn matrix_pool(&mut self, res: &mut MatrixResult, base: &str, partitions: usize) {
        let (orders, claims) = (format!("{base}-orders"), format!("{base}-claims"));
        let n = res.n;
        if let Err(e) = self
            .broker
            .create(&orders, partitions as i32)
            .and_then(|()| self.broker.create(&claims, 1))
        {
            res.incomplete = Some(e);
            return;
        }
        let reader = Reader::start(&self.broker.bootstrap, &claims, Offset::Beginning);
        let sampler = Sampler::none();
        let state_dir = std::env::temp_dir().join(format!("pool_worker-bench-{claims}"));
        // As pool_case: what a deployment sets, and SETTLE_MS=1000 for the
        // first start of each instance (before the clock).
        let mut env = vec![
            ("KAFKA_BROKERS", self.broker.bootstrap.clone()),
            ("ORDERS_TOPIC", orders.clone()),
            ("COORDINATION_TOPIC", claims.clone()),
            ("SETTLE_MS", "1000".to_string()),
            ("STATE_DIR", state_dir.display().to_string()),
        ];
        if !self.broker.is_apache() {
            env.extend(embedded_env());
        }
        if res.system == POOL_LONG {
            env.push(("ORDERS_PER_PROCESS", long_orders().to_string()));
        }
        let t_start = Instant::now();
        let sup = Supervisor::start(n, &env, self.restart_delay_ms, &sampler);
        let booted = || {
            reader
                .seen
                .lock()
                .unwrap()
                .recs
                .iter()
                .filter(|(_, _, r)| r.event() == Event::Booted)
                .map(|(_, _, r)| r.instance)
                .collect::<HashSet<_>>()
                .len()
        };
        let b = wait_for(
            &format!("pool N={n} booting"),
            n,
            Instant::now() + Duration::from_secs(60),
            booted,
        );
        res.ready_ms = Some(t_start.elapsed().as_secs_f64() * 1000.0);
        if b < n {
            res.incomplete = Some(format!("only {b}/{n} instances booted in 60 s"));
        } else {
            std::thread::sleep(Duration::from_millis(1000));
            progress(format!(
                "pool N={n}, {partitions} partition(s): sending {} × `{}`",
                res.m, res.job
            ));
            let pid = sup.child.id();
            let seen = self.matrix_measure(res, &orders, partitions, pid, &|| reader.completions());
            std::thread::sleep(Duration::from_millis(300));
            let recs = reader.snapshot();
            res.exit_to_booted = Self::exit_to_booted(&sup.exited.lock().unwrap(), &recs, &seen);
            let mut per_order: HashMap<(i32, i64), usize> = HashMap::new();
            let mut all = 0;
            for (_, _, r) in &recs {
                let ts = r.ts as f64;
                if ts >= seen.t0 && ts <= seen.last {
                    all += 1;
                }
                if let Some(o) = r.order() {
                    if seen.sent.contains_key(&(o.partition, o.offset)) {
                        *per_order.entry((o.partition, o.offset)).or_default() += 1;
                    }
                }
            }
            if res.done > 0 {
                res.records_naming =
                    Some(per_order.values().sum::<usize>() as f64 / per_order.len().max(1) as f64);
                res.records_all = Some(all as f64 / res.done as f64);
            }
        }
        sup.stop();
        let _ = std::fs::remove_dir_all(&state_dir);
    }

    /// The share group (Apache Kafka only) or the consumer group.
    fn matrix_peer(&mut self, res: &mut MatrixResult, base: &str, partitions: usize) {
        let n = res.n;
        let topic = format!("{base}-orders");
        let mut cmd = if res.system == "share group" {
            let BrokerKind::Apache { lib, .. } = &self.broker.kind else {
                res.incomplete = Some("needs Apache Kafka".into());
                return;
            };
            let mut c = Command::new("java");
            c.arg("-cp")
                .arg(format!("{lib}/*"))
                .arg(concat!(
                    "-Dlog4j2.configurationFile=",
                    concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
                    "/scripts/kafka/log4j2-tools.properties"
                ))
                .arg(concat!(
                    concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
                    "/bench/ShareGroup.java"
                ))
                .args([&self.broker.bootstrap, &topic, &format!("{base}-group")])
                .args([
                    n.to_string(),
                    "0".to_string(),
                    (matrix_case_secs() + 180).to_string(),
                    env_or("BENCH_SHARE_MAX_POLL", "1"),
                ])
                .env("SHARE_CONSUMER_CONFIG", env_or("BENCH_SHARE_CONFIG", ""));
            c
        } else {
            let mut c = Command::new(std::env::current_exe().expect("the bench's own path"));
            let fetch_wait = if self.broker.is_apache() {
                "-"
            } else {
                EMBEDDED_FETCH_WAIT_MS
            };
            c.arg("--consumer-group")
                .args([&self.broker.bootstrap, &topic, &format!("{base}-group")])
                .args([n.to_string(), partitions.to_string(), fetch_wait.into()]);
            c
        };
        if let Err(e) = self.broker.create(&topic, partitions as i32) {
            res.incomplete = Some(e);
            return;
        }
        let t_start = Instant::now();
        let peer = match PeerProc::spawn(&mut cmd) {
            Ok(p) => p,
            Err(e) => {
                res.incomplete = Some(format!("cannot start: {e}"));
                return;
            }
        };
        let joined = wait_for(
            &format!("{} N={n} joining", res.system),
            1,
            Instant::now() + Duration::from_secs(90),
            || peer.ready.load(Ordering::Relaxed) as usize,
        );
        res.ready_ms = Some(t_start.elapsed().as_secs_f64() * 1000.0);
        if joined == 0 {
            res.incomplete = Some("its members did not join within 90 s".into());
        } else {
            // A share-group member's first poll does not wait for its
            // assignment: more time to settle.
            let settle = if res.system == "share group" {
                2000
            } else {
                500
            };
            std::thread::sleep(Duration::from_millis(settle));
            progress(format!(
                "{} N={n}, {partitions} partition(s): sending {} × `{}` (ready after {:.0} ms)",
                res.system,
                res.m,
                res.job,
                res.ready_ms.unwrap_or(0.0)
            ));
            let pid = peer.child.id();
            let done = peer.done.clone();
            self.matrix_measure(res, &topic, partitions, pid, &|| {
                done.lock().unwrap().clone()
            });
        }
        peer.stop();
    }
}

/// Orders of `true` each system runs before the matrix's first case
/// (BENCH_MATRIX_WARM; default 2500 on Apache Kafka, 0 on the embedded
/// broker, which has no JIT to warm).
fn matrix_warm(apache: bool) -> usize {
    env_or("BENCH_MATRIX_WARM", if apache { "2500" } else { "0" })
        .parse()
        .unwrap_or(0)
}

/// The time limit of one system's burst in the matrix (BENCH_MATRIX_CASE_SECS).
fn matrix_case_secs() -> u64 {
    env_or("BENCH_MATRIX_CASE_SECS", "300")
        .parse()
        .unwrap_or(300)
}

/// The matrix's knobs that differ from the defaults (a partial or smoke
/// run says so in its sections).
/// The systems BENCH_MATRIX_SYSTEMS asks for, by key (`pool`, `share`,
/// `group`, `pool-long`; default the three).
fn matrix_systems_asked() -> Vec<String> {
    env_or("BENCH_MATRIX_SYSTEMS", "pool,share,group")
        .split(',')
        .map(|s| s.trim().to_string())
        .collect()
}

/// Whether BENCH_MATRIX_SYSTEMS asks for the system keyed `key`.
fn matrix_system_asked(key: &str) -> bool {
    matrix_systems_asked().iter().any(|s| s == key)
}

fn matrix_knobs() -> Vec<String> {
    [
        "BENCH_MATRIX_NS",
        "BENCH_MATRIX_JOBS",
        "BENCH_MATRIX_LAYOUTS",
        "BENCH_MATRIX_SYSTEMS",
        "BENCH_TRUE_ORDERS",
        "BENCH_SLEEP_ORDERS",
        "BENCH_SHARE_MAX_POLL",
        "BENCH_SHARE_CONFIG",
        "BENCH_MATRIX_CASE_SECS",
        "BENCH_RESTART_DELAY_MS",
        "BENCH_MATRIX_WARM",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| (k, v)))
    // Adding the opt-in system to the three leaves the matrix whole.
    .filter(|(k, _)| {
        **k != "BENCH_MATRIX_SYSTEMS"
            || !["pool", "share", "group"]
                .iter()
                .all(|s| matrix_system_asked(s))
    })
    .map(|(k, v)| format!("{k}={v}"))
    .collect()
}

/// The matrix's sections of the report.
fn matrix_report(results: &[MatrixResult], on: &str, date: &str, apache: bool) -> String {
    use std::fmt::Write as _;
    let mut r = String::new();
    let knobs = matrix_knobs();
    let label = if knobs.is_empty() {
        if matrix_system_asked("pool-long") {
            format!(
                "The full matrix, with the opt-in pool beside it (`BENCH_MATRIX_SYSTEMS={}`). ",
                matrix_systems_asked().join(",")
            )
        } else {
            String::new()
        }
    } else {
        format!(
            "**Partial or smoke run, not the full matrix** (`{}`). ",
            knobs.join(" ")
        )
    };
    // The opt-in system, a column of its own only when measured.
    let mut systems = vec!["pool", "share group", "consumer group"];
    if results.iter().any(|x| x.system == POOL_LONG) {
        systems.push(POOL_LONG);
    }
    let systems = systems;
    let mut jobs: Vec<&str> = Vec::new();
    for x in results {
        if !jobs.contains(&x.job.as_str()) {
            jobs.push(&x.job);
        }
    }
    let find = |job: &str, layout: &str, n: usize, sys: &str| {
        results
            .iter()
            .find(|x| x.job == job && x.layout == layout && x.n == n && x.system == sys)
    };
    let _ = writeln!(r, "## Peers{on}\n");
    let _ = writeln!(r, "Measured {date}. {label}Issue 27, section 1: three systems of N members on the same broker and the same orders, each on a fresh orders topic (1 partition, or N), started and waited for before the clock starts (every pool instance booted; every member joined, its partitions assigned); then a burst of M orders sent at once (round robin over the partitions). Before the first case each system ran {} orders of `true` at the largest N on topics of its own (BENCH_MATRIX_WARM; a warm broker: steady state). **pool**: `pool_worker supervise --instances 1-N --json --child-output null` with what a deployment sets (topics, `STATE_DIR`; `SETTLE_MS=1000` for each instance's first start, before the clock). **share group**: `bench/ShareGroup.java`, N `KafkaShareConsumer` threads in one JVM ({}), each running the order's command and acknowledging it (explicit ACCEPT, `commitSync`) after the job. **consumer group**: N rdkafka consumers of one `group.id` (threads of a child process: this bench with `--consumer-group`), `enable.auto.commit=false`, each running the order's command, then committing its offset synchronously. orders/s = done ÷ (first send → last done); send → done latency includes queueing behind the burst (done: the pool's `completed` record ts; the peers' end of the job, their clock; same machine). CPU per order: CPU time (utime + stime + cutime + cstime from /proc of the system's root process — the supervisor, the JVM, the consumer-group process — and of every live process under it: workers, members and jobs) from just before the first send to the last done, ÷ orders; the bench's own threads (producer, readers) are not in it. Broker CPU per order: the broker process's over the same interval. Pool claims records per order: records naming the order / all claims records written in the interval (`booted`, checkpoints included) per order. Ready after: start → ready (the share group's includes the JVM's start and compiling ShareGroup.java). Exit → next booted (pool, in the notes): for each worker process that exited during the burst, the supervisor's `exited` event (as the bench read it) → the `booted` record of the instance's next process (its timestamp; same machine; 0 when the next process booted before the exit was reported: it is let go at the previous one's `done`), the time an instance cannot claim; with the handed boot (docs/protocol.md R16) that `booted` is in the exiting process's last transaction, before its exit, so this reads 0, and the next process's readiness is its `go` → boot done, the account section's \"read `booted` back\" row.\n",
        matrix_warm(apache),
        match env_or("BENCH_SHARE_MAX_POLL", "1").as_str() {
            "0" => "Kafka's default acquisition, `batch_optimized`".to_string(),
            k => format!("`share.acquire.mode=record_limit`, `max.poll.records={k}`: a member takes {k} record(s) at a time, so that one partition's records are spread over the members"),
        });
    for job in &jobs {
        for layout in ["1", "N"] {
            let mut ns: Vec<usize> = results
                .iter()
                .filter(|x| x.job == *job && x.layout == layout)
                .map(|x| x.n)
                .collect();
            ns.dedup();
            if ns.is_empty() {
                continue;
            }
            let what = if layout == "1" {
                "1 partition"
            } else {
                "N partitions"
            };
            let _ = writeln!(r, "## Peers: job `{job}`, orders topic of {what}{on}\n");
            let _ = writeln!(
                r,
                "Measured {date}. {label}Cells: {} (setup: \"Peers\" above{}).\n",
                systems.join(" / "),
                if systems.contains(&POOL_LONG) {
                    format!(
                        "; `ORDERS_PER_PROCESS={}`: an opt-in, not the workers' default",
                        long_orders()
                    )
                } else {
                    String::new()
                }
            );
            let _ = writeln!(r, "| N | orders | done | orders/s | send→done p50 ms | p99 ms | CPU ms per order | broker CPU ms per order | pool claims records per order | ready after ms | note |");
            let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|---|---|");
            for n in ns {
                let row: Vec<Option<&MatrixResult>> =
                    systems.iter().map(|s| find(job, layout, n, s)).collect();
                let cell = |f: &dyn Fn(&MatrixResult) -> String| {
                    row.iter()
                        .map(|x| x.map_or("-".into(), f))
                        .collect::<Vec<_>>()
                        .join(" / ")
                };
                let f1 = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}"));
                // The pool's (and the opt-in pool's) claims records.
                let pools: Vec<Option<&MatrixResult>> = row
                    .iter()
                    .zip(&systems)
                    .filter(|(_, s)| **s == "pool" || **s == POOL_LONG)
                    .map(|(x, _)| *x)
                    .collect();
                let mut notes: Vec<String> = row
                    .iter()
                    .zip(&systems)
                    .filter_map(|(x, s)| {
                        Some(format!("{s}: INCOMPLETE: {}", (*x)?.incomplete.clone()?))
                    })
                    .collect();
                for (x, s) in row.iter().zip(&systems) {
                    if let Some(t) = x.map(MatrixResult::exit_to_booted_text) {
                        if !t.is_empty() {
                            notes.push(format!("{s}{t}"));
                        }
                    }
                }
                if row.iter().flatten().any(|x| x.same_as_one) {
                    notes.push("N = 1: the 1-partition case".into());
                }
                if !apache {
                    notes.push("no share group on the embedded broker".into());
                }
                let _ = writeln!(
                    r,
                    "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    cell(&|x| x.m.to_string()),
                    cell(&|x| x.done.to_string()),
                    cell(&|x| f1(x.rate())),
                    cell(&|x| fmt_ms(pct(&x.lat, 50.0))),
                    cell(&|x| fmt_ms(pct(&x.lat, 99.0))),
                    cell(&|x| f1(x.cpu_per_order())),
                    cell(&|x| f1(x.broker_per_order())),
                    pools
                        .iter()
                        .map(|pool| pool.map_or("-".into(), |p| format!(
                            "{} / {}",
                            p.records_naming.map_or("-".into(), |v| format!("{v:.2}")),
                            p.records_all.map_or("-".into(), |v| format!("{v:.2}"))
                        )))
                        .collect::<Vec<String>>()
                        .join("; "),
                    cell(&|x| fmt_ms(x.ready_ms)),
                    notes.join("; ")
                );
            }
            let _ = writeln!(r);
        }
    }
    // Issue 27's targets: one orders partition, N = 8.
    let _ = writeln!(r, "## Peers: issue 27's targets{on}\n");
    let _ = writeln!(r, "Measured {date}. {label}One orders partition, N = 8.\n");
    let _ = writeln!(r, "| job | figure | value | target | met |");
    let _ = writeln!(r, "|---|---|---|---|---|");
    let ratio = |job: &str, other: &str| {
        let p = find(job, "1", 8, "pool")?.rate()?;
        let o = find(job, "1", 8, other)?.rate()?;
        Some(p / o)
    };
    let mut target =
        |job: &str, figure: &str, v: Option<f64>, t: &str, ok: &dyn Fn(f64) -> bool| {
            let (value, met) = match v {
                Some(x) => (format!("{x:.2}"), if ok(x) { "yes" } else { "no" }),
                None => ("not measured".into(), "-"),
            };
            let _ = writeln!(r, "| `{job}` | {figure} | {value} | {t} | {met} |");
        };
    target(
        "sleep 0.1",
        "pool / share group, orders/s",
        ratio("sleep 0.1", "share group"),
        "≥ 0.8",
        &|x| x >= 0.8,
    );
    target(
        "sleep 0.1",
        "pool / consumer group, orders/s",
        ratio("sleep 0.1", "consumer group"),
        "≥ 6",
        &|x| x >= 6.0,
    );
    target(
        "true",
        "pool CPU per order, ms",
        find("true", "1", 8, "pool").and_then(MatrixResult::cpu_per_order),
        "≤ 10",
        &|x| x <= 10.0,
    );
    target(
        "true",
        "pool / consumer group, orders/s",
        ratio("true", "consumer group"),
        "≥ 0.2",
        &|x| x >= 0.2,
    );
    target(
        "true",
        "pool: a process's exit → its instance's next `booted`, p50 ms",
        find("true", "1", 8, "pool").and_then(|x| pct(&x.exit_to_booted, 50.0)),
        "≤ 5",
        &|x| x <= 5.0,
    );
    let _ = writeln!(r);
    r
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Replaces the `## ` sections of `old` that `new` has, keeps the others
/// (sections from earlier runs of a subset of the cases), appends new ones,
/// and keeps a trailing `## Findings` (written by hand) last.
fn merge_sections(header: &str, old: &str, new: &str) -> String {
    fn sections(doc: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for line in doc.lines() {
            if line.starts_with("## ") {
                out.push((line.to_string(), String::new()));
            } else if let Some(last) = out.last_mut() {
                last.1.push_str(line);
                last.1.push('\n');
            }
        }
        out
    }
    let (old, new) = (sections(old), sections(new));
    let mut doc = header.to_string();
    let is_findings = |t: &str| t.starts_with("## Findings");
    let mut push = |t: &str, body: &str| {
        doc.push_str(t);
        doc.push('\n');
        doc.push_str(body);
        if !body.ends_with("\n\n") {
            doc.push('\n');
        }
    };
    for (t, body) in old.iter().filter(|(t, _)| !is_findings(t)) {
        match new.iter().find(|(nt, _)| nt == t) {
            Some((_, nb)) => push(t, nb),
            None => push(t, body),
        }
    }
    for (t, body) in new
        .iter()
        .filter(|(t, _)| !old.iter().any(|(ot, _)| ot == t))
    {
        push(t, body);
    }
    for (t, body) in old.iter().filter(|(t, _)| is_findings(t)) {
        push(t, body);
    }
    doc
}

fn median(v: Vec<f64>) -> Option<f64> {
    pct(&v, 50.0)
}

fn main() {
    // `cargo bench` passes `--bench`; the consumer-group peer is this
    // program again, with `--consumer-group`.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--consumer-group") {
        consumer_group_main(&args[2..]);
        return;
    }
    let sections = env_or("BENCH_SECTIONS", "throughput,matrix,idle,history");
    let section = |name: &str| sections.split(',').any(|s| s.trim() == name);
    let ns = env_list("BENCH_NS", "1,4,8");
    let ms = env_list("BENCH_MS", "60,150,250");
    // Apache Kafka keeps the whole pre-fill (no 5 MB cap): smaller K by default.
    let ks = env_list(
        "BENCH_KS",
        if apache_wanted() {
            "1000,10000"
        } else {
            "1000,10000,35000,100000"
        },
    );
    let opps = env_list("BENCH_OPP", "1,100");
    let k_runs = env_or("BENCH_K_RUNS", "3").parse().unwrap_or(3);
    let seq = env_or("BENCH_SEQ", "10").parse().unwrap_or(10);
    let restart_delay_ms: Option<u64> = std::env::var("BENCH_RESTART_DELAY_MS")
        .ok()
        .and_then(|s| s.parse().ok());
    let restart_flag = restart_delay_ms
        .map(|ms| format!(" --restart-delay-ms {ms}"))
        .unwrap_or_default();
    let case_secs: u64 = env_or("BENCH_CASE_SECS", "120").parse().unwrap_or(120);
    let out = env_or(
        "BENCH_OUT",
        concat!(
            concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
            "/bench/RESULTS.md"
        ),
    );
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let run = format!(
        "bench{}-{}",
        std::process::id(),
        (now_ms() as u64) % 1_000_000
    );
    let date = Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    progress(format!("pool_worker bench: binary {}, {cores} cores, sections {sections}, N {ns:?}, M {ms:?}, one-at-a-time {seq}, supervise{restart_flag}", bin()));
    let broker = BrokerProc::start(&run);
    progress(format!("broker at {}", broker.bootstrap));
    let perf_dir = std::env::var("BENCH_PERF").ok().filter(|s| !s.is_empty());
    let prefill_compression = env_or("BENCH_PREFILL_COMPRESSION", "lz4");
    let checkpoints = env_or("BENCH_CHECKPOINTS", "1") != "0";
    let mut bench = Bench {
        broker,
        run: run.clone(),
        restart_delay_ms,
        case_secs,
        seq,
        perf_dir,
        prefill_compression,
        checkpoints,
    };
    // A broker that died (it has happened: see the notes) is replaced before
    // the next case; the case it died in is reported incomplete.
    let mut broker_notes: Vec<String> = Vec::new();
    let mut check_broker = |bench: &mut Bench, before: &str| {
        if let Some(status) = bench.broker.ended() {
            let note = format!(
                "the broker process ended ({status}) before {before}; a new broker was started"
            );
            progress(&note);
            broker_notes.push(note);
            bench.broker = BrokerProc::start(&format!("{run}r{}", broker_notes.len()));
            bench.run = format!("{run}r{}", broker_notes.len());
        }
    };

    let mut cases: Vec<(Vec<CaseResult>, CaseResult)> = Vec::new();
    for (i, &n) in ns.iter().enumerate().filter(|_| section("throughput")) {
        let m = ms.get(i).or(ms.last()).copied().unwrap_or(200);
        let mut pools = Vec::new();
        for opp in opps.iter().map(|&k| (k > 1).then_some(k as u32)) {
            check_broker(&mut bench, &format!("pool N={n}"));
            progress(format!(
                "=== N={n}, M={m}: pool, ORDERS_PER_PROCESS={}",
                opp.unwrap_or(1)
            ));
            let p = bench.pool_case(n, m, opp);
            progress(format!(
                "{} N={n}: {} orders in {:.2} s = {:.1} orders/s{}",
                p.what,
                p.done,
                p.secs,
                p.rate(),
                p.incomplete
                    .as_ref()
                    .map(|s| format!(" (INCOMPLETE: {s})"))
                    .unwrap_or_default()
            ));
            pools.push(p);
        }
        progress(format!("=== N={n}, M={m}: baseline"));
        check_broker(&mut bench, &format!("baseline N={n}"));
        let b = bench.baseline_case(n, m);
        progress(format!(
            "baseline N={n}: {} orders in {:.2} s = {:.1} orders/s{}",
            b.done,
            b.secs,
            b.rate(),
            b.incomplete
                .as_ref()
                .map(|s| format!(" (INCOMPLETE: {s})"))
                .unwrap_or_default()
        ));
        if bench.broker.is_apache() && env_or("BENCH_SHARE", "1") != "0" {
            progress(format!("=== N={n}, M={m}: share group"));
            let sg = bench.share_case(n, m);
            progress(format!(
                "share group N={n}: {} orders in {:.2} s = {:.1} orders/s{}",
                sg.done,
                sg.secs,
                sg.rate(),
                sg.incomplete
                    .as_ref()
                    .map(|s| format!(" (INCOMPLETE: {s})"))
                    .unwrap_or_default()
            ));
            pools.push(sg);
        }
        cases.push((pools, b));
    }
    // The peers (issue 27): pool, share group, consumer group, on the same
    // broker and the same orders.
    let mut matrix: Vec<MatrixResult> = Vec::new();
    if section("matrix") {
        let mx_ns = env_list("BENCH_MATRIX_NS", "1,4,8");
        let jobs: Vec<String> = env_or("BENCH_MATRIX_JOBS", "true,sleep 0.1")
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let layouts_knob = env_or("BENCH_MATRIX_LAYOUTS", "1,N");
        let layouts: Vec<&'static str> = ["1", "N"]
            .into_iter()
            .filter(|l| layouts_knob.split(',').any(|k| k.trim() == *l))
            .collect();
        let systems: Vec<&'static str> = [
            ("pool", "pool"),
            ("share", "share group"),
            ("group", "consumer group"),
            ("pool-long", POOL_LONG),
        ]
        .into_iter()
        .filter(|(k, _)| matrix_system_asked(k))
        .filter(|(k, _)| *k != "share" || bench.broker.is_apache())
        .map(|(_, name)| name)
        .collect();
        let true_orders = env_list("BENCH_TRUE_ORDERS", "200");
        let sleep_orders = env_list("BENCH_SLEEP_ORDERS", "40,100,160");
        // Steady state (issue 35): a fresh broker spends its first minutes
        // compiling (its JIT compilers took half its CPU per order in the
        // account section). Each system first runs a burst of `true`
        // orders of its own at the largest N, not reported.
        let warm = matrix_warm(bench.broker.is_apache());
        if warm > 0 {
            let n = mx_ns.iter().copied().max().unwrap_or(1);
            for &system in &systems {
                progress(format!(
                    "=== warm-up: {system}, N={n}, {warm} orders of `true`"
                ));
                let res = MatrixResult {
                    system,
                    job: "true".into(),
                    layout: "1",
                    n,
                    m: warm,
                    warm: true,
                    ..Default::default()
                };
                let x = bench.matrix_case(res, 1);
                progress(format!(
                    "warm-up {system}: {}/{warm} in {:.2} s, CPU {} ms/order, broker {} ms/order",
                    x.done,
                    x.secs,
                    x.cpu_per_order().map_or("-".into(), |c| format!("{c:.1}")),
                    x.broker_per_order()
                        .map_or("-".into(), |c| format!("{c:.1}")),
                ));
            }
        }
        for job in &jobs {
            let counts = if job == "true" {
                &true_orders
            } else {
                &sleep_orders
            };
            for (i, &n) in mx_ns.iter().enumerate() {
                let m = counts.get(i).or(counts.last()).copied().unwrap_or(100);
                for &layout in &layouts {
                    let partitions = if layout == "1" { 1 } else { n };
                    for &system in &systems {
                        let res = MatrixResult {
                            system,
                            job: job.clone(),
                            layout,
                            n,
                            m,
                            ..Default::default()
                        };
                        // N = 1: one partition either way; measured once.
                        if partitions == 1 && layout == "N" && layouts.contains(&"1") {
                            if let Some(one) = matrix
                                .iter()
                                .find(|x| x.job == *job && x.n == n && x.system == system)
                            {
                                let mut same = one.clone();
                                same.layout = "N";
                                same.same_as_one = true;
                                matrix.push(same);
                                continue;
                            }
                        }
                        check_broker(&mut bench, &format!("{system} N={n} `{job}`"));
                        progress(format!(
                            "=== peers: `{job}`, {partitions} partition(s), N={n}, M={m}: {system}"
                        ));
                        let x = bench.matrix_case(res, partitions);
                        progress(format!(
                            "{system} N={n} `{job}` {partitions}p: {}/{m} in {:.2} s = {} orders/s, p50 {} ms, p99 {} ms, CPU {} ms/order, broker {} ms/order{}{}",
                            x.done,
                            x.secs,
                            x.rate().map_or("-".into(), |r| format!("{r:.1}")),
                            fmt_ms(pct(&x.lat, 50.0)),
                            fmt_ms(pct(&x.lat, 99.0)),
                            x.cpu_per_order().map_or("-".into(), |c| format!("{c:.1}")),
                            x.broker_per_order().map_or("-".into(), |c| format!("{c:.1}")),
                            x.records_naming
                                .map(|v| format!(", claims records/order {v:.2} / {:.2}", x.records_all.unwrap_or(0.0)))
                                .unwrap_or_default()
                                + &x.exit_to_booted_text(),
                            x.incomplete
                                .as_ref()
                                .map(|s| format!(" (INCOMPLETE: {s})"))
                                .unwrap_or_default()
                        ));
                        matrix.push(x);
                    }
                }
            }
        }
    }
    let mut idle = Vec::new();
    let idle_ns = if section("idle") {
        env_list("BENCH_IDLE_NS", "1,4,8,16")
    } else {
        Vec::new()
    };
    let idle_seq: usize = env_or("BENCH_IDLE_SEQ", "20").parse().unwrap_or(20);
    let idle_secs: f64 = env_or("BENCH_IDLE_SECS", "10").parse().unwrap_or(10.0);
    let idle_settings = env_or("BENCH_IDLE_SETTINGS", "embedded,defaults");
    for &n in &idle_ns {
        for setting in idle_settings.split(',').map(str::trim) {
            let embedded = match setting {
                // Apache Kafka runs the workers with their defaults only.
                "embedded" if bench.broker.is_apache() => continue,
                "embedded" => true,
                "defaults" => false,
                _ => continue,
            };
            check_broker(&mut bench, &format!("idle N={n}"));
            progress(format!("=== idle pool N={n}, {setting}"));
            let seq = if embedded {
                idle_seq
            } else {
                idle_seq.div_ceil(4)
            };
            let r = bench.idle_case(n, embedded, seq, idle_secs);
            progress(format!(
                "idle N={n} {setting}: CPU {} % per instance, records/order {}, p50 {} ms{}",
                mean(&r.cpu).map_or("-".into(), |c| format!("{c:.2}")),
                mean(&r.records).map_or("-".into(), |c| format!("{c:.2}")),
                fmt_ms(pct(&r.lat, 50.0)),
                r.incomplete
                    .as_ref()
                    .map(|s| format!(" (INCOMPLETE: {s})"))
                    .unwrap_or_default()
            ));
            idle.push(r);
        }
    }
    let mut accounts = Vec::new();
    if section("account") {
        let account_ns = env_list("BENCH_ACCOUNT_NS", "1,8");
        for (i, &n) in account_ns.iter().enumerate() {
            check_broker(&mut bench, &format!("account N={n}"));
            progress(format!("=== account N={n}"));
            accounts.push(bench.account_case(n, i == 0, false));
        }
        check_broker(&mut bench, "account, threads");
        progress("=== account N=1, threads listed");
        accounts.push(bench.account_case(1, false, true));
    }
    let mut floor = None;
    if section("floor") {
        check_broker(&mut bench, "floor");
        progress("=== floor");
        floor = Some(bench.floor_case());
    }
    let mut hist = Vec::new();
    for &k in ks.iter().filter(|_| section("history")) {
        check_broker(&mut bench, &format!("history K={k}"));
        hist.push(bench.history_case(k, k_runs));
    }
    check_broker(&mut bench, "the end");
    // Sections measured on Apache Kafka are headed so; the embedded broker's
    // keep their names, so that RESULTS.md holds both side by side.
    let on = if bench.broker.is_apache() {
        format!(" — on {}", bench.broker.name())
    } else {
        String::new()
    };
    let apache = bench.broker.is_apache();
    bench.broker.quit();

    // ------------------------------------------------------------ report
    let mut r = String::new();
    use std::fmt::Write as _;
    if !idle.is_empty() {
        let _ = writeln!(r, "## Idle pool: one order at a time{on}\n");
        let _ = writeln!(r, "Measured {date}. N instances (`pool_worker supervise --instances 1-N`, no other flag) idle on one orders partition; CPU of each idle instance over {idle_secs} s of quiet (utime + stime from /proc/<pid>/stat), and of the embedded broker process over the same interval; then orders sent one at a time, each once the previous one completed and the instance that ran it was started again and booted. Claims records per order: every record of the claims topic that names the order (`claimed`, `completed`, a `committed` only where a claim met a rival or a run resumed (R34), and a rival's `yielded`, `lease`, `revoked`), counted after the last order, not the `booted` records of the processes started after each order; claimants: instances that appended `claimed` for it. Latency: send → the `completed` record's ts. Targets (issue 16): records per order ≤ 3.3 at every N, p50 at N=16 within 1.5x of N=1, idle CPU ≤ 1 % of a core with the defaults.\n");
        let _ = writeln!(r, "| N idle | worker settings | orders | done | claims records per order, mean / max | claimants per order, mean / max | send→completed p50 ms | p99 ms | idle CPU per instance, % of a core, mean / max | broker CPU % (all N) | note |");
        let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|---|---|");
        for c in &idle {
            let mm = |v: &[f64], d: usize| match (mean(v), pct(v, 100.0)) {
                (Some(a), Some(b)) => format!("{a:.d$} / {b:.d$}"),
                _ => "-".into(),
            };
            let _ = writeln!(
                r,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.n,
                c.settings(),
                c.sent,
                c.lat.len(),
                mm(&c.records, 2),
                mm(&c.rivals, 2),
                fmt_ms(pct(&c.lat, 50.0)),
                fmt_ms(pct(&c.lat, 99.0)),
                mm(&c.cpu, 2),
                c.broker_cpu.map_or("-".into(), |x| format!("{x:.1}")),
                c.incomplete
                    .clone()
                    .map(|s| format!("INCOMPLETE: {s}"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(r);
    }
    if !cases.is_empty() {
        let _ = writeln!(r, "## Throughput and latency{on}\n");
        let _ = writeln!(r, "Measured {date}.\n");
        let _ = writeln!(r, "| N | system | orders | done | orders/s | ÷ baseline | burst p50 ms | burst p99 ms | 1-at-a-time p50 ms | 1-at-a-time p99 ms | note |");
        let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|---|---|");
        for (pools, b) in &cases {
            let ratio = |p: &CaseResult| {
                if b.rate() > 0.0 {
                    format!("{:.3}", p.rate() / b.rate())
                } else {
                    "-".into()
                }
            };
            let rows: Vec<(&CaseResult, String)> = pools
                .iter()
                .map(|p| (p, ratio(p)))
                .chain(std::iter::once((b, String::new())))
                .collect();
            for (c, ratio) in rows {
                let note = c
                    .incomplete
                    .clone()
                    .map(|s| format!("INCOMPLETE: {s}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    r,
                    "| {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} |",
                    c.n,
                    c.what,
                    c.m,
                    c.done,
                    c.rate(),
                    ratio,
                    fmt_ms(pct(&c.burst_lat, 50.0)),
                    fmt_ms(pct(&c.burst_lat, 99.0)),
                    fmt_ms(pct(&c.seq_lat, 50.0)),
                    fmt_ms(pct(&c.seq_lat, 99.0)),
                    note
                );
            }
        }
        let _ = writeln!(r, "\n## Pool: boot, memory, claims records{on}\n");
        let _ = writeln!(r, "| N | ORDERS_PER_PROCESS | processes started in burst | start→booted p50/p99 ms | start→first claim p50/p99 ms | peak RSS (VmHWM) p50/max MB | claims records per order | yields | baseline group join ms |");
        let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|");
        for (p, b) in cases
            .iter()
            .flat_map(|(pools, b)| pools.iter().map(move |p| (p, b)))
            .filter(|(p, _)| p.what != "share group")
        {
            let mb = |v: Option<f64>| v.map_or("-".into(), |x| format!("{:.1}", x / 1024.0));
            let _ = writeln!(
                r,
                "| {} | {} | {} | {} / {} | {} / {} | {} / {} | {:.2} | {} | {} |",
                p.n,
                p.opp,
                p.processes,
                fmt_ms(pct(&p.boot_connect, 50.0)),
                fmt_ms(pct(&p.boot_connect, 99.0)),
                fmt_ms(pct(&p.boot_ready, 50.0)),
                fmt_ms(pct(&p.boot_ready, 99.0)),
                mb(pct(&p.rss_kb, 50.0)),
                mb(pct(&p.rss_kb, 100.0)),
                p.records_per_order,
                p.yields,
                fmt_ms(b.rebalance_ms)
            );
        }
    }
    if !hist.is_empty() {
        let _ = writeln!(
            r,
            "\n## Boot time vs claims history (one instance, median of runs){on}\n"
        );
        let _ = writeln!(r, "Measured {date}.\n");
        let _ = writeln!(r, "| K orders in history | claims records | bytes/record | log start | records replayed (worker) | foreign/void | in-process replay ms (decode + View, no broker) | pre-fill s | runs | replay ms (worker) | start→booted ms | start→first claim ms | start→completed ms | start→exit ms | peak RSS MB | note |");
        let _ = writeln!(
            r,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for h in &hist {
            let med =
                |f: &dyn Fn(&HistRun) -> Option<f64>| median(h.runs.iter().filter_map(f).collect());
            let opt = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.0}"));
            let _ = writeln!(
                r,
                "| {} | {} | {:.0} | {} | {} | {}/{} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
                h.k, 4 * h.k, h.record_bytes, h.log_start,
                opt(med(&|x| x.replay.records.map(|n| n as f64))),
                opt(med(&|x| x.replay.foreign.map(|n| n as f64))),
                opt(med(&|x| x.replay.void.map(|n| n as f64))),
                fmt_ms(Some(h.in_process_ms)),
                h.prefill_secs, h.runs.len(),
                fmt_ms(med(&|x| x.replay.ms.map(|n| n as f64))),
                fmt_ms(med(&|x| x.connect)), fmt_ms(med(&|x| x.ready)), fmt_ms(med(&|x| x.done)),
                fmt_ms(med(&|x| Some(x.exit_ms))),
                med(&|x| Some(x.rss_kb as f64)).map_or("-".into(), |x| format!("{:.1}", x / 1024.0)),
                h.incomplete.clone().unwrap_or_default()
            );
        }
    }
    if !matrix.is_empty() {
        r.push('\n');
        r.push_str(&matrix_report(&matrix, &on, &date, apache));
    }
    if !accounts.is_empty() {
        r.push('\n');
        r.push_str(&account::account_report(&accounts, &on, &date));
    }
    if let Some(f) = &floor {
        r.push('\n');
        r.push_str(&floor::floor_report(f, &on, &date));
    }
    for note in &broker_notes {
        let _ = writeln!(r, "\nNote: {note}.");
    }
    println!("\n{r}");
    if out != "-" {
        let mut doc = String::new();
        let _ = writeln!(doc, "# Benchmark results\n");
        let _ = writeln!(
            doc,
            "Command: `cargo bench --bench pool` (pool_worker/benches/pool.rs)  "
        );
        let _ = writeln!(doc, "Date: {date}  ");
        let _ = writeln!(doc, "Machine: {cores} cores (nproc), shared and noisy; the broker on the same machine: the embedded broker (librdkafka mock cluster, `pool_worker broker`), or, in the sections headed \"on Apache Kafka\", Apache Kafka from scripts/kafka.sh (`BENCH_BROKER=apache cargo bench --bench pool`: one KRaft node, 1 GB heap, claims topics with scripts/create-topics.sh's settings), where every worker and the baseline run with their defaults (no embedded-broker setting).\n");
        let _ = writeln!(doc, "Setup: for each N, `pool_worker supervise --instances 1-N --json --child-output null{restart_flag}` (clean exits restarted at once, as the shipped compose file and systemd unit run it) with the embedded broker's worker settings (`{}`) on a fresh orders topic (N partitions) and claims topic; orders are the plain-text order `{PAYLOAD}`. A burst of M orders is produced at once (orders/s = M / (first send → last `completed` record); burst latency includes queueing behind the burst), then {seq} orders are sent one at a time, each after the previous completed (\"1-at-a-time\" latency: an idle pool's latency). Completion time of a pool order is the `ts` of its `completed` record (the worker's wall clock; same machine). Rows \"pool, ORDERS_PER_PROCESS=K\": the same with each worker process completing up to K orders before it exits.", pool_worker::kafka::broker::worker_env_line());
        let _ = writeln!(doc, "Baseline: N rdkafka `BaseConsumer` threads in the bench process, one shared `group.id`, `enable.auto.commit=false`, `fetch.wait.max.ms={}` (as the pool's consumers against this broker), each message run with `std::process::Command` (`{PAYLOAD}`) and its offset committed synchronously afterwards; same broker, a fresh topic with the same payloads and partitions; the burst starts once every member has a partition.", EMBEDDED_FETCH_WAIT_MS);
        let _ = writeln!(doc, "Each section says when it was measured: a run of a subset of the cases (see the knobs in pool_worker/benches/pool.rs) replaces only its own sections.\n");
        let _ = writeln!(doc, "History: one worker (instance 1) boots on a claims topic pre-filled with K completed orders (booted/claimed/completed each, as the pool writes them: an unrivalled claim is its own commit, R34; lz4-compressed so that the mock broker, which keeps 5 MB per partition, keeps them); `log start` > 0 means the broker dropped the oldest records, `records replayed` is the worker's own count (its \"replayed the claims topic\" log line), `in-process replay` is decode + `View::apply` of the same records in the bench process, without Kafka.");
        let _ = writeln!(doc, "Boot: per worker process started during the burst: supervisor's `started` event (read by the bench) → the incarnation's `booted` record ts (process up, Kafka clients connected, topics checked, the claims topic read to its end and the predecessor's clean exit confirmed there: docs/protocol.md R16–R18; `SETTLE_MS=1000`, `STATE_DIR` per case) and → its first `claimed` record ts (replay caught up, order chosen: ready to claim). Peak RSS: VmHWM of every instance process, sampled from /proc every 5 ms.\n");
        if let Some(dir) = std::path::Path::new(&out).parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Sections of cases not run this time, and the findings written by
        // hand, are kept.
        let old = std::fs::read_to_string(&out).unwrap_or_default();
        // The header describes the throughput cases' setup: a run without
        // them keeps the one there is.
        let doc = match old.find("\n## ") {
            Some(i) if !section("throughput") => old[..=i].to_string(),
            _ => doc,
        };
        let doc = merge_sections(&doc, &old, &r);
        std::fs::write(&out, doc).expect("cannot write the results");
        progress(format!("written to {out}"));
    }
}

/// A consumer-group member's work on one order: runs the command in its
/// payload (split like a shell would, output discarded), then commits the
/// message's offset synchronously, retried up to 50 times 20 ms apart.
/// `who` names the member's group in the one line a failed commit gets.
fn run_and_commit<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    m: &rdkafka::message::BorrowedMessage<'_>,
    who: &str,
) {
    let text = m
        .payload()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let argv = shell_words::split(&text).unwrap_or_default();
    if let Some((prog, args)) = argv.split_first() {
        let _ = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let mut tries = 0;
    while let Err(e) = consumer.commit_message(m, CommitMode::Sync) {
        tries += 1;
        if tries > 50 {
            eprintln!("{who}: commit failed: {e}");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
