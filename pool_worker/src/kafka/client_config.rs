//! How every Kafka client of pool_worker is made: the settings they share
//! ([`client_config`]: the bootstrap servers, the settings of every client,
//! then the user's `KAFKA_<PROPERTY>` properties, read and checked by
//! [`KafkaSettings`]), the consumers' fetch wait, the tools' quiet client
//! context ([`Silent`]), and how a blocking client call is run off the async
//! threads ([`blocking`]).
//!
//! The bottom of the Kafka module: of the project's, it names only the
//! configuration error (pool_worker/src/env.rs, below it), so that the
//! worker's configuration (pool_worker/src/config.rs) can check the
//! `KAFKA_*` properties here without a circle.

use anyhow::Context;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaConfRes;
use rdkafka::{ClientConfig, ClientContext};
use std::collections::BTreeMap;

/// A `KAFKA_*` variable that cannot be used: the one line naming it (never
/// its value). The worker's configuration and the tools turn it into a
/// [`crate::env::ConfigError`] (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// Variables that begin with `KAFKA_` but are not librdkafka properties:
/// pool_worker's own, and those of Kafka's own scripts (`kafka-run-class.sh`
/// and friends), which a host that also runs Kafka's tools may have set.
const NOT_PROPERTIES: &[&str] = &[
    "KAFKA_BROKERS",
    "KAFKA_HEAP_OPTS",
    "KAFKA_OPTS",
    "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS",
    "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_OPTS",
    "KAFKA_DEBUG",
    "KAFKA_HOME",
];

/// librdkafka's `debug` property, which `KAFKA_DEBUG` cannot set.
const DEBUG_VAR: &str = "LIBRDKAFKA_DEBUG";

/// The largest secret file a `KAFKA_<PROPERTY>_FILE` may name.
const MAX_SECRET_FILE: u64 = 64 * 1024;

/// How every command reaches Kafka: the bootstrap servers and the librdkafka
/// properties given as `KAFKA_<PROPERTY>` (or read from the file named by
/// `KAFKA_<PROPERTY>_FILE`). The worker, `status`, `history` and `submit`
/// all read them through [`KafkaSettings::from_vars`] (the worker's
/// [`crate::config::Config`], the tools' [`crate::kafka::tools::kafka_settings`]).
#[derive(Clone, Default)]
pub(crate) struct KafkaSettings {
    pub(crate) brokers: String,
    pub(crate) props: BTreeMap<String, String>,
}

/// Never prints a property's value: some are secrets.
impl std::fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSettings")
            .field("brokers", &self.brokers)
            .field("props", &self.props.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl KafkaSettings {
    /// Reads the given variables. Every property is checked by librdkafka
    /// itself here, so that a misspelt name or a bad value is a
    /// configuration error (exit 2, one line naming the variable) rather than
    /// a failure to start the clients later; the error never repeats the
    /// value, which may be a secret.
    pub(crate) fn from_vars(vars: &[(String, String)]) -> Result<KafkaSettings, SettingsError> {
        let brokers = vars
            .iter()
            .find(|(k, _)| k == "KAFKA_BROKERS")
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "localhost:9092".to_string());
        let mut props: BTreeMap<String, (String, String)> = BTreeMap::new();
        for (var, value) in vars {
            let Some(rest) = var.strip_prefix("KAFKA_") else {
                continue;
            };
            if rest.is_empty() || NOT_PROPERTIES.contains(&var.as_str()) {
                continue;
            }
            let (rest, value) = match rest.strip_suffix("_FILE") {
                Some(base) if !base.is_empty() => (base, read_secret(var, value)?),
                _ => (rest, value.clone()),
            };
            let name = rest.to_ascii_lowercase().replace('_', ".");
            if let Some((other, _)) = props.get(&name) {
                return Err(SettingsError(format!(
                    "{var} and {other} both set the Kafka property '{name}'"
                )));
            }
            check_property(var, &name, &value)?;
            props.insert(name, (var.clone(), value));
        }
        // librdkafka's `debug` (its contexts: `eos,protocol`, `all`), whose
        // `KAFKA_DEBUG` is Kafka's scripts' own; logged through
        // `RUST_LOG=librdkafka=debug`.
        if let Some((var, value)) = vars.iter().find(|(k, _)| k == DEBUG_VAR) {
            check_property(var, "debug", value)?;
            props.insert("debug".into(), (var.clone(), value.clone()));
        }
        Ok(KafkaSettings {
            brokers,
            props: props.into_iter().map(|(k, (_, v))| (k, v)).collect(),
        })
    }
}

