//! The claims topic's trust boundary (issue 18), against the real binary:
//! records a writer of the claims topic forges are skipped as foreign and
//! change nothing — impossible claims always, unsigned or badly signed
//! records when the pool has a `CLAIMS_KEY`.

use crate::common::*;
use pool_worker::record::{Event, OrderId, Outcome, Record, Status};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
const KEY: &str = "the pool's claims key, 32 bytes!";

fn now_ms() -> u64 {
    pool_worker::clock::wall_ms()
}

/// Writes records to the claims topic, each with an optional `pool-sig`
/// header.
fn forge(bootstrap: &str, topic: &str, records: &[(Record, Option<String>)]) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .create()
        .unwrap();
    for (r, sig) in records {
        let (key, value) = (r.key(), r.encode());
        let mut br = BaseRecord::<str, [u8]>::to(topic)
            .partition(0)
            .key(&key)
            .payload(&value);
        if let Some(s) = sig {
            let h = rdkafka::message::Header {
                key: pool_worker::sign::HEADER,
                value: Some(s.as_bytes()),
            };
            br = br.headers(rdkafka::message::OwnedHeaders::new().insert(h));
        }
        p.send(br).map_err(|(e, _)| e).unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// Every record of the claims topic: key, value and signature header.
fn claims_with_sigs(bootstrap: &str, topic: &str) -> Vec<(String, Vec<u8>, Option<Vec<u8>>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "trust-test")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(30))
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + T;
    while (out.len() as i64) < high && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let sig = m.headers().and_then(|h| {
                h.iter()
                    .find(|h| h.key == pool_worker::sign::HEADER)
                    .and_then(|h| h.value.map(<[u8]>::to_vec))
            });
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
            out.push((key, m.payload().unwrap_or_default().to_vec(), sig));
        }
    }
    out
}

fn ok() -> Outcome {
    Outcome {
        status: Status::Ok,
        exit_code: Some(0),
        duration_ms: 1,
        reason: None,
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        traceparent: None,
        retry_of: None,
    }
}

/// Instance 9's undecided claim of `order` (it would hold the order until
/// its lease expired) and its completion of `done` (a void completion still
/// keeps its order from ever running: src/boot.rs, `note_completion`).
fn hostile(order: OrderId, done: OrderId) -> [Record; 3] {
    let mut b = Record::of(9, Event::Booted, "evil-1", now_ms());
    b.seq = 1;
    let mut c = Record::of(9, Event::Claimed, "evil-1", now_ms()).with_order(order);
    c.seq = 2;
    c.set_attempt(1);
    c.set_rank(Some(0));
    c.next.insert(order.lane(), order.offset + 1);
    let mut d = Record::of(9, Event::Completed, "evil-1", now_ms()).with_order(done);
    d.seq = 3;
    d.set_attempt(1);
    d.set_outcome(Some(ok()));
    [b, c, d]
}

fn worker_env(broker: &BrokerProc, key: Option<&str>) -> Vec<(String, String)> {
    let mut env = broker.env();
    env.push(("INSTANCE_NUMBER".into(), "1".into()));
    env.push(("ALLOWED_COMMANDS".into(), "sh".into()));
    env.push(("ORDERS_PER_PROCESS".into(), "2".into()));
    if let Some(k) = key {
        env.push(("CLAIMS_KEY".into(), k.into()));
    }
    env
}

fn expect_exit_0(w: &mut WorkerProc, what: &str) {
    let status = w
        .wait(T)
        .unwrap_or_else(|| panic!("{what}: still running after {T:?}:\n{}", w.stderr.last(30)));
    assert_eq!(status.code(), Some(0), "{what}:\n{}", w.stderr.last(30));
}

