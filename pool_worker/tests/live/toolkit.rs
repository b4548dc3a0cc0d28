//! The operator's toolkit and the order features, end to end with the real
//! binary: `status`, `history`, `submit`, `RESULTS_TOPIC`, duplicate ids,
//! `image` and `url` orders, the allow lists, the job environment's deny
//! list, the output bound, `LOG_FORMAT=json`, and `dev --demo` (the
//! README's first command).
//!
//! Each test starts its own broker (unique topic names) and pool, and every
//! wait has a deadline. Jobs leave their side effects in files of a temp dir,
//! so that "never ran" can be checked, not assumed.

use crate::common::*;
use pool_worker::record::{Event, Outcome, Status};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Budget for a pool to finish a handful of orders.
const T: Duration = Duration::from_secs(60);
/// Budget for one run of a tool (`status`, `history`, `submit`).
const TOOL: Duration = Duration::from_secs(45);

fn broker_with(results: bool) -> BrokerProc {
    BrokerProc::start_with(BrokerOpts {
        orders_topic: unique_topic("orders"),
        coordination_topic: unique_topic("claims"),
        results_topic: results.then(|| unique_topic("results")),
        ..BrokerOpts::default()
    })
}

fn broker() -> BrokerProc {
    broker_with(false)
}

/// What a finished tool run left.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `pool_worker ARGS` with the broker's environment (plus `extra`),
/// feeding `stdin`; kills it and panics after `timeout`.
pub(crate) fn tool(
    env: &[(String, String)],
    args: &[&str],
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Ran {
    let mut cmd = command();
    cmd.envs(env.iter().map(|(k, v)| (OsStr::new(k), OsStr::new(v))))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin().display()));
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("piped stdin");
        w.write_all(input).expect("write the tool's stdin");
        // Dropped: EOF.
    }
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped stdout")));
    let err = reader(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("pool_worker {args:?} did not exit within {timeout:?}");
            }
        }
    };
    let ran = Ran {
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    eprintln!(
        "pool_worker {args:?} -> {:?}\nstdout:\n{}\nstderr:\n{}",
        ran.code, ran.stdout, ran.stderr
    );
    ran
}

