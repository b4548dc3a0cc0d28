//! What the pool needs of its broker and topics, checked where it can be
//! told (issue 25 §2 "Security" and §4 "Which brokers"; docs/deploy.md,
//! "Which brokers"):
//!
//! * **access**: a topic the brokers will not describe to this client's
//!   principal (no ACL) is one line naming the topic, the operation and the
//!   principal ([`TopicProblem::NotAuthorized`]), never "does not exist" or
//!   "0 partitions", and never a retry loop;
//! * **the claims topic's shape**: exactly one partition
//!   ([`TopicProblem::ClaimsPartitions`]) and `cleanup.policy` including
//!   `compact` ([`TopicProblem::NotCompacted`], from DescribeConfigs:
//!   [`cleanup_policy`]);
//! * **watermarks that count records**: a record read at or beyond its
//!   partition's high watermark ([`TopicProblem::Watermark`]) means the
//!   broker's end offsets cannot be trusted, and the pool, which learns
//!   what orders exist from them, would idle with orders waiting.
//!
//! Each problem is one line (its `Display`); the worker exits
//! [`crate::process_exit::Exit::Config`] on it, a tool exits non-zero.

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::metadata::Metadata;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where an operator finds the ACLs the pool needs.
const ACL_HINT: &str = "scripts/create-topics.sh --acls PRINCIPAL prints the ACLs the pool needs; docs/deploy.md, \"Kafka ACLs\"";

/// A topic the pool cannot work with, as one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicProblem {
    /// The brokers refuse `operation` on `topic` to this client's principal.
    #[error("not authorized to {operation} topic '{topic}' as {principal} ({ACL_HINT})")]
    NotAuthorized {
        topic: String,
        operation: &'static str,
        principal: String,
    },
    /// The brokers answer, but do not know the topic.
    #[error("topic '{topic}' does not exist (create it with scripts/create-topics.sh)")]
    Missing { topic: String },
    /// The brokers answer about the topic with another error.
    #[error("the brokers refuse topic '{topic}': {error}")]
    Refused { topic: String, error: String },
    /// The orders topics have more partitions than a record's `next` can
    /// carry (`record::MAX_FRONTIER_BYTES`).
    #[error(
        "the orders topics {topics} have {lanes} partitions in all, more than a claims record's \
         frontier can carry ({max} bytes, docs/protocol.md R8): use fewer partitions or topics"
    )]
    TooManyPartitions {
        topics: String,
        lanes: usize,
        max: usize,
    },
    /// The claims topic has other than one partition.
    #[error(
        "the coordination topic '{topic}' has {partitions} partitions; it must have exactly 1 \
         (the protocol needs one total order of claims): delete and recreate it while no \
         instance runs, or choose another COORDINATION_TOPIC"
    )]
    ClaimsPartitions { topic: String, partitions: i32 },
    /// The claims topic's `cleanup.policy` does not compact.
    #[error(
        "the coordination topic '{topic}' has cleanup.policy={policy}; it must include compact \
         (with time retention an idle instance's records expire): kafka-configs.sh --alter \
         --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact"
    )]
    NotCompacted { topic: String, policy: String },
    /// A record at or beyond the high watermark the broker reports.
    #[error(
        "the broker's watermarks do not count records: it returned a record at offset {offset} \
         of '{topic}' partition {partition}, but says the partition ends at {high}; the pool \
         learns which orders and claims exist from these ends and cannot work with this broker \
         (docs/deploy.md, \"Which brokers\")"
    )]
    Watermark {
        topic: String,
        partition: i32,
        offset: i64,
        high: i64,
    },
}

/// The principal this client authenticates as, for messages:
/// `User:<sasl.username>` with SASL, else a description.
pub fn principal(props: &BTreeMap<String, String>) -> String {
    let protocol = props
        .get("security.protocol")
        .map(|p| p.to_ascii_uppercase())
        .unwrap_or_default();
    match props.get("sasl.username") {
        Some(user) if protocol.starts_with("SASL") => format!("User:{user}"),
        _ if protocol == "SSL" => "this client's certificate's principal".into(),
        _ if protocol.starts_with("SASL") => "this client's SASL principal".into(),
        _ => "this client's principal (User:ANONYMOUS without SASL or TLS)".into(),
    }
}

/// Whether a Kafka error code is a refusal by the brokers' authorizer.
pub fn is_authorization(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
    )
}

