//! The fence (docs/protocol.md R16): what the brokers do with a dead
//! process's transactions. Apache Kafka fences a producer whose
//! `transactional.id` a newer one initialised: its open transaction is
//! aborted (read_committed readers never see it), and what it sends later
//! is refused. The embedded broker (librdkafka's mock cluster) does none of
//! it, which is why the pool settles there instead (`CLAIMS_FENCE=settle`,
//! its `worker_env`).

use crate::common::apache::shared;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn txn_producer(bootstrap: &str, id: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", id)
        .set("transaction.timeout.ms", "10000")
        .set("message.timeout.ms", "10000")
        .create()
        .expect("producer")
}

/// Produces `value` to partition 0 and waits for its delivery (the
/// transaction stays open): the delivery's error, if any.
fn produce(p: &BaseProducer, topic: &str, value: &str) -> Result<(), KafkaError> {
    p.send(
        BaseRecord::<str, str>::to(topic)
            .partition(0)
            .key("k")
            .payload(value),
    )
    .map_err(|(e, _)| e)?;
    p.flush(T)
}

/// What a read_committed reader (librdkafka's default, the pool's) reads
/// of partition 0 until it has seen the end (partition EOF) `eofs` times
/// after a quiet spell.
fn committed_values(bootstrap: &str, topic: &str) -> Vec<(i64, String)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "fence-test")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "50")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(0))
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((
                m.offset(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            )),
            Some(Err(KafkaError::PartitionEOF(_))) => return out,
            _ => {}
        }
    }
    panic!("no end of {topic} within {T:?}; read {out:?}");
}

/// Apache Kafka, the workers' defaults: a successor's `init_transactions`
/// aborts the dead producer's open transaction, and the dead producer's
/// later writes are refused (ProducerFenced, KIP-890 in Kafka 4.x). Commit
/// markers take offsets: the end (high watermark) is one past the marker.
#[test]
fn apache_kafka_fences_a_dead_producer() {
    let kafka = shared();
    let (_, claims) = kafka.topics(1);
    let id = format!("fence-test-{claims}");
    let a = txn_producer(&kafka.bootstrap, &id);
    a.init_transactions(T).unwrap();
    a.begin_transaction().unwrap();
    produce(&a, &claims, "a1").unwrap();
    a.commit_transaction(T).unwrap();
    a.begin_transaction().unwrap();
    produce(&a, &claims, "a2 open").unwrap();
    // A holds a transaction open: it is invisible, and holds readers back.
    assert_eq!(
        committed_values(&kafka.bootstrap, &claims),
        vec![(0, "a1".to_string())]
    );
    // Its successor fences it.
    let b = txn_producer(&kafka.bootstrap, &id);
    let t = Instant::now();
    b.init_transactions(T).unwrap();
    let fence_ms = t.elapsed().as_millis() as u64;
    // A, "dead" (late), writes again and tries to commit: refused.
    let late = produce(&a, &claims, "a3 late")
        .map_err(|e| e.to_string())
        .and_then(|()| a.commit_transaction(T).map_err(|e| e.to_string()));
    let late_err = format!("{late:?}");
    assert!(late.is_err(), "a fenced producer's commit was accepted");
    b.begin_transaction().unwrap();
    produce(&b, &claims, "b1").unwrap();
    b.commit_transaction(T).unwrap();
    let seen = committed_values(&kafka.bootstrap, &claims);
    let values: Vec<&str> = seen.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        values,
        ["a1", "b1"],
        "the open transaction aborted, the late write refused: {seen:?}"
    );
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .create()
        .unwrap();
    let (_, high) = c.fetch_watermarks(&claims, 0, T).unwrap();
    let last = seen.last().unwrap().0;
    assert_eq!(
        high,
        last + 2,
        "the end is one past the commit marker after the last record"
    );
    // A successor whose predecessor left no transaction open.
    drop(b);
    let c2 = txn_producer(&kafka.bootstrap, &id);
    let t = Instant::now();
    c2.init_transactions(T).unwrap();
    let cold_ms = t.elapsed().as_millis() as u64;
    drop(c2);
    let c2 = txn_producer(&kafka.bootstrap, &id);
    c2.client().fetch_metadata(Some(&claims), T).unwrap();
    let t = Instant::now();
    c2.init_transactions(T).unwrap();
    let clean_ms = t.elapsed().as_millis() as u64;
    // The tests' own reader reads past the marker at the end.
    assert_eq!(
        crate::common::read_claims(&kafka.bootstrap, &claims).len(),
        2
    );
    println!("fence (init_transactions of the successor): {fence_ms} ms over an open transaction, {clean_ms} ms without ({cold_ms} ms before the producer connected); the late write: {late_err}");
}

