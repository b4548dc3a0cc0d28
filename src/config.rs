//! The worker's configuration, from the environment.
//!
//! pool_worker runs under a supervisor (systemd, compose), where the
//! environment is the natural interface, so worker mode takes no flags. The
//! variables are read with `envy` into strings and then checked one by one,
//! so that a missing or malformed value stops the process with one line that
//! names the variable and says what is wrong (exit status 2, which the
//! supervisor takes as "do not restart").
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `KAFKA_BROKERS` | bootstrap servers | `localhost:9092` |
//! | `ORDERS_TOPIC` | the orders topic | required |
//! | `COORDINATION_TOPIC` | the claims topic (one partition, compacted) | required |
//! | `INSTANCE_NUMBER` | this instance's number, 1 to 1,000,000, unique in the pool | required |
//! | `LEASE_MS` | an instance that writes nothing about the order it holds for this long loses it to another | 30000 |
//! | `MAX_ATTEMPTS` | runs of one order lost with their instance before it is given up | 3 |
//! | `ORDERS_PER_PROCESS` | orders one process completes before it exits (1 to 1,000,000); above 1, the process chooses its next order after each completion instead of exiting (one boot and one replay for up to that many orders) | 1 |
//! | `JOB_TIMEOUT_SECS` | time limit of an order that sets none | 3600 |
//! | `OUTPUT_LIMIT_BYTES` | bytes kept of the end of a job's stdout and of its stderr | 4096 |
//! | `ALLOWED_COMMANDS` | comma-separated program names or path prefixes orders may run | all allowed (a warning) |
//! | `ALLOWED_URLS` | comma-separated URL prefixes URL orders may fetch | all allowed |
//! | `JOB_ENV_DENY` | comma-separated variable names (or `PREFIX*`) removed from jobs' environment | `KAFKA_*` |
//! | `RESULTS_TOPIC` | also publish each order's result there, keyed `PARTITION:OFFSET` | none |
//! | `SETTLE_MS` | after a process that did not exit clean, how long the next one waits before it boots (docs/protocol.md, "Settling") | 15000 |
//! | `CLAIM_DEFER_MS` | how long an idle instance defers to each idle instance ahead of it in an order's line before it claims the order anyway (docs/protocol.md, "Choosing an order"); at most `LEASE_MS`/3; 0: every idle instance claims at once (the herd) | 1000, or `LEASE_MS`/3 if less |
//! | `STATE_DIR` | where a clean exit leaves its marker (src/settle.rs) | `$STATE_DIRECTORY` (systemd), else `$TMPDIR/pool_worker` |
//! | `LOG_FORMAT` | `text` or `json` | `text` |
//! | `KAFKA_<PROPERTY>` | any librdkafka property: strip `KAFKA_`, lower-case, `_` → `.` (`KAFKA_SASL_PASSWORD` → `sasl.password`) | |

use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The environment as strings; checked by [`Config::from_env`].
#[derive(Deserialize, Debug, Default)]
struct RawEnv {
    kafka_brokers: Option<String>,
    orders_topic: Option<String>,
    coordination_topic: Option<String>,
    instance_number: Option<String>,
    max_attempts: Option<String>,
    orders_per_process: Option<String>,
    lease_ms: Option<String>,
    job_timeout_secs: Option<String>,
    output_limit_bytes: Option<String>,
    allowed_commands: Option<String>,
    allowed_urls: Option<String>,
    job_env_deny: Option<String>,
    log_format: Option<String>,
    results_topic: Option<String>,
    settle_ms: Option<String>,
    claim_defer_ms: Option<String>,
    state_dir: Option<String>,
    state_directory: Option<String>,
}

/// `CLAIM_DEFER_MS` unless set (and unless `LEASE_MS`/3 is less).
pub const DEFAULT_CLAIM_DEFER_MS: u64 = 1_000;

/// Variables that are pool_worker's own, not librdkafka properties.
const OWN_KAFKA_VARS: &[&str] = &["KAFKA_BROKERS"];

#[derive(Clone, Debug)]
pub struct Config {
    pub brokers: String,
    pub orders_topic: String,
    pub coordination_topic: String,
    pub instance: u32,
    pub max_attempts: u32,
    /// `ORDERS_PER_PROCESS`: orders completed before the process exits.
    pub orders_per_process: u32,
    pub lease_ms: u64,
    pub job_timeout: Duration,
    pub output_limit: usize,
    pub allowed_commands: Option<Vec<String>>,
    pub allowed_urls: Option<Vec<String>>,
    pub env_deny: Vec<String>,
    pub log_json: bool,
    pub results_topic: Option<String>,
    /// `SETTLE_MS`: the wait before booting after an unclean exit.
    pub settle_ms: u64,
    /// `CLAIM_DEFER_MS`: an idle instance's deferral, per instance ahead of
    /// it in an order's line.
    pub claim_defer_ms: u64,
    /// `STATE_DIR`: where the clean-exit marker lives (src/settle.rs).
    pub state_dir: std::path::PathBuf,
    /// Extra librdkafka properties (from `KAFKA_<PROPERTY>`).
    pub kafka_props: BTreeMap<String, String>,
}

