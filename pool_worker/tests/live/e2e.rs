//! End-to-end tests: the real binary (broker, supervisor, workers as separate
//! processes), judged by the claims topic (the audit trail) and by ledger
//! files the jobs write.
//!
//! Every wait has a deadline. The invariants checked everywhere: each order
//! has exactly one `completed`, exactly one instance whose first decision
//! after its claim was `committed`, that same instance completes it, and its
//! job's side effect (a ledger line) happens once per run.

use crate::common::*;
use pool_worker::record::{Event, OrderId, Record, Status};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Budget for a whole pool run in these tests.
const LONG: Duration = Duration::from_secs(240);
const T: Duration = Duration::from_secs(60);

/// Ledger lines counted.
fn counts(lines: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in lines {
        *m.entry(l.clone()).or_default() += 1;
    }
    m
}

/// Every order's first completion comes after its effective commits, is by
/// the instance holding the newest of them, and its job succeeded.
///
/// The first effective commit need not be the completer's: a hold whose
/// lease lapsed (its process stalled, or dead and not yet resumed, for
/// `LEASE_MS` on a reader's clock: R36) may be validly revoked by an idle
/// instance, which then claims the order itself and commits it as a retry
/// (docs/protocol.md R37-R40). So between any two consecutive effective
/// commits there must be a valid revocation (R37, R38) of the earlier
/// committer's hold, after its commit and before the later committer's
/// claim (I1: a second commit only after the first hold was revoked); no
/// effective commit may follow the completion (R32.1); and the completer's
/// own hold must not have been revoked between its commit and the
/// completion (R38: it would be void). How many times the jobs ran, at
/// most once per commit, is [`assert_ledger_runs`]' business. (Parked
/// orders, R54, which change hands without a revocation, are not among the
/// orders the callers send.)
pub(crate) fn assert_completed_ok_by_committer(audit: &Audit) {
    for (id, t) in &audit.orders {
        let show = || audit.show((id.partition, id.offset));
        let (pos, done) = &t.completions[0];
        assert!(
            !t.effective_commits.is_empty() && t.effective_commits.iter().all(|c| c.0 < *pos),
            "{id}: effective commits {:?}, first completion at #{pos}\n{}",
            t.effective_commits,
            show()
        );
        // The position of `i`'s newest claim at or before `pos` (a claim that
        // was its own commit, R34, is at the commit's position).
        let claim_at = |i: u32, pos: i64| {
            t.claims
                .iter()
                .filter(|c| c.1 == i && c.0 <= pos)
                .map(|c| c.0)
                .max()
                .unwrap_or(pos)
        };
        for w in t.effective_commits.windows(2) {
            let ((pa, a), (pb, b)) = (w[0], w[1]);
            let b_claim = claim_at(b, pb);
            assert!(
                t.revocations
                    .iter()
                    .any(|r| r.1 == a && pa < r.0 && r.0 < b_claim),
                "{id}: instance {b} committed at #{pb} (claim #{b_claim}) with no valid \
                 revocation of instance {a}'s hold committed at #{pa} between them\n{}",
                show()
            );
        }
        let (cpos, ci) = *t.effective_commits.last().expect("checked above");
        assert!(
            ci == done.instance.get()
                && !t
                    .revocations
                    .iter()
                    .any(|r| r.1 == ci && cpos < r.0 && r.0 < *pos),
            "{id}: completed at #{pos} by {}, but the newest effective commit is #{cpos} by {ci} \
             (or its hold was revoked before the completion)\n{}",
            done.instance,
            show()
        );
        assert_eq!(done.outcome().map(|o| o.status), Some(Status::Ok), "{id}");
    }
}

/// Asserts that the ledger holds, per order, one line "P:O" per run its
/// claims trail allows: exactly one where the order was committed once; at
/// least one (the completer's run, whose job succeeded) and at most one per
/// commit before its completion where it was committed again, which only a
/// takeover after a valid revocation (R37-R40) or a retry after its
/// runner's death (R21) does (I5: a second run only after a death or a
/// revocation). A run of a revoked hold may or may not have reached its
/// job's side effect before it was frozen (R53) or killed (R38).
pub(crate) fn assert_ledger_runs(ledger: &std::path::Path, orders: &[(i32, i64)], audit: &Audit) {
    let c = counts(&crate::common::ledger(ledger));
    for &(p, o) in orders {
        let n = c.get(&format!("{p}:{o}")).copied().unwrap_or(0);
        let t = &audit.orders[&OrderId::new(p, o)];
        let done = t.completions[0].0;
        let runs = t.commits.iter().filter(|c| c.0 < done).count();
        assert!(
            (1..=runs.max(1)).contains(&n),
            "order {p}:{o} ran {n} times, its claims trail shows {runs} commits\n{}",
            audit.show((p, o))
        );
    }
    assert_eq!(c.len(), orders.len(), "unexpected ledger lines: {c:?}");
}

/// Asserts that the ledger holds exactly one line "P:O" per order.
pub(crate) fn assert_ledger_once(ledger: &std::path::Path, orders: &[(i32, i64)], audit: &Audit) {
    let c = counts(&crate::common::ledger(ledger));
    for &(p, o) in orders {
        let n = c.get(&format!("{p}:{o}")).copied().unwrap_or(0);
        assert_eq!(n, 1, "order {p}:{o} ran {n} times\n{}", audit.show((p, o)));
    }
    assert_eq!(c.len(), orders.len(), "unexpected ledger lines: {c:?}");
}

#[test]
fn exactly_once_200_orders_4_instances() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(2);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let sup = pool(&broker, "4", &[]);
    let payloads = vec![ledger_order(&ledger); 100];
    // Half the orders before the pool is up, half while it runs.
    let mut orders = produce_orders(broker.bootstrap(), &topic, &payloads[..50], Some(0));
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &payloads[..50],
        Some(1),
    ));
    sup.expect(
        "4 instances started",
        |s| (1..=4).all(|i| s.starts(i) >= 1),
        T,
    );
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &payloads[50..],
        Some(0),
    ));
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &payloads[50..],
        Some(1),
    ));
    assert_eq!(orders.len(), 200);

    let audit = wait_and_audit(broker.bootstrap(), &claims, &orders, LONG);
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_completed_ok_by_committer(&audit);
    assert_eq!(
        audit.orders.len(),
        200,
        "claims name orders that were never produced"
    );
    assert_ledger_once(&ledger, &orders, &audit);
    let s = sup.snapshot();
    assert!(
        s.exits.iter().all(|e| e.code == Some(0)),
        "a worker exited abnormally: {:?}",
        s.exits
    );
    eprintln!(
        "e2e: 200 orders, {} worker starts, {} yields, {:?}",
        s.total_starts(),
        audit
            .orders
            .values()
            .map(|t| t.decisions.iter().filter(|d| d.2 == Event::Yielded).count())
            .sum::<usize>(),
        started.elapsed()
    );
}

