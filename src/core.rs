//! pool_worker_core: the protocol core of pool_worker, a crate of its own so
//! that the compiler guards what was a convention: the core does no I/O,
//! reads no clock and draws no randomness (records and time in, decisions
//! out). Its manifest (`core/Cargo.toml`) depends only on crates that do no
//! I/O (serde, serde_json, hmac, sha2, shell-words), so a core module cannot
//! name rdkafka, tokio, nix or any shell; and it must not use `std::fs`,
//! `std::net`, `std::process`, `std::time`'s clocks or randomness. See
//! docs/protocol.md for the rules (R1 …) that comments cite by number.
//!
//! Layout: the core's sources stay where they always were, in `src/`
//! (`src/claim.rs`, `src/boot.rs`, `src/orders.rs` ... are the paths the
//! design card names), so this crate root lives in `src/` too, and
//! `core/Cargo.toml` points its `[lib] path` here: a crate root resolves
//! `mod x;` in its own directory. The `pool_worker` crate (src/lib.rs) does
//! not declare these modules; it re-exports them (`pub use
//! pool_worker_core::{...}`), so that `crate::record::...` in the shells and
//! `pool_worker::record::...` elsewhere still work. A module declared by
//! both crates would not compile (a name clash with the re-export): that is
//! the guard against a shell file creeping into the core or back. The one
//! list of which module is which is src/lib.rs's table.
//!
//! The cargo feature `testing` compiles the hooks that exist only for the
//! checks (`worker::Flaw`, `View::relabel`, accessors only the tests read);
//! pool_worker's own `testing` feature turns it on.

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