/// The content of a `KAFKA_<PROPERTY>_FILE`, without its final line break.
fn read_secret(var: &str, path: &str) -> Result<String, SettingsError> {
    use std::io::Read as _;
    let path = path.trim();
    let cannot = |why: String| SettingsError(format!("{var}: cannot read '{path}': {why}"));
    let file = std::fs::File::open(path).map_err(|e| cannot(e.to_string()))?;
    let meta = file.metadata().map_err(|e| cannot(e.to_string()))?;
    if !meta.is_file() {
        return Err(cannot("not a regular file".into()));
    }
    let mut text = String::new();
    file.take(MAX_SECRET_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| cannot(e.to_string()))?;
    if text.len() as u64 > MAX_SECRET_FILE {
        return Err(cannot(format!("larger than {MAX_SECRET_FILE} bytes")));
    }
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.strip_suffix('\r').unwrap_or(text).to_string())
}

/// Asks librdkafka whether it takes `name` = `value`; the error names the
/// variable and the property, never the value.
fn check_property(var: &str, name: &str, value: &str) -> Result<(), SettingsError> {
    match ClientConfig::new().set(name, value).create_native_config() {
        Ok(_) => Ok(()),
        Err(KafkaError::ClientConfig(RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN, ..)) => Err(SettingsError(format!(
            "{var}: librdkafka has no property '{name}' (see librdkafka's CONFIGURATION.md; KAFKA_<PROPERTY> is the property in upper case, '.' written '_')"
        ))),
        Err(_) => Err(SettingsError(format!("{var}: librdkafka refuses this value for '{name}' (the value is not shown)"))),
    }
}

/// The client configuration every pool_worker client shares.
pub(crate) fn client_config(brokers: &str, props: &BTreeMap<String, String>) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    // Reconnect quickly after a broker outage.
    c.set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "1000");
    // Every protocol step is a small request waiting on a small answer:
    // Nagle's algorithm would hold them back.
    c.set("socket.nagle.disable", "true");
    // Connect to the brokers as soon as they are known. With sparse
    // connections (librdkafka's default) the connection to the broker named
    // in the metadata, after the bootstrap connection is dropped, is held
    // back by a "sparse connect" interval (reconnect.backoff.ms / 2, at
    // least 11 ms): 25 ms of nearly every boot (bench/RESULTS.md). The cost
    // is a connection per broker per client on a large cluster
    // (`KAFKA_ENABLE_SPARSE_CONNECTIONS=true` to go back).
    c.set("enable.sparse.connections", "false");
    // No client metrics pushed to the brokers (KIP-714, librdkafka's
    // default since 2.5): a worker process lives for one order, far less
    // than a push interval, and with it on every broker handle a client
    // makes allocates and clears a dozen histograms, about 4 % of a
    // worker process's CPU up to its boot (bench/RESULTS.md, "Issue 35:
    // client metrics off"). `KAFKA_ENABLE_METRICS_PUSH=true` to go back.
    c.set("enable.metrics.push", "false");
    for (k, v) in props {
        c.set(k, v);
    }
    c
}