#[test]
fn orders_per_process_5_completes_each_order_once_with_fewer_processes() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(2);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let payloads = vec![ledger_order(&ledger); 20];
    // Some orders wait before the pool starts (instances race for them),
    // the others arrive while it runs.
    let mut orders = produce_orders(broker.bootstrap(), &topic, &payloads[..10], Some(0));
    let sup = pool(&broker, "3", &[("ORDERS_PER_PROCESS", "5")]);
    sup.expect(
        "3 instances started",
        |s| (1..=3).all(|i| s.starts(i) >= 1),
        T,
    );
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &payloads[10..15],
        Some(0),
    ));
    orders.extend(produce_orders(
        broker.bootstrap(),
        &topic,
        &payloads[15..],
        Some(1),
    ));
    assert_eq!(orders.len(), 20);

    let audit = wait_and_audit(broker.bootstrap(), &claims, &orders, LONG);
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_completed_ok_by_committer(&audit);
    assert_ledger_once(&ledger, &orders, &audit);
    // Incarnations (processes) that completed orders: each completed at
    // most 5, and together there are fewer of them than orders.
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let mut per_incarnation: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in &recs {
        if r.event() == Event::Completed && r.by().is_none() {
            *per_incarnation
                .entry(r.incarnation.to_string())
                .or_default() += 1;
        }
    }
    assert!(
        per_incarnation.values().all(|&n| n <= 5),
        "an incarnation completed more than 5 orders: {per_incarnation:?}"
    );
    assert!(
        per_incarnation.len() < orders.len(),
        "{} processes completed the {} orders: none completed more than one",
        per_incarnation.len(),
        orders.len()
    );
    let s = sup.snapshot();
    assert!(
        s.exits.iter().all(|e| e.code == Some(0)),
        "a worker exited abnormally: {:?}",
        s.exits
    );
    assert!(
        s.total_starts() < orders.len() as u64,
        "{} starts for {} orders",
        s.total_starts(),
        orders.len()
    );
    eprintln!(
        "orders_per_process=5: 20 orders, {} starts, completions per process {per_incarnation:?}",
        s.total_starts()
    );
}

#[test]
fn race_8_instances_few_orders() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    // The orders wait before any instance starts: all 8 race for each. A
    // long fetch wait (the mock broker holds an empty fetch for all of it)
    // makes each read-back slow, so that instances claim an order before
    // they read each other's claims: with the default 2 ms the race is
    // often over before a second instance claims. Without the claim
    // deferral (CLAIM_DEFER_MS=0, the herd): with it, idle instances take
    // turns and seldom contest an order (`idle_instances_take_turns`).
    let orders = produce_orders(
        broker.bootstrap(),
        &topic,
        &vec![ledger_order(&ledger); 5],
        Some(0),
    );
    let sup = pool(
        &broker,
        "8",
        &[("KAFKA_FETCH_WAIT_MAX_MS", "50"), ("CLAIM_DEFER_MS", "0")],
    );
    // A claim is decided by its writer's `committed` or `yielded`, or is
    // its own commit (it met no rival, R34). A loser may read the winner's
    // claim only after the winner completed, so its `yielded` can land
    // after the last completion: wait for every claim's decision.
    let undecided = |a: &Audit| {
        a.orders.iter().find_map(|(id, t)| {
            t.claims
                .iter()
                .find(|(pos, i, _)| {
                    !t.unrivalled_claims.contains(pos) && !t.decisions.iter().any(|d| d.1 == *i)
                })
                .map(|(_, i, _)| {
                    format!("{id}: instance {i} never decided\n{}", t.lines.join("\n"))
                })
        })
    };
    let mut audit = wait_and_audit(broker.bootstrap(), &claims, &orders, T);
    poll_until(T, Duration::from_millis(50), || {
        audit = Audit::of(&decoded_claims(broker.bootstrap(), &claims));
        undecided(&audit).is_none()
    });
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ledger_once(&ledger, &orders, &audit);
    let contested: Vec<_> = audit
        .orders
        .iter()
        .filter(|(_, t)| {
            let claimants: std::collections::BTreeSet<u32> = t.claims.iter().map(|c| c.1).collect();
            claimants.len() >= 2 && t.decisions.iter().any(|d| d.2 == Event::Yielded)
        })
        .map(|(o, _)| *o)
        .collect();
    assert!(
        !contested.is_empty(),
        "no order was contested (claimed by two instances, one yielding):\n{}",
        orders
            .iter()
            .map(|o| audit.show(*o))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Every instance that claimed and did not commit yielded (nobody is
    // left undecided, and nobody ran without a decision).
    if let Some(e) = undecided(&audit) {
        panic!("{e}");
    }
    let s = sup.snapshot();
    assert!(s.exits.iter().all(|e| e.code == Some(0)), "{:?}", s.exits);
    eprintln!("race: contested orders {contested:?}");
}

/// Issue 16, "No herd" (docs/protocol.md R26–R31): with four
/// idle instances, orders sent one at a time, each after the previous one
/// completed, are each claimed by about one instance — the one first in
/// line claims at once, the others defer and read its claim. Without the
/// rule every idle instance claimed every order (about four claims each).
#[test]
fn idle_instances_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let sup = pool(&broker, "4", &[]);
    let booted = || {
        let recs = decoded_claims(broker.bootstrap(), &claims);
        let who: std::collections::BTreeSet<u32> = recs
            .iter()
            .filter(|(_, r)| r.event() == Event::Booted)
            .map(|(_, r)| r.instance.get())
            .collect();
        who.len() == 4
    };
    assert!(
        poll_until(T, Duration::from_millis(50), booted),
        "the 4 instances did not all boot"
    );
    let mut orders = Vec::new();
    for _ in 0..6 {
        let o = produce_orders(
            broker.bootstrap(),
            &topic,
            &[ledger_order(&ledger)],
            Some(0),
        );
        wait_completed(broker.bootstrap(), &claims, &o, T).unwrap_or_else(|e| panic!("{e}"));
        orders.extend(o);
    }
    let audit = wait_and_audit(broker.bootstrap(), &claims, &orders, T);
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ledger_once(&ledger, &orders, &audit);
    let n: usize = audit.orders.values().map(|t| t.claims.len()).sum();
    assert!(
        n < 2 * orders.len(),
        "{n} claims for {} orders: the idle instances herd\n{}",
        orders.len(),
        orders
            .iter()
            .map(|o| audit.show(*o))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let s = sup.snapshot();
    assert!(s.exits.iter().all(|e| e.code == Some(0)), "{:?}", s.exits);
    eprintln!(
        "no herd: {n} claims for {} orders with 4 instances",
        orders.len()
    );
}

/// Whether process `pid` still runs (exists and is not a zombie).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// An order that logs "start:ATTEMPT:RETRY:PID", blocks until `flag`
/// exists, then logs "ran:ATTEMPT:RETRY".
fn blocking_order(ledger: &std::path::Path, flag: &std::path::Path) -> String {
    let (l, f) = (shq(ledger), shq(flag));
    sh_order(
        &format!(
            "echo start:$ORDER_ATTEMPT:$ORDER_RETRY:$$ >> {l}; \
             while [ ! -e {f} ]; do sleep 0.05; done; \
             echo ran:$ORDER_ATTEMPT:$ORDER_RETRY >> {l}"
        ),
        None,
    )
}

#[test]
fn killed_while_running_resumes_as_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (ledger, flag) = (dir.path().join("ledger"), dir.path().join("flag"));
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let sup = pool(&broker, "1", &[]);
    let order = produce_orders(
        broker.bootstrap(),
        &topic,
        &[blocking_order(&ledger, &flag)],
        Some(0),
    )[0];
    let id = OrderId::new(order.0, order.1);
    // The claim met no rival: it is the commit of attempt 1 (R34).
    wait_record(&broker, &claims, "claim (the commit) of attempt 1", |r| {
        r.event() == Event::Claimed && r.order() == Some(id) && r.attempt().get() == 1
    });
    assert!(
        poll_until(T, Duration::from_millis(50), || started_pid(&ledger, 1)
            .is_some()),
        "attempt 1 never started"
    );
    let first_job = started_pid(&ledger, 1).unwrap();
    let killed = sup
        .kill_instance(1, libc::SIGKILL)
        .expect("instance 1 runs");
    sup.expect(
        "instance 1 restarted after SIGKILL",
        |s| s.starts(1) >= 2 && s.pid(1).is_some_and(|p| p != killed),
        T,
    );
    assert_eq!(
        sup.snapshot()
            .exits_of(1)
            .first()
            .map(|e| (e.pid, e.signal)),
        Some((killed, Some(libc::SIGKILL)))
    );
    let recs = wait_record(&broker, &claims, "commit of attempt 2", |r| {
        r.event() == Event::Committed && r.order() == Some(id) && r.attempt().get() == 2
    });
    assert!(
        poll_until(T, Duration::from_millis(50), || started_pid(&ledger, 2)
            .is_some()),
        "the retry never started"
    );
    // The killed worker's job died with it (PR_SET_PDEATHSIG), before the
    // retry can race it.
    assert!(
        poll_until(
            Duration::from_secs(5),
            Duration::from_millis(50),
            || !alive(first_job)
        ),
        "the job (pid {first_job}) of the SIGKILLed worker is still running"
    );
    // The new incarnation did not claim again: it resumed its committed hold.
    let inc2 = recs
        .iter()
        .find(|(_, r)| r.attempt().get() == 2 && r.event() == Event::Committed)
        .unwrap()
        .1
        .incarnation
        .clone();
    assert!(
        !recs
            .iter()
            .any(|(_, r)| r.incarnation == inc2 && r.event() == Event::Claimed),
        "the retry claimed the order again:\n{}",
        show_all(&recs)
    );
    std::fs::write(&flag, b"").unwrap();
    let audit = wait_and_audit(broker.bootstrap(), &claims, &[order], T);
    audit
        .check_exactly_once(&[order])
        .unwrap_or_else(|e| panic!("{e}"));
    let t = &audit.orders[&id];
    let done = &t.completions[0].1;
    assert_eq!(
        (done.attempt().get(), done.incarnation.as_str()),
        (2, inc2.as_str()),
        "{}",
        audit.show(order)
    );
    assert_eq!(done.outcome().unwrap().status, Status::Ok);
    // Attempt 1 was committed by its claim (R34), the retry by an explicit
    // `committed` of attempt 2 (R21).
    let commits: Vec<u32> = t.commits.iter().map(|c| c.3).collect();
    assert_eq!(commits, vec![1, 2], "{}", audit.show(order));
    assert_eq!(
        t.unrivalled_claims,
        vec![t.claims[0].0],
        "{}",
        audit.show(order)
    );
    let explicit: Vec<u32> = t
        .decisions
        .iter()
        .filter(|d| d.2 == Event::Committed)
        .map(|d| d.3)
        .collect();
    assert_eq!(explicit, vec![2], "{}", audit.show(order));
    let ran: Vec<String> = crate::common::ledger(&ledger)
        .into_iter()
        .filter(|l| l.starts_with("ran:"))
        .collect();
    assert_eq!(
        ran,
        vec!["ran:2:1".to_string()],
        "the retry saw ORDER_ATTEMPT=2, ORDER_RETRY=1, and ran once"
    );
}

