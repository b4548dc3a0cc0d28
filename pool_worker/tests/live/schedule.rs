//! Schedules (`SCHEDULE_FILE`, src/schedule.rs) on the embedded broker and
//! on Apache Kafka (the binary's shared single node, tests/live/common/
//! apache.rs): a firing each second runs exactly once while instances are
//! killed and restarted; after the whole pool was down, `catch_up` runs the
//! missed firings its policy says. Judged by the claims topic: each
//! firing's completions (`ok` once; any copy produced twice completes
//! `duplicate`, R46) and by the orders topic (which firings were produced).
//! Each scenario is one function run on both brokers; on Apache Kafka with
//! fewer instances and a shorter window, to keep CI's run short.

use crate::common::apache::shared;
use crate::common::*;
use pool_worker::record::{Event, Status};
use pool_worker::schedule::{firing_id, firing_time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a scenario runs: a broker with fresh topics (one orders
/// partition), and the environment a pool needs against it.
struct Site {
    bootstrap: String,
    orders: String,
    claims: String,
    env: Vec<(String, String)>,
    /// The embedded broker (stopped when dropped); Apache Kafka's node is
    /// the test binary's shared one.
    _broker: Option<BrokerProc>,
    /// `STATE_DIR` on Apache Kafka (the embedded broker has its own).
    _state: Option<tempfile::TempDir>,
}

impl Site {
    fn embedded() -> Site {
        let b = broker(1);
        Site {
            bootstrap: b.bootstrap().to_string(),
            orders: b.opts.orders_topic.clone(),
            claims: b.opts.coordination_topic.clone(),
            env: b.env(),
            _broker: Some(b),
            _state: None,
        }
    }

    fn apache() -> Site {
        let kafka = shared();
        let (orders, claims) = kafka.topics(1);
        // Made, but a new client may not see them yet (UnknownPartition):
        // readable first, as the scenario reads both from the start.
        for topic in [&orders, &claims] {
            assert!(
                poll_until(KAFKA_TIMEOUT, Duration::from_millis(100), || {
                    TopicReader::new(&kafka.bootstrap, topic, 0)
                        .and_then(|mut r| r.catch_up(Duration::from_secs(5)))
                        .is_ok()
                }),
                "topic {topic} not readable within {KAFKA_TIMEOUT:?}"
            );
        }
        let state = tempfile::tempdir().unwrap();
        let mut env = kafka.env(&orders, &claims, state.path());
        // As against the embedded broker (BrokerProc::env): a killed
        // worker's requests reach a broker on loopback within
        // milliseconds, so its successor need not settle the default 15 s
        // (docs/protocol.md R16).
        env.push(("SETTLE_MS".into(), "500".into()));
        Site {
            bootstrap: kafka.bootstrap.clone(),
            orders,
            claims,
            env,
            _broker: None,
            _state: Some(state),
        }
    }

    /// A supervised pool of `instances` against this site, with `extra`.
    fn pool(&self, instances: &str, extra: &[(&str, &str)]) -> SupervisorProc {
        pool_with(self.env.clone(), instances, extra)
    }
}

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
fn runs(site: &Site, name: &str) -> BTreeMap<String, Vec<Status>> {
    let prefix = format!("schedule:{name}:");
    let mut out: BTreeMap<String, Vec<Status>> = BTreeMap::new();
    for (_, rec) in decoded_claims(&site.bootstrap, &site.claims) {
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
fn produced(site: &Site, name: &str) -> BTreeMap<String, usize> {
    let prefix = format!("schedule:{name}:");
    let mut out = BTreeMap::new();
    for (_, _, v) in read_topic(&site.bootstrap, &site.orders, 0) {
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

/// A firing each second on `instances` instances while each but the last
/// is SIGKILLed once, spread over a window of `window_secs` seconds: every
/// firing of the window runs exactly once.
fn firing_each_second_while_instances_are_killed(site: &Site, instances: u32, window_secs: u64) {
    let dir = tempfile::tempdir().unwrap();
    let file = schedule_file(
        &dir,
        r#"[{"name":"tick","cron":"* * * * * *","catch_up":"all","order":{"cmd":["true"]}}]"#,
    );
    let mut pool = site.pool(&instances.to_string(), &[("SCHEDULE_FILE", file.as_str())]);
    assert!(
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            !ran_once(&runs(site, "tick")).is_empty()
        }),
        "no firing ran within 60 s; supervisor: {}",
        pool.stderr.last(30)
    );
    // The window: from two seconds on; instances 1 to N-1 are killed
    // (SIGKILL) one after the other within it, evenly spaced, and come
    // back after settling.
    let w0 = (wall_ms() / 1000 + 2) * 1000;
    let window: Vec<String> = (0..window_secs)
        .map(|s| firing_id("tick", w0 + s * 1000))
        .collect();
    for i in 1..instances {
        sleep_until(w0 + window_secs * 1000 * u64::from(i) / u64::from(instances));
        assert!(
            pool.kill_instance(i, libc::SIGKILL).is_some(),
            "instance {i} runs"
        );
    }
    let all_ran = poll_until(Duration::from_secs(60), Duration::from_millis(250), || {
        let ran = ran_once(&runs(site, "tick"));
        window.iter().all(|id| ran.contains(id))
    });
    pool.stop();
    let runs = runs(site, "tick");
    let ran = ran_once(&runs);
    let missing: Vec<&String> = window.iter().filter(|id| !ran.contains(*id)).collect();
    assert!(
        all_ran && missing.is_empty(),
        "firings not run: {missing:?}; supervisor: {}",
        pool.stderr.last(30)
    );
    let copies = produced(site, "tick");
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

#[test]
fn a_firing_each_second_runs_once_while_instances_are_killed() {
    firing_each_second_while_instances_are_killed(&Site::embedded(), 3, 10);
}

/// [`a_firing_each_second_runs_once_while_instances_are_killed`] on Apache
/// Kafka, shorter: two instances, one killed, a six-second window.
#[test]
fn apache_a_firing_each_second_runs_once_while_an_instance_is_killed() {
    firing_each_second_while_instances_are_killed(&Site::apache(), 2, 6);
}

/// The newest firing of `name` in the orders topic: its time (ms).
fn newest_produced(site: &Site, name: &str) -> u64 {
    produced(site, name)
        .keys()
        .filter_map(|id| firing_time(name, id))
        .max()
        .expect("a firing produced")
}

/// Three schedules firing every 4 s (`latest`, `all`, `none`) on a pool of
/// `instances`, the whole pool down over `missed_at_least` firings or more:
/// after the restart each catches up what its policy says, and `status`
/// shows it.
fn catch_up_after_the_whole_pool_was_down_over(
    site: &Site,
    instances: &str,
    missed_at_least: usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let file = schedule_file(
        &dir,
        r#"[{"name":"late","cron":"*/4 * * * * *","catch_up":"latest","grace_secs":1,"order":{"cmd":["true"]}},
            {"name":"every","cron":"*/4 * * * * *","catch_up":"all","grace_secs":1,"order":{"cmd":["true"]}},
            {"name":"never","cron":"*/4 * * * * *","catch_up":"none","grace_secs":1,"order":{"cmd":["true"]}}]"#,
    );
    let env = [("SCHEDULE_FILE", file.as_str())];
    let mut first = site.pool(instances, &env);
    let names = ["late", "every", "never"];
    assert!(
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            names.iter().all(|n| !ran_once(&runs(site, n)).is_empty())
        }),
        "not every schedule ran within 60 s; supervisor: {}",
        first.stderr.last(30)
    );
    assert_eq!(first.stop(), Some(0));
    // The newest firing produced before the pool went down (run after the
    // restart if it was still waiting).
    let before: BTreeMap<&str, u64> = names
        .iter()
        .map(|n| (*n, newest_produced(site, n)))
        .collect();
    // Down over `missed_at_least` firings or more; back 1.5 s after one
    // (`f`): past its grace, so that `f` and those before it are missed.
    let f = (wall_ms() + missed_at_least as u64 * 4_000).div_ceil(4_000) * 4_000;
    sleep_until(f + 1_500);
    let mut second = site.pool(instances, &env);
    // The first firing after the restart that `never` ran: the first one
    // the restarted pool found on time (`f + 4 s` unless its first look
    // came past that one's grace: a slow boot). The same for the three
    // schedules (same pattern, same grace, looked at together); every
    // firing between the last one produced before and it was missed.
    let mut next = None;
    assert!(
        poll_until(Duration::from_secs(60), Duration::from_millis(200), || {
            next = ran_once(&runs(site, "never"))
                .iter()
                .filter_map(|id| firing_time("never", id))
                .filter(|t| *t > f)
                .min();
            next.is_some_and(|t| {
                names
                    .iter()
                    .all(|n| ran_once(&runs(site, n)).contains(&firing_id(n, t)))
            })
        }),
        "no firing after the restart ran on time for every schedule (never's: {next:?}); supervisor: {}",
        second.stderr.last(30)
    );
    let next = next.unwrap_or_default();
    assert_eq!(second.stop(), Some(0));
    for n in names {
        let ran = ran_once(&runs(site, n));
        let missed: Vec<String> = (1..)
            .map(|k| before[n] + k * 4_000)
            .take_while(|t| *t < next)
            .map(|t| firing_id(n, t))
            .collect();
        assert!(missed.len() >= missed_at_least, "{n}: {missed:?}");
        let caught: Vec<&String> = missed.iter().filter(|id| ran.contains(*id)).collect();
        let want: Vec<&String> = match n {
            // The newest missed firing at each process's look (or at a
            // look after a busy spell): never one before `f`, as no
            // process was up before `f`'s grace ended; the last one
            // always. That is [the last] when both instances looked in
            // time; a later look (a slow boot on a loaded machine) can add
            // others from `f` on.
            "late" => {
                let f_id = firing_id(n, f);
                assert_eq!(
                    caught.last(),
                    missed.last().as_ref(),
                    "{n}: the last missed"
                );
                assert!(
                    caught.iter().all(|id| **id >= f_id),
                    "{n}: caught {caught:?}, one before {f_id}"
                );
                caught.clone()
            }
            "every" => missed.iter().collect(),
            _ => vec![],
        };
        assert_eq!(
            caught, want,
            "{n}: missed {missed:?}, down over {f}, then {next} on time"
        );
        assert!(
            ran.contains(&firing_id(n, before[n])),
            "{n}: the last one before"
        );
    }
    // `status` shows each schedule's next firings and the last one run.
    let out = command()
        .args(["status", "--json"])
        .envs(site.env.iter().cloned())
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

#[test]
fn catch_up_after_the_whole_pool_was_down() {
    catch_up_after_the_whole_pool_was_down_over(&Site::embedded(), "2", 3);
}

/// [`catch_up_after_the_whole_pool_was_down`] on Apache Kafka, shorter:
/// down over two firings (enough to tell `latest` from `all`).
#[test]
fn apache_catch_up_after_the_whole_pool_was_down() {
    catch_up_after_the_whole_pool_was_down_over(&Site::apache(), "2", 2);
}