/// `fetch.wait.max.ms` of every reader of the claims topic
/// (pool_worker/src/kafka/claims_reader.rs), the worker's one consumer
/// included, which reads the orders topic with it too.
///
/// Shorter than Kafka's default (500 ms) because with transactions
/// (docs/protocol.md R16) a read_committed fetch waiting at the last stable
/// offset is not answered when a commit marker moves it: Apache Kafka 4.4
/// holds it for the whole wait (measured in
/// `pool_worker/tests/live/fence.rs` `kill_storm_on_apache_kafka`, 6
/// instances under kills: a boot's replay took 1.3 s at the median with
/// 500 ms, 0.33 s with 100 ms, 0.17 s with 20 ms). That was measured while
/// the worker knew it caught up only by librdkafka's end of partition,
/// which in a busy log comes only after a whole quiet wait; it also says so
/// now once it has read a fetch's answer whole (`ClaimEvent::Drained`,
/// bench/RESULTS.md), so the wait may matter less than this measured, but
/// the tools' reads to the end still wait for an end of partition, and a
/// longer wait has not been measured since. For the orders topic the
/// wait costs no latency at any value (a Kafka broker answers a waiting
/// fetch as soon as an order arrives; orders are written without
/// transactions); when the worker had a consumer per topic, the orders one
/// waited 500 ms. One consumer sends one fetch per broker for both topics'
/// partitions, so an idle worker on a broker that leads both asks about ten
/// times a second, not ten plus two. `KAFKA_FETCH_WAIT_MAX_MS` overrides it
/// (the user's properties are applied last).
///
/// librdkafka's mock cluster (the embedded broker, `pool_worker broker` and
/// `dev`) holds an empty fetch for the whole wait instead, and an order
/// waits on such fetches about five times (its arrival at an idle worker,
/// the read-back of the claim, of the decision and of the completion, the
/// fetch of its payload): against it the workers run with
/// [`crate::kafka::broker::WORKER_ENV`] (2 ms), set by `dev`, the tests and
/// the bench, never by default (bench/RESULTS.md, "Idle pool": idle CPU and
/// latency with both).
pub const CLAIMS_FETCH_WAIT_MS: u32 = 100;

/// The tools' client context: librdkafka's own log and error callbacks
/// say nothing (at debug level at most). A tool reports what failed itself,
/// once, instead of librdkafka's `AllBrokersDown` every second (issue 19).
pub struct Silent;

impl ClientContext for Silent {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::debug!(target: "librdkafka", "{fac}: {message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, "kafka: {reason}");
    }
}

impl ConsumerContext for Silent {}

/// Runs a blocking rdkafka call off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .context("blocking task failed")
}

/// A rejected `KAFKA_*` variable (`KafkaSettings`) is a configuration error.
impl From<SettingsError> for crate::env::ConfigError {
    fn from(e: SettingsError) -> crate::env::ConfigError {
        crate::env::ConfigError(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool's own defaults for librdkafka, and the user's
    /// `KAFKA_<PROPERTY>` over them.
    #[test]
    fn the_pools_defaults_and_the_users_properties_over_them() {
        let c = client_config("127.0.0.1:9092", &BTreeMap::new());
        assert_eq!(c.get("enable.metrics.push"), Some("false"));
        assert_eq!(c.get("enable.sparse.connections"), Some("false"));
        assert_eq!(c.get("socket.nagle.disable"), Some("true"));
        let user = BTreeMap::from([("enable.metrics.push".to_string(), "true".to_string())]);
        let c = client_config("127.0.0.1:9092", &user);
        assert_eq!(c.get("enable.metrics.push"), Some("true"));
        // librdkafka knows the property (it refuses unknown ones).
        assert!(c.create_native_config().is_ok());
    }

    /// `LIBRDKAFKA_DEBUG` sets librdkafka's `debug`; `KAFKA_DEBUG` (Kafka's
    /// scripts') does not; a context librdkafka does not know is refused,
    /// naming the variable.
    #[test]
    fn librdkafka_debug_has_a_variable_of_its_own() {
        let vars = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let s = KafkaSettings::from_vars(&vars(&[("LIBRDKAFKA_DEBUG", "eos,protocol")])).unwrap();
        assert_eq!(
            s.props.get("debug").map(String::as_str),
            Some("eos,protocol")
        );
        let s = KafkaSettings::from_vars(&vars(&[("KAFKA_DEBUG", "y")])).unwrap();
        assert!(!s.props.contains_key("debug"));
        let e = KafkaSettings::from_vars(&vars(&[("LIBRDKAFKA_DEBUG", "nonsense")])).unwrap_err();
        assert!(e.0.contains("LIBRDKAFKA_DEBUG"), "{e}");
    }
}
