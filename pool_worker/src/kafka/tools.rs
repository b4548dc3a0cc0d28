//! Where the tools (pool_worker/src/cli/) read from and write to: the pool's topics ([`Source`],
//! the same variables as the worker's), and the Kafka clients they use.

use crate::boot::View;
use crate::env::ConfigError;
use crate::kafka::claims_reader::{self, ClaimsReader, Gate, Start};
use crate::kafka::client_config::{blocking, client_config, KafkaSettings, Silent};
use crate::kafka::topics::partitions_now;
use crate::orders_topics::OrdersTopics;
use crate::record::{Foreign, Lane, OrderId, Position, Record, Topic};
use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// Where to read from: the same variables as the worker's. Each flag falls
/// back to its variable (read by [`crate::env::read`], see
/// `Source::apply_env`), then to its default.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// Bootstrap servers [env: KAFKA_BROKERS]
    #[arg(long, default_value = "localhost:9092")]
    pub(crate) brokers: String,
    /// The orders topics, comma-separated, in priority order; the last is
    /// the main topic (R57) [env: ORDERS_TOPIC]
    #[arg(long, default_value = "work_orders", value_name = "TOPICS")]
    pub(crate) orders_topic: String,
    /// The claims topic [env: COORDINATION_TOPIC]
    #[arg(long, default_value = "work_claims")]
    pub(crate) coordination_topic: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// A file holding the pool's claims key (or set CLAIMS_KEY): records
    /// not signed with it are foreign, as the workers take them
    /// [env: CLAIMS_KEY_FILE]
    #[arg(long, value_name = "FILE")]
    pub(crate) claims_key_file: Option<String>,
    /// The pool's schedules, whose next firings `status` and `serve` show
    /// [env: SCHEDULE_FILE]
    #[arg(long, value_name = "FILE")]
    pub(crate) schedule_file: Option<String>,
}

/// The variables [`Source`]'s flags fall back to, and `CLAIMS_KEY`.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(crate) struct SourceEnv {
    #[serde(deserialize_with = "crate::env::parse::text")]
    pub(crate) kafka_brokers: Option<String>,
    #[serde(deserialize_with = "crate::env::parse::text")]
    pub(crate) orders_topic: Option<String>,
    #[serde(deserialize_with = "crate::env::parse::text")]
    pub(crate) coordination_topic: Option<String>,
    #[serde(deserialize_with = "crate::env::parse::text")]
    pub(crate) claims_key_file: Option<String>,
    #[serde(deserialize_with = "crate::env::parse::text")]
    pub(crate) schedule_file: Option<String>,
    /// A secret: never in a Debug or an error.
    pub(crate) claims_key: Option<String>,
}

impl Source {
    /// Flag over variable over default: fills the flags not given on the
    /// command line `m` from the environment.
    pub(crate) fn apply_env(
        &mut self,
        m: &clap::ArgMatches,
    ) -> Result<(), crate::env::ConfigError> {
        self.apply_vars(m, crate::env::env_vars())
    }

    /// [`Source::apply_env`] with these variables.
    pub(crate) fn apply_vars(
        &mut self,
        m: &clap::ArgMatches,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), crate::env::ConfigError> {
        use crate::env::flag_or_env;
        let env: SourceEnv = crate::env::read(vars)?;
        flag_or_env(m, "brokers", &mut self.brokers, env.kafka_brokers);
        flag_or_env(m, "orders_topic", &mut self.orders_topic, env.orders_topic);
        flag_or_env(
            m,
            "coordination_topic",
            &mut self.coordination_topic,
            env.coordination_topic,
        );
        flag_or_env(
            m,
            "claims_key_file",
            &mut self.claims_key_file,
            env.claims_key_file.map(Some),
        );
        flag_or_env(
            m,
            "schedule_file",
            &mut self.schedule_file,
            env.schedule_file.map(Some),
        );
        Ok(())
    }

    /// The schedules of `--schedule-file` / `SCHEDULE_FILE` (none without
    /// it); a bad file is a [`ConfigError`] (exit 2).
    pub(crate) fn schedules(&self) -> Result<Vec<crate::schedule::Schedule>, ConfigError> {
        match self
            .schedule_file
            .as_deref()
            .filter(|f| !f.trim().is_empty())
        {
            Some(path) => crate::schedule_file::load(path),
            None => Ok(Vec::new()),
        }
    }

