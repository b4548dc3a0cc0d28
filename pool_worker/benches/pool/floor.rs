//! The `floor` section (issue 35, "the floor in figures"): on a warm broker,
//! the cost of each primitive a worker process needs for one order when
//! the pool runs one process per order with Kafka transactions, each
//! measured alone, so that their sum is a floor for the CPU per order in
//! the pool's processes and in the broker.
//!
//! ```text
//! BENCH_BROKER=apache BENCH_SECTIONS=floor cargo bench --bench pool
//! ```
//!
//! The clients are rust-rdkafka's `BaseProducer` and `BaseConsumer` with
//! the worker's settings (the producer's as in
//! pool_worker/src/kafka/clients.rs, `Kafka::connect`; the consumer's
//! `pool_worker::kafka::claims_reader::config`), writing ~300-byte records
//! with a key to a fresh 1-partition topic with the claims topics' settings.
//! First the broker is warmed (BENCH_FLOOR_WARM_TXNS transactions and
//! BENCH_FLOOR_WARM_CLIENTS client creations, half producers that
//! initialise transactions, half consumers: a fresh JVM's JIT compilers are
//! busy for minutes), with its idle CPU rate over a quiet interval before
//! and after, and its CPU per transaction early and late in the warm-up.
//! Then each row is a loop of one operation, bounded by a count and by
//! BENCH_FLOOR_ROW_SECS:
//!
//! 1. **process start**: the shipped binary (`POOL_WORKER_BIN`, else the
//!    one cargo built) run as `pool_worker guard --pgid 0 --until 0`, which
//!    exits 2 once its arguments are parsed, and reaped (`wait4`, polled
//!    every 100 µs); its CPU is the child's rusage, plus the bench's own
//!    for the spawn and the reap. `/bin/true` the same, for comparison.
//! 2. **client creation and first connection**: a transactional producer
//!    (a fresh `transactional.id` each time) created and the topic's
//!    metadata fetched; a consumer (`group.id` set) created, the
//!    partition's end asked (ListOffsets) and assigned as an offset (as the
//!    worker assigns its claims partition), polled until partition EOF.
//!    Each is dropped after its window (a worker exits instead).
//! 3. **`init_transactions`** alone, on a producer just created and
//!    connected (its metadata fetched): with a fresh `transactional.id`
//!    each time, and with one id again and again (the epoch bump of a
//!    worker's fence, whose id is its instance's). The client's CPU is
//!    taken over the call only; the broker's over the loop, less the
//!    producer creation's of row 2.
//! 4. **one transaction of one record** on one producer: begin, produce,
//!    the delivery report, commit (as the worker appends). For comparison,
//!    one idempotent, non-transactional record acknowledged (`acks=all`),
//!    and each of the two read back by a read_committed consumer (one fetch
//!    per record; the reading's own cost is the difference).
//!
//! Wall: p50 per operation. Client CPU: the bench process's (getrusage
//! RUSAGE_SELF; all its threads, librdkafka's included) over each
//! operation, mean. Broker CPU: the broker process's utime + stime
//! (/proc/PID/stat, 10 ms ticks) over the loop, less its idle rate (the
//! quiet interval after the warm-up) × the loop's time, ÷ operations; and
//! the same from the broker's threads (/proc/PID/task/*/schedstat, named
//! by `jcmd PID Thread.print`, each group less its own idle rate) without
//! its JIT compilers, which are still busy after the warm-up; the threads
//! also split the costs of the transaction, the fence and the clients'
//! creation. Then the floor:
//! one process start, a producer and a consumer created, one fence and N
//! transactions (N = 3, the worker before the handed boot; N = 2, the worker with it, docs/protocol.md R16), the order
//! read once, against issue 35's targets (≤ 10 ms CPU per order in the
//! pool's processes, ≤ 10 ms in the broker).
//!
//! Knobs (environment): BENCH_FLOOR_WARM_TXNS (default 10000),
//! BENCH_FLOOR_WARM_CLIENTS (200), BENCH_FLOOR_WARM_SECS (the warm-up's
//! bound, 90), BENCH_FLOOR_QUIET_SECS (each quiet interval, 4),
//! BENCH_FLOOR_OPS (operations per row of processes, transactions and
//! records, 500), BENCH_FLOOR_CLIENTS (per row of client creations and
//! `init_transactions`, 150), BENCH_FLOOR_ROW_SECS (each row's bound, 20).
//! A whole run takes about 2 minutes on 2 cores (the broker's start
//! included; the warm-up is most of it).