/// The number of partitions of `topic` in a metadata answer for it, or why
/// the pool cannot use it. `Ok(0)` when the answer does not list it (a
/// broker that is starting may say so).
pub fn partitions_in(
    md: &Metadata,
    topic: &str,
    props: &BTreeMap<String, String>,
) -> Result<i32, TopicProblem> {
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(0);
    };
    judge(topic, t.error(), t.partitions().len() as i32, props)
}

/// [`partitions_in`] for one topic's error and partition count (pure).
pub fn judge(
    topic: &str,
    error: Option<RDKafkaRespErr>,
    partitions: i32,
    props: &BTreeMap<String, String>,
) -> Result<i32, TopicProblem> {
    let Some(err) = error else {
        return Ok(partitions);
    };
    let code = RDKafkaErrorCode::from(err);
    if is_authorization(code) {
        return Err(TopicProblem::NotAuthorized {
            topic: topic.into(),
            operation: "describe",
            principal: principal(props),
        });
    }
    match code {
        RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => {
            Err(TopicProblem::Missing {
                topic: topic.into(),
            })
        }
        // A topic whose leader is being elected: retried by the caller.
        RDKafkaErrorCode::LeaderNotAvailable => Ok(0),
        _ => Err(TopicProblem::Refused {
            topic: topic.into(),
            error: code.to_string(),
        }),
    }
}

/// The claims topic must have exactly one partition.
pub fn one_partition(topic: &str, partitions: i32) -> Result<(), TopicProblem> {
    if partitions == 1 {
        Ok(())
    } else {
        Err(TopicProblem::ClaimsPartitions {
            topic: topic.into(),
            partitions,
        })
    }
}

/// Whether a `cleanup.policy` value compacts (`compact`, or
/// `compact,delete` in either order).
pub fn compacts(policy: &str) -> bool {
    policy
        .split(',')
        .any(|p| p.trim().eq_ignore_ascii_case("compact"))
}

/// The claims topic's `cleanup.policy` judged: `Err` when it does not
/// compact.
pub fn compaction(topic: &str, policy: &str) -> Result<(), TopicProblem> {
    if compacts(policy) {
        Ok(())
    } else {
        Err(TopicProblem::NotCompacted {
            topic: topic.into(),
            policy: policy.into(),
        })
    }
}

/// A record at `offset` of a partition whose high watermark the broker
/// says is `high` (`high < 0`: not known): `Err` when the record lies at or
/// beyond it, which a broker whose watermarks count records never returns.
pub fn within_watermark(
    topic: &str,
    partition: i32,
    offset: i64,
    high: i64,
) -> Result<(), TopicProblem> {
    if high < 0 || offset < high {
        Ok(())
    } else {
        Err(TopicProblem::Watermark {
            topic: topic.into(),
            partition,
            offset,
            high,
        })
    }
}

/// The high watermark of `topic`'s partition `p` as `client` last heard
/// it from the broker (in a fetch answer), without a request; `-1` when not
/// known. librdkafka records a fetch answer's watermark before it hands
/// out the records of that answer.
pub fn cached_high<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    p: i32,
) -> i64 {
    let Ok(name) = std::ffi::CString::new(topic) else {
        return -1;
    };
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is live for `client`'s lifetime, `name` is
    // a NUL-terminated string that outlives the call, and librdkafka only
    // writes the two offsets (rd_kafka_get_watermark_offsets, rdkafka.h).
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            name.as_ptr(),
            p,
            &mut low,
            &mut high,
        )
    };
    if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        high
    } else {
        -1
    }
}

/// A record read at `offset` of `topic`'s partition `p` by `client`,
/// checked against the partition's high watermark: the one the client last
/// heard, and when the record is at or past it, the one the broker gives
/// now (`ask`: a ListOffsets request; `None` when it does not answer). Only
/// a record at or past both is a broker whose watermarks do not count
/// records: a cached watermark can be older than the records of a new
/// leader's first answers.
pub fn check_watermark<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    p: i32,
    offset: i64,
    ask: impl FnOnce() -> Option<i64>,
) -> Result<(), TopicProblem> {
    check_watermark_at(cached_high(client, topic, p), topic, p, offset, ask)
}

/// [`check_watermark`] with the cached high watermark already read (the
/// claims reader reads it once per record for both this check and its end).
pub fn check_watermark_at(
    cached: i64,
    topic: &str,
    p: i32,
    offset: i64,
    ask: impl FnOnce() -> Option<i64>,
) -> Result<(), TopicProblem> {
    if within_watermark(topic, p, offset, cached).is_ok() {
        return Ok(());
    }
    match ask() {
        Some(high) => within_watermark(topic, p, offset, high),
        None => Ok(()),
    }
}

