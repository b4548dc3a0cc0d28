//! Chaos tests: the real binary under random SIGKILLs, broker outages and
//! added round-trip time, plus the lease takeover of an instance that never
//! comes back, a poison order, and a job past its time limit.
//!
//! The chaos test (`chaos_kills_and_outages_lose_nothing`) runs a pool of
//! supervised instances with a short lease (`LEASE_MS` of a few seconds),
//! kills a random instance about every 0.3 s (so kills land at boot, during
//! negotiation, while a job runs and between `completed` and exit), takes
//! the broker down twice and slows it down for a while, then stops the chaos
//! and waits for every order to complete. It is judged by the claims topic
//! (the audit of `pool_worker/tests/live/common`, which understands lease takeovers: see
//! [`crate::common::Audit::check_exactly_once`]) and by the ledger the jobs write
//! ("P:O:ATTEMPT:WORKER_PID", one line per run, written as the job starts).
//! A run twice is accepted only when the earlier run's worker was SIGKILLed
//! by the test (its pid is among the kills and the supervisor saw it die of
//! SIGKILL) or the incarnation that committed that attempt lost its hold to
//! a valid revocation; the later run must carry a higher `ORDER_ATTEMPT`.
//! It prints, and appends to
//! `target/figures.txt`:
//!
//! `chaos: faults injected N (kills K, outages O), orders M, lost 0, completed twice 0, committed by two 0, ran twice R (killed while running R)`
//!
//! The long version is ignored by default; run it with
//!
//! ```text
//! POOL_CHAOS_ORDERS=500 cargo test --release --test live chaos::chaos_long -- --ignored --nocapture
//! ```
//!
//! Its knobs (environment): `POOL_CHAOS_ORDERS` (500), `POOL_CHAOS_SECS`
//! (seconds of chaos; orders/6), `POOL_CHAOS_INSTANCES` (8),
//! `POOL_CHAOS_LEASE_MS` (3000), `POOL_CHAOS_SEED` (random; printed, and
//! honoured by the CI test too to replay a run's schedule of kills).

use crate::common::*;
use pool_worker::record::{Event, OrderId, Record, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

/// Whether process `pid` still runs (exists and is not a zombie).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Live (non-zombie) processes whose command line is exactly `argv`.
fn processes_with_argv(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| alive(*pid))
        .collect()
}

/// The pid of each incarnation, from the workers' "booting" log lines
/// (`incarnation=<random id> pid=<pid>`; the id itself names no pid).
fn incarnation_pids(lines: &[String]) -> BTreeMap<String, i32> {
    let mut map = BTreeMap::new();
    for line in lines.iter().filter(|l| l.contains("booting")) {
        // Without terminal colours: drop every ESC ... m sequence.
        let mut plain = String::new();
        let mut in_esc = false;
        for c in line.chars() {
            match (in_esc, c) {
                (false, '\x1b') => in_esc = true,
                (true, 'm') => in_esc = false,
                (false, c) => plain.push(c),
                _ => {}
            }
        }
        let field = |name: &str| {
            plain
                .split_whitespace()
                .find_map(|f| f.strip_prefix(name).map(str::to_string))
        };
        if let (Some(inc), Some(pid)) = (
            field("incarnation="),
            field("pid=").and_then(|p| p.parse().ok()),
        ) {
            map.insert(inc, pid);
        }
    }
    map
}

/// A small deterministic generator (xorshift64*), so that a seed replays a
/// run's schedule.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

// ------------------------------------------------------------------ chaos

struct Chaos {
    label: &'static str,
    orders: usize,
    instances: u32,
    /// How long faults are injected.
    secs: f64,
    lease_ms: u64,
    max_attempts: u32,
    kill_every: Duration,
    outage: Duration,
    /// Waiting for the last orders once the chaos stopped.
    deadline: Duration,
    seed: u64,
    /// Fail if a worker exited 3 ("fenced") or an instance was retired;
    /// off in the CI test because of the bug that
    /// `chaos_retires_no_instance` documents.
    strict_exits: bool,
}

enum Step {
    Produce(usize),
    Down,
    Up,
    Rtt(u64),
}

