//! Schedules (`SCHEDULE_FILE`, src/schedule.rs) on the embedded broker: a
//! firing each second runs exactly once while instances are killed and
//! restarted; after the whole pool was down, `catch_up` runs the missed
//! firings its policy says. Judged by the claims topic: each firing's
//! completions (`ok` once; any copy produced twice completes `duplicate`,
//! R46) and by the orders topic (which firings were produced).

use crate::common::*;
use pool_worker::record::{Event, Status};
use pool_worker::schedule::{firing_id, firing_time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Sleeps until the wall clock reads `at` (ms): when a scenario's step
/// happens (a kill, a restart), not a wait for anything.
fn sleep_until(at: u64) {
    std::thread::sleep(Duration::from_millis(at.saturating_sub(wall_ms())));
}

/// Per firing id of schedule `name`: the statuses of its completions, in
/// the log's order.
fn runs(broker: &BrokerProc, name: &str) -> BTreeMap<String, Vec<Status>> {
    let prefix = format!("schedule:{name}:");
    let mut out: BTreeMap<String, Vec<Status>> = BTreeMap::new();
    for (_, rec) in decoded_claims(broker.bootstrap(), &broker.opts.coordination_topic) {
        if rec.event() != Event::Completed {
            continue;
        }
        if let (Some(id), Some(o)) = (rec.order_id(), rec.outcome()) {
            if id.starts_with(&prefix) {
                out.entry(id.to_string()).or_default().push(o.status);
            }
        }
    }
    out
}

/// The firings of schedule `name` in the orders topic (produced, run or
/// not), with how many copies of each.
fn produced(broker: &BrokerProc, name: &str) -> BTreeMap<String, usize> {
    let prefix = format!("schedule:{name}:");
    let mut out = BTreeMap::new();
    for (_, _, v) in read_topic(broker.bootstrap(), &broker.opts.orders_topic, 0) {
        let id = v
            .and_then(|v| serde_json::from_slice::<serde_json::Value>(&v).ok())
            .and_then(|j| j["id"].as_str().map(str::to_string));
        if let Some(id) = id.filter(|id| id.starts_with(&prefix)) {
            *out.entry(id).or_default() += 1;
        }
    }
    out
}

/// The firings that ran (completed `ok`): each must have done so once.
fn ran_once(runs: &BTreeMap<String, Vec<Status>>) -> BTreeSet<String> {
    for (id, statuses) in runs {
        let ok = statuses.iter().filter(|s| **s == Status::Ok).count();
        assert!(ok <= 1, "{id} ran {ok} times: {statuses:?}");
        assert!(
            statuses
                .iter()
                .all(|s| matches!(s, Status::Ok | Status::Duplicate)),
            "{id}: {statuses:?}"
        );
    }
    runs.iter()
        .filter(|(_, s)| s.contains(&Status::Ok))
        .map(|(id, _)| id.clone())
        .collect()
}

fn schedule_file(dir: &tempfile::TempDir, json: &str) -> String {
    let path = dir.path().join("schedules.json");
    std::fs::write(&path, json).unwrap();
    path.display().to_string()
}

#[test]
fn a_firing_each_second_runs_once_while_instances_are_killed() {
    let dir = tempfile::tempdir().unwrap();
    let file = schedule_file(
        &dir,
        r#"[{"name":"tick","cron":"* * * * * *","catch_up":"all","order":{"cmd":["true"]}}]"#,
    );
    let broker = broker(1);
    let mut pool = pool(&broker, "3", &[("SCHEDULE_FILE", file.as_str())]);
    assert!(
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            !ran_once(&runs(&broker, "tick")).is_empty()
        }),
        "no firing ran within 60 s; supervisor: {}",
        pool.stderr.last(30)
    );
    // The window: ten seconds from two seconds on; instances 1 and 2 are
    // killed (SIGKILL) in its middle and come back after settling.
    let w0 = (wall_ms() / 1000 + 2) * 1000;
    let window: Vec<String> = (0..10).map(|s| firing_id("tick", w0 + s * 1000)).collect();
    sleep_until(w0 + 3_300);
    assert!(
        pool.kill_instance(1, libc::SIGKILL).is_some(),
        "instance 1 runs"
    );
    sleep_until(w0 + 6_600);
    assert!(
        pool.kill_instance(2, libc::SIGKILL).is_some(),
        "instance 2 runs"
    );
    let all_ran = poll_until(Duration::from_secs(60), Duration::from_millis(250), || {
        let ran = ran_once(&runs(&broker, "tick"));
        window.iter().all(|id| ran.contains(id))
    });
    pool.stop();
    let runs = runs(&broker, "tick");
    let ran = ran_once(&runs);
    let missing: Vec<&String> = window.iter().filter(|id| !ran.contains(*id)).collect();
    assert!(
        all_ran && missing.is_empty(),
        "firings not run: {missing:?}; supervisor: {}",
        pool.stderr.last(30)
    );
    let copies = produced(&broker, "tick");
    let doubled: Vec<(&String, &usize)> = copies.iter().filter(|(_, n)| **n > 1).collect();
    let duplicates: usize = runs
        .values()
        .map(|s| s.iter().filter(|s| **s == Status::Duplicate).count())
        .sum();
    eprintln!(
        "{} firings produced, {} of them more than once ({doubled:?}), {duplicates} completed duplicate",
        copies.len(),
        doubled.len()
    );
    assert!(
        doubled.len() * 4 <= copies.len(),
        "doubles are to be rare: {doubled:?} of {}",
        copies.len()
    );
}

