//! The `account` section (issue 35, item 1: "account for every millisecond
//! first"): one order's wall and CPU time, phase by phase, in the pool's
//! processes and in the broker.
//!
//! ```text
//! BENCH_BROKER=apache BENCH_SECTIONS=account cargo bench --bench pool
//! ```
//!
//! `pool_worker supervise --instances 1-N` with the workers' defaults
//! (shipped standbys included) on one orders partition, job `true`, and
//! `POOL_WORKER_ACCOUNT` set: every pool process (supervisor, worker,
//! standby, guard) appends a line per point of an order's way to one file
//! (pool_worker/src/account.rs: wall clock, its CPU time, its reaped
//! children's). The bench reads that file as it goes (it has no Kafka
//! reader of its own, whose fetches would be broker CPU), and samples the
//! broker process's CPU (utime + stime from /proc/PID/stat) every ~1 ms.
//! Orders go one at a time: each once the previous one's process has
//! exited, its successor has booted and gone idle, and the successor's own
//! standby has caught up, then BENCH_ACCOUNT_GAP_MS (default 300) of
//! quiet. After BENCH_ACCOUNT_WARM orders (default 50: a fresh broker's JIT
//! compilers are still busy after 20), BENCH_ACCOUNT_ORDERS (default 150)
//! are measured.
//!
//! Each order is followed through the life of the process that ran it (P):
//! started as a standby while the order before ran (start, clients,
//! connection, replay, standing by), then, after `go`, the fence, `booted`,
//! the order, its exit, and the supervisor's reap and `go` to the next
//! standby. A row's pool CPU is the difference of the process's CPU time
//! between its two points (every thread of the process); its broker CPU is
//! the broker's CPU over the same wall interval (the windows of the active
//! process's rows follow each other without overlap; the standby's own start
//! overlaps the fence, `booted` and idle rows, so its broker cost is in
//! theirs). Wall: p50 over the orders; CPU: mean.
//!
//! Then, on Apache Kafka and at the first N only, BENCH_ACCOUNT_REQUESTS
//! orders (default 50) with the broker's request log on
//! (`kafka.request.logger=DEBUG`, set with kafka-configs, off again
//! after): the requests per order by API and their `localTimeMs`, which
//! splits the broker's request-handler CPU by request type (the logging
//! costs CPU itself, so no CPU figure is taken from that batch). The broker's
//! threads are named once with `jcmd PID Thread.print`, and their CPU
//! (/proc/PID/task/TID/schedstat) is summed by group over the measured batch.
//!
//! BENCH_ACCOUNT_NS (default `1,8`): the idle readers' cost is the
//! difference between N = 8 and N = 1 (every idle instance and its standby
//! read every claims record, and its orders consumer every order), after the
//! idle CPU (measured over BENCH_ACCOUNT_QUIET_SECS, default 5, before each
//! batch) is taken out.

use super::*;
use std::path::PathBuf;

/// One line of the accounting file.
#[derive(Clone, Debug)]
struct Mark {
    pid: u32,
    role: String,
    point: String,
    /// Wall clock, ms since the epoch.
    wall: f64,
    /// The process's CPU time so far, ms.
    cpu: f64,
    /// Its reaped children's CPU time so far, ms.
    children: f64,
    detail: String,
}

fn parse_mark(line: &str) -> Option<Mark> {
    let mut it = line.splitn(7, ' ');
    let pid = it.next()?.parse().ok()?;
    let role = it.next()?.to_string();
    let point = it.next()?.to_string();
    let us = |s: Option<&str>| {
        s.and_then(|s| s.parse::<u64>().ok())
            .map(|u| u as f64 / 1000.0)
    };
    let wall = us(it.next())?;
    let cpu = us(it.next())?;
    let children = us(it.next())?;
    let detail = it.next().unwrap_or("").trim().to_string();
    Some(Mark {
        pid,
        role,
        point,
        wall,
        cpu,
        children,
        detail,
    })
}

/// The accounting file, read as it grows.
/// A standby's mark that it is ready to be let go: caught up with the
/// log, or (R16, "Handed view") standing by without reading it, once
/// connected and told the orders' ends (its `caught_up` then comes after
/// its `go`).
fn standby_ready(m: &Mark) -> bool {
    m.point == "standing_by" || m.point == "caught_up"
}

struct Tail {
    path: PathBuf,
    off: u64,
    partial: String,
    marks: Vec<Mark>,
}

impl Tail {
    fn poll(&mut self) {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.off)).is_err() {
            return;
        }
        let mut s = String::new();
        if let Ok(n) = f.read_to_string(&mut s) {
            self.off += n as u64;
        }
        self.partial.push_str(&s);
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            if let Some(m) = parse_mark(line.trim_end()) {
                self.marks.push(m);
            }
        }
    }

    /// Standbys ready to be let go ([`standby_ready`]), each once.
    fn standbys_ready(&mut self) -> usize {
        self.poll();
        self.marks
            .iter()
            .filter(|m| m.role == "standby" && standby_ready(m))
            .map(|m| m.pid)
            .collect::<std::collections::HashSet<u32>>()
            .len()
    }

    fn count(&mut self, f: impl Fn(&Mark) -> bool) -> usize {
        self.poll();
        self.marks.iter().filter(|m| f(m)).count()
    }
}