/// Why [`cleanup_policy`] could not tell.
#[derive(Debug)]
pub enum Unknown {
    /// The principal may not DescribeConfigs the topic (or the brokers
    /// described none of its settings).
    NotAuthorized,
    /// The broker does not answer DescribeConfigs (librdkafka's embedded
    /// mock broker), or failed to in time: nothing can be told.
    Unanswered(String),
}

/// How long one metadata or watermark request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A client that answers questions (a topic's metadata, a partition's
/// watermarks) and is never asked to fetch, so that its answers do not
/// wait behind a fetch the broker holds: a consumer made for it (the
/// tools), or a worker's producer (one Kafka client fewer per worker
/// process, issue 27). Watermarks are the `isolation.level`'s (the
/// default, read_committed, for both: a producer's configuration has it
/// too, and librdkafka's ListOffsets sends it).
///
/// A partition's end alone is [`Asks::ask_ends`]: one ListOffsets request
/// per leader for all the partitions asked, where librdkafka's
/// `fetch_watermarks` ([`Asks::ask_watermarks`]) sends two per partition
/// (one for the log start, one for the end: KAFKA-1588); half the
/// ListOffsets of a worker process (issue 35, bench/RESULTS.md).
pub trait Asks: Send + Sync {
    fn ask_metadata(&self, topic: &str, timeout: Duration) -> Result<Metadata, KafkaError>;
    fn ask_watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), KafkaError>;
    fn ask_ends(
        &self,
        topic: &str,
        partitions: &[i32],
        timeout: Duration,
    ) -> Result<BTreeMap<i32, i64>, KafkaError> {
        let parts: Vec<(&str, i32)> = partitions.iter().map(|&p| (topic, p)).collect();
        let ends = self.ask_ends_of(&parts, timeout)?;
        Ok(partitions.iter().copied().zip(ends).collect())
    }
    /// The ends of partitions of several topics (`(topic, partition)`), in
    /// the order asked: one ListOffsets request per leader for them all
    /// (the orders topics of a pool with priorities, R57).
    fn ask_ends_of(&self, parts: &[(&str, i32)], timeout: Duration)
        -> Result<Vec<i64>, KafkaError>;
    /// A partition's log start alone ([`start_of`]).
    fn ask_start(&self, topic: &str, partition: i32, timeout: Duration) -> Result<i64, KafkaError>;
}

/// A topic as a Metadata answer lists it: the brokers' error about it, if
/// any, and its number of partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    pub error: Option<RDKafkaRespErr>,
    pub partitions: i32,
}

/// Every topic `client` holds a handle on, in one Metadata request
/// (`rd_kafka_metadata` with neither all topics nor one: "the locally known
/// topics"). rdkafka's `fetch_metadata` asks for one topic at a time, and
/// each of its calls makes a topic handle of its own, whose creation sends
/// a Metadata request more of librdkafka's own: a worker's producer sent
/// six where two do (issue 35, bench/RESULTS.md). The topics keep
/// `allow.auto.create.topics` as the client has it: librdkafka turns it on
/// only for a list made of cached topics alone, and a client with handles
/// lists those first (`rd_kafka_local_topics_to_list`, 2.12).
pub fn known_topics<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    timeout: Duration,
) -> Result<Vec<TopicMeta>, KafkaError> {
    let mut md: *const rdkafka::bindings::rd_kafka_metadata = std::ptr::null();
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the client pointer is live for `client`'s lifetime; on
    // success librdkafka hands over an answer that this function owns and
    // destroys once, below, after copying what it needs out of it.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_metadata(
            client.native_ptr(),
            0,
            std::ptr::null_mut(),
            &mut md,
            ms,
        )
    };
    if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(KafkaError::MetadataFetch(err.into()));
    }
    if md.is_null() {
        return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail));
    }
    // SAFETY: `md` is the live answer above; its `topics` array holds
    // `topic_cnt` entries (none: maybe a null pointer, not read), each with a
    // NUL-terminated name.
    let topics = unsafe {
        let m = &*md;
        let n = usize::try_from(m.topic_cnt).unwrap_or(0);
        let list = if n == 0 || m.topics.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(m.topics, n)
        };
        list.iter()
            .filter(|t| !t.topic.is_null())
            .map(|t| TopicMeta {
                name: std::ffi::CStr::from_ptr(t.topic)
                    .to_string_lossy()
                    .into_owned(),
                error: (t.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR).then_some(t.err),
                partitions: t.partition_cnt,
            })
            .collect()
    };
    // SAFETY: destroyed once; nothing borrowed from it outlives this.
    unsafe { rdkafka::bindings::rd_kafka_metadata_destroy(md) };
    Ok(topics)
}

