//! Priority topics on Apache Kafka (issue 36 item 1, docs/protocol.md R57):
//! `ORDERS_TOPIC=urgent,work` — an idle instance takes a waiting order of
//! the first topic that has one, so urgent orders sent behind a backlog
//! start before the backlog drains.
//!
//! The jobs write their start (`ORDER_TOPIC:ORDER_PARTITION:ORDER_OFFSET
//! INSTANCE ATTEMPT TIME_MS`, R45's idempotency key first) to one file, in
//! the order they start; the claims log says every order completed exactly
//! once.

use crate::common::apache::shared;
use crate::common::*;
use pool_worker::record::{Event, Lane, OrderId, Topic};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// An order that appends its start line to `file`, then sleeps `secs`.
fn stamp_then_sleep(file: &Path, secs: &str) -> String {
    sh_order(
        &format!(
            "echo \"$ORDER_TOPIC:$ORDER_PARTITION:$ORDER_OFFSET $INSTANCE_NUMBER $ORDER_ATTEMPT $(date +%s%3N)\" >> {}; sleep {secs}",
            shq(file)
        ),
        None,
    )
}

/// Two instances, `ORDERS_TOPIC=urgent,work`: 12 backlog orders (0.4 s
/// each) sent to `work`; once the first has started, 2 orders sent to
/// `urgent`. Both urgent orders start before the last backlog order
/// starts; every order completes exactly once, its job run once, and its
/// job saw its own topic's name in `ORDER_TOPIC`. `status` shows what
/// waits per topic, in priority order; `history` takes an urgent order's
/// `TOPIC:P:O`.
#[test]
fn apache_urgent_orders_start_before_the_backlog_drains() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let kafka = shared();
    let (work, claims) = kafka.topics(1);
    let urgent = kafka.orders_topic("urgent", 1);
    let mut env = kafka.env(&format!("{urgent},{work}"), &claims, dir.path());
    env.push(("ORDERS_PER_PROCESS".into(), "1000".into()));
    let sup = SupervisorProc::start("2", &env);
    let booted = poll_until(LONG, Duration::from_millis(100), || {
        let who: BTreeSet<u32> = decoded_claims(&kafka.bootstrap, &claims)
            .iter()
            .filter(|(_, r)| r.event() == Event::Booted)
            .map(|(_, r)| r.instance.get())
            .collect();
        who.len() >= 2
    });
    assert!(booted, "the pool did not boot: {}", sup.stderr.last(30));

    let file = dir.path().join("starts");
    let backlog: Vec<OrderId> = produce_orders(
        &kafka.bootstrap,
        &work,
        &vec![stamp_then_sleep(&file, "0.4"); 12],
        Some(0),
    )
    .into_iter()
    .map(|(p, o)| OrderId::new(p, o))
    .collect();
    // The first backlog order has started (its job wrote its line).
    assert!(
        poll_until(LONG, Duration::from_millis(20), || !ledger(&file)
            .is_empty()),
        "no backlog order started: {}",
        sup.stderr.last(30)
    );
    let urgent_topic = Topic::named(&urgent).unwrap();
    let urgent_orders: Vec<OrderId> = produce_orders(
        &kafka.bootstrap,
        &urgent,
        &vec![stamp_then_sleep(&file, "0"); 2],
        Some(0),
    )
    .into_iter()
    .map(|(p, o)| Lane::new(urgent_topic, p).at(o))
    .collect();

    // Every order completed (looked for by its whole id: the two topics'
    // orders share partitions and offsets).
    let all: Vec<OrderId> = backlog.iter().chain(&urgent_orders).copied().collect();
    let done = poll_until(LONG, Duration::from_millis(100), || {
        let completed: BTreeSet<OrderId> = decoded_claims(&kafka.bootstrap, &claims)
            .iter()
            .filter(|(_, r)| r.event() == Event::Completed)
            .filter_map(|(_, r)| r.order())
            .collect();
        all.iter().all(|o| completed.contains(o))
    });
    let records = decoded_claims(&kafka.bootstrap, &claims);
    assert!(done, "not all completed:\n{}", show_all(&records));
    Audit::of(&records)
        .check_exactly_once_ids(&all)
        .unwrap_or_else(|e| panic!("{e}\n{}", show_all(&records)));

    // The jobs' starts, in the order they were written: each order's
    // key is its topic's name, partition and offset.
    let key = |o: &OrderId| {
        let name = o.topic.name().unwrap_or(&work);
        format!("{name}:{}:{}", o.partition, o.offset)
    };
    let starts: Vec<String> = ledger(&file)
        .iter()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let mut expected: Vec<String> = all.iter().map(key).collect();
    expected.sort();
    let mut seen = starts.clone();
    seen.sort();
    assert_eq!(seen, expected, "each job ran once, with ORDER_TOPIC set");
    let at = |o: &OrderId| starts.iter().position(|s| *s == key(o)).unwrap();
    let last_backlog = backlog.iter().map(at).max().unwrap();
    for u in &urgent_orders {
        assert!(
            at(u) < last_backlog,
            "urgent order {u} started at #{} of {starts:?}, after the backlog drained (#{last_backlog})",
            at(u)
        );
    }
    // Not just before the last: the two instances run two backlog orders
    // at a time, so an urgent order goes ahead of all but a few.
    let behind = backlog
        .iter()
        .filter(|b| urgent_orders.iter().all(|u| at(b) > at(u)))
        .count();
    assert!(
        behind >= 4,
        "only {behind} backlog orders started after both urgent ones: {starts:?}"
    );

    // The tools read the same list: `status` says what waits per topic in
    // priority order; `history` takes TOPIC:P:O.
    let out = command()
        .args(["status", "--json"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("pool_worker status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json");
    let by_topic: Vec<(String, i64, i64)> = s["orders_by_topic"]
        .as_array()
        .expect("orders_by_topic")
        .iter()
        .map(|t| {
            (
                t["topic"].as_str().unwrap_or_default().to_string(),
                t["in_topic"].as_i64().unwrap_or(-1),
                t["waiting"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        by_topic,
        vec![(urgent.clone(), 2, 0), (work.clone(), 12, 0)]
    );
    let out = command()
        .args(["history", &urgent_orders[1].to_string()])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("pool_worker history");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("completed"),
        "history {}: {text}{}",
        urgent_orders[1],
        String::from_utf8_lossy(&out.stderr)
    );
    drop(sup);
    eprintln!(
        "apache_urgent_orders_start_before_the_backlog_drains: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