/// The embedded broker (librdkafka's mock cluster) cannot fence, which is
/// why workers settle against it (`CLAIMS_FENCE=settle` in its
/// `worker_env`, docs/protocol.md R17): records of a transaction still open
/// are served to read_committed readers at once, a successor's
/// `init_transactions` gets a producer id of its own instead of bumping the
/// predecessor's epoch, so the predecessor's late writes and commit are
/// accepted, and an aborted record stays visible. If a librdkafka upgrade
/// changes any of this, this test says so.
#[test]
fn the_embedded_broker_cannot_fence() {
    let broker = crate::common::BrokerProc::start();
    assert!(
        broker
            .worker_env
            .contains(&("CLAIMS_FENCE".to_string(), "settle".to_string())),
        "the embedded broker tells workers to settle: {:?}",
        broker.worker_env
    );
    let topic = broker.opts.coordination_topic.clone();
    let id = "fence-test-embedded";
    let a = txn_producer(broker.bootstrap(), id);
    a.init_transactions(T).unwrap();
    a.begin_transaction().unwrap();
    produce(&a, &topic, "a1 open").unwrap();
    let open = committed_values(broker.bootstrap(), &topic);
    let b = txn_producer(broker.bootstrap(), id);
    b.init_transactions(T).unwrap();
    let late = produce(&a, &topic, "a2 late")
        .map_err(|e| e.to_string())
        .and_then(|()| a.commit_transaction(T).map_err(|e| e.to_string()));
    b.begin_transaction().unwrap();
    produce(&b, &topic, "b1 aborted").unwrap();
    b.abort_transaction(T).unwrap();
    let seen: Vec<String> = committed_values(broker.bootstrap(), &topic)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        open,
        vec![(0, "a1 open".to_string())],
        "an open transaction's record is served at once"
    );
    assert_eq!(
        late,
        Ok(()),
        "the fenced producer's late write and commit are accepted"
    );
    assert_eq!(
        seen,
        ["a1 open", "a2 late", "b1 aborted"],
        "no markers, nothing filtered"
    );
}

/// What the fence costs on Apache Kafka: an append acknowledged by a plain
/// (idempotent, acks=all) producer against one in a transaction of its own
/// (begin, produce, commit), as the workers append; and a boot's
/// `init_transactions`. Figures only (printed and recorded).
#[test]
fn the_fence_costs_per_record() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let kafka = shared();
    let (_, claims) = kafka.topics(1);
    const N: usize = 100;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let make = |id: Option<String>| -> FutureProducer {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &kafka.bootstrap)
            .set("acks", "all")
            .set("linger.ms", "0");
        if let Some(id) = id {
            c.set("transactional.id", id)
                .set("transaction.timeout.ms", "10000");
        }
        c.create().unwrap()
    };
    // The coordinator is made on first use: warmed up first.
    let warm = make(Some(format!("warm-{claims}")));
    warm.init_transactions(T).unwrap();
    let plain = make(None);
    let id = format!("cost-{claims}");
    let txn = make(Some(id.clone()));
    let t = Instant::now();
    txn.init_transactions(T).unwrap();
    let init_new = t.elapsed().as_secs_f64() * 1e3;
    let send = |p: &FutureProducer, v: String| {
        rt.block_on(
            p.send(
                FutureRecord::<str, str>::to(&claims)
                    .partition(0)
                    .key("k")
                    .payload(&v),
                T,
            ),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    };
    send(&plain, "warm".into());
    let mut a = Vec::new();
    let mut b = Vec::new();
    for k in 0..N {
        let t = Instant::now();
        send(&plain, format!("plain {k}"));
        a.push(t.elapsed().as_micros() as u64);
        let t = Instant::now();
        txn.begin_transaction().unwrap();
        send(&txn, format!("txn {k}"));
        txn.commit_transaction(T).unwrap();
        b.push(t.elapsed().as_micros() as u64);
    }
    // A successor's init over a predecessor that left nothing open.
    let next = make(Some(id));
    let t = Instant::now();
    next.init_transactions(T).unwrap();
    let init_next = t.elapsed().as_secs_f64() * 1e3;
    a.sort_unstable();
    b.sort_unstable();
    let (pa, pb) = (pct(&a, 50.0) as f64 / 1e3, pct(&b, 50.0) as f64 / 1e3);
    let line = format!(
        "fence cost on Apache Kafka: an append {pa:.2} ms plain (p99 {:.2}), {pb:.2} ms in a transaction of its own (p99 {:.2}): +{:.2} ms per record; init_transactions {init_new:.1} ms for a new id, {init_next:.1} ms for a successor; per order (booted, claimed, completed: an uncontested claim is its own commit, R34; one init per process) about +{:.1} ms",
        pct(&a, 99.0) as f64 / 1e3,
        pct(&b, 99.0) as f64 / 1e3,
        pb - pa,
        3.0 * (pb - pa) + init_next
    );
    println!("{line}");
    crate::common::record_figures(&line);
    assert_eq!(committed_values(&kafka.bootstrap, &claims).len(), 2 * N + 1);
}