fn seed() -> u64 {
    env_num("POOL_CHAOS_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
    })
}

fn run_chaos(c: Chaos) {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let ledger_path = dir.path().join("ledger");
    let mut rng = Rng::new(c.seed);
    eprintln!(
        "{}: seed {} (POOL_CHAOS_SEED={} replays the schedule), {} orders, {} instances, {:.0} s of chaos, LEASE_MS {}",
        c.label, c.seed, c.seed, c.orders, c.instances, c.secs, c.lease_ms
    );
    let broker = broker(2);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let mut sup = pool(
        &broker,
        &c.instances.to_string(),
        &[
            ("LEASE_MS", &c.lease_ms.to_string()),
            ("MAX_ATTEMPTS", &c.max_attempts.to_string()),
        ],
    );
    // Each order: one ledger line per run, "P:O:ATTEMPT:WORKER_PID" (the
    // job's parent is its worker process), then 0-40 ms of "work".
    let payloads: Vec<String> = (0..c.orders)
        .map(|_| {
            sh_order(
                &format!(
                    "echo $ORDER_PARTITION:$ORDER_OFFSET:$ORDER_ATTEMPT:$PPID >> {}; sleep 0.0{}",
                    shq(&ledger_path),
                    rng.below(5)
                ),
                None,
            )
        })
        .collect();

    // The schedule: orders in four batches over the chaos, two outages, a
    // slow period; kills all along.
    let d = Duration::from_secs_f64(c.secs);
    let at = |f: f64| d.mul_f64(f);
    let batch = c.orders.div_ceil(4);
    let rtt = 20 + rng.below(31);
    let mut steps: Vec<(Duration, Step)> = vec![
        (at(0.3), Step::Down),
        (at(0.3) + c.outage, Step::Up),
        (at(0.45), Step::Rtt(rtt)),
        (at(0.65), Step::Rtt(0)),
        (at(0.8), Step::Down),
        (at(0.8) + c.outage, Step::Up),
    ];
    for k in 0..4 {
        steps.push((
            at(0.25 * k as f64),
            Step::Produce((k * batch).min(c.orders)),
        ));
    }
    steps.sort_by_key(|s| s.0);

    let mut orders: Vec<(i32, i64)> = Vec::new();
    let mut produced = 0usize;
    let mut produce = |upto_batch: usize, orders: &mut Vec<(i32, i64)>| {
        // Batch k covers payloads [k*batch, (k+1)*batch); half to each partition.
        let end = (upto_batch + batch).min(c.orders);
        if produced >= end {
            return;
        }
        let part = &payloads[produced..end];
        let half = part.len() / 2;
        orders.extend(produce_orders(
            broker.bootstrap(),
            &topic,
            &part[..half],
            Some(0),
        ));
        orders.extend(produce_orders(
            broker.bootstrap(),
            &topic,
            &part[half..],
            Some(1),
        ));
        produced = end;
    };

    let t0 = Instant::now();
    let mut kills: Vec<(Duration, u32, u32)> = Vec::new();
    let mut outages = 0usize;
    let mut down = false;
    let mut deferred: Vec<usize> = Vec::new();
    let mut next_kill = c.kill_every;
    let mut idx = 0;
    loop {
        let now = t0.elapsed();
        if idx < steps.len() && steps[idx].0 <= now {
            match steps[idx].1 {
                Step::Produce(from) if down => deferred.push(from),
                Step::Produce(from) => produce(from, &mut orders),
                Step::Down => {
                    broker.down();
                    down = true;
                    outages += 1;
                    eprintln!("{}: broker down at {:.1} s", c.label, now.as_secs_f64());
                }
                Step::Up => {
                    broker.up();
                    down = false;
                    eprintln!(
                        "{}: broker up at {:.1} s",
                        c.label,
                        t0.elapsed().as_secs_f64()
                    );
                    for from in std::mem::take(&mut deferred) {
                        produce(from, &mut orders);
                    }
                }
                Step::Rtt(ms) => {
                    broker.rtt(ms);
                    eprintln!("{}: rtt {ms} ms at {:.1} s", c.label, now.as_secs_f64());
                }
            }
            idx += 1;
            continue;
        }
        if now >= d && idx == steps.len() {
            break;
        }
        if now >= next_kill {
            next_kill += c.kill_every;
            if now < d {
                // A random instance; another if that one is between runs.
                for _ in 0..3 {
                    let i = 1 + rng.below(u64::from(c.instances)) as u32;
                    if let Some(pid) = sup.kill_instance(i, libc::SIGKILL) {
                        kills.push((now, i, pid));
                        break;
                    }
                }
            }
            continue;
        }
        let wake = [steps.get(idx).map(|s| s.0), Some(next_kill), Some(d)]
            .into_iter()
            .flatten()
            .filter(|w| *w > now)
            .min()
            .unwrap_or(now + Duration::from_millis(10));
        std::thread::sleep(wake - now);
    }
    assert_eq!(orders.len(), c.orders, "every batch was produced");
    let chaos_over = t0.elapsed();
    eprintln!(
        "{}: chaos over after {:.1} s: {} kills, {outages} outages; waiting for the orders",
        c.label,
        chaos_over.as_secs_f64(),
        kills.len()
    );

    if let Err(e) = wait_completed(broker.bootstrap(), &claims, &orders, c.deadline) {
        let s = sup.snapshot();
        panic!(
            "{}: {e}\nbroker process alive: {}; retired instances: {:?}; running: {:?}\nbroker stderr:\n{}",
            c.label,
            alive(broker.pid() as i32),
            s.retired,
            s.pids,
            broker.stderr.last(20)
        );
    }
    let drained = t0.elapsed();
    // Stop the pool (so that nothing can still write to the ledger) before
    // judging.
    std::thread::sleep(Duration::from_millis(500));
    sup.stop();
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let audit = Audit::of(&recs);
    let sup_state = sup.snapshot();

    // -- the claims topic
    let trail = |o: &(i32, i64)| audit.orders.get(&OrderId::new(o.0, o.1));
    let lost = orders
        .iter()
        .filter(|o| trail(o).is_none_or(|t| t.completions.is_empty()))
        .count();
    let twice = orders
        .iter()
        .filter(|o| trail(o).is_some_and(|t| t.completions.len() > 1))
        .count();
    let two = orders
        .iter()
        .filter(|o| trail(o).is_some_and(|t| !t.committed_by_two().is_empty()))
        .count();
    let takeovers: usize = audit.orders.values().map(|t| t.revocations.len()).sum();
    let gave_up: Vec<(i32, i64)> = orders
        .iter()
        .copied()
        .filter(|o| {
            trail(o).is_some_and(|t| {
                t.completions.iter().any(|(_, r)| {
                    r.outcome()
                        .as_ref()
                        .is_some_and(|x| x.status == Status::GaveUp)
                })
            })
        })
        .collect();

    // -- the ledger: runs per order, (attempt, worker pid) each
    let mut runs: BTreeMap<OrderId, Vec<(u32, u32)>> = BTreeMap::new();
    for line in ledger(&ledger_path) {
        let mut it = line.split(':').map(|x| x.parse::<i64>().ok());
        let (Some(Some(p)), Some(Some(o)), Some(Some(a)), Some(Some(pid)), None) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            panic!("{}: unexpected ledger line {line:?}", c.label);
        };
        runs.entry(OrderId::new(p as i32, o))
            .or_default()
            .push((a as u32, pid as u32));
    }
    let killed_pids: BTreeSet<u32> = kills.iter().map(|k| k.2).collect();
    let sigkilled: BTreeSet<u32> = sup_state
        .exits
        .iter()
        .filter(|e| e.signal == Some(libc::SIGKILL))
        .map(|e| e.pid)
        .collect();
    let mut problems: Vec<String> = Vec::new();
    let mut ran_twice = 0usize;
    let mut explained = 0usize;
    let mut by_revocation = 0usize;
    for &o in &orders {
        let id = OrderId::new(o.0, o.1);
        let t = trail(&o);
        let order_runs = runs.get(&id).cloned().unwrap_or_default();
        let attempts: Vec<u32> = order_runs.iter().map(|r| r.0).collect();
        let Some(t) = t else { continue };
        let Some((_, done)) = t.completions.first() else {
            continue;
        };
        let status = done.outcome().map(|x| x.status);
        // The completing run is the last one and wrote its line.
        if status == Some(Status::Ok) && attempts.iter().max() != Some(&done.attempt().get()) {
            problems.push(format!(
                "{id}: completed ok as attempt {} but the ledger's runs are {attempts:?}\n{}",
                done.attempt(),
                audit.show(o)
            ));
        }
        if status != Some(Status::Ok) && status != Some(Status::GaveUp) {
            problems.push(format!("{id}: completed {status:?}\n{}", audit.show(o)));
        }
        let mut sorted = attempts.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != attempts.len() {
            problems.push(format!(
                "{id}: one attempt ran twice: {attempts:?}\n{}",
                audit.show(o)
            ));
        }
        // Every run but the last, and (for gave_up) every run, must have
        // been cut short: its worker process (the job's parent) SIGKILLed by
        // the test, or the incarnation that committed that attempt revoked.
        let mut cut_short = order_runs.clone();
        cut_short.sort_unstable();
        if status != Some(Status::GaveUp) {
            cut_short.pop();
        }
        let mut all_explained = true;
        for (a, pid) in &cut_short {
            let incs: Vec<&String> = t
                .commits
                .iter()
                .filter(|cm| cm.3 == *a)
                .map(|cm| &cm.2)
                .collect();
            if killed_pids.contains(pid) && sigkilled.contains(pid) {
                continue;
            }
            if incs
                .iter()
                .any(|inc| t.revocations.iter().any(|r| r.2 == **inc))
            {
                by_revocation += 1;
                continue;
            }
            all_explained = false;
            problems.push(format!(
                "{id}: attempt {a} ran on worker {pid} (runs {order_runs:?}) and was run again, but that worker was \
                 neither killed by the test nor revoked (committed by {incs:?})\n{}",
                audit.show(o)
            ));
        }
        if attempts.len() > 1 {
            ran_twice += 1;
            if sorted.get(1).is_some_and(|a| *a >= 2) && all_explained {
                explained += 1;
            }
        }
    }
    for id in runs.keys() {
        if !orders.contains(&(id.partition, id.offset)) {
            problems.push(format!("the ledger names {id}, which was never produced"));
        }
    }
    // gave_up is allowed only when every attempt was lost (checked above);
    // with MAX_ATTEMPTS of c.max_attempts it is rare.
    for o in &gave_up {
        eprintln!(
            "{}: {} gave up\n{}",
            c.label,
            OrderId::new(o.0, o.1),
            audit.show(*o)
        );
    }

    // -- the supervisor: every SIGKILL was ours
    let foreign_kills: Vec<&Exit> = sup_state
        .exits
        .iter()
        .filter(|e| e.signal == Some(libc::SIGKILL) && !killed_pids.contains(&e.pid))
        .collect();
    if !foreign_kills.is_empty() {
        problems.push(format!(
            "workers died of SIGKILL the test did not send: {foreign_kills:?}"
        ));
    }
    let mut exit_kinds: BTreeMap<String, usize> = BTreeMap::new();
    for e in &sup_state.exits {
        let k = match (e.code, e.signal) {
            (Some(code), _) => format!("code {code}"),
            (_, Some(s)) => format!("signal {s}"),
            _ => "?".into(),
        };
        *exit_kinds.entry(k).or_default() += 1;
    }
    // Where the kills landed: the killed incarnation's last valid record;
    // a claim that was its own commit (it met no rival, R34) counts as a
    // commit (the job phase).
    let own_commit = |p: &i64, r: &Record| {
        r.order()
            .and_then(|o| audit.orders.get(&o))
            .is_some_and(|t| t.unrivalled_claims.contains(p))
    };
    let mut last_of: BTreeMap<&str, Event> = BTreeMap::new();
    for (p, r) in &recs {
        if r.by().is_none() {
            let ev = match r.event() {
                Event::Claimed if own_commit(p, r) => Event::Committed,
                ev => ev,
            };
            last_of.insert(r.incarnation.as_str(), ev);
        }
    }
    let mut landed: BTreeMap<&str, usize> = BTreeMap::new();
    let pids = incarnation_pids(&sup.stderr.lines());
    for (_, _, pid) in &kills {
        let inc = last_of
            .keys()
            .find(|inc| pids.get(**inc).map(|p| *p as i64) == Some(*pid as i64));
        let phase = match inc.map(|i| last_of[i]) {
            None => "before booted",
            Some(Event::Booted) => "boot/choosing",
            Some(Event::Claimed) | Some(Event::Yielded) => "negotiation",
            Some(Event::Committed) | Some(Event::Lease) => "job",
            Some(Event::Completed) => "after completed",
            Some(_) => "other",
        };
        *landed.entry(phase).or_default() += 1;
    }
    eprintln!(
        "{}: {} orders drained {:.1} s after the chaos; worker starts {}, exits {exit_kinds:?}; kills landed {landed:?}; \
         lease takeovers {takeovers}; gave up {}; extra runs explained by revocation {by_revocation}; retired instances {:?}; {:.1} s in all",
        c.label,
        c.orders,
        (drained - chaos_over).as_secs_f64(),
        sup_state.total_starts(),
        gave_up.len(),
        sup_state.retired,
        started.elapsed().as_secs_f64()
    );
    let line = format!(
        "{}: faults injected {} (kills {}, outages {outages}), orders {}, lost {lost}, completed twice {twice}, committed by two {two}, ran twice {ran_twice} (killed while running {explained})",
        c.label,
        kills.len() + outages,
        kills.len(),
        c.orders
    );
    println!("{line}");
    record_figures(&line);

    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{}: {e}", c.label));
    assert!(problems.is_empty(), "{}:\n{}", c.label, problems.join("\n"));
    assert_eq!((lost, twice, two), (0, 0, 0));
    assert_eq!(ran_twice, explained);
    assert!(kills.len() >= 10, "too few kills landed: {kills:?}");
    if c.strict_exits {
        let fenced: Vec<&Exit> = sup_state
            .exits
            .iter()
            .filter(|e| e.code == Some(3))
            .collect();
        assert!(
            fenced.is_empty() && sup_state.retired.is_empty(),
            "{}: workers exited 3 (fenced) with no other process of their number: {fenced:?}; retired: {:?}",
            c.label,
            sup_state.retired
        );
    }
}