/// A worker killed with SIGKILL cannot kill its job's process group; the job
/// must still not outlive it (else it races the retry: the side effect
/// happens twice).
///
/// Regression test: before ca01b48 the job (its own process group, no
/// PR_SET_PDEATHSIG) was reparented to init and kept running, and with the
/// retry running too the side effect happened twice ("ran:2:1" and
/// "ran:1:0").
#[test]
fn killed_worker_takes_its_job_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ledger, flag) = (dir.path().join("ledger"), dir.path().join("flag"));
    let broker = broker(1);
    let topic = broker.opts.orders_topic.clone();
    let mut worker = WorkerProc::start("worker1", &broker.instance_env(1));
    produce_orders(
        broker.bootstrap(),
        &topic,
        &[blocking_order(&ledger, &flag)],
        Some(0),
    );
    assert!(
        poll_until(T, Duration::from_millis(50), || started_pid(&ledger, 1)
            .is_some()),
        "the job never started"
    );
    let job = started_pid(&ledger, 1).unwrap();
    worker.kill();
    let gone = poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        !alive(job)
    });
    let stat = std::fs::read_to_string(format!("/proc/{job}/stat")).unwrap_or_default();
    if !gone {
        // SAFETY: the orphaned job's group, started by this test's worker.
        unsafe { libc::killpg(job, libc::SIGKILL) };
    }
    assert!(
        gone,
        "the job (pid {job}) of a SIGKILLed worker is still running 5 s later ({stat})"
    );
}

/// The wall clock as records carry it. Hand-written records use it so that
/// their holds are fresh (an old `ts` is an expired lease, taken over).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Hand-written claims records of an older incarnation of instance 1 that
/// claimed order 0:0 and died before deciding.
fn old_claim(instance: u32, inc: &str, seq: u64, order: OrderId) -> Record {
    let mut c = Record::of(instance, Event::Claimed, inc, now_ms());
    c = c.with_order(order);
    c.seq = seq;
    c.set_attempt(1);
    c.next.insert(order.lane(), order.offset + 1);
    c
}

fn booted(instance: u32, inc: &str) -> Record {
    let mut b = Record::of(instance, Event::Booted, inc, now_ms());
    b.seq = 1;
    b
}

