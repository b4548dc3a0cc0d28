//! Deterministic simulation: the real worker machines (src/worker.rs) of 10
//! instances against a simulated claims log, 1,000 orders, driven by a
//! seeded PRNG (splitmix64): random interleavings of reads, delivery delays
//! (an append waits until its instance is picked to deliver it), duplicate
//! deliveries (producer retries that land again later), crashes and
//! restarts (a crashed process's appends in flight land later or are lost),
//! and compaction below the same horizon as the model check (tests/world).
//! The safety properties of tests/model.rs are checked after every step;
//! every seed must end with all orders completed within a step bound (after
//! the crash window, crashes stop).
//!
//! `simulation_with_leases` runs the same world with leases (1,000 ms): a
//! simulated clock, Tick every lease/3, pauses of live processes past the
//! lease, hosts down for several leases, and the properties of leases (see
//! the test). The bugs it found are ignored tests with their seeds and
//! traces: `lease_takeover_split_strands_the_order`,
//! `takeover_after_compaction_is_late` and `stranded_orders_after_takeovers`
//! (the CI run avoids the first two with world settings and tolerates, and
//! counts, the orders the last one strands); a fourth, fixed since, has a
//! regression check (`late_void_commit_hides_a_completion`).
//!
//! CI: `cargo test --test simulation -- --nocapture` runs 1,000 seeds on two
//! threads (`POOL_SIM_SEEDS`, `POOL_SIM_FIRST` to change). A failing seed is
//! printed with the command that replays it alone:
//! `POOL_SIM_SEED=<seed> cargo test --test simulation replay -- --nocapture`.

mod world;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use pool_worker::worker::Phase;
use world::*;

const INSTANCES: u32 = 10;
const ORDERS: u32 = 1_000;
const MAX_STEPS: u64 = 3_000_000;
/// Crashes happen only in the first this-many steps.
const CRASH_WINDOW: u64 = 200_000;
/// The lease of the simulation with leases (ms of the simulated clock,
/// which moves 0–2 ms per step).
const LEASE_MS: u64 = 1_000;
/// Seeds and orders of the simulation with leases in CI (each process runs
/// one order and then replays the whole log at its next boot, so a seed's
/// cost grows with the square of its orders; fewer orders, more seeds).
const LEASE_SEEDS: u64 = 500;
const LEASE_ORDERS: u32 = 300;
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

/// Whether the run may end with orders stranded by the known liveness bug
/// (`stranded_orders_after_takeovers`): the CI simulation with leases
/// checks every safety property and completes every other order; the
/// strict liveness check is the ignored test.
fn tolerate_stranded(cfg: &Config) -> bool {
    cfg.lease_ms.is_some() && env("POOL_SIM_STRICT", 0) == 0 && !STRICT.load(Ordering::Relaxed)
}

