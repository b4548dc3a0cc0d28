//! Deterministic simulation: the real worker machines (src/worker.rs) of 10
//! instances against a simulated claims log, 1,000 orders, driven by a
//! seeded PRNG (splitmix64): random interleavings of reads, delivery delays
//! (an append waits until its instance is picked to deliver it), duplicate
//! deliveries (producer retries that land again later), crashes and
//! restarts (a crashed process's appends in flight land later or are lost),
//! and compaction below the same horizon as the model check (tests/pure/world).
//! The safety properties of tests/pure/model.rs are checked after every step;
//! every seed must end with all orders completed within a step bound (after
//! the crash window, crashes stop).
//!
//! `simulation_with_leases` runs the same world with leases (1,000 ms): a
//! simulated clock, Tick every lease/3, pauses of live processes past the
//! lease, hosts down for several leases, and the properties of leases (see
//! the test), with liveness checked strictly: an order that nobody holds,
//! behind the frontier and not completed, fails the seed at once. It runs
//! as harsh as the world allows: a revocation and its takeover claim land
//! (or are lost) separately, appends of dead processes land late, and
//! compaction spares only the records from each undecided claim on
//! (`HorizonRule::Claim`). Five bugs it found are fixed, each written up
//! in docs/protocol-history.md ("Holes found in leases"): a revoker dying
//! between its revocation and its takeover claim (R39); R32.2 yielding to a
//! rival that a
//! revocation then removed undecided; a taker yielding to a rival that had
//! itself yielded to the committed hold just taken over; a takeover claim
//! taken for late after compaction; a void record hiding a valid completion.
//! Its processes settle themselves (docs/protocol.md R16–R18;
//! `Phase::Settle`): a process whose predecessor did not exit clean waits
//! `SETTLE_MS` (300 ms) before its `booted`, one whose predecessor did is
//! given its clean-exit marker and boots once the log confirms it; a dead
//! process's appends land within 200 ms of its death or never; and one
//! landing after its successor's `booted` fails the seed
//! (`crate::world::SETTLED`; `settling_shorter_than_appends_in_flight_is_caught`
//! shows that this check bites).
//! `POOL_SIM_HORIZON=claim|contest|hold` varies the compaction horizon.
//!
//! `simulation_with_the_fence` fences instead of settling (R16);
//! `simulation_with_handed_boots` adds the handed boot (R16, "Handed
//! boot": a process's last completion carries its heir's `booted`, and
//! after a clean handing exit the heir starts unfenced), and
//! `simulation_with_handed_views` the handed view (R16, "Handed view":
//! the heir boots from the View its predecessor left it as it exited,
//! and reads on from that view's end, instead of from the newest
//! checkpoint; a start past the heir refuses it): 200 seeds of 300
//! orders, about 30,000 heirs booting from a handed view and 3,000 views
//! refused, every property held (a few seconds).
//! `handing_before_the_completion_is_caught_by_the_simulation` and
//! `a_heir_reading_past_its_booted_from_the_end_is_caught_by_the_simulation`
//! show that the checks bite.
//!
//! `simulation_with_clocks` (issue 33) runs it with each instance's clock
//! its own (offsets up to four leases, rates ±1 %) and cut-offs beside the
//! pauses, and checks that no two jobs of one order are ever live at once
//! (the guard freezes a job past its deadline, tests/pure/world);
//! `broken_guards_are_caught_by_the_simulation` shows the check bites
//! (`POOL_SIM_CLOCKS=1` replays one of its seeds).
//!
//! Idle instances take turns (docs/protocol.md R26–R31):
//! every simulation moves the clock (0–2 ms per step of ten instances) and
//! wakes a deferring process when its `CLAIM_DEFER_MS` (100 ms here) runs
//! out. Each run reports the claims records (leases apart), the rivals
//! (instances that claimed it), the claims made after a deferral and the
//! simulated time per order (one partition: a process exiting after its
//! order hardly ever heads the line here, unlike the bench's bursts over N
//! partitions, so this figure did not move with `exits`); `simulation_hundred_instances`
//! runs 100 instances with leases, pauses and outages.
//! `POOL_SIM_DEFER_MS=0` runs the herd instead, for comparison.
//!
//! `simulation_with_two_topics` runs both with the orders in two topics
//! (R57) at the same offsets, with the priority property;
//! `broken_priorities_are_caught_by_the_simulation` shows the checks bite.
//!
//! Both simulations write checkpoints every 40 positions and boot every
//! process from the newest one (src/checkpoint.rs), and the seeds take
//! turns with `ORDERS_PER_PROCESS` 1, 2 and 5 (a process goes on to the
//! next order after reading back its completion).
//!
//! CI: `cargo test --test pure simulation:: -- --nocapture` runs 1,000 seeds on two
//! threads (`POOL_SIM_SEEDS`, `POOL_SIM_FIRST` to change). A failing seed is
//! printed with the command that replays it alone:
//! `POOL_SIM_SEED=<seed> cargo test --test pure simulation::replay -- --nocapture`.

use crate::world::*;
use pool_worker_core::record::Topic;
use pool_worker_core::worker::{Phase, Terms};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

const INSTANCES: u32 = 10;
const ORDERS: u32 = 1_000;
const MAX_STEPS: u64 = 3_000_000;
/// Crashes happen only in the first this-many steps.
const CRASH_WINDOW: u64 = 200_000;
/// The lease of the simulation with leases (ms of the simulated clock,
/// which moves 0–2 ms per step).
const LEASE_MS: u64 = 1_000;
/// `CLAIM_DEFER_MS` of the simulation (ms of the simulated clock).
const CLAIM_DEFER_MS: u64 = 100;
/// Seeds and orders of the simulation with leases in CI (each process runs
/// one order and then replays the whole log at its next boot, so a seed's
/// cost grows with the square of its orders; fewer orders, more seeds).
const LEASE_SEEDS: u64 = 1_000;
const LEASE_ORDERS: u32 = 300;
/// Positions between checkpoints in the simulation (small, so that
/// processes boot from checkpoints all the time).
const CHECKPOINT_EVERY: u64 = 40;
/// The simulation with leases: `SETTLE_MS` of its processes, and how long
/// after its writer's death an orphan may still land (librdkafka's
/// `message.timeout.ms` against the default 15 s `SETTLE_MS`).
const SETTLE_MS: u64 = 300;
const ORPHAN_MS: u64 = 200;
/// Pauses per seed, at most.
const MAX_PAUSES: u32 = 40;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

fn config_leases() -> Config {
    Config {
        orders: LEASE_ORDERS,
        lease_ms: Some(LEASE_MS),
        // Boot reads go on in one step (tests/pure/world, `batch_reads`), so
        // that a boot does not outlast many leases of simulated time.
        batch_reads: true,
        // The rest as harsh as the world allows: a revocation and the
        // takeover claim after it land (or are lost) separately, appends
        // of dead processes land late, and compaction spares only the
        // records from each undecided claim on.
        late_appends: true,
        horizon: HorizonRule::Claim,
        // The machines settle themselves (Phase::Settle, clean-exit
        // markers) instead of the world dropping a dead process's orphans
        // when its instance starts again; orphans land within ORPHAN_MS of
        // their writer's death or never, and one landing after its
        // writer's successor booted fails the seed (crate::world::SETTLED).
        settle: false,
        settle_ms: Some(SETTLE_MS),
        orphan_ms: ORPHAN_MS,
        ..config()
    }
}

fn config() -> Config {
    Config {
        instances: INSTANCES,
        orders: ORDERS,
        max_crashes: 30,
        max_dups: 30,
        compaction: true,
        horizon: HorizonRule::Claim,
        flaw: None,
        restart_crashed: true,
        settle: true,
        fence: false,
        handover: false,
        handed_view: false,
        handed_view_skips: None,
        settle_ms: None,
        orphan_ms: 0,
        batch_reads: false,
        lease_ms: None,
        max_jumps: 0,
        forge_seen: false,
        late_appends: true,
        // Processes checkpoint and boot from the newest checkpoint.
        checkpoint_every: Some(CHECKPOINT_EVERY),
        // Varied by seed in `run_world`.
        orders_per_process: 1,
        causal: false,
        // Kafka's lag outlasts an append in flight (tests/pure/world,
        // `World::in_flight_claim_orders`; with the contest and hold
        // horizons: the claim horizon, the default here, keeps everything
        // after each instance's newest `booted` anyway).
        protect_in_flight: true,
        // Kafka's log cleaner may pass a process replaying the log (R42):
        // it reads older records before its place than after it.
        cleaner_passes_replays: true,
        max_forgeries: 0,
        claims_key: None,
        trust_all: false,
        // Idle instances defer to the one first in an order's line for
        // CLAIM_DEFER_MS of simulated time per instance ahead
        // (POOL_SIM_DEFER_MS=0: the herd, as before the rule).
        claim_defer_ms: env("POOL_SIM_DEFER_MS", CLAIM_DEFER_MS),
        restart_idle: true,
        clocked: true,
        max_cancels: 0,
        shared_cancel_key: false,
        clocks: Vec::new(),
        guard_in_loop: false,
        jump_ms: None,
        judge_leases: true,
        random_clocks: None,
        cut_offs: false,
        terms: Vec::new(),
        key_concurrency: 1,
        topics: vec![Topic::MAIN],
    }
}