fn worker_env(broker: &BrokerProc, instance: u32) -> Vec<(String, String)> {
    let mut env = broker.instance_env(instance);
    env.push(("ALLOWED_COMMANDS".into(), "sh".into()));
    env
}

/// [`worker_env`] with the harness's `SETTLE_MS` and `STATE_DIR` replaced.
fn settling_env(
    broker: &BrokerProc,
    instance: u32,
    settle_ms: u64,
    state_dir: &std::path::Path,
) -> Vec<(String, String)> {
    let mut env = worker_env(broker, instance);
    env.retain(|(k, _)| k != "SETTLE_MS" && k != "STATE_DIR");
    env.push(("SETTLE_MS".into(), settle_ms.to_string()));
    env.push(("STATE_DIR".into(), state_dir.to_str().unwrap().into()));
    env
}

fn expect_exit(w: &mut WorkerProc, code: i32, what: &str) {
    let status = w
        .wait(T)
        .unwrap_or_else(|| panic!("{what}: still running after {T:?}:\n{}", w.stderr.last(20)));
    assert_eq!(status.code(), Some(code), "{what}:\n{}", w.stderr.last(20));
}

/// An incarnation killed right after its claim was read back. Before R34
/// that was "between claim and decision", and the next incarnation
/// negotiated attempt 1 again; since R34 a first claim that met no rival is
/// itself the commit (the job may have started), so the next incarnation
/// resumes a committed hold, as a retry (R21; docs/protocol-proofs.md, "The
/// uncontested path"). A claimant killed before its decision on a
/// *contested* claim resumes the negotiation:
/// `killed_between_claim_and_decision_yields_to_a_committed_rival`.
#[test]
fn killed_after_an_unrivalled_claim_resumes_it_as_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let order = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    )[0];
    let id = OrderId::new(order.0, order.1);
    // A dead incarnation of 1 claimed 0:0, with no rival: its commit.
    produce_record(broker.bootstrap(), &claims, &booted(1, "dead-1"));
    produce_record(broker.bootstrap(), &claims, &old_claim(1, "dead-1", 2, id));
    let mut w = WorkerProc::start("worker1", &worker_env(&broker, 1));
    expect_exit(&mut w, 0, "instance 1 resumes and completes the order");
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let inc = recs
        .iter()
        .rev()
        .find(|(_, r)| r.event() == Event::Booted && r.instance.get() == 1)
        .unwrap()
        .1
        .incarnation
        .clone();
    let mine: Vec<(Event, Option<OrderId>)> = recs
        .iter()
        .filter(|(_, r)| r.incarnation == inc)
        .map(|(_, r)| (r.event(), r.order()))
        .collect();
    assert_eq!(
        mine,
        vec![(Event::Booted, None), (Event::Committed, Some(id)), (Event::Completed, Some(id))],
        "the new incarnation must resume the old claim's commit (no new claim, no run without a commit of its own attempt):\n{}",
        show_all(&recs)
    );
    let attempts: Vec<u32> = recs
        .iter()
        .filter(|(_, r)| r.incarnation == inc && r.order() == Some(id))
        .map(|(_, r)| r.attempt().get())
        .collect();
    assert_eq!(attempts, vec![2, 2], "a retry:\n{}", show_all(&recs));
    let audit = Audit::of(&recs);
    audit
        .check_exactly_once(&[order])
        .unwrap_or_else(|e| panic!("{e}"));
    let t = &audit.orders[&id];
    assert_eq!(
        t.commits.iter().map(|c| c.3).collect::<Vec<_>>(),
        vec![1, 2],
        "{}",
        audit.show(order)
    );
    assert_ledger_once(&ledger, &[order], &audit);
}

#[test]
fn killed_between_claim_and_decision_yields_to_a_committed_rival() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let first = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    )[0];
    let id = OrderId::new(first.0, first.1);
    // 2 claimed, with no rival: its claim is its commit (R34). Then 1
    // claimed, which met 2's commit and is undecided until 1 yields; but 1
    // died before its decision, and 2 died while running.
    produce_record(broker.bootstrap(), &claims, &booted(1, "dead-1"));
    produce_record(broker.bootstrap(), &claims, &booted(2, "dead-2"));
    produce_record(broker.bootstrap(), &claims, &old_claim(2, "dead-2", 2, id));
    produce_record(broker.bootstrap(), &claims, &old_claim(1, "dead-1", 2, id));

    // Instance 1 must yield, then take the next order (not 0:0 again).
    let mut w1 = WorkerProc::start("worker1", &worker_env(&broker, 1));
    let recs = wait_record(&broker, &claims, "yield of instance 1", |r| {
        r.instance.get() == 1 && r.event() == Event::Yielded && r.order() == Some(id)
    });
    assert!(
        !recs
            .iter()
            .any(|(_, r)| r.instance.get() == 1 && r.event() == Event::Committed),
        "instance 1 committed an order instance 2 had committed:\n{}",
        show_all(&recs)
    );
    let second = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    )[0];
    expect_exit(&mut w1, 0, "instance 1 runs the next order");
    // Instance 2 resumes its committed hold as a retry.
    let mut w2 = WorkerProc::start("worker2", &worker_env(&broker, 2));
    expect_exit(&mut w2, 0, "instance 2 resumes 0:0");
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let audit = Audit::of(&recs);
    audit
        .check_exactly_once(&[first, second])
        .unwrap_or_else(|e| panic!("{e}"));
    let t = &audit.orders[&id];
    assert_eq!(
        t.completions[0].1.instance.get(),
        2,
        "{}",
        audit.show(first)
    );
    assert_eq!(
        t.completions[0].1.attempt().get(),
        2,
        "{}",
        audit.show(first)
    );
    // Attempt 1 committed by 2's claim (R34), attempt 2 by its `committed`
    // (R21); none by 1.
    let commits: Vec<(u32, u32)> = t.commits.iter().map(|c| (c.1, c.3)).collect();
    assert_eq!(commits, vec![(2, 1), (2, 2)], "{}", audit.show(first));
    assert_eq!(
        t.unrivalled_claims,
        vec![t.claims[0].0],
        "{}",
        audit.show(first)
    );
    assert_eq!(
        audit.orders[&OrderId::new(second.0, second.1)].completions[0]
            .1
            .instance
            .get(),
        1
    );
    assert_ledger_once(&ledger, &[first, second], &audit);
}

#[test]
fn config_errors_exit_2_naming_the_variable() {
    let base = [
        ("KAFKA_BROKERS", "127.0.0.1:1"),
        ("ORDERS_TOPIC", "o"),
        ("COORDINATION_TOPIC", "c"),
    ];
    for value in [None, Some("abc"), Some("0"), Some("")] {
        let mut env = base.to_vec();
        if let Some(v) = value {
            env.push(("INSTANCE_NUMBER", v));
        }
        let (code, err) = run_worker_once(&env, T);
        assert_eq!(code, Some(2), "INSTANCE_NUMBER={value:?}: stderr {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "INSTANCE_NUMBER={value:?}: one line expected: {err}"
        );
        assert!(
            lines[0].contains("INSTANCE_NUMBER"),
            "INSTANCE_NUMBER={value:?}: {err}"
        );
    }
}

