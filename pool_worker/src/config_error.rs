//! The configuration's error: what pool_worker/src/config.rs and the parsers it calls
//! (pool_worker/src/isolate.rs, pool_worker/src/policy.rs, pool_worker/src/settle.rs) return. Its own module,
//! below them all, so that those parsers need not import the configuration
//! that imports them.

/// A configuration error: the variable and what is wrong with it. The
/// binary exits [`crate::exit::Exit::Config`] on one (`main` finds it in an
/// `anyhow::Error` by its type).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);