    /// What decides which claims records are the pool's, as a worker with
    /// the same `CLAIMS_KEY` / `CLAIMS_KEY_FILE` decides it.
    pub(crate) fn gate(&self) -> anyhow::Result<Gate> {
        let value = crate::env::read_env::<SourceEnv>()?.claims_key;
        let file = self
            .claims_key_file
            .as_deref()
            .filter(|f| !f.trim().is_empty())
            .map(|f| (f, std::fs::read(f)));
        let key = crate::sign::ClaimsKey::from_sources(value.as_deref(), file)
            .map_err(anyhow::Error::msg)?;
        Ok(Gate::new(key, &self.orders()?))
    }

    /// `--orders-topic` / `ORDERS_TOPIC`: the orders topics in priority
    /// order (pool_worker/src/orders_topics.rs), none of them the claims
    /// topic. A bad list is a [`ConfigError`] (exit 2).
    pub(crate) fn orders(&self) -> Result<OrdersTopics, ConfigError> {
        crate::orders_topics::OrdersTopics::beside_claims(
            &self.orders_topic,
            &self.coordination_topic,
        )
    }

    /// An order id as a tool's user gave it, checked against the orders
    /// topics (its topic must be one of them; the main one's name may be
    /// written or left out): the id as the core has it.
    pub(crate) fn listed(&self, order: OrderId) -> Result<OrderId, ConfigError> {
        self.orders()?
            .listed(order)
            .map_err(|e| ConfigError(format!("order {order}: {e}")))
    }

    /// The Kafka name of `topic` (an orders topic).
    pub(crate) fn topic_name(&self, topic: Topic) -> anyhow::Result<String> {
        Ok(self
            .orders()?
            .kafka_name(topic)
            .map_err(anyhow::Error::msg)?
            .to_string())
    }
}

/// Flag over variable over default for a tool with a [`Source`] and one
/// setting of its own: the source's flags, then the flag `id` (`field`)
/// from its variable, which `var` takes out of the variables `E` (read as
/// [`crate::env::read_env`] reads them).
pub(crate) fn apply_env_with<E: serde::de::DeserializeOwned, T>(
    src: &mut Source,
    m: &clap::ArgMatches,
    id: &str,
    field: &mut T,
    var: impl FnOnce(E) -> Option<T>,
) -> Result<(), crate::env::ConfigError> {
    src.apply_env(m)?;
    let env: E = crate::env::read_env()?;
    crate::env::flag_or_env(m, id, field, var(env));
    Ok(())
}