/// A worker that cannot reach any broker retries for two minutes
/// (BROKER_PATIENCE) before it gives up; a SIGTERM meanwhile (a
/// supervisor's or systemd's stop) ends it at once, with the status of a
/// terminated worker, 143, having appended nothing. It used to be ignored
/// until the patience ran out.
#[test]
fn a_worker_that_cannot_reach_the_brokers_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("KAFKA_BROKERS", "127.0.0.1:1"),
        ("ORDERS_TOPIC", "o"),
        ("COORDINATION_TOPIC", "c"),
        ("INSTANCE_NUMBER", "1"),
        ("STATE_DIR", dir.path().to_str().unwrap()),
    ];
    let mut w = WorkerProc::start("unreachable", &env);
    assert!(
        w.stderr.wait_for("brokers unreachable", T),
        "no retry logged:\n{}",
        w.stderr.last(20)
    );
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(w.pid() as i32, libc::SIGTERM) };
    let status = w.wait(T).expect("the worker exits after SIGTERM");
    assert_eq!(status.code(), Some(143), "{}", w.stderr.last(20));
    assert!(
        w.stderr.has("stopped by a signal before joining the pool"),
        "{}",
        w.stderr.last(20)
    );
}

/// Issue 18: a clean-exit marker lets the next process boot without
/// settling, so its directory must be the worker user's alone; a
/// world-writable one is a configuration error before anything else.
#[test]
fn a_state_dir_others_can_write_is_a_config_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = state.to_str().unwrap();
    let env = [
        ("KAFKA_BROKERS", "127.0.0.1:1"),
        ("ORDERS_TOPIC", "o"),
        ("COORDINATION_TOPIC", "c"),
        ("INSTANCE_NUMBER", "1"),
        ("STATE_DIR", s),
    ];
    let (code, err) = run_worker_once(&env, T);
    assert_eq!(code, Some(2), "stderr: {err}");
    assert!(
        err.lines()
            .any(|l| l.contains("STATE_DIR") && l.contains("writable by group or others")),
        "{err}"
    );
}

#[test]
fn a_claims_topic_with_3_partitions_is_a_config_error() {
    let broker = broker(1);
    let bad = unique_topic("claims3");
    broker.create_topic(&bad, 3);
    let env = [
        ("KAFKA_BROKERS", broker.bootstrap()),
        ("ORDERS_TOPIC", broker.opts.orders_topic.as_str()),
        ("COORDINATION_TOPIC", bad.as_str()),
        ("INSTANCE_NUMBER", "1"),
        ("ALLOWED_COMMANDS", "sh"),
    ];
    let (code, err) = run_worker_once(&env, T);
    assert_eq!(code, Some(2), "stderr: {err}");
    assert!(
        err.lines()
            .any(|l| l.contains(&bad) && l.contains('3') && l.contains("partition")),
        "no line names the topic and its 3 partitions: {err}"
    );
}

/// Instances 1-4 each find a committed, uncompleted hold of a dead
/// incarnation (as after `kill -9` while running) and resume it as attempt
/// 2; the job is quick. Each `completed` must say attempt 2, like the
/// `committed` it follows and the job's ORDER_ATTEMPT. The holds of 1 and
/// 2 are a claim alone (its own commit, R34), those of 3 and 4 a claim and
/// an explicit `committed` (as written before R34).
///
/// Regression test: before ca01b48 the machine appended `committed`
/// (attempt 2) and started the job at once, and `complete` took the attempt
/// from the view's hold, which still said 1 when the job ended before the
/// new `committed` was read back (`#11 2:committed attempt 2`,
/// `#12 2:completed attempt 1`; about 1 run in 3).
#[test]
fn a_resumed_run_completes_with_its_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let script = format!(
        "echo $ORDER_PARTITION:$ORDER_OFFSET:$ORDER_ATTEMPT >> {}",
        shq(&ledger)
    );
    let orders = produce_orders(
        broker.bootstrap(),
        &topic,
        &vec![sh_order(&script, None); 4],
        Some(0),
    );
    for (k, &(p, o)) in orders.iter().enumerate() {
        let i = k as u32 + 1;
        let inc = format!("dead-{i}");
        let id = OrderId::new(p, o);
        produce_record(broker.bootstrap(), &claims, &booted(i, &inc));
        produce_record(broker.bootstrap(), &claims, &old_claim(i, &inc, 2, id));
        if i >= 3 {
            let mut commit = Record::of(i, Event::Committed, &inc, now_ms()).with_order(id);
            commit.seq = 3;
            commit.set_attempt(1);
            produce_record(broker.bootstrap(), &claims, &commit);
        }
    }
    let mut workers: Vec<WorkerProc> = (1..=4)
        .map(|i| WorkerProc::start(&format!("worker{i}"), &worker_env(&broker, i)))
        .collect();
    for (k, w) in workers.iter_mut().enumerate() {
        expect_exit(w, 0, &format!("instance {} resumes its order", k + 1));
    }
    let audit = Audit::of(&decoded_claims(broker.bootstrap(), &claims));
    audit
        .check_exactly_once(&orders)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut lines = crate::common::ledger(&ledger);
    lines.sort();
    let expected: Vec<String> = orders.iter().map(|(p, o)| format!("{p}:{o}:2")).collect();
    assert_eq!(lines, expected, "each order ran once, as attempt 2");
    for &o in &orders {
        let done = &audit.orders[&OrderId::new(o.0, o.1)].completions[0].1;
        assert_eq!(done.attempt().get(), 2, "{}", audit.show(o));
    }
}

