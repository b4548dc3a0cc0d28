//! pool_worker: a Kafka-native worker pool that runs each work order exactly
//! once, with no coordinator process. See README.md and docs/protocol.md.
//!
//! The crate is a pure protocol core with thin shells around it:
//!
//! * core (no I/O, no clock, no randomness): [`record`], [`boot`], [`claim`],
//!   [`lease`], [`worker`];
//! * shells: [`orders`] (parsing work orders), [`job`] (running them with
//!   tokio::process), [`kafka`] (the rdkafka adapter), [`broker`] (the
//!   embedded mock broker), [`supervise`] (the dev-mode supervisor),
//!   [`config`] (the environment).

pub mod record;
pub mod orders;
pub mod job;
pub mod broker;
pub mod supervise;
pub mod dev;