#[test]
fn chaos_kills_and_outages_lose_nothing() {
    run_chaos(Chaos {
        label: "chaos",
        orders: 150,
        instances: 6,
        secs: 20.0,
        lease_ms: 3000,
        max_attempts: 5,
        kill_every: Duration::from_millis(300),
        outage: Duration::from_millis(2500),
        deadline: Duration::from_secs(150),
        seed: seed(),
        strict_exits: false,
    });
}

/// A restarted instance resumes its committed hold and appends `committed`
/// (attempt + 1) for the retry; if an idle instance revokes that hold (its
/// lease expired while the instance was down, e.g. during a broker outage)
/// just before the retry's `committed` lands, that `committed` is void
/// (the hold is closed) and the worker stops with exit status 3 and
/// "fenced: a newer process with INSTANCE_NUMBER=3 started" although no
/// other process has its number; the supervisor then retires the instance
/// for good (exit 3 is not restarted), so the pool shrinks with every such
/// race. Seen in `chaos_long` (500 orders, seed 1795329086249710567): 2 of
/// 8 instances retired. Claims trail (order 0:52):
///
/// ```text
/// #532 3:committed attempt 1     (incarnation 68cc-…, then SIGKILLed)
/// #539 3:booted                  (6a83-…, SIGKILLed while booting)
/// #546 3:booted                  (6af8-…; the broker goes down right after)
/// #556 3:revoked by 2            (after the outage: the hold is 4.2 s old)
/// #557 2:claimed attempt 2       (the takeover)
/// #558 3:committed attempt 2     (6af8's retry: void, the hold was revoked)
///      → 6af8 exits 3 "fenced", instance 3 retired
/// ```
///
/// Expected: the instance whose retry lost the race goes on (chooses new
/// work) or exits 4 ("revoked", which the supervisor restarts), never 3.
/// Probabilistic: the chaos run must hit the race.
#[test]
#[ignore = "long (fails if any instance is retired; the retry-vs-revocation race that retired instances is fixed): cargo test --release --test live chaos::chaos_retires_no_instance -- --ignored --nocapture"]
fn chaos_retires_no_instance() {
    run_chaos(Chaos {
        label: "chaos strict",
        orders: 300,
        instances: 8,
        secs: 50.0,
        lease_ms: 3000,
        max_attempts: 5,
        kill_every: Duration::from_millis(300),
        outage: Duration::from_millis(2800),
        deadline: Duration::from_secs(300),
        seed: seed(),
        strict_exits: true,
    });
}