/// Set by the ignored tests of liveness bugs (strict liveness).
static STRICT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn config_leases() -> Config {
    Config {
        orders: LEASE_ORDERS,
        lease_ms: Some(LEASE_MS),
        // Boot reads go on in one step (tests/world, `batch_reads`), so
        // that a boot does not outlast many leases of simulated time.
        batch_reads: true,
        // The revocation and the takeover claim land together: split, a
        // revoker that dies between them strands the order (a bug, see
        // `lease_takeover_split_strands_the_order`).
        atomic_takeover: true,
        // No append lands late (a void record landing late can hide a
        // valid one under compaction: a bug, see
        // `late_void_commit_hides_a_completion`).
        late_appends: false,
        // Compaction spares every held order's records (a bug otherwise:
        // `takeover_after_compaction_is_late`).
        horizon: HorizonRule::Hold,
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
        stale_boots: false,
        batch_reads: false,
        lease_ms: None,
        max_jumps: 0,
        forge_seen: false,
        atomic_takeover: false,
        late_appends: true,
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
    clock_ms: u64,
    /// Orders left held by nobody, never completed (a known liveness bug
    /// of leases; tolerated only when `Config::tolerate_stranded`).
    stranded: u32,
    /// The failure, readable.
    failure: Option<String>,
}

fn run(seed: u64, cfg: &Config) -> Outcome {
    run_world(seed, cfg).0
}

/// Runs one seed; returns the outcome and the world where it ended.
fn run_world(seed: u64, cfg: &Config) -> (Outcome, World) {
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
        let leases = if cfg.lease_ms.is_some() { "POOL_SIM_LEASES=1 " } else { "" };
        s.push_str(&format!("replay: {leases}POOL_SIM_SEED={seed} cargo test --test simulation replay -- --nocapture\n"));
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
        clock_ms: w.now,
        stranded: 0,
        failure,
    };
    while !w.all_completed(cfg) {
        if steps >= MAX_STEPS {
            let why = format!("only {} of {} orders completed within {MAX_STEPS} steps", w.completed, cfg.orders);
            let f = fail(&w, steps, &recent, why);
            return (done(&w, steps, Some(f)), w);
        }
        let step = pick(&mut rng, &w, cfg, steps, &mut choices);
        if let (Some(Step::Advance(_)), true) = (&step, tolerate_stranded(cfg)) {
            // Nothing moves: end here if every order left is stranded.
            let stranded = w.stranded();
            if stranded.len() as u32 + w.completed == cfg.orders && w.quiet() {
                let mut out = done(&w, steps, None);
                out.stranded = stranded.len() as u32;
                return (out, w);
            }
        }
        let Some(step) = step else {
            let why = format!("stuck: no step possible, {} of {} orders completed", w.completed, cfg.orders);
            let f = fail(&w, steps, &recent, why);
            return (done(&w, steps, Some(f)), w);
        };
        w.step(cfg, &step);
        steps += 1;
        if cfg.lease_ms.is_some() {
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

fn pick(rng: &mut Rng, w: &World, cfg: &Config, steps: u64, choices: &mut Vec<Step>) -> Option<Step> {
    let live = |i: u32| w.insts[i as usize - 1].worker.is_some();
    if let Some(lease) = cfg.lease_ms {
        // The shell's timer: every lease/3 to a process that is not frozen.
        let due = (1..=cfg.instances).find(|&i| {
            let inst = &w.insts[i as usize - 1];
            inst.worker.is_some() && w.now >= inst.frozen_until && w.now >= inst.next_tick
        });
        if let Some(i) = due {
            return Some(Step::Tick(i));
        }
        if steps < CRASH_WINDOW && w.pauses < MAX_PAUSES && rng.one_in(500) {
            // A GC pause or a partition: often shorter than the lease,
            // sometimes up to three leases.
            // Mostly a process that holds an order (most processes are
            // booting: each process runs one order, then exits).
            let holding = |i: &u32| {
                w.insts[*i as usize - 1].worker.as_ref().is_some_and(|p| {
                    matches!(p.phase, Phase::Negotiate { .. } | Phase::Decide { .. } | Phase::Retry { .. } | Phase::Run { .. })
                })
            };
            let holders: Vec<u32> = (1..=cfg.instances).filter(holding).collect();
            let i = if !holders.is_empty() && !rng.one_in(4) {
                holders[rng.below(holders.len() as u64) as usize]
            } else {
                1 + rng.below(cfg.instances as u64) as u32
            };
            if live(i) {
                let ms = if rng.one_in(2) { lease + rng.below(2 * lease) } else { rng.below(lease * 2 / 3) };
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
    if rng.one_in(400) && !w.erasable(cfg).is_empty() {
        return Some(Step::Compact);
    }
    if !w.orphans.is_empty() && rng.one_in(40) {
        let k = rng.below(w.orphans.len() as u64) as usize;
        return Some(if rng.one_in(4) { Step::Lose(k) } else { Step::Land(k) });
    }
    // A random instance, then a random step of it; a few tries before
    // falling back to any instance that can move.
    for _ in 0..8 {
        let i = 1 + rng.below(cfg.instances as u64) as u32;
        choices.clear();
        w.instance_steps(i, choices);
        if choices.is_empty() {
            continue;
        }
        let s = choices[rng.below(choices.len() as u64) as usize].clone();
        if let Step::Deliver(i) = s {
            if w.dups < cfg.max_dups && rng.one_in(300) {
                return Some(Step::DeliverDup(i));
            }
        }
        return Some(s);
    }
    w.fair_step(cfg)
        .or_else(|| (!w.orphans.is_empty()).then_some(Step::Land(0)))
        // Everyone frozen or down: time passes.
        .or_else(|| cfg.lease_ms.map(|_| Step::Advance(10)))
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn simulation_many_seeds() {
    let seeds = env("POOL_SIM_SEEDS", 1_000);
    let first = env("POOL_SIM_FIRST", 0);
    let cfg = config();
    let t = Instant::now();
    let next = AtomicU64::new(first);
    let total_steps = AtomicU64::new(0);
    let total_crashes = AtomicU64::new(0);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= first + seeds || !failures.lock().unwrap().is_empty() {
                    break;
                }
                let out = run(seed, &cfg);
                total_steps.fetch_add(out.steps, Ordering::Relaxed);
                total_crashes.fetch_add(out.crashes as u64, Ordering::Relaxed);
                if let Some(f) = out.failure {
                    failures.lock().unwrap().push(f);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let ran = (next.load(Ordering::Relaxed) - first).min(seeds);
    let line = format!(
        "simulation: {ran} seeds ({} instances, {} orders each), {} steps, {} crashes, {} failing, in {:.1}s",
        INSTANCES,
        ORDERS,
        total_steps.load(Ordering::Relaxed),
        total_crashes.load(Ordering::Relaxed),
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    println!("{line}");
    world::record_figures(&line);
    for f in &failures {
        println!("{f}");
    }
    assert!(failures.is_empty(), "{} failing seed(s); first:\n{}", failures.len(), failures[0]);
}

/// The simulation with leases (`LEASE_MS`): the clock moves 0–2 ms per
/// step, every live process that is not frozen gets Tick every lease/3,
/// processes freeze for up to three leases (`Step::Pause`) and crashed hosts
/// stay down for up to four (`Step::Outage`), so holds expire while their
/// process lives and while it is gone; idle instances and waiting
/// negotiators revoke them and take their orders over. The properties with
/// leases (tests/world): an order is run again only after the earlier run
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

/// A bug found by the simulation with leases (src/worker.rs,
/// `Worker::take_over`): the revocation and the takeover claim are two
/// appends. A revoker that dies after its revocation landed and before its
/// claim did (or whose claim lands only after its next incarnation booted,
/// and is void) leaves the order held by nobody, behind the frontier: no
/// instance ever claims it again, and it is never completed. Seed 114 of the
/// simulation with leases, with the two records landing separately: 7
/// claims 0:107 (#545) and pauses past the lease; 9 revokes it (#789, valid,
/// seen #545) and dies before its takeover claim lands; the claim is lost.
/// Nobody holds 0:107 and the frontier is past it
/// (`POOL_SIM_LEASES=1 POOL_SIM_SPLIT=1 POOL_SIM_STRICT=1 POOL_SIM_SEED=114
/// POOL_SIM_ORDER=107 cargo test --test simulation replay -- --nocapture`).
/// The fix: one produce batch for both records, or let an idle instance
/// claim an order that nobody holds and nobody completed.
#[test]
#[ignore = "bug: a revoker that dies between its revocation and its takeover claim strands the order forever (liveness)"]
fn lease_takeover_split_strands_the_order() {
    STRICT.store(true, Ordering::Relaxed);
    let cfg = Config { atomic_takeover: false, ..config_leases() };
    let seeds = env("POOL_SIM_SPLIT_SEEDS", 150);
    let first = env("POOL_SIM_FIRST", 0);
    leased_seeds(&cfg, first, seeds, "simulation with leases, takeovers split");
}

/// A bug found by the simulation with leases (compaction, src/boot.rs),
/// fixed (a valid completion closes its hold without a visible commit):
/// a void record — here the `committed` of a dead incarnation, landing
/// after its successor's claim, commit and completion of another order —
/// has the same key `<i>:committed` as the valid commit, so compaction
/// erases the valid one. A replay of the compacted log then sees the newest
/// claim without its commit, takes its completion for stray (a completion
/// closes only a committed hold), and keeps an undecided hold that expires:
/// another instance revokes it and runs the completed order again (seed 23:
/// `POOL_SIM_LEASES=1 POOL_SIM_LATE=1 POOL_SIM_SEED=23 POOL_SIM_ORDER=156
/// cargo test --test simulation replay -- --nocapture`).
#[test]
fn late_void_commit_hides_a_completion() {
    let cfg = Config { late_appends: true, ..config_leases() };
    let seeds = env("POOL_SIM_SPLIT_SEEDS", 100);
    let first = env("POOL_SIM_FIRST", 0);
    leased_seeds(&cfg, first, seeds, "simulation with leases, late appends");
}

/// A bug found by the simulation with leases (src/boot.rs, the late-claim
/// rule): a takeover claim is always behind the frontier. A reader whose
/// log lost the order's first claim to compaction (its holder claimed again
/// since, and the hold had been taken over) creates the order's contest at
/// the takeover claim and marks it *late*; when that reader in turn revokes
/// the (expired) taker and claims the order, its claim yields as "late" —
/// after the revocation closed the only hold. Nobody holds the order, it is
/// behind the frontier, and it is never completed. Seed 134: 1 claims 0:16
/// and pauses; 3 revokes it and takes over, and pauses; 1 claims other
/// orders (its claim of 0:16 is compacted); 6 boots, revokes 3 and claims
/// 0:16, yields "late claim"
/// (`POOL_SIM_LEASES=1 POOL_SIM_CLAIM_HORIZON=1 POOL_SIM_SEED=134
/// POOL_SIM_ORDER=16 cargo test --test simulation replay -- --nocapture`).
/// With Kafka it needs a hold that lasts longer than
/// `min.compaction.lag.ms` (7 days): a long job taken over twice.
#[test]
#[ignore = "bug: a takeover claim read without the order's first claim (compacted) is taken for late, yields, and strands the order (liveness)"]
fn takeover_after_compaction_is_late() {
    STRICT.store(true, Ordering::Relaxed);
    let cfg = Config { horizon: HorizonRule::Claim, ..config_leases() };
    let seeds = env("POOL_SIM_SPLIT_SEEDS", 200);
    let first = env("POOL_SIM_FIRST", 0);
    leased_seeds(&cfg, first, seeds, "simulation with leases, claim horizon");
}

/// The known liveness bug of leases, strictly checked: an order that every
/// claimant yielded or lost to a revocation is held by nobody, is behind
/// the frontier, and is never claimed again. Seed 403: 8 claims 0:5 (#37),
/// 1 claims 0:5 (#48); 8 must yield to 1, 1 waits for 8; both pause past
/// the lease. 10 revokes 8 and takes over (#241–242); 7 and 5 also take
/// over (their revocations of 8 are void, their claims count: #245, #247);
/// 10 and 5 yield to 1 (lower, undecided); 9 revokes 1 (#251, valid) and
/// claims (#252); 7, which had not read #251, yields to 1 (#253); 9, which
/// had read 7's claim but not its yield, yields to 7 (#256). Every claim is
/// now yielded or revoked. Rule 2 (yield to a lower undecided rival)
/// assumes that rival will decide; a revocation removes it undecided.
/// `POOL_SIM_STRICT=1 POOL_SIM_LEASES=1 POOL_SIM_SEED=403 POOL_SIM_ORDER=5
/// cargo test --test simulation replay -- --nocapture`.
#[test]
#[ignore = "bug: after takeovers, an order whose every claim yielded or was revoked is never claimed again (liveness)"]
fn stranded_orders_after_takeovers() {
    STRICT.store(true, Ordering::Relaxed);
    let seeds = env("POOL_SIM_LEASE_SEEDS", LEASE_SEEDS);
    leased_seeds(&config_leases(), env("POOL_SIM_FIRST", 0), seeds, "simulation with leases, strict liveness");
}

fn leased_seeds(cfg: &Config, first: u64, seeds: u64, name: &str) {
    let cfg = cfg.clone();
    let t = Instant::now();
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
                let out = run(seed, &cfg);
                let mut tot = totals.lock().unwrap();
                tot.steps += out.steps;
                tot.crashes += out.crashes;
                tot.pauses += out.pauses;
                tot.outages += out.outages;
                tot.takeovers += out.takeovers;
                tot.second_runs_takeover += out.second_runs_takeover;
                tot.second_runs_death += out.second_runs_death;
                tot.stale_runs += out.stale_runs;
                tot.clock_ms += out.clock_ms;
                tot.stranded += out.stranded;
                drop(tot);
                if let Some(f) = out.failure {
                    failures.lock().unwrap().push(f);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let tot = totals.into_inner().unwrap();
    let ran = (next.load(Ordering::Relaxed) - first).min(seeds);
    let line = format!(
        "{name} ({LEASE_MS} ms): {ran} seeds ({INSTANCES} instances, {LEASE_ORDERS} orders each), {} steps, {:.0} s simulated, {} crashes ({} long outages), {} pauses, {} takeovers (valid revocations), {} second runs after a takeover ({} of them started by a holder already revoked), {} after a death, {} orders stranded (known bug), {} failing, in {:.1}s",
        tot.steps,
        tot.clock_ms as f64 / 1000.0,
        tot.crashes,
        tot.outages,
        tot.pauses,
        tot.takeovers,
        tot.second_runs_takeover,
        tot.stale_runs,
        tot.second_runs_death,
        tot.stranded,
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    println!("{line}");
    world::record_figures(&line);
    for f in &failures {
        println!("{f}");
    }
    assert!(failures.is_empty(), "{} failing seed(s); first:\n{}", failures.len(), failures[0]);
}

/// Replays one seed: `POOL_SIM_SEED=1234 cargo test --test simulation replay -- --nocapture`
/// (with `POOL_SIM_LEASES=1`: a seed of the simulation with leases).
#[test]
fn replay() {
    let Some(seed) = std::env::var("POOL_SIM_SEED").ok().and_then(|v| v.parse().ok()) else {
        return;
    };
    let t = Instant::now();
    let mut cfg = if env("POOL_SIM_LEASES", 0) == 1 { config_leases() } else { config() };
    cfg.atomic_takeover &= env("POOL_SIM_SPLIT", 0) == 0;
    cfg.late_appends |= env("POOL_SIM_LATE", 0) == 1;
    if env("POOL_SIM_CLAIM_HORIZON", 0) == 1 {
        cfg.horizon = HorizonRule::Claim;
    }
    let (out, w) = run_world(seed, &cfg);
    // POOL_SIM_ORDER=<offset>: every record about that order.
    if let Some(o) = std::env::var("POOL_SIM_ORDER").ok().and_then(|v| v.parse::<i64>().ok()) {
        println!("records about order 0:{o}:");
        for p in 0..w.log.len() {
            if w.log[p].rec.order().is_some_and(|x| x.offset == o) {
                println!("{}", w.describe_entry(p));
            }
        }
    }
    println!(
        "seed {seed}: {} steps, {} crashes, {} pauses, {} takeovers, {} second runs after a takeover, {:.1}s (POOL_SIM_SPLIT=1: takeovers split; POOL_SIM_LATE=1: late appends)",
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
