use super::*;
use crate::record::{Attempt, Body, Incarnation, Outcome, Position, Record, Status};

/// A claims log under construction: each instance's records numbered.
#[derive(Default)]
struct Log {
    view: View,
    at: u64,
    seq: BTreeMap<u32, u64>,
    offset: i64,
}

impl Log {
    fn push(&mut self, i: u32, body: Body, ts: u64) {
        let seq = self.seq.entry(i).or_default();
        *seq += 1;
        let mut r = Record::new(
            InstanceNo::new(i),
            body,
            &Incarnation::new(format!("inc{i}")),
            ts,
        );
        r.seq = *seq;
        if let Some(o) = r.order() {
            r.next.insert(0.into(), o.offset + 1);
        }
        let pos = Position::new(self.at);
        self.at += 1;
        self.view.apply(pos, &r).expect("a valid record");
    }

    fn boot(&mut self, i: u32, ts: u64) {
        self.push(i, Body::Booted, ts);
    }

    /// Instance `i` claims the next order (its own commit, R34), announces
    /// `id` and completes it.
    fn run(&mut self, i: u32, id: &str, ts: u64) {
        let order = OrderId::new(0, self.offset);
        self.offset += 1;
        self.push(i, Body::claim(order), ts);
        self.push(
            i,
            Body::Lease {
                order_key: None,
                order,
                attempt: Attempt::FIRST,
                order_id: Some(id.to_string()),
            },
            ts,
        );
        self.push(
            i,
            Body::completed(order, Outcome::not_run(Status::Ok, "done")),
            ts,
        );
    }
}

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn at(s: &str) -> u64 {
    ms(t(s))
}

fn one(json: &str) -> Schedule {
    parse(json).unwrap().remove(0)
}

fn idle(me: u32, since: u64) -> Idle {
    Idle {
        me: InstanceNo::new(me),
        since,
        waiting: false,
        defer_ms: 1_000,
    }
}

fn ids(p: &Plan) -> Vec<&str> {
    p.produce.iter().map(|f| f.id.as_str()).collect()
}

/// Three instances idle since long before 12:00 (queue 1, 2, 3).
fn pool() -> Log {
    let mut log = Log::default();
    for i in 1..=3 {
        log.boot(i, i as u64);
    }
    log
}

const MINUTELY: &str = r#"[{"name":"m","cron":"* * * * *","order":{"cmd":["true"]}}]"#;