/// The newest firing of `name` in the orders topic: its time (ms).
fn newest_produced(broker: &BrokerProc, name: &str) -> u64 {
    produced(broker, name)
        .keys()
        .filter_map(|id| firing_time(name, id))
        .max()
        .expect("a firing produced")
}

#[test]
fn catch_up_after_the_whole_pool_was_down() {
    let dir = tempfile::tempdir().unwrap();
    let file = schedule_file(
        &dir,
        r#"[{"name":"late","cron":"*/4 * * * * *","catch_up":"latest","grace_secs":1,"order":{"cmd":["true"]}},
            {"name":"every","cron":"*/4 * * * * *","catch_up":"all","grace_secs":1,"order":{"cmd":["true"]}},
            {"name":"never","cron":"*/4 * * * * *","catch_up":"none","grace_secs":1,"order":{"cmd":["true"]}}]"#,
    );
    let broker = broker(1);
    let env = [("SCHEDULE_FILE", file.as_str())];
    let mut first = pool(&broker, "2", &env);
    let names = ["late", "every", "never"];
    assert!(
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            names
                .iter()
                .all(|n| !ran_once(&runs(&broker, n)).is_empty())
        }),
        "not every schedule ran within 60 s; supervisor: {}",
        first.stderr.last(30)
    );
    assert_eq!(first.stop(), Some(0));
    // The newest firing produced before the pool went down (run after the
    // restart if it was still waiting).
    let before: BTreeMap<&str, u64> = names
        .iter()
        .map(|n| (*n, newest_produced(&broker, n)))
        .collect();
    // Down over three firings or more; back 1.5 s after one (`f`): past
    // its grace, so that `f` is missed, and the next is on time.
    let f = (wall_ms() + 12_000).div_ceil(4_000) * 4_000;
    sleep_until(f + 1_500);
    let mut second = pool(&broker, "2", &env);
    let next = f + 4_000;
    assert!(
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            names
                .iter()
                .all(|n| ran_once(&runs(&broker, n)).contains(&firing_id(n, next)))
        }),
        "the first firing after the restart did not run; supervisor: {}",
        second.stderr.last(30)
    );
    assert_eq!(second.stop(), Some(0));
    for n in names {
        let ran = ran_once(&runs(&broker, n));
        let missed: Vec<String> = (1..)
            .map(|k| before[n] + k * 4_000)
            .take_while(|t| *t <= f)
            .map(|t| firing_id(n, t))
            .collect();
        assert!(missed.len() >= 3, "{n}: {missed:?}");
        let caught: Vec<&String> = missed.iter().filter(|id| ran.contains(*id)).collect();
        let want: Vec<&String> = match n {
            "late" => vec![missed.last().unwrap()],
            "every" => missed.iter().collect(),
            _ => vec![],
        };
        assert_eq!(caught, want, "{n}: missed {missed:?}");
        assert!(
            ran.contains(&firing_id(n, before[n])),
            "{n}: the last one before"
        );
    }
    // `status` shows each schedule's next firings and the last one run.
    let out = command()
        .args(["status", "--json"])
        .envs(broker.env())
        .env("SCHEDULE_FILE", &file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = status["schedules"].as_array().expect("schedules shown");
    assert_eq!(rows.len(), 3);
    for r in rows {
        let n = r["name"].as_str().unwrap();
        let last = r["last"]["id"].as_str().unwrap();
        assert!(firing_time(n, last).unwrap() >= next, "{r}");
        assert_eq!(r["next"].as_array().unwrap().len(), 3, "{r}");
    }
}