/// Boot reads the claims topic from the newest checkpoint near its end
/// (src/checkpoint.rs), not from position 0, and orders still run once:
/// over a history longer than the checkpoint window, the first worker finds
/// no checkpoint, replays it all and leaves one; the second boots from it.
/// The names of a process's threads that librdkafka gives the main thread
/// of each client it creates (`rdk:main`), one per client.
fn kafka_clients(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            (comm.trim() == "rdk:main").then(|| t.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// A worker process has two Kafka clients (issue 35, 3): the transactional
/// producer, which answers the questions (metadata, watermarks), and one
/// consumer, which reads the claims partition and the orders partitions.
/// Counted while it idles, watching three orders partitions beside the
/// claims partition (the checkpoint search through the same consumer:
/// `boot_starts_from_the_newest_checkpoint`); then an order arriving on
/// partition 2 wakes it through that consumer and runs once. Three clients
/// (a consumer per topic) fail it.
#[test]
fn an_idle_worker_has_two_kafka_clients() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(3);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    let first = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    )[0];
    let mut w = WorkerProc::start("worker1", &worker_env(&broker, 1));
    expect_exit(&mut w, 0, "instance 1 completes the first order");
    let mut w = WorkerProc::start("worker1", &worker_env(&broker, 1));
    assert!(
        w.stderr.wait_for("no order waiting; idle", T),
        "the worker never idled:\n{}",
        w.stderr.last(20)
    );
    let clients = kafka_clients(w.pid());
    assert_eq!(
        clients.len(),
        2,
        "an idle worker has two Kafka clients (rdk:main threads {clients:?}):\n{}",
        w.stderr.last(20)
    );
    let second = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(2),
    )[0];
    expect_exit(
        &mut w,
        0,
        "the idle worker completes the order that arrives",
    );
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let audit = Audit::of(&recs);
    audit
        .check_exactly_once(&[first, second])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ledger_once(&ledger, &[first, second], &audit);
}

#[test]
fn boot_starts_from_the_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let broker = broker(1);
    let (topic, claims) = (
        broker.opts.orders_topic.clone(),
        broker.opts.coordination_topic.clone(),
    );
    // History: instance 9 booted 4,500 times (valid records, no orders).
    let history: Vec<(String, Vec<u8>)> = (0..4_500)
        .map(|k| booted(9, &format!("old-{k}")))
        .map(|r| (r.key(), r.encode()))
        .collect();
    let batch: Vec<KeyValue> = history
        .iter()
        .map(|(k, v)| (Some(k.as_bytes()), Some(v.as_slice())))
        .collect();
    try_produce(broker.bootstrap(), &claims, &batch, Some(0)).expect("history written");
    let first = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    )[0];
    let mut w = WorkerProc::start("worker1", &worker_env(&broker, 1));
    expect_exit(&mut w, 0, "instance 1 completes the first order");
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let at = recs
        .iter()
        .filter(|(_, r)| r.event() == Event::Checkpoint && r.instance.get() == 1)
        .filter_map(|(_, r)| r.snapshot().as_ref().map(|s| s.at.get()))
        .max()
        .unwrap_or_else(|| panic!("instance 1 left no checkpoint:\n{}", w.stderr.last(20)));
    assert!(at > 4_500, "the checkpoint covers the history (at {at})");
    let second = produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    )[0];
    let mut w = WorkerProc::start("worker2", &worker_env(&broker, 2));
    expect_exit(&mut w, 0, "instance 2 completes the second order");
    let booting: Vec<String> = w
        .stderr
        .lines()
        .into_iter()
        .map(|l| strip_ansi(&l))
        .filter(|l| l.contains("booting"))
        .collect();
    assert!(
        booting.iter().any(|l| l.contains(&format!("from={at}"))),
        "instance 2 must replay from the checkpoint at {at}:\n{}",
        booting.join("\n")
    );
    // The checkpoint is among the log's last positions: the replay starts
    // among the records the search read, without seeking back (which
    // waited for the fetch held at the log's end).
    assert!(
        booting.iter().any(|l| l.contains("seek=false")),
        "instance 2 must replay on from its checkpoint search's records:\n{}",
        booting.join("\n")
    );
    let recs = decoded_claims(broker.bootstrap(), &claims);
    let audit = Audit::of(&recs);
    audit
        .check_exactly_once(&[first, second])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ledger_once(&ledger, &[first, second], &audit);
}

/// The text of a log line without its terminal colours.
fn strip_ansi(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The incarnation of the process that `w` is, from its "booting" log line
/// (which names it beside the pid; the id itself is random).
fn incarnation_of(w: &WorkerProc) -> String {
    let found = |w: &WorkerProc| {
        w.stderr
            .lines()
            .iter()
            .map(|l| strip_ansi(l))
            .filter(|l| l.contains("booting"))
            .find_map(|l| {
                let inc = l
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("incarnation="))?;
                Some(inc.to_string())
            })
    };
    assert!(
        poll_until(T, Duration::from_millis(20), || found(w).is_some()),
        "no booting line naming an incarnation:\n{}",
        w.stderr.last(20)
    );
    found(w).unwrap()
}

/// The `booted` of the process that `w` is.
fn booted_of(broker: &BrokerProc, instance: u32, w: &WorkerProc) -> Record {
    let claims = broker.opts.coordination_topic.clone();
    let inc = incarnation_of(w);
    let recs = wait_record(broker, &claims, "the process's booted", |r| {
        r.event() == Event::Booted && r.instance.get() == instance && r.incarnation.as_str() == inc
    });
    recs.into_iter()
        .rev()
        .find(|(_, r)| r.event() == Event::Booted && r.incarnation.as_str() == inc)
        .unwrap()
        .1
}

/// docs/protocol.md R16–R18: after a clean exit the next process boots
/// at once (its predecessor left a marker naming itself, and the log
/// agrees); after a SIGKILL the next one appends nothing before
/// `SETTLE_MS` have passed.
#[test]
fn a_process_settles_after_a_kill_but_not_after_a_clean_exit() {
    const SETTLE_MS: u64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let (ledger, state) = (dir.path().join("ledger"), dir.path().join("state"));
    let broker = broker(1);
    let topic = broker.opts.orders_topic.clone();
    let env = settling_env(&broker, 1, SETTLE_MS, &state);
    let markers = || -> Vec<String> {
        std::fs::read_dir(&state)
            .map(|d| {
                d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                    .collect()
            })
            .unwrap_or_default()
    };

    // A first process (no marker: it waits) completes an order and exits 0.
    produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    );
    let mut a = WorkerProc::start("worker1a", &env);
    let a_booted = booted_of(&broker, 1, &a);
    expect_exit(&mut a, 0, "the first process completes its order");
    assert!(
        a.stderr.has("settling"),
        "no marker: it waited\n{}",
        a.stderr.last(20)
    );
    assert_eq!(
        markers(),
        vec![a_booted.incarnation.to_string()],
        "a clean exit leaves a marker naming it"
    );

    // The next one takes the marker, finds it confirmed and boots at once.
    let mut b = WorkerProc::start("worker1b", &env);
    let b_booted = booted_of(&broker, 1, &b);
    assert!(markers().is_empty(), "the marker is taken");
    assert!(!b.stderr.has("settling"), "{}", b.stderr.last(20));

    // Killed outright (idle, no order waiting): it leaves no marker, and
    // its successor boots only after SETTLE_MS of its own.
    b.kill();
    assert!(markers().is_empty(), "a killed process leaves no marker");
    let started = now_ms();
    let mut c = WorkerProc::start("worker1c", &env);
    let c_booted = booted_of(&broker, 1, &c);
    assert!(
        c_booted.ts >= started + SETTLE_MS,
        "booted {} ms after the start, before SETTLE_MS ({SETTLE_MS})",
        c_booted.ts - started
    );
    assert!(c.stderr.has("settling"), "{}", c.stderr.last(20));
    assert_ne!(b_booted.incarnation, c_booted.incarnation);

    // And it works normally from there.
    produce_orders(
        broker.bootstrap(),
        &topic,
        &[ledger_order(&ledger)],
        Some(0),
    );
    expect_exit(&mut c, 0, "the settled process completes the next order");
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), 2);
}

