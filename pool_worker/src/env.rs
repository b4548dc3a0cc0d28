//! The environment as settings: the one path every program's variables
//! take, the worker's (pool_worker/src/config.rs) and the tools'
//! (pool_worker/src/kafka/tools.rs, pool_worker/src/cli/) (issue 20).
//! [`read`] deserialises them with envy into typed structs, each field
//! through a parser of [`parse`], so that a missing or malformed value stops
//! the process with one line that names the variable and says what is wrong
//! ([`ConfigError`], exit status 2); `flag_or_env` lets a tool's flag
//! override its variable. Below the configuration and Kafka both, so that
//! neither needs the other to read a variable.

use serde::Deserialize;

/// A configuration error: the variable and what is wrong with it, returned
/// by the configuration (pool_worker/src/config.rs), the parsers it calls
/// (pool_worker/src/isolate.rs, pool_worker/src/policy.rs,
/// pool_worker/src/settle.rs) and the tools' settings. The binary exits
/// [`crate::process_exit::Exit::Config`] on one (`main` finds it in an
/// `anyhow::Error` by its type).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Deserialises `T` from (name, value) pairs with envy: every program's
/// settings, the worker's (`Config`, pool_worker/src/config.rs) and the tools' (`status::SourceEnv`
/// and the like), come through here. A value a field's parser refuses is a
/// [`ConfigError`] that begins with the variable's name (from the field's
/// path, upper-cased) followed by the parser's words, e.g.
/// `LEASE_MS='soon' is not a whole number`. The parsers never repeat a
/// value that may be secret (they parse numbers, lists and names only).
pub fn read<T: serde::de::DeserializeOwned>(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<T, ConfigError> {
    let Tracked(value) = envy::from_iter::<_, Tracked<T>>(vars)
        .map_err(|e| ConfigError(format!("cannot read the environment: {e}")))?;
    value
}

/// [`read`] from the process environment (non-UTF-8 variables left out).
pub(crate) fn read_env<T: serde::de::DeserializeOwned>() -> Result<T, ConfigError> {
    read(env_vars())
}

/// A tool's flag over its variable over its default: unless the flag
/// `id` was given on the command line, the variable's value (already read
/// by [`read`]), if set, replaces the flag's default in `field`.
pub(crate) fn flag_or_env<T>(m: &clap::ArgMatches, id: &str, field: &mut T, var: Option<T>) {
    let given = m.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    if let (false, Some(v)) = (given, var) {
        *field = v;
    }
}

/// The process environment, as (name, value) pairs (non-UTF-8 ones left out).
pub(crate) fn env_vars() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// A deserialised value, or the error with the variable it came from.
struct Tracked<T>(Result<T, ConfigError>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Tracked<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Tracked(serde_path_to_error::deserialize(d).map_err(
            |e: serde_path_to_error::Error<D::Error>| {
                let path = e.path().to_string();
                let inner = e.inner().to_string();
                match e.path().iter().next() {
                    Some(serde_path_to_error::Segment::Map { key }) => {
                        ConfigError(format!("{}{inner}", key.to_ascii_uppercase()))
                    }
                    _ => ConfigError(format!("cannot read the environment ({path}): {inner}")),
                }
            },
        )))
    }
}

/// The field parsers of the settings structs (`#[serde(deserialize_with)]`).
/// Each error is written to follow the variable's name (see [`read`]).
pub mod parse {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        String::deserialize(d)
    }

    /// A whole number, spaces around it allowed.
    pub fn whole<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: std::str::FromStr,
    {
        let s = string(d)?;
        s.trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("='{s}' is not a whole number")))
    }

    /// A positive whole number; empty: unset.
    pub(crate) fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let s = string(d)?;
        let v = s.trim();
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(D::Error::custom(format!(
                "='{v}' is not a positive whole number"
            ))),
        }
    }

    /// `INSTANCE_NUMBER`: 1 to [`crate::record::MAX_INSTANCE`].
    pub fn instance<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        let s = string(d)?;
        let v = s.trim();
        if v.is_empty() {
            return Err(D::Error::custom(" is empty"));
        }
        v.parse()
            .ok()
            .filter(|n| (1..=crate::record::MAX_INSTANCE).contains(n))
            .map(Some)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "='{v}' is not a positive whole number up to {}",
                    crate::record::MAX_INSTANCE
                ))
            })
    }

    /// A comma-separated list, each item trimmed, empty items dropped (set
    /// but empty: an empty list).
    pub fn list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
        Ok(Some(super::split_list(&string(d)?)))
    }

    /// Text, trimmed; empty: unset.
    pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let s = string(d)?;
        let s = s.trim();
        Ok((!s.is_empty()).then(|| s.to_string()))
    }
}

/// A comma-separated list: items trimmed, empty ones dropped.
fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}