/// A pool under a storm of SIGKILLs (issue 26): what a run of it shows.
struct Storm {
    label: &'static str,
    orders: usize,
    instances: u32,
    partitions: i32,
    /// Each order's job: one ledger line, then this long asleep.
    job_ms: u64,
    /// A SIGKILL of a random instance's process about this often (uniform
    /// between half and one and a half times it).
    kill_every_ms: u64,
    deadline: Duration,
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let k = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[k.clamp(1, sorted.len()) - 1]
}

/// Runs `s` against the brokers at `bootstrap` (topics made, `env` the
/// workers' environment): every order completes once, every second run of
/// an order follows a SIGKILL of its runner; prints and records orders/s
/// and, per kill, the time from the kill to the restarted instance's first
/// claim (or resumed commit).
fn kill_storm(
    s: Storm,
    bootstrap: &str,
    orders_topic: &str,
    claims: &str,
    env: Vec<(String, String)>,
) {
    use crate::common::*;
    use pool_worker::record::{Event, OrderId};
    use std::collections::{BTreeMap, BTreeSet};
    let dir = tempfile::tempdir().unwrap();
    let ledger_path = dir.path().join("ledger");
    let mut sup = SupervisorProc::start_with(SupervisorOpts {
        instances: s.instances.to_string(),
        env,
        // The supervisor's own backoff is not what is measured: an
        // instance killed again and again still comes back within 0.2 s.
        restart_delay_ms: Some(20),
        max_restart_delay_ms: Some(200),
        ..SupervisorOpts::default()
    });
    let payload = sh_order(
        &format!(
            "echo $ORDER_PARTITION:$ORDER_OFFSET:$ORDER_ATTEMPT:$PPID >> {}; sleep {}",
            shq(&ledger_path),
            s.job_ms as f64 / 1000.0
        ),
        None,
    );
    let now_ms = pool_worker::clock::wall_ms;
    let t_start = now_ms();
    let mut orders = Vec::new();
    let per = s.orders.div_ceil(s.partitions as usize);
    for p in 0..s.partitions {
        let n = per.min(s.orders - orders.len());
        orders.extend(produce_orders(
            bootstrap,
            orders_topic,
            &vec![payload.clone(); n],
            Some(p),
        ));
    }
    let want: BTreeSet<OrderId> = orders.iter().map(|o| OrderId::new(o.0, o.1)).collect();
    let mut reader = TopicReader::new(bootstrap, claims, 0).unwrap();
    let mut seed = u64::from(std::process::id()) ^ t_start;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n.max(1)
    };
    let mut kills: Vec<(u64, u32, u32)> = Vec::new();
    let deadline = Instant::now() + s.deadline;
    let mut done: BTreeSet<OrderId> = BTreeSet::new();
    loop {
        let _ = reader.catch_up(Duration::from_secs(5));
        for (_, r) in decode_all(&reader.records) {
            if r.event() == Event::Completed {
                if let Some(o) = r.order() {
                    done.insert(o);
                }
            }
        }
        if want.is_subset(&done) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {} of {} orders completed within {:?} ({} kills)",
            s.label,
            done.len(),
            want.len(),
            s.deadline,
            kills.len()
        );
        let pause = s.kill_every_ms / 2 + rnd(s.kill_every_ms);
        std::thread::sleep(Duration::from_millis(pause));
        for _ in 0..3 {
            let i = 1 + rnd(u64::from(s.instances)) as u32;
            if let Some(pid) = sup.kill_instance(i, libc::SIGKILL) {
                kills.push((now_ms(), i, pid));
                break;
            }
        }
    }
    sup.stop();
    let recs = decoded_claims(bootstrap, claims);
    let audit = Audit::of(&recs);
    let sup_state = sup.snapshot();
    // Runs per order (attempt, worker pid), from the ledger.
    let mut runs: BTreeMap<OrderId, Vec<(u32, u32)>> = BTreeMap::new();
    for line in ledger(&ledger_path) {
        let v: Vec<i64> = line.split(':').filter_map(|x| x.parse().ok()).collect();
        assert_eq!(v.len(), 4, "ledger line {line:?}");
        runs.entry(OrderId::new(v[0] as i32, v[1]))
            .or_default()
            .push((v[2] as u32, v[3] as u32));
    }
    let killed: BTreeSet<u32> = kills.iter().map(|k| k.2).collect();
    let sigkilled: BTreeSet<u32> = sup_state
        .exits
        .iter()
        .filter(|e| e.signal == Some(libc::SIGKILL))
        .map(|e| e.pid)
        .collect();
    let mut reruns = 0;
    let mut problems = Vec::new();
    for id in &want {
        let mut r = runs.get(id).cloned().unwrap_or_default();
        r.sort_unstable();
        r.pop();
        for (a, pid) in r {
            reruns += 1;
            if !(killed.contains(&pid) && sigkilled.contains(&pid)) {
                problems.push(format!(
                    "{id}: attempt {a} ran on {pid}, which was not killed, and ran again"
                ));
            }
        }
    }
    let lost = want
        .iter()
        .filter(|o| audit.orders.get(o).is_none_or(|t| t.completions.is_empty()))
        .count();
    let twice = want
        .iter()
        .filter(|o| audit.orders.get(o).is_some_and(|t| t.completions.len() > 1))
        .count();
    // Kill → the restarted instance's first claim or resumed commit (a
    // record of the instance written after the kill); censored when the
    // instance was killed again first, or never claimed again.
    let mut lat: Vec<u64> = Vec::new();
    for (k, &(t, i, _)) in kills.iter().enumerate() {
        let next_kill = kills[k + 1..]
            .iter()
            .find(|x| x.1 == i)
            .map_or(u64::MAX, |x| x.0);
        let first = recs.iter().map(|(_, r)| r).find(|r| {
            r.instance.get() == i
                && r.by().is_none()
                && matches!(r.event(), Event::Claimed | Event::Committed)
                && r.ts > t
        });
        if let Some(r) = first.filter(|r| r.ts < next_kill) {
            lat.push(r.ts - t);
        }
    }
    lat.sort_unstable();
    let last_done = recs
        .iter()
        .filter(|(_, r)| r.event() == Event::Completed)
        .map(|(_, r)| r.ts)
        .max()
        .unwrap_or(t_start);
    let secs = (last_done.saturating_sub(t_start)) as f64 / 1000.0;
    let line = format!(
        "{}: {} orders of {} ms, {} instances, a SIGKILL about every {} ms: {} kills, lost {lost}, completed twice {twice}, reruns {reruns} (each after a kill of its runner); {:.1} orders/s; kill → the restarted instance's first claim p50 {} ms, p99 {} ms, max {} ms ({} kills measured); claims records {}",
        s.label,
        s.orders,
        s.job_ms,
        s.instances,
        s.kill_every_ms,
        kills.len(),
        s.orders as f64 / secs.max(0.001),
        pct(&lat, 50.0),
        pct(&lat, 99.0),
        lat.last().copied().unwrap_or(0),
        lat.len(),
        recs.len()
    );
    println!("{line}");
    crate::common::record_figures(&line);
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{}: {e}", s.label));
    assert!(problems.is_empty(), "{}:\n{}", s.label, problems.join("\n"));
    assert_eq!((lost, twice), (0, 0));
    assert!(kills.len() >= 5, "too few kills: {kills:?}");
}

