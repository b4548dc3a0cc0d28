//! The pure checks: the model check (`model`) and the simulation
//! (`simulation`) drive the protocol core (`pool_worker_core::worker`,
//! `pool_worker_core::boot`, `pool_worker_core::claim`) through a world of simulated
//! processes and a simulated log (`world`). No processes, no broker:
//! `cargo test --test pure [model::|simulation::][name]`.

mod model;
mod simulation;
mod world;

/// The model check copies and drops a world, with every process's view
/// and its maps, at every step: with the system allocator, allocating and
/// freeing took about a third of its time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
