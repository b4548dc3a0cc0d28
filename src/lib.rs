//! pool_worker: a Kafka-native worker pool that runs each work order exactly
//! once, with no coordinator process. See README.md and docs/protocol.md
//! (the rules, R1 …, that comments cite by number).
//!
//! The crate is a pure protocol core with thin shells around it:
//!
//! * core (no I/O, no clock, no randomness): [`record`] (what a claims record
//!   is), [`sign`] (signed records, `CLAIMS_KEY`), [`boot`] (replaying the claims topic into a view), [`claim`] (the
//!   negotiation), [`checkpoint`] (a summary of the log, so that boot need
//!   not replay all of it), [`worker`] (one incarnation's life as a state
//!   machine);
//! * shells: [`orders`] (parsing work orders), [`job`] (running them with
//!   tokio::process), [`kafka`] (the rdkafka adapter), [`run`] (drives the
//!   worker machine with Kafka and jobs), [`settle`] (booting only after a
//!   dead predecessor's appends settled), [`config`] (the environment),
//!   [`claims`] (the one reader of the claims topic, for the worker and
//!   the tools), [`broker`] (the embedded mock broker), [`supervise`] (the dev-mode
//!   supervisor), [`dev`] (all of it in one command); the tools: [`status`]
//!   (`status`, `history`), [`submit`], [`audit`], [`serve`] (the web page
//!   and `/metrics`); [`exit`] (every exit status, named), [`backoff`] (the
//!   retry loops' delays).

pub mod audit;
pub mod backoff;
pub mod boot;
pub mod broker;
pub mod cancel;
pub mod checkpoint;
pub mod claim;
pub mod claims;
pub mod config;
pub mod dev;
pub mod exit;
pub mod fetch;
pub mod isolate;
pub mod job;
pub mod kafka;
pub mod orders;
pub mod policy;
pub mod record;
pub mod retry;
pub mod run;
pub mod serve;
pub mod settle;
pub mod sign;
pub mod status;
pub mod submit;
pub mod supervise;
pub mod worker;
