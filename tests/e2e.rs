//! End-to-end tests: the real binary (broker, supervisor, workers as separate
//! processes), judged by the claims topic (the audit trail) and by ledger
//! files the jobs write.
//!
//! Every wait has a deadline. The invariants checked everywhere: each order
//! has exactly one `completed`, exactly one instance whose first decision
//! after its claim was `committed`, that same instance completes it, and its
//! job's side effect (a ledger line) happens once per run.

mod common;

use common::*;
use pool_worker::record::{Event, Status};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Budget for a whole pool run in these tests.
const LONG: Duration = Duration::from_secs(240);
const T: Duration = Duration::from_secs(60);

fn broker(partitions: i32) -> BrokerProc {
    BrokerProc::start_with(BrokerOpts {
        orders_topic: unique_topic("orders"),
        orders_partitions: partitions,
        coordination_topic: unique_topic("claims"),
        ..BrokerOpts::default()
    })
}

/// The supervisor's options for worker mode against `broker`.
fn pool(broker: &BrokerProc, instances: &str, extra: &[(&str, &str)]) -> SupervisorProc {
    let mut env = broker.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    SupervisorProc::start_with(SupervisorOpts {
        instances: instances.into(),
        env,
        restart_delay_ms: Some(20),
        ..SupervisorOpts::default()
    })
}

/// An order that appends "$ORDER_PARTITION:$ORDER_OFFSET" to `ledger`.
fn ledger_order(ledger: &std::path::Path) -> String {
    sh_order(&format!("echo $ORDER_PARTITION:$ORDER_OFFSET >> {}", shq(ledger)), None)
}

/// Ledger lines counted.
fn counts(lines: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in lines {
        *m.entry(l.clone()).or_default() += 1;
    }
    m
}

/// Asserts that the ledger holds exactly one line "P:O" per order.
fn assert_ledger_once(ledger: &std::path::Path, orders: &[(i32, i64)], audit: &Audit) {
    let c = counts(&common::ledger(ledger));
    for &(p, o) in orders {
        let n = c.get(&format!("{p}:{o}")).copied().unwrap_or(0);
        assert_eq!(n, 1, "order {p}:{o} ran {n} times\n{}", audit.show((p, o)));
    }
    assert_eq!(c.len(), orders.len(), "unexpected ledger lines: {c:?}");
}

#[test]
fn exactly_once_200_orders_4_instances() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(2);
    let (topic, claims) = (broker.opts.orders_topic.clone(), broker.opts.coordination_topic.clone());
    let sup = pool(&broker, "4", &[]);
    let payloads = vec![ledger_order(&ledger); 100];
    // Half the orders before the pool is up, half while it runs.
    let mut orders = produce_orders(broker.bootstrap(), &topic, &payloads[..50], Some(0));
    orders.extend(produce_orders(broker.bootstrap(), &topic, &payloads[..50], Some(1)));
    sup.expect("4 instances started", |s| (1..=4).all(|i| s.starts(i) >= 1), T);
    orders.extend(produce_orders(broker.bootstrap(), &topic, &payloads[50..], Some(0)));
    orders.extend(produce_orders(broker.bootstrap(), &topic, &payloads[50..], Some(1)));
    assert_eq!(orders.len(), 200);

    let audit = wait_and_audit(broker.bootstrap(), &claims, &orders, LONG);
    audit.check_exactly_once(&orders).unwrap_or_else(|e| panic!("{e}"));
    // Every commit precedes the completion of the same instance.
    for (id, t) in &audit.orders {
        let (pos, done) = &t.completions[0];
        let (cpos, ci) = t.effective_commits[0];
        assert!(cpos < *pos && ci == done.instance, "{id}: {}", audit.show((id.partition, id.offset)));
        assert_eq!(done.outcome.as_ref().map(|o| o.status), Some(Status::Ok), "{id}");
    }
    assert_eq!(audit.orders.len(), 200, "claims name orders that were never produced");
    assert_ledger_once(&ledger, &orders, &audit);
    let s = sup.snapshot();
    assert!(s.exits.iter().all(|e| e.code == Some(0)), "a worker exited abnormally: {:?}", s.exits);
    eprintln!(
        "e2e: 200 orders, {} worker starts, {} yields, {:?}",
        s.total_starts(),
        audit.orders.values().map(|t| t.decisions.iter().filter(|d| d.2 == Event::Yielded).count()).sum::<usize>(),
        started.elapsed()
    );
}