/// The long version; see the module docs for the command and knobs.
#[test]
#[ignore = "long: POOL_CHAOS_ORDERS=500 cargo test --release --test live chaos::chaos_long -- --ignored --nocapture"]
fn chaos_long() {
    let orders = env_num("POOL_CHAOS_ORDERS").unwrap_or(500) as usize;
    run_chaos(Chaos {
        label: "chaos long",
        orders,
        instances: env_num("POOL_CHAOS_INSTANCES").unwrap_or(8) as u32,
        secs: env_num("POOL_CHAOS_SECS").map_or(orders as f64 / 6.0, |s| s as f64),
        lease_ms: env_num("POOL_CHAOS_LEASE_MS").unwrap_or(3000),
        max_attempts: 5,
        kill_every: Duration::from_millis(300),
        outage: Duration::from_millis(2800),
        deadline: Duration::from_secs(600),
        seed: seed(),
        strict_exits: false,
    });
}

// --------------------------------------------------------- lease takeover

/// An order that logs "start:ATTEMPT:RETRY:INSTANCE:PID", blocks until
/// `flag` exists, then logs "ran:ATTEMPT:RETRY:INSTANCE".
fn blocking_order(ledger: &Path, flag: &Path) -> String {
    let (l, f) = (shq(ledger), shq(flag));
    sh_order(
        &format!(
            "echo start:$ORDER_ATTEMPT:$ORDER_RETRY:$INSTANCE_NUMBER:$$ >> {l}; \
             while [ ! -e {f} ]; do sleep 0.05; done; \
             echo ran:$ORDER_ATTEMPT:$ORDER_RETRY:$INSTANCE_NUMBER >> {l}"
        ),
        None,
    )
}

