//! The worker's configuration, from the environment.
//!
//! pool_worker runs under a supervisor (systemd, compose), where the
//! environment is the natural interface, so worker mode takes no flags.
//! Every program's settings from the environment, the worker's and the
//! tools', take one path (issue 20, pool_worker/src/env.rs, below this
//! module and Kafka's both): [`read`] deserialises them with envy
//! into typed structs (numbers, lists, `LOG_FORMAT`), each field through a
//! parser of [`parse`](crate::env::parse), so that a missing or malformed value stops the
//! process with one line that names the variable and says what is wrong
//! (exit status 2, which the supervisor takes as "do not restart"); the
//! tools' flags override their variables. The one exception is
//! `KAFKA_<PROPERTY>`, an open set of names passed through to librdkafka
//! ([`KafkaSettings`]).
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `KAFKA_BROKERS` | bootstrap servers | `localhost:9092` |
//! | `ORDERS_TOPIC` | the orders topics, comma-separated, in priority order (docs/protocol.md R57): an idle instance takes a waiting order of the first that has one; the last is the main topic (at most 16; pool_worker/src/orders_topics.rs) | required |
//! | `COORDINATION_TOPIC` | the claims topic (one partition, compacted) | required |
//! | `INSTANCE_NUMBER` | this instance's number, 1 to 1,000,000, unique in the pool | required |
//! | `LEASE_MS` | an instance that writes nothing about the order it holds for this long loses it to another | 30000 |
//! | `MAX_ATTEMPTS` | runs of one order lost with their instance before it is given up | 3 |
//! | `ORDERS_PER_PROCESS` | orders one process completes before it exits (1 to 1,000,000); above 1, the process chooses its next order after each completion instead of exiting (one boot and one replay for up to that many orders) | 1 |
//! | `JOB_TIMEOUT_SECS` | time limit of an order that sets none | 3600 |
//! | `OUTPUT_LIMIT_BYTES` | bytes kept of the end of a job's stdout and of its stderr | 4096 |
//! | `ALLOWED_COMMANDS` | comma-separated program names or path prefixes orders may run | all allowed (a warning) |
//! | `ALLOWED_URLS` | comma-separated URLs whose scheme, host, port (exactly) and path (on whole segments) URL orders may fetch | URL orders refused |
//! | `ALLOWED_IMAGES` | comma-separated image names (any tag), exact references, repository prefixes ending in `/`, or `*`, that image orders may run | image orders refused |
//! | `ORDER_ENV_ALLOW` | comma-separated names (or `PREFIX*`) an order's `env` may set; `policy::ENV_FLOOR` is refused regardless | every name outside the floor |
//! | `JOB_USER` | run jobs as this user (name or uid; its groups too) | the worker's user |
//! | `JOB_LIMIT_MEMORY_MB`, `JOB_LIMIT_PROCESSES`, `JOB_LIMIT_OPEN_FILES` | per-job `RLIMIT_AS`, `RLIMIT_NPROC` (of the job's user), `RLIMIT_NOFILE` | the worker's limits |
//! | `JOB_ENV_DENY` | comma-separated variable names (or `PREFIX*`) removed from jobs' environment, in addition to `KAFKA_*` and `CLAIMS_KEY*` (always removed) | |
//! | `CLAIMS_KEY` | a secret shared by the pool (16 bytes or more): every claims record is signed with it (HMAC-SHA256, header `pool-sig`), and unsigned or badly signed records are skipped as foreign (src/sign.rs) | none: nothing signed or checked |
//! | `CLAIMS_KEY_FILE` | a file holding `CLAIMS_KEY` (not both) | |
//! | `RESULTS_TOPIC` | also publish each order's result there, keyed `PARTITION:OFFSET` | none |
//! | `CLAIMS_FENCE` | how a process makes sure its dead predecessor's appends are over before it boots (docs/protocol.md R16–R18): `transactions` (Kafka's producer fencing: claims records are written in transactions under a `transactional.id` per pool and instance, and a new process's `init_transactions` fences its predecessor) or `settle` (wait `SETTLE_MS`; only for a broker that cannot fence, the embedded one, whose `worker_env` sets it) | `transactions` |
//! | `CHECKPOINT_MAX_AGE_MS` | a boot starts from the newest checkpoint near the end of the claims topic only if it is younger than this, else it replays the log from its beginning (docs/protocol.md R24); keep it below the claims topic's `min.compaction.lag.ms` | 518400000 (6 days) |
//! | `SETTLE_MS` | with `CLAIMS_FENCE=settle`: after a process that did not exit clean, how long the next one waits before it boots (docs/protocol.md R17, R18) | 15000 |
//! | `CLAIM_DEFER_MS` | how long an idle instance defers to each idle instance ahead of it in an order's line before it claims the order anyway (docs/protocol.md R29); at most `LEASE_MS`/3; 0: every idle instance claims at once (the herd) | 1000, or `LEASE_MS`/3 if less |
//! | `STATE_DIR` | where a clean exit leaves its marker (pool_worker/src/settle.rs); must be the worker user's own and not group/world-writable (created 0700) | `$STATE_DIRECTORY` (systemd), else `$XDG_RUNTIME_DIR/pool_worker`, else `$TMPDIR/pool_worker-<uid>` |
//! | `LOG_FORMAT` | `text` or `json` | `text` |
//! | `POOL_WORKER_ACCOUNT` | a file: every `pool_worker` process that reads it (the supervisor, each worker and standby, each job's guard) appends a line at each point of an order's way, with its wall clock and CPU time (pool_worker/src/account.rs); a measuring aid for the bench's `account` section (read by `account::init` through the same env path, before the rest) | unset: off, nothing read or written |
//! | `KAFKA_<PROPERTY>` | any librdkafka property: strip `KAFKA_`, lower-case, `_` → `.` (`KAFKA_SASL_PASSWORD` → `sasl.password`) | |

