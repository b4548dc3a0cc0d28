//! Parked orders on Apache Kafka (issue 36 items 2 and 3, docs/protocol.md
//! R54–R56): an order with a `not_before` still ahead waits without
//! holding up the orders behind it and starts no earlier than that time;
//! with KEY_CONCURRENCY=1, orders of one `key` run one at a time, in
//! offset order, while other orders run beside them.
//!
//! The jobs write what they saw (`P:O INSTANCE ATTEMPT TIME_MS`, by their
//! own clock, `date +%s%3N`) to files: the start of each run, and for the
//! keyed orders heartbeats ([`heartbeat_order`]) and an end line.

use crate::common::apache::shared;
use crate::common::netfault::{heartbeat_dir, heartbeat_order, BEAT_MS};
use crate::common::*;
use pool_worker::record::{Event, OrderId};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// A pool of `instances` against fresh topics of the shared Apache Kafka
/// (one orders partition), `extra` added to its environment; returns once
/// every instance has booted (its `booted` record is in the claims topic).
fn pool_on_apache(
    instances: u32,
    extra: &[(&str, &str)],
    state: &Path,
) -> (SupervisorProc, String, String, Vec<(String, String)>) {
    let kafka = shared();
    let (orders, claims) = kafka.topics(1);
    let mut env = kafka.env(&orders, &claims, state);
    // One process per instance for the whole test: the runs are what is
    // judged, not the restarts.
    env.push(("ORDERS_PER_PROCESS".into(), "1000".into()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let sup = SupervisorProc::start(&instances.to_string(), &env);
    let booted = poll_until(LONG, Duration::from_millis(100), || {
        let recs = decoded_claims(&kafka.bootstrap, &claims);
        let mut who: Vec<u32> = recs
            .iter()
            .filter(|(_, r)| r.event() == Event::Booted)
            .map(|(_, r)| r.instance.get())
            .collect();
        who.sort_unstable();
        who.dedup();
        who.len() as u32 >= instances
    });
    assert!(booted, "the pool did not boot: {}", sup.stderr.last(30));
    (sup, orders, claims, env)
}

/// A JSON order that appends `P:O INSTANCE ATTEMPT TIME_MS` (its start, by
/// the job's clock) to `file`.
fn start_stamp_order(file: &Path) -> String {
    sh_order(
        &format!(
            "echo \"$ORDER_PARTITION:$ORDER_OFFSET $INSTANCE_NUMBER $ORDER_ATTEMPT $(date +%s%3N)\" >> {}",
            shq(file)
        ),
        None,
    )
}

/// The lines of a start-stamp file: (order, instance, attempt, time_ms).
fn stamps(file: &Path) -> Vec<(String, u32, u32, u64)> {
    ledger(file)
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.to_string(),
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                f.get(3)?.parse().ok()?,
            ))
        })
        .collect()
}