#[test]
fn a_lost_instance_order_is_taken_over() {
    const LEASE: Duration = Duration::from_millis(2000);
    let dir = tempfile::tempdir().unwrap();
    let (ledger_path, flag) = (dir.path().join("ledger"), dir.path().join("flag"));
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let env = |i: u32| {
        let mut env = broker.env();
        env.push(("INSTANCE_NUMBER".into(), i.to_string()));
        env.push(("LEASE_MS".into(), LEASE.as_millis().to_string()));
        env
    };
    let order = produce_orders(
        broker.bootstrap(),
        &topic,
        &[blocking_order(&ledger_path, &flag)],
        Some(0),
    )[0];
    let id = OrderId::new(order.0, order.1);
    let mut w1 = WorkerProc::start("worker1", &env(1));
    // The claim met no rival: it is instance 1's commit (R34).
    wait_record_within(
        &broker,
        &claims,
        "claim (the commit) by instance 1",
        T,
        |r| r.instance.get() == 1 && r.event() == Event::Claimed && r.order() == Some(id),
    );
    let job_pid = |attempt: u32| {
        ledger(&ledger_path).iter().find_map(|l| {
            let rest = l.strip_prefix(&format!("start:{attempt}:"))?;
            rest.split(':').nth(2)?.parse::<i32>().ok()
        })
    };
    assert!(
        poll_until(T, Duration::from_millis(20), || job_pid(1).is_some()),
        "instance 1's job never started"
    );
    let first_job = job_pid(1).unwrap();

    // Instance 1 is lost for good.
    w1.kill();
    let killed = Instant::now();
    assert!(
        poll_until(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || !alive(first_job)
        ),
        "instance 1's job (pid {first_job}) outlived its SIGKILLed worker"
    );
    let mut w2 = WorkerProc::start("worker2", &env(2));
    let recs = wait_record_within(
        &broker,
        &claims,
        "instance 2's takeover claim",
        LEASE + Duration::from_secs(10),
        |r| {
            r.instance.get() == 2
                && r.event() == Event::Claimed
                && r.order() == Some(id)
                && r.takeover_of().iter().any(|c| c.instance.get() == 1)
        },
    );
    let takeover = recs
        .iter()
        .find(|(_, r)| {
            r.instance.get() == 2 && r.event() == Event::Claimed && r.order() == Some(id)
        })
        .map(|(p, r)| (*p, r.clone()))
        .unwrap();
    eprintln!(
        "takeover claim at #{} {:.1} s after the kill",
        takeover.0,
        killed.elapsed().as_secs_f64()
    );
    assert_eq!(
        takeover.1.attempt().get(),
        2,
        "a takeover of a committed hold is a retry:\n{}",
        show_all(&recs)
    );
    std::fs::write(&flag, b"").unwrap();

    let budget = (LEASE + Duration::from_secs(10)).saturating_sub(killed.elapsed());
    let done = wait_completed(broker.bootstrap(), &claims, &[order], budget)
        .unwrap_or_else(|e| panic!("not completed within lease + 10 s of the kill: {e}"));
    let took = killed.elapsed();
    let status = w2
        .wait(T)
        .unwrap_or_else(|| panic!("instance 2 did not exit:\n{}", w2.stderr.last(20)));
    assert_eq!(status.code(), Some(0), "{}", w2.stderr.last(20));

    let recs = decoded_claims(broker.bootstrap(), &claims);
    let audit = Audit::of(&recs);
    audit
        .check_exactly_once(&[order])
        .unwrap_or_else(|e| panic!("{e}"));
    let t = &audit.orders[&id];
    assert_eq!(t.completions.len(), 1, "{}", audit.show(order));
    let (_, c) = &t.completions[0];
    assert_eq!(
        (c.instance.get(), c.attempt().get()),
        (2, 2),
        "{}",
        audit.show(order)
    );
    assert_eq!(
        c.outcome().map(|o| o.status),
        Some(Status::Ok),
        "{}",
        audit.show(order)
    );
    assert_eq!(done[0].instance.get(), 2);
    assert!(
        recs.iter().any(|(_, r)| r.key() == "1:revoked"
            && r.by() == Some(2.into())
            && r.order() == Some(id)),
        "no 1:revoked by 2 in the claims trail:\n{}",
        show_all(&recs)
    );
    assert_eq!(
        t.revocations.iter().map(|r| (r.1, r.3)).collect::<Vec<_>>(),
        vec![(1, 2)],
        "{}",
        audit.show(order)
    );
    let effective: Vec<u32> = t.effective_commits.iter().map(|c| c.1).collect();
    assert_eq!(effective, vec![1, 2], "{}", audit.show(order));
    let ran: Vec<String> = ledger(&ledger_path)
        .into_iter()
        .filter(|l| l.starts_with("ran:"))
        .collect();
    assert_eq!(
        ran,
        vec!["ran:2:1:2".to_string()],
        "the job ran to its end once, on instance 2, as a retry"
    );
    eprintln!("takeover: completed by instance 2 {:.1} s after instance 1 was killed (lease {LEASE:?})\n{}", took.as_secs_f64(), audit.show(order));
}