#[derive(Default)]
struct Outcome {
    steps: u64,
    crashes: u32,
    pauses: u32,
    outages: u32,
    takeovers: u32,
    second_runs_takeover: u32,
    second_runs_death: u32,
    stale_runs: u32,
    cuts: u32,
    freezes: u32,
    thaws: u32,
    starts_marked: u32,
    starts_unmarked: u32,
    /// Processes started as their predecessor's heir (R16, "Handed boot").
    starts_handed: u32,
    /// Views handed to a heir that it booted from, and views dropped at a
    /// start past the heir, refused (R16, "Handed view").
    views_loaded: u32,
    views_refused: u32,
    /// Parks (valid `parked` records) and jobs started after one.
    parks: u32,
    unparked_runs: u32,
    clock_ms: u64,
    /// Orders, the records of the claims log that name one (claims,
    /// decisions, revocations, completions, void ones included; lease
    /// renewals apart: they grow with the time an order is held),
    /// the claims among them, and the instances that claimed each order
    /// (rivals), summed over the orders.
    orders: u64,
    order_records: u64,
    leases: u64,
    claims: u64,
    rivals: u64,
    /// Claims made after deferring to instances ahead in the order's line
    /// (they name them in `passed_over`).
    deferred: u64,
    /// The failure, readable.
    failure: Option<String>,
}

/// Each instance's clock for this seed (`Config::random_clocks`), drawn
/// from a generator of its own, so that the schedule's draws are those of
/// the seed without clocks.
fn draw_clocks(seed: u64, cfg: &Config) -> Vec<(u64, i64)> {
    let Some((offset, ppm)) = cfg.random_clocks else {
        return cfg.clocks.clone();
    };
    let mut rng = Rng(seed ^ 0xc10c_c10c_c10c_c10c);
    (0..cfg.instances)
        .map(|_| {
            let rate = rng.below(2 * ppm as u64 + 1) as i64 - ppm;
            (rng.below(offset + 1), rate)
        })
        .collect()
}

fn run(seed: u64, cfg: &Config) -> Outcome {
    run_world(seed, cfg).0
}

/// A flaw's seed that failed holds with the same config without the flaw
/// (so the flaw, not the seed, broke the property).
fn holds_without_the_flaw(seed: u64, cfg: &Config) {
    let fixed = Config {
        flaw: None,
        ..cfg.clone()
    };
    holds(seed, &fixed, "without the flaw too");
}

/// Seed `seed` of `cfg` holds; else fails saying it "fails {what}".
fn holds(seed: u64, cfg: &Config, what: &str) {
    if let Some(f) = run(seed, cfg).failure {
        panic!("seed {seed} fails {what}:\n{f}");
    }
}

/// Runs one seed; returns the outcome and the world where it ended.
fn run_world(seed: u64, cfg: &Config) -> (Outcome, World) {
    // Seeds take turns with ORDERS_PER_PROCESS 1 (seed 002), 2 and 5.
    let cfg = &Config {
        orders_per_process: [1, 2, 5][(seed % 3) as usize],
        clocks: draw_clocks(seed, cfg),
        ..cfg.clone()
    };
    let mut rng = Rng(seed);
    let mut w = World::new(cfg);
    let mut steps = 0u64;
    let mut recent: Vec<Step> = Vec::new();
    let mut choices = Vec::new();
    let fail = |w: &World, steps: u64, recent: &[Step], why: String| {
        let from = w.log.len().saturating_sub(40);
        let mut s = format!("seed {seed}: {why} after {steps} steps\nlast steps: {recent:?}\nlast {} of {} log records:\n", w.log.len() - from, w.log.len());
        for p in from..w.log.len() {
            s.push_str(&w.describe_entry(p));
            s.push('\n');
        }
        s.push_str("processes:\n");
        s.push_str(&w.describe_processes());
        s.push_str("claimed orders not completed:\n");
        s.push_str(&w.describe_open_orders());
        let leases = if cfg.lease_ms.is_some() {
            "POOL_SIM_LEASES=1 "
        } else {
            ""
        };
        s.push_str(&format!("replay: {leases}POOL_SIM_SEED={seed} cargo test --test pure simulation::replay -- --nocapture\n"));
        s
    };
    let done = |w: &World, steps: u64, failure: Option<String>| Outcome {
        steps,
        crashes: w.crashes,
        pauses: w.pauses,
        outages: w.outages,
        takeovers: w.takeovers,
        second_runs_takeover: w.second_runs_takeover,
        second_runs_death: w.second_runs_death,
        stale_runs: w.stale_runs,
        cuts: w.cuts,
        freezes: w.freezes,
        thaws: w.thaws,
        starts_marked: w.starts_marked,
        starts_handed: w.starts_handed,
        views_loaded: w.views_loaded,
        views_refused: w.views_refused,
        starts_unmarked: w.starts_unmarked,
        parks: w.parks,
        unparked_runs: w.unparked_runs,
        clock_ms: w.now,
        orders: cfg.orders as u64,
        order_records: w
            .log
            .iter()
            .filter(|e| {
                e.rec.order().is_some() && e.rec.event() != pool_worker_core::record::Event::Lease
            })
            .count() as u64,
        leases: w
            .log
            .iter()
            .filter(|e| e.rec.event() == pool_worker_core::record::Event::Lease)
            .count() as u64,
        claims: w
            .log
            .iter()
            .filter(|e| e.rec.event() == pool_worker_core::record::Event::Claimed)
            .count() as u64,
        rivals: {
            let mut pairs: Vec<_> = w
                .log
                .iter()
                .filter(|e| e.rec.event() == pool_worker_core::record::Event::Claimed)
                .map(|e| (e.rec.order(), e.rec.instance))
                .collect();
            pairs.sort();
            pairs.dedup();
            pairs.len() as u64
        },
        deferred: w
            .log
            .iter()
            .filter(|e| {
                e.rec.event() == pool_worker_core::record::Event::Claimed
                    && !e.rec.passed_over().is_empty()
            })
            .count() as u64,
        failure,
    };
    while !w.all_completed(cfg) {
        if steps >= MAX_STEPS {
            let why = format!(
                "only {} of {} orders completed within {MAX_STEPS} steps",
                w.completed, cfg.orders
            );
            let f = fail(&w, steps, &recent, why);
            return (done(&w, steps, Some(f)), w);
        }
        if cfg.settle_ms.is_some() {
            w.expire_orphans(cfg.orphan_ms);
        }
        let step = pick(&mut rng, &w, cfg, steps, &mut choices);
        if let (Some(Step::Advance(_)), true) = (&step, cfg.lease_ms.is_some()) {
            // Nothing moves but the clock: an order that nobody holds, that
            // is behind the frontier and not completed will never be.
            let stranded = w.stranded();
            if !stranded.is_empty() && w.quiet() {
                let why = format!(
                    "stranded: {stranded:?} held by nobody, behind the frontier, not completed"
                );
                let f = fail(&w, steps, &recent, why);
                return (done(&w, steps, Some(f)), w);
            }
        }
        let Some(step) = step else {
            let why = format!(
                "stuck: no step possible, {} of {} orders completed",
                w.completed, cfg.orders
            );
            let f = fail(&w, steps, &recent, why);
            return (done(&w, steps, Some(f)), w);
        };
        w.step(cfg, &step);
        steps += 1;
        // 0-2 ms per step; with more than 10 instances, per step of ten
        // instances (a step moves one instance: time must not run faster
        // for each process because there are more of them).
        if cfg.clocked && (cfg.instances <= 10 || rng.below(cfg.instances as u64) < 10) {
            w.now += rng.below(3);
        }
        if recent.len() == 30 {
            recent.remove(0);
        }
        recent.push(step);
        if let Some((prop, what)) = &w.violation {
            let why = format!("violated \"{prop}\": {what}");
            let f = fail(&w, steps, &recent, why);
            return (done(&w, steps, Some(f)), w);
        }
    }
    (done(&w, steps, None), w)
}

