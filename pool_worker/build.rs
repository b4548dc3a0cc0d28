//! Links the `pool_worker` binary as a position-dependent executable
//! (`-no-pie`) on Linux.
//!
//! A process per order starts this binary twice per order (the worker, and
//! its job's guard, `pool_worker guard`), so its start-up is on every
//! order's path. As a PIE, the dynamic loader applies some 65,000 relative
//! relocations at each start, touching (and copying) every page of the
//! binary's relocated data: 647 page faults and 3.7 ms of CPU for a
//! process that exits at once, against 315 and 2.6 ms linked at a fixed
//! address (bench/RESULTS.md, "The process's own start"). Address-space
//! randomisation of the executable's own image is what is given up; the
//! libraries, stack and heap stay randomised.
//!
//! Set `POOL_WORKER_PIE=1` to link a PIE anyway.
fn main() {
    println!("cargo:rerun-if-env-changed=POOL_WORKER_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let pie = std::env::var("POOL_WORKER_PIE").is_ok_and(|v| v == "1");
    if linux && !pie {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