// ------------------------------------------------------------ poison order

#[test]
fn a_poison_order_is_given_up() {
    const MAX_ATTEMPTS: u32 = 2;
    let dir = tempfile::tempdir().unwrap();
    let ledger_path = dir.path().join("ledger");
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let l = shq(&ledger_path);
    // The job's parent is its worker: it logs the pid it kills.
    let poison = sh_order(
        &format!("echo poison:$ORDER_ATTEMPT:$PPID >> {l}; kill -9 $PPID; sleep 5"),
        None,
    );
    let normal = sh_order(&format!("echo normal:$ORDER_ATTEMPT >> {l}"), None);
    let orders = produce_orders(broker.bootstrap(), &topic, &[poison, normal], Some(0));
    let sup = pool(&broker, "1", &[("MAX_ATTEMPTS", &MAX_ATTEMPTS.to_string())]);
    let audit = wait_and_audit(broker.bootstrap(), &claims, &orders, T);
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    let p = &audit.orders[&OrderId::new(orders[0].0, orders[0].1)];
    let (_, done) = &p.completions[0];
    let outcome = done.outcome().unwrap();
    assert_eq!(outcome.status, Status::GaveUp, "{}", audit.show(orders[0]));
    assert_eq!(
        done.attempt().get(),
        MAX_ATTEMPTS,
        "{}",
        audit.show(orders[0])
    );
    eprintln!(
        "poison: {} ({})",
        outcome.status,
        outcome.reason.as_deref().unwrap_or("")
    );
    let n = &audit.orders[&OrderId::new(orders[1].0, orders[1].1)];
    assert_eq!(
        n.completions[0].1.outcome().map(|o| o.status),
        Some(Status::Ok),
        "{}",
        audit.show(orders[1])
    );

    let lines = ledger(&ledger_path);
    let poison_runs: Vec<(u32, u32)> = lines
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("poison:")?.split(':');
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(
        poison_runs.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=MAX_ATTEMPTS).collect::<Vec<_>>(),
        "the poison job ran exactly MAX_ATTEMPTS times, as attempts 1, 2, ...: {lines:?}"
    );
    // Each run killed the worker that ran it (its parent), which the
    // supervisor saw die of SIGKILL.
    let s = sup.snapshot();
    for (attempt, ppid) in &poison_runs {
        assert!(
            s.exits
                .iter()
                .any(|e| e.instance == 1 && e.pid == *ppid && e.signal == Some(libc::SIGKILL)),
            "attempt {attempt}: the job's parent {ppid} is not a worker that died of SIGKILL: {:?}",
            s.exits
        );
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("normal:"))
            .collect::<Vec<_>>(),
        vec!["normal:1"],
        "{lines:?}"
    );
}