/// How long [`Source::probe`] waits for a broker to answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl Source {
    /// Asks the brokers for the claims topic's metadata, for at most
    /// [`PROBE_TIMEOUT`]: when none answers, the one line the person who
    /// ran the tool needs (which address, which variable or flag to set).
    ///
    /// When one answers, the topics as it describes them to this client
    /// ([`Source::check_topics`]): a topic the principal may not describe
    /// (no ACL) or a claims topic with several partitions is one line too.
    pub(crate) fn probe(&self) -> anyhow::Result<()> {
        self.orders()?;
        let c: BaseConsumer<Silent> = self
            .client_config()?
            .create_with_context(Silent)
            .context("cannot create a Kafka client")?;
        match self.check_topics(&ToolClient(c), PROBE_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(problem)) => Err(problem.into()),
            Err(e) => bail!(
                "no Kafka broker answered at {} within {} s ({e}); start one (`pool_worker dev` runs a pool on an embedded broker) or set KAFKA_BROKERS (or --brokers) to your brokers' host:port list",
                self.brokers,
                PROBE_TIMEOUT.as_secs()
            ),
        }
    }

    /// The pool's topics as the brokers describe them to `c`'s principal:
    /// `Err` when no broker answers, `Ok(Err(..))` for a topic the
    /// principal may not describe, that the brokers refuse otherwise, or a
    /// claims topic with other than one partition. A topic that does not
    /// exist (yet) is left to the tool.
    pub(crate) fn check_topics(
        &self,
        c: &ToolClient,
        timeout: Duration,
    ) -> Result<Result<(), crate::kafka::topics::TopicProblem>, KafkaError> {
        use crate::kafka::topics::{one_partition, partitions_in, TopicProblem};
        let props = kafka_settings().map(|s| s.props).unwrap_or_default();
        let judge = |topic: &str| -> Result<Result<i32, TopicProblem>, KafkaError> {
            let md = c.0.fetch_metadata(Some(topic), timeout)?;
            Ok(match partitions_in(&md, topic, &props) {
                Err(TopicProblem::Missing { .. }) => Ok(0),
                r => r,
            })
        };
        let claims = match judge(&self.coordination_topic)? {
            Ok(n) => n,
            Err(p) => return Ok(Err(p)),
        };
        if claims > 1 {
            return Ok(one_partition(&self.coordination_topic, claims));
        }
        // A bad list is [`Source::probe`]'s to refuse, before it asks.
        let Ok(orders) = self.orders() else {
            return Ok(Ok(()));
        };
        for name in orders.names() {
            if let Err(p) = judge(name)? {
                return Ok(Err(p));
            }
        }
        Ok(Ok(()))
    }

    /// What a tool says when the brokers refuse its record to `topic`
    /// (`what`: "the order", "the cancel"): one line naming the principal
    /// when the refusal is the authorizer's (no Write ACL).
    fn write_error(&self, what: &str, topic: &str, e: &KafkaError) -> anyhow::Error {
        if e.rdkafka_error_code()
            .is_some_and(crate::kafka::topics::is_authorization)
        {
            let props = kafka_settings().map(|s| s.props).unwrap_or_default();
            let problem = crate::kafka::topics::TopicProblem::NotAuthorized {
                topic: topic.into(),
                operation: "write",
                principal: crate::kafka::topics::principal(&props),
            };
            anyhow::anyhow!("cannot send {what}: {problem}")
        } else {
            anyhow::anyhow!("cannot send {what} to '{topic}': {e}")
        }
    }

    /// Warns (one line on stderr) when the claims topic is not compacted,
    /// where the brokers tell (DescribeConfigs); a tool reads on, since
    /// what it shows is how one finds out what went wrong.
    pub(crate) async fn warn_if_not_compacted(&self) {
        let Ok(config) = self.client_config() else {
            return;
        };
        let Ok(c) = config.create_with_context::<_, BaseConsumer<Silent>>(Silent) else {
            return;
        };
        let cluster = blocking(move || {
            let id = c.client().fetch_cluster_id(PROBE_TIMEOUT);
            // Destroying a client takes a while: not on the tool's way.
            std::thread::spawn(move || drop(c));
            id
        })
        .await
        .ok()
        .flatten();
        let props = kafka_settings().map(|s| s.props).unwrap_or_default();
        let principal = crate::kafka::topics::principal(&props);
        // A tool that may not DescribeConfigs says nothing: reading is what
        // it was asked to do, and the workers warn about it.
        if let Err(p) = crate::kafka::topics::check_compaction(
            &config,
            cluster.as_deref(),
            &self.coordination_topic,
            &principal,
        )
        .await
        {
            eprintln!("pool_worker: warning: {p}");
        }
    }

    /// The client settings every command shares (`KAFKA_<PROPERTY>`, and
    /// `KAFKA_<PROPERTY>_FILE`, as the worker reads them), with these
    /// brokers. A rejected property is a [`crate::env::ConfigError`]
    /// (exit 2).
    pub(crate) fn client_config(&self) -> anyhow::Result<rdkafka::ClientConfig> {
        let settings = kafka_settings()?;
        Ok(client_config(&self.brokers, &settings.props))
    }
}

/// How long reading a topic's offsets or metadata may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A tool's client of the pool's topics ([`Source::consumer`]), for the
/// questions and reads of this module. A type of its own, so that a tool
/// holds it without reaching the rdkafka consumer inside (issue 28: only
/// this module speaks rdkafka).
pub(crate) struct ToolClient(BaseConsumer<Silent>);

impl Source {
    /// A client of the pool's topics that joins no group and commits
    /// nothing (it is assigned partitions, never subscribed).
    pub(crate) fn consumer(&self) -> anyhow::Result<ToolClient> {
        self.client_config()?
            .set("group.id", "pool_worker-status")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .create_with_context(Silent)
            .map(ToolClient)
            .context("cannot create a Kafka consumer")
    }

    /// A producer for the one record a tool writes (an order, a cancel):
    /// acknowledged by every in-sync replica, given up after 30 s.
    fn producer(&self) -> anyhow::Result<FutureProducer<Silent>> {
        self.client_config()?
            .set("acks", "all")
            .set("message.timeout.ms", "30000")
            .create_with_context(Silent)
            .context("cannot create a Kafka producer")
    }