/// The end offsets of `partitions` of `topic`, asked through `client`: the
/// high watermark `fetch_watermarks` gives (the same ListOffsets request for
/// the latest offset, at the client's `isolation.level`: the last stable
/// offset under read_committed), without the request for the log start.
/// `rd_kafka_offsets_for_times` with `RD_KAFKA_OFFSET_END` (-1, "latest")
/// as the timestamp sends one request per partition leader.
pub fn ends_of<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<BTreeMap<i32, i64>, KafkaError> {
    let parts: Vec<(&str, i32)> = partitions.iter().map(|&p| (topic, p)).collect();
    let ends = ends_of_parts(client, &parts, timeout)?;
    Ok(partitions.iter().copied().zip(ends).collect())
}

/// [`ends_of`] for partitions of several topics, in one go (one request per
/// leader): their ends, in the order of `parts`.
pub fn ends_of_parts<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    parts: &[(&str, i32)],
    timeout: Duration,
) -> Result<Vec<i64>, KafkaError> {
    offsets_of_parts(client, parts, rdkafka::Offset::End, timeout)
}

/// The log start of `partition` of `topic` alone: the ListOffsets request
/// for the earliest offset that `fetch_watermarks` sends beside the one
/// for the end ([`ends_of_parts`] asks that one, with other partitions).
pub fn start_of<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<i64, KafkaError> {
    let starts = offsets_of_parts(
        client,
        &[(topic, partition)],
        rdkafka::Offset::Beginning,
        timeout,
    )?;
    starts
        .first()
        .copied()
        .ok_or(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail))
}

/// The offsets of `parts` at `at` (`Offset::End`: "latest", the end;
/// `Offset::Beginning`: "earliest", the log start), one ListOffsets request
/// per leader (`rd_kafka_offsets_for_times` with the logical offset as the
/// timestamp, as `fetch_watermarks` asks them).
fn offsets_of_parts<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    parts: &[(&str, i32)],
    at: rdkafka::Offset,
    timeout: Duration,
) -> Result<Vec<i64>, KafkaError> {
    use rdkafka::{Offset, TopicPartitionList};
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let mut tpl = TopicPartitionList::new();
    for &(topic, p) in parts {
        tpl.add_partition_offset(topic, p, at)?;
    }
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the client pointer is live for `client`'s lifetime and `tpl`
    // is a valid list it owns; librdkafka only updates the list's offsets
    // and errors in place (rd_kafka_offsets_for_times, rdkafka.h).
    let err = unsafe {
        rdkafka::bindings::rd_kafka_offsets_for_times(client.native_ptr(), tpl.ptr(), ms)
    };
    if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(KafkaError::MetadataFetch(err.into()));
    }
    parts
        .iter()
        .map(|&(topic, p)| {
            let e = tpl
                .find_partition(topic, p)
                .ok_or(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail))?;
            e.error()?;
            match e.offset() {
                Offset::Offset(o) => Ok(o),
                _ => Err(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail)),
            }
        })
        .collect()
}

/// The ends of the orders topics' `lanes` (R57), asked in one go through
/// `client` (lanes of a topic not in `orders` are left out).
pub(crate) fn lane_ends<A: Asks + ?Sized>(
    client: &A,
    orders: &crate::orders_topics::OrdersTopics,
    lanes: &[crate::record::Lane],
    timeout: Duration,
) -> Result<BTreeMap<crate::record::Lane, i64>, KafkaError> {
    let known: Vec<(crate::record::Lane, (&str, i32))> = lanes
        .iter()
        .filter_map(|&l| Some((l, orders.kafka_lane(l)?)))
        .collect();
    let parts: Vec<(&str, i32)> = known.iter().map(|(_, k)| *k).collect();
    let ends = client.ask_ends_of(&parts, timeout)?;
    Ok(known.into_iter().map(|(l, _)| l).zip(ends).collect())
}