fn pick(
    rng: &mut Rng,
    w: &World,
    cfg: &Config,
    steps: u64,
    choices: &mut Vec<Step>,
) -> Option<Step> {
    let live = |i: u32| w.insts[i as usize - 1].worker.is_some();
    // The shell's timer: every lease/3 (with leases), and at the time a
    // process asked for (Action::WakeAt: the end of a deferral, of a
    // settling wait), to a process that is not frozen.
    let due = (1..=cfg.instances).find(|&i| {
        let inst = &w.insts[i as usize - 1];
        let timer = (cfg.lease_ms.is_some() && w.now >= inst.next_tick)
            || inst.wake_at.is_some_and(|t| w.now >= t);
        inst.worker.is_some() && w.now >= inst.frozen_until && timer
    });
    if let Some(i) = due {
        return Some(Step::Tick(i));
    }
    if let Some(lease) = cfg.lease_ms {
        if steps < CRASH_WINDOW && w.pauses + w.cuts < MAX_PAUSES && rng.one_in(500) {
            // A GC pause or a partition: often shorter than the lease,
            // sometimes up to three leases.
            // Mostly a process that holds an order (most processes are
            // booting: each process runs one order, then exits).
            let holding = |i: &u32| {
                w.insts[*i as usize - 1].worker.as_ref().is_some_and(|p| {
                    matches!(
                        p.phase,
                        Phase::Negotiate { .. }
                            | Phase::Decide { .. }
                            | Phase::Retry { .. }
                            | Phase::Run { .. }
                    )
                })
            };
            let holders: Vec<u32> = (1..=cfg.instances).filter(holding).collect();
            let i = if !holders.is_empty() && !rng.one_in(4) {
                holders[rng.below(holders.len() as u64) as usize]
            } else {
                1 + rng.below(cfg.instances as u64) as u32
            };
            if live(i) {
                let ms = if rng.one_in(2) {
                    lease + rng.below(2 * lease)
                } else {
                    rng.below(lease * 2 / 3)
                };
                // Half of them, with cut-offs: the process is cut off from
                // the brokers instead (its loop and its guard go on).
                if cfg.cut_offs && rng.one_in(2) {
                    return Some(Step::Cut(i, ms));
                }
                return Some(Step::Pause(i, ms));
            }
        }
    }
    let crash_rate = if cfg.lease_ms.is_some() { 1_000 } else { 3_000 };
    if steps < CRASH_WINDOW && w.crashes < cfg.max_crashes && rng.one_in(crash_rate) {
        let i = 1 + rng.below(cfg.instances as u64) as u32;
        if live(i) {
            // With leases, a third of the crashes keep the host down for
            // one to four leases, so that its holds expire.
            if let Some(lease) = cfg.lease_ms.filter(|_| rng.one_in(3)) {
                return Some(Step::Outage(i, lease + rng.below(3 * lease)));
            }
            return Some(Step::Crash(i));
        }
    }
    // An operator cancels an order (`pool_worker cancel`): one waiting,
    // one running, or one completed long ago.
    if w.cancels < cfg.max_cancels && steps < CRASH_WINDOW && rng.one_in(1_000) {
        // Half of them aimed at an order whose job runs now.
        let running: Vec<_> = w.insts.iter().filter_map(|i| i.running).collect();
        if !running.is_empty() && rng.one_in(2) {
            let k = rng.below(running.len() as u64) as usize;
            return Some(Step::Cancel(running[k]));
        }
        let o = rng.below(cfg.orders as u64) as i64;
        return Some(Step::Cancel(pool_worker_core::record::OrderId::new(0, o)));
    }
    if rng.one_in(400) && !w.erasable(cfg).is_empty() {
        return Some(Step::Compact);
    }
    if !w.orphans.is_empty() && rng.one_in(40) {
        let k = rng.below(w.orphans.len() as u64) as usize;
        return Some(if rng.one_in(4) {
            Step::Lose(k)
        } else {
            Step::Land(k)
        });
    }
    // A random instance, then a random step of it; a few tries before
    // falling back to any instance that can move.
    for _ in 0..8 {
        let i = 1 + rng.below(cfg.instances as u64) as u32;
        choices.clear();
        w.instance_steps(i, choices);
        // A host gone while idle stays gone (`Config::restart_idle`).
        choices.retain(|s| !matches!(s, Step::Start(j) if w.stays_down(cfg, *j)));
        if choices.is_empty() {
            continue;
        }
        let s = choices[rng.below(choices.len() as u64) as usize].clone();
        if let Step::Deliver(i) = s {
            if w.dups < cfg.max_dups && rng.one_in(300) {
                return Some(Step::DeliverDup(i));
            }
        }
        // With the handed boot, now and then the standby named heir dies
        // before it runs (`Step::StartPastHeir`, a crash). No draw
        // without it, so that the other configurations' seeds are as
        // before.
        if let Step::Start(i) = s {
            if w.past_heir(cfg, i) && rng.one_in(10) {
                return Some(Step::StartPastHeir(i));
            }
        }
        return Some(s);
    }
    w.fair_step(cfg)
        .or_else(|| (!w.orphans.is_empty()).then_some(Step::Land(0)))
        // Everyone frozen, down or deferring: time passes.
        .or_else(|| cfg.clocked.then_some(Step::Advance(10)))
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn simulation_many_seeds() {
    let seeds = env("POOL_SIM_SEEDS", 1_000);
    let first = env("POOL_SIM_FIRST", 0);
    let t = Instant::now();
    let cfg = config();
    let (ran, tot, failures) = run_seeds(&cfg, first, seeds);
    let line = format!(
        "simulation: {ran} seeds ({} instances, {} orders each), {} steps, {} crashes, {}, {} failing, in {:.1}s",
        INSTANCES,
        ORDERS,
        tot.steps,
        tot.crashes,
        per_order(&tot, &cfg),
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    report(&line, &failures);
}

/// Claims records and rivals per order (issue 16: about three records,
/// claimed, committed and completed, whatever the number of idle
/// instances), claims made after a deferral, and simulated time per order
/// (the orders are all there from the start: a burst).
fn per_order(tot: &Outcome, cfg: &Config) -> String {
    let n = tot.orders.max(1) as f64;
    format!(
        "CLAIM_DEFER_MS {}: {:.2} claims records per order ({:.2} claims; leases apart, {:.2}), {:.2} rivals per order, {:.3} claims after a deferral per order, {:.1} simulated ms per order",
        cfg.claim_defer_ms,
        tot.order_records as f64 / n,
        tot.claims as f64 / n,
        tot.leases as f64 / n,
        tot.rivals as f64 / n,
        tot.deferred as f64 / n,
        tot.clock_ms as f64 / n
    )
}

/// Seeds and orders of the 100-instance simulation in CI.
const HUNDRED_SEEDS: u64 = 20;
const HUNDRED_ORDERS: u32 = 200;

/// The simulation with leases (pauses, outages, strict liveness: see
/// [`simulation_with_leases`]) with 100 instances, most of them idle most
/// of the time: one order must still cost about three claims records, and
/// a preferred instance that is paused or down only delays its orders
/// (`POOL_SIM_HUNDRED_SEEDS`, `POOL_SIM_FIRST` change the seeds).
#[test]
fn simulation_hundred_instances() {
    let seeds = env("POOL_SIM_HUNDRED_SEEDS", HUNDRED_SEEDS);
    let first = env("POOL_SIM_FIRST", 0);
    let cfg = Config {
        instances: 100,
        orders: HUNDRED_ORDERS,
        ..config_leases()
    };
    leased_seeds(
        &cfg,
        first,
        seeds,
        "simulation with 100 instances and leases",
    );
}

/// Runs seeds `first..first + seeds` on two threads (stopping at the first
/// failure); returns how many ran, their totals and the failures.
fn run_seeds(cfg: &Config, first: u64, seeds: u64) -> (u64, Outcome, Vec<String>) {
    let next = AtomicU64::new(first);
    let totals: Mutex<Outcome> = Mutex::new(Outcome::default());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= first + seeds || !failures.lock().unwrap().is_empty() {
                    break;
                }
                let out = run(seed, cfg);
                let mut tot = totals.lock().unwrap();
                tot.steps += out.steps;
                tot.crashes += out.crashes;
                tot.pauses += out.pauses;
                tot.outages += out.outages;
                tot.takeovers += out.takeovers;
                tot.second_runs_takeover += out.second_runs_takeover;
                tot.second_runs_death += out.second_runs_death;
                tot.stale_runs += out.stale_runs;
                tot.cuts += out.cuts;
                tot.freezes += out.freezes;
                tot.thaws += out.thaws;
                tot.starts_marked += out.starts_marked;
                tot.starts_handed += out.starts_handed;
                tot.views_loaded += out.views_loaded;
                tot.views_refused += out.views_refused;
                tot.starts_unmarked += out.starts_unmarked;
                tot.parks += out.parks;
                tot.unparked_runs += out.unparked_runs;
                tot.clock_ms += out.clock_ms;
                tot.orders += out.orders;
                tot.order_records += out.order_records;
                tot.leases += out.leases;
                tot.claims += out.claims;
                tot.rivals += out.rivals;
                tot.deferred += out.deferred;
                drop(tot);
                if let Some(f) = out.failure {
                    failures.lock().unwrap().push(f);
                }
            });
        }
    });
    let ran = (next.load(Ordering::Relaxed) - first).min(seeds);
    (
        ran,
        totals.into_inner().unwrap(),
        failures.into_inner().unwrap(),
    )
}