use crate::env::{env_vars, flag_or_env, read, read_env, ConfigError};
use crate::kafka::client_config::KafkaSettings;
use crate::orders_topics::OrdersTopics;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The worker's variables, typed: [`read`] deserialises them with envy, each
/// field through one of the parsers in [`parse`], so that a malformed value
/// stops the process with one line naming its variable (see [`read`]).
/// Checks that need several fields (ranges that depend on `LEASE_MS`, topics
/// that must differ, the claims key) are [`Config::from_vars`]'s.
#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct WorkerEnv {
    orders_topic: Option<String>,
    coordination_topic: Option<String>,
    #[serde(deserialize_with = "parse::instance")]
    instance_number: Option<u32>,
    #[serde(deserialize_with = "parse::whole")]
    max_attempts: Option<u32>,
    #[serde(deserialize_with = "parse::whole")]
    orders_per_process: Option<u32>,
    #[serde(deserialize_with = "parse::whole")]
    lease_ms: Option<u64>,
    #[serde(deserialize_with = "parse::whole")]
    job_timeout_secs: Option<u64>,
    #[serde(deserialize_with = "parse::whole")]
    output_limit_bytes: Option<usize>,
    #[serde(deserialize_with = "parse::list")]
    allowed_commands: Option<Vec<String>>,
    #[serde(deserialize_with = "parse::list")]
    allowed_urls: Option<Vec<String>>,
    #[serde(deserialize_with = "parse::list")]
    job_env_deny: Option<Vec<String>>,
    #[serde(deserialize_with = "parse::log_format")]
    log_format: Option<LogFormat>,
    #[serde(deserialize_with = "parse::text")]
    results_topic: Option<String>,
    #[serde(deserialize_with = "parse::whole")]
    settle_ms: Option<u64>,
    #[serde(deserialize_with = "parse::whole")]
    checkpoint_max_age_ms: Option<u64>,
    #[serde(deserialize_with = "parse::fence")]
    claims_fence: Option<Fence>,
    #[serde(deserialize_with = "parse::whole")]
    claim_defer_ms: Option<u64>,
    #[serde(deserialize_with = "parse::whole")]
    key_concurrency: Option<u32>,
    #[serde(deserialize_with = "parse::text")]
    state_dir: Option<String>,
    state_directory: Option<String>,
    xdg_runtime_dir: Option<String>,
    claims_key: Option<String>,
    #[serde(deserialize_with = "parse::text")]
    claims_key_file: Option<String>,
    #[serde(deserialize_with = "parse::text")]
    schedule_file: Option<String>,
    #[serde(deserialize_with = "parse::list")]
    order_env_allow: Option<Vec<String>>,
    #[serde(deserialize_with = "parse::list")]
    allowed_images: Option<Vec<String>>,
    #[serde(deserialize_with = "parse::text")]
    job_user: Option<String>,
    #[serde(deserialize_with = "parse::positive")]
    job_limit_memory_mb: Option<u64>,
    #[serde(deserialize_with = "parse::positive")]
    job_limit_processes: Option<u64>,
    #[serde(deserialize_with = "parse::positive")]
    job_limit_open_files: Option<u64>,
    /// Set by `supervise` ([`crate::supervise::WARNED_OPEN_COMMANDS`]), not
    /// by operators.
    pool_worker_warned_open_commands: Option<String>,
    /// Set by `supervise` ([`crate::supervise::STANDBY`]), not by operators.
    pool_worker_standby: Option<String>,
    /// Set by `supervise` ([`crate::supervise::TXN_SLOT`]), not by operators.
    pool_worker_txn_slot: Option<String>,
    /// Set by `supervise` ([`crate::supervise::INCARNATION`]), not by
    /// operators.
    pool_worker_incarnation: Option<String>,
}

/// `LOG_FORMAT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// `CLAIMS_FENCE`: how a new process makes sure that its dead
/// predecessor's appends are over before it appends its `booted`
/// (docs/protocol.md R16–R18).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fence {
    /// Kafka's producer fencing (R16): claims records are written in
    /// transactions under the instance's `transactional.id`; a new
    /// process's `init_transactions` aborts what its predecessor left open
    /// and makes the broker refuse whatever it still sends.
    #[default]
    Transactions,
    /// Wait `SETTLE_MS` (R17, R18): for a broker that cannot fence (the
    /// embedded one, librdkafka's mock cluster).
    Settle,
}

/// The topic variables of `dev` and `broker`, which create the topics.
#[derive(Deserialize, Debug, Default)]
#[serde(default)]
pub(crate) struct TopicsEnv {
    #[serde(deserialize_with = "parse::text")]
    pub(crate) orders_topic: Option<String>,
    #[serde(deserialize_with = "parse::text")]
    pub(crate) coordination_topic: Option<String>,
    #[serde(deserialize_with = "parse::text")]
    pub(crate) results_topic: Option<String>,
}

impl TopicsEnv {
    /// Fills the flags `orders_topic`, `coordination_topic` and
    /// `results_topic` that were not given from the environment.
    pub(crate) fn apply(
        m: &clap::ArgMatches,
        orders: &mut String,
        coordination: &mut String,
        results: &mut Option<String>,
    ) -> Result<(), ConfigError> {
        let env: TopicsEnv = read_env()?;
        flag_or_env(m, "orders_topic", orders, env.orders_topic);
        flag_or_env(
            m,
            "coordination_topic",
            coordination,
            env.coordination_topic,
        );
        flag_or_env(m, "results_topic", results, env.results_topic.map(Some));
        Ok(())
    }
}

/// Whether `LOG_FORMAT` asks for JSON, for the one line `main` writes when
/// the configuration is refused (before logging is set up): a malformed
/// `LOG_FORMAT` is text.
pub fn log_json_from_env() -> bool {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Log {
        #[serde(deserialize_with = "parse::log_format")]
        log_format: Option<LogFormat>,
    }
    read_env::<Log>().is_ok_and(|l| l.log_format == Some(LogFormat::Json))
}