/// The outcome of each order's (first) completion, in the order of `orders`.
fn outcomes(broker: &BrokerProc, orders: &[(i32, i64)]) -> Vec<Outcome> {
    wait_completed(
        broker.bootstrap(),
        &broker.opts.coordination_topic,
        orders,
        T,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .into_iter()
    .map(|r| {
        r.outcome()
            .cloned()
            .unwrap_or_else(|| panic!("a completion without outcome: {r:?}"))
    })
    .collect()
}

/// Writes an executable script.
fn script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn pos((p, o): (i32, i64)) -> String {
    format!("{p}:{o}")
}

// ------------------------------------------------------------- 1. status

#[test]
fn status_and_history_report_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker();
    let topic = broker.opts.orders_topic.clone();
    let mut orders = produce_orders(
        broker.bootstrap(),
        &topic,
        &vec![ledger_order(&ledger); 3],
        Some(0),
    );
    // One failing order, to see it counted apart.
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &[sh_order("exit 3", None)],
        Some(0),
    ));
    // Before any worker: all four wait, nothing is claimed.
    let env = broker.env();
    let r = tool(&env, &["status", "--json"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    let s: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(
        (&s["waiting"], &s["completed"], &s["claimed"]),
        (
            &serde_json::json!(4),
            &serde_json::json!(0),
            &serde_json::json!(0)
        ),
        "{s:#}"
    );
    assert!(s["oldest_waiting_age_ms"].is_u64(), "{s:#}");
    assert_eq!(s["instances"], serde_json::json!([]), "{s:#}");

    let sup = pool(&broker, "2", &[]);
    let audit = wait_and_audit(
        broker.bootstrap(),
        &broker.opts.coordination_topic,
        &orders,
        T,
    );
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    sup.expect(
        "both instances booted",
        |s| s.starts(1) >= 1 && s.starts(2) >= 1,
        T,
    );
    let r = tool(&env, &["status", "--json"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    let s: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(s["completed"], serde_json::json!(4), "{s:#}");
    // The not-ok total and the `failed` status are named apart (issue 19).
    assert_eq!(s["not_ok"], serde_json::json!(1), "{s:#}");
    assert!(
        s.get("failed").is_none(),
        "`failed` is only a status in by_status: {s:#}"
    );
    assert_eq!(s["by_status"]["ok"], serde_json::json!(3), "{s:#}");
    assert_eq!(s["by_status"]["failed"], serde_json::json!(1), "{s:#}");
    assert_eq!(s["orders_in_topic"], serde_json::json!(4), "{s:#}");
    assert_eq!(s["waiting"], serde_json::json!(0), "{s:#}");
    assert_eq!(s["claimed"], serde_json::json!(4), "{s:#}");
    assert!(s["oldest_waiting_age_ms"].is_null(), "{s:#}");
    let instances = s["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("no instances: {s:#}"));
    let numbers: Vec<u64> = instances
        .iter()
        .filter_map(|i| i["instance"].as_u64())
        .collect();
    assert!(numbers.contains(&1) && numbers.contains(&2), "{s:#}");
    for i in instances {
        assert!(
            i["state"].is_string() && i["incarnation"].is_string(),
            "{i}"
        );
    }
    // Each completion is some instance's last completion, or overwritten by a later one.
    let completers: std::collections::BTreeSet<u32> = audit
        .orders
        .values()
        .flat_map(|t| t.completions.iter().map(|c| c.1.instance.get()))
        .collect();
    for c in completers {
        let e = instances
            .iter()
            .find(|i| i["instance"] == serde_json::json!(c))
            .expect("completer listed");
        assert!(e["last_completion"]["order"].is_string(), "{e}");
    }

    let r = tool(&env, &["status"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains("4 completed"), "{}", r.stdout);
    assert!(r.stdout.contains("(1 not ok)"), "{}", r.stdout);

    // The not-ok orders with their reasons, in text and JSON.
    let failing = pos(orders[3]);
    let r = tool(&env, &["status", "--failed"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stdout.starts_with("1 orders did not end ok\n"),
        "{}",
        r.stdout
    );
    let line = r.stdout.lines().nth(1).unwrap_or_default();
    assert!(
        line.starts_with(&failing) && line.contains("failed") && line.contains("exit 3"),
        "{}",
        r.stdout
    );
    let r = tool(&env, &["status", "--failed", "--json"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    let f: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(f["not_ok"], serde_json::json!(1), "{f:#}");
    let list = f["orders"]
        .as_array()
        .unwrap_or_else(|| panic!("no orders: {f:#}"));
    assert_eq!(list.len(), 1, "{f:#}");
    assert_eq!(
        (&list[0]["order"], &list[0]["status"], &list[0]["exit_code"]),
        (
            &serde_json::json!(failing),
            &serde_json::json!("failed"),
            &serde_json::json!(3)
        ),
        "{f:#}"
    );

    // Flags instead of the environment give the same answer.
    let args = [
        "status",
        "--json",
        "--brokers",
        broker.bootstrap(),
        "--orders-topic",
        &broker.opts.orders_topic,
        "--coordination-topic",
        &broker.opts.coordination_topic,
    ];
    let r = tool(&[], &args, None, TOOL);
    let s2: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(s2["completed"], serde_json::json!(4), "{s2:#}");

    // history of the failing order.
    let o = pos(orders[3]);
    let r = tool(&env, &["history", &o], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    for ev in ["claimed", "completed"] {
        assert!(
            r.stdout.contains(&format!(":{ev}")),
            "history lacks {ev}:\n{}",
            r.stdout
        );
    }
    // The commit: the completer's claim, which met no rival (its own
    // commit, R34), or its `committed` after a contest; the claims the
    // checker reads as their own commits are those history marks.
    let trail = &audit.orders[&pool_worker::record::OrderId::new(orders[3].0, orders[3].1)];
    let completer = trail.completions[0].1.instance.get();
    assert!(
        shows_commit_by(&r.stdout, completer),
        "history shows no commit by {completer}:\n{}\n{}",
        r.stdout,
        audit.show(orders[3])
    );
    assert_eq!(
        r.stdout.matches("its own commit").count(),
        trail.unrivalled_claims.len(),
        "{}\n{}",
        r.stdout,
        audit.show(orders[3])
    );
    assert!(r.stdout.contains("failed exit 3"), "{}", r.stdout);
    let r = tool(&env, &["history", &o, "--json"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    let h: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(h["order"], serde_json::json!(o));
    let records = h["records"].as_array().expect("records");
    let events: Vec<&str> = records
        .iter()
        .filter_map(|r| r["record"]["event"].as_str())
        .collect();
    for ev in ["claimed", "completed"] {
        assert!(events.contains(&ev), "{events:?}");
    }
    // The completer's commit (its claim marked `own_commit`, R34, or its
    // `committed`) comes before the completion.
    let c = records
        .iter()
        .position(|r| {
            r["record"]["instance"] == serde_json::json!(completer)
                && (r["record"]["event"] == "committed" || r["own_commit"] == true)
        })
        .unwrap_or_else(|| panic!("no commit by {completer}: {records:?}"));
    let d = events.iter().position(|e| *e == "completed").unwrap();
    assert!(c < d, "{events:?}");
    for rec in records {
        assert_eq!(
            rec["record"]["offset"],
            serde_json::json!(orders[3].1),
            "{rec}"
        );
        assert!(rec["pos"].is_u64() && rec["key"].is_string(), "{rec}");
    }
    // The audit replays the same log and finds every invariant holding.
    let r = tool(&env, &["audit"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stdout.contains("every invariant holds") && r.stdout.contains("4 orders"),
        "{}",
        r.stdout
    );
    let r = tool(&env, &["audit", "--json"], None, TOOL);
    let a: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(
        (
            a["holds"].as_bool(),
            a["whole"].as_bool(),
            a["orders"].as_u64()
        ),
        (Some(true), Some(true), Some(4)),
        "{a}"
    );
    // An order nobody touched.
    let r = tool(&env, &["history", "0:999"], None, TOOL);
    assert_eq!(
        r.code,
        Some(1),
        "an order the claims topic does not know is an error"
    );
    assert!(
        r.stdout.contains("no record about order 0:999"),
        "{}",
        r.stdout
    );
}

/// Every tool that talks to Kafka, with no broker at its address: one line
/// that names the address and how to set it, exit 1, no librdkafka log
/// lines, well before a tool's usual time budget (issue 19, part 5).
#[test]
fn tools_without_a_broker_say_so_in_one_line() {
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let env = [("KAFKA_BROKERS".to_string(), addr.clone())];
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["history", "0:0"],
        &["submit", "--", "true"],
        &["audit"],
        &["cancel", "0:0"],
    ] {
        let r = tool(&env, args, None, Duration::from_secs(20));
        assert_eq!(r.code, Some(1), "{args:?}: {r:?}");
        let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line, not {lines:#?}");
        assert!(
            lines[0].contains(&addr)
                && lines[0].contains("KAFKA_BROKERS")
                && lines[0].contains("--brokers"),
            "{args:?}: {}",
            lines[0]
        );
        assert!(
            !r.stderr.contains("librdkafka") && !r.stderr.contains("ERROR"),
            "{args:?}: {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
    // The flag is named in the line too, and used.
    let r = tool(
        &[],
        &["status", "--brokers", &addr],
        None,
        Duration::from_secs(20),
    );
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains(&addr), "{}", r.stderr);
}

// ------------------------------------------------------------- 2. submit

#[test]
fn submit_waits_and_refuses_invalid_orders() {
    let broker = broker();
    let env = broker.env();
    let topic = broker.opts.orders_topic.clone();

    // Invalid orders are refused before anything is sent (no pool needed).
    let r = tool(
        &env,
        &["submit", "--json-file", "-"],
        Some(br#"{"cmd":5}"#),
        TOOL,
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("not a valid order"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    let r = tool(&env, &["submit", "--text", "echo 'unclosed"], None, TOOL);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        read_topic(broker.bootstrap(), &topic, 0).is_empty(),
        "an invalid order was sent"
    );

    // No worker yet: --wait gives up after its time limit with 124 (the order is sent).
    let t0 = Instant::now();
    let r = tool(
        &env,
        &[
            "submit",
            "--wait",
            "--wait-timeout-secs",
            "1",
            "--text",
            "true",
        ],
        None,
        TOOL,
    );
    assert_eq!((r.code, r.stdout.trim()), (Some(124), "0:0"), "{r:?}");
    assert!(
        r.stderr.contains("not completed within 1 s"),
        "{}",
        r.stderr
    );
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );

    let sup = pool(&broker, "1", &[]);
    let r = tool(
        &env,
        &[
            "submit",
            "--wait",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
        None,
        T,
    );
    assert_eq!(r.code, Some(7), "{r:?}");
    let mut lines = r.stdout.lines();
    let order = lines.next().unwrap_or_default().to_string();
    assert_eq!(order, "0:1", "first line is the order's P:O: {}", r.stdout);
    assert_eq!(lines.collect::<Vec<_>>(), ["out"], "{}", r.stdout);
    assert!(r.stderr.contains("err"), "{}", r.stderr);
    assert!(
        r.stderr.contains("order 0:1: failed on instance 1") && r.stderr.contains("exit 7"),
        "{}",
        r.stderr
    );

    // Exit 0, text form, JSON output.
    let r = tool(
        &env,
        &["submit", "--wait", "--json", "--text", "echo hello world"],
        None,
        T,
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    let lines: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    assert_eq!(lines[0]["event"], "submitted");
    assert_eq!(lines[0]["order"], "0:2");
    assert_eq!(lines[1]["event"], "completed");
    assert_eq!(lines[1]["outcome"]["status"], "ok");
    assert_eq!(lines[1]["outcome"]["stdout_tail"], "hello world\n");

    // Without --wait: prints P:O and returns at once; the order still runs.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("order.json");
    std::fs::write(&file, r#"{"cmd": ["true"], "id": "once"}"#).unwrap();
    let file = file.to_str().unwrap();
    let r = tool(&env, &["submit", "--json-file", file], None, TOOL);
    assert_eq!((r.code, r.stdout.trim()), (Some(0), "0:3"), "{r:?}");
    let o = outcomes(&broker, &[(0, 3)]);
    assert_eq!(o[0].status, Status::Ok);
    // The same id again: completed as a duplicate, without an exit code: --wait exits 1.
    let r = tool(&env, &["submit", "--wait", "--json-file", file], None, T);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("order 0:4: duplicate") && r.stderr.contains("order 0:3 has the same id"),
        "{}",
        r.stderr
    );
    assert_eq!(
        read_topic(broker.bootstrap(), &topic, 0).len(),
        5,
        "exactly the five valid orders were sent"
    );
    drop(sup);
}

// --------------------------------------------------------- 3. duplicates

#[test]
fn duplicate_ids_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker();
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let with_id = |id: &str| {
        let mut v: serde_json::Value = serde_json::from_str(&ledger_order(&ledger)).unwrap();
        v["id"] = id.into();
        v.to_string()
    };
    // Both wait before the pool starts: six instances race for them.
    let first = produce_orders(
        broker.bootstrap(),
        &topic,
        &[with_id("dup-1"), with_id("dup-1")],
        Some(0),
    );
    let sup = pool(&broker, "6", &[]);
    let audit = wait_and_audit(broker.bootstrap(), &claims, &first, T);
    audit
        .check_exactly_once(&first)
        .unwrap_or_else(|e| panic!("{e}"));
    let lines = crate::common::ledger(&ledger);
    assert_eq!(lines.len(), 1, "two orders with one id: {lines:?}");
    let ran = lines[0].clone();
    let other = first
        .iter()
        .map(|o| pos(*o))
        .find(|o| *o != ran)
        .unwrap_or_else(|| panic!("ran {ran}?"));
    let o = outcomes(&broker, &first);
    let by_pos: BTreeMap<String, &Outcome> = first.iter().map(|o| pos(*o)).zip(o.iter()).collect();
    assert_eq!(by_pos[&ran].status, Status::Ok, "{by_pos:?}");
    let dup = by_pos[&other];
    assert_eq!(dup.status, Status::Duplicate, "{by_pos:?}");
    let reason = dup.reason.as_deref().unwrap_or("");
    assert!(
        reason.contains(&format!("order {ran} ")) && reason.contains("dup-1"),
        "{reason}"
    );
    assert!(
        dup.exit_code.is_none() && dup.stdout_tail.is_empty(),
        "{dup:?}"
    );

    // Later: the same id again is a duplicate of the first; a new id runs.
    let later = produce_orders(
        broker.bootstrap(),
        &topic,
        &[with_id("dup-1"), with_id("dup-2")],
        Some(0),
    );
    let o = outcomes(&broker, &later);
    assert_eq!(o[0].status, Status::Duplicate, "{o:?}");
    assert!(
        o[0].reason
            .as_deref()
            .unwrap_or("")
            .contains(&format!("order {ran} ")),
        "{o:?}"
    );
    assert_eq!(o[1].status, Status::Ok, "{o:?}");
    let lines = crate::common::ledger(&ledger);
    assert_eq!(lines, [ran, pos(later[1])], "ledger");
    let all: Vec<_> = first.iter().chain(&later).copied().collect();
    Audit::of(&decoded_claims(broker.bootstrap(), &claims))
        .check_exactly_once(&all)
        .unwrap_or_else(|e| panic!("{e}"));
    // The completions carry the id.
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let ids: Vec<Option<String>> = recs
        .iter()
        .filter(|(_, r)| {
            r.event() == Event::Completed
                && r.order().map(|o| (o.partition, o.offset)) == Some(later[1])
        })
        .map(|(_, r)| r.order_id().map(str::to_string))
        .collect();
    eprintln!("completion ids of {}: {ids:?}", pos(later[1]));
    drop(sup);
}

// ------------------------------------------------------- 4. results topic

#[test]
fn results_topic_gets_every_completion() {
    let broker = broker_with(true);
    let results = broker.opts.results_topic.clone().unwrap();
    let topic = broker.opts.orders_topic.clone();
    let payloads = [
        sh_order("echo r$ORDER_OFFSET ${KAFKA_BROKERS-nokafka}", None),
        sh_order("echo r$ORDER_OFFSET; echo oops >&2; exit 3", None),
        "no-such-program-pw".to_string(),
        r#"{"cmd": ["true"], "id": "r-1"}"#.to_string(),
    ];
    let mut orders = produce_orders(broker.bootstrap(), &topic, &payloads, Some(0));
    let sup = pool(&broker, "2", &[]);
    // The same id once the first is done: a duplicate, published too.
    outcomes(&broker, &orders[3..]);
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &[payloads[3].clone()],
        Some(0),
    ));
    let done = outcomes(&broker, &orders);
    let mut recs = Vec::new();
    assert!(
        poll_until(Duration::from_secs(15), Duration::from_millis(200), || {
            recs = read_topic(broker.bootstrap(), &results, 0);
            recs.len() >= 5
        }),
        "results topic has {} records",
        recs.len()
    );
    assert_eq!(recs.len(), 5, "one result per completion: {recs:?}");
    let mut by_key: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (_, k, v) in &recs {
        let k = String::from_utf8(k.clone().expect("a key")).unwrap();
        let v: serde_json::Value = serde_json::from_slice(v.as_deref().expect("a value")).unwrap();
        assert_eq!(v["order"], serde_json::json!(k), "{v}");
        by_key.insert(k, v);
    }
    let get = |i: usize| {
        by_key
            .get(&pos(orders[i]))
            .unwrap_or_else(|| panic!("no result for {}: {by_key:?}", pos(orders[i])))
    };
    let (r0, r1, r2) = (get(0), get(1), get(2));
    assert_eq!(get(3)["status"], "ok");
    assert_eq!(get(4)["status"], "duplicate");
    assert!(
        get(4)["reason"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("order {} ", pos(orders[3]))),
        "{}",
        get(4)
    );
    assert_eq!(r0["status"], "ok");
    assert_eq!(r0["exit_code"], 0);
    // The job does not see the worker's KAFKA_* variables (JOB_ENV_DENY's default).
    assert_eq!(r0["stdout"], format!("r{} nokafka\n", orders[0].1));
    assert_eq!(r1["status"], "failed");
    assert_eq!(r1["exit_code"], 3);
    assert_eq!(r1["stdout"], format!("r{}\n", orders[1].1));
    assert_eq!(r1["stderr"], "oops\n");
    assert_eq!(r2["status"], "error");
    assert!(r2["exit_code"].is_null(), "{r2}");
    assert!(
        r2["reason"].as_str().unwrap_or("").contains("not found"),
        "{r2}"
    );
    for (i, r) in [r0, r1, r2].into_iter().enumerate() {
        assert!(
            r["instance"].as_u64().is_some_and(|n| n == 1 || n == 2),
            "{r}"
        );
        assert_eq!(r["attempt"], 1, "{r}");
        assert!(r["duration_ms"].is_u64(), "{r}");
        assert_eq!(
            r["status"],
            serde_json::json!(done[i].status),
            "the result agrees with the claims topic"
        );
    }
    drop(sup);
}

// ----------------------------------------------------- 5. image orders

#[test]
fn image_orders_run_docker_from_path() {
    let dir = tempfile::tempdir().unwrap();
    let bindir = dir.path().join("bin");
    std::fs::create_dir(&bindir).unwrap();
    let out = dir.path().join("argv");
    let envfile = dir.path().join("env");
    script(
        &bindir.join("docker"),
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\necho \"GREETING=$GREETING SECRET_X=${{SECRET_X-unset}}\" > {}\necho from-docker\n",
            shq(&out),
            shq(&envfile)
        ),
    );
    let path = format!(
        "{}:{}",
        bindir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let broker = broker();
    let order = serde_json::json!({
        "image": "alpine:3",
        "env": {"GREETING": "hi there", "SECRET_X": "no"},
        "args": ["echo", "a b"],
    })
    .to_string();
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &[order],
        Some(0),
    );
    let sup = pool(
        &broker,
        "1",
        &[
            ("PATH", &path),
            ("ALLOWED_IMAGES", "alpine"),
            ("JOB_ENV_DENY", "SECRET_*"),
        ],
    );
    let o = outcomes(&broker, &orders);
    assert_eq!(
        (o[0].status, o[0].exit_code),
        (Status::Ok, Some(0)),
        "{o:?}"
    );
    assert_eq!(o[0].stdout_tail, "from-docker\n");
    let argv = std::fs::read_to_string(&out).unwrap();
    let argv: Vec<&str> = argv.lines().collect();
    let (p, off) = orders[0];
    let name = format!("pool_worker-1-{p}-{off}-a1");
    let expected = [
        "run",
        "--rm",
        "--name",
        &name,
        "--security-opt",
        "no-new-privileges",
        "-e",
        "GREETING",
        "-e",
        "ORDER_TOPIC",
        "-e",
        "ORDER_PARTITION",
        "-e",
        "ORDER_OFFSET",
        "-e",
        "INSTANCE_NUMBER",
        "-e",
        "ORDER_ATTEMPT",
        "-e",
        "ORDER_RETRY",
        "alpine:3",
        "echo",
        "a b",
    ];
    assert_eq!(argv, expected);
    // Values pass through docker's environment (-e NAME), not its argv; a denied one does not.
    assert_eq!(
        std::fs::read_to_string(&envfile).unwrap(),
        "GREETING=hi there SECRET_X=unset\n"
    );
    drop(sup);
}

// --------------------------------------------------------- 6. URL orders

/// A tiny HTTP server: `GET path` answers `routes[path]` with 200, anything
/// else 404; every request line is recorded. Paths are normalized (`..`).
struct Http {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Http {
    fn start(routes: BTreeMap<String, String>) -> Http {
        Http::start_on("127.0.0.1", routes)
    }

    /// On another loopback address (all of 127.0.0.0/8 is the loopback).
    fn start_on(ip: &str, routes: BTreeMap<String, String>) -> Http {
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match conn.read(&mut b) {
                        Ok(1) => head.push(b[0]),
                        _ => break,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let line = head.lines().next().unwrap_or_default().to_string();
                log.lock().unwrap().push(line.clone());
                // Like most servers, resolve `.` and `..` in the path.
                let raw = line.split(' ').nth(1).unwrap_or_default();
                let mut parts: Vec<&str> = Vec::new();
                for seg in raw.split('/').skip(1) {
                    match seg {
                        ".." => {
                            parts.pop();
                        }
                        "." => {}
                        s => parts.push(s),
                    }
                }
                let path = format!("/{}", parts.join("/"));
                let resp = match routes.get(&path) {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    ),
                    None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string(),
                };
                let _ = conn.write_all(resp.as_bytes());
            }
        });
        Http { port, requests }
    }
}

#[test]
fn url_orders_fetch_run_and_fail() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let marker = dir.path().join("secret-ran");
    let mut with_id: serde_json::Value = serde_json::from_str(&ledger_order(&ledger)).unwrap();
    with_id["id"] = "from-url".into();
    let routes = BTreeMap::from([
        ("/allowed/ok".to_string(), ledger_order(&ledger)),
        ("/allowed/dup".to_string(), with_id.to_string()),
        (
            "/secret/x".to_string(),
            sh_order(&format!("touch {}", shq(&marker)), None),
        ),
    ]);
    let http = Http::start(routes);
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{}", http.port);
    let url = |u: String| serde_json::json!({ "url": u }).to_string();
    let payloads = [
        url(format!("{base}/allowed/ok")),
        url(format!("{base}/allowed/missing")),
        url(format!("{base}/secret/x")),
        url(format!("http://127.0.0.1:{dead}/gone")),
        // The id of a fetched body counts: the second is a duplicate.
        url(format!("{base}/allowed/dup")),
        url(format!("{base}/allowed/dup")),
    ];
    let broker = broker();
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &payloads,
        Some(0),
    );
    let allowed = format!("{base}/allowed/,http://127.0.0.1:{dead}/");
    let sup = pool(&broker, "2", &[("ALLOWED_URLS", &allowed)]);
    let o = outcomes(&broker, &orders);
    assert_eq!(o[0].status, Status::Ok, "{o:?}");
    assert_eq!(o[4].status, Status::Ok, "{o:?}");
    assert_eq!(o[5].status, Status::Duplicate, "{o:?}");
    assert!(
        o[5].reason
            .as_deref()
            .unwrap_or("")
            .contains(&format!("order {} ", pos(orders[4]))),
        "{o:?}"
    );
    let mut ran = crate::common::ledger(&ledger);
    ran.sort();
    let mut want = vec![pos(orders[0]), pos(orders[4])];
    want.sort();
    assert_eq!(
        ran, want,
        "each fetched order ran once, the duplicate not at all"
    );
    assert_eq!(o[1].status, Status::Error, "{o:?}");
    assert!(
        o[1].reason.as_deref().unwrap_or("").contains("404"),
        "{o:?}"
    );
    assert_eq!(o[2].status, Status::Refused, "{o:?}");
    assert!(
        o[2].reason
            .as_deref()
            .unwrap_or("")
            .contains("not under an allowed prefix"),
        "{o:?}"
    );
    assert_eq!(o[3].status, Status::Error, "{o:?}");
    assert!(
        o[3].reason
            .as_deref()
            .unwrap_or("")
            .contains("cannot connect"),
        "{o:?}"
    );
    assert!(!marker.exists(), "a refused URL order ran");
    let reqs = http.requests.lock().unwrap().clone();
    assert!(
        !reqs.iter().any(|r| r.contains("/secret")),
        "a refused URL was fetched: {reqs:?}"
    );
    assert_eq!(
        reqs.iter()
            .filter(|r| r.starts_with("GET /allowed/ok "))
            .count(),
        1,
        "{reqs:?}"
    );
    drop(sup);
}

// ---------------------------------------------------- 7. allowed commands

#[test]
fn allowed_commands_refuse_other_programs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("sh-ran");
    let broker = broker();
    let touch = format!("touch {}", shq(&marker));
    let http = Http::start(BTreeMap::from([("/body".to_string(), touch.clone())]));
    let payloads = [
        "echo allowed".to_string(),
        sh_order(&touch, None),
        format!("/bin/{touch}"),
        serde_json::json!({"cmd": [touch], "shell": true}).to_string(),
        serde_json::json!({"image": "alpine", "args": ["sh", "-c", touch]}).to_string(),
        serde_json::json!({"url": format!("http://127.0.0.1:{}/body", http.port)}).to_string(),
        "/bin/echo by path".to_string(),
    ];
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &payloads,
        Some(0),
    );
    let sup = pool(&broker, "2", &[("ALLOWED_COMMANDS", "echo,true")]);
    let o = outcomes(&broker, &orders);
    assert_eq!(
        (o[0].status, o[0].stdout_tail.as_str()),
        (Status::Ok, "allowed\n"),
        "{o:?}"
    );
    assert_eq!(
        (o[6].status, o[6].stdout_tail.as_str()),
        (Status::Ok, "by path\n"),
        "{o:?}"
    );
    for (i, prog) in [
        (1, "'sh'"),
        (2, "'/bin/touch'"),
        (3, "'sh'"),
        (4, "ALLOWED_IMAGES"),
        (5, "ALLOWED_URLS"),
    ] {
        assert_eq!(o[i].status, Status::Refused, "{o:?}");
        let reason = o[i].reason.as_deref().unwrap_or("");
        assert!(reason.contains(prog), "{reason}");
        assert!(i >= 4 || reason.contains("allowed commands"), "{reason}");
        assert!(o[i].exit_code.is_none() && o[i].duration_ms == 0, "{o:?}");
    }
    assert!(!marker.exists(), "a refused order ran");
    let warned = sup
        .stderr
        .lines()
        .iter()
        .any(|l| l.contains("ALLOWED_COMMANDS is not set"));
    assert!(!warned, "warned although ALLOWED_COMMANDS is set");
    drop(sup);
}

#[test]
fn unset_allowed_commands_warns_once_at_start() {
    let broker = broker();
    let mut w = WorkerProc::start("worker", &broker.instance_env(1));
    assert!(
        w.stderr.wait_for("idle", T),
        "the worker did not get idle:\n{}",
        w.stderr.last(20)
    );
    let lines = w.stderr.lines();
    let warnings: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("ALLOWED_COMMANDS"))
        .collect();
    assert_eq!(warnings.len(), 1, "{lines:#?}");
    assert!(warnings[0].contains("WARN"), "{}", warnings[0]);
    let first_boot = lines
        .iter()
        .position(|l| l.contains("booting"))
        .unwrap_or(usize::MAX);
    let warn_at = lines
        .iter()
        .position(|l| l.contains("ALLOWED_COMMANDS"))
        .unwrap();
    assert!(
        warn_at < first_boot,
        "the warning comes at start:\n{lines:#?}"
    );
    w.kill();
}

/// A worker lives for one order: the open command list is said again only
/// when a worker starts after an unclean exit (no clean-exit marker of its
/// predecessor), not at every start (issue 19, part 5).
#[test]
fn unset_allowed_commands_is_said_again_only_after_an_unclean_exit() {
    let broker = broker();
    let env = broker.instance_env(1);
    let said = |w: &WorkerProc| {
        w.stderr
            .lines()
            .iter()
            .filter(|l| l.contains("ALLOWED_COMMANDS is not set"))
            .count()
    };
    let idle = |w: &WorkerProc| w.stderr.wait_for("idle", T);
    produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &["true"],
        Some(0),
    );
    let mut first = WorkerProc::start("first", &env);
    assert!(
        first.wait(T).is_some_and(|s| s.success()),
        "{}",
        first.stderr.last(20)
    );
    assert_eq!(
        said(&first),
        1,
        "a first start says it:\n{}",
        first.stderr.last(20)
    );
    let mut second = WorkerProc::start("second", &env);
    assert!(idle(&second), "{}", second.stderr.last(20));
    assert_eq!(
        said(&second),
        0,
        "after a clean exit:\n{}",
        second.stderr.last(20)
    );
    second.kill();
    let third = WorkerProc::start("third", &env);
    assert!(idle(&third), "{}", third.stderr.last(20));
    assert_eq!(
        said(&third),
        1,
        "after a crash (SIGKILL):\n{}",
        third.stderr.last(20)
    );
}

// ----------------------------------------- 8. env deny and output bound

#[test]
fn job_env_deny_and_output_limit() {
    let broker = broker();
    let payloads = [
        sh_order("echo \"token=${SECRET_TOKEN-unset} other=${OTHER_VAR-unset} kafka=${KAFKA_BROKERS-unset}\"", None),
        sh_order("head -c 100000 /dev/zero | tr '\\0' x; echo END; head -c 50000 /dev/zero | tr '\\0' y >&2", None),
    ];
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &payloads,
        Some(0),
    );
    let extra = [
        ("JOB_ENV_DENY", "SECRET_*"),
        ("SECRET_TOKEN", "hunter2"),
        ("OTHER_VAR", "visible"),
        ("OUTPUT_LIMIT_BYTES", "1000"),
    ];
    let sup = pool(&broker, "1", &extra);
    let o = outcomes(&broker, &orders);
    assert_eq!(o[0].status, Status::Ok, "{o:?}");
    // The deny list adds to the default (KAFKA_*), which always applies.
    assert_eq!(o[0].stdout_tail, "token=unset other=visible kafka=unset\n");
    assert_eq!(o[1].status, Status::Ok, "{o:?}");
    // The limit counts the tail as written in the record (the line break is
    // two bytes there); a cut tail starts with "…".
    assert!(
        pool_worker::record::json_len(&o[1].stdout_tail) <= 1000,
        "{:?}",
        o[1].stdout_tail
    );
    let out = o[1].stdout_tail.trim_start_matches('…');
    assert!(out.len() <= 1000, "stdout tail is {} bytes", out.len());
    assert!(out.len() >= 900, "stdout tail is only {} bytes", out.len());
    assert!(out.ends_with("xxxxEND\n"), "{out:?}");
    assert!(out.trim_end_matches("END\n").chars().all(|c| c == 'x'));
    let err = &o[1].stderr_tail;
    assert_eq!(err.len(), 1000, "stderr tail is {} bytes", err.len());
    assert!(err.chars().all(|c| c == 'y'));
    // The completed record stays small.
    let recs = decoded_claims(broker.bootstrap(), &broker.opts.coordination_topic);
    let big = recs
        .iter()
        .filter(|(_, r)| r.event() == Event::Completed)
        .map(|(_, r)| r.encode().len())
        .max()
        .unwrap_or(0);
    assert!(big < 4000, "a completed record of {big} bytes");
    drop(sup);
}

/// A `KAFKA_*` property librdkafka rejects stops every command at once with
/// exit status 2 (the supervisors' "do not restart") and one line naming the
/// variable, never its value.
#[test]
fn a_rejected_kafka_property_is_a_configuration_error() {
    for (var, value) in [
        ("KAFKA_SASL_PASWORD", "hunter2-value"),
        ("KAFKA_SECURITY_PROTOCOL", "hunter2-value"),
    ] {
        let env = [
            ("KAFKA_BROKERS", "127.0.0.1:9"),
            ("ORDERS_TOPIC", "o"),
            ("COORDINATION_TOPIC", "c"),
            ("INSTANCE_NUMBER", "1"),
            (var, value),
        ];
        let (code, stderr) = run_worker_once(&env, T);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(var) && !stderr.contains("hunter2"),
            "{stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for args in [
            &["status"][..],
            &["history", "0:0"],
            &["submit", "--", "true"],
        ] {
            let r = tool(&env, args, None, T);
            assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
            assert!(
                r.stderr.contains(var) && !r.stderr.contains("hunter2"),
                "{args:?}: {r:?}"
            );
        }
    }
}

// ------------------------------------------------------ 9. LOG_FORMAT=json

#[test]
fn log_format_json_is_json_lines() {
    let broker = broker();
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &["echo hi".to_string()],
        Some(0),
    );
    let mut env = broker.instance_env(1);
    env.push(("LOG_FORMAT".into(), "json".into()));
    let mut w = WorkerProc::start("worker", &env);
    let status = w
        .wait(T)
        .unwrap_or_else(|| panic!("the worker did not finish:\n{}", w.stderr.last(20)));
    assert_eq!(status.code(), Some(0), "{}", w.stderr.last(20));
    let o = outcomes(&broker, &orders);
    assert_eq!(o[0].status, Status::Ok);
    // The stderr thread may still be copying the last lines.
    std::thread::sleep(Duration::from_millis(200));
    let lines = w.stderr.lines();
    assert!(lines.len() >= 3, "{lines:#?}");
    let mut parsed = Vec::new();
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v.is_object(), "{l}");
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{l}");
        parsed.push(v);
    }
    let warn: Vec<_> = parsed
        .iter()
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("ALLOWED_COMMANDS"))
        })
        .collect();
    assert_eq!(warn.len(), 1, "{parsed:#?}");
    assert_eq!(warn[0]["level"], "WARN");
    let completed = parsed
        .iter()
        .any(|v| v["fields"]["event"] == "completed" && v["fields"]["status"] == "ok");
    assert!(completed, "no completed line: {parsed:#?}");
}