/// With `CLAIMS_KEY`, forged records — unsigned, or signed with another
/// key — are skipped with a warning: a forged claim does not hold an
/// order, a forged completion does not complete one. The worker's own
/// records carry the pool's signature, and the tools, given the key, see
/// what the worker sees.
#[test]
fn forged_records_change_nothing_with_a_claims_key() {
    let broker = BrokerProc::start();
    let (orders, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let order = sh_order(
        &format!("echo $ORDER_PARTITION:$ORDER_OFFSET >> {}", shq(&ledger)),
        None,
    );
    let at = produce_orders(broker.bootstrap(), &orders, &[&order, &order], Some(0));
    let (o0, o1) = (
        OrderId::new(at[0].0, at[0].1),
        OrderId::new(at[1].0, at[1].1),
    );
    let wrong = pool_worker::sign::ClaimsKey::new(b"the attacker's own key, 32 bytes").unwrap();
    let [b, c, d] = hostile(o0, o1);
    let (bs, cs) = (wrong.sign(&b.encode()), wrong.sign(&c.encode()));
    forge(
        broker.bootstrap(),
        &claims,
        &[(b, Some(bs)), (c, Some(cs)), (d, None)],
    );

    let mut w = WorkerProc::start("worker1", &worker_env(&broker, Some(KEY)));
    expect_exit_0(
        &mut w,
        "both orders run at once, the forged claim and completion notwithstanding",
    );
    let mut ran = crate::common::ledger(&ledger);
    ran.sort();
    assert_eq!(ran, vec![o0.to_string(), o1.to_string()]);
    let warnings = w
        .stderr
        .lines()
        .iter()
        .filter(|l| l.contains("skipping a record of the claims topic"))
        .count();
    assert!(
        warnings >= 3,
        "one warning per forged record:\n{}",
        w.stderr.last(30)
    );
    assert!(
        w.stderr
            .lines()
            .iter()
            .any(|l| l.contains("not the pool's") || l.contains("not signed")),
        "{}",
        w.stderr.last(30)
    );

    // The worker's records are signed with the pool's key.
    let key = pool_worker::sign::ClaimsKey::new(KEY.as_bytes()).unwrap();
    let all = claims_with_sigs(broker.bootstrap(), &claims);
    assert!(all.len() > 3, "{all:?}");
    for (k, v, sig) in &all[3..] {
        let verdict = pool_worker::sign::verdict(Some(&key), Some(v), sig.as_deref());
        assert_eq!(verdict, pool_worker::sign::Verdict::Valid, "{k}");
    }

    // status, given the key, counts the three as foreign and both orders
    // completed; history shows no forged record.
    let mut env = broker.env();
    env.push(("CLAIMS_KEY".into(), KEY.into()));
    let status = command()
        .envs(env.clone())
        .args(["status", "--json"])
        .output()
        .unwrap();
    let s: serde_json::Value =
        serde_json::from_slice(&status.stdout).unwrap_or_else(|e| panic!("{e}: {status:?}"));
    assert_eq!(s["foreign_records"], 3, "{s}");
    assert_eq!(s["completed"], 2, "{s}");
    let history = command()
        .envs(env)
        .args(["history", &o1.to_string(), "--json"])
        .output()
        .unwrap();
    let h: serde_json::Value = serde_json::from_slice(&history.stdout).unwrap();
    let recs = h["records"].as_array().unwrap();
    assert!(recs.iter().all(|r| r["record"]["instance"] == 1), "{h}");
}

/// Without a key, a record whose claims cannot be true — an order past the
/// orders topic's end, a frontier beyond it — is still foreign: before,
/// one record with `next` = {0: 1000000} made every worker skip every
/// order to come below that offset.
#[test]
fn impossible_claims_are_foreign() {
    let broker = BrokerProc::start();
    let (orders, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let mut b = Record::of(9, Event::Booted, "evil-1", now_ms());
    b.seq = 1;
    b.next.insert(0.into(), 1_000_000);
    let [_, c, _] = hostile(OrderId::new(0, 5_000), OrderId::new(0, 0));
    forge(broker.bootstrap(), &claims, &[(b, None), (c, None)]);

    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let order = sh_order(
        &format!("echo $ORDER_PARTITION:$ORDER_OFFSET >> {}", shq(&ledger)),
        None,
    );
    let at = produce_orders(broker.bootstrap(), &orders, &[&order, &order], Some(0));
    let mut w = WorkerProc::start("worker1", &worker_env(&broker, None));
    expect_exit_0(&mut w, "the orders run, below a forged frontier");
    assert_eq!(crate::common::ledger(&ledger).len(), 2, "{at:?}");
    let impossible = w
        .stderr
        .lines()
        .iter()
        .filter(|l| l.contains("impossible"))
        .count();
    assert_eq!(
        impossible,
        2,
        "one warning per impossible record:\n{}",
        w.stderr.last(30)
    );
}