    /// Sends one order (`payload`, no key) to the main orders topic with
    /// a new [`Source::producer`]; where it landed. A refusal is
    /// [`Source::write_error`]'s line.
    pub(crate) async fn send_order(&self, payload: &[u8]) -> anyhow::Result<OrderId> {
        self.send_order_to(Topic::MAIN, payload).await
    }

    /// [`Source::send_order`] to the orders topic `topic` (one of the list).
    pub(crate) async fn send_order_to(
        &self,
        topic: Topic,
        payload: &[u8],
    ) -> anyhow::Result<OrderId> {
        let name = self.topic_name(topic)?;
        let d = self
            .producer()?
            .send(
                FutureRecord::<(), [u8]>::to(&name).payload(payload),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| self.write_error("the order", &name, &e))?;
        Ok(Lane::new(topic, d.partition).at(d.offset))
    }

    /// Writes one record to the claims topic's partition with a new
    /// [`Source::producer`], with the signature header `sig` if there is
    /// one (`what` names it in an error: "the cancel"); its offset.
    pub(crate) async fn send_to_claims(
        &self,
        what: &str,
        key: &str,
        value: &[u8],
        sig: Option<&str>,
    ) -> anyhow::Result<i64> {
        let mut fr = FutureRecord::<str, [u8]>::to(&self.coordination_topic)
            .partition(0)
            .key(key)
            .payload(value);
        if let Some(sig) = sig {
            fr = fr.headers(OwnedHeaders::new().insert(Header {
                key: crate::sign::HEADER,
                value: Some(sig.as_bytes()),
            }));
        }
        let d = self
            .producer()?
            .send(fr, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| self.write_error(what, &self.coordination_topic, &e))?;
        Ok(d.offset)
    }

    /// The claims topic's end (the position its next record will take).
    pub(crate) fn claims_end(&self) -> anyhow::Result<i64> {
        let (_, high) = self
            .consumer()?
            .0
            .fetch_watermarks(&self.coordination_topic, 0, TIMEOUT)
            .with_context(|| format!("cannot read topic '{}'", self.coordination_topic))?;
        Ok(high)
    }

    /// Whether `order` was written to the orders topic: `Ok(low)`, its
    /// partition's first offset still kept (an order below it is gone), or
    /// why there is no such order (a partition the topic does not have, or
    /// an offset past its end).
    pub(crate) fn find_order(
        &self,
        c: &ToolClient,
        order: OrderId,
    ) -> anyhow::Result<Result<i64, String>> {
        let topic = &self.topic_name(order.topic)?;
        let md =
            c.0.fetch_metadata(Some(topic), TIMEOUT)
                .with_context(|| format!("cannot read topic '{topic}'"))?;
        let parts = md
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len() as i32);
        if order.partition >= parts {
            return Ok(Err(format!(
                "there is no order {order}: '{topic}' has {parts} partition(s)"
            )));
        }
        let (low, high) =
            c.0.fetch_watermarks(topic, order.partition, TIMEOUT)
                .with_context(|| {
                    format!(
                        "cannot read partition {} of topic '{topic}'",
                        order.partition
                    )
                })?;
        if order.offset >= high {
            return Ok(Err(format!(
                "there is no order {order} in '{topic}' (partition {} ends at {high})",
                order.partition
            )));
        }
        Ok(Ok(low))
    }
}

/// The orders topics against the pool's frontier (`status`, `serve`).
#[derive(Default)]
pub(crate) struct Waiting {
    /// Orders the topics hold (all partitions).
    pub(crate) in_topic: i64,
    /// Orders beyond the frontier.
    pub(crate) waiting: i64,
    /// The oldest waiting order's timestamp.
    pub(crate) oldest_ts: Option<i64>,
    /// Each orders topic's name, with the orders it holds and those of
    /// them waiting, in priority order (R57).
    pub(crate) by_topic: Vec<(String, i64, i64)>,
}

