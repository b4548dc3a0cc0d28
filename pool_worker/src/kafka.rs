//! The one home for Kafka (issue 28): every use of the rdkafka crate is in
//! this module; the rest of the binary asks it with the project's own types.
//! Its files (in pool_worker/src/kafka/) import one way, from the top of
//! this list down:
//!
//! | file | what |
//! |------|------|
//! | `clients.rs` | the worker's two clients ([`clients::Kafka`]): the claims producer (appends, fencing, transactions; it also answers the questions: metadata, watermarks) and one consumer for the claims and orders topics, polled by one thread that routes by topic |
//! | `tools.rs` | where the tools (pool_worker/src/cli/) connect ([`tools::Source`]): their clients, the one order or cancel they send, the messages they read |
//! | `claims_reader.rs` | the one reader of the claims topic ([`claims_reader::ClaimsReader`]) and what decides which records are the pool's ([`claims_reader::Gate`]) |
//! | `topics.rs` | what the pool needs of its broker and topics, checked; partitions and end offsets asked now, of a client that never fetches ([`topics::Asks`]: the tools' own consumer, the worker's producer) |
//! | `client_config.rs` | how every client is made: the shared settings, the `KAFKA_*` properties ([`client_config::KafkaSettings`]), the fetch waits |
//! | `broker.rs` | the embedded broker (librdkafka's mock cluster) |
//!
//! The worker's configuration (pool_worker/src/config.rs) sits above them:
//! it uses `client_config` and `broker` (the `KAFKA_*` properties, topic
//! names) and hands `clients` a [`clients::Setup`], all the worker's clients need of
//! it; none of them imports it. The variables the tools read go through
//! pool_worker/src/env.rs, below both.

pub mod broker;
pub mod claims_reader;
pub mod client_config;
pub mod clients;
pub mod tools;
pub mod topics;

// What the worker loop (pool_worker/src/run.rs) takes.
pub(crate) use clients::{
    transactional_id, ClaimEvent, Kafka, OpenError, OrderMessage, Setup, Stopped, TxnSlot,
    Unreadable,
};