/// Prints and records the figures line, then each failure; fails the test
/// if there is any.
fn report(line: &str, failures: &[String]) {
    println!("{line}");
    crate::world::record_figures(line);
    for f in failures {
        println!("{f}");
    }
    assert!(
        failures.is_empty(),
        "{} failing seed(s); first:\n{}",
        failures.len(),
        failures[0]
    );
}

/// The simulation with leases (`LEASE_MS`): the clock moves 0–2 ms per
/// step, every live process that is not frozen gets Tick every lease/3,
/// processes freeze for up to three leases (`Step::Pause`) and crashed hosts
/// stay down for up to four (`Step::Outage`), so holds expire while their
/// process lives and while it is gone; idle instances and waiting
/// negotiators revoke them and take their orders over. The properties with
/// leases (tests/pure/world): an order is run again only after the earlier run
/// ended by a valid revocation or its runner's death; no run after reading
/// one's own revocation; never two valid committed holds on one order; a
/// revocation is valid only if the hold wrote nothing within the lease
/// before it; and the properties of the simulation without leases.
/// `POOL_SIM_LEASE_SEEDS`, `POOL_SIM_FIRST` change the seeds.
#[test]
fn simulation_with_leases() {
    let seeds = env("POOL_SIM_LEASE_SEEDS", LEASE_SEEDS);
    let first = env("POOL_SIM_FIRST", 0);
    leased_seeds(&config_leases(), first, seeds, "simulation with leases");
}

/// Issue 33 (R36 reader-clock leases, R53 jeopardy and the guard): the
/// simulation with leases, where each instance's clock is its own (per
/// seed, an offset of up to four leases — ±2 leases around a common
/// middle — and a rate error of up to ±1 %, `CLOCK_PPM`), and half the
/// pauses are cut-offs instead (`Step::Cut`: the process's appends do not
/// land and it reads nothing, but it ticks, its job runs and its guard
/// goes on). Checked after every step besides the properties with leases:
/// no two jobs of one order are live at once (`RUN_CONCURRENTLY`).
fn config_clocks() -> Config {
    Config {
        random_clocks: Some((
            4 * LEASE_MS,
            env("POOL_SIM_CLOCK_PPM", CLOCK_PPM as u64) as i64,
        )),
        cut_offs: true,
        orders: CLOCK_ORDERS,
        ..config_leases()
    }
}

/// Rate error of the simulation's clocks, at most, either way (parts per
/// million): 1 %. Safety needs `(1 − ε) L > (1 + ε) 2/3 L` plus the time a
/// freeze takes: ε below 1/5 with an instant freeze (as here); at 1 % the
/// job is frozen at least 0.31 L before anyone can revoke.
const CLOCK_PPM: i64 = 10_000;
const CLOCK_SEEDS: u64 = 1_000;
const CLOCK_ORDERS: u32 = 300;

/// `POOL_SIM_CLOCK_SEEDS`, `POOL_SIM_FIRST` change the seeds,
/// `POOL_SIM_CLOCK_PPM` the rate error.
#[test]
fn simulation_with_clocks() {
    let seeds = env("POOL_SIM_CLOCK_SEEDS", CLOCK_SEEDS);
    let first = env("POOL_SIM_FIRST", 0);
    leased_seeds(
        &config_clocks(),
        first,
        seeds,
        "simulation with clocks (offsets ≤4 leases, rates ±1 %), cut-offs and the guard",
    );
}

/// The broken rules of issue 33, each caught by the simulation with clocks
/// as two live jobs of one order (`RUN_CONCURRENTLY`): ages from the
/// writer's `ts` (`Flaw::AgeFromTs`; `LEASE_RESPECTED` not judged, so the
/// seed goes on to the two jobs), no jeopardy (`Flaw::NoJeopardy`), a
/// guard that freezes only when the worker's loop runs
/// (`Config::guard_in_loop`). Bounded: at most 100 seeds of 100 orders each.
#[test]
fn broken_guards_are_caught_by_the_simulation() {
    use pool_worker_core::worker::Flaw;
    let base = Config {
        orders: 100,
        ..config_clocks()
    };
    let cases = [
        (
            "AgeFromTs",
            Config {
                flaw: Some(Flaw::AgeFromTs),
                judge_leases: false,
                ..base.clone()
            },
        ),
        (
            "NoJeopardy",
            Config {
                flaw: Some(Flaw::NoJeopardy),
                ..base.clone()
            },
        ),
        (
            "guard frozen only by the worker's loop",
            Config {
                guard_in_loop: true,
                ..base.clone()
            },
        ),
    ];
    for (name, cfg) in cases {
        caught_as_concurrent_runs(&format!("broken {name}"), &cfg);
    }
}

/// Runs seeds 0 to 99 of `cfg` until one fails; records the figure and
/// asserts that it failed as two live runs of one order
/// (`RUN_CONCURRENTLY`), not on another property first.
fn caught_as_concurrent_runs(name: &str, cfg: &Config) {
    let t = Instant::now();
    let caught = (0..100).find_map(|seed| run(seed, cfg).failure.map(|f| (seed, f)));
    let Some((seed, f)) = caught else {
        panic!("{name}: 100 seeds and no violation: the check does not bite");
    };
    let first = f.lines().next().unwrap_or_default().to_string();
    let line = format!(
        "simulation, {name}: caught at seed {seed} in {:.1}s: {first}",
        t.elapsed().as_secs_f64()
    );
    println!("{line}");
    crate::world::record_figures(&line);
    assert!(
        f.contains(RUN_CONCURRENTLY),
        "{name}: another property broke first:\n{f}"
    );
}

/// The margin's assumption bites: with clock rates off by up to ±45 %
/// (beyond the 1/5 that `(1 − ε) L > (1 + ε) 2/3 L` allows), a fast
/// reader revokes a slow holder whose job is not frozen yet, and the two
/// jobs are live at once. (At ±30 % 100 seeds no longer found one once
/// renewals came exactly a third of a lease apart, `Action::WakeAt`: the
/// slow holder's renewals then rarely leave it the gap.) Bounded: at most
/// 100 seeds of 100 orders.
#[test]
fn clock_rates_beyond_the_margin_are_caught() {
    let cfg = Config {
        random_clocks: Some((4 * LEASE_MS, 450_000)),
        orders: 100,
        ..config_clocks()
    };
    caught_as_concurrent_runs("clock rates ±45 %", &cfg);
}