fn apache_storm(s: Storm) {
    let kafka = shared();
    let (orders_topic, claims) = kafka.topics(s.partitions);
    // The broker's transaction coordinator is made on first use (its topic
    // created): not part of what is measured.
    let warm = txn_producer(&kafka.bootstrap, &format!("warm-{claims}"));
    warm.init_transactions(T).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut env = kafka.env(&orders_topic, &claims, dir.path());
    if let Ok(v) = std::env::var("POOL_STORM_FETCH_WAIT_MS") {
        env.push(("KAFKA_FETCH_WAIT_MAX_MS".into(), v));
    }
    kill_storm(s, &kafka.bootstrap, &orders_topic, &claims, env);
}

/// Apache Kafka, the workers' defaults (the fence): a pool under a SIGKILL
/// about every 0.4 s loses nothing and runs nothing twice but what a kill
/// cut short. CI-sized; `kill_storm_on_apache_kafka_full` is issue 26's
/// workload.
#[test]
fn kill_storm_on_apache_kafka() {
    apache_storm(Storm {
        label: "kill storm, Apache Kafka",
        // Enough orders for at least 5 kills at the pool's pace: 60 took
        // 2.1 s at 28 orders/s once the guard host and the cheaper start
        // came, room for only 4.
        orders: 150,
        instances: 6,
        partitions: 3,
        job_ms: 50,
        kill_every_ms: 400,
        deadline: Duration::from_secs(180),
    });
}

#[test]
#[ignore = "long: cargo test --release --test live fence::kill_storm_on_apache_kafka_full -- --ignored --nocapture"]
fn kill_storm_on_apache_kafka_full() {
    apache_storm(Storm {
        label: "kill storm, Apache Kafka, full",
        orders: 200,
        instances: 6,
        partitions: 3,
        job_ms: 50,
        kill_every_ms: 400,
        deadline: Duration::from_secs(600),
    });
}