impl Source {
    /// Each partition of each orders topic, in priority order: (lane,
    /// first offset, end).
    pub(crate) fn order_offsets(
        &self,
        c: &ToolClient,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(Lane, i64, i64)>> {
        let orders = self.orders()?;
        let mut out = Vec::new();
        for (t, topic) in orders.iter() {
            let parts = partitions_now(&c.0, topic)
                .with_context(|| format!("cannot read topic '{topic}'"))?;
            // One request per partition gives both its first offset and its end.
            for p in parts {
                let (low, high) =
                    c.0.fetch_watermarks(topic, p, timeout)
                        .with_context(|| format!("cannot read partition {p} of topic '{topic}'"))?;
                out.push((Lane::new(t, p), low, high));
            }
        }
        Ok(out)
    }

    /// What waits in `offsets` ([`Source::order_offsets`]) at or beyond
    /// `next(lane)`, each partition's frontier, and the oldest waiting
    /// order's timestamp (read with `c`, if it can be read quickly).
    pub(crate) fn waiting(
        &self,
        c: &ToolClient,
        offsets: &[(Lane, i64, i64)],
        next: impl Fn(Lane) -> i64,
    ) -> Waiting {
        let mut w = Waiting::default();
        let Ok(orders) = self.orders() else {
            return w;
        };
        for (t, name) in orders.iter() {
            let (mut held, mut waiting) = (0, 0);
            for &(lane, low, high) in offsets.iter().filter(|(l, _, _)| l.topic == t) {
                held += high - low;
                let from = next(lane).max(low);
                if from < high {
                    waiting += high - from;
                    let ts = borrowed_at(c, name, lane.partition, from, Duration::from_secs(5))
                        .and_then(|m| m.timestamp().to_millis());
                    if let Some(ts) = ts {
                        w.oldest_ts = Some(w.oldest_ts.map_or(ts, |o| o.min(ts)));
                    }
                }
            }
            w.in_topic += held;
            w.waiting += waiting;
            w.by_topic.push((name.to_string(), held, waiting));
        }
        w
    }
}

/// A producer of plain messages (a payload, no key) for a broker that
/// needs no settings: `dev`'s demo orders, sent to its embedded broker.
pub(crate) struct PlainProducer {
    producer: FutureProducer,
    wait: Duration,
}

impl PlainProducer {
    /// Acknowledged by every in-sync replica, each message given up after
    /// `wait`.
    pub(crate) fn new(brokers: &str, wait: Duration) -> Result<PlainProducer, KafkaError> {
        let producer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("acks", "all")
            .set("message.timeout.ms", wait.as_millis().to_string())
            .create()?;
        Ok(PlainProducer { producer, wait })
    }

    /// Sends `payload` to `topic`: where it landed.
    pub(crate) async fn send(&self, topic: &str, payload: &str) -> Result<OrderId, KafkaError> {
        let d = self
            .producer
            .send(
                FutureRecord::<str, str>::to(topic).payload(payload),
                self.wait,
            )
            .await
            .map_err(|(e, _)| e)?;
        Ok(OrderId::new(d.partition, d.offset))
    }
}

/// A message as a tool reads it ([`message_at`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolMessage {
    pub(crate) offset: i64,
    /// Its timestamp (ms since the epoch), if it has one.
    pub(crate) timestamp: Option<i64>,
    pub(crate) payload: Option<Vec<u8>>,
    /// Its headers, in order.
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
}

impl ToolMessage {
    /// The value of the first header named `name` (in any case), if it has one.
    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_deref())
    }
}

/// The first message at or after `offset` of `topic`'s partition `p`
/// that `c` reads within `wait` (the tools read single orders this way:
/// `status`'s oldest waiting order, `serve`'s order pages, `retry`).
pub(crate) fn message_at(
    c: &ToolClient,
    topic: &str,
    p: i32,
    offset: i64,
    wait: Duration,
) -> Option<ToolMessage> {
    use rdkafka::message::Headers;
    let m = borrowed_at(c, topic, p, offset, wait)?;
    Some(ToolMessage {
        offset: m.offset(),
        timestamp: m.timestamp().to_millis(),
        payload: m.payload().map(<[u8]>::to_vec),
        headers: m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// [`message_at`], the message as the client holds it.
fn borrowed_at<'c>(
    c: &'c ToolClient,
    topic: &str,
    p: i32,
    offset: i64,
    wait: Duration,
) -> Option<BorrowedMessage<'c>> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(offset))
        .ok()?;
    c.0.assign(&tpl).ok()?;
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Some(Ok(m)) = c.0.poll(Duration::from_millis(200)) {
            if m.partition() == p && m.offset() >= offset {
                return Some(m);
            }
        }
    }
    None
}