/// A process stopped (SIGTERM) while settling has appended nothing: it
/// hands on the marker it took, unchanged, for the next process to check.
#[test]
fn a_process_stopped_while_settling_hands_on_its_marker() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(1);
    let env = settling_env(&broker, 1, 60_000, dir.path());
    let cfg = pool_worker::config::Config::from_vars(env.clone()).unwrap();
    let marker = pool_worker::settle::marker_path(&cfg);
    // A marker the log does not confirm (no such incarnation ever booted).
    pool_worker::settle::leave(&marker, "gone-1");
    let mut w = WorkerProc::start("worker1", &env);
    assert!(
        w.stderr.wait_for("settling", T),
        "the process did not settle:\n{}",
        w.stderr.last(20)
    );
    assert!(!marker.exists(), "the marker is taken at the start");
    // SAFETY: a child process of this test.
    unsafe { libc::kill(w.pid() as i32, libc::SIGTERM) };
    expect_exit(&mut w, 143, "stopped by SIGTERM");
    assert_eq!(
        std::fs::read_to_string(&marker).ok().as_deref(),
        Some("gone-1"),
        "handed on unchanged"
    );
    let claims = decoded_claims(broker.bootstrap(), &broker.opts.coordination_topic);
    assert!(
        claims.is_empty(),
        "nothing appended while settling: {}",
        show_all(&claims)
    );
}

/// A TLS terminator (stunnel, from Debian's `stunnel4`) in front of the
/// embedded broker, which advertises the terminator's address, so that
/// every connection of every client goes through TLS: the broker is
/// reachable only over TLS. Killed on drop.
struct TlsFront {
    child: std::process::Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl TlsFront {
    /// A port nobody listens on now.
    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// A test CA and a certificate for 127.0.0.1 signed by it (with
    /// `openssl`), and stunnel listening on `port`, forwarding to `to`.
    fn start(port: u16, to: &str) -> TlsFront {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output();
            let out = out.unwrap_or_else(|e| {
                panic!("this test needs openssl (Debian: apt-get install openssl): {e}")
            });
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=pool_worker test CA",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(
            dir.path().join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]);
        let conf = format!(
            "foreground = yes\npid =\nsyslog = no\ndebug = 3\n[kafka]\naccept = 127.0.0.1:{port}\nconnect = {to}\ncert = {}\nkey = {}\n",
            dir.path().join("server.pem").display(),
            dir.path().join("server.key").display()
        );
        std::fs::write(dir.path().join("stunnel.conf"), conf).unwrap();
        let stunnel = ["stunnel4", "stunnel"]
            .into_iter()
            .find(|b| {
                std::process::Command::new(b)
                    .arg("-version")
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok()
            })
            .unwrap_or_else(|| {
                panic!("this test needs stunnel (Debian: apt-get install stunnel4)")
            });
        let child = std::process::Command::new(stunnel)
            .arg(dir.path().join("stunnel.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {stunnel}: {e}"));
        let listening = poll_until(T, Duration::from_millis(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(listening, "stunnel does not listen on {port}");
        TlsFront { child, dir, port }
    }

    /// The client settings of a pool that reaches the broker through it.
    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("KAFKA_BROKERS".into(), format!("127.0.0.1:{}", self.port)),
            ("KAFKA_SECURITY_PROTOCOL".into(), "SSL".into()),
            (
                "KAFKA_SSL_CA_LOCATION".into(),
                self.dir.path().join("ca.pem").display().to_string(),
            ),
        ]
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pool against a broker reachable only over TLS: the workers, `submit
/// --wait`, `status` and `history` all take their TLS settings from
/// `KAFKA_<PROPERTY>` (`KAFKA_SECURITY_PROTOCOL=SSL`, the test CA in
/// `KAFKA_SSL_CA_LOCATION`), and a client without them does not get through.
#[test]
fn the_pool_runs_orders_over_tls() {
    let port = TlsFront::free_port();
    let broker = BrokerProc::start_with(BrokerOpts {
        orders_topic: unique_topic("orders"),
        coordination_topic: unique_topic("claims"),
        advertise: Some(format!("127.0.0.1:{port}")),
        ..BrokerOpts::default()
    });
    let tls = TlsFront::start(port, broker.bootstrap());
    let mut env: BTreeMap<String, String> = broker.env().into_iter().collect();
    env.extend(tls.env());
    let env: Vec<(String, String)> = env.into_iter().collect();
    let _pool = SupervisorProc::start_with(SupervisorOpts {
        instances: "2".into(),
        env: env.clone(),
        restart_delay_ms: Some(20),
        ..SupervisorOpts::default()
    });
    let tool = |args: &[&str], env: &[(String, String)]| {
        let out = command()
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap_or_else(|e| panic!("cannot run pool_worker {args:?}: {e}"));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Plaintext to the TLS port does not get through (it gives up after
    // its 30 s produce timeout, so it is tried beside the rest).
    let plain: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !k.starts_with("KAFKA_S"))
        .cloned()
        .collect();
    let plain = std::thread::spawn(move || {
        command()
            .args(["submit", "--", "echo", "plain"])
            .envs(plain.iter().map(|(k, v)| (k, v)))
            .output()
            .map(|o| o.status.code())
    });
    let mut orders = Vec::new();
    for i in 0..3 {
        let word = format!("over-tls-{i}");
        let (code, out, err) = tool(
            &[
                "submit",
                "--wait",
                "--wait-timeout-secs",
                "60",
                "--",
                "echo",
                &word,
            ],
            &env,
        );
        assert_eq!(code, Some(0), "submit --wait over TLS: {out}\n{err}");
        let mut lines = out.lines();
        let order = lines.next().unwrap_or_default().to_string();
        assert!(order.parse::<OrderId>().is_ok(), "{out}");
        assert_eq!(lines.next(), Some(word.as_str()), "the job's output: {out}");
        orders.push(order);
    }
    let (code, out, err) = tool(&["status", "--json"], &env);
    assert_eq!(code, Some(0), "status over TLS: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["by_status"]["ok"], 3, "{v}");
    let (code, out, err) = tool(&["history", &orders[1]], &env);
    assert_eq!(code, Some(0), "history over TLS: {err}");
    // The commit: the claim, which met no rival (R34), or a `committed`
    // after a contest.
    assert!(
        out.contains(":claimed")
            && (out.contains("its own commit") || out.contains(":committed"))
            && out.contains(":completed"),
        "{out}"
    );
    let plain = plain
        .join()
        .expect("the plaintext client's thread")
        .expect("pool_worker submit runs");
    assert_ne!(
        plain,
        Some(0),
        "a plaintext client reached the TLS-only broker"
    );
    record_figures(&format!(
        "tls: 3 orders completed through a TLS-only broker (stunnel on port {port})"
    ));
}

/// A supervised worker says "booted" on the descriptor its supervisor gave
/// it (`POOL_WORKER_READY_FD`, pool_worker/src/supervise/ready.rs) once it
/// can claim, before any order exists, and "done" at its clean exit, and
/// closes it. Its job
/// gets none of the worker's descriptors beyond the standard three: not
/// this one, nor librdkafka's wakeup pipes or whatever the worker's own
/// parent left open (docs/deploy.md).
#[test]
fn a_worker_says_booted_on_its_supervisors_pipe() {
    use std::io::Read as _;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::process::CommandExt as _;
    let broker = broker(1);
    let topic = broker.opts.orders_topic.clone();
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let mut cmd = command();
    cmd.envs(worker_env(&broker, 1))
        .env("POOL_WORKER_READY_FD", "3")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let w = write.as_raw_fd();
    // SAFETY: dup2 between fork and exec, onto the child's own descriptor 3
    // (which clears close-on-exec there).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(w, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(write);
    let err = forward_stderr("worker1".into(), child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut f = std::fs::File::from(read);
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    let _ = tx.send(Some(String::from_utf8_lossy(&got).into_owned()));
                }
            }
        }
        let _ = tx.send(None);
    });
    let said = rx.recv_timeout(T).expect("no word from the worker");
    assert_eq!(said.as_deref(), Some("booted\n"), "{}", err.last(20));
    // Booted and idle: now its order, which fails if its process has any
    // descriptor past the standard three (the shell's `[` is a builtin, so
    // /proc/self is the job's own process; the glob's own descriptor is
    // listed, and closed by the time it is tested).
    produce_orders(
        broker.bootstrap(),
        &topic,
        &[sh_order(
            "for f in /proc/self/fd/*; do n=${f##*/}; [ \"$n\" -le 2 ] || [ ! -e \"$f\" ] || { echo \"fd $n\" >&2; exit 7; }; done",
            None,
        )],
        Some(0),
    );
    let done = wait_completed(
        broker.bootstrap(),
        &broker.opts.coordination_topic,
        &[(0, 0)],
        T,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", err.last(20)));
    assert_eq!(
        done[0].outcome().map(|o| o.status),
        Some(Status::Ok),
        "the job had more than the standard descriptors: {:?}",
        done[0]
    );
    let status = wait_child(&mut child, T).expect("the worker did not exit");
    assert_eq!(status.code(), Some(0), "{}", err.last(20));
    // At its clean exit it says "done" (its standby may go), and the pipe
    // closes (at that word, or with the worker and its guard host at the
    // latest), nothing more said.
    assert_eq!(
        rx.recv_timeout(T),
        Ok(Some("booted\ndone\n".into())),
        "the worker's last word"
    );
    assert_eq!(
        rx.recv_timeout(T),
        Ok(None),
        "the pipe stayed open or more was said"
    );
}