/// Where no broker can fence (the embedded broker: the workers settle,
/// docs/protocol.md R17): a process killed while it settles hands its
/// successor the deadline it was waiting for (`STATE_DIR`, `*.settle`), so
/// the successor does not start the wait over, and never boots before it.
#[test]
fn a_process_killed_while_it_settles_hands_on_its_deadline() {
    use crate::common::*;
    use pool_worker::record::Event;
    const SETTLE_MS: u64 = 4_000;
    let broker = broker(1);
    let state = tempfile::tempdir().unwrap();
    let mut env = broker.env();
    env.retain(|(k, _)| k != "SETTLE_MS" && k != "STATE_DIR");
    env.push(("SETTLE_MS".into(), SETTLE_MS.to_string()));
    env.push(("STATE_DIR".into(), state.path().display().to_string()));
    env.push(("INSTANCE_NUMBER".into(), "1".into()));
    let deadline_file = || {
        std::fs::read_dir(state.path())
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "settle"))
    };
    // A first start (no clean-exit marker) settles, and says until when.
    let mut a = WorkerProc::start("worker1a", &env);
    assert!(
        poll_until(T, Duration::from_millis(20), || deadline_file().is_some()),
        "no settle deadline in STATE_DIR"
    );
    let path = deadline_file().unwrap();
    let deadline: u64 = std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The scenario: killed halfway through its wait.
    let half = deadline.saturating_sub(SETTLE_MS / 2);
    std::thread::sleep(Duration::from_millis(
        half.saturating_sub(pool_worker::clock::wall_ms()),
    ));
    a.kill();
    let started = pool_worker::clock::wall_ms();
    assert!(
        started < deadline,
        "killed while settling ({started} < {deadline})"
    );
    let mut b = WorkerProc::start("worker1b", &env);
    let recs = wait_record(&broker, &broker.opts.coordination_topic, "a booted", |r| {
        r.event() == Event::Booted && r.instance.get() == 1
    });
    let booted = recs
        .iter()
        .find(|(_, r)| r.event() == Event::Booted)
        .map(|(_, r)| r.clone())
        .unwrap();
    assert!(
        booted.ts >= deadline,
        "booted at {} before the inherited deadline {deadline}",
        booted.ts
    );
    assert!(
        booted.ts < started + SETTLE_MS,
        "the wait started over: booted {} ms after the start",
        booted.ts - started
    );
    assert!(
        b.stderr.lines().iter().any(|l| l.contains("inherited")),
        "the successor says it waits for the inherited deadline\n{}",
        b.stderr.last(20)
    );
    assert!(
        deadline_file().is_none(),
        "the deadline is removed before booted is appended"
    );
    println!(
        "settle deadline inherited: the successor booted {} ms after its start (SETTLE_MS {SETTLE_MS}: starting over would have been {} ms)",
        booted.ts - started,
        SETTLE_MS
    );
    b.kill();
}

fn embedded_storm(s: Storm, settle_ms: Option<u64>) {
    let broker = crate::common::broker(s.partitions);
    let mut env = broker.env();
    // The harness's short SETTLE_MS replaced: the workers' default, or the
    // one given.
    env.retain(|(k, _)| k != "SETTLE_MS");
    if let Some(ms) = settle_ms {
        env.push(("SETTLE_MS".into(), ms.to_string()));
    }
    let (o, c) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    kill_storm(s, broker.bootstrap(), &o, &c, env);
}

/// The embedded broker (the workers settle, docs/protocol.md R17): with
/// each instance killed about every 3 s, as often as it settles, every
/// order still completes once. CI-sized; `kill_storm_on_the_embedded_broker_full`
/// is issue 26's workload with the workers' default SETTLE_MS.
#[test]
fn kill_storm_on_the_embedded_broker() {
    embedded_storm(
        Storm {
            label: "kill storm, embedded broker (settling, SETTLE_MS 3000)",
            // 80: with R34's two records per order, 40 orders were done
            // after 3 kills, too few for a storm (the last assertion).
            orders: 80,
            instances: 3,
            partitions: 3,
            job_ms: 50,
            kill_every_ms: 1000,
            deadline: Duration::from_secs(240),
        },
        Some(3_000),
    );
}

#[test]
#[ignore = "long: cargo test --release --test live fence::kill_storm_on_the_embedded_broker_full -- --ignored --nocapture"]
fn kill_storm_on_the_embedded_broker_full() {
    embedded_storm(
        Storm {
            label: "kill storm, embedded broker (settling, SETTLE_MS default)",
            orders: 200,
            instances: 6,
            partitions: 3,
            job_ms: 50,
            kill_every_ms: 1000,
            deadline: Duration::from_secs(900),
        },
        None,
    );
}

/// A partition's last stable offset (how far a read_committed reader may
/// read: the first record of the oldest open transaction, or the end) and
/// its high watermark (the end), as the broker answers ListOffsets for each
/// isolation level.
struct Stable {
    committed: BaseConsumer,
    uncommitted: BaseConsumer,
    topic: String,
}

impl Stable {
    fn new(bootstrap: &str, topic: &str) -> Stable {
        let make = |isolation: &str| -> BaseConsumer {
            ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("isolation.level", isolation)
                .create()
                .expect("consumer")
        };
        Stable {
            committed: make("read_committed"),
            uncommitted: make("read_uncommitted"),
            topic: topic.to_string(),
        }
    }

