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