#[test]
fn the_file_parses_and_bad_entries_are_errors() {
    let s = parse(
        r#"[{"name":"nightly","cron":"0 3 * * *","zone":"Europe/Paris","catch_up":"all",
             "order":{"cmd":["backup","--full"],"timeout_secs":600}},
            {"name":"tick.1","cron":"*/5 * * * * *","catch_up":"none","grace_secs":5,
             "order_text":"echo 'hi there'"}]"#,
    )
    .unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].zone, s[0].catch_up),
        (chrono_tz::Europe::Paris, CatchUp::All)
    );
    assert_eq!((s[1].zone, s[1].grace_ms), (Tz::UTC, 5_000));
    let f = s[1].firing(t("2026-03-01T02:00:05Z"));
    assert_eq!(f.id, "schedule:tick.1:2026-03-01T02:00:05Z");
    let spec = crate::orders::parse(Some(f.order.as_bytes())).unwrap();
    assert_eq!(spec.id.as_deref(), Some(f.id.as_str()));
    assert!(
        spec.describe().ends_with("echo 'hi there'"),
        "{}",
        spec.describe()
    );
    for (bad, says) in [
        ("{}", "JSON array"),
        (
            r#"[{"name":"a","cron":"61 * * * *","order_text":"x"}]"#,
            "cron",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","zone":"Mars/Olympus","order_text":"x"}]"#,
            "time zone",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","order_text":"x"},{"name":"a","cron":"* * * * *","order_text":"y"}]"#,
            "twice",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","order":{"cmd":["x"],"id":"i"}}]"#,
            "has an id",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","order":{"cmd":["x"]},"order_text":"x"}]"#,
            "exactly one",
        ),
        (r#"[{"name":"a","cron":"* * * * *"}]"#, "exactly one"),
        (
            r#"[{"name":"a:b","cron":"* * * * *","order_text":"x"}]"#,
            "name",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","order_text":"x","when":1}]"#,
            "unknown field",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","catch_up":"some","order_text":"x"}]"#,
            "unknown variant",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","grace_secs":0,"order_text":"x"}]"#,
            "grace_secs",
        ),
        (
            r#"[{"name":"a","cron":"* * * * *","order":{"cmd":["x"],"timout_secs":1}}]"#,
            "not valid",
        ),
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn the_first_in_the_idle_queue_produces_at_once_the_others_a_turn_apart() {
    let log = pool();
    let mut s: Vec<Scheduler> = (0..3)
        .map(|_| Scheduler::new(parse(MINUTELY).unwrap()))
        .collect();
    let noon = at("2026-05-01T12:00:00Z");
    let since = noon - 30_000;
    let p1 = s[0].plan(&log.view, idle(1, since), noon);
    assert_eq!(ids(&p1), ["schedule:m:2026-05-01T12:00:00Z"]);
    assert_eq!(p1.wake_at, Some(noon + 60_000), "the next firing");
    // Instance 1 claims the order it produced and leaves the queue: the
    // second keeps its place for this firing.
    let mut busy = pool();
    busy.push(1, Body::claim(OrderId::new(0, 0)), 10);
    assert_eq!(
        busy.view.idle_queue(),
        [InstanceNo::new(2), InstanceNo::new(3)]
    );
    let p2 = s[1].plan(&log.view, idle(2, since), noon);
    assert_eq!((ids(&p2).len(), p2.wake_at), (0, Some(noon + 1_000)));
    let p2 = s[1].plan(&busy.view, idle(2, since), noon + 20);
    assert_eq!((ids(&p2).len(), p2.wake_at), (0, Some(noon + 1_000)));
    // One that looks only late (a slow wake-up) counts from then, a turn
    // more.
    let mut slow = Scheduler::new(parse(MINUTELY).unwrap());
    let p = slow.plan(&busy.view, idle(3, since), noon + 600);
    assert_eq!(p.wake_at, Some(noon + 600 + 2_000));
    let p3 = s[2].plan(&log.view, idle(3, since), noon + 10);
    assert_eq!((ids(&p3).len(), p3.wake_at), (0, Some(noon + 2_000)));
    // The first never produces its firing twice.
    assert!(s[0]
        .plan(&log.view, idle(1, since), noon + 500)
        .produce
        .is_empty());
    // A turn later, not announced: the second produces it, unless an order
    // waits (the firing may be it).
    let waiting = Idle {
        waiting: true,
        ..idle(2, since)
    };
    assert!(s[1]
        .plan(&log.view, waiting, noon + 1_000)
        .produce
        .is_empty());
    assert_eq!(
        ids(&s[1].plan(&log.view, idle(2, since), noon + 1_000)).len(),
        1
    );
    // CLAIM_DEFER_MS=0: still a turn of MIN_TURN_MS.
    let zero = Idle {
        defer_ms: 0,
        ..idle(3, since)
    };
    assert_eq!(
        s[2].plan(&log.view, zero, noon).wake_at,
        Some(noon + 2 * MIN_TURN_MS)
    );
}

#[test]
fn a_firing_the_log_announced_is_not_produced_again() {
    let mut log = pool();
    let noon = at("2026-05-01T12:00:00Z");
    log.run(1, "schedule:m:2026-05-01T12:00:00Z", noon);
    // Instance 1 is now last in the queue (2, 3, 1); nobody produces the
    // firing again, whoever plans and whenever.
    for i in 1..=3 {
        let mut s = Scheduler::new(parse(MINUTELY).unwrap());
        let p = s.plan(&log.view, idle(i, noon - 30_000), noon + 5_000);
        assert!(p.produce.is_empty(), "instance {i}");
    }
    let m = one(MINUTELY);
    assert_eq!(
        m.last_known(&log.view),
        Some((t("2026-05-01T12:00:00Z"), OrderId::new(0, 0)))
    );
    // Another schedule's ids are not this one's.
    let other = one(r#"[{"name":"m2","cron":"* * * * *","order_text":"x"}]"#);
    assert_eq!(other.last_known(&log.view), None);
}

#[test]
fn an_instance_idle_only_after_the_firing_waits_a_turn_more() {
    let log = pool();
    let mut s = Scheduler::new(parse(MINUTELY).unwrap());
    let noon = at("2026-05-01T12:00:00Z");
    // First in the queue, but idle only since 12:00:00.300 (a job ended):
    // someone may have produced the firing just before.
    let p = s.plan(&log.view, idle(1, noon + 300), noon + 300);
    assert_eq!((p.produce.len(), p.wake_at), (0, Some(noon + 1_300)));
    assert_eq!(
        ids(&s.plan(&log.view, idle(1, noon + 300), noon + 1_300)).len(),
        1
    );
    // Third in the queue: three turns.
    let mut s3 = Scheduler::new(parse(MINUTELY).unwrap());
    let p = s3.plan(&log.view, idle(3, noon + 300), noon + 300);
    assert_eq!(p.wake_at, Some(noon + 3_300));
}

#[test]
fn a_failed_produce_is_tried_again() {
    let log = pool();
    let mut s = Scheduler::new(parse(MINUTELY).unwrap());
    let noon = at("2026-05-01T12:00:00Z");
    let p = s.plan(&log.view, idle(1, 0), noon);
    s.failed(&p.produce[0]);
    assert_eq!(ids(&s.plan(&log.view, idle(1, 0), noon + 200)), ids(&p));
}

fn hourly(policy: &str) -> Scheduler {
    Scheduler::new(
        parse(&format!(
            r#"[{{"name":"h","cron":"0 * * * *","catch_up":"{policy}","order_text":"x"}}]"#
        ))
        .unwrap(),
    )
}

/// The plan of the first in the queue, looking at `now` for the first
/// time and again a turn later.
fn a_turn_later(mut s: Scheduler, view: &View, idle: Idle, now: u64) -> Plan {
    let first = s.plan(view, idle, now);
    assert!(first.produce.is_empty(), "{first:?}");
    assert_eq!(first.wake_at, Some(now + 1_000));
    s.plan(view, idle, now + 1_000)
}

#[test]
fn catch_up_policies() {
    // The pool ran 10:00 and was down until 15:30.
    let mut log = pool();
    log.run(
        1,
        "schedule:h:2026-05-01T10:00:00Z",
        at("2026-05-01T10:00:00Z"),
    );
    let now = at("2026-05-01T15:30:00Z");
    // Everyone became idle after the missed firings: a turn first.
    let since = now;
    let none = hourly("none").plan(&log.view, idle(2, since), now);
    assert_eq!(
        none.wake_at,
        Some(at("2026-05-01T16:00:00Z")),
        "nothing to do"
    );
    assert_eq!(
        ids(&a_turn_later(
            hourly("latest"),
            &log.view,
            idle(2, since),
            now
        )),
        ["schedule:h:2026-05-01T15:00:00Z"]
    );
    let all = a_turn_later(hourly("all"), &log.view, idle(2, since), now);
    assert_eq!(
        ids(&all),
        ["11", "12", "13", "14", "15"].map(|h| format!("schedule:h:2026-05-01T{h}:00:00Z"))
    );
    // Not before its turn: the first in the queue, idle since the boot,
    // waits one turn; the second two.
    let p = hourly("all").plan(&log.view, idle(2, since), now);
    assert_eq!((p.produce.len(), p.wake_at), (0, Some(now + 1_000)));
    let p = hourly("all").plan(&log.view, idle(3, since), now);
    assert_eq!((p.produce.len(), p.wake_at), (0, Some(now + 2_000)));
    // A firing within the grace is on time, whatever the policy.
    // (Seen first 30 s late: a turn from then.)
    let mut s = hourly("none");
    let since = idle(2, at("2026-05-01T14:00:00Z"));
    let p = s.plan(&log.view, since, at("2026-05-01T15:00:30Z"));
    assert_eq!(p.wake_at, Some(at("2026-05-01T15:00:31Z")));
    let p = s.plan(&log.view, since, at("2026-05-01T15:00:31Z"));
    assert_eq!(ids(&p), ["schedule:h:2026-05-01T15:00:00Z"]);
    let since = now;
    // Once the catch-up firings are known (here: produced by this
    // process), the policy does not choose again.
    let mut s = hourly("latest");
    s.plan(&log.view, idle(2, since), now);
    assert_eq!(
        s.plan(&log.view, idle(2, since), now + 1_000).produce.len(),
        1
    );
    assert!(s
        .plan(&log.view, idle(2, since), now + 2_000)
        .produce
        .is_empty());
}

#[test]
fn catch_up_all_is_bounded() {
    let mut log = pool();
    log.run(1, "schedule:m:2026-05-01T00:00:00Z", 0);
    let mut s = Scheduler::new(
        parse(r#"[{"name":"m","cron":"* * * * *","catch_up":"all","order_text":"x"}]"#).unwrap(),
    );
    let now = at("2026-05-02T00:00:00Z") + 30_000;
    // Seen first now: a turn from now.
    assert!(s.plan(&log.view, idle(1, 0), now).produce.is_empty());
    let p = s.plan(&log.view, idle(1, 0), now + 1_000);
    // The newest 100 missed, and 00:00, on time (within the grace).
    assert_eq!(p.produce.len(), CATCH_UP_MAX + 1);
    assert_eq!(p.produce[0].at, t("2026-05-01T22:20:00Z"));
    assert_eq!(p.produce[CATCH_UP_MAX].at, t("2026-05-02T00:00:00Z"));
}

#[test]
fn a_schedule_never_fired_starts_with_its_firings_on_time() {
    let log = pool();
    let mut s = hourly("all");
    let p = s.plan(&log.view, idle(1, 0), at("2026-05-01T15:30:00Z"));
    assert!(p.produce.is_empty());
    assert_eq!(p.wake_at, Some(at("2026-05-01T16:00:00Z")));
    let p = s.plan(&log.view, idle(1, 0), at("2026-05-01T16:00:00Z"));
    assert_eq!(ids(&p), ["schedule:h:2026-05-01T16:00:00Z"]);
}

#[test]
fn seconds_and_a_time_within_a_second() {
    let log = pool();
    let mut s = Scheduler::new(
        parse(r#"[{"name":"s","cron":"* * * * * *","grace_secs":5,"order_text":"x"}]"#).unwrap(),
    );
    let noon = at("2026-05-01T12:00:00Z");
    // No firing known: the newest within the grace only.
    let p = s.plan(&log.view, idle(1, noon - 10_000), noon + 2_500);
    assert_eq!(ids(&p), ["schedule:s:2026-05-01T12:00:02Z"]);
    let mut log = pool();
    log.run(3, "schedule:s:2026-05-01T11:59:50Z", 10);
    let mut s = Scheduler::new(
        parse(r#"[{"name":"s","cron":"* * * * * *","grace_secs":5,"order_text":"x"}]"#).unwrap(),
    );
    // Those seen more than half a turn late wait a turn from now.
    let p = s.plan(&log.view, idle(1, noon - 10_000), noon + 2_500);
    assert_eq!(ids(&p), ["schedule:s:2026-05-01T12:00:02Z"]);
    let p = s.plan(&log.view, idle(1, noon - 10_000), noon + 3_500);
    assert_eq!(
        ids(&p),
        ["11:59:58", "11:59:59", "12:00:00", "12:00:01", "12:00:03"]
            .map(|x| format!("schedule:s:2026-05-01T{x}Z")),
        "within the grace, to now (the firing at the whole second included), and the newest missed (catch_up: latest): 11:59:58 by now"
    );
    assert_eq!(p.wake_at, Some(noon + 4_000));
}

#[test]
fn zones_and_daylight_saving_time() {
    let paris = one(r#"[{"name":"n","cron":"0 3 * * *","zone":"Europe/Paris","order_text":"x"}]"#);
    assert_eq!(
        paris.next_after(at("2026-01-10T00:00:00Z"), 2),
        [t("2026-01-10T02:00:00Z"), t("2026-01-11T02:00:00Z")]
    );
    assert_eq!(
        paris.next_after(at("2026-07-10T00:00:00Z"), 1),
        [t("2026-07-10T01:00:00Z")]
    );
    // 02:30 does not exist on 29 March 2026 in Paris and happens twice on
    // 25 October: one firing each day all the same.
    let half = one(r#"[{"name":"h","cron":"30 2 * * *","zone":"Europe/Paris","order_text":"x"}]"#);
    for (from, n) in [("2026-03-28T00:00:00Z", 3), ("2026-10-24T00:00:00Z", 3)] {
        let f = half.next_after(at(from), n);
        let days: BTreeSet<_> = f
            .iter()
            .map(|t| t.with_timezone(&half.zone).date_naive())
            .collect();
        assert_eq!(days.len(), n, "{from}: {f:?}");
    }
    assert_eq!(
        half.next_after(at("2026-03-29T00:00:00Z"), 1),
        [t("2026-03-29T01:00:00Z")],
        "the first instant after the gap (03:00 CEST)"
    );
}