    /// (last stable offset, high watermark) of partition 0.
    fn now(&self) -> (i64, i64) {
        let end = self.uncommitted.fetch_watermarks(&self.topic, 0, T);
        let stable = self.committed.fetch_watermarks(&self.topic, 0, T);
        (stable.expect("watermarks").1, end.expect("watermarks").1)
    }
}

/// One instance on the shared Apache Kafka, on topics of its own, with
/// `orders` `true` orders waiting and `ORDERS_PER_PROCESS` so high that one
/// process appends record after record (three per order); the broker's
/// transaction coordinator warmed up first.
struct Busy {
    env: Vec<(String, String)>,
    ends: Stable,
    bootstrap: String,
    claims: String,
    _dir: tempfile::TempDir,
}

impl Busy {
    fn start(orders: usize) -> Busy {
        use crate::common::*;
        let kafka = shared();
        let (orders_topic, claims) = kafka.topics(1);
        let warm = txn_producer(&kafka.bootstrap, &format!("warm-{claims}"));
        warm.init_transactions(T).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut env = kafka.env(&orders_topic, &claims, dir.path());
        env.push(("INSTANCE_NUMBER".into(), "1".into()));
        env.push(("ORDERS_PER_PROCESS".into(), "100000".into()));
        produce_orders(
            &kafka.bootstrap,
            &orders_topic,
            &vec!["true"; orders],
            Some(0),
        );
        Busy {
            env,
            ends: Stable::new(&kafka.bootstrap, &claims),
            bootstrap: kafka.bootstrap.clone(),
            claims,
            _dir: dir,
        }
    }
}

/// Apache Kafka, `supervise` with standbys, which write under their
/// instance's two transactional ids in turn (docs/protocol.md R16): each
/// process in turn is SIGKILLed with a transaction of a claims record
/// open, and its successor is its standby, on the other id, told `go`
/// without `done`. The standby fences the dead process's id before it
/// appends, so the open transaction is aborted then; without that fence it
/// would hold back every reader (the claims topic's last stable offset)
/// until `transaction.timeout.ms` (10 s) runs out, or, as here, until the
/// next standby (started once the successor has booted) initialises its
/// id, which is that one: after the successor's `booted`, not before it as
/// R16 wants. So after each kill the successor, the standby, appends its
/// `booted` past the abort's marker (a position the claims topic's end had
/// not reached at the kill, with no record at it), and the last stable
/// offset reaches the end again soon.
#[test]
fn a_standby_on_the_other_id_fences_a_process_killed_inside_a_transaction() {
    use crate::common::*;
    let busy = Busy::start(2000);
    let ends = &busy.ends;
    let mut sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "1".into(),
        env: busy.env.clone(),
        restart_delay_ms: Some(20),
        ..SupervisorOpts::default()
    });
    let standbys = |s: &SupState| -> Vec<u64> {
        s.events
            .iter()
            .filter(|e| e["event"] == "standby")
            .filter_map(|e| e["pid"].as_u64())
            .collect()
    };
    for round in 0..3 {
        let pid = sup.wait_pid(1, T).expect("instance 1 runs");
        // Its standby is up (started once the process booted).
        sup.expect(
            "a standby for the running process",
            |s| standbys(s).len() > round,
            T,
        );
        let (_, start) = ends.now();
        let inside = poll_until(T, Duration::from_millis(1), || {
            let (stable, end) = ends.now();
            if end <= start + 6 || stable >= end {
                return false;
            }
            unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
            std::thread::sleep(Duration::from_millis(30));
            let (stable, end) = ends.now();
            if stable < end {
                return true;
            }
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
            false
        });
        assert!(
            inside,
            "round {round}: no open transaction seen\n{}",
            sup.stderr.last(20)
        );
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let (_, end_at_kill) = ends.now();
        let t = Instant::now();
        let mut last = (0, 0);
        let settled = poll_until(Duration::from_secs(3), Duration::from_millis(10), || {
            last = ends.now();
            last.0 == last.1 && last.1 > end_at_kill
        });
        assert!(
            settled,
            "round {round}: the claims topic's last stable offset and end {last:?} {:?} after the kill (end then {end_at_kill}): the dead process's transaction still open\n{}",
            t.elapsed(),
            sup.stderr.last(30)
        );
        // The successor is the standby.
        sup.expect(
            "the standby promoted",
            |s| {
                s.pid(1)
                    .is_some_and(|p| p != pid && standbys(s).contains(&u64::from(p)))
            },
            T,
        );
        // Its `booted` follows the abort's marker.
        let booted = decoded_claims(&busy.bootstrap, &busy.claims)
            .into_iter()
            .find(|(pos, r)| *pos >= end_at_kill && r.event() == pool_worker::record::Event::Booted)
            .map(|(pos, _)| pos);
        assert!(
            booted.is_some_and(|b| b > end_at_kill),
            "round {round}: the successor's `booted` at {booted:?}, the end at the kill {end_at_kill}: appended before the dead process's transaction was aborted"
        );
    }
    sup.stop();
}