/// The librdkafka client under a consumer or a producer: what [`Asks`]
/// asks through, so that one implementation serves both.
pub trait HasClient: Send + Sync {
    type Context: rdkafka::ClientContext;
    fn rd_client(&self) -> &rdkafka::client::Client<Self::Context>;
}

impl<C: ConsumerContext> HasClient for BaseConsumer<C> {
    type Context = C;
    fn rd_client(&self) -> &rdkafka::client::Client<C> {
        self.client()
    }
}

impl<C: rdkafka::producer::ProducerContext> HasClient for rdkafka::producer::BaseProducer<C> {
    type Context = C;
    fn rd_client(&self) -> &rdkafka::client::Client<C> {
        use rdkafka::producer::Producer as _;
        self.client()
    }
}

impl<T: HasClient> Asks for T {
    fn ask_metadata(&self, topic: &str, timeout: Duration) -> Result<Metadata, KafkaError> {
        self.rd_client().fetch_metadata(Some(topic), timeout)
    }
    fn ask_watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), KafkaError> {
        self.rd_client().fetch_watermarks(topic, partition, timeout)
    }
    fn ask_ends_of(
        &self,
        parts: &[(&str, i32)],
        timeout: Duration,
    ) -> Result<Vec<i64>, KafkaError> {
        ends_of_parts(self.rd_client(), parts, timeout)
    }
    fn ask_start(&self, topic: &str, partition: i32, timeout: Duration) -> Result<i64, KafkaError> {
        start_of(self.rd_client(), topic, partition, timeout)
    }
}

/// The partitions of `topic`, as its metadata lists them now (none while
/// the topic does not exist).
pub(crate) fn partitions_now<A: Asks + ?Sized>(
    client: &A,
    topic: &str,
) -> Result<Vec<i32>, KafkaError> {
    let md = client.ask_metadata(topic, REQUEST_TIMEOUT)?;
    Ok(md
        .topics()
        .first()
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default())
}

/// The end offset of every partition of every orders topic, asked now
/// (one metadata request per topic, then one ListOffsets per leader).
pub(crate) fn order_ends_now<A: Asks + ?Sized>(
    client: &A,
    orders: &crate::orders_topics::OrdersTopics,
) -> Result<BTreeMap<crate::record::Lane, i64>, KafkaError> {
    let mut lanes = Vec::new();
    for (topic, name) in orders.iter() {
        for p in partitions_now(client, name)? {
            lanes.push(crate::record::Lane::new(topic, p));
        }
    }
    lane_ends(client, orders, &lanes, REQUEST_TIMEOUT)
}

/// How long the DescribeConfigs request may take.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The `cleanup.policy` of `topic`, asked with DescribeConfigs through an
/// admin client of `config` (the pool's client settings).
pub async fn cleanup_policy(config: &ClientConfig, topic: &str) -> Result<String, Unknown> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| Unknown::Unanswered(e.to_string()))?;
    let opts = AdminOptions::new().request_timeout(Some(DESCRIBE_TIMEOUT));
    let res = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &opts)
        .await;
    // Destroying a librdkafka client takes up to hundreds of milliseconds
    // (closing connections, joining threads): not on the caller's way.
    std::thread::spawn(move || drop(admin));
    let res = res.map_err(|e| match e.rdkafka_error_code() {
        Some(c) if is_authorization(c) => Unknown::NotAuthorized,
        _ => Unknown::Unanswered(e.to_string()),
    })?;
    let resource = res
        .into_iter()
        .next()
        .ok_or_else(|| Unknown::Unanswered("no resource in the answer".into()))?
        .map_err(|c| {
            if is_authorization(c) {
                Unknown::NotAuthorized
            } else {
                Unknown::Unanswered(c.to_string())
            }
        })?;
    // rdkafka (0.39) drops a resource's own error and gives its entries
    // empty: Kafka answers so when DescribeConfigs is not allowed.
    if resource.entries.is_empty() {
        return Err(Unknown::NotAuthorized);
    }
    let value = resource
        .get("cleanup.policy")
        .and_then(|e| e.value.clone())
        .ok_or_else(|| Unknown::Unanswered("no cleanup.policy in the answer".into()))?;
    Ok(value)
}

/// Whether a cluster id is librdkafka's mock cluster's (the embedded
/// broker: `dev`, `pool_worker broker`), which does not implement
/// DescribeConfigs: asked, it never answers, and the request waits for its
/// whole time-out.
pub fn is_mock_cluster(cluster_id: Option<&str>) -> bool {
    cluster_id.is_some_and(|id| id.starts_with("mockCluster"))
}