/// `(ppid, comm)` of a live process, from /proc/PID/stat.
fn parent_and_name(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(") ")?;
    let comm = head.split_once(" (")?.1.to_string();
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, comm))
}

/// Workers are forked from the supervisor's fork server
/// (pool_worker/src/supervise/fork_server.rs), not exec'd: each is still a
/// new process per order, a child of the one server, which is the
/// supervisor's child. A new binary at the executable's path gets a new
/// server for the next start, and the old one exits once its last worker
/// has. The supervisor killed with SIGKILL takes the server and every
/// worker with it.
#[test]
fn workers_are_forked_by_a_fork_server_that_follows_the_binary_and_dies_with_the_supervisor() {
    let broker = broker(1);
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("pool_worker");
    std::fs::copy(bin(), &exe).unwrap();
    let mut env = broker.env();
    env.push(("ALLOWED_COMMANDS".into(), "sh".into()));
    let sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "1-2".into(),
        env,
        bin: Some(exe.clone()),
        ..SupervisorOpts::default()
    });
    let server_of = |pid: u32| {
        // Set up as a worker (it renames itself then) once it logs its boot.
        assert!(
            sup.stderr.wait_for(&format!("pid={pid} "), T),
            "worker {pid} did not boot: {}",
            sup.stderr.last(20)
        );
        let (server, comm) = parent_and_name(pid).expect("the worker runs");
        assert_eq!(comm, "pool_worker", "the worker's name");
        let (grand, name) = parent_and_name(server).expect("its parent runs");
        assert_eq!(
            (grand, name.as_str()),
            (sup.pid(), "pw-fork-server"),
            "worker {pid}'s parent {server} is not the supervisor's fork server"
        );
        server
    };
    let first = sup.wait_pid(1, T).expect("instance 1 runs");
    let second = sup.wait_pid(2, T).expect("instance 2 runs");
    let server = server_of(first);
    assert_eq!(server_of(second), server, "one server for all instances");

    // A new binary at the path (as an upgrade puts it: a new file renamed
    // over the old one), then an order: the next process comes from a new
    // server.
    let fresh = dir.path().join("pool_worker.new");
    std::fs::copy(bin(), &fresh).unwrap();
    std::fs::rename(&fresh, &exe).unwrap();
    let topic = broker.opts.orders_topic.clone();
    produce_orders(
        broker.bootstrap(),
        &topic,
        &[sh_order("true", None)],
        Some(0),
    );
    wait_completed(
        broker.bootstrap(),
        &broker.opts.coordination_topic,
        &[(0, 0)],
        T,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", sup.stderr.last(30)));
    sup.expect(
        "an instance restarted after its order",
        |s| s.total_starts() >= 3 && s.pids.len() == 2,
        T,
    );
    let s = sup.snapshot();
    let (done, still) = if s.starts(1) > 1 { (1, 2) } else { (2, 1) };
    let next = s.pid(done).unwrap();
    let new_server = server_of(next);
    assert_ne!(new_server, server, "the new binary got no new server");
    // The old server still forks nothing new but waits for its worker.
    assert_eq!(server_of(s.pid(still).unwrap()), server);

    // SIGKILL: nothing can clean up, and nothing is left.
    let everyone = [server, new_server, next, s.pid(still).unwrap()];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sup.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        poll_until(T, Duration::from_millis(20), || everyone
            .iter()
            .all(|&p| !alive(p as i32))),
        "left running after the supervisor's SIGKILL: {:?}",
        everyone
            .iter()
            .filter(|&&p| alive(p as i32))
            .collect::<Vec<_>>()
    );
}