/// R10, R42: Kafka's log cleaner passes a process that replays the log
/// (`Config::cleaner_passes_replays`): before its place the replay has read
/// an instance's older `booted` and claim, after it the cleaner erased that
/// claim's completion and the next incarnation's `booted`. Records that do
/// not name their writer's `booted` (`Flaw::NoBootedAt`, as before R10 said
/// so) make that next incarnation look fenced: its claim of another order
/// is void, the old hold stays open, and the instance runs its order again
/// (found on Apache Kafka by `apache_compaction`, an order completed twice).
/// The same seed holds without the flaw, and the flaw alone breaks nothing
/// where the cleaner waits for every reader. Bounded: at most 60 seeds.
#[test]
fn a_replay_passed_by_the_cleaner_is_caught_without_booted_at() {
    use pool_worker_core::worker::Flaw;
    let cfg = Config {
        flaw: Some(Flaw::NoBootedAt),
        ..config()
    };
    let t = Instant::now();
    let caught = (0..60).find_map(|seed| run(seed, &cfg).failure.map(|f| (seed, f)));
    let Some((seed, f)) = caught else {
        panic!("60 seeds with Flaw::NoBootedAt and no violation: the check does not bite");
    };
    println!("NoBootedAt caught, as it must be (seed {seed}):\n{f}");
    assert!(
        f.contains(RUN_TWICE) || f.contains(RUN_BY_TWO) || f.contains(COMPLETED_TWICE),
        "another property broke first:\n{f}"
    );
    holds_without_the_flaw(seed, &cfg);
    let patient = Config {
        cleaner_passes_replays: false,
        ..cfg.clone()
    };
    holds(
        seed,
        &patient,
        "with the flaw where the cleaner waits for readers too",
    );
    crate::world::record_figures(&format!(
        "simulation: Flaw::NoBootedAt caught at seed {seed} (cleaner passing replays), in {:.1}s",
        t.elapsed().as_secs_f64()
    ));
}

/// The settle rule bites (docs/protocol.md R16, I7): where a dead
/// process's appends may land longer after its death than its successor
/// waits, a seed soon has one land after the successor's `booted`, and
/// `crate::world::SETTLED` catches it. Bounded: at most 200 seeds of 100 orders.
#[test]
fn settling_shorter_than_appends_in_flight_is_caught() {
    let cfg = Config {
        settle_ms: Some(20),
        orphan_ms: 2_000,
        orders: 100,
        ..config_leases()
    };
    for seed in 0..200 {
        if let Some(f) = run(seed, &cfg).failure {
            // (Its replay line would replay the CI configuration instead.)
            let f: String = f
                .lines()
                .filter(|l| !l.starts_with("replay:"))
                .map(|l| format!("{l}\n"))
                .collect();
            println!("caught, as it must be (SETTLE_MS 20, orphans for 2,000 ms):\n{f}");
            assert!(f.contains(SETTLED), "another property broke first:\n{f}");
            return;
        }
    }
    panic!("200 seeds with SETTLE_MS below the orphans' lifetime and no violation: the check does not bite");
}

/// The fence (docs/protocol.md R16) instead of settling, with leases,
/// pauses, outages, late appends and compaction: a new process starts in
/// `Phase::Fence`, the dead process's orphans may land until its successor's
/// fence (`Step::Fence`, taken at a random moment like any step) drops
/// them, and one landing after the successor's `booted` fails the seed
/// (`SETTLED`). `POOL_SIM_FENCE_SEEDS` changes the seeds.
#[test]
fn simulation_with_the_fence() {
    let cfg = fenced_leases(false);
    let seeds = env("POOL_SIM_FENCE_SEEDS", 200);
    let first = env("POOL_SIM_FIRST", 0);
    leased_seeds(&cfg, first, seeds, "simulation with the fence");
}

/// The simulation with leases, fencing instead of settling (R16), with or
/// without the handed boot (`Config::handover`).
fn fenced_leases(handover: bool) -> Config {
    Config {
        settle: false,
        settle_ms: None,
        fence: true,
        handover,
        ..config_leases()
    }
}

/// The handed boot (docs/protocol.md R16, "Handed boot") in the
/// simulation with the fence above: every process is told its heir, its
/// last completion carries the heir's `booted` in one transaction, and
/// after a clean handing exit the heir starts with no fence
/// (`Input::Handed`); after a crash, an outage or a revocation the next
/// process fences as before, and so does another incarnation when the
/// heir's standby dies before it runs (now and then at a restart,
/// `Step::StartPastHeir`). Every property holds and every order is
/// completed. `POOL_SIM_FENCE_SEEDS` changes the seeds.
#[test]
fn simulation_with_handed_boots() {
    let cfg = fenced_leases(true);
    let seeds = env("POOL_SIM_FENCE_SEEDS", 200);
    let first = env("POOL_SIM_FIRST", 0);
    leased_seeds(&cfg, first, seeds, "simulation with handed boots");
}

/// The handed view (docs/protocol.md R16, "Handed view") in the
/// simulation with handed boots above: a process that hands over leaves
/// its heir its View as it exits (after reading back its last
/// `completed`), and the heir boots from it (`Worker::load_handed`)
/// instead of from the newest checkpoint in the log, reading on from the
/// view's end; a start past the heir (`Step::StartPastHeir`) drops the
/// view, which the machine refuses, and boots from the newest checkpoint.
/// Checkpoints every 40 positions go on (R23 counts from where the giver
/// knew the newest one). Every property holds, every order is completed,
/// and views were loaded (and refused). `POOL_SIM_FENCE_SEEDS` changes
/// the seeds.
#[test]
fn simulation_with_handed_views() {
    let cfg = Config {
        handed_view: true,
        ..fenced_leases(true)
    };
    let seeds = env("POOL_SIM_FENCE_SEEDS", 200);
    let first = env("POOL_SIM_FIRST", 0);
    let tot = leased_seeds(&cfg, first, seeds, "simulation with handed views");
    assert!(tot.views_loaded > 0, "no heir booted from a handed view");
    assert_eq!(
        tot.views_loaded, tot.starts_handed,
        "a handed start without its view"
    );
}

/// A heir that reads its own `booted` and then on from the log's end
/// instead of from the end of the view it was handed
/// (`ViewSkip::PastBooted`, against docs/protocol.md R16, "Handed view")
/// boots on a View missing what the other instances wrote meanwhile, and
/// is caught by the simulation too: it claims an order another instance
/// claimed in between, meets no rival in its View, and runs it beside
/// that instance (`RUN_BY_TWO`). Bounded: at most 200 seeds of 100 orders.
/// (`ViewSkip::ToEnd`, which skips the heir's own `booted` too, leaves
/// every heir waiting for it for ever: the seed runs to its step bound,
/// too long for CI; the model check catches it, tests/pure/model.rs.)
#[test]
fn a_heir_reading_past_its_booted_from_the_end_is_caught_by_the_simulation() {
    let cfg = Config {
        handed_view: true,
        handed_view_skips: Some(ViewSkip::PastBooted),
        orders: 100,
        ..fenced_leases(true)
    };
    for seed in 0..200 {
        if let Some(f) = run(seed, &cfg).failure {
            let first = f.lines().next().unwrap_or_default().to_string();
            println!(
                "caught, as it must be (a heir reading past its booted from the end): {first}"
            );
            assert!(f.contains(RUN_BY_TWO), "another property broke first:\n{f}");
            return;
        }
    }
    panic!("200 seeds with heirs reading past their booted from the end and no violation: the check does not bite");
}

/// Handing the heir its `booted` before the last completion, in a
/// transaction of its own (`Flaw::HandBeforeCompletion`, against
/// docs/protocol.md R16, "Handed boot"), is caught by the simulation too:
/// an order is run again by the next process of its runner's instance
/// (`RUN_TWICE`; seed 0 already). Bounded: at most 200 seeds of 100
/// orders.
#[test]
fn handing_before_the_completion_is_caught_by_the_simulation() {
    let cfg = Config {
        flaw: Some(pool_worker_core::worker::Flaw::HandBeforeCompletion),
        orders: 100,
        ..fenced_leases(true)
    };
    for seed in 0..200 {
        if let Some(f) = run(seed, &cfg).failure {
            let first = f.lines().next().unwrap_or_default().to_string();
            println!("caught, as it must be (handed before the completion): {first}");
            // The order is run again (the model check's catch, also with
            // leases), or the void completion, left in flight by its
            // fenced writer, lands after the heir's `booted`.
            assert!(
                f.contains(RUN_TWICE) || f.contains(SETTLED),
                "another property broke first:\n{f}"
            );
            return;
        }
    }
    panic!("200 seeds handing before the completion and no violation: the check does not bite");
}

/// The fence bites in the simulation too: a process that appends `booted`
/// before its fence completes (`Flaw::BootBeforeFence`) soon has a dead
/// process's append land after its `booted` (`SETTLED`). Bounded: at most
/// 200 seeds of 100 orders.
#[test]
fn booting_before_the_fence_is_caught_by_the_simulation() {
    let cfg = Config {
        settle: false,
        settle_ms: None,
        fence: true,
        flaw: Some(pool_worker_core::worker::Flaw::BootBeforeFence),
        orders: 100,
        ..config_leases()
    };
    for seed in 0..200 {
        if let Some(f) = run(seed, &cfg).failure {
            let first = f.lines().next().unwrap_or_default().to_string();
            println!("caught, as it must be (booted before the fence): {first}");
            assert!(f.contains(SETTLED), "another property broke first:\n{f}");
            return;
        }
    }
    panic!("200 seeds booting before the fence and no violation: the check does not bite");
}