/// The claims topic's compaction, checked where the broker can tell
/// (DescribeConfigs): `Err` only for a policy that does not compact;
/// `Ok(Some(warning))` when the principal may not DescribeConfigs the
/// topic (the caller says it, once it knows the topic is readable at all).
/// A broker that does not answer is not judged, and the embedded broker
/// (`cluster_id`, [`is_mock_cluster`]) is not asked.
pub async fn check_compaction(
    config: &ClientConfig,
    cluster_id: Option<&str>,
    topic: &str,
    principal: &str,
) -> Result<Option<String>, TopicProblem> {
    if is_mock_cluster(cluster_id) {
        return Ok(None);
    }
    match cleanup_policy(config, topic).await {
        Ok(policy) => compaction(topic, &policy).map(|()| None),
        Err(Unknown::NotAuthorized) => Ok(Some(format!(
            "cannot check that topic '{topic}' is compacted: the brokers describe none of its settings to {principal} (DescribeConfigs not allowed? {ACL_HINT})"
        ))),
        Err(Unknown::Unanswered(why)) => {
            tracing::debug!(topic, why, "cleanup.policy not checked");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_principal_is_named_from_the_client_settings() {
        let sasl = props(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.username", "nobody"),
        ]);
        assert_eq!(principal(&sasl), "User:nobody");
        assert_eq!(
            principal(&props(&[("security.protocol", "SSL")])),
            "this client's certificate's principal"
        );
        assert!(principal(&props(&[])).contains("ANONYMOUS"));
        // A username without SASL is not the principal.
        assert!(!principal(&props(&[("sasl.username", "x")])).contains("User:x"));
    }

    #[test]
    fn a_refused_topic_is_one_line_naming_topic_and_principal() {
        let p = props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.username", "nobody"),
        ]);
        let e = judge(
            "work_claims",
            Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED),
            0,
            &p,
        )
        .unwrap_err();
        let line = e.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with("not authorized to describe topic 'work_claims' as User:nobody"),
            "{line}"
        );
        assert!(line.contains("--acls"), "{line}");
        assert_eq!(
            judge(
                "t",
                Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART),
                0,
                &p
            ),
            Err(TopicProblem::Missing { topic: "t".into() })
        );
        assert_eq!(
            judge(
                "t",
                Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE),
                0,
                &p
            ),
            Ok(0)
        );
        assert_eq!(judge("t", None, 3, &p), Ok(3));
        assert!(matches!(
            judge(
                "t",
                Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_REQUEST),
                0,
                &p
            ),
            Err(TopicProblem::Refused { .. })
        ));
    }

    #[test]
    fn the_claims_topic_needs_one_partition_and_compaction() {
        assert!(one_partition("c", 1).is_ok());
        for n in [0, 2, 3] {
            let e = one_partition("c", n).unwrap_err().to_string();
            assert!(e.contains(&format!("has {n} partitions")), "{e}");
        }
        for p in ["compact", "compact,delete", "delete, compact", "COMPACT"] {
            assert!(compaction("c", p).is_ok(), "{p}");
        }
        for p in ["delete", "", "compacted"] {
            let e = compaction("c", p).unwrap_err().to_string();
            assert!(e.contains(&format!("cleanup.policy={p};")), "{e}");
            assert!(e.contains("--add-config cleanup.policy=compact"), "{e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn the_embedded_broker_is_known_by_its_cluster_id() {
        assert!(is_mock_cluster(Some("mockCluster7f3a2c")));
        assert!(!is_mock_cluster(Some("q1Sh-9_ISia_zwGINzRvyQ")));
        assert!(!is_mock_cluster(None));
    }

    #[test]
    fn a_record_at_or_past_the_high_watermark_means_watermarks_do_not_count_records() {
        assert!(within_watermark("o", 0, 4, 5).is_ok());
        assert!(within_watermark("o", 0, 0, 1).is_ok());
        // Not known yet: not judged.
        assert!(within_watermark("o", 0, 4, -1).is_ok());
        // tansu 0.6: a high watermark of 1 after 5 records.
        let e = within_watermark("o", 2, 4, 1).unwrap_err().to_string();
        assert!(
            e.contains("offset 4 of 'o' partition 2, but says the partition ends at 1"),
            "{e}"
        );
        assert!(within_watermark("o", 0, 5, 5).is_err());
    }
}