/// The `KAFKA_*` settings of the process environment, as the worker reads
/// them ([`KafkaSettings`]); a rejected one is a [`ConfigError`] (exit 2).
pub(crate) fn kafka_settings() -> Result<KafkaSettings, ConfigError> {
    Ok(KafkaSettings::from_vars(&crate::env::env_vars())?)
}

impl Source {
    /// A tool's reader of the claims topic: these brokers, the `KAFKA_*`
    /// settings and the pool's claims key, started at `start`
    /// ([`ClaimsReader::open`]). Returns the view of the log before where it
    /// starts (empty, or loaded from the checkpoint) and that position.
    pub(crate) fn claims_reader(&self, start: Start) -> anyhow::Result<(ClaimsReader, View, u64)> {
        let gate = self.gate()?;
        let settings = kafka_settings()?;
        ClaimsReader::open(
            &claims_reader::config(&self.brokers, &settings.props, Some("pool_worker-status")),
            &self.coordination_topic,
            gate,
            start,
        )
    }
}

/// Every record of the claims topic, with its position (foreign ones as
/// errors), from its beginning up to the end it had when we started
/// (`history`, `audit`, `status`, `cancel`).
pub fn read_all(src: &Source) -> anyhow::Result<Vec<(u64, Result<Record, Foreign>)>> {
    let (reader, _, _) = src.claims_reader(Start::Beginning)?;
    let mut out = Vec::new();
    reader.read_to_end(|pos, r| out.push((pos, r)))?;
    Ok(out)
}