use super::*;
use std::collections::BTreeMap;
use std::sync::mpsc;

const KNOBS: &[(&str, &str)] = &[
    ("BENCH_FLOOR_WARM_TXNS", "10000"),
    ("BENCH_FLOOR_WARM_CLIENTS", "200"),
    ("BENCH_FLOOR_WARM_SECS", "90"),
    ("BENCH_FLOOR_QUIET_SECS", "4"),
    ("BENCH_FLOOR_OPS", "500"),
    ("BENCH_FLOOR_CLIENTS", "150"),
    ("BENCH_FLOOR_ROW_SECS", "20"),
];

fn knob(name: &str) -> usize {
    let default = KNOBS.iter().find(|k| k.0 == name).map_or("0", |k| k.1);
    env_or(name, default)
        .parse()
        .unwrap_or_else(|_| default.parse().unwrap_or(0))
}

fn knobs_line() -> String {
    KNOBS
        .iter()
        .map(|(k, _)| format!("{k}={}", knob(k)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The record's key and a ~300-byte value like a claims record's.
const KEY: &str = "pool_worker.floor.1";

fn payload(i: usize) -> String {
    let mut s = format!(
        "{{\"v\":1,\"instance\":1,\"incarnation\":\"{:016x}\",\"event\":\"claimed\",\"order\":{{\"topic\":\"work_orders\",\"partition\":0,\"offset\":{i}}},\"ts\":{},\"sig\":\"",
        i as u64 * 0x9e37_79b9,
        now_ms() as u64
    );
    while s.len() < 298 {
        s.push('0');
    }
    s.push_str("\"}");
    s
}

/// CPU time (user + system) in a `rusage`, ms.
fn rusage_ms(ru: &libc::rusage) -> f64 {
    let t = |tv: libc::timeval| tv.tv_sec as f64 * 1000.0 + tv.tv_usec as f64 / 1000.0;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// This process's CPU time so far (every thread), ms.
fn self_cpu_ms() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    rusage_ms(&ru)
}

fn broker_ms(pid: u32) -> Option<f64> {
    cpu_ticks(pid).map(|t| t as f64 * 1000.0 / clock_ticks_per_sec())
}

/// The broker's threads' CPU time (ns) by group: the full name from `jcmd`
/// (or the kernel's 15 characters), digits replaced by `N`.
fn thread_groups(pid: u32, names: &HashMap<u32, String>) -> HashMap<String, f64> {
    let mut out: HashMap<String, f64> = HashMap::new();
    for (tid, comm, ns) in pool_worker::account::thread_cpu(pid) {
        let name = names.get(&tid).cloned().unwrap_or(comm);
        let mut group = String::new();
        for ch in name.chars() {
            if ch.is_ascii_digit() {
                if !group.ends_with('N') {
                    group.push('N');
                }
            } else {
                group.push(ch);
            }
        }
        *out.entry(group).or_default() += ns as f64 / 1e6;
    }
    out
}

/// A producer whose delivery reports a thread of its own serves (as the
/// worker's `delivery-reports` thread), handed over on a channel.
struct Reports(Mutex<mpsc::Sender<Result<(), String>>>);

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        let r = r.as_ref().map(|_| ()).map_err(|(e, _)| e.to_string());
        let _ = self.0.lock().unwrap_or_else(|p| p.into_inner()).send(r);
    }
}

struct Prod {
    p: Arc<BaseProducer<Reports>>,
    rx: mpsc::Receiver<Result<(), String>>,
    stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
}

impl Prod {
    fn new(cfg: &ClientConfig) -> Result<Prod, String> {
        let (tx, rx) = mpsc::channel();
        let p: BaseProducer<Reports> = cfg
            .create_with_context(Reports(Mutex::new(tx)))
            .map_err(|e| e.to_string())?;
        let p = Arc::new(p);
        let stop = Arc::new(AtomicBool::new(false));
        let (p2, s2) = (p.clone(), stop.clone());
        let poller = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                p2.poll(Duration::from_millis(100));
            }
        });
        Ok(Prod {
            p,
            rx,
            stop,
            poller: Some(poller),
        })
    }

    /// Produces one record and waits for its delivery report.
    fn append(&self, topic: &str, i: usize) -> Result<(), String> {
        let value = payload(i);
        self.p
            .send(BaseRecord::to(topic).key(KEY).payload(&value))
            .map_err(|(e, _)| e.to_string())?;
        self.rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "no delivery report within 10 s".to_string())??;
        // As the worker (settle_reports): the report's event is dropped
        // microseconds after it is handed on; until then commit's flush
        // would poll for 100 ms.
        let start = Instant::now();
        while self.p.in_flight_count() > 0 && start.elapsed() < Duration::from_millis(5) {
            std::thread::yield_now();
        }
        Ok(())
    }

    /// One transaction of one record, as the worker appends.
    fn transaction(&self, topic: &str, i: usize) -> Result<(), String> {
        self.p.begin_transaction().map_err(|e| e.to_string())?;
        self.append(topic, i)?;
        self.p
            .commit_transaction(Duration::from_secs(10))
            .map_err(|e| e.to_string())
    }
}