#[test]
fn allowed_urls_cannot_be_escaped_with_dot_dot() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("secret-ran");
    let routes = BTreeMap::from([
        ("/allowed/ok".to_string(), "true".to_string()),
        (
            "/secret/x".to_string(),
            sh_order(&format!("touch {}", shq(&marker)), None),
        ),
    ]);
    let http = Http::start(routes);
    let base = format!("http://127.0.0.1:{}", http.port);
    let broker = broker();
    let payloads =
        [serde_json::json!({ "url": format!("{base}/allowed/../secret/x") }).to_string()];
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &payloads,
        Some(0),
    );
    let allowed = format!("{base}/allowed/");
    let sup = pool(&broker, "1", &[("ALLOWED_URLS", &allowed)]);
    let o = outcomes(&broker, &orders);
    let reqs = http.requests.lock().unwrap().clone();
    assert!(
        !marker.exists(),
        "an order fetched from outside ALLOWED_URLS ran: {o:?}, requests {reqs:?}"
    );
    assert_eq!(o[0].status, Status::Refused, "{o:?}, requests {reqs:?}");
    drop(sup);
}

#[test]
fn status_watch_refreshes() {
    let broker = broker();
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &["true".to_string()],
        Some(0),
    );
    let mut cmd = command();
    cmd.envs(broker.env())
        .args(["status", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let text: Arc<Mutex<String>> = Arc::default();
    let sink = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let screens = || text.lock().unwrap().matches("\x1b[2J").count();
    let first = poll_until(TOOL, Duration::from_millis(100), || screens() >= 1);
    // Then the order completes, and a later screen shows it.
    let sup = pool(&broker, "1", &[]);
    outcomes(&broker, &orders);
    let shown = poll_until(Duration::from_secs(20), Duration::from_millis(100), || {
        let t = text.lock().unwrap();
        t.rsplit("\x1b[2J")
            .next()
            .is_some_and(|last| last.contains("1 completed"))
    });
    let _ = child.kill();
    let _ = child.wait();
    let t = text.lock().unwrap().clone();
    assert!(first, "no screen: {t:?}");
    assert!(
        shown && screens() >= 2,
        "the watch did not refresh to show the completion: {t:?}"
    );
    assert!(
        t.contains("1 waiting"),
        "the first screen showed the waiting order: {t:?}"
    );
    drop(sup);
}

#[test]
fn log_format_json_covers_startup_errors() {
    let broker = broker();
    let env = [
        ("KAFKA_BROKERS", broker.bootstrap()),
        ("ORDERS_TOPIC", "no_such_topic_pw"),
        (
            "COORDINATION_TOPIC",
            broker.opts.coordination_topic.as_str(),
        ),
        ("INSTANCE_NUMBER", "1"),
        ("LOG_FORMAT", "json"),
    ];
    let (code, stderr) = run_worker_once(&env, T);
    assert_eq!(code, Some(2), "{stderr}");
    for l in stderr.lines() {
        let v: Result<serde_json::Value, _> = serde_json::from_str(l);
        assert!(
            v.is_ok_and(|v| v.is_object()),
            "not a JSON object: {l}\nall:\n{stderr}"
        );
    }
}

/// The README's first command with `--demo`: the embedded broker, three
/// instances under the supervisor, the sample orders each completed once
/// with the status its payload calls for, the exit clean and nothing logged
/// as an error (librdkafka's report of the broker going away at shutdown
/// once was).
#[test]
fn dev_demo_runs_every_sample_order_once() {
    let r = tool(
        &[],
        &["dev", "--demo", "--json", "--demo-timeout-secs", "60"],
        None,
        Duration::from_secs(90),
    );
    assert_eq!(r.code, Some(0), "dev --demo failed");
    let lines: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let of = |event: &str| {
        lines
            .iter()
            .filter(|l| l["event"] == event)
            .collect::<Vec<_>>()
    };
    let produced: BTreeMap<String, String> = of("produced")
        .iter()
        .map(|l| {
            (
                l["order"].as_str().unwrap_or("").to_string(),
                l["payload"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(produced.len() >= 5, "too few sample orders: {produced:?}");
    let mut results: BTreeMap<String, String> = BTreeMap::new();
    for l in of("result") {
        let order = l["order"].as_str().unwrap_or("").to_string();
        let status = l["outcome"]["status"].as_str().unwrap_or("").to_string();
        assert!(
            results.insert(order.clone(), status).is_none(),
            "order {order} has two results"
        );
    }
    assert_eq!(
        results.keys().collect::<Vec<_>>(),
        produced.keys().collect::<Vec<_>>(),
        "every sample order has one result"
    );
    for (order, payload) in &produced {
        let status = &results[order];
        let expect = match payload.as_str() {
            p if p.starts_with("echo") || p.contains("ran on instance") => "ok",
            "false" => "failed",
            p if p.contains("exit 7") => "failed",
            p if p.contains("timeout_secs") => "timed_out",
            _ => "error",
        };
        assert_eq!(status, expect, "order {order} ({payload})");
    }
    assert_eq!(
        of("done").last().map(|l| l["code"].clone()),
        Some(serde_json::json!(0))
    );
    assert!(
        !r.stderr.contains("ERROR"),
        "dev logged an error:\n{}",
        r.stderr
    );
    // A dozen worker processes ran; the open command list is said once,
    // by the supervisor (issue 19, part 5).
    let warned = r
        .stderr
        .lines()
        .filter(|l| l.contains("ALLOWED_COMMANDS is not set"))
        .count();
    assert_eq!(warned, 1, "said {warned} times:\n{}", r.stderr);
    // stdout and stderr are pipes here: no colour escape codes, neither
    // dev's own log lines nor the workers' prefixed ones.
    assert!(
        !r.stderr.contains('\x1b') && !r.stdout.contains('\x1b'),
        "escape codes in a pipe:\n{:?}",
        r.stderr
    );
}

// ------------------------------------------- 10. isolation (issue 18)

/// A shared library whose constructor creates `marker`, built with the C
/// compiler if there is one (else a path that does not exist: the check that
/// the order is refused holds either way).
fn evil_library(dir: &Path, marker: &Path) -> std::path::PathBuf {
    let src = dir.join("evil.c");
    let lib = dir.join("evil.so");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void evil(void) {{ FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f); }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        eprintln!("no C compiler: LD_PRELOAD names a library that does not exist");
    }
    lib
}

/// Issue 18's table, rows 1-3 and 5-7, against the real worker: each order
/// crosses an allow list and must be refused with nothing run, fetched or
/// handed to docker; the allowed orders beside them still work.
#[test]
fn orders_get_exactly_what_the_allow_lists_grant() {
    let dir = tempfile::tempdir().unwrap();
    let marker = |n: &str| dir.path().join(format!("pwned-{n}"));
    // Row 1: a library that would run in the allowed `echo`.
    let lib = evil_library(dir.path(), &marker("ld"));
    // Row 2: an allowed directory of scripts run by bash.
    let jobs = dir.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    let report = jobs.join("report.sh");
    script(&report, "#!/bin/bash\necho report\n");
    let bash_env_file = dir.path().join("evil.sh");
    script(
        &bash_env_file,
        &format!("touch {}\n", shq(marker("bash-file"))),
    );
    // Row 3: a shell copied to a file named like an allowed name.
    let fake_cp = dir.path().join("cp");
    std::fs::copy("/bin/sh", &fake_cp).unwrap();
    // Rows 5-6: a docker CLI that records what it is asked.
    let bindir = dir.path().join("bin");
    std::fs::create_dir(&bindir).unwrap();
    let docker_log = dir.path().join("docker-log");
    script(
        &bindir.join("docker"),
        &format!(
            "#!/bin/sh\necho \"$* DOCKER_HOST=${{DOCKER_HOST-unset}}\" >> {}\necho from-docker\n",
            shq(&docker_log)
        ),
    );
    let path = format!(
        "{}:{}",
        bindir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Row 7: prefixes compared as strings let a longer path, port or host in.
    let routes = |body: &str| {
        BTreeMap::from([
            ("/allowed/ok".to_string(), "echo fetched".to_string()),
            (
                "/allowed2/x".to_string(),
                sh_order(&format!("touch {}", shq(marker(body))), None),
            ),
            (
                "/x".to_string(),
                sh_order(&format!("touch {}", shq(marker(body))), None),
            ),
        ])
    };
    let http = Http::start(routes("url-path"));
    let other_host = Http::start_on("127.0.0.10", routes("url-host"));
    let base = format!("http://127.0.0.1:{}", http.port);

    let j = |v: serde_json::Value| v.to_string();
    let touch = |n: &str| format!("touch {}", shq(marker(n)));
    let payloads = [
        j(serde_json::json!({"cmd": ["echo", "x"], "env": {"LD_PRELOAD": lib}})),
        j(
            serde_json::json!({"cmd": [report], "env": {"BASH_ENV": format!("$({})", touch("bash-expand"))}}),
        ),
        j(serde_json::json!({"cmd": [report], "env": {"BASH_ENV": bash_env_file}})),
        j(serde_json::json!({"cmd": [fake_cp, "-c", touch("cp")]})),
        j(
            serde_json::json!({"cmd": ["docker", "run", "--privileged", "-v", "/:/host", "alpine", "sh", "-c", touch("docker")]}),
        ),
        j(serde_json::json!({"image": "alpine", "env": {"DOCKER_HOST": "tcp://127.0.0.1:2375"}})),
        j(serde_json::json!({"url": format!("{base}/allowed2/x")})),
        j(serde_json::json!({"url": format!("http://127.0.0.10:{}/x", other_host.port)})),
        // Allowed, beside them:
        j(serde_json::json!({"cmd": [report]})),
        j(serde_json::json!({"cmd": ["echo", "plain"], "env": {"GREETING": "hi"}})),
        j(serde_json::json!({"image": "alpine", "args": ["echo", "hi"]})),
        j(serde_json::json!({"url": format!("{base}/allowed/ok")})),
    ];
    let broker = broker();
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &payloads,
        Some(0),
    );
    let commands = format!("echo,cp,{}/", jobs.display());
    let urls = format!("{base}/allowed,http://127.0.0.1");
    let sup = pool(
        &broker,
        "2",
        &[
            ("PATH", &path),
            ("ALLOWED_COMMANDS", &commands),
            ("ALLOWED_IMAGES", "alpine"),
            ("ALLOWED_URLS", &urls),
        ],
    );
    let o = outcomes(&broker, &orders);
    // Every row is checked, and every broken one named (not only the first).
    let mut broken: Vec<String> = Vec::new();
    let refused = [
        (0, "row 1, LD_PRELOAD", "LD_PRELOAD", "ld"),
        (1, "row 2, BASH_ENV=$(...)", "BASH_ENV", "bash-expand"),
        (2, "row 2, BASH_ENV=file", "BASH_ENV", "bash-file"),
        (3, "row 3, a shell copied to cp", "allowed commands", "cp"),
        (4, "row 5, docker as a command", "'docker'", "docker"),
        (5, "row 6, DOCKER_HOST", "DOCKER_HOST", ""),
        (6, "row 7, a longer path", "ALLOWED_URLS", "url-path"),
        (7, "row 7, a longer host", "ALLOWED_URLS", "url-host"),
    ];
    for (i, row, says, m) in refused {
        let reason = o[i].reason.as_deref().unwrap_or("");
        if o[i].status != Status::Refused || !reason.contains(says) {
            broken.push(format!("{row}: not refused naming {says}: {:?}", o[i]));
        } else if !o[i].stdout_tail.is_empty() || !o[i].stderr_tail.is_empty() {
            broken.push(format!("{row}: output from a refused order: {:?}", o[i]));
        }
        if !m.is_empty() && marker(m).exists() {
            broken.push(format!("{row}: the attacker's code ran"));
        }
    }
    let allowed = [
        (8, "report\n"),
        (9, "plain\n"),
        (10, "from-docker\n"),
        (11, "fetched\n"),
    ];
    for (i, out) in allowed {
        if (o[i].status, o[i].stdout_tail.as_str()) != (Status::Ok, out) {
            broken.push(format!(
                "allowed order {i} did not run as it should: {:?}",
                o[i]
            ));
        }
    }
    // docker saw one run: the pool's own line for the allowed image.
    let seen = std::fs::read_to_string(&docker_log).unwrap_or_default();
    let lines: Vec<&str> = seen.lines().collect();
    let own_line = lines.len() == 1
        && lines[0].starts_with("run --rm --name pool_worker-")
        && lines[0].ends_with(" alpine echo hi DOCKER_HOST=unset");
    if !own_line || seen.contains("--privileged") || seen.contains("/:/host") {
        broken.push(format!("rows 5-6: docker was run with {seen:?}"));
    }
    let reqs = http.requests.lock().unwrap().clone();
    if reqs != vec!["GET /allowed/ok HTTP/1.1".to_string()] {
        broken.push(format!("row 7: requests beyond the allowed URL: {reqs:?}"));
    }
    let other = other_host.requests.lock().unwrap().clone();
    if !other.is_empty() {
        broken.push(format!(
            "row 7: a URL of another host was fetched: {other:?}"
        ));
    }
    assert!(
        broken.is_empty(),
        "{} broken:\n{}",
        broken.len(),
        broken.join("\n")
    );
    drop(sup);
}

/// Issue 18, row 4 (`cat /proc/$PPID/environ` returned the worker's
/// `KAFKA_SASL_PASSWORD`), as a non-root job user; row 8 (URL orders to an
/// internal service, all URLs allowed by default); and a job's leftovers,
/// `setsid` ones included, end with it. One pool of the defaults plus
/// `JOB_USER=nobody` and per-job limits.
#[test]
fn jobs_run_as_the_job_user_cannot_reach_the_workers_secrets_and_leave_nothing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: a worker cannot switch to JOB_USER=nobody here; CI runs this as root");
        return;
    }
    const SECRET: &str = "s3cr3t-sasl-password-4f9a";
    // Orphans go to the nearest subreaper, else to pid 1, which here may end
    // them itself: this test process is a subreaper, so that a leftover the
    // worker failed to end lives on where the test can see it.
    // SAFETY: prctl with integer arguments has no memory effects.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let dir = tempfile::tempdir().unwrap();
    // The job user writes its pid files here.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let pid = |n: &str| dir.path().join(format!("{n}.pid"));
    let internal = Http::start(BTreeMap::from([(
        "/admin".to_string(),
        format!("internal-data {SECRET}"),
    )]));
    let payloads = [
        // Row 4, and everywhere else a job of another user could look.
        serde_json::json!({"cmd": ["sh", "-c", format!(
            "id -u; cat /proc/$PPID/environ; cat /proc/$PPID/cmdline; grep -s -l -a {SECRET} /proc/[0-9]*/environ /proc/[0-9]*/cmdline; env; echo end"
        )]})
        .to_string(),
        // Row 8.
        serde_json::json!({"url": format!("http://127.0.0.1:{}/admin", internal.port)}).to_string(),
        // Leftovers: a setsid'd process, and the child of a double fork.
        // (Each writes its pid once in its own session; the job waits for
        // both, so that none is still in the job's process group.)
        sh_order(
            &format!(
                "setsid sh -c 'echo $$ > {a}; exec sleep 300' >/dev/null 2>&1 & \
                 (setsid sh -c 'echo $$ > {b}; exec sleep 300' >/dev/null 2>&1 &); \
                 while [ ! -s {a} ] || [ ! -s {b} ]; do sleep 0.01; done; echo started",
                // (Temp paths have no quotes or blanks, which would break
                // the nested quoting.)
                a = pid("setsid").display(),
                b = pid("orphan").display()
            ),
            Some(30),
        ),
        // Limits.
        sh_order("ulimit -n; ulimit -v", None),
    ];
    let broker = broker();
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &payloads,
        Some(0),
    );
    let sup = pool(
        &broker,
        "1",
        &[
            ("KAFKA_SASL_PASSWORD", SECRET),
            ("JOB_USER", "nobody"),
            ("JOB_LIMIT_OPEN_FILES", "77"),
            ("JOB_LIMIT_MEMORY_MB", "1024"),
        ],
    );
    let o = outcomes(&broker, &orders);
    let mut broken: Vec<String> = Vec::new();
    let nobody = String::from_utf8(
        std::process::Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    if !o[0].stdout_tail.starts_with(&nobody) || !o[0].stdout_tail.ends_with("end\n") {
        broken.push(format!(
            "JOB_USER: the job did not run (to its end) as nobody: {:?}",
            o[0]
        ));
    }
    for (i, out) in o.iter().enumerate() {
        for tail in [
            &out.stdout_tail,
            &out.stderr_tail,
            out.reason.as_ref().unwrap_or(&String::new()),
        ] {
            if tail.contains(SECRET) {
                broken.push(format!("row 4: order {i} got the worker's secret: {out:?}"));
            }
        }
    }
    if !o[0].stderr_tail.contains("Permission denied") {
        broken.push(format!(
            "row 4: /proc/$PPID/environ was not refused: {:?}",
            o[0]
        ));
    }
    if o[1].status != Status::Refused || !internal.requests.lock().unwrap().is_empty() {
        broken.push(format!("row 8: the internal service was asked: {:?}", o[1]));
    }
    if (o[2].status, o[2].stdout_tail.as_str()) != (Status::Ok, "started\n") {
        broken.push(format!("leftovers: the job did not run: {:?}", o[2]));
    }
    for n in ["setsid", "orphan"] {
        let Some(p) = std::fs::read_to_string(pid(n))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            broken.push(format!("leftovers: no pid file for {n}"));
            continue;
        };
        let gone = || match std::fs::read_to_string(format!("/proc/{p}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        };
        if !poll_until(Duration::from_secs(10), Duration::from_millis(20), gone) {
            broken.push(format!("leftovers: the {n} process {p} outlived its job"));
            // SAFETY: kill has no memory effects; the test's own leftover.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
    }
    if (o[3].status, o[3].stdout_tail.as_str()) != (Status::Ok, "77\n1048576\n") {
        broken.push(format!("limits: {:?}", o[3]));
    }
    assert!(
        broken.is_empty(),
        "{} broken:\n{}",
        broken.len(),
        broken.join("\n")
    );

    drop(sup);
}

/// Issue 18, row 4, where the job runs as the worker's own (non-root) user:
/// only the worker being non-dumpable keeps `/proc/$PPID/environ` closed.
/// The worker runs as `nobody` (through `setpriv`), its job too.
#[test]
fn a_worker_is_not_dumpable_even_for_jobs_of_its_own_user() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("needs root and setpriv to start a worker as nobody; CI has both");
        return;
    }
    const SECRET: &str = "s3cr3t-of-the-worker-77c1";
    let broker = broker();
    let script =
        "id -u; cat /proc/$PPID/environ; echo; tr '\\0' '\\n' < /proc/$PPID/cmdline; echo end";
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &[sh_order(script, None)],
        Some(0),
    );
    let mut cmd = std::process::Command::new("/usr/bin/setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(bin())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(broker.env())
        .envs([
            ("INSTANCE_NUMBER", "1"),
            ("SETTLE_MS", "0"),
            ("JOB_ENV_DENY", "SECRET_*,KAFKA_*"),
            ("SECRET_TOKEN", SECRET),
        ])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start a worker as nobody");
    let stderr = child.stderr.take().expect("piped");
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::BufReader::new(stderr).read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + T;
    let exited = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => break None,
        }
    };
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let log = log.join().unwrap_or_default();
    assert_eq!(
        exited.and_then(|s| s.code()),
        Some(0),
        "the worker (as nobody) did not finish its order:\n{log}"
    );
    let o = outcomes(&broker, &orders);
    let nobody = String::from_utf8(
        std::process::Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        o[0].stdout_tail.starts_with(&nobody) && o[0].stdout_tail.ends_with("end\n"),
        "{:?}",
        o[0]
    );
    assert!(
        !o[0].stdout_tail.contains(SECRET) && !o[0].stderr_tail.contains(SECRET),
        "the job read the worker's secret: {:?}",
        o[0]
    );
    assert!(o[0].stderr_tail.contains("Permission denied"), "{:?}", o[0]);
}

