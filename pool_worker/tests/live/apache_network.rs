//! Network and host faults on Apache Kafka (issue 33 item 5): exactly once
//! on a real network, judged by the claims topic and by heartbeats.
//!
//! Every test runs in a network namespace of its own, loopback only
//! ([`in_netns`]: the test binary re-executed under `unshare -n` for just
//! that test), with its own single-node Apache Kafka there. An instance to
//! be cut off runs under a supervisor of its own as a dedicated user
//! (`pwcut1`), and an iptables rule in that namespace drops the user's
//! packets (`-m owner --uid-owner`, to 127.0.0.0/8 only); healing deletes
//! the rule. Jobs write a heartbeat every 0.2 s (order, instance,
//! ORDER_ATTEMPT, time), so two runs of one order alive at once show
//! ([`Heartbeats::overlaps`]); a gap in one run's beats is a freeze.
//!
//! Scenarios (LEASE_MS = 4 s, the workers' defaults otherwise):
//! 1. the holder of a long order cut off for 2×LEASE_MS, then healed;
//! 2. every instance cut off for 1.5×LEASE_MS, then healed;
//! 3. an instance cut off while idle, then one cut off between its claim
//!    and its decision: a takeover claim, which (unlike a first claim that
//!    met no rival, its own commit since R34) is followed by an explicit
//!    decision (its packets carrying `1:committed` dropped from the start,
//!    all its packets once its `claimed` is read);
//! 4. the holder's worker process SIGSTOPped (its job untouched) for
//!    2×LEASE_MS, then SIGCONT;
//! 5. one instance's clock 2×LEASE_MS ahead, one's 2×LEASE_MS behind
//!    (`POOL_TEST_CLOCK_OFFSET_MS`): no `revoked` record at all.
//!
//! Each asserts: no two runs of one order alive at once, every order
//! completed exactly once (the claims topic, with the product's own audit),
//! every order's job finished its loop once. Figures (overlaps, frozen /
//! resumed / killed runs, cut → takeover) go to `record_figures`.

use crate::common::apache::{Apache, ApacheOpts};
use crate::common::netfault::*;
use crate::common::*;
use pool_worker::record::{Event, OrderId, Record};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The pool's LEASE_MS in these tests.
const LEASE_MS: u64 = 4000;

/// How long an instance may take to boot (connect, replay, fence).
const BOOT: Duration = Duration::from_secs(60);

/// How long all of a scenario's orders may take to complete.
const LONG: Duration = Duration::from_secs(150);

fn lease() -> Duration {
    Duration::from_millis(LEASE_MS)
}