// -------------------------------------------------------------- time limit

#[test]
fn a_job_past_its_time_limit_is_killed() {
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    // A unique argument, so that /proc tells this job's sleeps from others.
    let arg = format!("30.{:06}", std::process::id() % 1_000_000);
    let order = serde_json::json!({
        "cmd": ["sh", "-c", format!("sleep {arg} & sleep {arg}")],
        "timeout_secs": 1,
    })
    .to_string();
    let orders = produce_orders(broker.bootstrap(), &topic, &[order], Some(0));
    let _sup = pool(&broker, "1", &[]);
    // Both sleeps run (the background one and the foreground one) ...
    let mut seen = Vec::new();
    assert!(
        poll_until(T, Duration::from_millis(10), || {
            seen = processes_with_argv(&["sleep", &arg]);
            seen.len() >= 2
        }),
        "the job's two sleeps were never seen running ({seen:?})"
    );
    let audit = wait_and_audit(broker.bootstrap(), &claims, &orders, T);
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    let done = &audit.orders[&OrderId::new(orders[0].0, orders[0].1)].completions[0].1;
    let outcome = done.outcome().unwrap();
    assert_eq!(outcome.status, Status::TimedOut, "{outcome:?}");
    assert!(
        outcome.duration_ms >= 1000 && outcome.duration_ms < 10_000,
        "{outcome:?}"
    );
    // ... and none survives the time limit: the whole group was killed.
    let mut left = Vec::new();
    let gone = poll_until(Duration::from_secs(2), Duration::from_millis(20), || {
        left = processes_with_argv(&["sleep", &arg]);
        left.is_empty()
    });
    for pid in &left {
        // SAFETY: a leftover of this test's own job.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        gone,
        "sleep {arg} survived the job's time limit: pids {left:?} (were {seen:?})"
    );
}
