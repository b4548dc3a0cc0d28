//! Checks the test harness itself (pool_worker/tests/live/common): the broker process and its
//! control commands, the Kafka helpers, and the supervisor process with
//! stand-in programs (so these tests do not depend on worker mode).

use crate::common::*;
use pool_worker::record::{Event, OrderId, Outcome, Record, Status};
use std::path::PathBuf;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[test]
fn broker_control_round_trip() {
    let broker = BrokerProc::start();
    assert!(
        broker.bootstrap().starts_with("127.0.0.1:"),
        "{}",
        broker.bootstrap()
    );
    broker.rtt(20);
    broker.rtt(0);
    broker.down();
    broker.up();
    broker.create_topic("extra_topic", 2);
    assert_eq!(broker.command("rtt 5"), Ok("rtt 5".to_string()));
    let err = broker.command("explode").unwrap_err();
    assert!(err.starts_with("error "), "{err}");
    assert!(
        broker.command("create extra_topic 1").is_err(),
        "the topic exists"
    );
    // After down/up the broker serves clients again.
    let at = produce_orders(broker.bootstrap(), "extra_topic", &["x"], Some(1));
    assert_eq!(at, vec![(1, 0)]);
}

#[test]
fn orders_and_claims_round_trip() {
    let broker = BrokerProc::start_with(BrokerOpts {
        orders_topic: unique_topic("orders"),
        orders_partitions: 2,
        coordination_topic: unique_topic("claims"),
        ..BrokerOpts::default()
    });
    let (orders, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let env = broker.env();
    assert!(env.contains(&("KAFKA_BROKERS".to_string(), broker.bootstrap().to_string())));
    // The embedded broker's own settings come with it (pool_worker/src/kafka/broker.rs, WORKER_ENV).
    for (k, v) in pool_worker::kafka::broker::WORKER_ENV {
        assert!(
            env.contains(&(k.to_string(), v.to_string())),
            "{k} missing from {env:?}"
        );
    }

    let at = produce_orders(
        broker.bootstrap(),
        &orders,
        &["echo one", "echo two", "echo three"],
        Some(1),
    );
    assert_eq!(at, vec![(1, 0), (1, 1), (1, 2)]);
    let back = read_topic(broker.bootstrap(), &orders, 1);
    let payloads: Vec<_> = back
        .iter()
        .map(|(_, _, v)| v.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        payloads,
        [
            b"echo one".to_vec(),
            b"echo two".to_vec(),
            b"echo three".to_vec()
        ]
    );
    assert!(read_topic(broker.bootstrap(), &orders, 0).is_empty());

    // A hand-made record, a foreign one, and a completion.
    let booted = Record::of(1, Event::Booted, "x", 0);
    assert_eq!(produce_record(broker.bootstrap(), &claims, &booted), 0);
    try_produce(
        broker.bootstrap(),
        &claims,
        &[(Some(b"junk".as_slice()), Some(b"{".as_slice()))],
        Some(0),
    )
    .unwrap();
    let mut done = Record::of(2, Event::Completed, "y", 0).with_order(OrderId::new(1, 1));
    done.set_outcome(Some(Outcome::not_run(Status::Error, "test")));
    produce_record(broker.bootstrap(), &claims, &done);

    let raw = read_claims(broker.bootstrap(), &claims);
    assert_eq!(raw.len(), 3);
    assert_eq!(raw[0].1.as_deref(), Some(b"1:booted".as_slice()));
    let decoded = decoded_claims(broker.bootstrap(), &claims);
    assert_eq!(decoded, vec![(0, booted), (2, done.clone())]);

    let got = wait_completed(broker.bootstrap(), &claims, &[(1, 1)], T).unwrap();
    assert_eq!(got, vec![done]);
    let err = wait_completed(
        broker.bootstrap(),
        &claims,
        &[(1, 1), (1, 2)],
        Duration::from_secs(2),
    )
    .unwrap_err();
    assert!(err.contains(": 1:2;"), "{err}");
}

fn stand_in(script: &str) -> Option<(PathBuf, Vec<String>)> {
    Some(("/bin/sh".into(), vec!["-c".into(), script.into()]))
}

#[test]
fn supervisor_restarts_and_stops() {
    let mut sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "2".into(),
        env: vec![("GREETING".into(), "hi".into())],
        restart_delay_ms: Some(20),
        program: stand_in(r#"[ "$GREETING" = hi ] && [ -n "$INSTANCE_NUMBER" ] && exit 0; exit 9"#),
        ..SupervisorOpts::default()
    });
    sup.expect(
        "three starts of each instance",
        |s| s.starts(1) >= 3 && s.starts(2) >= 3,
        T,
    );
    let s = sup.snapshot();
    assert!(
        s.exits.iter().all(|e| e.code == Some(0)),
        "env not passed: {:?}",
        s.exits
    );
    assert_eq!(sup.stop(), Some(0));
    assert_eq!(sup.snapshot().done, Some(0));
}

#[test]
fn supervisor_kill_instance_restarts_it() {
    let sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "1-1,3".into(),
        program: Some(("/bin/sleep".into(), vec!["30".into()])),
        ..SupervisorOpts::default()
    });
    let pid = sup.wait_pid(3, T).expect("instance 3 runs");
    assert_eq!(sup.kill_instance(3, libc::SIGKILL), Some(pid));
    sup.expect(
        "instance 3 restarted",
        |s| s.starts(3) == 2 && s.pid(3).is_some_and(|p| p != pid),
        T,
    );
    let exit = sup.snapshot().exits_of(3)[0].clone();
    assert_eq!(
        (exit.pid, exit.code, exit.signal),
        (pid, None, Some(libc::SIGKILL))
    );
    assert_eq!(sup.snapshot().starts(1), 1);
    assert_eq!(sup.snapshot().starts(2), 0);
}

#[test]
fn supervisor_retires_config_errors_and_fences() {
    let mut sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "1-2".into(),
        program: stand_in(r#"[ "$INSTANCE_NUMBER" = 1 ] && exit 2; exit 3"#),
        ..SupervisorOpts::default()
    });
    assert_eq!(sup.wait_exit(T), Some(2));
    sup.expect("done", |s| s.closed, T);
    let s = sup.snapshot();
    assert_eq!(s.retired.get(&1).map(String::as_str), Some("config_error"));
    assert_eq!(s.retired.get(&2).map(String::as_str), Some("fenced"));
    assert_eq!((s.starts(1), s.starts(2), s.done), (1, 1, Some(2)));
}

#[test]
fn supervisor_max_runs() {
    let mut sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "3".into(),
        max_runs: Some(7),
        restart_delay_ms: Some(0),
        program: stand_in("exit 1"),
        ..SupervisorOpts::default()
    });
    assert_eq!(sup.wait_exit(T), Some(0));
    sup.expect("stdout closed", |s| s.closed, T);
    assert_eq!(sup.snapshot().total_starts(), 7);
}