/// The pool's view as of the claims topic's end now, read from its newest
/// checkpoint (`retry`).
pub fn current_view(src: &Source) -> anyhow::Result<View> {
    let (reader, mut view, _) = src.claims_reader(Start::NewestCheckpoint { at_most: u64::MAX })?;
    reader.read_to_end(|pos, r| match r {
        Ok(rec) => drop(view.apply(Position::new(pos), &rec)),
        Err(_) => view.skip(Position::new(pos)),
    })?;
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_record as rec;
    use crate::kafka::broker::Broker;
    use crate::kafka::claims_reader::{CHECKPOINT_NEAR, CHECKPOINT_WINDOW};
    use crate::record::{Event, OrderId, Status};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::ClientConfig;

    /// Issue 20: a flag over its variable over its default, the variable
    /// read through `env::read` (an empty one is unset).
    #[test]
    fn a_flag_overrides_its_variable_which_overrides_the_default() {
        use clap::{CommandFactory, FromArgMatches};
        #[derive(clap::Parser, Debug)]
        struct Tool {
            #[command(flatten)]
            source: Source,
        }
        let resolve = |args: &[&str], vars: &[(&str, &str)]| {
            let m = Tool::command().get_matches_from(args);
            let mut t = Tool::from_arg_matches(&m).unwrap();
            let vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            t.source.apply_vars(&m, vars).map(|()| t.source)
        };
        let s = resolve(&["t"], &[]).unwrap();
        assert_eq!(
            (
                s.brokers.as_str(),
                s.orders_topic.as_str(),
                s.claims_key_file
            ),
            ("localhost:9092", "work_orders", None)
        );
        let env = [
            ("KAFKA_BROKERS", "h:1"),
            ("ORDERS_TOPIC", "o"),
            ("COORDINATION_TOPIC", " "),
            ("CLAIMS_KEY_FILE", "/k"),
        ];
        let s = resolve(&["t"], &env).unwrap();
        assert_eq!(
            (
                s.brokers.as_str(),
                s.orders_topic.as_str(),
                s.coordination_topic.as_str()
            ),
            ("h:1", "o", "work_claims")
        );
        assert_eq!(s.claims_key_file.as_deref(), Some("/k"));
        let s = resolve(
            &[
                "t",
                "--brokers",
                "h:2",
                "--claims-key-file",
                "/f",
                "--orders-topic",
                "work_orders",
            ],
            &env,
        )
        .unwrap();
        assert_eq!(
            (
                s.brokers.as_str(),
                s.orders_topic.as_str(),
                s.claims_key_file.as_deref()
            ),
            ("h:2", "work_orders", Some("/f")),
            "a flag wins, even one equal to the default"
        );
    }

    /// A tool that needs only the current view starts at the newest
    /// checkpoint, and concludes what a replay from position 0 concludes:
    /// the same view (`retry`'s check), the same completion (`submit
    /// --wait`); one that must not read a checkpoint past where it looks
    /// for records starts earlier.
    #[test]
    fn a_tool_starts_at_the_newest_checkpoint_and_sees_what_a_full_replay_sees() {
        let (orders, claims) = ("c_orders".to_string(), "c_claims".to_string());
        let broker = Broker::start(1, &[(orders.clone(), 1), (claims.clone(), 1)]).unwrap();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .create()
            .unwrap();
        for _ in 0..3 {
            producer
                .send(BaseRecord::<str, str>::to(&orders).payload("echo x"))
                .unwrap();
        }
        // Order 0:0 completed, 0:1 committed, then a long stretch of boots
        // (longer than the checkpoint window), a checkpoint of all that, and
        // the completion of 0:1 and a claim of 0:2 after it.
        let mut log = vec![
            rec(1, Event::Booted, "a", 1, 0),
            rec(2, Event::Booted, "b", 1, 0),
            rec(1, Event::Claimed, "a", 2, 0),
            rec(1, Event::Committed, "a", 3, 0),
            rec(1, Event::Completed, "a", 4, 0),
            rec(2, Event::Claimed, "b", 2, 1),
            rec(2, Event::Committed, "b", 3, 1),
        ];
        for n in 0..CHECKPOINT_WINDOW + 100 {
            log.push(rec(3, Event::Booted, &format!("p{n}"), 1, 0));
        }
        let mut before = View::new();
        for (p, r) in log.iter().enumerate() {
            let _ = before.apply(Position::new(p as u64), r);
        }
        let mut cp = Record::of(3, Event::Checkpoint, "p0", 0);
        cp.seq = 2;
        cp.set_snapshot(Some(Box::new(before.snapshot())));
        // Written now: a checkpoint older than CHECKPOINT_MAX_AGE_MS is not
        // where a reader starts (R24).
        cp.ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let at = log.len() as u64;
        log.push(cp);
        // More records than the window's near part after the checkpoint:
        // the search reads on back (R20).
        for n in 0..CHECKPOINT_NEAR + 10 {
            log.push(rec(4, Event::Booted, &format!("q{n}"), 1, 0));
        }
        log.push(rec(2, Event::Completed, "b", 4, 1));
        log.push(rec(1, Event::Claimed, "a", 5, 2));
        for r in &log {
            let (key, value) = (r.key(), r.encode());
            producer
                .send(
                    BaseRecord::to(&claims)
                        .partition(0)
                        .key(&key)
                        .payload(&value),
                )
                .unwrap_or_else(|(e, _)| panic!("{e}"));
            if producer.in_flight_count() > 1000 {
                producer.flush(Duration::from_secs(30)).unwrap();
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        let src = Source {
            brokers: broker.bootstrap(),
            orders_topic: orders,
            coordination_topic: claims,
            json: false,
            claims_key_file: None,
            schedule_file: None,
        };

        let all = read_all(&src).unwrap();
        assert_eq!(all.len(), log.len(), "from the beginning: every record");
        assert!(all.iter().all(|(_, r)| r.is_ok()), "none foreign");
        let mut full = View::new();
        for (p, r) in &all {
            let _ = full.apply(Position::new(*p), r.as_ref().unwrap());
        }

        let (_, _, from) = src
            .claims_reader(Start::NewestCheckpoint { at_most: u64::MAX })
            .unwrap();
        assert_eq!(from, at, "started at the checkpoint");
        let current = current_view(&src).unwrap();
        assert_eq!(current.summary(), full.summary());
        assert!(current
            .hold(1.into())
            .is_some_and(|h| h.order == OrderId::new(0, 2)));

        let (_, _, from) = src
            .claims_reader(Start::NewestCheckpoint { at_most: at - 1 })
            .unwrap();
        assert_eq!(from, 0, "no checkpoint of a view past at_most");

        let done = crate::cli::submit::wait_completed(
            &src,
            at as i64,
            OrderId::new(0, 1),
            Duration::from_secs(30),
        )
        .unwrap()
        .expect("the completion after the checkpoint");
        assert_eq!(done.0.instance.get(), 2);
        assert_eq!(done.1.status, Status::Ok);
    }
}
