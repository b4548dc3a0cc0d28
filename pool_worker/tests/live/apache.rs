//! The pool against Apache Kafka (scripts/kafka.sh: the pinned Apache Kafka
//! from Maven Central, KRaft mode, on loopback), with the workers' defaults:
//! no setting of the embedded broker's, topics made by
//! scripts/create-topics.sh, orders sent by Kafka's own console producer.

use crate::common::apache::{shared, Apache};
use crate::common::*;
use crate::e2e::{assert_completed_ok_by_committer, assert_ledger_once};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(240);

/// Every order of `topic` (partitions 0..`partitions`), as (partition, offset).
pub fn orders_of(kafka: &Apache, topic: &str, partitions: i32) -> Vec<(i32, i64)> {
    (0..partitions)
        .flat_map(|p| {
            read_topic(&kafka.bootstrap, topic, p)
                .into_iter()
                .map(move |(o, _, _)| (p, o))
        })
        .collect()
}

/// N instances under `supervise`, `count` orders from the console producer,
/// the topics from scripts/create-topics.sh: each order completes once, by
/// the instance that committed it, and its job ran once.
fn end_to_end(partitions: i32, instances: &str, count: usize) {
    let kafka = shared();
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let (orders_topic, claims) = (unique_topic("orders"), unique_topic("claims"));
    let parts = partitions.to_string();
    let out = kafka.create_topics_script(
        &[
            ("ORDERS_TOPIC", &orders_topic),
            ("COORDINATION_TOPIC", &claims),
            ("ORDERS_PARTITIONS", &parts),
        ],
        &[],
    );
    assert!(out.contains("PartitionCount: 1"), "{out}");
    let sup = SupervisorProc::start_with(SupervisorOpts {
        instances: instances.into(),
        env: kafka.env(&orders_topic, &claims, dir.path()),
        ..SupervisorOpts::default()
    });
    kafka.console_produce(&orders_topic, &vec![ledger_order(&ledger); count]);
    let orders = orders_of(kafka, &orders_topic, partitions);
    assert_eq!(
        orders.len(),
        count,
        "the console producer wrote {count} orders"
    );
    let audit = wait_and_audit(&kafka.bootstrap, &claims, &orders, LONG);
    audit.check_exactly_once(&orders).unwrap();
    assert_completed_ok_by_committer(&audit);
    assert_ledger_once(&ledger, &orders, &audit);
    assert_standbys_took_over(&sup.snapshot().events);
    drop(sup);
}

/// Every start of an instance after its first was of a process that stood
/// by first (pool_worker/src/supervise.rs, STANDBY), and at least one happened.
fn assert_standbys_took_over(events: &[serde_json::Value]) {
    let mut standing = std::collections::HashSet::new();
    let mut first = std::collections::HashSet::new();
    let mut promoted = 0;
    for e in events {
        let (Some(i), Some(pid)) = (e["instance"].as_u64(), e["pid"].as_u64()) else {
            continue;
        };
        match e["event"].as_str() {
            Some("standby") => {
                standing.insert(pid);
            }
            Some("started") if first.insert(i) => {}
            Some("started") => {
                assert!(
                    standing.contains(&pid),
                    "instance {i}'s pid {pid} started without standing by: {events:?}"
                );
                promoted += 1;
            }
            _ => {}
        }
    }
    assert!(promoted > 0, "no standby took over: {events:?}");
}

#[test]
fn exactly_once_one_partition_3_instances() {
    end_to_end(1, "3", 40);
}

#[test]
fn exactly_once_three_partitions_4_instances() {
    end_to_end(3, "4", 60);
}
