//! pool_worker_core: the protocol core of pool_worker (records and time in,
//! decisions out), the package at the top of the repository. It does no
//! I/O, reads no clock and draws no randomness, and the compiler guards it:
//! its manifest (the top `Cargo.toml`) depends only on crates that do no I/O
//! (serde, serde_json, hmac, sha2, shell-words; croner, chrono without its
//! clock and chrono-tz for schedules), so a core module cannot
//! name rdkafka, tokio, nix or any shell; and it must not use `std::fs`,
//! `std::net`, `std::process`, `std::time`'s clocks or randomness. See
//! docs/protocol.md for the rules (R1 …) that comments cite by number.
//!
//! Layout: this package's folder is the repository's top: its sources are
//! `src/` (this file is its root), its proof `tests/pure` (the model check
//! and the simulation, which drive [`worker::Worker`] through a simulated
//! world; `cargo test -p pool_worker_core` runs them without building
//! librdkafka). The binary, its shells and the command line are the package
//! in `pool_worker/`, which depends on this one and re-exports its modules.
//!
//! The cargo feature `testing` compiles the hooks that exist only for the
//! checks (`worker::Flaw`, `View::relabel`, accessors only the tests read);
//! this package's own tests and pool_worker's `testing` feature turn it on.

pub mod audit; // the claims log checked against the invariants (I1–I5)
pub mod boot; // replaying the claims topic into a view
pub mod checkpoint; // a summary of the log, so that boot need not replay all of it
pub mod claim; // the negotiation
pub mod erased; // what compaction erased, as a reader sees it
pub mod exit_status; // every exit status, named and numbered
pub mod orders; // parsing work orders
pub mod record; // what a claims record is
pub mod schedule; // periodic orders: who produces each firing (SCHEDULE_FILE)
pub mod sign; // signed records, `CLAIMS_KEY`
pub mod worker; // one incarnation's life as a state machine