/// A process's CPU time (utime + stime, clock ticks), sampled every ~1 ms
/// on a thread, with the wall clock (ms since the epoch).
struct CpuSampler {
    samples: Arc<Mutex<Vec<(f64, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CpuSampler {
    fn start(pid: u32) -> CpuSampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st2.load(Ordering::Relaxed) {
                if let Some(t) = cpu_ticks(pid) {
                    s2.lock().unwrap().push((now_ms(), t));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        CpuSampler {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// The CPU (ms) of the process over wall [a, b] (ms), from the samples
    /// nearest before each end.
    fn between(&self, a: f64, b: f64) -> Option<f64> {
        let s = self.samples.lock().unwrap();
        let at = |t: f64| {
            let i = s.partition_point(|&(w, _)| w <= t);
            (i > 0).then(|| s[i - 1].1)
        };
        let (x, y) = (at(a)?, at(b)?);
        Some(y.saturating_sub(x) as f64 * 1000.0 / clock_ticks_per_sec())
    }
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The broker's threads by full name (`jcmd PID Thread.print`: the kernel
/// keeps only 15 characters of a thread's name), tid -> name. (`nid` is
/// hexadecimal, `0x...`, in JDK 17, decimal in later ones.) The floor
/// section uses it too.
pub(super) fn jvm_thread_names(pid: u32) -> HashMap<u32, String> {
    let Ok(out) = Command::new("jcmd")
        .args([&pid.to_string(), "Thread.print"])
        .stderr(Stdio::null())
        .output()
    else {
        return HashMap::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut names = HashMap::new();
    for line in text.lines().filter(|l| l.starts_with('"')) {
        let Some(end) = line[1..].find('"') else {
            continue;
        };
        let Some(nid) = line.split_whitespace().find_map(|w| w.strip_prefix("nid=")) else {
            continue;
        };
        let tid = match nid.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => nid.parse().ok(),
        };
        if let Some(tid) = tid {
            names.insert(tid, line[1..=end].to_string());
        }
    }
    names
}

/// CPU time so far of each thread of `pid`, ns (schedstat), with its
/// kernel name.
fn thread_ns(pid: u32) -> HashMap<u32, (String, u64)> {
    pool_worker::account::thread_cpu(pid)
        .into_iter()
        .map(|(tid, name, ns)| (tid, (name, ns)))
        .collect()
}

/// A broker thread's group, by its full name (or its kernel name).
/// `controller_net`: the lowest tid of the controller listener's network
/// threads: a combined node's controller request handlers start before it,
/// its broker's after.
fn broker_group(tid: u32, name: &str, controller_net: u32) -> &'static str {
    if name.contains("request-handler") {
        if tid < controller_net {
            "controller request handlers"
        } else {
            "request handlers"
        }
    } else if name.contains("network-thread") && name.contains("CONTROLLER") {
        "controller network threads"
    } else if name.contains("network-thread") || name.contains("socket-acceptor") {
        "network threads (PLAINTEXT)"
    } else if name.starts_with("TxnMarkerSender")
        || name.starts_with("AddPartitionsToTxnSender")
        || name.starts_with("transaction-log")
    {
        "transaction coordinator's senders"
    } else if name.starts_with("GC Thread") || name.starts_with("G1 ") || name == "VM Thread" {
        "GC and VM thread"
    } else if name.contains("CompilerThread") {
        "JIT compilers"
    } else if name.contains("raft")
        || name.contains("controller")
        || name.contains("metadata")
        || name.starts_with("broker-1-to-con")
        || name.starts_with("broker-1-lifecy")
    {
        "KRaft, controller, metadata"
    } else {
        "other (schedulers, purgatory reapers, ...)"
    }
}

/// Per-group CPU (ms) between two snapshots of [`thread_ns`].
fn broker_groups(
    before: &HashMap<u32, (String, u64)>,
    after: &HashMap<u32, (String, u64)>,
    names: &HashMap<u32, String>,
) -> Vec<(String, f64)> {
    let controller_net = names
        .iter()
        .filter(|(_, n)| n.contains("network-thread") && n.contains("CONTROLLER"))
        .map(|(&t, _)| t)
        .min()
        .unwrap_or(0);
    let mut g: HashMap<&'static str, f64> = HashMap::new();
    for (tid, (comm, ns)) in after {
        let was = before.get(tid).map_or(0, |b| b.1);
        let name = names.get(tid).map_or(comm.as_str(), String::as_str);
        *g.entry(broker_group(*tid, name, controller_net))
            .or_default() += ns.saturating_sub(was) as f64 / 1e6;
    }
    let mut v: Vec<(String, f64)> = g.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    v
}

/// Requests of the request log (`Completed request:` lines of the node's
/// log from byte `from` to byte `to`): API name -> (count, Σ localTimeMs, Σ totalTimeMs).
fn request_log(path: &str, from: u64, to: u64) -> HashMap<String, (f64, f64, f64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut out: HashMap<String, (f64, f64, f64)> = HashMap::new();
    let Ok(mut f) = std::fs::File::open(path) else {
        return out;
    };
    let mut s = String::new();
    if f.seek(SeekFrom::Start(from)).is_err()
        || f.take(to.saturating_sub(from))
            .read_to_string(&mut s)
            .is_err()
    {
        return out;
    }
    for line in s.lines() {
        let Some(i) = line.find("Completed request:") else {
            continue;
        };
        let json =
            line[i + "Completed request:".len()..].trim_end_matches(" (kafka.request.logger)");
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            continue;
        };
        let h = &v["requestHeader"];
        let mut api = h["requestApiKeyName"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("api {}", h["requestApiKey"]));
        let client = h["clientId"].as_str().unwrap_or("");
        if client != "rdkafka" {
            api = format!("{api} (from {client})");
        }
        let e = out.entry(api).or_default();
        e.0 += 1.0;
        e.1 += v["localTimeMs"].as_f64().unwrap_or(0.0);
        e.2 += v["totalTimeMs"].as_f64().unwrap_or(0.0);
    }
    out
}

/// At the measured batch's start and end: the wall clock (ms), the pool's
/// process tree and the broker (clock ticks), the broker's threads.
type Snapshot = (f64, Option<u64>, Option<u64>, HashMap<u32, (String, u64)>);

/// One phase's figures over the measured orders.
#[derive(Default, Clone)]
pub(super) struct Row {
    label: String,
    how: String,
    wall: Vec<f64>,
    pool: Vec<f64>,
    broker: Vec<f64>,
    /// Wall not on the order's path (idle, or concurrent with other rows).
    off_path: bool,
    /// Left out of the per-order totals (idle waiting).
    idle: bool,
}

/// One N's figures.
#[derive(Default)]
pub(super) struct Account {
    pub(super) n: usize,
    /// The short run for the threads' split only.
    pub(super) threads_only: bool,
    orders: usize,
    pub(super) incomplete: Option<String>,
    rows: Vec<Row>,
    /// Whole-interval figures over the measured batch, ms per order: the
    /// pool's process tree and the broker; and their idle rates (ms/s).
    tree_per_order: Option<f64>,
    broker_per_order: Option<f64>,
    batch_secs: f64,
    idle_pool_ms_per_s: Option<f64>,
    idle_broker_ms_per_s: Option<f64>,
    /// A worker process's threads: name -> mean CPU ms per process.
    threads: Vec<(String, f64)>,
    /// The broker's thread groups: CPU ms per order over the batch, and
    /// less the group's idle rate.
    broker_groups: Vec<(String, f64, f64)>,
    /// Per order: API -> (requests, Σ localTimeMs, Σ totalTimeMs).
    requests: Vec<(String, (f64, f64, f64))>,
    request_orders: usize,
    /// Records read per standby between its catching up and `go`, and its
    /// CPU per record (ms).
    standby_reads: Vec<f64>,
    send_to_completed: Vec<f64>,
    /// Processes booted by their predecessor's last transaction (R16,
    /// "Handed boot"): no `booted` of their own.
    handed: usize,
    /// Processes that read nothing before `go` (R16, "Handed view").
    deferred: usize,
}

impl Account {
    /// The sum of the rows' means that count (not idle).
    fn totals(&self) -> (f64, f64) {
        let m = |v: &[f64]| mean(v).unwrap_or(0.0);
        self.rows
            .iter()
            .filter(|r| !r.idle)
            .fold((0.0, 0.0), |(p, b), r| (p + m(&r.pool), b + m(&r.broker)))
    }

    /// Busy CPU per order from the whole-interval figures, idle taken out
    /// (pool, broker), ms.
    fn busy(&self) -> (Option<f64>, Option<f64>) {
        let per_order_idle =
            |rate: Option<f64>| rate.map(|r| r * self.batch_secs / self.orders.max(1) as f64);
        (
            self.tree_per_order
                .zip(per_order_idle(self.idle_pool_ms_per_s))
                .map(|(a, b)| a - b),
            self.broker_per_order
                .zip(per_order_idle(self.idle_broker_ms_per_s))
                .map(|(a, b)| a - b),
        )
    }
}

impl Bench {
    /// N instances idle on one orders partition, orders one at a time,
    /// every process's points in the accounting file (see the module).
    /// `threads`: a short run with `POOL_WORKER_ACCOUNT_THREADS=1`, only for
    /// the split of a worker's CPU by thread (the listing costs the
    /// supervisor's reaping, see pool_worker/src/account.rs).
    pub(super) fn account_case(&mut self, n: usize, first: bool, threads: bool) -> Account {
        let warm: usize = if threads {
            5
        } else {
            env_or("BENCH_ACCOUNT_WARM", "50").parse().unwrap_or(50)
        };
        let m: usize = if threads {
            30
        } else {
            env_or("BENCH_ACCOUNT_ORDERS", "150").parse().unwrap_or(150)
        };
        let gap =
            Duration::from_millis(env_or("BENCH_ACCOUNT_GAP_MS", "300").parse().unwrap_or(300));
        let quiet: f64 = env_or("BENCH_ACCOUNT_QUIET_SECS", "5")
            .parse()
            .unwrap_or(5.0);
        let requests: usize = if first && !threads && self.broker.is_apache() {
            env_or("BENCH_ACCOUNT_REQUESTS", "50").parse().unwrap_or(50)
        } else {
            0
        };
        let mut res = Account {
            n,
            threads_only: threads,
            ..Default::default()
        };
        let tag = if threads { "t" } else { "" };
        let orders = format!("{}-acct{n}{tag}-orders", self.run);
        let claims = format!("{}-acct{n}{tag}-claims", self.run);
        if let Err(e) = self
            .broker
            .create(&orders, 1)
            .and_then(|()| self.broker.create(&claims, 1))
        {
            res.incomplete = Some(e);
            return res;
        }
        let state_dir = std::env::temp_dir().join(format!("pool_worker-bench-{claims}"));
        let file = std::env::temp_dir().join(format!("pool_worker-bench-{claims}.account"));
        let _ = std::fs::remove_file(&file);
        let mut env = vec![
            ("KAFKA_BROKERS", self.broker.bootstrap.clone()),
            ("ORDERS_TOPIC", orders.clone()),
            ("COORDINATION_TOPIC", claims.clone()),
            ("SETTLE_MS", "1000".to_string()),
            ("STATE_DIR", state_dir.display().to_string()),
            (pool_worker::account::VAR, file.display().to_string()),
        ];
        if threads {
            env.push(("POOL_WORKER_ACCOUNT_THREADS", "1".to_string()));
        }
        if !self.broker.is_apache() {
            env.extend(embedded_env());
        }
        let broker_pid = self.broker.pid();
        let names = if self.broker.is_apache() {
            jvm_thread_names(broker_pid)
        } else {
            HashMap::new()
        };
        let rss = Sampler::start();
        let sup = Supervisor::start(n, &env, None, &rss);
        let sup_pid = sup.child.id();
        let mut tail = Tail {
            path: file.clone(),
            off: 0,
            partial: String::new(),
            marks: Vec::new(),
        };
        let label = format!("account N={n}");
        let is_worker = |m: &Mark| m.role == "worker" || m.role == "standby";
        // Ready for order k: k + n processes have booted, and as many
        // standbys have caught up (each instance's first process and its
        // first standby, then one of each per order).
        let ready = |tail: &mut Tail, k: usize| {
            let want = n + k;
            let dl = Instant::now() + Duration::from_secs(30);
            wait_for(&format!("{label} ready"), want, dl, || {
                tail.count(|m| is_worker(m) && m.point == "boot_done")
                    .min(tail.standbys_ready())
            }) >= want
        };
        let mut sender = Sender::new(&self.broker.bootstrap);
        let sampler = CpuSampler::start(broker_pid);
        let mut sends: Vec<f64> = Vec::new();
        let mut batch: Option<Snapshot> = None;
        let mut idle_groups: HashMap<String, f64> = HashMap::new();
        let total = warm + m;
        for k in 0..=total {
            if !ready(&mut tail, k) {
                res.incomplete = Some(format!("the pool was not ready for order {k} in 30 s"));
                break;
            }
            if k == warm || k == total {
                // Quiet: the idle rates, before the measured batch.
                if k == warm {
                    progress(format!("{label}: idle CPU over {quiet} s"));
                    std::thread::sleep(gap);
                    let (t, b, th) = (
                        tree_ticks(sup_pid),
                        cpu_ticks(broker_pid),
                        thread_ns(broker_pid),
                    );
                    let w = Instant::now();
                    std::thread::sleep(Duration::from_secs_f64(quiet));
                    let secs = w.elapsed().as_secs_f64();
                    let (t2, b2, th2) = (
                        tree_ticks(sup_pid),
                        cpu_ticks(broker_pid),
                        thread_ns(broker_pid),
                    );
                    idle_groups = broker_groups(&th, &th2, &names)
                        .into_iter()
                        .map(|(g, ms)| (g, ms / secs))
                        .collect();
                    let rate = |a: Option<u64>, b: Option<u64>| {
                        Some(b?.checked_sub(a?)? as f64 * 1000.0 / clock_ticks_per_sec() / secs)
                    };
                    res.idle_pool_ms_per_s = rate(t, t2);
                    res.idle_broker_ms_per_s = rate(b, b2);
                    progress(format!("{label}: {m} orders measured"));
                } else {
                    std::thread::sleep(gap);
                }
                let snap = (
                    now_ms(),
                    tree_ticks(sup_pid),
                    cpu_ticks(broker_pid),
                    thread_ns(broker_pid),
                );
                if k == total {
                    if let Some((t0, tr0, br0, th0)) = batch.take() {
                        let hz = clock_ticks_per_sec();
                        let per = |a: Option<u64>, b: Option<u64>| {
                            Some(b?.checked_sub(a?)? as f64 * 1000.0 / hz / m as f64)
                        };
                        res.orders = m;
                        res.batch_secs = (snap.0 - t0) / 1000.0;
                        res.tree_per_order = per(tr0, snap.1);
                        res.broker_per_order = per(br0, snap.2);
                        let secs = res.batch_secs;
                        res.broker_groups = broker_groups(&th0, &snap.3, &names)
                            .into_iter()
                            .map(|(g, ms)| {
                                let idle = idle_groups.get(&g).copied().unwrap_or(0.0);
                                (g, ms / m as f64, (ms - idle * secs) / m as f64)
                            })
                            .collect();
                    }
                    sends.push(snap.0);
                    break;
                }
                batch = Some(snap);
            } else {
                std::thread::sleep(gap);
            }
            sends.push(now_ms());
            sender.send(&orders, 0);
            let dl = Instant::now() + Duration::from_secs(30);
            if wait_for(&label, k + 1, dl, || {
                tail.count(|m| m.role == "supervise" && m.point == "reaped")
            }) < k + 1
            {
                res.incomplete = Some(format!("order {k} was not done in 30 s"));
                break;
            }
        }
        // The request log: the requests of each order, by type.
        if requests > 0 && res.incomplete.is_none() {
            if let BrokerKind::Apache { dir, lib, .. } = &self.broker.kind {
                let tools = lib.trim_end_matches("/lib").to_string() + "/bin";
                let log = format!("{dir}/node-1/kafka.log");
                let set = |level: &str| {
                    Command::new(format!("{tools}/kafka-configs.sh"))
                        .args(["--bootstrap-server", &self.broker.bootstrap])
                        .args(["--alter", "--entity-type", "broker-loggers"])
                        .args(["--entity-name", "1", "--add-config"])
                        .arg(format!("kafka.request.logger={level}"))
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success())
                };
                progress(format!(
                    "{label}: {requests} orders with the request log on"
                ));
                if set("DEBUG") {
                    // The tool's own requests first.
                    std::thread::sleep(Duration::from_millis(500));
                    let from = std::fs::metadata(&log).map_or(0, |m| m.len());
                    let mut done = 0;
                    for j in 0..requests {
                        let k = total + j;
                        if !ready(&mut tail, k) {
                            break;
                        }
                        std::thread::sleep(gap);
                        sender.send(&orders, 0);
                        let dl = Instant::now() + Duration::from_secs(30);
                        if wait_for(&label, k + 1, dl, || {
                            tail.count(|m| m.role == "supervise" && m.point == "reaped")
                        }) < k + 1
                        {
                            break;
                        }
                        done += 1;
                    }
                    let _ = ready(&mut tail, total + done);
                    std::thread::sleep(gap);
                    let to = std::fs::metadata(&log).map_or(0, |m| m.len());
                    set("WARN");
                    let mut v: Vec<(String, (f64, f64, f64))> = request_log(&log, from, to)
                        .into_iter()
                        .map(|(k, (c, l, t))| {
                            let d = done.max(1) as f64;
                            (k, (c / d, l / d, t / d))
                        })
                        .collect();
                    v.sort_by(|a, b| {
                        b.1 .1
                            .partial_cmp(&a.1 .1)
                            .unwrap_or(std::cmp::Ordering::Equal)
                    });
                    res.requests = v;
                    res.request_orders = done;
                }
            }
        }
        sup.stop();
        let _ = std::fs::remove_dir_all(&state_dir);
        tail.poll();
        if res.orders > 0 {
            analyse(&mut res, &tail.marks, &sends[warm..], &sampler);
        }
        drop(sampler);
        let _ = std::fs::remove_file(&file);
        res
    }
}

/// Follows each measured order through the process that ran it (see the
/// module doc) and fills the rows.
fn analyse(res: &mut Account, marks: &[Mark], sends: &[f64], broker: &CpuSampler) {
    let mut by_pid: HashMap<u32, Vec<&Mark>> = HashMap::new();
    for mk in marks {
        by_pid.entry(mk.pid).or_default().push(mk);
    }
    for v in by_pid.values_mut() {
        v.sort_by(|a, b| {
            a.wall
                .partial_cmp(&b.wall)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    let sup: Vec<&Mark> = {
        let mut v: Vec<&Mark> = marks.iter().filter(|m| m.role == "supervise").collect();
        v.sort_by(|a, b| {
            a.wall
                .partial_cmp(&b.wall)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        v
    };
    let guards: Vec<&Mark> = marks
        .iter()
        .filter(|m| m.role == "guard" && m.point == "exit")
        .collect();
    let guard_mains: Vec<&Mark> = marks
        .iter()
        .filter(|m| m.role == "guard" && m.point == "main")
        .collect();
    // Row names, in order; (label, how, off_path, idle).
    let specs: &[(&str, &str, bool, bool)] = &[
        ("standby: process start (fork server's fork → main)", "supervisor's mark before the spawn → the process's first mark; CPU: the process's CPU time at main (the fork server's child setting itself up; with `--no-fork-server`, fork + exec: the exec, dynamic linking, Rust start-up)", true, false),
        ("standby: runtime, configuration, logging", "main → configured (tokio runtime, environment read, tracing set up)", true, false),
        ("standby: Kafka clients created", "configured → clients (job base, isolation, the two librdkafka clients and their threads)", true, false),
        ("standby: connection and topic checks (open)", "clients → open (connections, metadata, the topics' checks)", true, false),
        ("standby: replay: checkpoint lookup, assign", "open → replay (the claims topic's watermarks, the checkpoint search, the claims partition assigned where the replay starts)", true, false),
        ("standby: replay: read to the end", "replay → first caught up (fetched, checked, decoded and folded)", true, false),
        ("standby: standing by (paused once caught up)", "caught up → `go` (wall: waiting for the previous process; CPU: its idle threads, and any record read before its pause)", true, false),
        ("fence (init_transactions)", "`go` → fenced", false, false),
        ("append `booted`: its transaction committed", "fenced → `booted` acknowledged (begin, produce, commit: AddPartitionsToTxn, Produce, EndTxn answered); 0 for a process whose predecessor's last transaction held its `booted` (R16, \"Handed boot\")", false, false),
        ("read `booted` back", "acknowledged (handed: `go`'s fence step) → own `booted` read (its commit marker written, the held fetch answered, the record decoded)", false, false),
        ("choose: the orders' end offsets, go idle", "`booted` read back → first ListOffsets answered", false, false),
        ("idle, waiting for the order", "→ the order arrives (bench's gap; not counted)", true, true),
        ("the order reaches the worker", "bench's send → the orders consumer's wake-up (the bench's produce, the held fetch's answer)", false, false),
        ("claim decision, the order read first", "order arrived → `claimed` appended (ListOffsets, the order's message read for its key, R56, the machine)", false, false),
        ("append `claimed`: its transaction committed", "append → acknowledged", false, false),
        ("read `claimed` back", "acknowledged → own record read", false, false),
        ("append `committed`: its transaction committed", "own `claimed` read → `committed` acknowledged (none where the claim met no rival: it is the commit, R34)", false, false),
        ("read `committed` back", "acknowledged → own `committed` read", false, false),
        ("fetch the order's message", "own commit read (the claim, or a `committed`) → order parsed (its message kept from the read before the claim)", false, false),
        ("job start: spawn job and guard", "fetched → guard started (worker side)", false, false),
        ("job runs (`true`), reaped", "guard started → job done (worker side; job's and guard's own CPU below)", false, false),
        ("append `completed`: its transaction committed", "job done → `completed` acknowledged", false, false),
        ("read `completed` back", "acknowledged → own `completed` read", false, false),
        ("exit: flush, clean-exit marker", "own `completed` read → last mark before exit(2)", false, false),
        ("process teardown, reaped by the supervisor", "last mark → supervisor's reap; CPU: the supervisor's RUSAGE_CHILDREN step less the process's last mark and its children (off the path: the standby is let go at the process's `done`, before it)", true, false),
        ("supervisor: `go` to the standby", "the process's `done` (its reap, without one) → the standby reads `go`", false, false),
        ("supervisor process (its whole CPU)", "the supervisor's CPU between two reaps (spawning the next standby, reaping, `go`)", true, false),
        ("job process (`true`)", "worker's RUSAGE_CHILDREN step over the job, less the guard's", true, false),
        ("guard process", "the guard's own CPU at the job's end (the guard host's: its fork at the worker's start included)", true, false),
    ];
    let mut rows: Vec<Row> = specs
        .iter()
        .map(|(l, h, off, idle)| Row {
            label: l.to_string(),
            how: h.to_string(),
            off_path: *off,
            idle: *idle,
            ..Default::default()
        })
        .collect();
    let mut threads: HashMap<String, Vec<f64>> = HashMap::new();
    let mut nproc = 0usize;
    for (k, &send) in sends.iter().enumerate().take(res.orders) {
        let next_send = sends.get(k + 1).copied().unwrap_or(f64::MAX);
        // P: the process that appended `claimed` first after the send.
        let Some(claim) = marks
            .iter()
            .filter(|m| m.point == "append" && m.detail == "claimed" && m.wall > send)
            .min_by(|a, b| {
                a.wall
                    .partial_cmp(&b.wall)
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
        else {
            continue;
        };
        let p = claim.pid;
        let Some(pm) = by_pid.get(&p) else { continue };
        let find = |point: &str, detail: &str| {
            pm.iter()
                .find(|m| m.point == point && (detail.is_empty() || m.detail == detail))
                .copied()
        };
        let find_after = |point: &str, after: f64| {
            pm.iter()
                .find(|m| m.point == point && m.wall >= after)
                .copied()
        };
        let pid_s = p.to_string();
        let spawned = sup
            .iter()
            .position(|m| m.point == "spawned_standby" && m.detail == pid_s);
        let spawn = spawned.and_then(|i| i.checked_sub(1)).map(|i| sup[i]);
        let reaped_i = sup
            .iter()
            .position(|m| m.point == "reaped" && m.detail == pid_s);
        let reaped = reaped_i.map(|i| sup[i]);
        let prev_reap =
            reaped_i.and_then(|i| sup[..i].iter().rev().find(|m| m.point == "reaped").copied());
        // P says `done` before its exit and its standby is let go then
        // (pool_worker/src/supervise/ready.rs); without the word, at P's
        // reap. Either way the first `go` after P's `exit_begin`.
        let exit_begin = find("exit_begin", "");
        let go_sent = exit_begin.and_then(|e| {
            sup.iter()
                .find(|m| m.point == "go_sent" && m.wall >= e.wall)
                .copied()
        });
        let done = exit_begin.and_then(|e| {
            sup.iter()
                .find(|m| m.point == "done" && m.wall >= e.wall)
                .copied()
        });
        let q = go_sent.and_then(|g| g.detail.parse::<u32>().ok());
        let q_go = q
            .and_then(|q| by_pid.get(&q))
            .and_then(|v| v.iter().find(|m| m.point == "go").copied());
        let (Some(main), Some(configured), Some(clients), Some(open), Some(caught), Some(go)) = (
            find("main", ""),
            find("configured", ""),
            find("clients", ""),
            find("open", ""),
            find("caught_up", ""),
            find("go", ""),
        ) else {
            continue;
        };
        let Some(replay) = find("replay", "") else {
            continue;
        };
        let (Some(fenced), Some(booted_read), Some(arrived), Some(app_claimed), Some(claimed_read)) = (
            find("fenced", ""),
            find("read", "booted own"),
            find_after("order_arrived", send),
            find("append", "claimed"),
            find("read", "claimed own"),
        ) else {
            continue;
        };
        // R34: an uncontested claim is its own commit; a `committed` is
        // read back only where the claim met a rival.
        let committed_read = find("read", "committed own");
        let committed_acked = find("acked", "committed");
        // Each append's acknowledgement: its transaction committed
        // (`Kafka::append_all` returned), before the record is read back.
        // A process booted by its predecessor's last transaction (R16,
        // "Handed boot") appends no `booted`: it has no such row, and
        // reads its `booted` back from the fence on (`go handed`).
        let booted_acked = find("acked", "booted");
        let (Some(claimed_acked), Some(completed_acked)) =
            (find("acked", "claimed"), find("acked", "completed"))
        else {
            continue;
        };
        let (Some(fetched), Some(guard_started), Some(job_done)) = (
            find("fetched", ""),
            find("guard_started", ""),
            find("job_done", ""),
        ) else {
            continue;
        };
        let (Some(completed_read), Some(exit), Some(job_spawn)) = (
            find("read", "completed own"),
            find("exit", ""),
            find("job_spawn", ""),
        ) else {
            continue;
        };
        // The last mark: the thread listing when asked for, else `exit`.
        let threads_mk = find("threads", "").unwrap_or(exit);
        let Some(ends) = find_after("order_ends", booted_read.wall) else {
            continue;
        };
        let (Some(reaped), Some(prev_reap), Some(q_go)) = (reaped, prev_reap, q_go) else {
            continue;
        };
        // The standby started at the `go` to P: its catching up bounds
        // the idle window (its broker cost belongs to this order).
        let s_caught = sup
            .iter()
            .find(|m| m.point == "spawned_standby" && m.wall >= go.wall - 5.0)
            .and_then(|m| m.detail.parse::<u32>().ok())
            .and_then(|s| by_pid.get(&s))
            .and_then(|v| v.iter().find(|m| standby_ready(m)).copied());
        let idle_from = s_caught
            .map_or(ends.wall, |s| s.wall.max(ends.wall))
            .min(send);
        let bw = |a: f64, b: f64| broker.between(a, b);
        let d = |a: &Mark, b: &Mark| b.cpu - a.cpu;
        let mut put = |i: usize, wall: Option<f64>, pool: Option<f64>, brk: Option<f64>| {
            if let Some(w) = wall {
                rows[i].wall.push(w);
            }
            if let Some(c) = pool {
                rows[i].pool.push(c);
            }
            if let Some(b) = brk {
                rows[i].broker.push(b);
            }
        };
        put(0, spawn.map(|s| main.wall - s.wall), Some(main.cpu), None);
        put(
            1,
            Some(configured.wall - main.wall),
            Some(d(main, configured)),
            None,
        );
        put(
            2,
            Some(clients.wall - configured.wall),
            Some(d(configured, clients)),
            None,
        );
        put(
            3,
            Some(open.wall - clients.wall),
            Some(d(clients, open)),
            None,
        );
        // R16, "Handed view": a standby that reads nothing before `go`
        // starts its replay after it (from its predecessor's view, or the
        // newest checkpoint), on the order's path; its reading to its own
        // `booted` is the row "read `booted` back".
        let deferred = replay.wall > go.wall;
        if deferred {
            res.deferred += 1;
            put(
                4,
                Some(replay.wall - fenced.wall),
                Some(d(fenced, replay)),
                bw(fenced.wall, replay.wall),
            );
            put(5, Some(0.0), Some(0.0), Some(0.0));
            put(6, Some(go.wall - open.wall), Some(d(open, go)), None);
        } else {
            put(
                4,
                Some(replay.wall - open.wall),
                Some(d(open, replay)),
                None,
            );
            put(
                5,
                Some(caught.wall - replay.wall),
                Some(d(replay, caught)),
                None,
            );
            put(6, Some(go.wall - caught.wall), Some(d(caught, go)), None);
        }
        let reads = pm
            .iter()
            .filter(|m| {
                m.point == "read"
                    && m.detail.ends_with(" other")
                    && m.wall > caught.wall
                    && m.wall < go.wall
            })
            .count();
        if reads > 0 {
            res.standby_reads.push(d(caught, go) / reads as f64);
        }
        put(
            7,
            Some(fenced.wall - go.wall),
            Some(d(go, fenced)),
            bw(go.wall, fenced.wall),
        );
        if let Some(booted_acked) = booted_acked {
            put(
                8,
                Some(booted_acked.wall - fenced.wall),
                Some(d(fenced, booted_acked)),
                bw(fenced.wall, booted_acked.wall),
            );
        } else {
            // Nothing appended: the row costs nothing on this order's path.
            put(8, Some(0.0), Some(0.0), Some(0.0));
            res.handed += 1;
        }
        let acked = booted_acked.unwrap_or(if deferred { replay } else { fenced });
        put(
            9,
            Some(booted_read.wall - acked.wall),
            Some(d(acked, booted_read)),
            bw(acked.wall, booted_read.wall),
        );
        put(
            10,
            Some(ends.wall - booted_read.wall),
            Some(d(booted_read, ends)),
            bw(booted_read.wall, idle_from),
        );
        put(
            11,
            Some(send - ends.wall),
            Some(d(ends, arrived)),
            bw(idle_from, send),
        );
        put(12, Some(arrived.wall - send), None, bw(send, arrived.wall));
        put(
            13,
            Some(app_claimed.wall - arrived.wall),
            Some(d(arrived, app_claimed)),
            bw(arrived.wall, app_claimed.wall),
        );
        put(
            14,
            Some(claimed_acked.wall - app_claimed.wall),
            Some(d(app_claimed, claimed_acked)),
            bw(app_claimed.wall, claimed_acked.wall),
        );
        put(
            15,
            Some(claimed_read.wall - claimed_acked.wall),
            Some(d(claimed_acked, claimed_read)),
            bw(claimed_acked.wall, claimed_read.wall),
        );
        if let (Some(committed_acked), Some(committed_read)) = (committed_acked, committed_read) {
            put(
                16,
                Some(committed_acked.wall - claimed_read.wall),
                Some(d(claimed_read, committed_acked)),
                bw(claimed_read.wall, committed_acked.wall),
            );
            put(
                17,
                Some(committed_read.wall - committed_acked.wall),
                Some(d(committed_acked, committed_read)),
                bw(committed_acked.wall, committed_read.wall),
            );
        }
        let decided = committed_read.unwrap_or(claimed_read);
        put(
            18,
            Some(fetched.wall - decided.wall),
            Some(d(decided, fetched)),
            bw(decided.wall, fetched.wall),
        );
        put(
            19,
            Some(guard_started.wall - fetched.wall),
            Some(d(fetched, guard_started)),
            bw(fetched.wall, guard_started.wall),
        );
        put(
            20,
            Some(job_done.wall - guard_started.wall),
            Some(d(guard_started, job_done)),
            bw(guard_started.wall, job_done.wall),
        );
        put(
            21,
            Some(completed_acked.wall - job_done.wall),
            Some(d(job_done, completed_acked)),
            bw(job_done.wall, completed_acked.wall),
        );
        put(
            22,
            Some(completed_read.wall - completed_acked.wall),
            Some(d(completed_acked, completed_read)),
            bw(completed_acked.wall, completed_read.wall),
        );
        put(
            23,
            Some(exit.wall - completed_read.wall),
            Some(d(completed_read, exit)),
            bw(completed_read.wall, exit.wall),
        );
        // P's whole CPU: the supervisor's children step at its reap, less
        // P's own children (job, guard).
        let p_total = reaped.children - prev_reap.children - threads_mk.children;
        put(
            24,
            Some(reaped.wall - exit.wall),
            Some(p_total - threads_mk.cpu),
            bw(exit.wall, reaped.wall),
        );
        // From P's `done`, when the supervisor heard it before the reap.
        let end = done.filter(|d| d.wall <= reaped.wall).unwrap_or(reaped);
        put(
            25,
            Some(q_go.wall - end.wall),
            None,
            bw(end.wall, q_go.wall.min(next_send)),
        );
        put(26, None, Some(reaped.cpu - prev_reap.cpu), None);
        // The job's guard: the worker's guard host (a copy forked at the
        // worker's start, which marks `main hosted` when it takes the job
        // and `exit` when it ends) or a guard process of the job's own.
        // Either way its CPU at the job's end is all it has spent; only a
        // guard process is the worker's reaped child (in its children's
        // step), the host is reaped after the worker.
        let guard = guard_mains
            .iter()
            .find(|g| g.wall >= job_spawn.wall && g.wall <= job_done.wall)
            .and_then(|g| {
                guards
                    .iter()
                    .find(|e| e.pid == g.pid && e.wall >= g.wall)
                    .map(|e| (e, g.detail == "hosted"))
            });
        let kids = job_done.children - job_spawn.children;
        if let Some((g, hosted)) = guard {
            put(
                27,
                None,
                Some(if hosted { kids } else { kids - g.cpu }),
                None,
            );
            put(28, None, Some(g.cpu), None);
        }
        if let Some(c) = marks
            .iter()
            .find(|m| m.pid == p && m.point == "acked" && m.detail == "completed")
        {
            res.send_to_completed.push(c.wall - send);
        }
        nproc += 1;
        for t in threads_mk.detail.split_whitespace() {
            if let Some((name, us)) = t.rsplit_once('=') {
                let name = if name.starts_with("rdk:broker") {
                    "rdk:broker* (librdkafka's broker threads)"
                } else {
                    name
                };
                let us: f64 = us.parse().unwrap_or(0.0);
                threads
                    .entry(name.to_string())
                    .or_default()
                    .push(us / 1000.0);
            }
        }
    }
    let mut th: Vec<(String, f64)> = threads
        .into_iter()
        .map(|(k, v)| (k, v.iter().sum::<f64>() / nproc.max(1) as f64))
        .collect();
    th.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    res.threads = th;
    if res.deferred > 0 {
        // R16, "Handed view": the replay is after `go`, on the path.
        rows[4].label = "replay: the handed view taken (R16, \"Handed view\"), or the checkpoint search; the claims partition assigned".into();
        rows[4].how = "`go`'s fence step → replay (a standby reads nothing before `go`)".into();
        rows[4].off_path = false;
        rows[5].label = "standby: replay: read to the end".into();
        rows[5].how = "0 where the standby reads nothing before `go`: its reading up to its own `booted` is the row \"read `booted` back\"".into();
        rows[6].label = "standby: standing by".into();
        rows[6].how = "open → `go` (wall: waiting for the previous process; CPU: its idle threads; a standby that reads before `go`: caught up → `go`)".into();
        rows[9].how = "acknowledged (handed: `go`'s fence step; with a handed view, the replay's start) → own `booted` read (its commit marker written, the held fetch answered, the record decoded)".into();
    }
    res.rows = rows;
}

/// The section of RESULTS.md.
pub(super) fn account_report(results: &[Account], on: &str, date: &str) -> String {
    use std::fmt::Write as _;
    let mut r = String::new();
    let _ = writeln!(r, "## Where an order's milliseconds go{on}\n");
    let _ = writeln!(r, "Measured {date} with `BENCH_SECTIONS=account` ({}; pool_worker/benches/pool/account.rs explains the method). `pool_worker supervise --instances 1-N`, the workers' defaults (standbys on), one orders partition, job `true`, `POOL_WORKER_ACCOUNT` set so that every pool process marks its points in one file; orders one at a time, each once the pool is idle again (the previous process gone, its successor booted and idle, the successor's standby caught up) plus {} ms. Pool CPU: the process's CPU time between two of its own points (all its threads: its own, tokio's, librdkafka's); broker CPU: the broker JVM's over the same wall interval (utime + stime sampled every ~1 ms, 10 ms ticks, so a row's figure is only good as a mean over many orders). CPU time is less sensitive to the machine's load than wall time: prefer it when comparing runs. Rows marked ⊥ are not on the order's path (concurrent with the previous order, or idle); \"idle\" rows are left out of the totals.\n",
        account_knobs(), env_or("BENCH_ACCOUNT_GAP_MS", "300"));
    for a in results.iter().filter(|a| !a.threads_only) {
        let (pool, brk) = a.totals();
        let _ = writeln!(
            r,
            "### N = {} instance{} ({} orders measured){}\n",
            a.n,
            if a.n == 1 { "" } else { "s" },
            a.orders,
            a.incomplete
                .as_ref()
                .map(|s| format!(" — INCOMPLETE: {s}"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            r,
            "| phase | wall ms p50 | CPU ms, pool processes | CPU ms, broker | how measured |"
        );
        let _ = writeln!(r, "|---|---|---|---|---|");
        let f = |v: &[f64]| mean(v).map_or("-".into(), |x| format!("{x:.2}"));
        for row in &a.rows {
            let mark = if row.idle {
                " (idle)"
            } else if row.off_path {
                " ⊥"
            } else {
                ""
            };
            let _ = writeln!(
                r,
                "| {}{} | {} | {} | {} | {} |",
                row.label,
                mark,
                fmt_ms(pct(&row.wall, 50.0)),
                f(&row.pool),
                f(&row.broker),
                row.how
            );
        }
        let (bp, bb) = a.busy();
        let on_path: f64 = a
            .rows
            .iter()
            .filter(|r| !r.off_path && !r.idle)
            .filter_map(|r| pct(&r.wall, 50.0))
            .sum();
        let _ = writeln!(r, "| **total per order** (rows not idle) | {on_path:.1} (Σ p50 of the rows on the path) | **{pool:.1}** | **{brk:.1}** | sums of the rows' means |");
        let opt = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}"));
        let _ = writeln!(r, "| whole interval, less idle | | {} | {} | the supervisor's process tree (utime + stime + cutime + cstime, /proc) and the broker's, over the {:.0} s batch ÷ orders ({} and {}), less the idle rates measured before it × the batch's time ({} and {} ms/s) |",
            opt(bp), opt(bb), a.batch_secs, opt(a.tree_per_order), opt(a.broker_per_order), opt(a.idle_pool_ms_per_s), opt(a.idle_broker_ms_per_s));
        let _ = writeln!(r, "\nProcesses booted by their predecessor's last transaction (no `booted` of their own, R16 \"Handed boot\"): {} of the {} measured; that read nothing before `go` (R16, \"Handed view\"): {}.", a.handed, a.rows.get(8).map_or(0, |row| row.wall.len()), a.deferred);
        let _ = writeln!(r, "\nsend → `completed` acknowledged: p50 {} ms, p99 {} ms. Standing by, a standby spends {} ms of CPU per record it reads (its CPU from catching up to `go` ÷ the records it read meanwhile, its idle polling included; `-`: it read none, its claims partition paused once caught up).\n",
            fmt_ms(pct(&a.send_to_completed, 50.0)), fmt_ms(pct(&a.send_to_completed, 99.0)), f(&a.standby_reads));
        if !a.broker_groups.is_empty() {
            let _ = writeln!(r, "The broker's CPU per order by thread group (ms; /proc/PID/task/*/schedstat over the batch ÷ orders, then less each group's idle rate from the quiet interval before it; names from `jcmd PID Thread.print`):\n");
            let _ = writeln!(r, "| broker threads | CPU ms per order | less idle |");
            let _ = writeln!(r, "|---|---|---|");
            for (g, all, busy) in &a.broker_groups {
                let _ = writeln!(r, "| {g} | {all:.2} | {busy:.2} |");
            }
            let sum =
                |f: &dyn Fn(&(String, f64, f64)) -> f64| a.broker_groups.iter().map(f).sum::<f64>();
            let jit = a
                .broker_groups
                .iter()
                .filter(|g| g.0 == "JIT compilers")
                .map(|g| g.2)
                .sum::<f64>();
            let _ = writeln!(r, "| all | {:.2} | {:.2} ({:.2} without the JIT compilers, which are still busy on a broker started minutes before) |\n",
                sum(&|g| g.1), sum(&|g| g.2), sum(&|g| g.2) - jit);
        }
        if !a.requests.is_empty() {
            let handlers = a
                .broker_groups
                .iter()
                .find(|g| g.0 == "request handlers")
                .map(|g| g.2);
            let local: f64 = a.requests.iter().map(|(_, v)| v.1).sum();
            let _ = writeln!(r, "Requests per order by type ({} orders with `kafka.request.logger=DEBUG`; `localTimeMs`, the time a request handler spent on it, is the handlers' CPU split; the share column divides the request handlers' {} ms per order by it):\n",
                a.request_orders, opt(handlers));
            let _ = writeln!(r, "| request | per order | Σ localTimeMs per order | Σ totalTimeMs per order (includes held fetches) | request handlers' CPU ms, by local time |");
            let _ = writeln!(r, "|---|---|---|---|---|");
            for (api, (c, l, t)) in &a.requests {
                let share = handlers.map_or("-".into(), |h| {
                    format!("{:.2}", if local > 0.0 { h * l / local } else { 0.0 })
                });
                let _ = writeln!(r, "| {api} | {c:.1} | {l:.2} | {t:.0} | {share} |");
            }
            let _ = writeln!(r);
        }
    }
    for a in results
        .iter()
        .filter(|a| a.threads_only && !a.threads.is_empty())
    {
        let _ = writeln!(r, "**A worker process's CPU by thread** (N = {}, {} orders with `POOL_WORKER_ACCOUNT_THREADS=1`, run apart because the listing of /proc/self/task at exit makes the supervisor's reaping dearer; mean per process, ms, from /proc/self/task/*/schedstat at its exit): {}.\n",
            a.n, a.orders, a.threads.iter().map(|(t, ms)| format!("{t} {ms:.2}")).collect::<Vec<_>>().join(", "));
    }
    if let (Some(one), Some(more)) = (
        results.iter().find(|a| a.n == 1 && !a.threads_only),
        results.iter().find(|a| a.n > 1 && !a.threads_only),
    ) {
        let (p1, b1) = one.busy();
        let (pn, bn) = more.busy();
        let extra = (more.n - 1) as f64;
        // The broker's threads less idle, without the JIT compilers.
        let no_jit = |a: &Account| {
            (!a.broker_groups.is_empty()).then(|| {
                a.broker_groups
                    .iter()
                    .filter(|g| g.0 != "JIT compilers")
                    .map(|g| g.2)
                    .sum::<f64>()
            })
        };
        if let (Some(p1), Some(b1), Some(pn), Some(bn)) = (p1, b1, pn, bn) {
            let _ = writeln!(r, "**Idle readers.** Per order, less idle: pool {p1:.1} ms at N = 1 and {pn:.1} at N = {}; broker {b1:.1} and {bn:.1}{}. Each of the {} extra idle instances (a worker and its standby, each reading every claims record; the worker's orders consumer reading the order) costs {:.2} ms of pool CPU per order ({:.2} ms per claims record written, 4 per order, and reading process) and {:.2} ms of broker CPU per order{}. A difference smaller than the broker's idle-rate noise (its JIT compilers and background threads come and go; see the groups' \"less idle\" columns, some negative) is no measurement: the broker figure is only good to about ±1 ms per order.\n",
                more.n,
                match (no_jit(one), no_jit(more)) {
                    (Some(x), Some(y)) => format!(" ({x:.1} and {y:.1} without the JIT compilers)"),
                    _ => String::new(),
                },
                more.n - 1, (pn - p1) / extra, (pn - p1) / extra / 8.0, (bn - b1) / extra,
                match (no_jit(one), no_jit(more)) {
                    (Some(x), Some(y)) => format!(" ({:.2} without the JIT compilers)", (y - x) / extra),
                    _ => String::new(),
                });
        }
    }
    r
}

fn account_knobs() -> String {
    let mut k: Vec<String> = [
        "BENCH_ACCOUNT_NS",
        "BENCH_ACCOUNT_WARM",
        "BENCH_ACCOUNT_ORDERS",
        "BENCH_ACCOUNT_GAP_MS",
        "BENCH_ACCOUNT_QUIET_SECS",
        "BENCH_ACCOUNT_REQUESTS",
    ]
    .iter()
    .map(|v| {
        format!(
            "{v}={}",
            env_or(
                v,
                match *v {
                    "BENCH_ACCOUNT_NS" => "1,8",
                    "BENCH_ACCOUNT_WARM" => "50",
                    "BENCH_ACCOUNT_ORDERS" => "150",
                    "BENCH_ACCOUNT_GAP_MS" => "300",
                    "BENCH_ACCOUNT_QUIET_SECS" => "5",
                    _ => "50",
                }
            )
        )
    })
    .collect();
    k.insert(
        0,
        "BENCH_BROKER=".to_string() + &env_or("BENCH_BROKER", "embedded"),
    );
    k.join(" ")
}
