//! What the pool needs of its broker, told in one line (issue 25 §4; docs/deploy.md,
//! "Which brokers"), on Apache Kafka: a claims topic with more than one
//! partition or a `cleanup.policy` without `compact` stops the worker
//! (exit 2, one line, before it writes anything); the tools refuse the
//! first (they would read one partition of several) and warn about the
//! second (what they show is how one finds out what went wrong).

use crate::common::apache::shared;
use crate::common::*;
use std::time::Duration;

const WORKER_LIMIT: Duration = Duration::from_secs(60);

/// (exit code, stderr) of `pool_worker ARGS` with `env` (bounded in time).
fn tool(env: &[(String, String)], args: &[&str]) -> (Option<i32>, String) {
    let (code, _, err) = crate::apache_security::run(env, args);
    (code, err)
}

/// A worker against `orders` and `claims`: (exit code, stderr).
fn worker(env: &[(String, String)]) -> (Option<i32>, String) {
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("INSTANCE_NUMBER", "1"));
    run_worker_once(&env, WORKER_LIMIT)
}

fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("ERROR")).collect()
}

#[test]
fn apache_brokers_a_claims_topic_with_two_partitions_is_refused_in_one_line() {
    let kafka = shared();
    let dir = tempfile::tempdir().unwrap();
    let (orders, claims) = kafka.topics_shaped(1, 2, "compact");
    let env = kafka.env(&orders, &claims, dir.path());
    let (code, err) = worker(&env);
    assert_eq!(code, Some(2), "{err}");
    let errors = error_lines(&err);
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains(&format!(
            "the coordination topic '{claims}' has 2 partitions; it must have exactly 1"
        )),
        "{err}"
    );
    assert!(
        read_claims(&kafka.bootstrap, &claims).is_empty(),
        "the worker wrote to a claims topic it cannot work with"
    );
    for args in [vec!["status"], vec!["audit"], vec!["history", "0:0"]] {
        let (code, err) = tool(&env, &args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].contains("has 2 partitions"), "{args:?}: {err}");
    }
}

#[test]
fn apache_brokers_a_claims_topic_that_is_not_compacted_stops_the_worker_and_warns_the_tools() {
    let kafka = shared();
    let dir = tempfile::tempdir().unwrap();
    let (orders, claims) = kafka.topics_shaped(1, 1, "delete");
    let env = kafka.env(&orders, &claims, dir.path());
    let (code, err) = worker(&env);
    assert_eq!(code, Some(2), "{err}");
    let errors = error_lines(&err);
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains(&format!(
            "the coordination topic '{claims}' has cleanup.policy=delete; it must include compact"
        )),
        "{err}"
    );
    assert!(read_claims(&kafka.bootstrap, &claims).is_empty());
    let (code, err) = tool(&env, &["status"]);
    assert_eq!(code, Some(0), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("cleanup.policy=delete"), "{err}");

    // compact,delete compacts: the worker runs (and, with no order, idles
    // until its time limit: here it is stopped once it has booted).
    let (orders, claims) = kafka.topics_shaped(1, 1, "compact,delete");
    let env = kafka.env(&orders, &claims, dir.path());
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("INSTANCE_NUMBER", "1"));
    env.push(("SETTLE_MS", "0"));
    let mut w = WorkerProc::start("compact-delete", &env);
    let booted = poll_until(WORKER_LIMIT, Duration::from_millis(100), || {
        w.stderr
            .lines()
            .iter()
            .any(|l| l.contains("event=\"booted\""))
    });
    assert!(
        booted,
        "a worker on a compact,delete claims topic did not boot"
    );
    assert!(w.try_wait().is_none(), "the worker exited");
    w.kill();
}