impl Drop for Prod {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.poller.take() {
            let _ = t.join();
        }
    }
}

/// The worker's producer settings (pool_worker/src/kafka/clients.rs,
/// `Kafka::connect`, and client_config.rs).
fn producer_config(bootstrap: &str, transactional_id: Option<&str>) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "1000")
        .set("socket.nagle.disable", "true")
        .set("enable.sparse.connections", "false")
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "10000")
        .set("allow.auto.create.topics", "false");
    match transactional_id {
        Some(id) => c
            .set("transactional.id", id)
            .set("transaction.timeout.ms", "10000"),
        None => c.set("enable.idempotence", "true"),
    };
    c
}

fn metadata<C: ClientContext>(c: &rdkafka::client::Client<C>, topic: &str) -> Result<(), String> {
    c.fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| e.to_string())
        .and_then(|m| match m.topics().first().and_then(|t| t.error()) {
            Some(e) => Err(format!("metadata: {e:?}")),
            None => Ok(()),
        })
}

/// A consumer with the worker's claims reader's settings, assigned to the
/// topic's end and polled until partition EOF. The end is asked first
/// (ListOffsets) and assigned as an offset, as the worker assigns its
/// claims partition (claims_reader.rs, `go_to`): assigned at
/// `Offset::End`, librdkafka's own query of it came ~500 ms later.
fn consumer_at_end(bootstrap: &str, group: &str, topic: &str) -> Result<BaseConsumer, String> {
    let c: BaseConsumer =
        pool_worker::kafka::claims_reader::config(bootstrap, &BTreeMap::new(), Some(group))
            .create()
            .map_err(|e| e.to_string())?;
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(high))
        .map_err(|e| e.to_string())?;
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.poll(Duration::from_millis(100)) {
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(c),
            Some(Err(e)) => return Err(e.to_string()),
            _ if Instant::now() > deadline => return Err("no partition EOF within 10 s".into()),
            _ => {}
        }
    }
}

/// Closes a consumer and drops it. rdkafka's drop closes it too, but
/// polls 100 ms at a time until it is closed; this polls every
/// millisecond (at most 5 s).
fn close(c: BaseConsumer) {
    if c.close_queue().is_ok() {
        let t = Instant::now();
        while !c.closed() && t.elapsed() < Duration::from_secs(5) {
            let _ = c.poll(Duration::from_millis(1));
        }
    }
    drop(c);
}

/// Polls until a record arrives (partition EOFs skipped), at most 10 s.
fn read_one(c: &BaseConsumer) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => return Ok(()),
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(e.to_string()),
        }
        if Instant::now() > deadline {
            return Err("no record read back within 10 s".into());
        }
    }
}

/// One operation's figures: wall, client CPU and, for a process, the
/// bench's own CPU for spawning and reaping it (ms).
struct Sample {
    wall: f64,
    client: f64,
    parent: Option<f64>,
}

/// Times `f` and the bench process's CPU over it.
fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<Sample, String> {
    let (c0, t0) = (self_cpu_ms(), Instant::now());
    f()?;
    Ok(Sample {
        wall: t0.elapsed().as_secs_f64() * 1000.0,
        client: self_cpu_ms() - c0,
        parent: None,
    })
}

/// Runs `program args`, reaps it with wait4: wall, the child's CPU and the
/// bench's own over the spawn and the reap.
fn process(program: &str, args: &[&str], want: i32) -> Result<Sample, String> {
    let (c0, t0) = (self_cpu_ms(), Instant::now());
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // SAFETY: our own child, valid pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            return Err(format!("wait4: {}", std::io::Error::last_os_error()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{program} did not exit within 10 s"));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let wall = t0.elapsed().as_secs_f64() * 1000.0;
    let parent = self_cpu_ms() - c0;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != want {
        return Err(format!("{program} ended with status {status:#x}"));
    }
    Ok(Sample {
        wall,
        client: rusage_ms(&ru),
        parent: Some(parent),
    })
}