// ------------------------------------------------------------- serve

/// `pool_worker serve` running in the background; killed when dropped.
pub(crate) struct Served {
    child: std::process::Child,
    base: String,
    log: std::path::PathBuf,
}

impl Served {
    /// Starts `serve --listen 127.0.0.1:0` and reads the bound address
    /// from the first line of its stdout.
    pub(crate) fn start(env: &[(String, String)], dir: &Path) -> Served {
        let log = dir.join("serve.log");
        let mut child = command()
            .envs(env.iter().map(|(k, v)| (OsStr::new(k), OsStr::new(v))))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin().display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
            let _ = tx.send(line);
        });
        let mut served = Served {
            child,
            base: String::new(),
            log,
        };
        let line = rx
            .recv_timeout(TOOL)
            .unwrap_or_else(|_| panic!("serve printed no address: {}", served.logs()));
        let addr: std::net::SocketAddr = line.trim().parse().unwrap_or_else(|e| {
            panic!(
                "serve's first line {line:?} is no address ({e}): {}",
                served.logs()
            )
        });
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
        served.base = format!("http://{addr}");
        served
    }

    pub(crate) fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path`: (status code, body).
    pub(crate) fn get(&self, rt: &tokio::runtime::Runtime, path: &str) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        rt.block_on(async {
            let r = reqwest::Client::new()
                .get(&url)
                .timeout(Duration::from_secs(20))
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {url}: {e}"));
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    }

    /// `/metrics`, parsed by a Prometheus text parser: (name, labels) → value.
    pub(crate) fn metrics(&self, rt: &tokio::runtime::Runtime) -> BTreeMap<(String, String), f64> {
        let (code, text) = self.get(rt, "/metrics");
        assert_eq!(code, 200, "{text}");
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .unwrap_or_else(|e| panic!("/metrics does not parse ({e}):\n{text}"));
        let mut out = BTreeMap::new();
        for s in scrape.samples {
            let sorted: BTreeMap<&String, &String> = s.labels.iter().collect();
            let labels = sorted
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let v = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                prometheus_parse::Value::Histogram(h) => {
                    h.iter().map(|b| b.count).fold(0.0, f64::max)
                }
                prometheus_parse::Value::Summary(_) => f64::NAN,
            };
            out.insert((s.metric, labels), v);
        }
        out
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The metric `name` with exactly `labels` ("k=v,..."), 0 when absent.
pub(crate) fn metric(m: &BTreeMap<(String, String), f64>, name: &str, labels: &str) -> f64 {
    m.get(&(name.to_string(), labels.to_string()))
        .copied()
        .unwrap_or(0.0)
}

/// Headless Chromium (Debian's `chromium`) with `args`, its stdout; panics
/// after two minutes.
fn chromium(args: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--virtual-time-budget=5000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!(
                "this test needs Chromium (Debian: apt-get install chromium; .ci/run installs it)"
            )
        }
        Err(e) => panic!("cannot start chromium: {e}"),
    };
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium {args:?} did not finish within two minutes");
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    assert!(status.success(), "chromium {args:?}: {status}\n{out}");
    out
}

/// `serve` against a pool that ran real orders: /healthz, /readyz, /metrics
/// (parsed) counting what the pool did, the page and an order's page as
/// headless Chromium renders them (job output shown as text, never run as
/// markup), and live updates as the pool goes on; a screenshot is kept as
/// target/serve.png.
#[test]
fn serve_shows_the_pool_in_a_browser_and_in_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker();
    let topic = broker.opts.orders_topic.clone();
    let claims = broker.opts.coordination_topic.clone();
    let mut orders = produce_orders(
        broker.bootstrap(),
        &topic,
        &vec![ledger_order(&ledger); 3],
        Some(0),
    );
    // A failing order whose output is markup: it must be shown, not run.
    let evil = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>";
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &[sh_order(&format!("echo \"{evil}\" >&2; exit 3"), None)],
        Some(0),
    ));
    let sup = pool(&broker, "2", &[]);
    let audit = wait_and_audit(broker.bootstrap(), &claims, &orders, T);
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    // The pool stops: the claims topic holds still, so counts are exact.
    drop(sup);
    let records = read_claims(broker.bootstrap(), &claims).len();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let served = Served::start(&broker.env(), dir.path());
    assert_eq!(served.get(&rt, "/healthz").0, 200, "{}", served.logs());
    let ready = poll_until(TOOL, Duration::from_millis(100), || {
        served.get(&rt, "/readyz").0 == 200
    });
    assert!(
        ready,
        "/readyz never 200: {:?}\n{}",
        served.get(&rt, "/readyz"),
        served.logs()
    );

    let m = served.metrics(&rt);
    let completed = "pool_worker_orders_completed_total";
    assert_eq!(metric(&m, completed, "status=ok"), 3.0, "{m:#?}");
    assert_eq!(metric(&m, completed, "status=failed"), 1.0, "{m:#?}");
    assert_eq!(metric(&m, "pool_worker_orders_waiting", ""), 0.0, "{m:#?}");
    assert_eq!(metric(&m, "pool_worker_orders_running", ""), 0.0, "{m:#?}");
    assert_eq!(
        metric(&m, "pool_worker_oldest_waiting_age_seconds", ""),
        0.0,
        "{m:#?}"
    );
    assert_eq!(
        metric(&m, "pool_worker_order_latency_seconds_count", ""),
        4.0,
        "{m:#?}"
    );
    assert_eq!(
        metric(&m, "pool_worker_order_latency_seconds", ""),
        4.0,
        "the +Inf bucket: {m:#?}"
    );
    let read: f64 = m
        .iter()
        .filter(|((n, _), _)| n == "pool_worker_claims_records_total")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        read, records as f64,
        "every claims record counted once: {m:#?}"
    );
    assert!(
        metric(&m, "pool_worker_claims_records_total", "event=completed") >= 4.0,
        "{m:#?}"
    );
    let instances: f64 = ["idle", "negotiating", "running"]
        .iter()
        .map(|s| metric(&m, "pool_worker_instances", &format!("state={s}")))
        .sum();
    assert_eq!(instances, 2.0, "both instances, each in one state: {m:#?}");
    assert_eq!(
        metric(&m, "pool_worker_takeovers_total", ""),
        0.0,
        "nobody died holding an order: {m:#?}"
    );
    assert_eq!(metric(&m, "pool_worker_retries_total", ""), 0.0, "{m:#?}");

    // The page as a browser renders it.
    let dom = chromium(&["--dump-dom".into(), format!("{}/", served.base)]);
    for (id, n) in [
        ("waiting", 0),
        ("running", 0),
        ("completed", 4),
        ("not-ok", 1),
    ] {
        assert!(
            dom.contains(&format!("id=\"{id}\">{n}<")),
            "the page does not show {id} {n}:\n{dom}"
        );
    }
    assert!(
        dom.contains("id=\"status-ok\">ok 3<") && dom.contains("id=\"status-failed\">failed 1<"),
        "{dom}"
    );
    let failed = pos(orders[3]);
    assert!(
        dom.contains(&format!("href=\"/order/{failed}\"")),
        "the failed order is listed: {dom}"
    );
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
        "its reason is shown as text: {dom}"
    );
    assert!(
        !dom.contains("<script>document")
            && !dom.contains("<img src=\"x\"")
            && !dom.contains("pwned</title>"),
        "{dom}"
    );

    // The failed order's own page: its text, its story, its output.
    let dom = chromium(&[
        "--dump-dom".into(),
        format!("{}/order/{failed}", served.base),
    ]);
    assert!(dom.contains("id=\"order-status\">failed<"), "{dom}");
    for ev in ["claimed", "completed"] {
        assert!(
            dom.contains(&format!(":{ev}")),
            "the story lacks {ev}: {dom}"
        );
    }
    let completer = audit.orders[&pool_worker::record::OrderId::new(orders[3].0, orders[3].1)]
        .completions[0]
        .1
        .instance
        .get();
    assert!(
        shows_commit_by(&dom, completer),
        "the story shows no commit by {completer}: {dom}\n{}",
        audit.show(orders[3])
    );
    assert!(dom.contains("failed exit 3"), "{dom}");
    assert!(
        dom.contains("id=\"order-text\">{&quot;cmd&quot;")
            || dom.contains("id=\"order-text\">{\"cmd\""),
        "the order's text: {dom}"
    );
    assert!(
        dom.contains("id=\"stderr\">&lt;script&gt;document.title='pwned'"),
        "{dom}"
    );
    assert!(
        !dom.contains("<script>document") && !dom.contains("pwned</title>"),
        "{dom}"
    );
    let (code, _) = served.get(&rt, "/order/not-an-order");
    assert_eq!(code, 400);

    // Live: a new order is counted as waiting, then as done once the pool
    // runs again, without restarting serve.
    let more = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    );
    let waits = poll_until(TOOL, Duration::from_millis(200), || {
        let m = served.metrics(&rt);
        metric(&m, "pool_worker_orders_waiting", "") == 1.0
            && metric(&m, "pool_worker_oldest_waiting_age_seconds", "") > 0.0
    });
    assert!(
        waits,
        "the new order is not shown waiting: {:#?}",
        served.metrics(&rt)
    );
    let (_, live) = served.get(&rt, "/live");
    assert!(live.contains("id=\"waiting\">1<"), "{live}");
    let sup = pool(&broker, "2", &[]);
    outcomes(&broker, &more);
    // The waiting count follows within a refresh of the orders topic's offsets (2 s).
    let done = poll_until(TOOL, Duration::from_millis(200), || {
        let m = served.metrics(&rt);
        metric(&m, completed, "status=ok") == 4.0
            && metric(&m, "pool_worker_orders_waiting", "") == 0.0
    });
    assert!(
        done,
        "the new completion is not counted: {:#?}",
        served.metrics(&rt)
    );
    let m = served.metrics(&rt);
    assert_eq!(metric(&m, "pool_worker_orders_waiting", ""), 0.0, "{m:#?}");
    assert_eq!(
        metric(&m, "pool_worker_order_latency_seconds_count", ""),
        5.0,
        "{m:#?}"
    );

    // A screenshot to look at (target/serve.png).
    let shot = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("target")
        .join("serve.png");
    let _ = std::fs::create_dir_all(shot.parent().unwrap());
    let _ = std::fs::remove_file(&shot);
    chromium(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=1280,900".into(),
        format!("{}/", served.base),
    ]);
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "no screenshot at {} ({size} bytes)",
        shot.display()
    );
    // And the failed order's page (target/serve-order.png).
    let shot = shot.with_file_name("serve-order.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=1280,900".into(),
        format!("{}/order/{failed}", served.base),
    ]);
    assert!(shot.exists(), "no screenshot at {}", shot.display());
    drop(sup);
}

// ------------------------------------ 10b. the page that acts (issue 36, 5)

/// Headless Chromium driven through the DevTools protocol on a pipe
/// (`--remote-debugging-pipe`: it reads commands on its fd 3 and writes
/// answers and events on its fd 4, each a JSON text ended by a NUL byte),
/// for a test that uses a page as a person does: types into its forms,
/// clicks its buttons, answers its `confirm()` dialogs (each accepted; the
/// questions are kept in `dialogs`).
struct Browser {
    child: std::process::Child,
    to: std::process::ChildStdin,
    from: std::sync::mpsc::Receiver<serde_json::Value>,
    next: u64,
    session: String,
    dialogs: Vec<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // The shell gives chromium our pipes as its fds 3 and 4.
        let spawned = std::process::Command::new("sh")
            .args(["-c", "exec \"$@\" 3<&0 4>&1 0</dev/null 1>/dev/null", "sh"])
            .args([
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = spawned.unwrap_or_else(|e| panic!("cannot start sh: {e}"));
        let (to, out) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let (tx, from) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(out);
            loop {
                let mut buf = Vec::new();
                match std::io::BufRead::read_until(&mut r, 0, &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if buf.last() == Some(&0) {
                            buf.pop();
                        }
                        if let Ok(v) = serde_json::from_slice(&buf) {
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            to,
            from,
            next: 0,
            session: String::new(),
            dialogs: Vec::new(),
            _profile: profile,
        };
        let target = b
            .call(
                "Target.createTarget",
                serde_json::json!({"url": "about:blank"}),
            )
            .unwrap_or_else(|e| {
                panic!("{e} (this test needs Chromium: Debian: apt-get install chromium)")
            });
        let attached = b
            .call(
                "Target.attachToTarget",
                serde_json::json!({"targetId": target["targetId"], "flatten": true}),
            )
            .unwrap();
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        b.call("Page.enable", serde_json::json!({})).unwrap();
        b
    }

    fn send(&mut self, msg: &serde_json::Value) {
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .and_then(|_| self.to.flush())
            .unwrap_or_else(|e| panic!("chromium's pipe: {e}"));
    }

    /// One command (on the page, once attached); its result. Dialogs that
    /// open meanwhile are accepted.
    fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        self.next += 1;
        let id = self.next;
        let mut msg = serde_json::json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = self.session.clone().into();
        }
        self.send(&msg);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self
                .from
                .recv_timeout(left)
                .map_err(|e| format!("{method}: no answer from chromium ({e})"))?;
            if m["id"] == id {
                return match m.get("error") {
                    Some(e) => Err(format!("{method}: {e}")),
                    None => Ok(m["result"].clone()),
                };
            }
            if m["method"] == "Page.javascriptDialogOpening" {
                let ask = m["params"]["message"].as_str().unwrap_or_default();
                self.dialogs.push(ask.to_string());
                self.next += 1;
                let answer = serde_json::json!({"id": self.next, "method": "Page.handleJavaScriptDialog",
                    "params": {"accept": true}, "sessionId": m["sessionId"]});
                self.send(&answer);
            }
        }
    }

    /// `js`'s value on the page; `None` if it threw or the page was
    /// between two documents.
    fn eval(&mut self, js: &str) -> Option<serde_json::Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                serde_json::json!({"expression": js, "returnByValue": true}),
            )
            .ok()?;
        r.get("exceptionDetails")
            .is_none()
            .then(|| r["result"]["value"].clone())
    }

    /// Waits (at most T) until `js` is true on the page.
    fn until(&mut self, js: &str) -> bool {
        poll_until(T, Duration::from_millis(100), || {
            self.eval(js) == Some(serde_json::Value::Bool(true))
        })
    }

    fn goto(&mut self, url: &str) {
        self.call("Page.navigate", serde_json::json!({"url": url}))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The text of the element `id`, "" when there is none.
    fn text(&mut self, id: &str) -> String {
        let js = format!("(document.getElementById({id:?}) || {{}}).textContent || ''");
        self.eval(&js)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    fn dom(&mut self) -> String {
        self.text_of("document.documentElement.outerHTML")
    }

    fn text_of(&mut self, js: &str) -> String {
        self.eval(js)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of a form's hidden `csrf` field in a page.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF field in {page}"));
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// `serve` acts only behind its token (issue 36, 5). Without one: no
/// form on the page (as Chromium renders it), no action route. With one
/// (a token file; a group-readable one is refused): in Chromium, a wrong
/// token is refused, the right one logs in (a session cookie the page's
/// script cannot read), an order submitted from the page is in the orders
/// topic, its cancel (after the page's confirm() dialog) is in the claims
/// topic, and once the pool ran, retrying it from its page sends it again.
/// Forged requests (no or a wrong CSRF token, another session's, a foreign
/// Origin, cross-site, no cookie, GET) are 403 and write nothing; a cancel
/// without `confirm=yes` only asks; bad input is a clear 400 that keeps
/// what was typed.
#[test]
fn serve_acts_only_behind_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker();
    let bootstrap = broker.bootstrap().to_string();
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    // POST a form: (status, Location, Set-Cookie headers, body).
    let post = |url: &str, headers: &[(&str, &str)], form: &[(&str, &str)]| {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut req = http
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        rt.block_on(async {
            let r = req
                .send()
                .await
                .unwrap_or_else(|e| panic!("POST {url}: {e}"));
            let h = r.headers();
            let location = h
                .get("location")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            let cookies: Vec<String> = h
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect();
            (
                r.status().as_u16(),
                location,
                cookies,
                r.text().await.unwrap_or_default(),
            )
        })
    };
    let get = |url: &str, cookie: &str| {
        rt.block_on(async {
            let r = http
                .get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {url}: {e}"));
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    };
    let cancels = || -> Vec<String> {
        decoded_claims(&bootstrap, &claims)
            .into_iter()
            .filter(|(_, r)| r.event() == Event::Cancelled)
            .map(|(_, r)| r.key())
            .collect()
    };
    let orders_in_topic = || read_topic(&bootstrap, &topic, 0);
    // An order that waits (no pool yet), for the forged cancels.
    let waiting = produce_orders(&bootstrap, &topic, &["true"], Some(0))[0];
    let ready = |served: &Served| {
        let ok = poll_until(TOOL, Duration::from_millis(100), || {
            served.get(&rt, "/readyz").0 == 200
        });
        assert!(ok, "/readyz never 200: {}", served.logs());
    };

    // (a) No token: the page only shows; no route acts.
    {
        let served = Served::start(&broker.env(), dir.path());
        ready(&served);
        for path in ["/".to_string(), format!("/order/{}", pos(waiting))] {
            let dom = chromium(&["--dump-dom".into(), format!("{}{path}", served.base)]);
            assert!(dom.contains("pool_worker"), "{dom}");
            assert!(
                !dom.contains("<form") && !dom.contains("<button") && !dom.contains("actions.js"),
                "{path} has forms without a token: {dom}"
            );
        }
        let origin = served.base.clone();
        for path in [
            "/action/cancel",
            "/action/submit",
            "/action/retry",
            "/login",
        ] {
            let (code, ..) = post(
                &format!("{}{path}", served.base),
                &[("origin", origin.as_str())],
                &[
                    ("order", pos(waiting).as_str()),
                    ("confirm", "yes"),
                    ("token", "x"),
                ],
            );
            assert_eq!(code, 404, "POST {path} without a token");
        }
        assert!(cancels().is_empty());
    }

    // A token file that group can read is refused, at start.
    const TOKEN: &str = "the-operators-token-0123456789-abcdefghij";
    let token_file = dir.path().join("serve-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut env = broker.env();
    env.push(("SERVE_TOKEN_FILE".into(), token_file.display().to_string()));
    let r = tool(&env, &["serve", "--listen", "127.0.0.1:0"], None, TOOL);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("SERVE_TOKEN_FILE") && r.stderr.contains("chmod 600"),
        "{r:?}"
    );
    assert!(!r.stderr.contains(TOKEN), "{r:?}");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    // (b) With the token, in a browser.
    let served = Served::start(&env, dir.path());
    ready(&served);
    let base = served.base.clone();
    let mut b = Browser::start();
    b.goto(&format!("{base}/"));
    assert!(
        b.until("!!document.getElementById('token')"),
        "no login form: {}",
        b.dom()
    );
    assert_eq!(
        b.eval("document.getElementById('order-input') === null"),
        Some(true.into()),
        "a form to submit before logging in: {}",
        b.dom()
    );
    b.eval("document.getElementById('token').value = 'not-the-token-but-long-enough-0123456789'; document.getElementById('login').click(); 1");
    assert!(
        b.until("(document.getElementById('refused') || {}).textContent === 'wrong token'"),
        "{}",
        b.dom()
    );
    b.goto(&format!("{base}/"));
    assert!(b.until("!!document.getElementById('token')"), "{}", b.dom());
    b.eval(&format!(
        "document.getElementById('token').value = {TOKEN:?}; document.getElementById('login').click(); 1"
    ));
    assert!(
        b.until("(document.getElementById('flash') || {}).textContent.startsWith('logged in')"),
        "not logged in: {}\n{}",
        b.dom(),
        served.logs()
    );
    assert!(
        !b.text_of("document.cookie").contains("pw_session"),
        "the session cookie is HttpOnly"
    );
    // Submit an order from the page: it is the orders topic's next one.
    let before = orders_in_topic().len();
    b.eval("document.getElementById('order-input').value = 'true'; document.getElementById('submit').click(); 1");
    assert!(
        b.until("location.pathname.startsWith('/order/') && (document.getElementById('flash') || {}).textContent.endsWith('submitted')"),
        "{}\n{}",
        b.dom(),
        served.logs()
    );
    let path = b.text_of("location.pathname");
    let submitted = (0, before as i64);
    assert_eq!(path, format!("/order/{}", pos(submitted)));
    assert_eq!(
        b.text("flash"),
        format!("order {} submitted", pos(submitted))
    );
    let sent = orders_in_topic();
    assert_eq!(sent.len(), before + 1);
    assert_eq!(sent[before].2.as_deref(), Some(&b"true"[..]));
    // Cancel it from its page, after the page's question.
    assert!(
        b.until("!!document.getElementById('cancel')"),
        "{}",
        b.dom()
    );
    b.eval("document.getElementById('reason').value = 'from the page'; document.getElementById('cancel').click(); 1");
    assert!(
        b.until("(document.getElementById('flash') || {}).textContent.includes('cancel recorded')"),
        "{}\n{}",
        b.dom(),
        served.logs()
    );
    assert_eq!(
        b.dialogs,
        vec![format!(
            "Cancel order {}? If it runs, its job is killed.",
            pos(submitted)
        )]
    );
    assert_eq!(cancels(), vec![format!("cancel:{}", pos(submitted))]);

    // (c) Forged requests, with a session of their own (logged in by a
    // script, as curl would).
    let (code, location, cookies, _) = post(
        &format!("{base}/login"),
        &[("origin", base.as_str())],
        &[("token", TOKEN)],
    );
    assert_eq!((code, location.as_str()), (303, "/"));
    let session = cookies
        .iter()
        .find(|c| c.starts_with("pw_session="))
        .unwrap_or_else(|| panic!("no session cookie: {cookies:?}"));
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(session.contains(attr), "{session}");
    }
    assert!(
        !session.contains(TOKEN) && !session.contains("Secure"),
        "{session}"
    );
    let cookie = session.split(';').next().unwrap().to_string();
    let (_, page) = get(&format!("{base}/"), cookie.as_str());
    let csrf = csrf_of(&page);
    // The browser's session has its own.
    let browser_csrf = csrf_of(&b.dom());
    assert_ne!(browser_csrf, csrf);
    let cancel_url = format!("{base}/action/cancel");
    let order = pos(waiting);
    let evil = "http://evil.example";
    type Pairs<'a> = Vec<(&'a str, &'a str)>;
    let forged: Vec<(&str, Pairs, Pairs)> = vec![
        (
            "no CSRF token",
            vec![("cookie", cookie.as_str())],
            vec![("order", order.as_str()), ("confirm", "yes")],
        ),
        (
            "a wrong CSRF token",
            vec![("cookie", cookie.as_str())],
            vec![
                ("csrf", "00ff"),
                ("order", order.as_str()),
                ("confirm", "yes"),
            ],
        ),
        (
            "the browser's CSRF token",
            vec![("cookie", cookie.as_str())],
            vec![
                ("csrf", browser_csrf.as_str()),
                ("order", order.as_str()),
                ("confirm", "yes"),
            ],
        ),
        (
            "a foreign Origin",
            vec![("cookie", cookie.as_str()), ("origin", evil)],
            vec![
                ("csrf", csrf.as_str()),
                ("order", order.as_str()),
                ("confirm", "yes"),
            ],
        ),
        (
            "a foreign Referer",
            vec![
                ("cookie", cookie.as_str()),
                ("referer", "http://evil.example/x"),
            ],
            vec![
                ("csrf", csrf.as_str()),
                ("order", order.as_str()),
                ("confirm", "yes"),
            ],
        ),
        (
            "cross-site",
            vec![
                ("cookie", cookie.as_str()),
                ("sec-fetch-site", "cross-site"),
            ],
            vec![
                ("csrf", csrf.as_str()),
                ("order", order.as_str()),
                ("confirm", "yes"),
            ],
        ),
        (
            "no cookie",
            vec![("origin", base.as_str())],
            vec![
                ("csrf", csrf.as_str()),
                ("order", order.as_str()),
                ("confirm", "yes"),
            ],
        ),
    ];
    for (what, headers, form) in &forged {
        let (code, _, _, body) = post(&cancel_url, headers, form);
        assert_eq!(code, 403, "{what}: {body}");
        assert!(body.contains("id=\"refused\""), "{what}: {body}");
    }
    let (code, ..) = post(
        &format!("{base}/action/submit"),
        &[("cookie", cookie.as_str()), ("origin", evil)],
        &[("csrf", csrf.as_str()), ("order", "true")],
    );
    assert_eq!(code, 403, "a forged submit");
    let (code, ..) = post(
        &format!("{base}/login"),
        &[("origin", evil)],
        &[("token", TOKEN)],
    );
    assert_eq!(code, 403, "a login from another site");
    let (code, _) = get(
        &format!("{cancel_url}?csrf={csrf}&order={order}&confirm=yes"),
        &cookie,
    );
    assert_eq!(code, 403, "GET of an action");
    // Without confirm=yes the server only asks.
    let (code, _, _, body) = post(
        &cancel_url,
        &[("cookie", cookie.as_str()), ("origin", base.as_str())],
        &[("csrf", csrf.as_str()), ("order", order.as_str())],
    );
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("id=\"confirm-yes\"") && body.contains("name=\"confirm\" value=\"yes\""),
        "{body}"
    );
    // Bad input: a clear 400, what was typed kept, nothing sent.
    let (code, _, _, body) = post(
        &format!("{base}/action/submit"),
        &[("cookie", cookie.as_str()), ("origin", base.as_str())],
        &[
            ("csrf", csrf.as_str()),
            ("order", "{\"cmd\": 5, \"keep\": \"<me>\"}"),
        ],
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("not a valid order"), "{body}");
    assert!(
        body.contains("{\"cmd\": 5, \"keep\": \"&lt;me&gt;\"}</textarea>"),
        "the text is kept: {body}"
    );
    let (code, _, _, body) = post(
        &cancel_url,
        &[("cookie", cookie.as_str()), ("origin", base.as_str())],
        &[
            ("csrf", csrf.as_str()),
            ("order", "zero:one"),
            ("confirm", "yes"),
        ],
    );
    assert_eq!(code, 400, "{body}");
    let big = "x".repeat(100 * 1024);
    let (code, ..) = post(
        &format!("{base}/action/submit"),
        &[("cookie", cookie.as_str()), ("origin", base.as_str())],
        &[("csrf", csrf.as_str()), ("order", &big)],
    );
    assert_eq!(code, 413, "a body past the limit");
    assert_eq!(orders_in_topic().len(), before + 1, "nothing sent");
    assert_eq!(
        cancels(),
        vec![format!("cancel:{}", pos(submitted))],
        "nothing written"
    );
    // The same request, made right, acts.
    let (code, location, ..) = post(
        &cancel_url,
        &[("cookie", cookie.as_str()), ("origin", base.as_str())],
        &[
            ("csrf", csrf.as_str()),
            ("order", order.as_str()),
            ("confirm", "yes"),
        ],
    );
    assert_eq!((code, location), (303, format!("/order/{order}")));
    assert_eq!(
        cancels(),
        vec![
            format!("cancel:{}", pos(submitted)),
            format!("cancel:{order}")
        ]
    );

    // The pool ends both `cancelled`; the browser retries one from its page.
    let sup = pool(&broker, "1", &[]);
    for o in outcomes(&broker, &[submitted, waiting]) {
        assert_eq!(o.status, Status::Cancelled, "{o:?}");
    }
    let url = format!("{base}/order/{}", pos(submitted));
    let shown = poll_until(T, Duration::from_millis(200), || {
        b.goto(&url);
        b.until("document.readyState === 'complete'")
            && b.eval("!!document.getElementById('retry')") == Some(true.into())
    });
    assert!(shown, "no retry button: {}", b.dom());
    b.eval("document.getElementById('retry').click(); 1");
    assert!(
        b.until(
            "(document.getElementById('flash') || {}).textContent.includes('sent again as order')"
        ),
        "{}\n{}",
        b.dom(),
        served.logs()
    );
    assert_eq!(
        b.dialogs.last().map(String::as_str),
        Some(format!("Send order {} again, as a new order?", pos(submitted)).as_str())
    );
    let sent = orders_in_topic();
    let retried = (0, sent.len() as i64 - 1);
    let payload: serde_json::Value =
        serde_json::from_slice(sent.last().unwrap().2.as_deref().unwrap()).unwrap();
    assert_eq!(payload["retry_of"], pos(submitted), "{payload}");
    assert_eq!(
        b.text_of("location.pathname"),
        format!("/order/{}", pos(retried))
    );
    assert_eq!(outcomes(&broker, &[retried])[0].status, Status::Ok);
    drop(sup);

    // Every action is in the log, with its session; so are the refusals.
    let logs = served.logs();
    for line in [
        "serve: logged in",
        "serve: login refused (wrong token)",
        "serve: action",
        "serve: request refused",
    ] {
        assert!(logs.contains(line), "no {line:?} in\n{logs}");
    }
    assert!(!logs.contains(TOKEN), "the token is in the log:\n{logs}");
}

// ------------------------------------- 11. retry and trace context (issue 19)

/// Produces one order with a `traceparent` header; where it landed.
fn produce_with_traceparent(
    bootstrap: &str,
    topic: &str,
    payload: &str,
    traceparent: &str,
) -> (i32, i64) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.timeout.ms", "30000")
        .create()
        .expect("a producer");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let headers = OwnedHeaders::new().insert(Header {
        key: "traceparent",
        value: Some(traceparent.as_bytes()),
    });
    let rec = FutureRecord::<(), str>::to(topic)
        .payload(payload)
        .partition(0)
        .headers(headers);
    let d = rt
        .block_on(producer.send(rec, Duration::from_secs(30)))
        .unwrap_or_else(|(e, _)| panic!("cannot produce: {e}"));
    (d.partition, d.offset)
}

/// A JSON order's `traceparent`, or its record's header, reaches the job
/// as TRACEPARENT and appears in the completion and the worker's log; a
/// malformed one fails the order. `retry P:O` sends an ended order again,
/// linked both ways in `history`; a second retry of it is a duplicate; a
/// waiting or unknown order is not sent (issue 19, parts 3 and 4).
#[test]
fn retry_links_orders_and_trace_context_reaches_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker();
    let (bootstrap, topic) = (broker.bootstrap(), broker.opts.orders_topic.clone());
    let env = broker.env();
    let tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let script = format!(
        "echo \"$ORDER_OFFSET $TRACEPARENT\" >> {}; exit 3",
        shq(&ledger)
    );
    let a = produce_orders(
        bootstrap,
        &topic,
        &[serde_json::json!({"cmd": ["sh", "-c", script], "traceparent": tp1}).to_string()],
        Some(0),
    )[0];
    let plain = format!(
        "sh -c '{}'",
        format!("echo \"$ORDER_OFFSET $TRACEPARENT\" >> {}", shq(&ledger)).replace('\'', r"'\''")
    );
    let b = produce_with_traceparent(bootstrap, &topic, &plain, tp2);
    let c = produce_orders(
        bootstrap,
        &topic,
        &[r#"{"cmd":["true"],"traceparent":"00-bad-trace-01"}"#],
        Some(0),
    )[0];
    // Still waiting: not sent again.
    let r = tool(&env, &["retry", &pos(a)], None, TOOL);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("has not been claimed yet"),
        "{}",
        r.stderr
    );

    let sup = pool(&broker, "1", &[]);
    let o = outcomes(&broker, &[a, b, c]);
    assert_eq!(
        (o[0].status, o[0].traceparent.as_deref()),
        (Status::Failed, Some(tp1)),
        "{:?}",
        o[0]
    );
    assert_eq!(
        (o[1].status, o[1].traceparent.as_deref()),
        (Status::Ok, Some(tp2)),
        "the header's: {:?}",
        o[1]
    );
    assert_eq!(o[2].status, Status::Error, "{:?}", o[2]);
    assert!(
        o[2].reason.as_deref().unwrap_or("").contains("traceparent"),
        "{:?}",
        o[2]
    );
    assert!(o.iter().all(|o| o.retry_of.is_none()), "{o:?}");
    let ran = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert!(
        ran.contains(&format!("{} {tp1}\n", a.1)) && ran.contains(&format!("{} {tp2}\n", b.1)),
        "{ran}"
    );
    assert!(
        poll_until(T, Duration::from_millis(50), || sup
            .stderr
            .lines()
            .iter()
            .any(|l| l.contains("completed") && l.contains(tp1))),
        "no completion log line with the trace context:\n{}",
        sup.stderr.last(30)
    );

    // Retry the failed order: the same job, linked to the original.
    let r = tool(&env, &["retry", &pos(a)], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    let retry: pool_worker::record::OrderId = r
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    let o = outcomes(&broker, &[(retry.partition, retry.offset)]);
    assert_eq!(o[0].status, Status::Failed, "{:?}", o[0]);
    assert_eq!(
        (o[0].retry_of.clone(), o[0].traceparent.as_deref()),
        (Some(pos(a)), Some(tp1)),
        "{:?}",
        o[0]
    );
    let ran = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert!(ran.contains(&format!("{} {tp1}\n", retry.offset)), "{ran}");
    // history of either shows the link.
    let r = tool(&env, &["history", &retry.to_string()], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stdout.contains(&format!("retry of {}", pos(a))),
        "{}",
        r.stdout
    );
    let r = tool(&env, &["history", &pos(a)], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stdout.contains(&format!("retried as {retry}")),
        "{}",
        r.stdout
    );
    let r = tool(&env, &["history", &pos(a), "--json"], None, TOOL);
    let h: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(
        h["retries"][0]["record"]["offset"],
        serde_json::json!(retry.offset),
        "{h}"
    );
    // A plain-text order is retried too; the header's trace context goes along.
    let r = tool(&env, &["retry", &pos(b)], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    let retry_b: pool_worker::record::OrderId = r
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    // A second retry of the same order is a duplicate, not a second run.
    let r = tool(&env, &["retry", &pos(a)], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    let again: pool_worker::record::OrderId = r
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    let o = outcomes(
        &broker,
        &[
            (retry_b.partition, retry_b.offset),
            (again.partition, again.offset),
        ],
    );
    assert_eq!(
        (
            o[0].status,
            o[0].traceparent.as_deref(),
            o[0].retry_of.clone()
        ),
        (Status::Ok, Some(tp2), Some(pos(b))),
        "{:?}",
        o[0]
    );
    assert_eq!(o[1].status, Status::Duplicate, "{:?}", o[1]);
    // An order that does not exist.
    let r = tool(&env, &["retry", "0:999"], None, TOOL);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("no order 0:999"), "{}", r.stderr);
    drop(sup);
}

// ------------------------------------------------------------- cancel

/// `pool_worker cancel P:O` (issue 19): an order still waiting is completed
/// `cancelled` and never runs (its job would leave a file); a running one
/// has its job killed long before it would end, and is completed
/// `cancelled`; a completed one is left as it is, with nothing written;
/// status and history show the cancels and their reasons; bad input gets
/// one clear line and an exit status.
#[test]
fn cancel_stops_waiting_and_running_orders_and_leaves_completed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (ran_a, started_b) = (dir.path().join("ran-a"), dir.path().join("started-b"));
    let broker = broker();
    let (bootstrap, topic) = (broker.bootstrap(), broker.opts.orders_topic.clone());
    let env = broker.env();
    // Bad input.
    let r = tool(&env, &["cancel", "zero:one"], None, TOOL);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("PARTITION:OFFSET"), "{}", r.stderr);
    let r = tool(&env, &["cancel", "0:0"], None, TOOL);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("no order 0:0"), "{}", r.stderr);
    let r = tool(&env, &["cancel", "7:0"], None, TOOL);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("no order 7:0"), "{}", r.stderr);

    // A waiting order, cancelled before any instance is up.
    let orders = produce_orders(
        bootstrap,
        &topic,
        &[
            sh_order(&format!("touch {}", shq(&ran_a)), None),
            sh_order(&format!("touch {}; exec sleep 300", shq(&started_b)), None),
        ],
        Some(0),
    );
    let (a, b) = (orders[0], orders[1]);
    let r = tool(
        &env,
        &[
            "cancel",
            &pos(a),
            "--reason",
            "sent by mistake",
            "--no-wait",
        ],
        None,
        TOOL,
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains("cancel recorded"), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!("history {}", pos(a))),
        "{}",
        r.stdout
    );
    // Again: already cancelled, nothing written twice.
    let r = tool(&env, &["cancel", &pos(a), "--no-wait"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains("already cancelled"), "{}", r.stdout);

    let sup = pool(&broker, "1", &[]);
    let o = outcomes(&broker, &[a]);
    assert_eq!(o[0].status, Status::Cancelled, "{:?}", o[0]);
    let reason = o[0].reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("before it ran") && reason.contains("sent by mistake"),
        "{reason}"
    );
    // The running one: cancelled once its job has started (the file it
    // leaves is the event awaited), killed, completed `cancelled`.
    assert!(
        poll_until(T, Duration::from_millis(20), || started_b.exists()),
        "order {} never started:\n{}",
        pos(b),
        sup.stderr.last(30)
    );
    let r = tool(
        &env,
        &["cancel", &pos(b), "--reason", "too slow"],
        None,
        TOOL,
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stderr.contains(&format!("order {}: cancelled", pos(b))),
        "{}",
        r.stderr
    );
    let o = outcomes(&broker, &[b]);
    assert_eq!(o[0].status, Status::Cancelled, "{:?}", o[0]);
    let reason = o[0].reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("while it ran") && reason.contains("too slow"),
        "{reason}"
    );
    assert!(
        o[0].duration_ms < 300_000,
        "killed, not run to its end: {:?}",
        o[0]
    );
    assert!(!ran_a.exists(), "the order cancelled while waiting ran");

    // A completed order is left as it is.
    let c = produce_orders(bootstrap, &topic, &["true"], Some(0))[0];
    assert_eq!(outcomes(&broker, &[c])[0].status, Status::Ok);
    let r = tool(&env, &["cancel", &pos(c)], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stdout.contains("already completed (ok") && r.stdout.contains("left as it is"),
        "{}",
        r.stdout
    );
    let cancels: Vec<String> = decoded_claims(bootstrap, &broker.opts.coordination_topic)
        .into_iter()
        .filter(|(_, r)| r.event() == Event::Cancelled)
        .map(|(_, r)| r.key())
        .collect();
    assert_eq!(
        cancels,
        vec![format!("cancel:{}", pos(a)), format!("cancel:{}", pos(b))],
        "one cancel each, none for the completed order"
    );

    // status counts them; history shows the cancel and its reason.
    let r = tool(&env, &["status", "--json"], None, TOOL);
    let s: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(s["cancelled"], 2, "{s}");
    assert_eq!(s["by_status"]["cancelled"], 2, "{s}");
    let r = tool(&env, &["history", &pos(a)], None, TOOL);
    assert!(
        r.stdout.contains(&format!("cancel:{}", pos(a)))
            && r.stdout.contains("sent by mistake")
            && r.stdout.contains("cancelled"),
        "{}",
        r.stdout
    );
    drop(sup);
}

/// A worker whose job runs reads the claims topic only now and then
/// (issue 35, `Kafka::hush`): once its claim is read back it stops
/// fetching the claims topic at the log's end, and looks again every
/// `HUSH_PEEK` (250 ms). What the pool writes meanwhile is read late, never
/// lost: while the long job's worker is quiet, the other instance completes
/// three orders, and a cancel of the long order, sent then, still kills its
/// job. The audit then finds every invariant held.
#[test]
fn a_quiet_running_worker_reads_late_but_takes_its_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let (started, account) = (dir.path().join("started"), dir.path().join("account"));
    let broker = broker();
    let (bootstrap, topic) = (broker.bootstrap(), broker.opts.orders_topic.clone());
    let env = broker.env();
    let account_var = account.to_str().unwrap().to_string();
    let sup = pool(&broker, "1-2", &[("POOL_WORKER_ACCOUNT", &account_var)]);
    let long = produce_orders(
        bootstrap,
        &topic,
        &[sh_order(
            &format!("touch {}; exec sleep 300", shq(&started)),
            None,
        )],
        Some(0),
    )[0];
    assert!(
        poll_until(T, Duration::from_millis(20), || started.exists()),
        "order {} never started:\n{}",
        pos(long),
        sup.stderr.last(30)
    );
    // The processes that went quiet: pid -> (hushed, unhushed) marks.
    let quiet = || {
        let text = std::fs::read_to_string(&account).unwrap_or_default();
        let mut by_pid: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f.get(2) {
                Some(&"hushed") => by_pid.entry(f[0].to_string()).or_default().0 += 1,
                Some(&"unhushed") => by_pid.entry(f[0].to_string()).or_default().1 += 1,
                _ => {}
            }
        }
        by_pid
    };
    assert!(
        poll_until(T, Duration::from_millis(20), || !quiet().is_empty()),
        "the long job's worker never went quiet:\n{}",
        sup.stderr.last(30)
    );
    let shorts = produce_orders(bootstrap, &topic, &["true", "true", "true"], Some(0));
    for o in outcomes(&broker, &shorts) {
        assert_eq!(o.status, Status::Ok, "{o:?}");
    }
    let r = tool(
        &env,
        &["cancel", &pos(long), "--reason", "quiet"],
        None,
        TOOL,
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    let o = outcomes(&broker, &[long]);
    assert_eq!(o[0].status, Status::Cancelled, "{:?}", o[0]);
    let reason = o[0].reason.as_deref().unwrap_or("");
    assert!(reason.contains("while it ran"), "{reason}");
    // The long job's worker looked at the log again and again while its
    // job ran (the three orders, the cancel): quiet, then reading, more
    // than once.
    let (hushed, unhushed) = quiet().into_values().max().unwrap_or_default();
    assert!(
        hushed >= 2 && unhushed >= 2,
        "hushed {hushed}, unhushed {unhushed} times: {:?}",
        quiet()
    );
    let r = tool(&env, &["audit"], None, TOOL);
    assert_eq!(r.code, Some(0), "{r:?}");
    drop(sup);
}

/// `/readyz` answers 503 until `serve` has read the claims topic to its
/// end (and counted the orders against it): started while the broker
/// refuses every connection, it cannot have read anything, whatever the
/// timing; once the broker is back it becomes ready by itself. `/healthz`
/// answers all along.
#[test]
fn readyz_is_503_until_serve_has_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker();
    let orders = produce_orders(
        broker.bootstrap(),
        &broker.opts.orders_topic,
        &["true"],
        Some(0),
    );
    let sup = pool(&broker, "1", &[]);
    outcomes(&broker, &orders);
    drop(sup);
    broker.down();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let served = Served::start(&broker.env(), dir.path());
    assert_eq!(served.get(&rt, "/healthz").0, 200, "{}", served.logs());
    let (code, body) = served.get(&rt, "/readyz");
    assert_eq!(code, 503, "{body}\n{}", served.logs());
    assert!(body.contains("not connected"), "{body}");
    broker.up();
    let ready = poll_until(TOOL, Duration::from_millis(100), || {
        served.get(&rt, "/readyz").0 == 200
    });
    assert!(
        ready,
        "/readyz never 200 after the broker came back: {:?}\n{}",
        served.get(&rt, "/readyz"),
        served.logs()
    );
    // Ready means caught up: the completion is counted.
    let m = served.metrics(&rt);
    assert_eq!(
        metric(&m, "pool_worker_orders_completed_total", "status=ok"),
        1.0,
        "{m:#?}"
    );
}

/// Whether `story` (`history`'s text, or the dashboard's story) shows
/// `instance`'s commit of its order: its claim marked as its own commit (it
/// met no rival, docs/protocol.md R34), or its `committed` after a contest.
fn shows_commit_by(story: &str, instance: u32) -> bool {
    story.lines().any(|l| {
        l.contains(&format!(" {instance}:committed"))
            || (l.contains(&format!(" {instance}:claimed")) && l.contains("its own commit"))
    })
}

/// Priority topics on the embedded broker (R57): `broker` creates every
/// topic of `ORDERS_TOPIC=u,w`; `submit --topic` sends to one of them
/// (printing `u:0:0`), refuses a topic not in the list (exit 2), and sends
/// to the main topic without it; an order id of a topic not in the list is
/// refused by `history` (exit 2). One instance started with an order
/// waiting in each topic takes the urgent one first; its job sees
/// `ORDER_TOPIC`, and the results name each order's topic.
#[test]
fn priority_topics_on_the_embedded_broker() {
    let (u, w) = (unique_topic("u"), unique_topic("w"));
    let broker = BrokerProc::start_with(BrokerOpts {
        orders_topic: format!("{u},{w}"),
        coordination_topic: unique_topic("claims"),
        results_topic: Some(unique_topic("results")),
        ..BrokerOpts::default()
    });
    let env = broker.env();
    let job = [
        "--",
        "sh",
        "-c",
        "echo $ORDER_TOPIC:$ORDER_PARTITION:$ORDER_OFFSET",
    ];
    let nope = tool(
        &env,
        &[&["submit", "--topic", "nope"][..], &job].concat(),
        None,
        TOOL,
    );
    assert_eq!(nope.code, Some(2), "{nope:?}");
    assert!(nope.stderr.contains("not one of ORDERS_TOPIC"), "{nope:?}");
    let main = tool(&env, &[&["submit"][..], &job].concat(), None, TOOL);
    assert_eq!(
        (main.code, main.stdout.trim()),
        (Some(0), "0:0"),
        "{main:?}"
    );
    let urgent = tool(
        &env,
        &[&["submit", "--topic", &u][..], &job].concat(),
        None,
        TOOL,
    );
    let urgent_id = format!("{u}:0:0");
    assert_eq!(
        (urgent.code, urgent.stdout.trim()),
        (Some(0), urgent_id.as_str()),
        "{urgent:?}"
    );
    let other = tool(&env, &["history", "other:0:0"], None, TOOL);
    assert_eq!(other.code, Some(2), "{other:?}");

    let _sup = pool(&broker, "1", &[]);
    let claims = &broker.opts.coordination_topic;
    let main_id: pool_worker::record::OrderId = "0:0".parse().unwrap();
    let urgent_oid: pool_worker::record::OrderId = urgent_id.parse().unwrap();
    let mut recs = Vec::new();
    assert!(
        poll_until(T, Duration::from_millis(100), || {
            recs = decoded_claims(broker.bootstrap(), claims);
            [main_id, urgent_oid].iter().all(|o| {
                recs.iter()
                    .any(|(_, r)| r.event() == Event::Completed && r.order() == Some(*o))
            })
        }),
        "not completed:\n{}",
        show_all(&recs)
    );
    let claimed_at = |o| {
        recs.iter()
            .find(|(_, r)| r.event() == Event::Claimed && r.order() == Some(o))
            .map(|(p, _)| *p)
            .unwrap()
    };
    assert!(
        claimed_at(urgent_oid) < claimed_at(main_id),
        "the urgent order was not taken first:\n{}",
        show_all(&recs)
    );
    let results = broker.opts.results_topic.clone().unwrap();
    let mut got = Vec::new();
    assert!(poll_until(
        Duration::from_secs(15),
        Duration::from_millis(200),
        || {
            got = read_topic(broker.bootstrap(), &results, 0);
            got.len() >= 2
        }
    ));
    let by_key: BTreeMap<String, serde_json::Value> = got
        .iter()
        .map(|(_, k, v)| {
            (
                String::from_utf8(k.clone().unwrap()).unwrap(),
                serde_json::from_slice(v.as_deref().unwrap()).unwrap(),
            )
        })
        .collect();
    assert_eq!(by_key["0:0"]["topic"], w.as_str(), "{by_key:?}");
    assert_eq!(by_key["0:0"]["stdout"], format!("{w}:0:0\n"));
    assert_eq!(by_key[&urgent_id]["topic"], u.as_str(), "{by_key:?}");
    assert_eq!(by_key[&urgent_id]["stdout"], format!("{urgent_id}\n"));
}
