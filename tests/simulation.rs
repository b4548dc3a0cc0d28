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
//! CI: `cargo test --test simulation -- --nocapture` runs 1,000 seeds on two
//! threads (`POOL_SIM_SEEDS`, `POOL_SIM_FIRST` to change). A failing seed is
//! printed with the command that replays it alone:
//! `POOL_SIM_SEED=<seed> cargo test --test simulation replay -- --nocapture`.

mod world;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use world::*;

const INSTANCES: u32 = 10;
const ORDERS: u32 = 1_000;
const MAX_STEPS: u64 = 3_000_000;
/// Crashes happen only in the first this-many steps.
const CRASH_WINDOW: u64 = 200_000;

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
    }
}

struct Outcome {
    steps: u64,
    crashes: u32,
    /// The failure, readable.
    failure: Option<String>,
}

fn run(seed: u64, cfg: &Config) -> Outcome {
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
        s.push_str(&format!("replay: POOL_SIM_SEED={seed} cargo test --test simulation replay -- --nocapture\n"));
        s
    };
    while !w.all_completed(cfg) {
        if steps >= MAX_STEPS {
            let why = format!("only {} of {} orders completed within {MAX_STEPS} steps", w.completed, cfg.orders);
            return Outcome { steps, crashes: w.crashes, failure: Some(fail(&w, steps, &recent, why)) };
        }
        let step = pick(&mut rng, &w, cfg, steps, &mut choices);
        let Some(step) = step else {
            let why = format!("stuck: no step possible, {} of {} orders completed", w.completed, cfg.orders);
            return Outcome { steps, crashes: w.crashes, failure: Some(fail(&w, steps, &recent, why)) };
        };
        w.step(cfg, &step);
        steps += 1;
        if recent.len() == 30 {
            recent.remove(0);
        }
        recent.push(step);
        if let Some((prop, what)) = &w.violation {
            let why = format!("violated \"{prop}\": {what}");
            return Outcome { steps, crashes: w.crashes, failure: Some(fail(&w, steps, &recent, why)) };
        }
    }
    Outcome { steps, crashes: w.crashes, failure: None }
}

fn pick(rng: &mut Rng, w: &World, cfg: &Config, steps: u64, choices: &mut Vec<Step>) -> Option<Step> {
    let live = |i: u32| w.insts[i as usize - 1].worker.is_some();
    if steps < CRASH_WINDOW && w.crashes < cfg.max_crashes && rng.one_in(3_000) {
        let i = 1 + rng.below(cfg.instances as u64) as u32;
        if live(i) {
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
    w.fair_step(cfg).or_else(|| (!w.orphans.is_empty()).then_some(Step::Land(0)))
}

#[test]
fn simulation_many_seeds() {
    let seeds: u64 = std::env::var("POOL_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000);
    let first: u64 = std::env::var("POOL_SIM_FIRST").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
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

/// Replays one seed: `POOL_SIM_SEED=1234 cargo test --test simulation replay -- --nocapture`.
#[test]
fn replay() {
    let Some(seed) = std::env::var("POOL_SIM_SEED").ok().and_then(|v| v.parse().ok()) else {
        return;
    };
    let t = Instant::now();
    let out = run(seed, &config());
    println!("seed {seed}: {} steps, {} crashes, {:.1}s", out.steps, out.crashes, t.elapsed().as_secs_f64());
    if let Some(f) = out.failure {
        panic!("{f}");
    }
}