/// An order with a `not_before` 3 s ahead (sent with `submit --in 3s`),
/// then 5 plain orders: the plain ones complete before the delayed one
/// starts (it does not hold them up), it starts no earlier than its
/// `not_before` by its job's own clock, and every order completes
/// exactly once, its job run once. Then an order due in an hour (`submit
/// --in 1h --key later`) is parked, and `status` and `history` say so.
#[test]
fn apache_delayed_order_waits_without_holding_up_the_rest() {
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (sup, orders_topic, claims, env) = pool_on_apache(3, &[], dir.path());
    let kafka = shared();
    let file = dir.path().join("starts");
    let delayed_order = start_stamp_order(&file);
    let out = command()
        .args(["submit", "--in", "3s", "--json-file", "-"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(delayed_order.as_bytes())?;
            c.wait_with_output()
        })
        .expect("pool_worker submit");
    assert!(
        out.status.success(),
        "submit --in 3s: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let delayed: OrderId = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("submit prints the order");
    let plain = produce_orders(
        &kafka.bootstrap,
        &orders_topic,
        &vec![start_stamp_order(&file); 5],
        Some(0),
    );
    // The order as sent: its not_before, as the workers read it.
    let sent = read_topic(&kafka.bootstrap, &orders_topic, 0);
    let text = sent
        .iter()
        .find(|(o, _, _)| *o == delayed.offset)
        .and_then(|(_, _, v)| v.clone())
        .expect("the delayed order in the orders topic");
    let spec = pool_worker::orders::parse(Some(&text)).expect("a valid order");
    let not_before = spec.not_before.expect("submit --in set not_before");
    let mut all = vec![(delayed.partition, delayed.offset)];
    all.extend(&plain);
    let audit = wait_and_audit(&kafka.bootstrap, &claims, &all, LONG);
    let records = decoded_claims(&kafka.bootstrap, &claims);
    audit
        .check_exactly_once(&all)
        .unwrap_or_else(|e| panic!("{e}\n{}", show_all(&records)));
    // Each job ran once.
    let runs = stamps(&file);
    let mut per_order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (o, _, _, t) in &runs {
        per_order.entry(o.clone()).or_default().push(*t);
    }
    assert_eq!(per_order.len(), 6, "{runs:?}");
    assert!(
        per_order.values().all(|v| v.len() == 1),
        "a job ran twice: {runs:?}"
    );
    let delayed_start = per_order[&delayed.to_string()][0];
    assert!(
        delayed_start >= not_before,
        "the delayed order's job started at {delayed_start}, before its not_before {not_before}"
    );
    // The plain ones completed before it started (their completions' times
    // are the same host's clock as the job's `date`).
    for &(p, o) in &plain {
        let done = audit.orders[&OrderId::new(p, o)].completions[0].1.ts;
        assert!(
            done <= delayed_start,
            "plain order {p}:{o} completed at {done}, after the delayed one started at {delayed_start}\n{}",
            show_all(&records)
        );
    }
    // It was parked: one `parked` record about it, none about the others.
    let parks: Vec<OrderId> = records
        .iter()
        .filter(|(_, r)| r.event() == Event::Parked)
        .filter_map(|(_, r)| r.order())
        .collect();
    assert!(
        !parks.is_empty() && parks.iter().all(|o| *o == delayed),
        "parked records: {parks:?}\n{}",
        show_all(&records)
    );
    // An order due in an hour, with a key: parked, `status` and `history`
    // show it, not due, with its time and key.
    let out = command()
        .args(["submit", "--in", "1h", "--key", "later", "--", "true"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("pool_worker submit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let later: OrderId = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("submit prints the order");
    let parked = poll_until(LONG, Duration::from_millis(100), || {
        decoded_claims(&kafka.bootstrap, &claims)
            .iter()
            .any(|(_, r)| r.event() == Event::Parked && r.order() == Some(later))
    });
    assert!(
        parked,
        "order {later} was not parked: {}",
        sup.stderr.last(30)
    );
    let out = command()
        .args(["status", "--json"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("pool_worker status");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let rows = status["parked"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{status}");
    let row = &rows[0];
    assert_eq!(row["order"], later.to_string(), "{row}");
    assert_eq!(
        (row["due"].as_bool(), row["key"].as_str()),
        (Some(false), Some("later")),
        "{row}"
    );
    let until = row["until_ms"].as_u64().expect("until_ms");
    assert!(
        until > not_before + 3_000_000,
        "due in about an hour: {row}"
    );
    let out = command()
        .args(["history", &later.to_string()])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("pool_worker history");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("parked now, held by nobody until due and its key has room: due ")
            && text.contains(", key later, attempt 1")
            && !text.contains("(due)"),
        "{text}"
    );
    drop(sup);
    eprintln!(
        "apache_delayed_order: {} s in all; the delayed order started {} ms after its not_before, {} parked record(s), {} claims records",
        started.elapsed().as_secs_f64(),
        delayed_start - not_before,
        parks.len(),
        records.len()
    );
}

/// One run of a heartbeat order: its first beat and its end line's time.
#[derive(Debug, Clone)]
struct Span {
    order: String,
    first: u64,
    end: u64,
}

/// Every run in `dir` that wrote its end line; the others are returned
/// apart (order names).
fn spans(dir: &Path) -> (Vec<Span>, Vec<String>) {
    let mut runs: BTreeMap<String, (String, Option<u64>, Option<u64>)> = BTreeMap::new();
    for e in std::fs::read_dir(dir)
        .expect("the heartbeat directory")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(order), Some(t)) = (f.first(), f.get(3).and_then(|t| t.parse::<u64>().ok()))
            else {
                continue;
            };
            let run = runs
                .entry(name.clone())
                .or_insert_with(|| (order.to_string(), None, None));
            if f.get(4) == Some(&"end") {
                run.2 = Some(t);
            } else {
                run.1 = Some(run.1.map_or(t, |x: u64| x.min(t)));
            }
        }
    }
    let mut ended = Vec::new();
    let mut open = Vec::new();
    for (order, first, end) in runs.into_values() {
        match (first, end) {
            (Some(first), Some(end)) => ended.push(Span { order, first, end }),
            _ => open.push(order),
        }
    }
    (ended, open)
}

/// KEY_CONCURRENCY=1, 3 instances: 4 orders of key "a" (each a second of
/// heartbeats), 3 of key "b" and 3 without a key, interleaved: no two
/// runs of "a" are alive at once, runs of "b" or keyless ones start while
/// one of "a" runs, the orders of "a" start in offset order, and every
/// order completes exactly once with one run.
#[test]
fn apache_key_runs_one_at_a_time() {
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let beats = heartbeat_dir(dir.path());
    let (sup, orders_topic, claims, _) = pool_on_apache(3, &[("KEY_CONCURRENCY", "1")], dir.path());
    let kafka = shared();
    let keyed = |key: Option<&str>| {
        let mut v: serde_json::Value =
            serde_json::from_str(&heartbeat_order(&beats, 5)).expect("JSON order");
        if let Some(k) = key {
            v["key"] = k.into();
        }
        v.to_string()
    };
    let plan = [
        Some("a"),
        Some("a"),
        Some("b"),
        None,
        Some("a"),
        Some("b"),
        None,
        Some("a"),
        Some("b"),
        None,
    ];
    let payloads: Vec<String> = plan.iter().map(|k| keyed(*k)).collect();
    let sent = produce_orders(&kafka.bootstrap, &orders_topic, &payloads, Some(0));
    let key_of: BTreeMap<String, Option<&str>> = sent
        .iter()
        .zip(plan)
        .map(|((p, o), k)| (format!("{p}:{o}"), k))
        .collect();
    let audit = wait_and_audit(&kafka.bootstrap, &claims, &sent, LONG);
    let records = decoded_claims(&kafka.bootstrap, &claims);
    audit
        .check_exactly_once(&sent)
        .unwrap_or_else(|e| panic!("{e}\n{}", show_all(&records)));
    let (runs, open) = spans(&beats);
    let shown = format!("{runs:#?}\nnot ended: {open:?}\n{}", show_all(&records));
    assert!(open.is_empty(), "runs that never ended: {shown}");
    // One run per order.
    let mut per_order: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &runs {
        *per_order.entry(&r.order).or_default() += 1;
    }
    assert!(
        per_order.len() == sent.len() && per_order.values().all(|n| *n == 1),
        "not one run per order: {per_order:?}\n{shown}"
    );
    let of_key = |k: Option<&str>| -> Vec<&Span> {
        let mut v: Vec<&Span> = runs.iter().filter(|r| key_of[&r.order] == k).collect();
        v.sort_by_key(|r| r.first);
        v
    };
    let a = of_key(Some("a"));
    // Never two runs of "a" alive at once: each starts after the one
    // before it ended (the jobs' own clock, one host).
    for w in a.windows(2) {
        assert!(
            w[1].first > w[0].end,
            "runs of key a alive at once: {:?} and {:?}\n{shown}",
            w[0],
            w[1]
        );
    }
    // In offset order.
    let offsets: Vec<i64> = a
        .iter()
        .map(|r| r.order.parse::<OrderId>().expect("P:O").offset)
        .collect();
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(
        offsets, sorted,
        "the orders of key a started out of offset order\n{shown}"
    );
    // Others ran meanwhile.
    let others: Vec<&Span> = runs
        .iter()
        .filter(|r| key_of[&r.order] != Some("a"))
        .collect();
    let beside = others
        .iter()
        .filter(|o| a.iter().any(|r| r.first <= o.first && o.first <= r.end))
        .count();
    assert!(
        beside > 0,
        "no run of key b or without a key started while one of key a ran\n{shown}"
    );
    let parks = records
        .iter()
        .filter(|(_, r)| r.event() == Event::Parked)
        .count();
    drop(sup);
    eprintln!(
        "apache_key_runs_one_at_a_time: {:.1} s in all; key a ran from {} to {} ms ({} ms of jobs of {BEAT_MS} ms beats); {beside} other runs started beside one of a; {parks} parked records, {} claims records",
        started.elapsed().as_secs_f64(),
        a[0].first,
        a[a.len() - 1].end,
        a.iter().map(|r| r.end - r.first).sum::<u64>(),
        records.len()
    );
}