#[derive(Clone, Default)]
struct Row {
    label: String,
    ops: usize,
    wall: Vec<f64>,
    /// Client CPU per operation, ms (mean).
    client: Option<f64>,
    /// The bench's CPU spawning and reaping a process, ms (mean).
    parent: Option<f64>,
    /// Broker CPU per operation, less idle, ms.
    broker: Option<f64>,
    /// The broker's threads: group -> ms per operation, less idle.
    groups: Vec<(String, f64)>,
    /// The broker's threads without its JIT compilers, ms per operation,
    /// less idle.
    broker_no_jit: Option<f64>,
    how: String,
    note: Option<String>,
}

#[derive(Default)]
pub(super) struct Floor {
    broker: String,
    rows: Vec<Row>,
    warm_txns: usize,
    warm_clients: usize,
    warm_secs: f64,
    /// The broker's CPU per warm-up transaction, ms: the first and the last
    /// tenth of the warm-up's.
    warm_first: Option<f64>,
    warm_last: Option<f64>,
    /// The broker's idle CPU, ms per s: fresh, after the warm-up, at the end.
    idle: [Option<f64>; 3],
    quiet_secs: f64,
    /// The JIT compiler threads' share of the idle rate after the warm-up,
    /// ms per s.
    jit_idle: Option<f64>,
    incomplete: Option<String>,
}

/// The broker's CPU per operation over a loop, less its idle rate.
struct Meter {
    pid: u32,
    idle: f64,
    idle_groups: HashMap<String, f64>,
    names: HashMap<u32, String>,
    secs: f64,
}