/// The broken variant of taking turns, `Flaw::DeferForever` (an idle
/// instance never claims out of its turn), strands an order once the
/// instance first in its line is gone: the simulation's strict liveness
/// catches it when an instance that crashed idle stays down
/// (`Config::restart_idle` false: a host gone while idle; the simulation
/// keeps it down, `World::stays_down`, as the fair schedule does). Until
/// the machine owned "look again when caught up while idle"
/// (`Worker::on_caught_up`), the world asked only for deferring machines,
/// and this check passed for that reason, not this one: the flaw left
/// nobody deferring, so nobody asked, with or without a host gone.
#[test]
fn defer_forever_is_caught_by_the_simulation() {
    let cfg = Config {
        flaw: Some(pool_worker_core::worker::Flaw::DeferForever),
        restart_idle: false,
        orders: 60,
        ..config_leases()
    };
    for seed in 0..300 {
        if let Some(f) = run(seed, &cfg).failure {
            let f: String = f
                .lines()
                .filter(|l| !l.starts_with("replay:"))
                .map(|l| format!("{l}\n"))
                .collect();
            println!("caught, as it must be (seed {seed}):\n{f}");
            // And the same seeds hold without the flaw.
            holds_without_the_flaw(seed, &cfg);
            return;
        }
    }
    panic!("300 seeds with DeferForever and instances gone while idle, and no violation: the check does not bite");
}

/// R34's broken variant (`Flaw::FuseDespiteRival`: a claimant runs on
/// reading its claim back although a rival's claim came first) is caught
/// by the simulation as two runs of one order, and the same seed holds
/// without it.
#[test]
fn fusing_despite_a_rival_is_caught_by_the_simulation() {
    let cfg = Config {
        flaw: Some(pool_worker_core::worker::Flaw::FuseDespiteRival),
        orders: 100,
        compaction: false,
        ..config()
    };
    for seed in 0..300 {
        if let Some(f) = run(seed, &cfg).failure {
            assert!(f.contains("run by two"), "seed {seed}: {f}");
            holds_without_the_flaw(seed, &cfg);
            println!("caught at seed {seed}");
            return;
        }
    }
    panic!("300 seeds with FuseDespiteRival and no violation: the check does not bite");
}