/// The field parsers of [`WorkerEnv`]: the shared ones
/// (pool_worker/src/env.rs) and those of this module's own types.
mod parse {
    pub(crate) use crate::env::parse::*;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        String::deserialize(d)
    }

    /// `CLAIMS_FENCE`: `transactions` (or empty) or `settle`.
    pub(crate) fn fence<'de, D: Deserializer<'de>>(d: D) -> Result<Option<super::Fence>, D::Error> {
        match string(d)?.trim() {
            "" | "transactions" => Ok(Some(super::Fence::Transactions)),
            "settle" => Ok(Some(super::Fence::Settle)),
            other => Err(D::Error::custom(format!(
                "='{other}' is not 'transactions' or 'settle'"
            ))),
        }
    }

    /// `LOG_FORMAT`: `text` (or empty) or `json`.
    pub(crate) fn log_format<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<super::LogFormat>, D::Error> {
        match string(d)?.trim() {
            "" | "text" => Ok(Some(super::LogFormat::Text)),
            "json" => Ok(Some(super::LogFormat::Json)),
            other => Err(D::Error::custom(format!(
                "='{other}' is not 'text' or 'json'"
            ))),
        }
    }
}

/// `CLAIM_DEFER_MS` unless set (and unless `LEASE_MS`/3 is less).
pub(crate) const DEFAULT_CLAIM_DEFER_MS: u64 = 1_000;

/// Names removed from every job's environment whatever `JOB_ENV_DENY` says
/// (the variable adds to them): the Kafka settings, credentials included,
/// and the claims topic's signing key.
pub(crate) const ALWAYS_DENIED: &[&str] = &["KAFKA_*", "CLAIMS_KEY*"];

use crate::record::size::MAX_OUTPUT_LIMIT;

/// `JOB_ENV_DENY` adds to [`ALWAYS_DENIED`]; it never replaces it.
fn env_deny(v: Option<Vec<String>>) -> Vec<String> {
    let mut deny: Vec<String> = ALWAYS_DENIED.iter().map(|s| s.to_string()).collect();
    for name in v.unwrap_or_default() {
        if !deny.contains(&name) {
            deny.push(name);
        }
    }
    deny
}

#[derive(Clone, Debug)]
pub struct Config {
    pub brokers: String,
    /// `ORDERS_TOPIC`: the orders topics in priority order.
    pub orders_topics: crate::orders_topics::OrdersTopics,
    pub coordination_topic: String,
    pub instance: u32,
    pub max_attempts: u32,
    /// `ORDERS_PER_PROCESS`: orders completed before the process exits.
    pub orders_per_process: u32,
    pub lease_ms: u64,
    pub(crate) job_timeout: Duration,
    pub(crate) output_limit: usize,
    pub(crate) allowed_commands: Option<Vec<String>>,
    pub(crate) allowed_urls: Option<Vec<crate::policy::UrlRule>>,
    pub(crate) env_deny: Vec<String>,
    pub log_json: bool,
    pub results_topic: Option<String>,
    /// `CLAIMS_FENCE`: fence the predecessor with Kafka's transactions, or
    /// settle (wait `SETTLE_MS`).
    pub fence: Fence,
    /// `SETTLE_MS`: with `CLAIMS_FENCE=settle`, the wait before booting
    /// after an unclean exit.
    pub settle_ms: u64,
    /// `CHECKPOINT_MAX_AGE_MS`: a boot starts from a checkpoint younger
    /// than this, else from the log's beginning (docs/protocol.md R24).
    pub checkpoint_max_age_ms: u64,
    /// `CLAIM_DEFER_MS`: an idle instance's deferral, per instance ahead of
    /// it in an order's line.
    pub claim_defer_ms: u64,
    /// `KEY_CONCURRENCY`: runs of one order `key` live at once across the
    /// pool, at most (docs/protocol.md R56); the same in every instance.
    pub key_concurrency: u32,
    /// `STATE_DIR`: where the clean-exit marker lives (pool_worker/src/settle.rs).
    pub state_dir: std::path::PathBuf,
    /// `CLAIMS_KEY` or `CLAIMS_KEY_FILE`: the pool signs its claims records
    /// and takes unsigned or badly signed ones for foreign (src/sign.rs).
    pub claims_key: Option<crate::sign::ClaimsKey>,
    /// Extra librdkafka properties (from `KAFKA_<PROPERTY>`).
    pub(crate) kafka_props: BTreeMap<String, String>,
    /// What jobs may do and as whom (issue 18; see [`JobSettings`]).
    pub(crate) jobs: JobSettings,
    /// The supervisor that started this worker said already that
    /// `ALLOWED_COMMANDS` is not set
    /// ([`crate::supervise::WARNED_OPEN_COMMANDS`]).
    pub(crate) open_commands_warned: bool,
    /// A standby started by `supervise` ([`crate::supervise::STANDBY`]):
    /// fence its predecessor and append only after `go` on standard input.
    pub(crate) standby: bool,
    /// Which of the instance's two transactional ids this process writes
    /// under ([`crate::supervise::TXN_SLOT`], set by `supervise`; `None`:
    /// the one id a process outside `supervise` has, R16).
    pub(crate) txn_slot: Option<crate::kafka::TxnSlot>,
    /// The incarnation id a standby takes ([`crate::supervise::INCARNATION`],
    /// set by `supervise`: it tells it to the current process as its heir,
    /// R16); `None`: the worker draws its own.
    pub(crate) incarnation: Option<String>,
    /// `SCHEDULE_FILE`: the periodic orders this worker produces when it is
    /// its turn (src/schedule.rs; none without the variable).
    pub schedules: Vec<crate::schedule::Schedule>,
}

/// The job-isolation settings: `ORDER_ENV_ALLOW`, `ALLOWED_IMAGES`,
/// `JOB_USER`, `JOB_LIMIT_*` (docs/deploy.md, "Security").
#[derive(Clone, Debug, Default)]
pub(crate) struct JobSettings {
    pub(crate) env_allow: Option<Vec<String>>,
    pub(crate) allowed_images: Option<Vec<String>>,
    pub(crate) user: Option<crate::isolate::JobUser>,
    pub(crate) limits: crate::isolate::Limits,
}

impl JobSettings {
    fn from_env(env: &mut WorkerEnv) -> Result<JobSettings, ConfigError> {
        let memory_bytes = match env.job_limit_memory_mb {
            None => None,
            Some(mb) => Some(mb.checked_mul(1 << 20).ok_or_else(|| {
                ConfigError(format!(
                    "JOB_LIMIT_MEMORY_MB='{mb}' is not a positive whole number"
                ))
            })?),
        };
        let user = match env.job_user.as_deref() {
            None => None,
            Some(u) => Some(crate::isolate::JobUser::lookup(u)?),
        };
        Ok(JobSettings {
            env_allow: crate::policy::parse_env_allow(env.order_env_allow.take())?,
            allowed_images: env.allowed_images.take(),
            user,
            limits: crate::isolate::Limits {
                memory_bytes,
                processes: env.job_limit_processes,
                open_files: env.job_limit_open_files,
            },
        })
    }
}

