//! The live tests: the real binary (embedded broker, supervisors, workers,
//! operator commands) as separate processes on loopback, judged by the
//! claims topic and by files the jobs write. One test binary, so that
//! librdkafka is linked once: `cargo test --test live [module::][name]`.
//!
//! The pure checks (model check and simulation, no processes) are a binary
//! of their own (`tests/pure`): their CPU-bound runs would otherwise share
//! the machine with these tests' timing-bound waits.

mod common;

mod apache;
mod apache_brokers;
mod apache_compaction;
mod apache_faults;
mod apache_network;
mod apache_parking;
mod apache_priority;
mod apache_security;
mod chaos;
mod e2e;
mod faults;
mod fence;
mod harness_smoke;
mod schedule;
mod toolkit;
mod trust;