/// Defines a test that runs `$body` in a network namespace of its own.
macro_rules! scenario {
    ($(#[$m:meta])* $name:ident, $body:expr) => {
        $(#[$m])*
        #[test]
        fn $name() {
            in_netns(concat!("apache_network::", stringify!($name)), $body);
        }
    };
}

/// One scenario's world: Apache Kafka in the namespace, fresh topics, a
/// directory every user may reach, the heartbeat directory.
struct Net {
    kafka: Apache,
    orders: String,
    claims: String,
    dir: tempfile::TempDir,
    hb: PathBuf,
    supervisors: std::cell::Cell<u32>,
}

impl Net {
    fn start() -> Net {
        use std::os::unix::fs::PermissionsExt;
        let kafka = Apache::start(&ApacheOpts::default());
        let (orders, claims) = kafka.topics(1);
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let hb = heartbeat_dir(dir.path());
        eprintln!(
            "Apache Kafka in the namespace at {} (ready in {} ms)",
            kafka.bootstrap, kafka.start_ms
        );
        Net {
            kafka,
            orders,
            claims,
            dir,
            hb,
            supervisors: std::cell::Cell::new(0),
        }
    }

    /// A supervisor of `instances` (`--instances`: "1-3" is 1 to 3, "3-3"
    /// instance 3 alone, "3" instances 1 to 3) with the workers' defaults, LEASE_MS,
    /// a STATE_DIR of its own, `extra` variables, running as `user` (or
    /// the test's user).
    fn pool(
        &self,
        instances: &str,
        user: Option<CutUser>,
        extra: &[(&str, &str)],
    ) -> SupervisorProc {
        let n = self.supervisors.get() + 1;
        self.supervisors.set(n);
        let state = self.dir.path().join(format!("state-{n}"));
        std::fs::create_dir(&state).unwrap();
        if let Some(u) = user {
            std::os::unix::fs::chown(&state, Some(u.uid), Some(u.gid)).unwrap();
        }
        let mut env = self.kafka.env(&self.orders, &self.claims, &state);
        env.push(("LEASE_MS".into(), LEASE_MS.to_string()));
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        SupervisorProc::start_with(SupervisorOpts {
            instances: instances.into(),
            env,
            restart_delay_ms: Some(20),
            max_restart_delay_ms: Some(200),
            user: user.map(|u| (u.uid, u.gid)),
            ..SupervisorOpts::default()
        })
    }

    /// Sends orders to partition 0; their (partition, offset).
    fn send(&self, payloads: &[String]) -> Vec<(i32, i64)> {
        produce_orders(&self.kafka.bootstrap, &self.orders, payloads, Some(0))
    }

    fn records(&self) -> Vec<(i64, Record)> {
        decoded_claims(&self.kafka.bootstrap, &self.claims)
    }

    /// Reads the claims topic from its beginning until a record after
    /// position `after` matches `pred` (→ its position and when it was read,
    /// ms since the epoch), or `timeout` passes (→ None).
    fn find_after(
        &self,
        after: i64,
        timeout: Duration,
        pred: impl Fn(&Record) -> bool,
    ) -> Option<(i64, u64)> {
        let deadline = Instant::now() + timeout;
        let mut reader = TopicReader::new(&self.kafka.bootstrap, &self.claims, 0).ok()?;
        let mut at = 0;
        loop {
            for (pos, k, v) in &reader.records[at..] {
                if let Ok(r) = Record::decode(k.as_deref(), v.as_deref()) {
                    if *pos > after && pred(&r) {
                        return Some((*pos, now_ms()));
                    }
                }
            }
            at = reader.records.len();
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            reader.poll((deadline - now).min(Duration::from_millis(100)));
        }
    }

    /// [`Net::find_after`] from the beginning.
    fn find(&self, timeout: Duration, pred: impl Fn(&Record) -> bool) -> Option<(i64, u64)> {
        self.find_after(-1, timeout, pred)
    }

    /// [`Net::find_after`], panicking with the topic's records on timeout.
    fn expect_after(
        &self,
        what: &str,
        after: i64,
        timeout: Duration,
        pred: impl Fn(&Record) -> bool,
    ) -> (i64, u64) {
        self.find_after(after, timeout, pred).unwrap_or_else(|| {
            panic!(
                "no {what} in the claims topic within {timeout:?}:\n{}",
                show_all(&self.records())
            )
        })
    }

    fn expect(&self, what: &str, timeout: Duration, pred: impl Fn(&Record) -> bool) -> (i64, u64) {
        self.expect_after(what, -1, timeout, pred)
    }

    /// `pool_worker audit` on the claims topic: (exit code, stdout).
    fn audit_tool(&self) -> (Option<i32>, String) {
        let out = command()
            .arg("audit")
            .env("KAFKA_BROKERS", &self.kafka.bootstrap)
            .env("COORDINATION_TOPIC", &self.claims)
            .env("ORDERS_TOPIC", &self.orders)
            .output()
            .expect("run pool_worker audit");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    /// Waits for every order, then the shared checks: exactly once in the
    /// claims topic (with the product's audit), `pool_worker audit` clean,
    /// each order's job finished its loop once. Returns the audit and the
    /// heartbeats (the scenario records its figures, then asserts that no
    /// two runs of one order were alive at once).
    fn judge(&self, orders: &[(i32, i64)]) -> (Audit, Heartbeats) {
        let audit = wait_and_audit(&self.kafka.bootstrap, &self.claims, orders, LONG);
        let beats = Heartbeats::read(&self.hb);
        eprintln!("heartbeats:\n{}", beats.show());
        audit.check_exactly_once(orders).unwrap();
        let (code, out) = self.audit_tool();
        assert_eq!(code, Some(0), "pool_worker audit: {out}");
        let ended = beats.ended_per_order();
        for &(p, o) in orders {
            let n = ended.get(&format!("{p}:{o}")).copied().unwrap_or(0);
            assert_eq!(
                n,
                1,
                "order {p}:{o}'s job finished {n} times\n{}",
                beats.show()
            );
        }
        (audit, beats)
    }
}

fn name(o: (i32, i64)) -> String {
    format!("{}:{}", o.0, o.1)
}

fn is(r: &Record, event: Event, instance: u32, order: Option<(i32, i64)>) -> bool {
    r.event() == event
        && r.instance.get() == instance
        && order.is_none_or(|(p, o)| r.order() == Some(OrderId::new(p, o)))
}

/// Sleeps until `at_ms` (ms since the epoch): how long a fault lasts, not a
/// wait for anything.
fn hold_until(at_ms: u64) {
    let now = now_ms();
    if at_ms > now {
        std::thread::sleep(Duration::from_millis(at_ms - now));
    }
}

/// The first beat of `order` by `instance` at or after `from_ms`.
fn first_beat_after(dir: &Path, order: &str, instance: u32, from_ms: u64) -> Option<u64> {
    Heartbeats::read(dir)
        .of(order)
        .iter()
        .filter(|r| r.instance == instance)
        .flat_map(|r| r.beats.iter().copied())
        .filter(|&t| t >= from_ms)
        .min()
}

/// The records a dead incarnation `inc` of `instance` leaves holding
/// `order`: its `booted` and its claim, which met no rival (its commit,
/// R34), as after a crash while running.
fn dead_holder(instance: u32, inc: &str, order: OrderId) -> [Record; 2] {
    let mut booted = Record::of(instance, Event::Booted, inc, now_ms());
    booted.seq = 1;
    let mut claim = Record::of(instance, Event::Claimed, inc, now_ms()).with_order(order);
    claim.seq = 2;
    claim.set_attempt(1);
    claim.next.insert(order.lane(), order.offset + 1);
    [booted, claim]
}

/// The revocations in the claims topic.
fn revocations(recs: &[(i64, Record)]) -> usize {
    recs.iter()
        .filter(|(_, r)| r.event() == Event::Revoked)
        .count()
}

fn report(line: &str) {
    eprintln!("{line}");
    record_figures(line);
}

scenario!(
    /// 1. The holder of a long order cut off for 2×LEASE_MS, then healed:
    /// another instance revokes and runs attempt 2, the cut-off run is
    /// frozen before that and killed after; the order completes once; the
    /// cut-off process exits on reading its revocation, is restarted and
    /// completes a later order.
    cut_holder_for_two_leases,
    || {
        let net = Net::start();
        let who = cut_user("pwcut1");
        let sup1 = net.pool("1", Some(who), &[]);
        let long = net.send(&[heartbeat_order(&net.hb, 100)])[0];
        let lo = name(long);
        // Instance 1 alone: it holds the order.
        wait_beats(&net.hb, &lo, 1, 3, BOOT);
        let sup2 = net.pool("2-2", None, &[]);
        net.expect("booted of instance 2", BOOT, |r| {
            is(r, Event::Booted, 2, None)
        });

        let mut cut = Cut::user(who.uid);
        eprintln!("cut instance 1 (uid {}) off", who.uid);
        let revoked = net.find(2 * lease(), |r| is(r, Event::Revoked, 1, Some(long)));
        hold_until(cut.at_ms + 2 * LEASE_MS);
        let healed = cut.heal();
        eprintln!("healed after {} ms", healed - cut.at_ms);
        let (revoked_pos, revoked_ms) = revoked.unwrap_or_else(|| {
            panic!(
                "instance 1's hold was not revoked while it was cut off:\n{}",
                show_all(&net.records())
            )
        });
        wait_beats(&net.hb, &lo, 2, 1, BOOT);
        let takeover = first_beat_after(&net.hb, &lo, 2, cut.at_ms).unwrap();

        // Instance 1 reads its revocation, exits and is restarted: its next
        // process boots after the revocation.
        let (_, back_ms) = net.expect_after(
            "booted of instance 1 after its revocation",
            revoked_pos,
            BOOT,
            |r| is(r, Event::Booted, 1, None),
        );
        sup1.expect(
            "instance 1 exited and was restarted",
            |s| s.starts(1) >= 2 && !s.exits_of(1).is_empty(),
            BOOT,
        );
        // A later order (two: instance 2 may be idle again): instance 1
        // completes at least one.
        let later = net.send(&vec![heartbeat_order(&net.hb, 10); 2]);
        let mut all = vec![long];
        all.extend(&later);
        let (audit, beats) = net.judge(&all);
        let by1 = later
            .iter()
            .filter(|&&(p, o)| {
                audit.orders[&OrderId::new(p, o)]
                    .completions
                    .iter()
                    .any(|(_, c)| c.instance.get() == 1)
            })
            .count();
        assert!(
            by1 >= 1,
            "instance 1 completed none of the later orders after it came back:\n{}",
            audit.show(later[0])
        );
        let runs = beats.of(&lo);
        let (frozen, resumed, killed) = beats.fates(healed);
        let first_run = runs.iter().find(|r| r.instance == 1).unwrap();
        report(&format!(
            "apache_network cut_holder_for_two_leases: LEASE_MS {LEASE_MS}, cut {} ms: \
             overlaps {}; runs of the long order {}; frozen {frozen}, resumed {resumed}, killed {killed}; \
             instance 1's last beat {} ms after the cut; revoked {} ms after the cut; \
             attempt 2's first beat {} ms after the cut; closest handover {} ms; \
             instance 1 back (booted) {} ms after the heal, restarted {} times; \
             later orders by instance 1: {by1} of 2; audit clean",
            healed - cut.at_ms,
            beats.overlaps().len(),
            runs.len(),
            first_run.last() as i64 - cut.at_ms as i64,
            revoked_ms - cut.at_ms,
            takeover - cut.at_ms,
            beats.closest_handover_ms().unwrap_or(0),
            back_ms.saturating_sub(healed),
            sup1.snapshot().starts(1) - 1,
        ));
        beats.assert_no_overlap();
        drop(sup2);
        drop(sup1);
    }
);

scenario!(
    /// 2. Every instance cut off for 1.5×LEASE_MS while each runs an order
    /// and more orders wait, then healed: nothing lost or completed twice,
    /// no overlap; how many runs were frozen, resumed, killed.
    cut_every_instance_longer_than_a_lease,
    || {
        let net = Net::start();
        let who = cut_user("pwcut1");
        let sup = net.pool("1-3", Some(who), &[]);
        let mut orders = net.send(&vec![heartbeat_order(&net.hb, 50); 3]);
        // All three run.
        let ok = poll_until(BOOT, Duration::from_millis(50), || {
            let b = Heartbeats::read(&net.hb);
            orders
                .iter()
                .all(|&o| b.of(&name(o)).iter().any(|r| r.beats.len() >= 3))
        });
        assert!(ok, "not all three orders ran:\n{}", Heartbeats::read(&net.hb).show());
        let mut cut = Cut::user(who.uid);
        // Three more wait while every instance is cut off.
        orders.extend(net.send(&vec![heartbeat_order(&net.hb, 10); 3]));
        hold_until(cut.at_ms + LEASE_MS * 3 / 2);
        let healed = cut.heal();
        let (_, beats) = net.judge(&orders);
        let recs = net.records();
        let (frozen, resumed, killed) = beats.fates(healed);
        let s = sup.snapshot();
        report(&format!(
            "apache_network cut_every_instance_longer_than_a_lease: LEASE_MS {LEASE_MS}, 3 instances cut {} ms, \
             6 orders: overlaps {}; runs {}; frozen {frozen}, resumed {resumed}, killed {killed}; \
             revocations {}; process exits {}; 0 lost, 0 twice",
            healed - cut.at_ms,
            beats.overlaps().len(),
            beats.runs.len(),
            revocations(&recs),
            s.exits.len(),
        ));
        beats.assert_no_overlap();
    }
);

scenario!(
    /// 3. An instance cut off while idle (another does the orders sent
    /// meanwhile), then, healed, the same instance cut off between its
    /// claim and its decision. Since R34 a first claim that met no rival is
    /// its own commit, with no decision record to cut (the claimant runs
    /// the order once it reads the claim back); a takeover claim is never
    /// its own decision. So here the order is held by a dead incarnation
    /// of instance 3 (its booted and claim written by the test, as a crash
    /// leaves them): instance 1, idle, revokes that hold once its lease
    /// expired and appends a takeover claim, then its `committed`. Its
    /// packets carrying `1:committed` are dropped from before it starts,
    /// and all its packets once its takeover claim is read. Instance 2
    /// revokes instance 1's claim and runs the order; instance 1 never
    /// decided and never ran it.
    cut_idle_then_between_claim_and_decision,
    || {
        let net = Net::start();
        let who = cut_user("pwcut1");
        let sup1 = net.pool("1", Some(who), &[]);
        let sup2 = net.pool("2-2", None, &[]);
        net.expect("booted of instance 1", BOOT, |r| is(r, Event::Booted, 1, None));
        net.expect("booted of instance 2", BOOT, |r| is(r, Event::Booted, 2, None));

        // (a) Idle and cut off: instance 2 does what comes meanwhile.
        let mut cut = Cut::user(who.uid);
        let mut orders = net.send(&vec![heartbeat_order(&net.hb, 5); 2]);
        wait_completed(&net.kafka.bootstrap, &net.claims, &orders, LONG).unwrap();
        hold_until(cut.at_ms + 2 * LEASE_MS);
        let idle_cut = cut.heal() - cut.at_ms;
        let idle_restarts = sup1.snapshot().starts(1) - 1;

        // (b) Instance 1 alone, cut off between its takeover claim and its
        // decision. No instance runs while the order is sent and a dead
        // incarnation of instance 3 is written holding it (its claim met no
        // rival: its commit, R34). A rule drops instance 1's packets that
        // carry the key of its decision (`1:committed`) before it starts
        // again; it revokes 3's expired hold, claims the order as its
        // taker, and once that claim is read, the whole cut. Its claim goes
        // out, its decision never does.
        drop(sup2);
        drop(sup1);
        let b = net.send(&[heartbeat_order(&net.hb, 60)])[0];
        orders.push(b);
        let id = OrderId::new(b.0, b.1);
        for r in dead_holder(3, "dead-3", id) {
            produce_record(&net.kafka.bootstrap, &net.claims, &r);
        }
        let mut decision = Cut::carrying(who.uid, "1:committed");
        let sup1 = net.pool("1", Some(who), &[]);
        let (claim_pos, claim_ms) = net.expect(
            "instance 1's takeover claim",
            BOOT + 2 * lease(),
            |r| is(r, Event::Claimed, 1, Some(b)) && !r.takeover_of().is_empty(),
        );
        let mut cut = Cut::user(who.uid);
        decision.heal();
        let cut_after_claim = cut.at_ms.saturating_sub(claim_ms);
        let _sup2 = net.pool("2-2", None, &[]);
        let revoked = net.find(2 * lease() + BOOT, |r| is(r, Event::Revoked, 1, Some(b)));
        hold_until(cut.at_ms + 2 * LEASE_MS);
        let healed = cut.heal();
        assert!(revoked.is_some(), "instance 1's hold on {} was not revoked", name(b));
        let (audit, beats) = net.judge(&orders);
        let recs = net.records();
        let revoked_pos = revoked.map_or(i64::MAX, |(p, _)| p);
        // Instance 1's claim took over the dead holder's, revoked by 1.
        assert!(
            recs.iter().any(|(p, r)| *p < claim_pos
                && is(r, Event::Revoked, 3, Some(b))
                && r.by().map(|w| w.get()) == Some(1)),
            "no revocation of instance 3's hold by instance 1 before its claim:\n{}",
            audit.show(b)
        );
        // Its decision before its revocation (one after it, sent when
        // healed, is void).
        let committed_first = recs.iter().any(|(p, r)| {
            *p > claim_pos && *p < revoked_pos && is(r, Event::Committed, 1, Some(b))
        });
        let committed_late = recs
            .iter()
            .any(|(p, r)| *p > revoked_pos && is(r, Event::Committed, 1, Some(b)));
        let ran_by_1 = beats.of(&name(b)).iter().any(|r| r.instance == 1);
        assert!(
            !committed_first && !ran_by_1,
            "instance 1 decided (committed: {committed_first}) or ran {} (job: {ran_by_1}) though its decision was cut off:\n{}",
            name(b),
            audit.show(b)
        );
        let (frozen, resumed, killed) = beats.fates(healed);
        let completer = audit.orders[&OrderId::new(b.0, b.1)].completions[0].1.instance;
        report(&format!(
            "apache_network cut_idle_then_between_claim_and_decision: LEASE_MS {LEASE_MS}: \
             idle cut {idle_cut} ms, instance 1 restarted {idle_restarts} times meanwhile; \
             instance 1 cut {cut_after_claim} ms after its takeover claim was read, for {} ms, \
             its committed before its revocation: {committed_first} (after it, void: {committed_late}), \
             its job started: {ran_by_1}; \
             order completed by instance {completer}; overlaps {}; frozen {frozen}, resumed {resumed}, killed {killed}; \
             revocations {}",
            healed - cut.at_ms,
            beats.overlaps().len(),
            revocations(&recs),
        ));
        beats.assert_no_overlap();
        drop(sup1);
    }
);

scenario!(
    /// 4. The holder's worker process stopped (SIGSTOP; its job, in a
    /// process group of its own, untouched) for 2×LEASE_MS, then SIGCONT:
    /// no two runs alive at once.
    sigstop_worker_for_two_leases,
    || {
        let net = Net::start();
        let sup1 = net.pool("1", None, &[]);
        let long = net.send(&[heartbeat_order(&net.hb, 100)])[0];
        let lo = name(long);
        wait_beats(&net.hb, &lo, 1, 3, BOOT);
        let sup2 = net.pool("2-2", None, &[]);
        net.expect("booted of instance 2", BOOT, |r| is(r, Event::Booted, 2, None));
        let stopped = now_ms();
        let pid = sup1
            .kill_instance(1, libc::SIGSTOP)
            .expect("instance 1's process runs");
        let revoked = net.find(2 * lease(), |r| is(r, Event::Revoked, 1, Some(long)));
        hold_until(stopped + 2 * LEASE_MS);
        // SAFETY: kill(2) on the process this test stopped.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        let resumed_at = now_ms();
        let (_, revoked_ms) = revoked.expect("instance 1's hold revoked while it was stopped");
        let (_, beats) = net.judge(&[long]);
        let takeover = first_beat_after(&net.hb, &lo, 2, stopped).unwrap();
        let (frozen, resumed, killed) = beats.fates(resumed_at);
        let first_run = beats.of(&lo).into_iter().find(|r| r.instance == 1).unwrap().clone();
        report(&format!(
            "apache_network sigstop_worker_for_two_leases: LEASE_MS {LEASE_MS}, stopped {} ms: \
             overlaps {}; frozen {frozen}, resumed {resumed}, killed {killed}; \
             the job's last beat {} ms after the stop; revoked {} ms after; \
             attempt 2's first beat {} ms after; closest handover {} ms",
            resumed_at - stopped,
            beats.overlaps().len(),
            first_run.last() as i64 - stopped as i64,
            revoked_ms - stopped,
            takeover - stopped,
            beats.closest_handover_ms().unwrap_or(0),
        ));
        beats.assert_no_overlap();
        drop(sup2);
        drop(sup1);
    }
);

scenario!(
    /// 5. Clocks: instance 1's clock 2×LEASE_MS ahead, instance 2's
    /// 2×LEASE_MS behind, instance 3's right (`POOL_TEST_CLOCK_OFFSET_MS`,
    /// the `testing` feature): over six orders of 1.5×LEASE_MS each, no
    /// `revoked` record at all, each order once, no overlap. The offsets
    /// are checked to be in effect (each instance's records' `ts` against
    /// the time the test read them).
    clocks_off_by_two_leases,
    || {
        let net = Net::start();
        let ahead = (2 * LEASE_MS).to_string();
        let behind = format!("-{}", 2 * LEASE_MS);
        // A tail of the claims topic from before the instances start: each
        // instance's lead is the most its records' ts are ahead of the time
        // the tail read them (the read comes within ms on loopback).
        let mut tail = TopicReader::new(&net.kafka.bootstrap, &net.claims, 0).unwrap();
        tail.catch_up(KAFKA_TIMEOUT).unwrap();
        let sups = [
            net.pool("1", None, &[("POOL_TEST_CLOCK_OFFSET_MS", &ahead)]),
            net.pool("2-2", None, &[("POOL_TEST_CLOCK_OFFSET_MS", &behind)]),
            net.pool("3-3", None, &[]),
        ];
        let mut lead = [i64::MIN; 3];
        let deadline = Instant::now() + BOOT;
        let mut at = 0;
        while lead.contains(&i64::MIN) && Instant::now() < deadline {
            tail.poll(Duration::from_millis(100));
            let read = now_ms() as i64;
            for (_, k, v) in &tail.records[at..] {
                if let Ok(r) = Record::decode(k.as_deref(), v.as_deref()) {
                    if let Some(l) = lead.get_mut((r.instance.get() as usize).wrapping_sub(1)) {
                        *l = (*l).max(r.ts as i64 - read);
                    }
                }
            }
            at = tail.records.len();
        }
        assert!(
            !lead.contains(&i64::MIN),
            "not every instance wrote a record within {BOOT:?}:\n{}",
            show_all(&net.records())
        );
        eprintln!("leads of the instances' clocks (record ts - read time, ms): {lead:?}");
        let orders = net.send(&vec![heartbeat_order(&net.hb, 30); 6]);
        let (audit, beats) = net.judge(&orders);
        let recs = net.records();
        let revoked = revocations(&recs);
        let mut by = [0usize; 3];
        for t in audit.orders.values() {
            if let Some((_, c)) = t.completions.first() {
                by[(c.instance.get() as usize).saturating_sub(1).min(2)] += 1;
            }
        }
        report(&format!(
            "apache_network clocks_off_by_two_leases: LEASE_MS {LEASE_MS}, offsets +{ahead}/{behind}/0 ms \
             (measured leads {lead:?} ms): 6 orders of 30 beats, completed by instances 1/2/3: {by:?}; \
             revocations {revoked}; overlaps {}",
            beats.overlaps().len(),
        ));
        beats.assert_no_overlap();
        assert_eq!(revoked, 0, "revocations with skewed clocks:\n{}", show_all(&recs));
        // The offsets took effect (a boot's booted is read within a few
        // hundred ms of its writing on loopback; the guard branch's clock).
        let off = [2 * LEASE_MS as i64, -2 * (LEASE_MS as i64), 0];
        for i in 0..3 {
            assert!(
                lead[i] > off[i] - 3000 && lead[i] < off[i] + 1000,
                "instance {}'s records are stamped {} ms off the test's clock, not about {} ms: is POOL_TEST_CLOCK_OFFSET_MS in effect?",
                i + 1,
                lead[i],
                off[i]
            );
        }
        drop(sups);
    }
);