/// A configuration error: the variable and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn required(name: &str, v: Option<String>) -> Result<String, ConfigError> {
    match v.map(|s| s.trim().to_string()) {
        Some(s) if !s.is_empty() => Ok(s),
        Some(_) => Err(ConfigError(format!("{name} is empty"))),
        None => Err(ConfigError(format!("{name} is not set"))),
    }
}

fn number<T: std::str::FromStr>(name: &str, v: Option<String>, default: T, range: (T, T)) -> Result<T, ConfigError>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    let Some(s) = v else { return Ok(default) };
    let n: T = s
        .trim()
        .parse()
        .map_err(|_| ConfigError(format!("{name}='{s}' is not a whole number")))?;
    if n < range.0 || n > range.1 {
        return Err(ConfigError(format!("{name}={n} is out of range ({} to {})", range.0, range.1)));
    }
    Ok(n)
}

fn list(v: Option<String>) -> Option<Vec<String>> {
    v.map(|s| s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect())
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))))
    }

    /// Reads the given variables (the tests' entry point).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let raw: RawEnv = envy::from_iter(vars.iter().cloned())
            .map_err(|e| ConfigError(format!("cannot read the environment: {e}")))?;
        let instance_s = required("INSTANCE_NUMBER", raw.instance_number)?;
        let instance: u32 = instance_s
            .parse()
            .ok()
            .filter(|n| (1..=crate::record::MAX_INSTANCE).contains(n))
            .ok_or_else(|| {
                ConfigError(format!(
                    "INSTANCE_NUMBER='{instance_s}' is not a positive whole number up to {}",
                    crate::record::MAX_INSTANCE
                ))
            })?;
        let orders_topic = required("ORDERS_TOPIC", raw.orders_topic)?;
        let coordination_topic = required("COORDINATION_TOPIC", raw.coordination_topic)?;
        for (name, t) in [("ORDERS_TOPIC", &orders_topic), ("COORDINATION_TOPIC", &coordination_topic)] {
            crate::broker::check_topic_name(t).map_err(|e| ConfigError(format!("{name}: {e}")))?;
        }
        if orders_topic == coordination_topic {
            return Err(ConfigError("ORDERS_TOPIC and COORDINATION_TOPIC name the same topic".into()));
        }
        let results_topic = raw.results_topic.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        if let Some(t) = &results_topic {
            crate::broker::check_topic_name(t).map_err(|e| ConfigError(format!("RESULTS_TOPIC: {e}")))?;
            if *t == orders_topic || *t == coordination_topic {
                return Err(ConfigError("RESULTS_TOPIC must differ from ORDERS_TOPIC and COORDINATION_TOPIC".into()));
            }
        }
        let brokers = raw.kafka_brokers.map(|s| s.trim().to_string()).unwrap_or_default();
        let brokers = if brokers.is_empty() { "localhost:9092".to_string() } else { brokers };
        let log_json = match raw.log_format.as_deref().map(str::trim) {
            None | Some("") | Some("text") => false,
            Some("json") => true,
            Some(other) => return Err(ConfigError(format!("LOG_FORMAT='{other}' is not 'text' or 'json'"))),
        };
        // systemd's StateDirectory= may list several, separated by ':'.
        let state_dir = [raw.state_dir, raw.state_directory.and_then(|s| s.split(':').next().map(str::to_string))]
            .into_iter()
            .flatten()
            .map(|s| s.trim().to_string())
            .find(|s| !s.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("pool_worker"));
        let mut kafka_props = BTreeMap::new();
        for (k, v) in &vars {
            if let Some(rest) = k.strip_prefix("KAFKA_") {
                if OWN_KAFKA_VARS.contains(&k.as_str()) || rest.is_empty() {
                    continue;
                }
                kafka_props.insert(rest.to_ascii_lowercase().replace('_', "."), v.clone());
            }
        }
        let lease_ms = number("LEASE_MS", raw.lease_ms, 30_000u64, (300, 24 * 3600 * 1000))?;
        let claim_defer_ms = number(
            "CLAIM_DEFER_MS",
            raw.claim_defer_ms,
            DEFAULT_CLAIM_DEFER_MS.min(lease_ms / 3),
            (0, lease_ms / 3),
        )
        .map_err(|e| ConfigError(format!("{} (at most LEASE_MS/3, LEASE_MS being {lease_ms})", e.0)))?;
        Ok(Config {
            brokers,
            orders_topic,
            coordination_topic,
            instance,
            lease_ms,
            claim_defer_ms,
            max_attempts: number("MAX_ATTEMPTS", raw.max_attempts, crate::worker::DEFAULT_MAX_ATTEMPTS, (1, 1000))?,
            orders_per_process: number("ORDERS_PER_PROCESS", raw.orders_per_process, 1u32, (1, 1_000_000))?,
            job_timeout: Duration::from_secs(number("JOB_TIMEOUT_SECS", raw.job_timeout_secs, 3600u64, (1, 7 * 24 * 3600))?),
            output_limit: number("OUTPUT_LIMIT_BYTES", raw.output_limit_bytes, 4096usize, (0, 1 << 20))?,
            allowed_commands: list(raw.allowed_commands),
            allowed_urls: list(raw.allowed_urls),
            env_deny: list(raw.job_env_deny).unwrap_or_else(|| vec!["KAFKA_*".to_string()]),
            log_json,
            results_topic,
            settle_ms: number("SETTLE_MS", raw.settle_ms, crate::settle::DEFAULT_SETTLE_MS, (0, 600_000))?,
            state_dir,
            kafka_props,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(v.iter().map(|(a, b)| (a.to_string(), b.to_string())))
    }

    const OK: &[(&str, &str)] = &[("ORDERS_TOPIC", "o"), ("COORDINATION_TOPIC", "c"), ("INSTANCE_NUMBER", "3")];

    #[test]
    fn defaults_and_required() {
        let c = vars(OK).unwrap();
        assert_eq!(c.brokers, "localhost:9092");
        assert_eq!(c.instance, 3);
        assert_eq!(c.env_deny, vec!["KAFKA_*"]);
        assert_eq!(c.orders_per_process, 1, "seed 002: exit after each order");
        assert_eq!(c.settle_ms, 15_000);
        assert_eq!(c.claim_defer_ms, 1_000);
        assert_eq!(c.state_dir, std::env::temp_dir().join("pool_worker"));
        assert_eq!(vars(&OK[..2]).unwrap_err().0, "INSTANCE_NUMBER is not set");
        assert_eq!(vars(&OK[1..]).unwrap_err().0, "ORDERS_TOPIC is not set");
    }

    #[test]
    fn malformed_values_name_the_variable() {
        for bad in ["0", "-1", "x", "99999999999"] {
            let mut v = OK.to_vec();
            v[2] = ("INSTANCE_NUMBER", bad);
            let e = vars(&v).unwrap_err().0;
            assert!(e.starts_with("INSTANCE_NUMBER="), "{e}");
        }
        let mut v = OK.to_vec();
        v.push(("MAX_ATTEMPTS", "lots"));
        assert!(vars(&v).unwrap_err().0.starts_with("MAX_ATTEMPTS="));
        for bad in ["0", "x", "2000000"] {
            let mut v = OK.to_vec();
            v.push(("ORDERS_PER_PROCESS", bad));
            assert!(vars(&v).unwrap_err().0.starts_with("ORDERS_PER_PROCESS="), "{bad}");
        }
        let mut v = OK.to_vec();
        v.push(("ORDERS_PER_PROCESS", "100"));
        assert_eq!(vars(&v).unwrap().orders_per_process, 100);
    }

    #[test]
    fn the_state_directory_comes_from_systemd_unless_set() {
        let mut v = OK.to_vec();
        v.push(("STATE_DIRECTORY", "/var/lib/pool_worker:/var/lib/other"));
        assert_eq!(vars(&v).unwrap().state_dir, std::path::PathBuf::from("/var/lib/pool_worker"));
        v.push(("STATE_DIR", "/srv/pw"));
        assert_eq!(vars(&v).unwrap().state_dir, std::path::PathBuf::from("/srv/pw"));
        v.push(("SETTLE_MS", "soon"));
        assert!(vars(&v).unwrap_err().0.starts_with("SETTLE_MS="));
    }

    #[test]
    fn the_claim_deferral_stays_below_a_third_of_the_lease() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = OK.to_vec();
            v.extend_from_slice(extra);
            vars(&v)
        };
        assert_eq!(with(&[("LEASE_MS", "900")]).unwrap().claim_defer_ms, 300, "the default shrinks with the lease");
        assert_eq!(with(&[("CLAIM_DEFER_MS", "0")]).unwrap().claim_defer_ms, 0);
        assert_eq!(with(&[("CLAIM_DEFER_MS", "10000")]).unwrap().claim_defer_ms, 10_000);
        let e = with(&[("CLAIM_DEFER_MS", "10001")]).unwrap_err().0;
        assert!(e.starts_with("CLAIM_DEFER_MS=10001 is out of range") && e.contains("LEASE_MS/3"), "{e}");
        assert!(with(&[("CLAIM_DEFER_MS", "soon")]).unwrap_err().0.starts_with("CLAIM_DEFER_MS="));
    }

    #[test]
    fn kafka_properties_pass_through() {
        let mut v = OK.to_vec();
        v.extend([("KAFKA_BROKERS", "h:1"), ("KAFKA_SASL_PASSWORD", "s"), ("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")]);
        let c = vars(&v).unwrap();
        assert_eq!(c.brokers, "h:1");
        assert_eq!(c.kafka_props.get("sasl.password").map(String::as_str), Some("s"));
        assert_eq!(c.kafka_props.get("security.protocol").map(String::as_str), Some("SASL_SSL"));
        assert!(!c.kafka_props.contains_key("brokers"));
    }
}