impl Meter {
    /// Runs `op` up to `max` times (and for at most the row's seconds).
    fn row(
        &self,
        label: &str,
        max: usize,
        how: &str,
        mut op: impl FnMut(usize) -> Result<Sample, String>,
    ) -> Row {
        progress(format!("floor: {label} (up to {max})"));
        let mut row = Row {
            label: label.into(),
            how: how.into(),
            ..Default::default()
        };
        let g0 = thread_groups(self.pid, &self.names);
        let (b0, t0) = (broker_ms(self.pid), Instant::now());
        let (mut client, mut parent) = (0.0, 0.0);
        for i in 0..max {
            if t0.elapsed().as_secs_f64() > self.secs {
                row.note = Some(format!("stopped at {i} after {} s", self.secs));
                break;
            }
            match op(i) {
                Ok(s) => {
                    row.wall.push(s.wall);
                    client += s.client;
                    parent += s.parent.unwrap_or(0.0);
                    row.ops += 1;
                    if s.parent.is_some() {
                        row.parent = Some(0.0);
                    }
                }
                Err(e) => {
                    row.note = Some(format!("failed after {i}: {e}"));
                    break;
                }
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        let b1 = broker_ms(self.pid);
        let g1 = thread_groups(self.pid, &self.names);
        if row.ops > 0 {
            let n = row.ops as f64;
            row.client = Some(client / n);
            row.parent = row.parent.map(|_| parent / n);
            row.broker = b0.zip(b1).map(|(a, b)| (b - a - self.idle * dt) / n);
            let mut groups: Vec<(String, f64)> = g1
                .iter()
                .map(|(g, v)| {
                    let idle = self.idle_groups.get(g).copied().unwrap_or(0.0);
                    (
                        g.clone(),
                        (v - g0.get(g).copied().unwrap_or(0.0) - idle * dt) / n,
                    )
                })
                .collect();
            groups.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
            row.broker_no_jit = (!groups.is_empty())
                .then(|| groups.iter().filter(|g| !is_jit(&g.0)).map(|g| g.1).sum());
            row.groups = groups;
        }
        progress(format!(
            "floor: {label}: {} ops in {dt:.1} s, wall p50 {} ms, client {} ms, broker {} ms ({} without JIT){}",
            row.ops,
            fmt_ms(pct(&row.wall, 50.0)),
            opt2(row.client),
            opt2(row.broker),
            opt2(row.broker_no_jit),
            row.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ));
        row
    }
}

fn is_jit(group: &str) -> bool {
    group.contains("CompilerThread")
}

fn opt2(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.2}"))
}

/// The broker's CPU rate over `secs` of quiet, ms per s, and its threads'.
fn quiet(pid: u32, secs: f64, names: &HashMap<u32, String>) -> (Option<f64>, HashMap<String, f64>) {
    let g0 = thread_groups(pid, names);
    let (b0, t0) = (broker_ms(pid), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let dt = t0.elapsed().as_secs_f64();
    let b1 = broker_ms(pid);
    let g1 = thread_groups(pid, names);
    let groups = g1
        .iter()
        .map(|(g, v)| (g.clone(), (v - g0.get(g).copied().unwrap_or(0.0)) / dt))
        .collect();
    (b0.zip(b1).map(|(a, b)| (b - a) / dt), groups)
}

impl Bench {
    pub(super) fn floor_case(&mut self) -> Floor {
        let mut res = Floor {
            broker: self.broker.name(),
            quiet_secs: knob("BENCH_FLOOR_QUIET_SECS") as f64,
            ..Default::default()
        };
        let bin = super::bin();
        let topic = format!("{}-floor-claims", self.run);
        if let Err(e) = self.broker.create(&topic, 1) {
            res.incomplete = Some(e);
            return res;
        }
        let bootstrap = self.broker.bootstrap.clone();
        let pid = self.broker.pid();
        let run = self.run.clone();
        let names = if self.broker.is_apache() {
            super::account::jvm_thread_names(pid)
        } else {
            HashMap::new()
        };
        progress(format!(
            "floor: broker's idle CPU over {} s (fresh)",
            res.quiet_secs
        ));
        res.idle[0] = quiet(pid, res.quiet_secs, &names).0;

        // The transactions' producer, for the warm-up; created again after the rows of processes and clients, which it
        // would otherwise accompany, idle.
        let txn_producer = || {
            let p = Prod::new(&producer_config(
                &bootstrap,
                Some(&format!("{run}-floor-txn")),
            ))?;
            p.p.init_transactions(Duration::from_secs(30))
                .map_err(|e| e.to_string())?;
            metadata(p.p.client(), &topic)?;
            Ok::<_, String>(p)
        };
        let txn = match txn_producer() {
            Ok(p) => p,
            Err(e) => {
                res.incomplete = Some(format!("the transactional producer: {e}"));
                return res;
            }
        };
        // The warm-up.
        let warm_txns = knob("BENCH_FLOOR_WARM_TXNS");
        let warm_clients = knob("BENCH_FLOOR_WARM_CLIENTS");
        let warm_secs = knob("BENCH_FLOOR_WARM_SECS") as f64;
        progress(format!(
            "floor: warming the broker: {warm_txns} transactions, {warm_clients} client creations (at most {warm_secs} s)"
        ));
        let t0 = Instant::now();
        let tenth = (warm_txns / 10).max(1);
        let mut mark = broker_ms(pid);
        for i in 0..warm_txns {
            if t0.elapsed().as_secs_f64() > warm_secs {
                break;
            }
            if let Err(e) = txn.transaction(&topic, i) {
                res.incomplete = Some(format!("warm-up transaction {i}: {e}"));
                return res;
            }
            res.warm_txns += 1;
            if (i + 1) % tenth == 0 {
                let now = broker_ms(pid);
                let per = mark.zip(now).map(|(a, b)| (b - a) / tenth as f64);
                if i + 1 == tenth {
                    res.warm_first = per;
                }
                res.warm_last = per;
                mark = now;
            }
        }
        for i in 0..warm_clients {
            if t0.elapsed().as_secs_f64() > warm_secs {
                break;
            }
            let r = if i % 2 == 0 {
                producer_config(&bootstrap, Some(&format!("{run}-floor-warm-{i}")))
                    .create::<BaseProducer>()
                    .map_err(|e| e.to_string())
                    .and_then(|p| {
                        metadata(p.client(), &topic)?;
                        p.init_transactions(Duration::from_secs(10))
                            .map_err(|e| e.to_string())
                    })
            } else {
                consumer_at_end(&bootstrap, &format!("{run}-floor-group"), &topic).map(close)
            };
            if let Err(e) = r {
                res.incomplete = Some(format!("warm-up client {i}: {e}"));
                return res;
            }
            res.warm_clients += 1;
        }
        res.warm_secs = t0.elapsed().as_secs_f64();
        drop(txn);
        progress(format!(
            "floor: warm-up took {:.1} s; broker CPU per transaction {} ms in its first tenth, {} in its last",
            res.warm_secs,
            opt2(res.warm_first),
            opt2(res.warm_last)
        ));
        let (idle, idle_groups) = quiet(pid, res.quiet_secs, &names);
        res.idle[1] = idle;
        res.jit_idle = (!idle_groups.is_empty()).then(|| {
            idle_groups
                .iter()
                .filter(|g| is_jit(g.0))
                .map(|g| *g.1)
                .sum()
        });
        progress(format!(
            "floor: broker's idle CPU {} ms/s fresh, {} ms/s after the warm-up ({} of it the JIT compilers)",
            opt2(res.idle[0]),
            opt2(res.idle[1]),
            opt2(res.jit_idle)
        ));
        let meter = Meter {
            pid,
            idle: idle.unwrap_or(0.0),
            idle_groups,
            names,
            secs: knob("BENCH_FLOOR_ROW_SECS") as f64,
        };
        let ops = knob("BENCH_FLOOR_OPS");
        let clients = knob("BENCH_FLOOR_CLIENTS");

        // 1. Processes.
        let mut rows = vec![
            meter.row(
                "process start: `pool_worker guard --pgid 0 --until 0` (exits 2 after parsing)",
                ops,
                "spawn → reaped (wait4, polled every 100 µs); client CPU: the child's rusage",
                |_| process(&bin, &["guard", "--pgid", "0", "--until", "0"], 2),
            ),
            meter.row(
                "process start: `/bin/true`",
                ops,
                "the same, for comparison",
                |_| process("/bin/true", &[], 0),
            ),
        ];

        // 2. Client creation and first connection.
        rows.push(meter.row(
            "transactional producer created, metadata fetched",
            clients,
            "a fresh `transactional.id` each; client CPU: the bench process over create → metadata; dropped after (a worker exits instead)",
            |i| {
                let mut keep = None;
                let s = timed(|| {
                    let p: BaseProducer = producer_config(
                        &bootstrap,
                        Some(&format!("{run}-floor-create-{i}")),
                    )
                    .create()
                    .map_err(|e| e.to_string())?;
                    metadata(p.client(), &topic)?;
                    keep = Some(p);
                    Ok(())
                })?;
                drop(keep);
                Ok(s)
            },
        ));
        rows.push(meter.row(
            "consumer created, its end asked, assigned there, polled to EOF",
            clients,
            "`claims_reader::config` (group.id set, read_committed, no group joined, fetch.wait.max.ms 100: EOF comes with the first, empty, fetch's answer); create → EOF; closed after",
            |_| {
                let mut keep = None;
                let s = timed(|| {
                    keep = Some(consumer_at_end(
                        &bootstrap,
                        &format!("{run}-floor-group"),
                        &topic,
                    )?);
                    Ok(())
                })?;
                if let Some(c) = keep {
                    close(c);
                }
                Ok(s)
            },
        ));
        let (creation, creation_no_jit) = (rows[2].broker, rows[2].broker_no_jit);

        // 3. init_transactions alone.
        let init = |label: &str, how: &str, fresh: bool| {
            let mut row = meter.row(label, clients, how, |i| {
                let id = if fresh {
                    format!("{run}-floor-init-{i}")
                } else {
                    format!("{run}-floor-fence")
                };
                let p: BaseProducer = producer_config(&bootstrap, Some(&id))
                    .create()
                    .map_err(|e| e.to_string())?;
                metadata(p.client(), &topic)?;
                timed(|| {
                    p.init_transactions(Duration::from_secs(10))
                        .map_err(|e| e.to_string())
                })
            });
            row.how = format!(
                "{how}; client CPU over the call only; broker: the loop's {} ms ({} without JIT) per producer less the producer creation's row",
                opt2(row.broker),
                opt2(row.broker_no_jit)
            );
            row.broker = row.broker.zip(creation).map(|(a, b)| a - b);
            row.broker_no_jit = row.broker_no_jit.zip(creation_no_jit).map(|(a, b)| a - b);
            row
        };
        rows.push(init(
            "`init_transactions`, a fresh `transactional.id`",
            "a new producer id (the coordinator's transaction log written)",
            true,
        ));
        rows.push(init(
            "`init_transactions`, the same `transactional.id` again (a worker's fence)",
            "the epoch bumped",
            false,
        ));

        // 4. Records.
        let txn = match txn_producer() {
            Ok(p) => p,
            Err(e) => {
                res.incomplete = Some(format!("the transactional producer: {e}"));
                res.rows = rows;
                return res;
            }
        };
        rows.push(meter.row(
            "one transaction of one record",
            ops,
            "begin, produce, delivery report, commit, on one producer (as the worker appends)",
            |i| timed(|| txn.transaction(&topic, i)),
        ));
        let idem = Prod::new(&producer_config(&bootstrap, None));
        match &idem {
            Ok(idem) => {
                if let Err(e) = metadata(idem.p.client(), &topic) {
                    res.incomplete = Some(format!("idempotent producer: {e}"));
                }
                rows.push(meter.row(
                    "one idempotent record acknowledged (no transaction)",
                    ops,
                    "`enable.idempotence`, `acks=all`: produce → delivery report",
                    |i| timed(|| idem.append(&topic, i)),
                ));
            }
            Err(e) => res.incomplete = Some(format!("idempotent producer: {e}")),
        }
        match consumer_at_end(&bootstrap, &format!("{run}-floor-reader"), &topic) {
            Ok(c) => {
                if let Ok(idem) = &idem {
                    rows.push(meter.row(
                        "idempotent record + read back by a read_committed consumer",
                        ops,
                        "produce → acknowledged → polled until the record arrives (one fetch per record)",
                        |i| timed(|| idem.append(&topic, i).and_then(|()| read_one(&c))),
                    ));
                }
                rows.push(meter.row(
                    "transaction + read back by a read_committed consumer",
                    ops,
                    "one transaction → polled until the record arrives (the commit marker read too)",
                    |i| timed(|| txn.transaction(&topic, i).and_then(|()| read_one(&c))),
                ));
            }
            Err(e) => res.incomplete = Some(format!("reader: {e}")),
        }
        drop(idem);
        drop(txn);
        // The reading alone: differences.
        let find =
            |rows: &[Row], prefix: &str| rows.iter().find(|r| r.label.starts_with(prefix)).cloned();
        for (both, alone, label) in [
            (
                "idempotent record + read back",
                "one idempotent record",
                "reading one record back (difference of the two idempotent rows)",
            ),
            (
                "transaction + read back",
                "one transaction",
                "reading one transaction's record back (difference of the two transaction rows)",
            ),
        ] {
            if let (Some(b), Some(a)) = (find(&rows, both), find(&rows, alone)) {
                let diff = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x - y);
                let wall = diff(pct(&b.wall, 50.0), pct(&a.wall, 50.0));
                rows.push(Row {
                    label: label.into(),
                    ops: b.ops.min(a.ops),
                    wall: wall.into_iter().collect(),
                    client: diff(b.client, a.client),
                    broker: diff(b.broker, a.broker),
                    broker_no_jit: diff(b.broker_no_jit, a.broker_no_jit),
                    how: "row with the read − row without (wall: difference of p50s)".into(),
                    ..Default::default()
                });
            }
        }
        progress(format!(
            "floor: broker's idle CPU over {} s (end)",
            res.quiet_secs
        ));
        res.idle[2] = quiet(pid, res.quiet_secs, &meter.names).0;
        res.rows = rows;
        res
    }
}

/// The section of RESULTS.md.
pub(super) fn floor_report(f: &Floor, on: &str, date: &str) -> String {
    use std::fmt::Write as _;
    let mut r = String::new();
    let _ = writeln!(r, "## The floor: one order's primitives, each alone{on}\n");
    let _ = writeln!(r, "Measured {date} with `BENCH_SECTIONS=floor` (BENCH_BROKER={} {}; pool_worker/benches/pool/floor.rs explains the method). Each primitive a worker process needs for one order, run alone in a loop on a warm broker ({}) with the worker's client settings (rust-rdkafka `BaseProducer`/`BaseConsumer`), ~300-byte keyed records to a 1-partition topic with the claims topics' settings. Wall: p50 per operation. Client CPU: the bench process's (getrusage, every thread: librdkafka's included) over each operation, or the child's rusage for a process. Broker CPU: the broker process's utime + stime over the loop less its idle rate × the loop's time, ÷ operations (10 ms ticks: good to about ±0.1 ms over a row, but the idle rate's own drift, see below, can move a row by more); and the same without its JIT compiler threads (`C1/C2 CompilerThreadN`; /proc/PID/task/*/schedstat, each thread group less its own idle rate), which are still compiling long after a warm-up of this size and whose work a broker that has run for hours no longer does. A row whose broker cost is mostly compilation says so by the difference of the two columns.{}\n",
        env_or("BENCH_BROKER", "embedded"),
        knobs_line(),
        f.broker,
        f.incomplete.as_ref().map(|s| format!(" INCOMPLETE: {s}.")).unwrap_or_default());
    let _ = writeln!(r, "Warm-up: {} transactions and {} client creations in {:.1} s; the broker's CPU per transaction was {} ms in the warm-up's first tenth and {} ms in its last. The broker's idle CPU: {} ms/s fresh, {} ms/s after the warm-up (subtracted; {} ms/s of it its JIT compilers), {} ms/s at the end ({} s each).\n",
        f.warm_txns, f.warm_clients, f.warm_secs, opt2(f.warm_first), opt2(f.warm_last),
        opt2(f.idle[0]), opt2(f.idle[1]), opt2(f.jit_idle), opt2(f.idle[2]), f.quiet_secs);
    let _ = writeln!(
        r,
        "| primitive | ops | wall ms p50 | client CPU ms/op | broker CPU ms/op | broker, without JIT compilers | how |"
    );
    let _ = writeln!(r, "|---|---|---|---|---|---|---|");
    for row in &f.rows {
        let client = match row.parent {
            Some(p) => format!("{} (+ {p:.2} spawning and reaping)", opt2(row.client)),
            None => opt2(row.client),
        };
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {} | {} | {}{} |",
            row.label,
            row.ops,
            pct(&row.wall, 50.0).map_or("-".into(), |x| format!("{x:.2}")),
            client,
            opt2(row.broker),
            opt2(row.broker_no_jit),
            row.how,
            row.note
                .as_ref()
                .map(|n| format!(" — {n}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(r);
    // The broker's threads for the transaction, the fence and the clients.
    for prefix in [
        "one transaction",
        "`init_transactions`, the same",
        "transactional producer created",
        "consumer created",
    ] {
        if let Some(row) = f.rows.iter().find(|x| x.label.starts_with(prefix)) {
            let top: Vec<String> = row
                .groups
                .iter()
                .filter(|g| g.1.abs() >= 0.05)
                .take(8)
                .map(|(g, v)| format!("{g} {v:.2}"))
                .collect();
            let total: f64 = row.groups.iter().map(|g| g.1).sum();
            if !top.is_empty() {
                let _ = writeln!(r, "The broker's threads for \"{}\" (ms per operation, less each group's idle rate; /proc/PID/task/*/schedstat, names from `jcmd`, digits as N; sum of all groups {total:.2}): {}.\n", row.label, top.join(", "));
            }
        }
    }
    // The floor.
    let get = |prefix: &str| f.rows.iter().find(|x| x.label.starts_with(prefix));
    let parts: Vec<(&str, f64, Option<&Row>)> = vec![
        ("process start", 1.0, get("process start: `pool_worker")),
        ("producer", 1.0, get("transactional producer created")),
        ("consumer", 1.0, get("consumer created")),
        ("fence", 1.0, get("`init_transactions`, the same")),
        ("transactions", 0.0, get("one transaction")),
        ("the order read", 1.0, get("reading one record back")),
    ];
    if parts.iter().all(|p| p.2.is_some()) {
        let _ = writeln!(r, "**The floor per order** (one process per order: one process start, its spawn and reap, a transactional producer and a consumer created and connected, one fence with the instance's `transactional.id`, N transactions of one record, the order read once; nothing else a worker does: no replay of the claims topic, no reading of the claims records, no job, no idle polling):\n");
        let _ = writeln!(
            r,
            "| N transactions per order | client CPU ms (pool's processes) | broker CPU ms | broker, without JIT compilers | issue 35's target (≤ 10 ms each): client / broker |"
        );
        let _ = writeln!(r, "|---|---|---|---|---|");
        let met = |x: f64| if x <= 10.0 { "met" } else { "not met" };
        for n in [3.0, 2.0] {
            let (mut c, mut b, mut bj) = (0.0, 0.0, 0.0);
            for (what, k, row) in &parts {
                let row = row.expect("checked");
                let k = if *what == "transactions" { n } else { *k };
                c += k * (row.client.unwrap_or(0.0) + row.parent.unwrap_or(0.0));
                b += k * row.broker.unwrap_or(0.0);
                bj += k * row.broker_no_jit.unwrap_or(0.0);
            }
            let _ = writeln!(
                r,
                "| {n:.0}{} | {c:.1} | {b:.1} | {bj:.1} | {} / {} (without JIT: {}) |",
                if n == 3.0 {
                    " (before the handed boot)"
                } else {
                    " (the worker today: the handed boot)"
                },
                met(c),
                met(b),
                met(bj)
            );
        }
        let _ = writeln!(r);
    }
    r
}