/// The default `SETTLE_MS` (pool_worker/src/settle.rs): librdkafka's
/// `message.timeout.ms` (10 s, set in pool_worker/src/kafka/clients.rs) plus 5 s for the
/// broker's own queueing.
pub(crate) const DEFAULT_SETTLE_MS: u64 = 15_000;

fn required(name: &str, v: Option<String>) -> Result<String, ConfigError> {
    match v.map(|s| s.trim().to_string()) {
        Some(s) if !s.is_empty() => Ok(s),
        Some(_) => Err(ConfigError(format!("{name} is empty"))),
        None => Err(ConfigError(format!("{name} is not set"))),
    }
}

/// A number already parsed by [`parse::whole`], or its default; checked
/// against its range.
fn number<T>(name: &str, v: Option<T>, default: T, range: (T, T)) -> Result<T, ConfigError>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    let n = v.unwrap_or(default);
    if v.is_some() && (n < range.0 || n > range.1) {
        return Err(ConfigError(format!(
            "{name}={n} is out of range ({} to {})",
            range.0, range.1
        )));
    }
    Ok(n)
}

/// `STATE_DIR` when neither it nor systemd's `STATE_DIRECTORY` is set:
/// `$XDG_RUNTIME_DIR/pool_worker`, else `$TMPDIR/pool_worker-<uid>`.
pub(crate) fn default_state_dir(xdg_runtime_dir: Option<&str>) -> std::path::PathBuf {
    match xdg_runtime_dir
        .map(str::trim)
        .filter(|d| d.starts_with('/'))
    {
        Some(d) => std::path::Path::new(d).join("pool_worker"),
        None => std::env::temp_dir().join(format!("pool_worker-{}", nix::unistd::geteuid())),
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(env_vars())
    }

    /// Reads the given variables (the tests' entry point).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let mut raw: WorkerEnv = read(vars.iter().cloned())?;
        let instance = raw
            .instance_number
            .ok_or_else(|| ConfigError("INSTANCE_NUMBER is not set".into()))?;
        let topics = Topics::from_env(&mut raw)?;
        let KafkaSettings {
            brokers,
            props: kafka_props,
        } = KafkaSettings::from_vars(&vars)?;
        let key_file = raw.claims_key_file.take();
        let claims_key = crate::sign::ClaimsKey::from_sources(
            raw.claims_key.as_deref(),
            key_file.as_deref().map(|p| (p, std::fs::read(p))),
        )
        .map_err(ConfigError)?;
        let lease_ms = number("LEASE_MS", raw.lease_ms, 30_000u64, (300, 24 * 3600 * 1000))?;
        Ok(Config {
            brokers,
            orders_topics: topics.orders,
            coordination_topic: topics.coordination,
            results_topic: topics.results,
            instance,
            lease_ms,
            claim_defer_ms: claim_defer_ms(raw.claim_defer_ms, lease_ms)?,
            key_concurrency: number("KEY_CONCURRENCY", raw.key_concurrency, 1u32, (1, 10_000))?,
            max_attempts: number(
                "MAX_ATTEMPTS",
                raw.max_attempts,
                crate::worker::DEFAULT_MAX_ATTEMPTS,
                (1, 1000),
            )?,
            orders_per_process: number(
                "ORDERS_PER_PROCESS",
                raw.orders_per_process,
                1u32,
                (1, 1_000_000),
            )?,
            job_timeout: Duration::from_secs(number(
                "JOB_TIMEOUT_SECS",
                raw.job_timeout_secs,
                3600u64,
                (1, 7 * 24 * 3600),
            )?),
            output_limit: number(
                "OUTPUT_LIMIT_BYTES",
                raw.output_limit_bytes,
                4096usize,
                (0, MAX_OUTPUT_LIMIT),
            )?,
            allowed_commands: raw.allowed_commands.take(),
            allowed_urls: crate::policy::parse_url_rules(raw.allowed_urls.take())?,
            env_deny: env_deny(raw.job_env_deny.take()),
            log_json: raw.log_format == Some(LogFormat::Json),
            settle_ms: number("SETTLE_MS", raw.settle_ms, DEFAULT_SETTLE_MS, (0, 600_000))?,
            checkpoint_max_age_ms: number(
                "CHECKPOINT_MAX_AGE_MS",
                raw.checkpoint_max_age_ms,
                crate::checkpoint::DEFAULT_CHECKPOINT_MAX_AGE_MS,
                (0, u64::MAX / 2),
            )?,
            fence: raw.claims_fence.unwrap_or_default(),
            state_dir: state_dir(&mut raw),
            claims_key,
            kafka_props,
            jobs: JobSettings::from_env(&mut raw)?,
            open_commands_warned: raw.pool_worker_warned_open_commands.is_some(),
            standby: raw.pool_worker_standby.as_deref() == Some("1"),
            txn_slot: match raw.pool_worker_txn_slot.as_deref() {
                None => None,
                Some(v) => Some(crate::kafka::TxnSlot::parse(v).ok_or_else(|| {
                    ConfigError(format!(
                        "POOL_WORKER_TXN_SLOT (set by `pool_worker supervise`) must be 0 or 1, not '{v}'"
                    ))
                })?),
            },
            incarnation: match raw.pool_worker_incarnation.take() {
                None => None,
                Some(v) if is_incarnation(&v) => Some(v),
                Some(v) => {
                    return Err(ConfigError(format!(
                        "POOL_WORKER_INCARNATION (set by `pool_worker supervise`) must be 16 hexadecimal digits, not '{v}'"
                    )))
                }
            },
            schedules: match raw.schedule_file.as_deref() {
                Some(path) => crate::schedule_file::load(path)?,
                None => Vec::new(),
            },
        })
    }
}