/// `pool_worker cancel` (docs/protocol.md R51, R52): up to
/// 20 cancels per seed (half of them of an order whose job runs then, the
/// others of random orders), at random moments, without and
/// with leases (pauses, outages, takeovers). Every property holds (no job
/// starts for an order cancelled before its first commit, or in a process
/// that read its cancel), every order is completed (strict liveness), and
/// `pool_worker audit` of each whole log, as written before compaction,
/// finds nothing; cancels take effect both before runs and during them.
#[test]
fn simulation_with_cancels() {
    let seeds = env("POOL_SIM_CANCEL_SEEDS", 40);
    let t = Instant::now();
    let (mut before, mut during, mut inert) = (0u64, 0u64, 0u64);
    for (name, base) in [("no leases", config()), ("leases", config_leases())] {
        let cfg = Config {
            max_cancels: 20,
            ..base
        };
        for seed in 0..seeds {
            let (out, w) = run_world(seed, &cfg);
            if let Some(f) = out.failure {
                panic!("{name}, seed {seed}, with cancels:\n{f}");
            }
            let log: Vec<(u64, Option<&pool_worker_core::record::Record>)> = w
                .log
                .iter()
                .enumerate()
                .filter(|(_, e)| !e.foreign)
                .map(|(p, e)| (p as u64, Some(&*e.rec)))
                .collect();
            let report = pool_worker_core::audit::audit(log, u32::MAX);
            assert!(
                report.holds(),
                "{name}, seed {seed}: audit of the log with cancels: {:?}",
                report.violations
            );
            let mut cancelled = std::collections::BTreeSet::new();
            for e in &w.log {
                let r = &e.rec;
                if let (pool_worker_core::record::Event::Completed, Some(o)) =
                    (r.event(), &r.outcome())
                {
                    if o.status == pool_worker_core::record::Status::Cancelled {
                        cancelled.insert(r.order());
                        let why = o.reason.as_deref().unwrap_or("");
                        if why.contains("before it ran") {
                            before += 1;
                        } else if why.contains("while it ran") {
                            during += 1;
                        }
                    }
                }
            }
            inert += w
                .log
                .iter()
                .filter(|e| {
                    e.rec.event() == pool_worker_core::record::Event::Cancelled
                        && !cancelled.contains(&e.rec.order())
                })
                .count() as u64;
        }
    }
    let line = format!(
        "simulation with cancels: {seeds} seeds without leases and {seeds} with, ≤20 cancels each: {before} orders completed `cancelled` before they ran, {during} while they ran, {inert} cancels of orders already completed (left as they were), in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    report(&line, &[]);
    assert!(before > 0 && during > 0, "{line}");
}

/// Why a cancel's key is its order's (`cancel:P:O`): with one key for
/// every cancel (`Config::shared_cancel_key`), compaction erases the cancel
/// of an order still waiting once another order is cancelled, and a
/// process that replays the compacted log (or boots from a checkpoint
/// whose writer did) runs the order. (This is how the simulation first
/// caught it: the world compacted cancels by `(instance, event)`.)
#[test]
fn a_cancel_key_shared_by_all_orders_is_caught() {
    let cfg = Config {
        max_cancels: 20,
        shared_cancel_key: true,
        // Every process replays the log from its start: what compaction
        // erased, no checkpoint remembers.
        checkpoint_every: None,
        ..config()
    };
    let caught = (0..200).find_map(|seed| run_world(seed, &cfg).0.failure.map(|f| (seed, f)));
    let Some((seed, failure)) = caught else {
        panic!("200 seeds and a cancel key shared by every order was not caught");
    };
    println!(
        "shared cancel key caught (seed {seed}): {}",
        failure.lines().next().unwrap_or("")
    );
    assert!(failure.contains(RUN_CANCELLED), "{failure}");
}

/// `pool_worker audit` of each log as compaction left it (crashes,
/// duplicates, late appends; with leases: revocations and takeovers), the
/// erased records gone and their positions missing, as a reader of the
/// compacted topic gets it: no false alarm. What the audit could not judge
/// (a finding that an erased record would explain) is counted, not
/// reported as a violation.
#[test]
fn audit_of_compacted_logs_gives_no_false_alarm() {
    let seeds = env("POOL_SIM_AUDIT_SEEDS", 50);
    let t = Instant::now();
    let (mut erased, mut unjudged, mut records) = (0u64, 0usize, 0u64);
    for (name, cfg) in [("no leases", config()), ("leases", config_leases())] {
        for seed in 0..seeds {
            let (out, w) = run_world(seed, &cfg);
            if let Some(f) = out.failure {
                panic!("{name}, seed {seed}:\n{f}");
            }
            let log: Vec<(u64, Option<&pool_worker_core::record::Record>)> = w
                .log
                .iter()
                .enumerate()
                .filter(|(_, e)| !e.erased)
                .map(|(p, e)| (p as u64, (!e.foreign).then_some(&*e.rec)))
                .collect();
            let report = pool_worker_core::audit::audit(log, u32::MAX);
            assert!(
                report.holds(),
                "{name}, seed {seed}: a false alarm on the compacted log: {:?}",
                report.violations
            );
            erased += report.erased.records;
            unjudged += report.unjudged.len();
            records += report.records;
        }
    }
    let line = format!(
        "audit of compacted logs: {seeds} seeds without leases and {seeds} with: {records} records kept, {erased} erased, \
         0 violations, {unjudged} findings left unjudged (an erased record explains them), in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    report(&line, &[]);
    assert!(erased > 0, "{line}");
}

/// `pool_worker audit` (src/audit.rs) on the logs the broken rules write:
/// the simulation runs each flaw whose damage is in the log (a second
/// commit, a skipped order) until its referee catches it, without
/// compaction so that the audit can judge skipped orders too, and the
/// audit of that log finds a violation as well; on healthy seeds' logs it
/// finds none. (`ResumeBlindly` needs a crash at one moment, which the
/// model check finds and these seeds do not; `KeepDuplicates` is a
/// reader's flaw, invisible in the log itself.)
#[test]
fn audit_catches_the_logs_of_the_broken_rules() {
    use pool_worker_core::worker::Flaw;
    let audit_of = |w: &World| {
        let log: Vec<(u64, Option<&pool_worker_core::record::Record>)> = w
            .log
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.erased)
            .map(|(p, e)| (p as u64, Some(&*e.rec)))
            .collect();
        pool_worker_core::audit::audit(log, u32::MAX)
    };
    for seed in 0..5 {
        let (out, w) = run_world(
            seed,
            &Config {
                orders: 100,
                compaction: false,
                ..config()
            },
        );
        assert!(out.failure.is_none(), "seed {seed} fails without a flaw");
        let report = audit_of(&w);
        assert!(
            report.holds(),
            "audit of a healthy log (seed {seed}): {:?}",
            report.violations
        );
    }
    for flaw in [
        Flaw::DecideWithoutReading,
        // Not Flaw::FuseDespiteRival: the referee stops the run when the
        // second job starts, when the log holds only its writer's
        // undecided claim; the evidence an audit reads (its completion on
        // that claim, CompletedWithoutCommit) would come later.
        Flaw::SkipAnOrder,
    ] {
        let cfg = Config {
            flaw: Some(flaw),
            orders: 100,
            compaction: false,
            ..config()
        };
        let caught = (0..300).find_map(|seed| {
            let (out, w) = run_world(seed, &cfg);
            out.failure.map(|f| (seed, f, audit_of(&w)))
        });
        let Some((seed, failure, report)) = caught else {
            panic!("{flaw:?}: 300 seeds and the simulation's referee caught nothing");
        };
        let rules: Vec<_> = report.violations.iter().map(|v| v.rule).collect();
        println!("{flaw:?} (seed {seed}): audit found {rules:?}");
        assert!(
            !report.holds(),
            "{flaw:?} (seed {seed}): the referee caught\n{failure}\nbut the audit found nothing"
        );
    }
}

/// `POOL_SIM_HORIZON=claim|contest|hold` overrides a configuration's
/// compaction horizon (tests/pure/world, `HorizonRule`).
fn horizon_from_env(cfg: &mut Config) {
    match std::env::var("POOL_SIM_HORIZON").as_deref() {
        Ok("claim") => cfg.horizon = HorizonRule::Claim,
        Ok("contest") => cfg.horizon = HorizonRule::Contest,
        Ok("hold") => cfg.horizon = HorizonRule::Hold,
        _ => {}
    }
}

/// Runs the seeds (as [`run_seeds`]) and reports them; returns the
/// totals (the report fails the test if a seed failed).
fn leased_seeds(cfg: &Config, first: u64, seeds: u64, name: &str) -> Outcome {
    let mut cfg = cfg.clone();
    horizon_from_env(&mut cfg);
    let t = Instant::now();
    let (ran, tot, failures) = run_seeds(&cfg, first, seeds);
    let handed = if cfg.handover && cfg.fence {
        format!(
            ", {} starts as their predecessor's heir (handed boot)",
            tot.starts_handed
        )
    } else {
        String::new()
    };
    let handed = if cfg.handover && cfg.fence && cfg.handed_view {
        format!(
            "{handed}, {} of them from the view handed to them ({} views refused at a start past the heir)",
            tot.views_loaded, tot.views_refused
        )
    } else {
        handed
    };
    let line = format!(
        "{name} ({LEASE_MS} ms): {ran} seeds ({} instances, {} orders each), {}, {} steps, {:.0} s simulated, {} crashes ({} long outages), {} pauses, {} cut-offs, {} takeovers (valid revocations), {} second runs after a takeover ({} of them started by a holder already revoked), {} after a death, {} jobs frozen by their guard ({} thawed), {} starts after a clean exit and {} settling first{handed}, {} failing, in {:.1}s",
        cfg.instances,
        cfg.orders,
        per_order(&tot, &cfg),
        tot.steps,
        tot.clock_ms as f64 / 1000.0,
        tot.crashes,
        tot.outages,
        tot.pauses,
        tot.cuts,
        tot.takeovers,
        tot.second_runs_takeover,
        tot.stale_runs,
        tot.second_runs_death,
        tot.freezes,
        tot.thaws,
        tot.starts_marked,
        tot.starts_unmarked,
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    report(&line, &failures);
    tot
}

/// Issue 36 (docs/protocol.md R54–R56): the simulation with clocks,
/// cut-offs, pauses, outages and leases, where a fifth of the orders are
/// delayed by one to seven leases (`not_before` on the instances' own
/// clocks, which disagree by up to four leases) and half carry a key ("a"
/// or "b", at most one live run each). Checked after every step besides
/// every other property: no job starts before its `not_before` on its
/// starter's clock (`RUN_EARLY`), never two live runs of a key
/// (`KEY_LIMIT`), the orders of a key without a delay start in offset order
/// (`KEY_ORDER`); every order is completed. `POOL_SIM_PARK_SEEDS` changes
/// the seeds.
fn config_parking() -> Config {
    let base = config_clocks();
    let terms = (0..base.orders as u64)
        .map(|o| Terms {
            id: None,
            not_before: (o % 5 == 0).then(|| (o % 7 + 1) * LEASE_MS),
            key: match o % 4 {
                0 => Some("a".into()),
                1 => Some("b".into()),
                _ => None,
            },
        })
        .collect();
    Config {
        terms,
        key_concurrency: 1,
        ..base
    }
}

#[test]
fn simulation_with_delays_and_keys() {
    let cfg = config_parking();
    let seeds = env("POOL_SIM_PARK_SEEDS", 60);
    let (ran, tot, failures) = run_seeds(&cfg, env("POOL_SIM_FIRST", 0), seeds);
    let line = format!(
        "simulation with delays and keys: {ran} seeds ({} instances, {} orders each), {} parks, {} jobs started after a park, {} crashes, {} pauses, {} cut-offs, {} takeovers, {} failing",
        cfg.instances,
        cfg.orders,
        tot.parks,
        tot.unparked_runs,
        tot.crashes,
        tot.pauses,
        tot.cuts,
        tot.takeovers,
        failures.len()
    );
    report(&line, &failures);
    assert!(
        tot.unparked_runs > 0,
        "no job ran after a park: the check does not exercise parking"
    );
}

/// The broken rules of R54 and R56 (the key limit, and the key order:
/// [`crate::world::KEY_ORDER`]) are caught by that simulation.
#[test]
fn starting_early_and_ignoring_keys_are_caught_by_the_simulation() {
    use pool_worker_core::worker::Flaw;
    for (flaw, prop) in [
        (Flaw::StartEarly, crate::world::RUN_EARLY),
        (Flaw::IgnoreKeyLimit, crate::world::KEY_LIMIT),
        (Flaw::KeyAfterClaim, crate::world::KEY_ORDER),
    ] {
        let cfg = Config {
            flaw: Some(flaw),
            ..config_parking()
        };
        let caught = (0..20).find_map(|seed| run(seed, &cfg).failure);
        let f = caught.unwrap_or_else(|| panic!("{flaw:?} not caught in 20 seeds"));
        assert!(f.contains(prop), "{flaw:?}: {f}");
        println!("{flaw:?} caught: {}", f.lines().next().unwrap_or_default());
    }
}

/// [`config_parking`] in the herd (`claim_defer_ms` 0: every idle
/// instance claims at once, so that claims are contested) with key `a` on
/// every second order: many parks and claims out of the park.
fn config_herd_one_key() -> Config {
    let mut cfg = Config {
        claim_defer_ms: 0,
        ..config_parking()
    };
    for (o, t) in cfg.terms.iter_mut().enumerate() {
        t.key = (o % 2 == 0).then(|| "a".into());
    }
    cfg
}

/// R55, R42: a replay that the cleaner passes may miss an order's park
/// (erased by a newer park of it) and read a checkpoint after it; the
/// claim out of that park must not then be stale. Seed 460 of
/// [`config_herd_one_key`] broke key order (I15) before `stale_before`:
/// a process that had replayed from position 0 lost order 0:12 from its
/// view and ran 0:14, of the same key, first (boot.rs,
/// `an_unpark_claim_is_not_stale_by_a_checkpoint_read_on_the_way`). The
/// seeds around it, and it, hold. 1,000 seeds by hand:
/// `POOL_SIM_PARK_SEEDS=1000 cargo test --release --test pure simulation::the_herd_with_one_key_by_hand -- --ignored`.
#[test]
fn a_replay_that_missed_a_park_keeps_the_key_order() {
    let cfg = config_herd_one_key();
    for seed in 455..=465 {
        holds(seed, &cfg, "in the herd with one key");
    }
}

/// [`config_herd_one_key`] over many seeds (`POOL_SIM_FIRST`,
/// `POOL_SIM_PARK_SEEDS`); with `POOL_SIM_FLAW=1`, R56's broken variant
/// `Flaw::OnlyParkedGoFirst` (no `View::held_below`), which needs a claim
/// out of the park, decided on a view from before a takeover's claim, to
/// land before that takeover's decision: not caught in 1,000 seeds (the
/// model check catches it from a hand-made prefix,
/// `model::only_parked_go_first_is_caught`).
#[test]
#[ignore = "by hand: POOL_SIM_PARK_SEEDS=1000 cargo test --release --test pure simulation::the_herd_with_one_key_by_hand -- --ignored --nocapture"]
fn the_herd_with_one_key_by_hand() {
    use pool_worker_core::worker::Flaw;
    let cfg = Config {
        flaw: (env("POOL_SIM_FLAW", 0) == 1).then_some(Flaw::OnlyParkedGoFirst),
        ..config_herd_one_key()
    };
    let (ran, tot, failures) = run_seeds(
        &cfg,
        env("POOL_SIM_FIRST", 0),
        env("POOL_SIM_PARK_SEEDS", 200),
    );
    let line = format!(
        "simulation, the herd with one key (flaw {:?}): {ran} seeds, {} parks, {} jobs started after a park, {} failing",
        cfg.flaw,
        tot.parks,
        tot.unparked_runs,
        failures.len()
    );
    report(&line, &failures);
}

/// Orders per topic of the simulations with two topics (R57).
const TOPIC_ORDERS: u32 = 150;

/// [`config`] or [`config_leases`] with orders in two topics (R57),
/// `urgent` then the main one, [`TOPIC_ORDERS`] each, at the same offsets.
fn two_topics(base: Config) -> Config {
    Config {
        topics: vec![Topic::named("urgent").expect("a name"), Topic::MAIN],
        orders: TOPIC_ORDERS,
        ..base
    }
}

/// Priorities (docs/protocol.md R57): the simulation without and with
/// leases (crashes, duplicates, compaction, checkpoints; with leases
/// pauses, outages and takeovers) over orders in two topics whose offsets
/// coincide. Every property holds on every step, [`PRIORITY`] among them
/// (no instance first in line for an urgent order claims a main-topic
/// order instead), and every order of both topics is completed. Reported:
/// the mean log position of each topic's orders' first claims. They are
/// close: each topic's one partition shows one order waiting at a time,
/// so with two instances idle or more one takes the urgent order and
/// another the main one at once (docs/protocol-proofs.md, "Priorities");
/// priority shows only when a single instance is idle.
/// `POOL_SIM_TOPIC_SEEDS` changes the seeds (20 of each by default).
#[test]
fn simulation_with_two_topics() {
    let seeds = env("POOL_SIM_TOPIC_SEEDS", 20);
    let t = Instant::now();
    let mut lines = Vec::new();
    for (name, base) in [("no leases", config()), ("leases", config_leases())] {
        let cfg = two_topics(base);
        // (sum of first-claim positions, orders) per topic: urgent, main.
        let mut first = [(0u64, 0u64); 2];
        // Claims, and claims after a deferral, per topic.
        let mut claims = [(0u64, 0u64); 2];
        for seed in 0..seeds {
            let (out, w) = run_world(seed, &cfg);
            if let Some(f) = out.failure {
                panic!("two topics, {name}, seed {seed}:\n{f}");
            }
            let mut seen = std::collections::BTreeSet::new();
            for (p, e) in w.log.iter().enumerate() {
                let Some(o) = e.rec.order() else { continue };
                if e.rec.event() == pool_worker_core::record::Event::Claimed {
                    let k = usize::from(o.topic.is_main());
                    claims[k].0 += 1;
                    claims[k].1 += u64::from(!e.rec.passed_over().is_empty());
                }
                if e.rec.event() == pool_worker_core::record::Event::Claimed && seen.insert(o) {
                    let k = usize::from(o.topic.is_main());
                    first[k].0 += p as u64;
                    first[k].1 += 1;
                }
            }
            assert_eq!(seen.len() as u32, cfg.total_orders(), "seed {seed}");
        }
        let mean = |k: usize| first[k].0 as f64 / first[k].1.max(1) as f64;
        let per = |c: u64| c as f64 / (seeds * TOPIC_ORDERS as u64).max(1) as f64;
        lines.push(format!(
            "{name}: mean position of a first claim {:.0} (urgent), {:.0} (main); claims per order {:.2} (urgent), {:.2} (main), of them after a deferral {:.2}, {:.2}",
            mean(0),
            mean(1),
            per(claims[0].0),
            per(claims[1].0),
            per(claims[0].1),
            per(claims[1].1)
        ));
    }
    let line = format!(
        "simulation with two topics: {seeds} seeds without leases and {seeds} with ({INSTANCES} instances, {TOPIC_ORDERS} orders per topic): {}, in {:.1}s",
        lines.join("; "),
        t.elapsed().as_secs_f64()
    );
    report(&line, &[]);
}

/// The broken rules of R57 are caught by the simulation with two topics:
/// a frontier per partition whatever the topic (`Flaw::FrontierPerPartition`:
/// main-topic orders skipped), and priorities ignored
/// (`Flaw::IgnorePriority`: [`PRIORITY`]); the same seed holds without
/// the flaw. Bounded: at most 20 seeds each.
#[test]
fn broken_priorities_are_caught_by_the_simulation() {
    use pool_worker_core::worker::Flaw;
    for (flaw, prop) in [
        (Flaw::FrontierPerPartition, SKIPPED),
        (Flaw::IgnorePriority, PRIORITY),
    ] {
        let cfg = Config {
            flaw: Some(flaw),
            ..two_topics(config())
        };
        let caught = (0..20).find_map(|seed| run(seed, &cfg).failure.map(|f| (seed, f)));
        let (seed, f) = caught.unwrap_or_else(|| panic!("{flaw:?} not caught in 20 seeds"));
        assert!(
            f.contains(prop),
            "{flaw:?}: another property broke first:\n{f}"
        );
        holds_without_the_flaw(seed, &cfg);
        let line = format!(
            "simulation with two topics, broken {flaw:?}: caught at seed {seed}: {}",
            f.lines().next().unwrap_or_default()
        );
        println!("{line}");
        crate::world::record_figures(&line);
    }
}

/// Replays one seed: `POOL_SIM_SEED=1234 cargo test --test pure simulation::replay -- --nocapture`
/// (with `POOL_SIM_LEASES=1`: a seed of the simulation with leases;
/// `POOL_SIM_CLOCKS=1`, with clocks; `POOL_SIM_PARKING=1`, with delays and
/// keys).
#[test]
fn replay() {
    let Some(seed) = std::env::var("POOL_SIM_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    let t = Instant::now();
    let mut cfg = if env("POOL_SIM_PARKING", 0) == 1 {
        config_parking()
    } else if env("POOL_SIM_CLOCKS", 0) == 1 {
        config_clocks()
    } else if env("POOL_SIM_LEASES", 0) == 1 {
        config_leases()
    } else {
        config()
    };
    if env("POOL_SIM_CLAIM_HORIZON", 0) == 1 {
        cfg.horizon = HorizonRule::Claim;
    }
    horizon_from_env(&mut cfg);
    let (out, w) = run_world(seed, &cfg);
    // POOL_SIM_ORDER=<offset>: every record about that order.
    if let Some(o) = std::env::var("POOL_SIM_ORDER")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
    {
        println!("records about order 0:{o}:");
        for p in 0..w.log.len() {
            if w.log[p].rec.order().is_some_and(|x| x.offset == o) {
                println!("{}", w.describe_entry(p));
            }
        }
    }
    println!(
        "seed {seed}: {} steps, {} crashes, {} pauses, {} takeovers, {} second runs after a takeover, {:.1}s",
        out.steps,
        out.crashes,
        out.pauses,
        out.takeovers,
        out.second_runs_takeover,
        t.elapsed().as_secs_f64()
    );
    if let Some(f) = out.failure {
        panic!("{f}");
    }
}
