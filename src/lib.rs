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
//! | the core | `record` (with `record/`), `boot` (with `boot/`), `claim`, `checkpoint`, `worker`, `exit_status`, `erased`, `orders`, `sign`, `audit` | the core and crates that do no I/O (serde, hmac, ...); no I/O, no clock, no randomness: no rdkafka, tokio, nix, `std::fs`, `std::net`, `std::process` |
//! | the shells | `run`, `kafka` (with `kafka/`: `worker`, `tools`, `claims`, `topics`, `settings`, `broker`; the only modules that name the rdkafka crate), `settle`, `supervise`, `job`, `isolate`, `fetch`, `policy`, `config`, `exit`, `backoff` | the core, each other, and the world |
//! | the command line | `cli` (and `src/main.rs`) | everything |
//!
//! A core module imports no shell: the core stands below them all.

// The core: no I/O, no clock, no randomness.
pub mod audit; // the claims log checked against the invariants (I1–I5)
pub mod boot; // replaying the claims topic into a view
pub mod checkpoint; // a summary of the log, so that boot need not replay all of it
pub mod claim; // the negotiation
pub mod erased; // what compaction erased, as a reader sees it
pub mod exit_status; // every exit status, named and numbered
pub mod orders; // parsing work orders
pub mod record; // what a claims record is
pub mod sign; // signed records, `CLAIMS_KEY`
pub mod worker; // one incarnation's life as a state machine

// The shells: Kafka, processes, the environment.
pub mod backoff; // the retry loops' delays
pub mod config; // the environment
pub mod exit; // a status as the process's, and the signals that stop it
pub mod fetch; // fetching a URL order's body
pub mod isolate; // what keeps a job away from the worker
pub mod job; // running a job with tokio::process
pub mod kafka; // everything Kafka: the worker's and the tools' clients, the claims reader, the embedded broker
pub mod policy; // the allow lists: what an order may run, set, pull and fetch
pub mod run; // drives the worker machine with Kafka and jobs
pub mod settle; // booting only after a dead predecessor's appends settled
pub mod supervise; // the dev-mode supervisor

// The command line: worker mode and one module per subcommand.
pub mod cli;
