//! pool_worker: a Kafka-native worker pool that runs each work order exactly
//! once, with no coordinator process. See README.md and docs/protocol.md
//! (the rules, R1 …, that comments cite by number).
//!
//! A pure protocol core, shells around it, and the command line. This table
//! is the one list of which module is which (README.md, "The code", and
//! docs/protocol.md follow it):
//!
//! | part | modules | may use |
//! |------|---------|---------|
//! | the core: the package `pool_worker_core`, the repository's top (`Cargo.toml`, `src/`, its proof in `tests/pure`) | `record` (with `record/`), `boot` (with `boot/`), `claim`, `checkpoint`, `worker`, `exit_status`, `erased`, `orders`, `sign`, `audit` | the core and crates that do no I/O (serde, hmac, ...); no I/O, no clock, no randomness: no rdkafka, tokio, nix, `std::fs`, `std::net`, `std::process` |
//! | the shells | `run` (with `run/`: `job_runner`, `appender`), `account`, `clock`, `guard`, `kafka` (with `kafka/`: `clients`, `tools`, `claims_reader`, `topics`, `client_config`, `broker`; the only modules that name the rdkafka crate), `settle`, `supervise`, `job`, `isolate`, `fetch`, `policy`, `config`, `env`, `process_exit`, `backoff` | the core, each other, and the world |
//! | the command line | `cli` (and `pool_worker/src/main.rs`) | everything |
//!
//! This package is the folder `pool_worker/`; the core is the package at
//! the repository's top (`src/`), whose manifest depends on nothing that
//! does I/O, so a core module cannot name a shell: the compiler keeps the
//! core below them all. This crate re-exports the core's modules.

// The core: no I/O, no clock, no randomness (the package at the top, src/).
// Re-exported, so that `crate::record::...` and `pool_worker::record::...`
// work in the shells and the tests.
pub use pool_worker_core::{
    audit,       // the claims log checked against the invariants (I1–I5)
    boot,        // replaying the claims topic into a view
    checkpoint,  // a summary of the log, so that boot need not replay all of it
    claim,       // the negotiation
    erased,      // what compaction erased, as a reader sees it
    exit_status, // every exit status, named and numbered
    orders,      // parsing work orders
    record,      // what a claims record is
    schedule,    // periodic orders: who produces each firing
    sign,        // signed records, `CLAIMS_KEY`
    worker,      // one incarnation's life as a state machine
};

// The shells: Kafka, processes, the environment.
pub mod account; // opt-in accounting points (POOL_WORKER_ACCOUNT), for the bench
pub mod backoff; // the retry loops' delays
pub mod clock; // the worker's one clock (CLOCK_BOOTTIME-based) and the tools' wall clock
pub mod config; // the worker's configuration, from the environment
pub mod env; // the environment as settings: the parsers every program shares, and a configuration error
pub mod fetch; // fetching a URL order's body
pub mod guard; // the job's dead man's switch: frozen when its hold's deadline passes (R53)
pub mod isolate; // what keeps a job away from the worker
pub mod job; // running a job: its process (job/spawn.rs), output, limits, time
pub mod kafka; // everything Kafka: the worker's and the tools' clients, the claims reader, the embedded broker
pub mod orders_topics; // ORDERS_TOPIC: the orders topics in priority order, Kafka names and the core's topics
pub mod policy; // the allow lists: what an order may run, set, pull and fetch
pub mod process_exit; // a status as the process's exit code, and the signals that stop it
pub mod run; // drives the worker machine with Kafka and jobs
pub mod schedule_file; // SCHEDULE_FILE: the schedules, read at start and shown by the tools
pub mod settle; // booting only after a dead predecessor's appends settled
pub mod supervise; // the dev-mode supervisor

// The command line: worker mode and one module per subcommand.
pub mod cli;