/// Apache Kafka, the workers' defaults: a worker stopped by SIGTERM while
/// it appends (a transaction of a claims record seen open) ends it before
/// it exits, so that it does not hold back every read_committed reader
/// (the claims topic's last stable offset) until `transaction.timeout.ms`
/// (10 s) and the broker's abort of timed-out transactions: soon after the
/// exit, the last stable offset is the end.
#[test]
fn sigterm_leaves_no_transaction_open() {
    use crate::common::*;
    let busy = Busy::start(300);
    let (env, ends) = (busy.env.as_slice(), &busy.ends);
    for round in 0..3 {
        let (_, start) = ends.now();
        let mut w = WorkerProc::start("worker1", env);
        // Under way (past its boot), with a transaction open.
        let open = poll_until(T, Duration::from_millis(1), || {
            let (stable, end) = ends.now();
            end > start + 12 && stable < end
        });
        assert!(open, "round {round}: no open transaction seen");
        unsafe { libc::kill(w.pid() as i32, libc::SIGTERM) };
        let status = w.wait(T).expect("exits after SIGTERM");
        assert_eq!(status.code(), Some(143), "round {round}: {status:?}");
        let t = Instant::now();
        let mut last = (0, 0);
        let settled = poll_until(Duration::from_secs(3), Duration::from_millis(10), || {
            last = ends.now();
            last.0 == last.1
        });
        assert!(
            settled,
            "round {round}: 3 s after the exit the last stable offset is still {} (end {}): the stopped process left a transaction open\n{}",
            last.0,
            last.1,
            w.stderr.last(20)
        );
        println!(
            "round {round}: the last stable offset reached the end {} ms after the exit ({})",
            t.elapsed().as_millis(),
            last.1
        );
    }
}

/// The time a worker's fence took (`ms=` of its "fenced the instance's
/// previous processes" line), once it has logged it.
fn fence_ms(w: &crate::common::WorkerProc) -> Option<u64> {
    w.stderr
        .lines()
        .iter()
        .find(|l| l.contains("fenced the instance's previous processes"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|t| t.strip_prefix("ms=").and_then(|v| v.parse().ok()))
        })
}

/// Apache Kafka, the workers' defaults (issue 26): a process SIGKILLed
/// inside a transaction (or while its last commit's markers are written)
/// leaves its successor's `init_transactions` an answer
/// CONCURRENT_TRANSACTIONS while the coordinator aborts (or completes) it,
/// after which librdkafka asks again only on a 500 ms timer. The fence
/// (`Kafka::fence`) asks again every few milliseconds instead: its time
/// after such a kill (each kill here inside a transaction, the process
/// stopped first and killed only if it is still open 30 ms later) stays
/// well under the 500 ms.
#[test]
fn a_fence_after_a_kill_inside_a_transaction_is_quick() {
    use crate::common::*;
    let busy = Busy::start(2000);
    let (env, ends) = (busy.env.as_slice(), &busy.ends);
    let rounds = 10;
    let mut w = WorkerProc::start("worker1", env);
    let mut times = Vec::new();
    for round in 0..rounds {
        // Past its boot and fence, with a transaction open: stopped, and
        // killed if the transaction is still open 30 ms later (not one
        // whose commit was already on its way).
        let (_, start) = ends.now();
        let pid = w.pid() as i32;
        let inside = poll_until(T, Duration::from_millis(1), || {
            let (stable, end) = ends.now();
            if end <= start + 12 || stable >= end {
                return false;
            }
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            std::thread::sleep(Duration::from_millis(30));
            let (stable, end) = ends.now();
            if stable < end {
                return true;
            }
            unsafe { libc::kill(pid, libc::SIGCONT) };
            false
        });
        assert!(
            inside,
            "round {round}: no open transaction seen\n{}",
            w.stderr.last(20)
        );
        unsafe { libc::kill(pid, libc::SIGKILL) };
        w.wait(T).expect("exits after SIGKILL");
        w = WorkerProc::start("worker1", env);
        let mut ms = None;
        let fenced = poll_until(T, Duration::from_millis(5), || {
            ms = fence_ms(&w);
            ms.is_some()
        });
        assert!(
            fenced,
            "round {round}: no fence logged\n{}",
            w.stderr.last(20)
        );
        times.push(ms.unwrap_or(0));
    }
    let mut sorted = times.clone();
    sorted.sort_unstable();
    let line = format!(
        "fence after a SIGKILL inside a transaction, Apache Kafka: init_transactions ms per round {times:?}; p50 {} ms, max {} ms",
        pct(&sorted, 50.0),
        sorted.last().copied().unwrap_or(0)
    );
    println!("{line}");
    crate::common::record_figures(&line);
    assert!(
        pct(&sorted, 50.0) < 250,
        "the fence waits for librdkafka's 500 ms retry timer: {line}"
    );
}