/// Whether `v` is an incarnation id as a worker draws one
/// (`crate::clock::new_incarnation`: 16 lowercase hexadecimal digits).
pub(crate) fn is_incarnation(v: &str) -> bool {
    v.len() == 16 && v.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Config {
    /// What the worker's Kafka clients are made from
    /// ([`crate::kafka::Kafka::connect`]).
    pub(crate) fn kafka_setup(&self) -> crate::kafka::Setup {
        crate::kafka::Setup {
            brokers: self.brokers.clone(),
            orders: self.orders_topics.clone(),
            claims_topic: self.coordination_topic.clone(),
            results_topic: self.results_topic.clone(),
            instance: self.instance,
            props: self.kafka_props.clone(),
            transactions: self.fence == Fence::Transactions,
            claims_key: self.claims_key.clone(),
            checkpoint_max_age_ms: self.checkpoint_max_age_ms,
            standby: self.standby,
            txn_slot: self.txn_slot,
        }
    }
}

/// `ORDERS_TOPIC`, `COORDINATION_TOPIC` and `RESULTS_TOPIC`: valid names,
/// all different topics.
struct Topics {
    orders: OrdersTopics,
    coordination: String,
    results: Option<String>,
}

impl Topics {
    fn from_env(raw: &mut WorkerEnv) -> Result<Topics, ConfigError> {
        let orders = required("ORDERS_TOPIC", raw.orders_topic.take())?;
        let orders = OrdersTopics::parse("ORDERS_TOPIC", &orders)?;
        let coordination = required("COORDINATION_TOPIC", raw.coordination_topic.take())?;
        crate::kafka::broker::check_topic_name(&coordination)
            .map_err(|e| ConfigError(format!("COORDINATION_TOPIC: {e}")))?;
        orders.check_apart("ORDERS_TOPIC", "COORDINATION_TOPIC", &coordination)?;
        let results = raw.results_topic.take();
        if let Some(t) = &results {
            crate::kafka::broker::check_topic_name(t)
                .map_err(|e| ConfigError(format!("RESULTS_TOPIC: {e}")))?;
            if orders.names().contains(t) || *t == coordination {
                return Err(ConfigError(
                    "RESULTS_TOPIC must differ from ORDERS_TOPIC's topics and COORDINATION_TOPIC"
                        .into(),
                ));
            }
        }
        Ok(Topics {
            orders,
            coordination,
            results,
        })
    }
}

/// `CLAIM_DEFER_MS`: at most a third of the lease.
fn claim_defer_ms(v: Option<u64>, lease_ms: u64) -> Result<u64, ConfigError> {
    number(
        "CLAIM_DEFER_MS",
        v,
        DEFAULT_CLAIM_DEFER_MS.min(lease_ms / 3),
        (0, lease_ms / 3),
    )
    .map_err(|e| {
        ConfigError(format!(
            "{} (at most LEASE_MS/3, LEASE_MS being {lease_ms})",
            e.0
        ))
    })
}

/// `STATE_DIR`, else the first of systemd's `STATE_DIRECTORY` (which may
/// list several, separated by ':'), else the user's runtime directory
/// (0700, the user's own), else a directory of this user's own in the
/// temporary directory: markers must be the worker user's alone
/// (pool_worker/src/settle.rs, `prepare_dir`).
fn state_dir(raw: &mut WorkerEnv) -> std::path::PathBuf {
    [
        raw.state_dir.take(),
        raw.state_directory
            .take()
            .and_then(|s| s.split(':').next().map(str::to_string)),
    ]
    .into_iter()
    .flatten()
    .map(|s| s.trim().to_string())
    .find(|s| !s.is_empty())
    .map(std::path::PathBuf::from)
    .unwrap_or_else(|| default_state_dir(raw.xdg_runtime_dir.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(v.iter().map(|(a, b)| (a.to_string(), b.to_string())))
    }

    const OK: &[(&str, &str)] = &[
        ("ORDERS_TOPIC", "o"),
        ("COORDINATION_TOPIC", "c"),
        ("INSTANCE_NUMBER", "3"),
    ];

    #[test]
    fn the_supervisors_warning_reaches_the_worker() {
        let mut v = OK.to_vec();
        v.push((crate::supervise::WARNED_OPEN_COMMANDS, "1"));
        assert!(vars(&v).unwrap().open_commands_warned);
    }

    /// `supervise`'s incarnation for a standby (R16, "Handed boot"): 16
    /// hexadecimal digits, as a worker draws one; anything else is refused
    /// with the variable named.
    #[test]
    fn the_supervisors_incarnation_reaches_the_worker() {
        assert_eq!(vars(OK).unwrap().incarnation, None);
        let drawn = crate::clock::new_incarnation();
        assert!(is_incarnation(&drawn), "{drawn}");
        let mut vs = OK.to_vec();
        vs.push((crate::supervise::INCARNATION, drawn.as_str()));
        assert_eq!(
            vars(&vs).unwrap().incarnation.as_deref(),
            Some(drawn.as_str())
        );
        for bad in [
            "",
            "abc",
            "0123456789ABCDEF",
            "0123456789abcdef0",
            "0123456789abcde ",
        ] {
            let mut vs = OK.to_vec();
            vs.push((crate::supervise::INCARNATION, bad));
            let e = vars(&vs).unwrap_err().to_string();
            assert!(e.contains("POOL_WORKER_INCARNATION"), "{bad:?}: {e}");
        }
    }

    /// `supervise`'s transactional id slot (R16): 0, 1 or none; anything
    /// else is refused, not taken for the one id.
    #[test]
    fn the_supervisors_transactional_id_slot_reaches_the_worker() {
        assert_eq!(vars(OK).unwrap().txn_slot, None);
        for (v, slot) in [
            ("0", crate::kafka::TxnSlot::Zero),
            ("1", crate::kafka::TxnSlot::One),
        ] {
            let mut vs = OK.to_vec();
            vs.push((crate::supervise::TXN_SLOT, v));
            assert_eq!(vars(&vs).unwrap().txn_slot, Some(slot));
        }
        let mut vs = OK.to_vec();
        vs.push((crate::supervise::TXN_SLOT, "2"));
        let e = vars(&vs).unwrap_err().to_string();
        assert!(e.contains("POOL_WORKER_TXN_SLOT"), "{e}");
    }

    #[test]
    fn defaults_and_required() {
        let c = vars(OK).unwrap();
        assert_eq!(c.brokers, "localhost:9092");
        assert_eq!(c.instance, 3);
        assert_eq!(
            c.env_deny,
            vec!["KAFKA_*", "CLAIMS_KEY*"],
            "jobs never see the pool's claims key"
        );
        assert!(c.claims_key.is_none());
        assert_eq!(c.orders_per_process, 1, "seed 002: exit after each order");
        assert_eq!(c.settle_ms, 15_000);
        assert_eq!(c.claim_defer_ms, 1_000);
        assert!(!c.open_commands_warned);
        let uid = nix::unistd::geteuid();
        assert_eq!(
            c.state_dir,
            std::env::temp_dir().join(format!("pool_worker-{uid}")),
            "a directory of this user's own"
        );
        assert_eq!(vars(&OK[..2]).unwrap_err().0, "INSTANCE_NUMBER is not set");
        assert_eq!(vars(&OK[1..]).unwrap_err().0, "ORDERS_TOPIC is not set");
    }

    /// R57: `ORDERS_TOPIC` lists the orders topics in priority order, the
    /// main topic last; none may be the claims or the results topic.
    #[test]
    fn orders_topic_is_a_priority_list() {
        let mut v = OK.to_vec();
        v[0] = ("ORDERS_TOPIC", " urgent , o ");
        let c = vars(&v).unwrap();
        assert_eq!(c.orders_topics.names(), ["urgent", "o"]);
        assert_eq!(
            c.orders_topics.topics(),
            vec![
                crate::record::Topic::named("urgent").unwrap(),
                crate::record::Topic::MAIN
            ]
        );
        assert_eq!(
            crate::kafka::transactional_id(&c.kafka_setup()),
            "pool_worker.c.o.3",
            "named after the main topic: priority topics in front change nothing"
        );
        // Under `supervise` with standbys, two ids per instance (R16).
        let mut setup = c.kafka_setup();
        setup.txn_slot = Some(crate::kafka::TxnSlot::One);
        assert_eq!(
            crate::kafka::transactional_id(&setup),
            "pool_worker.c.o.3.1"
        );
        setup.txn_slot = Some(crate::kafka::TxnSlot::Zero);
        assert_eq!(crate::kafka::transactional_id(&setup), "pool_worker.c.o.3");
        for (list, says) in [
            (
                "urgent,c",
                "ORDERS_TOPIC and COORDINATION_TOPIC both name the topic 'c'",
            ),
            ("a,a", "ORDERS_TOPIC lists 'a' twice"),
            (" ", "ORDERS_TOPIC is empty"),
        ] {
            v[0] = ("ORDERS_TOPIC", list);
            assert_eq!(vars(&v).unwrap_err().0, says, "{list}");
        }
        v[0] = ("ORDERS_TOPIC", "r,o");
        v.push(("RESULTS_TOPIC", "r"));
        assert!(vars(&v)
            .unwrap_err()
            .0
            .starts_with("RESULTS_TOPIC must differ"));
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
            assert!(
                vars(&v).unwrap_err().0.starts_with("ORDERS_PER_PROCESS="),
                "{bad}"
            );
        }
        let mut v = OK.to_vec();
        v.push(("ORDERS_PER_PROCESS", "100"));
        assert_eq!(vars(&v).unwrap().orders_per_process, 100);
    }

    /// Issue 20: envy deserialises typed fields; a value a field's parser
    /// refuses is one line that begins with the variable, exit 2 (a
    /// `ConfigError`), whatever the other variables are.
    #[test]
    fn typed_fields_name_their_variable() {
        for (var, bad, says) in [
            (
                "LEASE_MS",
                " soon ",
                "LEASE_MS=' soon ' is not a whole number",
            ),
            ("LEASE_MS", "", "LEASE_MS='' is not a whole number"),
            ("SETTLE_MS", "-5", "SETTLE_MS='-5' is not a whole number"),
            ("OUTPUT_LIMIT_BYTES", "4k", "OUTPUT_LIMIT_BYTES='4k' is not"),
            ("JOB_TIMEOUT_SECS", "1.5", "JOB_TIMEOUT_SECS='1.5' is not"),
            ("INSTANCE_NUMBER", " ", "INSTANCE_NUMBER is empty"),
            (
                "INSTANCE_NUMBER",
                "2000000",
                "INSTANCE_NUMBER='2000000' is not a positive whole number up to 1000000",
            ),
            (
                "LOG_FORMAT",
                "yaml",
                "LOG_FORMAT='yaml' is not 'text' or 'json'",
            ),
            (
                "JOB_LIMIT_OPEN_FILES",
                "-1",
                "JOB_LIMIT_OPEN_FILES='-1' is not a positive whole number",
            ),
            (
                "JOB_LIMIT_MEMORY_MB",
                "99999999999999999",
                "JOB_LIMIT_MEMORY_MB='99999999999999999' is not a positive",
            ),
        ] {
            // The bad variable first and last: the error is about it either way.
            let others: Vec<_> = OK.iter().copied().filter(|(k, _)| *k != var).collect();
            for at in [0, others.len()] {
                let mut v = others.clone();
                v.insert(at, (var, bad));
                let e = vars(&v).unwrap_err().0;
                assert!(e.starts_with(says), "{var}={bad:?}: {e}");
            }
        }
        // Spaces around a number are allowed; an empty limit is no limit.
        let mut v = OK.to_vec();
        v.extend([
            ("LEASE_MS", " 900 "),
            ("JOB_LIMIT_PROCESSES", " "),
            ("LOG_FORMAT", " json"),
        ]);
        let c = vars(&v).unwrap();
        assert_eq!(
            (c.lease_ms, c.jobs.limits.processes, c.log_json),
            (900, None, true)
        );
        // Ranges are checked on the typed value.
        let mut v = OK.to_vec();
        v.push(("LEASE_MS", "299"));
        assert_eq!(
            vars(&v).unwrap_err().0,
            "LEASE_MS=299 is out of range (300 to 86400000)"
        );
    }

    #[test]
    fn a_lists_items_are_trimmed_and_empty_ones_dropped() {
        let mut v = OK.to_vec();
        v.push(("ALLOWED_COMMANDS", " sh, ,/usr/bin/ ,"));
        assert_eq!(
            vars(&v).unwrap().allowed_commands,
            Some(vec!["sh".to_string(), "/usr/bin/".to_string()])
        );
        let mut v = OK.to_vec();
        v.push(("ALLOWED_COMMANDS", ""));
        assert_eq!(
            vars(&v).unwrap().allowed_commands,
            Some(vec![]),
            "set: nothing allowed"
        );
        assert_eq!(
            vars(OK).unwrap().allowed_commands,
            None,
            "unset: all allowed"
        );
    }

    #[test]
    fn the_tools_read_their_variables_through_the_same_path() {
        #[derive(Deserialize, Default, Debug)]
        #[serde(default)]
        struct Tool {
            #[serde(deserialize_with = "parse::whole")]
            max_attempts: Option<u32>,
            #[serde(deserialize_with = "parse::text")]
            kafka_brokers: Option<String>,
        }
        let t: Tool = read([
            ("KAFKA_BROKERS".to_string(), " h:1 ".to_string()),
            ("LEASE_MS".to_string(), "not read by this tool".to_string()),
        ])
        .unwrap();
        assert_eq!(
            (t.max_attempts, t.kafka_brokers.as_deref()),
            (None, Some("h:1"))
        );
        let e = read::<Tool>([("MAX_ATTEMPTS".to_string(), "many".to_string())]).unwrap_err();
        assert_eq!(e.0, "MAX_ATTEMPTS='many' is not a whole number");
    }

    #[test]
    fn the_state_directory_comes_from_systemd_unless_set() {
        let mut v = OK.to_vec();
        v.push(("STATE_DIRECTORY", "/var/lib/pool_worker:/var/lib/other"));
        assert_eq!(
            vars(&v).unwrap().state_dir,
            std::path::PathBuf::from("/var/lib/pool_worker")
        );
        let mut xdg = OK.to_vec();
        xdg.push(("XDG_RUNTIME_DIR", "/run/user/1000"));
        assert_eq!(
            vars(&xdg).unwrap().state_dir,
            std::path::PathBuf::from("/run/user/1000/pool_worker")
        );
        xdg.push(("STATE_DIRECTORY", "/var/lib/pw"));
        assert_eq!(
            vars(&xdg).unwrap().state_dir,
            std::path::PathBuf::from("/var/lib/pw"),
            "systemd's first"
        );
        v.push(("STATE_DIR", "/srv/pw"));
        assert_eq!(
            vars(&v).unwrap().state_dir,
            std::path::PathBuf::from("/srv/pw")
        );
        v.push(("SETTLE_MS", "soon"));
        assert!(vars(&v).unwrap_err().0.starts_with("SETTLE_MS="));
    }

    #[test]
    fn job_settings() {
        let c = vars(OK).unwrap();
        assert_eq!(c.jobs.env_allow, None);
        assert_eq!(
            c.jobs.allowed_images, None,
            "image orders are off by default"
        );
        assert_eq!(c.jobs.limits, crate::isolate::Limits::default());
        assert!(c.jobs.user.is_none());
        let mut v = OK.to_vec();
        v.extend([
            ("ORDER_ENV_ALLOW", "DEST, APP_*"),
            ("ALLOWED_IMAGES", "alpine,registry.internal/jobs/"),
            ("JOB_LIMIT_MEMORY_MB", "512"),
            ("JOB_LIMIT_PROCESSES", "64"),
            ("JOB_LIMIT_OPEN_FILES", "1024"),
            ("ALLOWED_URLS", "http://orders.internal/a/"),
        ]);
        let c = vars(&v).unwrap();
        assert_eq!(
            c.jobs.env_allow,
            Some(vec!["DEST".to_string(), "APP_*".to_string()])
        );
        assert_eq!(c.jobs.allowed_images.as_ref().map(Vec::len), Some(2));
        assert_eq!(c.jobs.limits.memory_bytes, Some(512 << 20));
        assert_eq!(
            (c.jobs.limits.processes, c.jobs.limits.open_files),
            (Some(64), Some(1024))
        );
        assert_eq!(c.allowed_urls.unwrap()[0].host, "orders.internal");
        for (name, bad, says) in [
            ("ORDER_ENV_ALLOW", "LD_PRELOAD", "never"),
            ("JOB_LIMIT_PROCESSES", "0", "JOB_LIMIT_PROCESSES='0'"),
            ("JOB_LIMIT_MEMORY_MB", "lots", "JOB_LIMIT_MEMORY_MB="),
            ("JOB_USER", "no-such-user-pw", "JOB_USER="),
            ("JOB_USER", "root", "root"),
            ("ALLOWED_URLS", "orders.internal/a", "ALLOWED_URLS entry"),
        ] {
            let mut v = OK.to_vec();
            v.push((name, bad));
            let e = vars(&v).unwrap_err().0;
            assert!(e.contains(says), "{name}={bad}: {e}");
        }
    }

    #[test]
    fn the_claims_key_comes_from_the_environment_or_a_file() {
        let mut v = OK.to_vec();
        v.push(("CLAIMS_KEY", "0123456789abcdef-key"));
        let c = vars(&v).unwrap();
        assert_eq!(
            c.claims_key,
            Some(crate::sign::ClaimsKey::new(b"0123456789abcdef-key").unwrap())
        );
        assert!(
            !format!("{c:?}").contains("0123456789abcdef-key"),
            "not in the config's Debug"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("key");
        std::fs::write(&f, "0123456789abcdef-key\n").unwrap();
        let mut w = OK.to_vec();
        let path = f.to_str().unwrap();
        w.push(("CLAIMS_KEY_FILE", path));
        assert_eq!(vars(&w).unwrap().claims_key, c.claims_key);
        w.push(("CLAIMS_KEY", "0123456789abcdef-key"));
        assert!(vars(&w).unwrap_err().0.contains("both"));
        let mut short = OK.to_vec();
        short.push(("CLAIMS_KEY", "secret"));
        assert!(vars(&short).unwrap_err().0.starts_with("CLAIMS_KEY "));
        let mut missing = OK.to_vec();
        missing.push(("CLAIMS_KEY_FILE", "/nonexistent/key"));
        assert!(vars(&missing)
            .unwrap_err()
            .0
            .starts_with("CLAIMS_KEY_FILE: cannot read /nonexistent/key"));
    }

    #[test]
    fn the_claim_deferral_stays_below_a_third_of_the_lease() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = OK.to_vec();
            v.extend_from_slice(extra);
            vars(&v)
        };
        assert_eq!(
            with(&[("LEASE_MS", "900")]).unwrap().claim_defer_ms,
            300,
            "the default shrinks with the lease"
        );
        assert_eq!(with(&[("CLAIM_DEFER_MS", "0")]).unwrap().claim_defer_ms, 0);
        assert_eq!(
            with(&[("CLAIM_DEFER_MS", "10000")]).unwrap().claim_defer_ms,
            10_000
        );
        let e = with(&[("CLAIM_DEFER_MS", "10001")]).unwrap_err().0;
        assert!(
            e.starts_with("CLAIM_DEFER_MS=10001 is out of range") && e.contains("LEASE_MS/3"),
            "{e}"
        );
        assert!(with(&[("CLAIM_DEFER_MS", "soon")])
            .unwrap_err()
            .0
            .starts_with("CLAIM_DEFER_MS="));
    }

    #[test]
    fn kafka_properties_pass_through() {
        let mut v = OK.to_vec();
        v.extend([
            ("KAFKA_BROKERS", "h:1"),
            ("KAFKA_SASL_PASSWORD", "s"),
            ("KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
        ]);
        let c = vars(&v).unwrap();
        assert_eq!(c.brokers, "h:1");
        assert_eq!(
            c.kafka_props.get("sasl.password").map(String::as_str),
            Some("s")
        );
        assert_eq!(
            c.kafka_props.get("security.protocol").map(String::as_str),
            Some("SASL_SSL")
        );
        assert!(!c.kafka_props.contains_key("brokers"));
    }

    #[test]
    fn tls_and_scram_are_built_in() {
        let mut v = OK.to_vec();
        v.extend([
            ("KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
            ("KAFKA_SASL_MECHANISMS", "SCRAM-SHA-512"),
            ("KAFKA_SASL_USERNAME", "pool"),
            ("KAFKA_SASL_PASSWORD", "pw"),
        ]);
        let c =
            vars(&v).expect("librdkafka is built with OpenSSL, so SASL_SSL and SCRAM are accepted");
        assert_eq!(
            c.kafka_props.get("sasl.mechanisms").map(String::as_str),
            Some("SCRAM-SHA-512")
        );
        let mut v = OK.to_vec();
        v.push(("KAFKA_SECURITY_PROTOCOL", "SSL"));
        assert!(vars(&v).is_ok());
    }

    #[test]
    fn a_rejected_property_names_the_variable_never_the_value() {
        for (var, value) in [
            ("KAFKA_SASL_PASWORD", "hunter2-secret"),
            ("KAFKA_SECURITY_PROTOCOL", "hunter2-secret"),
            ("KAFKA_SASL_PASSWORD_FILE", "/nonexistent/hunter2-secret"),
        ] {
            let mut v = OK.to_vec();
            v.push((var, value));
            let e = vars(&v).unwrap_err().0;
            assert!(e.starts_with(&format!("{var}: ")), "{e}");
            if !var.ends_with("_FILE") {
                assert!(!e.contains("hunter2"), "the value leaks: {e}");
            }
        }
        let mut v = OK.to_vec();
        v.push(("KAFKA_SASL_PASWORD", "x"));
        assert!(vars(&v).unwrap_err().0.contains("'sasl.pasword'"));
    }

    #[test]
    fn kafka_scripts_variables_are_not_properties() {
        let mut v = OK.to_vec();
        v.extend([("KAFKA_HEAP_OPTS", "-Xmx1G"), ("KAFKA_OPTS", "-Dx=y")]);
        assert!(vars(&v).unwrap().kafka_props.is_empty());
    }

    #[test]
    fn a_property_can_come_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\n").unwrap();
        let mut v = OK.to_vec();
        let p = path.to_str().unwrap();
        v.push(("KAFKA_SASL_PASSWORD_FILE", p));
        let c = vars(&v).unwrap();
        assert_eq!(
            c.kafka_props.get("sasl.password").map(String::as_str),
            Some("s3cret"),
            "the line break is not part of it"
        );
        assert!(!c.kafka_props.contains_key("sasl.password.file"));
        assert!(!format!(
            "{:?}",
            KafkaSettings::from_vars(&[("KAFKA_SASL_PASSWORD_FILE".into(), p.into())]).unwrap()
        )
        .contains("s3cret"));
        v.push(("KAFKA_SASL_PASSWORD", "other"));
        let e = vars(&v).unwrap_err().0;
        assert!(
            e.contains("both set") && e.contains("'sasl.password'"),
            "{e}"
        );
        let mut v = OK.to_vec();
        let d = dir.path().to_str().unwrap();
        v.push(("KAFKA_SSL_KEY_PASSWORD_FILE", d));
        assert!(vars(&v)
            .unwrap_err()
            .0
            .starts_with("KAFKA_SSL_KEY_PASSWORD_FILE: cannot read"));
    }

    #[test]
    fn job_env_deny_adds_to_the_defaults() {
        let mut v = OK.to_vec();
        v.push(("JOB_ENV_DENY", "AWS_*, SECRET"));
        assert_eq!(
            vars(&v).unwrap().env_deny,
            vec!["KAFKA_*", "CLAIMS_KEY*", "AWS_*", "SECRET"]
        );
        let mut v = OK.to_vec();
        v.push(("JOB_ENV_DENY", ""));
        assert_eq!(vars(&v).unwrap().env_deny, vec!["KAFKA_*", "CLAIMS_KEY*"]);
    }

    #[test]
    fn the_output_limit_keeps_a_completion_within_a_record() {
        let mut v = OK.to_vec();
        v.push(("OUTPUT_LIMIT_BYTES", "1048576"));
        assert!(vars(&v).unwrap_err().0.starts_with("OUTPUT_LIMIT_BYTES="));
        let mut v = OK.to_vec();
        let max = MAX_OUTPUT_LIMIT.to_string();
        v.push(("OUTPUT_LIMIT_BYTES", &max));
        assert_eq!(vars(&v).unwrap().output_limit, MAX_OUTPUT_LIMIT);
    }
}