/// A standby where the broker cannot fence (the embedded broker:
/// `CLAIMS_FENCE=settle`) waits for `go` before it does anything: settling
/// must not start while its predecessor may still append (docs/protocol.md
/// R17). Dismissed before `go` (end of input), it exits 0 having appended
/// nothing, and the waiting order is not run.
#[test]
fn a_settling_standby_does_nothing_before_go() {
    use crate::common::*;
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(1);
    let order = sh_order(&format!("echo ran >> {}", shq(&ledger)), None);
    produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &[order],
        Some(0),
    );
    let mut env = broker.env();
    env.push(("INSTANCE_NUMBER".into(), "1".into()));
    env.push(("ALLOWED_COMMANDS".into(), "sh".into()));
    env.push(("POOL_WORKER_STANDBY".into(), "1".into()));
    assert!(env.contains(&("CLAIMS_FENCE".into(), "settle".into())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // Standard input is /dev/null: dismissed at once.
    let (code, err) = run_worker_once(&env, T);
    assert_eq!(code, Some(0), "stderr: {err}");
    assert!(err.contains("standby dismissed"), "stderr: {err}");
    assert_eq!(
        read_claims(broker.bootstrap(), &broker.opts.coordination_topic).len(),
        0,
        "a dismissed standby appends nothing"
    );
    assert!(!ledger.exists(), "the order ran");
}

/// Apache Kafka, `supervise` with standbys (docs/protocol.md R16, "Handed
/// boot"): a process told its heir (the standby's incarnation) appends the
/// heir's `booted` in the transaction of its last `completed`, right after
/// it (the next position: no commit marker between, one transaction), and
/// the heir appends no `booted` of its own: its first record after that
/// is its claim. Of 6 orders run one after the other by one instance,
/// every process but the first is booted so (the first, a plain start,
/// is told its heir on its standard input too), except, now and then, the
/// first standby, when the first order is done before the standby runs;
/// every order completes once. Each heir boots from the View its
/// predecessor handed it ("Handed view").
#[test]
fn a_process_hands_its_standby_its_booted_with_its_last_completion() {
    use crate::common::*;
    use pool_worker::record::Event;
    let kafka = shared();
    let (orders_topic, claims) = kafka.topics(1);
    let dir = tempfile::tempdir().unwrap();
    let mut sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "1".into(),
        env: kafka.env(&orders_topic, &claims, dir.path()),
        restart_delay_ms: Some(20),
        ..SupervisorOpts::default()
    });
    sup.wait_pid(1, T).expect("instance 1 runs");
    let orders = produce_orders(&kafka.bootstrap, &orders_topic, &["true"; 6], Some(0));
    let audit = wait_and_audit(&kafka.bootstrap, &claims, &orders, Duration::from_secs(120));
    audit.check_exactly_once(&orders).unwrap();
    let log = decoded_claims(&kafka.bootstrap, &claims);
    let mut handed = 0;
    for (k, (pos, b)) in log.iter().enumerate() {
        if b.event() != Event::Booted {
            continue;
        }
        let before = k.checked_sub(1).map(|j| &log[j]);
        let Some((p, c)) = before.filter(|(p, c)| {
            *p + 1 == *pos && c.event() == Event::Completed && c.exits() && c.instance == b.instance
        }) else {
            continue;
        };
        handed += 1;
        assert_ne!(
            c.incarnation, b.incarnation,
            "at {p}: the heir is another process"
        );
        assert_eq!(b.seq, 1, "at {pos}: the heir's first record");
        // The heir's next record is its own claim, numbered 2: no booted
        // of its own in between.
        let next = log[k + 1..]
            .iter()
            .find(|(_, r)| r.instance == b.instance)
            .map(|(q, r)| (q, r.event(), r.incarnation.clone(), r.seq));
        if let Some((q, ev, inc, seq)) = next {
            assert_eq!(
                (ev, inc, seq),
                (Event::Claimed, b.incarnation.clone(), 2),
                "at {q}: after the handed booted at {pos}"
            );
        }
    }
    assert!(
        handed >= 5,
        "{handed} handed boots of 6 orders: {:?}\n{}",
        log.iter()
            .map(|(p, r)| format!("{p} {} {} {}", r.event().as_str(), r.incarnation, r.seq))
            .collect::<Vec<_>>(),
        sup.stderr.last(30)
    );
    // R16, "Handed view": each heir booted from its predecessor's View,
    // not from a replay of its own.
    let from_views = sup
        .stderr
        .lines()
        .iter()
        .filter(|l| l.contains("booting from the view the previous process handed over"))
        .count();
    assert!(
        from_views + 1 >= handed && from_views > 0,
        "{from_views} boots from a handed view, {handed} handed boots\n{}",
        sup.stderr.last(30)
    );
    sup.stop();
}
