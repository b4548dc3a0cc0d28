//! The worker's Kafka clients ([`Kafka`]): two per process, the claims
//! producer, which also answers every question (metadata, watermarks), and
//! one consumer, which reads the claims topic and the orders topic, polled by
//! one thread ([`read_topics`]) that routes what it reads by topic.
//!
//! It offers the worker loop ([`crate::run`]) four things, each of them a
//! thin wrapper with the retry policy written down in one place:
//!
//! * **the claims log**: [`Kafka::append_all`] (produce records, one transaction, and wait for
//!   the acknowledgment, retrying with backoff — a produce that timed out may
//!   have been written, which the protocol tolerates: readers drop
//!   duplicates by `seq`), and [`Kafka::next_claim`] (the next record of the
//!   claims topic, read from the newest checkpoint near its end
//!   ([`Kafka::find_checkpoint`]) or from its beginning, or "caught up" when
//!   the reader reaches the end — librdkafka's partition EOF event);
//! * **the orders' ends**: [`Kafka::order_ends`], the high watermark of every
//!   orders partition;
//! * **waiting for orders**: [`Kafka::watch_orders`] points the orders
//!   partitions at the frontier and [`Kafka::order_arrived`] wakes when a
//!   message arrives, so an idle worker sleeps in the broker's long poll
//!   instead of polling;
//! * **one order's payload**: [`Kafka::fetch_order`].
//!
//! Offsets are controlled by hand, as seed 002 asks, and more strictly: the
//! consumer never commits an offset (`enable.auto.commit=false` and no
//! commit call). Where a worker reads orders from is derived from the claims
//! topic (the frontier), which is the one record of truth.

use crate::backoff;
use crate::checkpoint::Snapshot;
use crate::kafka::claims_reader::{
    start_fetching, ClaimsReader, FetchInto, Gate, Polled, TopicHandle, CHECKPOINT_WINDOW,
};
use crate::kafka::client_config::{blocking, client_config};
use crate::kafka::topics::{known_topics, lane_ends, partitions_now, Asks};
use crate::orders_topics::OrdersTopics;
use crate::record::Lane;
use crate::record::{Foreign, OrderId, Record};
use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Records the claims reader thread decodes before handing them over at
/// once: one wake-up of the worker loop per batch, not per record.
const CLAIMS_BATCH: usize = 1024;

/// Batches in flight between the reader thread and the worker loop (bounds
/// the memory of a replay that reads faster than the View folds).
const CLAIMS_BATCHES: usize = 8;

/// The worker loop's end of the claims reader: batches received, and the
/// rest of the batch being consumed.
struct ClaimsQueue {
    rx: mpsc::Receiver<Vec<ClaimEvent>>,
    buf: VecDeque<ClaimEvent>,
}

/// The orders topic's partitions, and when they were asked for.
type PartitionsSeen = (std::time::Instant, Vec<Lane>);

/// How long one metadata or watermark request may take before it is retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the claims reader yields.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // records are the common variant: boxing would allocate for each one
pub(crate) enum ClaimEvent {
    Record(u64, Record),
    Foreign(u64, Foreign),
    /// librdkafka's end of partition: a fetch answered with nothing new,
    /// the reader at the partition's last stable offset.
    CaughtUp,
    /// The reader took every record the brokers have sent so far, and read
    /// one or more since it last said so. A fetch's answer carries the
    /// partition up to its last stable offset of that moment (unless it
    /// was cut at the fetch size, in a long replay), and librdkafka queues
    /// each answer whole, so the reader is at the end the log had then:
    /// caught up, as a [`ClaimEvent::CaughtUp`] that came at once.
    ///
    /// Why both: librdkafka says "end of partition" only when an answer
    /// brings nothing new. A held fetch is answered as soon as something
    /// is committed, so while the pool appends (a burst) that takes until
    /// the log is quiet for a whole `fetch.wait.max.ms`: an idle instance
    /// first in an order's line waited for it before it claimed, up to
    /// 100 ms, and a boot before it was done (bench/RESULTS.md, issue 35).
    Drained,
}

/// The clients' context: librdkafka's errors become one warning each (its
/// own debug log stays off unless `RUST_LOG` asks for target `librdkafka`).
/// "End of partition" also comes through the error callback, which is how
/// the claims reader knows it caught up; it is not an error, so it is not
/// logged as one.
pub(crate) struct Quiet;

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!(error = %error, "kafka: {reason}");
        }
    }
}

impl ConsumerContext for Quiet {}

/// Where the producer's delivery report of one record goes: its offset.
type Delivery = tokio::sync::oneshot::Sender<Result<i64, KafkaError>>;

impl ProducerContext for Quiet {
    type DeliveryOpaque = Box<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, to: Box<Delivery>) {
        let _ = to.send(
            result
                .as_ref()
                .map(|m| m.offset())
                .map_err(|(e, _)| e.clone()),
        );
    }
}

pub(crate) struct Kafka {
    /// The consumer's and the producer's handles on the claims and orders
    /// topics ([`TopicHandle`]), taken right after each is created, before
    /// its connections come up, and held (dropped first): the Metadata
    /// request librdkafka sends as each connection comes up then covers
    /// these topics, and the consumer knows their partitions' leaders
    /// without a request of its own. Taken with a request each instead
    /// (rdkafka's `fetch_metadata`), the two cost every process two Metadata
    /// requests (bench/RESULTS.md, issue 35); the producer's let
    /// [`Kafka::open`] ask for all the topics in one request
    /// ([`known_topics`]), not one per topic.
    _topics: Vec<TopicHandle>,
    /// Its delivery reports are served by a thread of its own
    /// ([`Kafka::connect`]), not by rdkafka's `FutureProducer`, whose
    /// polling thread wakes every 100 ms and then spins for up to a
    /// millisecond (a timeout under 1 ms is rounded down to 0 ms): 0.6 % of
    /// a core per idle worker, most of its idle CPU (bench/RESULTS.md).
    ///
    /// Replaced when it fails for good without being fenced
    /// ([`Kafka::renew`]); [`Kafka::producer`] gives the current one.
    producer: std::sync::RwLock<Arc<BaseProducer<Quiet>>>,
    /// The producer's settings, for a replacement.
    producer_config: ClientConfig,
    /// How many more times the producer may be replaced in this process.
    renewals: std::sync::atomic::AtomicU32,
    /// The instance's other transactional id, under `supervise` with
    /// standbys ([`TxnSlot`]): [`Kafka::fence_other`] fences it.
    other_txn_id: Option<String>,
    /// Whether the producer writes in transactions under the instance's
    /// `transactional.id` (`CLAIMS_FENCE=transactions`, docs/protocol.md
    /// R16): every record it produces is a transaction of its own.
    transactional: bool,
    /// The one consumer: the claims partition (on a queue of its own,
    /// [`ClaimsReader::sharing`]) and the orders partitions (on its main
    /// queue), read_committed for both. One thread polls both queues
    /// ([`read_topics`]).
    consumer: Arc<BaseConsumer<Quiet>>,
    /// The claims reader on [`Kafka::consumer`].
    claims: Arc<ClaimsReader<Quiet>>,
    claims_rx: tokio::sync::Mutex<ClaimsQueue>,
    claims_tx: std::sync::Mutex<Option<mpsc::Sender<Vec<ClaimEvent>>>>,
    /// Rung when either of the consumer's queues has something
    /// ([`read_topics`] waits on it).
    wake: Arc<Wake>,
    /// The consumer's two queues' lengths, for [`read_topics`]'s wait.
    queues: Queues,
    /// The orders partitions in the consumer's assignment, and which of them
    /// are fetching (the others are paused).
    orders_assigned: std::sync::Mutex<OrdersAssigned>,
    /// The order [`Kafka::fetch_order`] waits for, as the reader thread
    /// found it.
    wanted: std::sync::Mutex<Wanted>,
    /// How many orders messages the reader thread has read.
    arrivals: tokio::sync::watch::Sender<u64>,
    /// [`Kafka::arrivals`] as [`Kafka::order_arrived`] last answered it (or
    /// [`Kafka::watch_orders`] started watching).
    arrivals_seen: std::sync::atomic::AtomicU64,
    claims_topic: String,
    /// `ORDERS_TOPIC`: the orders topics in priority order (R57).
    orders: OrdersTopics,
    results_topic: Option<String>,
    instance: u32,
    /// Which claims records are the pool's ([`Gate`]).
    gate: Gate,
    /// `CHECKPOINT_MAX_AGE_MS`: the oldest checkpoint a boot starts from.
    checkpoint_max_age_ms: u64,
    /// The orders topic's partitions, and when they were asked for.
    order_partitions: Arc<std::sync::Mutex<Option<PartitionsSeen>>>,
    /// Orders' payloads already received (by the idle watch, or in the same
    /// fetch as an order fetched), so that fetching them costs no round trip.
    payloads: std::sync::Mutex<Payloads>,
    /// The user's `KAFKA_*` properties (for messages naming the principal).
    props: Arc<BTreeMap<String, String>>,
    /// The clients' settings, for the admin client that asks for the claims
    /// topic's configuration ([`crate::kafka::topics::check_compaction`]); `None`
    /// in a standby (pool_worker/src/supervise.rs, STANDBY), whose supervisor's first
    /// process of the instance checked it: the admin client (a Kafka client
    /// of its own, ~2 ms of CPU) is spared on every later start.
    admin_config: Option<ClientConfig>,
    /// Whether, and why, the claims partition is paused ([`ClaimsPause`]).
    pause: std::sync::Mutex<ClaimsPause>,
}

/// Whether the claims partition is paused, and why (issue 35): at N
/// instances every record another instance writes costs each reader a
/// fetch and a wake-up, and the brokers a fetch answered, so a process
/// stops fetching the claims topic where nothing it waits for comes from
/// it, for one of two reasons.
///
/// * **A standby before its `go`** replays the log to its end, then pauses
///   ([`Kafka::at_end_of_log`]) until its supervisor says `go`
///   ([`Kafka::standby_go`]): the records the rest of the pool writes
///   meanwhile (every instance's, two or three per order) are read once,
///   after `go`, and a caught-up standby sends the brokers no fetch.
/// * **A worker whose job runs** and whose every appended record is read
///   back: the shell asks for quiet ([`Kafka::hush`]). Nothing it waits for
///   then comes from the log but an operator's cancel of its order (read a
///   little later, never lost) and its own renewals, which it reads back
///   before it goes quiet again. It reads again when the shell no longer
///   wants quiet, or for a look ([`Kafka::peek`], every
///   [`crate::run::HUSH_PEEK`]) that lasts to the next end of the log.
///
/// Either way the partition resumes where the reader stopped
/// ([`ClaimsReader::resume_where_read`]). Pauses, and resumes for quiet,
/// are done on the reader thread between its polls (`go`'s resume under the
/// same lock), so that what it polled and where it resumes meet exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ClaimsPause {
    /// A standby before its `go`: it pauses at its first end of the log.
    standby: bool,
    /// The shell wants quiet.
    want: bool,
    /// Paused (for either reason).
    paused: bool,
    /// The shell asked for a look while paused.
    peek: bool,
    /// Resumed for a look: reading until the next end of the log.
    looking: bool,
}

/// Why an order's payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// The broker deleted it (retention, DeleteRecords): its partition's
    /// log now starts at `log_start`, past the order.
    Deleted {
        log_start: i64,
    },
    Failed(String),
}

/// While an order's payload does not come, how often its partition's log
/// start is checked (the order may have been deleted).
const DELETED_CHECK: Duration = Duration::from_secs(1);

/// How long the orders topic's partition list is reused before it is asked
/// for again (partitions added to the orders topic are seen within this).
const PARTITIONS_REFRESH: Duration = Duration::from_secs(5);

/// Bounds of [`Payloads`].
const PAYLOADS_MAX: usize = 1024;
const PAYLOADS_MAX_BYTES: usize = 4 << 20;

/// An order's message as the worker needs it: its payload, and the value
/// of its `traceparent` header (W3C trace context), if it has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OrderMessage {
    pub(crate) payload: Option<Vec<u8>>,
    /// Not checked here (the worker checks it); lossy UTF-8, at most 256 bytes kept.
    pub(crate) traceparent: Option<String>,
}

impl OrderMessage {
    fn of(m: &impl Message) -> OrderMessage {
        use rdkafka::message::Headers;
        let traceparent = m.headers().and_then(|h| {
            h.iter()
                .find(|h| h.key.eq_ignore_ascii_case("traceparent"))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(&v[..v.len().min(256)]).into_owned())
        });
        OrderMessage {
            payload: m.payload().map(<[u8]>::to_vec),
            traceparent,
        }
    }

    fn bytes(&self) -> usize {
        self.payload.as_ref().map_or(0, Vec::len) + self.traceparent.as_ref().map_or(0, String::len)
    }
}

/// Orders' messages by order (topic, partition, offset). Kafka never
/// changes a message, so a message received once is the order's.
#[derive(Default)]
struct Payloads {
    map: BTreeMap<OrderId, OrderMessage>,
    bytes: usize,
}

impl Payloads {
    fn put(&mut self, order: OrderId, m: OrderMessage) {
        let n = m.bytes();
        if self.map.len() < PAYLOADS_MAX
            && self.bytes + n <= PAYLOADS_MAX_BYTES
            && !self.map.contains_key(&order)
        {
            self.bytes += n;
            self.map.insert(order, m);
        }
    }

    /// Takes the order's message, forgetting those before it in its
    /// partition (orders are claimed in offset order).
    fn take(&mut self, order: OrderId) -> Option<OrderMessage> {
        let older: Vec<OrderId> = self
            .map
            .range(order.lane().at(0)..order)
            .map(|(k, _)| *k)
            .collect();
        for k in older {
            if let Some(p) = self.map.remove(&k) {
                self.bytes -= p.bytes();
            }
        }
        let p = self.map.remove(&order)?;
        self.bytes -= p.bytes();
        Some(p)
    }
}

/// What the worker's clients are made from: the part of the worker's
/// configuration (pool_worker/src/config.rs, `Config::kafka_setup`) that
/// Kafka needs, so that this module need not know the configuration.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    /// `KAFKA_BROKERS`.
    pub(crate) brokers: String,
    /// `ORDERS_TOPIC`: the orders topics in priority order.
    pub(crate) orders: OrdersTopics,
    /// `COORDINATION_TOPIC`.
    pub(crate) claims_topic: String,
    /// `RESULTS_TOPIC`.
    pub(crate) results_topic: Option<String>,
    /// `INSTANCE_NUMBER`.
    pub(crate) instance: u32,
    /// The `KAFKA_<PROPERTY>` properties.
    pub(crate) props: BTreeMap<String, String>,
    /// `CLAIMS_FENCE=transactions`: the claims producer is transactional
    /// under [`transactional_id`] (docs/protocol.md R16).
    pub(crate) transactions: bool,
    /// `CLAIMS_KEY`: what decides which claims records are the pool's.
    pub(crate) claims_key: Option<crate::sign::ClaimsKey>,
    /// `CHECKPOINT_MAX_AGE_MS` (docs/protocol.md R24).
    pub(crate) checkpoint_max_age_ms: u64,
    /// A standby started by `supervise`: no admin client until it is live.
    pub(crate) standby: bool,
    /// Which of the instance's two transactional ids (`supervise`'s
    /// processes alternate; [`transactional_id`]); `None` outside it.
    pub(crate) txn_slot: Option<TxnSlot>,
}

/// One of an instance's two transactional ids (docs/protocol.md R16).
/// `supervise` gives a standby the id its instance's current process does
/// not use, so that the standby can initialise its producer (bumping that
/// id's epoch, fencing the process before the current one, which has said
/// `done` or exited) while it stands by, not after `go`: a `go` that says
/// the predecessor is done (every append acknowledged, none to come) then
/// needs no fence, and one that does not is followed by a fence of the
/// predecessor's id ([`Kafka::fence_other`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxnSlot {
    /// The id a process outside `supervise` uses too.
    Zero,
    One,
}

impl TxnSlot {
    pub(crate) fn other(self) -> TxnSlot {
        match self {
            TxnSlot::Zero => TxnSlot::One,
            TxnSlot::One => TxnSlot::Zero,
        }
    }

    /// As `supervise` writes it ([`crate::supervise::TXN_SLOT`]).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TxnSlot::Zero => "0",
            TxnSlot::One => "1",
        }
    }

    /// [`TxnSlot::as_str`]'s inverse.
    pub(crate) fn parse(s: &str) -> Option<TxnSlot> {
        [TxnSlot::Zero, TxnSlot::One]
            .into_iter()
            .find(|slot| slot.as_str() == s)
    }
}

/// Why [`Kafka::open`] failed. The worker exits [`crate::process_exit::Exit::Config`]
/// on a topic the operator must fix, and [`crate::process_exit::Exit::Failure`]
/// (restarted) when the brokers could not be reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// No broker answered for the whole patience.
    #[error("cannot reach the Kafka brokers to read topic '{topic}': {cause}")]
    Unreachable { topic: String, cause: KafkaError },
    /// A topic the pool cannot work with (missing, not authorized, a claims
    /// topic with several partitions or not compacted): the operator's to fix.
    #[error("{0}")]
    Topic(#[from] crate::kafka::topics::TopicProblem),
    /// The thread asking for metadata failed.
    #[error("{0:#}")]
    Task(anyhow::Error),
}

/// The number of partitions of each of `topics`, in order, waiting (with
/// backoff, for at most `patience`) while the brokers cannot be reached.
///
/// Asked through `asks`, the producer, which appends to the claims topic
/// and answers the questions about the orders topics (their end offsets):
/// it then knows the partitions' leaders before its first append or
/// question. One Metadata request for them all ([`known_topics`]: the
/// producer holds a handle on each from its creation on, `Kafka::_topics`),
/// not one per topic. The consumer learns them without a request of its
/// own: it holds handles too, so that the Metadata request librdkafka sends
/// as each of its connections comes up covers them.
async fn partitions(
    asks: Arc<BaseProducer<Quiet>>,
    topics: Vec<String>,
    props: Arc<BTreeMap<String, String>>,
    patience: Duration,
) -> Result<Vec<i32>, OpenError> {
    use rdkafka::producer::Producer as _;
    let start = std::time::Instant::now();
    let mut backoff = backoff::REQUEST;
    loop {
        let c = asks.clone();
        let answer = blocking(move || known_topics(c.client(), REQUEST_TIMEOUT))
            .await
            .map_err(OpenError::Task)?;
        match answer {
            Ok(listed) => {
                let mut counts = Vec::with_capacity(topics.len());
                let mut waiting = None;
                for topic in &topics {
                    let judged = match listed.iter().find(|t| &t.name == topic) {
                        Some(t) => {
                            crate::kafka::topics::judge(topic, t.error, t.partitions, &props)
                        }
                        None => Ok(0),
                    };
                    match judged {
                        Ok(n) if n > 0 => counts.push(n),
                        // Not listed, or no leader yet.
                        Ok(_) => {
                            waiting.get_or_insert_with(|| {
                                crate::kafka::topics::TopicProblem::Missing {
                                    topic: topic.clone(),
                                }
                            });
                        }
                        // A broker may also say so while starting.
                        Err(e @ crate::kafka::topics::TopicProblem::Missing { .. }) => {
                            waiting.get_or_insert(e);
                        }
                        // Refused (no ACL) or another error the brokers give
                        // about the topic: asking again changes nothing.
                        Err(e) => return Err(e.into()),
                    }
                }
                match waiting {
                    None => return Ok(counts),
                    Some(e) if start.elapsed() > Duration::from_secs(3) => return Err(e.into()),
                    Some(_) => {}
                }
            }
            Err(e) => {
                if start.elapsed() > patience {
                    return Err(OpenError::Unreachable {
                        topic: topics.join(","),
                        cause: e,
                    });
                }
                tracing::warn!(error = %e, "brokers unreachable; retrying in {:?}", backoff.peek());
            }
        }
        backoff.wait().await;
    }
}

/// The consumer's settings: the claims readers' own ([`crate::kafka::claims_reader::config`]:
/// read_committed whatever the user's properties say, partition EOF, the
/// fetch sizes of a replay, `fetch.wait.max.ms` [`crate::kafka::client_config::CLAIMS_FETCH_WAIT_MS`]).
/// The orders partitions are read with them too:
/// read_committed changes nothing for orders written without transactions
/// (their last stable offset is their high watermark, which is also the end
/// the pool learns orders from: the producer's ListOffsets are
/// read_committed, librdkafka's default, which the orders consumer had
/// too), and an order written in a transaction is read once it is committed
/// and never if it is aborted.
///
/// It has no `group.id`, whatever the `KAFKA_*` properties say: its
/// partitions are started by hand ([`crate::kafka::claims_reader::start_fetching`]),
/// and a consumer with a group keeps a connection to the group's
/// coordinator, which the pool, committing no offset, never needs.
fn consumer_config(cfg: &Setup) -> ClientConfig {
    crate::kafka::claims_reader::config(&cfg.brokers, &cfg.props, None)
}

/// Most orders messages the reader thread takes from the main queue before
/// it looks at the claims queue again.
const ORDERS_BATCH: usize = 256;

/// How long the reader thread waits for its queues before it looks again
/// whether the worker still listens (the queues' callbacks wake it sooner).
const READER_IDLE: Duration = Duration::from_millis(100);

/// The reader thread: polls the consumer's two queues and routes what they
/// hold by topic. The claims partition's queue: its reader decodes the
/// records (so that decoding runs beside the worker's fold of the previous
/// batch), handed over in batches, and "caught up" at its end; the main
/// queue: orders messages ([`Kafka::order_message`]), the orders
/// partitions' end-of-partition events (not needed: dropped) and the
/// client's errors (already logged by [`Quiet`]). When both are empty it
/// waits on [`Kafka::wake`]. Ends when the worker's end is gone.
fn read_topics(kafka: &'static Kafka, tx: &mpsc::Sender<Vec<ClaimEvent>>) {
    let instance = kafka.instance;
    let live = || !tx.is_closed();
    let mut batch = Vec::with_capacity(CLAIMS_BATCH);
    // Records read since the last CaughtUp or Drained.
    let mut unsaid = false;
    while !tx.is_closed() {
        kafka.hush_round();
        let mut busy = false;
        while batch.len() < CLAIMS_BATCH {
            match kafka.claims.poll(Duration::ZERO, &live) {
                Polled::Nothing => {
                    if std::mem::take(&mut unsaid) {
                        batch.push(ClaimEvent::Drained);
                    }
                    break;
                }
                Polled::Record(pos, Ok(r)) => {
                    unsaid = true;
                    batch.push(ClaimEvent::Record(pos, r))
                }
                Polled::Record(pos, Err(why)) => {
                    unsaid = true;
                    batch.push(ClaimEvent::Foreign(pos, why))
                }
                Polled::End => {
                    unsaid = false;
                    batch.push(ClaimEvent::CaughtUp);
                    // A standby stops fetching until its `go`; a quiet
                    // worker's look is over.
                    kafka.at_end_of_log();
                }
                Polled::Broken(p) => broken(instance, &p),
                Polled::Error(e) => {
                    tracing::warn!(instance, error = %e, "reading the claims topic");
                    // librdkafka retries by itself; no loop of warnings.
                    std::thread::sleep(READER_IDLE);
                    break;
                }
            }
            busy = true;
        }
        if !batch.is_empty() {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(CLAIMS_BATCH));
            if tx.blocking_send(full).is_err() {
                return;
            }
        }
        for _ in 0..ORDERS_BATCH {
            match kafka.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => {
                    if let Some(lane) = kafka.orders.lane_of(m.topic(), m.partition()) {
                        kafka.order_message(lane, &m);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => tracing::debug!(instance, error = %e, "reading the orders topic"),
            }
            busy = true;
        }
        if !busy {
            // A poll that served an event of another kind (a log line) says
            // nothing too: the queues' lengths tell whether to wait.
            kafka.wake.wait(|| kafka.queues.empty(), READER_IDLE);
        }
    }
}

/// What wakes the reader thread: librdkafka calls [`Wake::ring`] when one of
/// the consumer's queues goes from empty to not empty.
#[derive(Default)]
struct Wake {
    rung: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Wake {
    fn ring(&self) {
        let mut rung = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        *rung = true;
        self.cv.notify_one();
    }

    /// Waits at most `limit` for a ring, unless `empty` says there is
    /// something to read or a ring came since the last wait. A queue that
    /// gets something after `empty` looked goes from empty to not empty,
    /// which rings: before the wait (it does not wait) or during it.
    ///
    /// `empty` is asked without the lock: librdkafka rings holding the
    /// queue's lock, which `empty` takes; asked under this one, a ring
    /// and the wait deadlocked (the consumer's broker thread stuck).
    fn wait(&self, empty: impl Fn() -> bool, limit: Duration) {
        if !empty() {
            return;
        }
        let mut rung = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        if !std::mem::take(&mut *rung) {
            let (mut r, _) = self
                .cv
                .wait_timeout(rung, limit)
                .unwrap_or_else(|p| p.into_inner());
            *r = false;
        }
    }
}

/// librdkafka handles on the consumer's main queue and its claims
/// partition's queue, to ask their lengths ([`Queues::empty`]); rdkafka
/// does not say whether a poll that returned nothing left the queue empty.
struct Queues {
    main: *mut rdkafka::bindings::rd_kafka_queue_t,
    claims: *mut rdkafka::bindings::rd_kafka_queue_t,
}

// SAFETY: librdkafka's queue handles may be used from any thread
// (rd_kafka_queue_length locks the queue).
unsafe impl Send for Queues {}
unsafe impl Sync for Queues {}

impl Queues {
    fn of(consumer: &BaseConsumer<Quiet>, claims_topic: &str) -> anyhow::Result<Queues> {
        let topic = std::ffi::CString::new(claims_topic)?;
        let rk = consumer.client().native_ptr();
        // SAFETY: `rk` is a live consumer handle; both calls return a new
        // reference to a queue (NULL on error), destroyed in `drop`; `topic`
        // is NUL-terminated and outlives the call.
        let (main, claims) = unsafe {
            (
                rdkafka::bindings::rd_kafka_queue_get_main(rk),
                rdkafka::bindings::rd_kafka_queue_get_partition(rk, topic.as_ptr(), 0),
            )
        };
        let q = Queues { main, claims };
        if main.is_null() || claims.is_null() {
            anyhow::bail!("cannot get the consumer's queues");
        }
        Ok(q)
    }

    /// Whether both queues are empty.
    fn empty(&self) -> bool {
        // SAFETY: both handles are live until `drop`.
        unsafe {
            rdkafka::bindings::rd_kafka_queue_length(self.main) == 0
                && rdkafka::bindings::rd_kafka_queue_length(self.claims) == 0
        }
    }
}

impl Drop for Queues {
    fn drop(&mut self) {
        for q in [self.main, self.claims] {
            if !q.is_null() {
                // SAFETY: a reference this value took, dropped once.
                unsafe { rdkafka::bindings::rd_kafka_queue_destroy(q) };
            }
        }
    }
}

/// The orders partitions the consumer reads. Each is started once
/// ([`crate::kafka::claims_reader::start_fetching`], beside the claims
/// partition) and then sought and paused or resumed, never stopped: no
/// start can race another one's stop (as an assignment could,
/// confluentinc/librdkafka#5573), and the claims partition is never touched.
#[derive(Default)]
struct OrdersAssigned {
    assigned: BTreeSet<Lane>,
    fetching: BTreeSet<Lane>,
}

/// The order [`Kafka::fetch_order`] waits for, as the reader thread saw it.
#[derive(Default)]
struct Wanted {
    order: Option<OrderId>,
    /// Its message, once read.
    got: Option<OrderMessage>,
    /// A later message of its partition came instead of it.
    passed: bool,
}

/// A broker the pool cannot work with (its watermarks do not count
/// records): one line, and exit 2 (the operator's to fix; a restart would
/// meet the same broker).
fn broken(instance: u32, problem: &crate::kafka::topics::TopicProblem) -> ! {
    tracing::error!(instance, "pool_worker: {problem}");
    crate::process_exit::exit_now(crate::process_exit::Exit::Config);
}

/// Whether a produce failed because the record is larger than the client
/// or the broker allows.
fn too_large(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::MessageSizeTooLarge | C::MessageBatchTooLarge | C::InvalidMessageSize)
    )
}

/// A result message's value (`ResultMessage::value`) with its `topic` the
/// main orders topic's name where the core leaves it null (an order of the
/// main topic, R57): a subscriber reads every order's topic by its name.
fn with_main_topic(value: String, main: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(&value) {
        Ok(mut v) if v.get("topic").is_some_and(serde_json::Value::is_null) => {
            v["topic"] = main.into();
            v.to_string()
        }
        _ => value,
    }
}

/// The claims producer's `transactional.id` (docs/protocol.md R16): one per
/// pool and instance, so that a new process of the instance fences every
/// older one. The pool is named by its topics; Kafka's topic names (at most
/// 249 characters of `[a-zA-Z0-9._-]`) keep it well within the id's limit
/// (a string of up to 32,767 bytes) and make it easy to grant by prefix
/// (`pool_worker.<claims topic>.`; docs/deploy.md). The orders topic in it
/// is the main one (`ORDERS_TOPIC`'s last, R57): priority topics put in
/// front of it leave the id as it was.
///
/// Under `supervise` an instance has two ids ([`TxnSlot`]): slot 0's is the
/// one above, slot 1's ends in `.1` (`pool_worker.<claims>.<orders>.<n>.1`;
/// the dot keeps it apart from another instance's number).
pub(crate) fn transactional_id(cfg: &Setup) -> String {
    transactional_id_of(cfg, cfg.txn_slot.unwrap_or(TxnSlot::Zero))
}

/// [`transactional_id`] of the given slot.
pub(crate) fn transactional_id_of(cfg: &Setup, slot: TxnSlot) -> String {
    let base = format!(
        "pool_worker.{}.{}.{}",
        cfg.claims_topic,
        cfg.orders.main_name(),
        cfg.instance
    );
    match slot {
        TxnSlot::Zero => base,
        TxnSlot::One => base + ".1",
    }
}

/// `transaction.timeout.ms` of the claims producer: how long a transaction
/// left open by a process that died inside it holds back every reader of
/// the claims topic (read_committed readers stop at its first record) when
/// no successor fences it sooner. Each transaction is one record, open for
/// a few milliseconds.
pub(crate) const TRANSACTION_TIMEOUT_MS: u64 = 10_000;

/// Why the claims producer stopped for good: this process must stop
/// appending and exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// A newer process of this instance fenced the producer
    /// (docs/protocol.md R16): exit "fenced".
    Fenced,
    /// Any other fatal producer error: exit with a failure (the supervisor
    /// starts the instance again).
    Failed,
    /// The brokers refuse the instance's `transactional.id` (ACLs): the
    /// operator's to fix (exit 2; docs/deploy.md, "Kafka ACLs").
    Unauthorized,
}

/// What a fatal transactional error means for this process; `None` if the
/// operation may be tried again.
fn stopped_by(e: &rdkafka::error::RDKafkaError) -> Option<Stopped> {
    use RDKafkaErrorCode as C;
    if matches!(
        e.code(),
        C::TransactionalIdAuthorizationFailed | C::ClusterAuthorizationFailed
    ) {
        return Some(Stopped::Unauthorized);
    }
    if !e.is_fatal() {
        // Retriable, or abortable (a transaction the coordinator timed out
        // is aborted and the producer goes on with a bumped epoch).
        return None;
    }
    let fenced = matches!(
        e.code(),
        C::Fenced | C::ProducerFenced | C::InvalidProducerEpoch
    );
    Some(if fenced {
        Stopped::Fenced
    } else {
        Stopped::Failed
    })
}

/// Waits (at most [`REPORT_SETTLE`]) until librdkafka no longer counts the
/// delivery report of the record just appended as in flight.
///
/// rdkafka's `commit_transaction` flushes first, and its flush, finding
/// anything in flight, polls the producer's queue for up to 100 ms. The
/// delivery-reports thread ([`Kafka::connect`]) hands each report to the
/// appender before librdkafka drops the event, so the appender, woken by
/// it, used to reach the flush while the event was still counted: one
/// commit in five took 100 ms more (Apache Kafka 4.4, debug=eos). The
/// report is dropped microseconds after it is handed on; waiting for that
/// here makes the flush find nothing.
fn settle_reports<C: ProducerContext>(p: &BaseProducer<C>) {
    let start = std::time::Instant::now();
    while p.in_flight_count() > 0 && start.elapsed() < REPORT_SETTLE {
        std::thread::yield_now();
    }
}

/// See [`settle_reports`]: far above the microseconds it takes, far below
/// the flush's 100 ms poll.
const REPORT_SETTLE: Duration = Duration::from_millis(5);

/// The transactional error inside a Kafka error, if it is one.
fn txn_error(e: &KafkaError) -> Option<&rdkafka::error::RDKafkaError> {
    match e {
        KafkaError::Transaction(t) => Some(t),
        _ => None,
    }
}

impl Kafka {
    /// A claims producer with these settings, whose delivery reports a
    /// thread of its own serves.
    fn new_producer(pc: &ClientConfig) -> anyhow::Result<Arc<BaseProducer<Quiet>>> {
        let producer: BaseProducer<Quiet> = pc
            .create_with_context(Quiet)
            .context("cannot create the Kafka producer")?;
        let producer = Arc::new(producer);
        let reports = producer.clone();
        // Blocks until the next delivery report, for as long as the process
        // lives (the Kafka value is never dropped: pool_worker/src/run.rs; a producer
        // replaced by [`Kafka::renew`] stays idle until the process exits).
        std::thread::Builder::new()
            .name("delivery-reports".into())
            .spawn(move || reports.poll(rdkafka::util::Timeout::Never))
            .context("cannot start the producer's delivery report thread")?;
        Ok(producer)
    }

    /// The current claims producer.
    fn producer(&self) -> Arc<BaseProducer<Quiet>> {
        self.producer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many times a process replaces a producer that failed for good
    /// ([`Kafka::renew`]) before it gives up and exits 1.
    const RENEWALS: u32 = 3;

    /// Replaces a transactional producer that failed for good without being
    /// fenced (docs/protocol.md R16): librdkafka calls some errors fatal
    /// that only its own state made so, INVALID_TXN_STATE from EndTxn after
    /// the coordinator moved (its broker killed during the commit), for one.
    /// Exiting then lost a finished job's outcome: the next process ran the
    /// order again. A new producer under the same `transactional.id` is
    /// initialised ([`Kafka::fence`]): the broker bumps the epoch, aborts
    /// the transaction the failed one left open and refuses whatever it
    /// still sends, so the record it was writing has landed or never will,
    /// and the caller appends it again (R6; a second copy is void, R7). A
    /// newer process of the instance that booted meanwhile (none does under
    /// `supervise`: its standby waits for this one's exit) is fenced by
    /// this and fences back when restarted; what this one appends after
    /// that process's `booted` is void (R10). `Err` when no replacement is
    /// left, or the new producer cannot be initialised.
    async fn renew(&self) -> Result<(), Stopped> {
        use std::sync::atomic::Ordering;
        let left = self
            .renewals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if !self.transactional || left.is_err() {
            return Err(Stopped::Failed);
        }
        tracing::warn!(
            instance = self.instance,
            "the claims producer failed for good without being fenced; replacing it (a new producer under the instance's transactional id) and appending again"
        );
        let fresh = Kafka::new_producer(&self.producer_config).map_err(|e| {
            tracing::error!(instance = self.instance, error = %e, "cannot replace the claims producer");
            Stopped::Failed
        })?;
        *self.producer.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        self.fence().await
    }

    pub(crate) fn connect(cfg: &Setup) -> anyhow::Result<Kafka> {
        let mut pc = client_config(&cfg.brokers, &cfg.props);
        pc.set("acks", "all")
            .set("linger.ms", "0")
            .set("message.timeout.ms", "10000");
        // The pool creates no topic by asking about it or writing to it
        // (topics are the operator's: scripts/create-topics.sh). A producer
        // would by default, where the broker allows it (Apache Kafka's
        // default), and this one also answers the questions about the
        // orders topic: a misspelt ORDERS_TOPIC became a topic instead of
        // exit 2. KAFKA_ALLOW_AUTO_CREATE_TOPICS still decides.
        if !cfg.props.contains_key("allow.auto.create.topics") {
            pc.set("allow.auto.create.topics", "false");
        }
        let transactional = cfg.transactions;
        if transactional {
            // Set after the user's KAFKA_* properties: the fence needs this
            // id and no other (docs/protocol.md R16).
            pc.set("transactional.id", transactional_id(cfg))
                .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS.to_string());
        }
        let producer = Kafka::new_producer(&pc)?;
        let gate = Gate::new(cfg.claims_key.clone(), &cfg.orders);
        let wake = Arc::new(Wake::default());
        let cc = consumer_config(cfg);
        let mut consumer: BaseConsumer<Quiet> = cc
            .create_with_context(Quiet)
            .context("cannot create the Kafka consumer")?;
        let ring = wake.clone();
        consumer.set_nonempty_callback(move || ring.ring());
        let consumer = Arc::new(consumer);
        let names: Vec<&String> = std::iter::once(&cfg.claims_topic)
            .chain(cfg.orders.names())
            .collect();
        let topics = {
            use rdkafka::producer::Producer as _;
            names
                .iter()
                .map(|t| TopicHandle::new(consumer.client(), t))
                .chain(names.iter().map(|t| TopicHandle::new(producer.client(), t)))
                .collect::<anyhow::Result<_>>()?
        };
        let ring = wake.clone();
        let claims = ClaimsReader::sharing(
            consumer.clone(),
            &cc,
            &cfg.claims_topic,
            gate.clone(),
            // The producer answers the reader's questions (it never
            // fetches); a client of its own cost each process ~2 ms of CPU
            // and connections to the brokers (issue 27).
            producer.clone() as Arc<dyn Asks>,
            move || ring.ring(),
        )?
        .marker_slack();
        let queues = Queues::of(&consumer, &cfg.claims_topic)?;
        let (tx, rx) = mpsc::channel(CLAIMS_BATCHES);
        Ok(Kafka {
            _topics: topics,
            producer: std::sync::RwLock::new(producer),
            producer_config: pc,
            other_txn_id: cfg
                .txn_slot
                .filter(|_| transactional)
                .map(|slot| transactional_id_of(cfg, slot.other())),
            renewals: std::sync::atomic::AtomicU32::new(Self::RENEWALS),
            transactional,
            consumer,
            claims: Arc::new(claims),
            claims_rx: tokio::sync::Mutex::new(ClaimsQueue {
                rx,
                buf: VecDeque::new(),
            }),
            claims_tx: std::sync::Mutex::new(Some(tx)),
            wake,
            queues,
            orders_assigned: std::sync::Mutex::default(),
            wanted: std::sync::Mutex::default(),
            arrivals: tokio::sync::watch::Sender::new(0),
            arrivals_seen: std::sync::atomic::AtomicU64::new(0),
            claims_topic: cfg.claims_topic.clone(),
            orders: cfg.orders.clone(),
            results_topic: cfg.results_topic.clone(),
            instance: cfg.instance,
            gate,
            checkpoint_max_age_ms: cfg.checkpoint_max_age_ms,
            order_partitions: Arc::new(std::sync::Mutex::new(None)),
            payloads: std::sync::Mutex::new(Payloads::default()),
            props: Arc::new(cfg.props.clone()),
            admin_config: (!cfg.standby).then(|| client_config(&cfg.brokers, &cfg.props)),
            pause: std::sync::Mutex::new(ClaimsPause {
                standby: cfg.standby,
                ..ClaimsPause::default()
            }),
        })
    }

    /// Checks the topics (the claims topic must have exactly one partition);
    /// [`Kafka::read_claims_from`] then starts the claims reader.
    ///
    /// The two clients connect in parallel: the producer asks for both
    /// topics' partitions (it appends to the claims topic and answers the
    /// questions about the orders topic; otherwise the first append,
    /// `booted`, waited ~15 ms for the producer's connection and metadata,
    /// on every boot), and the consumer learns both topics as it connects
    /// (`Kafka::_topics`).
    pub(crate) async fn open(&self, patience: Duration) -> Result<(), OpenError> {
        let principal = crate::kafka::topics::principal(&self.props);
        // The claims topic and every orders topic (R57), in one request.
        let names: Vec<String> = std::iter::once(self.claims_topic.clone())
            .chain(self.orders.names().iter().cloned())
            .collect();
        let (counts, warning) = tokio::try_join!(
            partitions(self.producer(), names, self.props.clone(), patience),
            async {
                let Some(admin_config) = &self.admin_config else {
                    return Ok(None);
                };
                // Asked beside the metadata, so that it adds no wait to boot.
                let producer = self.producer();
                let cluster = blocking(move || producer.client().fetch_cluster_id(REQUEST_TIMEOUT))
                    .await
                    .ok()
                    .flatten();
                crate::kafka::topics::check_compaction(
                    admin_config,
                    cluster.as_deref(),
                    &self.claims_topic,
                    &principal,
                )
                .await
                .map_err(OpenError::from)
            },
        )?;
        let (n, orders) = match counts.split_first() {
            Some((n, rest)) => (*n, rest.to_vec()),
            None => (0, Vec::new()),
        };
        crate::kafka::topics::one_partition(&self.claims_topic, n)?;
        // The orders topics' partitions (Kafka numbers them 0..n), just
        // asked: [`Kafka::order_ends`] reuses them for PARTITIONS_REFRESH
        // instead of asking again, on every boot (issue 35).
        let lanes: Vec<Lane> = self
            .orders
            .topics()
            .into_iter()
            .zip(orders)
            .flat_map(|(t, n)| (0..n).map(move |p| Lane::new(t, p)))
            .collect();
        if !crate::record::frontier_fits(&lanes) {
            return Err(crate::kafka::topics::TopicProblem::TooManyPartitions {
                topics: self.orders.names().join(","),
                lanes: lanes.len(),
                max: crate::record::MAX_FRONTIER_BYTES,
            }
            .into());
        }
        if let Ok(mut c) = self.order_partitions.lock() {
            *c = Some((std::time::Instant::now(), lanes.clone()));
        }
        self.gate.saw_partitions(lanes);
        if let Some(w) = warning {
            tracing::warn!(instance = self.instance, "{w}");
        }
        Ok(())
    }

    /// Starts reading the claims topic at `pos` (0: from its beginning), on
    /// the reader thread ([`read_topics`]), which also reads the orders
    /// partitions from then on. Once only. Returns whether the claims
    /// partition was sought there (not when the checkpoint search already
    /// read from there on: [`ClaimsReader::start_at`]).
    pub(crate) async fn read_claims_from(&'static self, pos: u64) -> anyhow::Result<bool> {
        let claims = self.claims.clone();
        let sought = blocking(move || claims.start_at(pos)).await??;
        if let Some(tx) = self.claims_tx.lock().ok().and_then(|mut t| t.take()) {
            std::thread::Builder::new()
                .name("kafka-reader".into())
                .spawn(move || read_topics(self, &tx))
                .context("cannot start the Kafka reader thread")?;
        }
        Ok(sought)
    }

    /// The newest checkpoint near the end of the claims topic
    /// (src/checkpoint.rs): the last
    /// [`crate::kafka::claims_reader::CHECKPOINT_NEAR`] positions are
    /// read, and only if they hold none the rest of the last
    /// [`CHECKPOINT_WINDOW`] ([`ClaimsReader::find_checkpoint`]). `None`
    /// when the log is shorter than what was read (replaying it all costs
    /// no more) or holds no checkpoint there; boot then replays from the
    /// beginning.
    pub(crate) async fn find_checkpoint(&self) -> Option<Snapshot> {
        let (claims, max_age) = (self.claims.clone(), self.checkpoint_max_age_ms);
        blocking(move || claims.find_checkpoint(CHECKPOINT_WINDOW, u64::MAX, max_age))
            .await
            .ok()
            .flatten()
    }

    /// Fences every older process of this instance (docs/protocol.md R16):
    /// `init_transactions` with the instance's `transactional.id` bumps its
    /// epoch, aborts the transaction a dead predecessor left open and makes
    /// the brokers refuse whatever it still sends. Retried until it
    /// succeeds; `Err` when this process is the one fenced (a newer process
    /// of the number initialised meanwhile) or the producer failed for good
    /// (the id not authorised, for one). A no-op without transactions.
    pub(crate) async fn fence(&self) -> Result<(), Stopped> {
        if !self.transactional {
            return Ok(());
        }
        self.init_producer(|| self.producer()).await
    }

    /// R16 under `supervise` with standbys ([`TxnSlot`]): fences the
    /// instance's other transactional id, the one this process does not
    /// write under, with a producer made for it: a plain start's, whose
    /// instance's processes may have written under either, and a standby's
    /// whose predecessor did not say `done` (it may have died inside a
    /// transaction). That producer writes nothing and stays, idle, until
    /// the process exits (destroying it would take hundreds of
    /// milliseconds). Without the other id, nothing to do.
    pub(crate) async fn fence_other(&self) -> Result<(), Stopped> {
        let Some(id) = &self.other_txn_id else {
            return Ok(());
        };
        let mut pc = self.producer_config.clone();
        pc.set("transactional.id", id);
        let p: Arc<BaseProducer<Quiet>> = match pc.create_with_context(Quiet) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                tracing::error!(instance = self.instance, error = %e, "cannot create a producer to fence the instance's other transactional id");
                return Err(Stopped::Failed);
            }
        };
        let r = self.init_producer(|| p.clone()).await;
        std::mem::forget(p);
        r
    }

    /// `init_transactions` on the producer `producer` gives, retried until
    /// it succeeds or the producer stops for good.
    async fn init_producer(
        &self,
        producer: impl Fn() -> Arc<BaseProducer<Quiet>>,
    ) -> Result<(), Stopped> {
        let mut backoff = backoff::REQUEST;
        let mut quick = true;
        loop {
            let p = producer();
            let r = if std::mem::take(&mut quick) {
                blocking(move || Kafka::init_quickly(&p)).await
            } else {
                blocking(move || p.init_transactions(Duration::from_secs(30))).await
            };
            match r {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => {
                    if let Some(stop) = txn_error(&e).and_then(stopped_by) {
                        tracing::error!(instance = self.instance, error = %e, "cannot fence the instance's previous processes (init_transactions)");
                        return Err(stop);
                    }
                    tracing::warn!(instance = self.instance, error = %e, "fencing the instance's previous processes (init_transactions) failed; retrying in {:?}", backoff.peek());
                }
                Err(e) => {
                    tracing::warn!(instance = self.instance, error = %e, "fencing failed; retrying")
                }
            }
            backoff.wait().await;
        }
    }

    /// How often [`Kafka::init_quickly`] asks again while the coordinator
    /// finishes a dead predecessor's transaction (instead of librdkafka's
    /// 500 ms).
    const FENCE_STEP: Duration = Duration::from_millis(10);

    /// How long [`Kafka::init_quickly`] asks at that pace: far more than a
    /// coordinator takes to abort a transaction; past it, librdkafka's pace.
    const FENCE_QUICK: Duration = Duration::from_secs(2);

    /// `init_transactions`, asked again every [`Self::FENCE_STEP`] for up to
    /// [`Self::FENCE_QUICK`]; then the caller's long call (issue 26).
    ///
    /// Why: when the predecessor was killed inside a transaction, or its
    /// last commit's markers are still being written, the coordinator
    /// answers InitProducerId with CONCURRENT_TRANSACTIONS while it aborts
    /// (completes) that transaction, which takes it milliseconds; librdkafka
    /// asks again only when a fixed 500 ms timer fires
    /// (`rd_kafka_idemp_request_pid_failed` → `rd_kafka_idemp_pid_timer_restart`,
    /// not configurable): the fence took 500 ms after most crashes.
    ///
    /// How: `init_transactions` is resumable. A call that times out returns
    /// a retriable `__TIMED_OUT` and leaves the initialisation going on; the
    /// next call resumes it, and on the way (`rd_kafka_txn_op_init_transactions`
    /// → `rd_kafka_idemp_start(rk, immediate)`) restarts that timer to fire
    /// at once.
    ///
    /// Why it is safe: it is still one producer, whose PID state machine
    /// runs on librdkafka's main thread, and the resumed call sends no
    /// request beside an outstanding one: `rd_kafka_idemp_start` leaves the
    /// state `WAIT_PID` (InitProducerId sent, not answered) as it is and the
    /// timer's `rd_kafka_idemp_pid_fsm` does nothing in it; only in
    /// `REQ_PID` (the answer was an error, the timer is waiting) does it
    /// send the next request, now instead of in 500 ms (a coordinator
    /// lookup under way is not doubled either: `txn_wait_coord`). The
    /// requests are librdkafka's own sequence, one at a time, only sooner;
    /// the epoch they end with is this producer's, and no other producer of
    /// this process holds the `transactional.id` that could bump it later.
    /// (Not chosen for that reason: dropping a producer that waits on its
    /// timer and initialising a fresh one. A request of the dropped one
    /// still on its way could be handled after the fresh one's and fence
    /// it.) Cost: at most one InitProducerId per step while the
    /// coordinator is busy with the old transaction; nothing while a
    /// request is outstanding, and a call returns as soon as the PID is
    /// assigned.
    fn init_quickly(p: &BaseProducer<Quiet>) -> rdkafka::error::KafkaResult<()> {
        let start = std::time::Instant::now();
        loop {
            match p.init_transactions(Self::FENCE_STEP) {
                Err(e)
                    if start.elapsed() < Self::FENCE_QUICK
                        && txn_error(&e).is_some_and(|t| t.is_retriable()) => {}
                r => return r,
            }
        }
    }

    /// Produces records as [`Kafka::send`] does; with transactions, in one
    /// transaction of their own, committed before this returns (readers see
    /// the records only then, all of them). The outer `Err`: the producer
    /// stopped for good ([`Stopped`]); the inner one: the records were not
    /// written (their transaction aborted) and may be sent again.
    ///
    /// A producer that fails for good without being fenced is replaced
    /// ([`Kafka::renew`]), and the record reported not written.
    async fn produce(
        &self,
        topic: &str,
        partition: Option<i32>,
        items: &[Item<'_>],
    ) -> Result<Result<Vec<i64>, KafkaError>, Stopped> {
        match self.produce_once(topic, partition, items).await {
            Err(Stopped::Failed) => {
                self.renew().await?;
                Ok(Err(KafkaError::Canceled))
            }
            r => r,
        }
    }

    /// [`Kafka::produce`] with the current producer.
    async fn produce_once(
        &self,
        topic: &str,
        partition: Option<i32>,
        items: &[Item<'_>],
    ) -> Result<Result<Vec<i64>, KafkaError>, Stopped> {
        let producer = self.producer();
        if !self.transactional {
            return Ok(self.send(&producer, topic, partition, items).await);
        }
        if let Err(e) = producer.begin_transaction() {
            if let Some(stop) = txn_error(&e).and_then(stopped_by) {
                return Err(stop);
            }
            // An earlier transaction left in a state that needs an abort.
            self.abort().await?;
            return Ok(Err(e));
        }
        let sent = self.send(&producer, topic, partition, items).await;
        let offsets = match sent {
            Ok(o) => o,
            Err(e) => {
                self.abort().await?;
                return Ok(Err(e));
            }
        };
        loop {
            let p = producer.clone();
            let r = blocking(move || {
                settle_reports(&p);
                p.commit_transaction(Duration::from_secs(30))
            })
            .await;
            let e = match r {
                Ok(Ok(())) => return Ok(Ok(offsets)),
                Ok(Err(e)) => e,
                Err(_) => KafkaError::Canceled,
            };
            let t = txn_error(&e);
            if let Some(stop) = t.and_then(stopped_by) {
                return Err(stop);
            }
            if t.is_some_and(|t| t.is_retriable()) {
                continue;
            }
            // Abortable (or anything else): abort, and the caller appends
            // again.
            self.abort().await?;
            return Ok(Err(e));
        }
    }

    /// Aborts the open transaction (retried while retriable).
    async fn abort(&self) -> Result<(), Stopped> {
        for _ in 0..100 {
            let p = self.producer();
            let r = blocking(move || p.abort_transaction(Duration::from_secs(30))).await;
            match r {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => {
                    let t = txn_error(&e);
                    if let Some(stop) = t.and_then(stopped_by) {
                        return Err(stop);
                    }
                    if !t.is_some_and(|t| t.is_retriable()) {
                        // No transaction to abort (its state says so).
                        return Ok(());
                    }
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Stopped::Failed)
    }

    /// Ends the transaction this process may still have open when it stops
    /// before its appends are acknowledged (a signal, the brokers slow):
    /// aborts it, waiting at most `limit`, so that it does not hold back
    /// every read_committed reader of the claims topic until
    /// `transaction.timeout.ms`. Its record never lands (R16 allows either).
    /// Nothing to do without transactions or with none open; an abort that
    /// fails (a commit under way on the appender's thread, the coordinator
    /// unreachable) leaves the transaction to the broker's timeout or the
    /// next process's fence.
    pub(crate) async fn abort_open(&self, limit: Duration) {
        if !self.transactional {
            return;
        }
        let p = self.producer();
        let r = tokio::time::timeout(limit, blocking(move || p.abort_transaction(limit))).await;
        if let Ok(Ok(Ok(()))) = r {
            tracing::info!(
                instance = self.instance,
                "aborted the transaction of an append in flight"
            );
        }
    }

    /// Appends records to the claims topic, in one transaction and in
    /// order (one record, or a last `completed` and its heir's `booted`:
    /// docs/protocol.md R16); retries until the broker acknowledges them.
    /// Returns their positions, or `None` for a checkpoint the
    /// broker refuses as too large even without its order ids (checkpoints
    /// are advisory). Every other record is a few hundred bytes once
    /// shortened; a broker that refuses even that (a claims topic with an
    /// absurd `max.message.bytes`) is retried with an error each time.
    ///
    /// A record the broker refuses as too large (a claims topic whose
    /// `max.message.bytes` is below [`crate::record::RECORD_LIMIT`]) is
    /// shortened ([`Record::shrink`]) and sent again: never the same bytes
    /// forever.
    pub(crate) async fn append_all(&self, recs: &[Record]) -> Result<Option<Vec<u64>>, Stopped> {
        let keys: Vec<String> = recs.iter().map(Record::key).collect();
        let mut recs: Vec<std::borrow::Cow<Record>> =
            recs.iter().map(std::borrow::Cow::Borrowed).collect();
        let mut backoff = backoff::APPEND;
        loop {
            let values: Vec<Vec<u8>> = recs.iter().map(|r| r.encode()).collect();
            let sigs: Vec<Option<String>> = values.iter().map(|v| self.gate.sign(v)).collect();
            let items: Vec<Item> = keys
                .iter()
                .zip(&values)
                .zip(&sigs)
                .map(|((k, v), s)| (k.as_str(), v.as_slice(), s.as_deref()))
                .collect();
            let bytes: usize = values.iter().map(Vec::len).sum();
            let key = keys.join(",");
            match self.produce(&self.claims_topic, Some(0), &items).await? {
                Ok(offsets) => {
                    return Ok(Some(offsets.iter().map(|o| (*o).max(0) as u64).collect()))
                }
                Err(e) if too_large(&e) && recs.iter_mut().any(|r| r.to_mut().shrink()) => {
                    tracing::warn!(instance = self.instance, key, bytes, "the broker refuses this record as too large (check the claims topic's max.message.bytes); shortened");
                }
                Err(e)
                    if too_large(&e)
                        && recs.len() == 1
                        && recs[0].event() == crate::record::Event::Checkpoint =>
                {
                    tracing::warn!(instance = self.instance, key, bytes, "the broker refuses this checkpoint as too large; not written (boot reads further back)");
                    return Ok(None);
                }
                Err(e)
                    if e.rdkafka_error_code()
                        .is_some_and(crate::kafka::topics::is_authorization) =>
                {
                    // No ACL lets this principal write the claims topic:
                    // nothing was written, and asking again changes nothing.
                    // The operator's to fix (exit 2: not restarted in a loop).
                    let problem = crate::kafka::topics::TopicProblem::NotAuthorized {
                        topic: self.claims_topic.clone(),
                        operation: "write",
                        principal: crate::kafka::topics::principal(&self.props),
                    };
                    tracing::error!(instance = self.instance, "pool_worker: {problem}");
                    crate::process_exit::exit_now(crate::process_exit::Exit::Config);
                }
                Err(e) => {
                    // Not assumed written, not assumed lost: append again; a
                    // second copy is dropped by readers (same seq).
                    tracing::warn!(instance = self.instance, key, error = %e, "append failed; retrying in {:?}", backoff.peek());
                    backoff.wait().await;
                }
            }
        }
    }

    /// Produces records, in order, and waits for the broker's
    /// acknowledgment of each (or the failure librdkafka reports at the
    /// latest after `message.timeout.ms`); their offsets.
    async fn send(
        &self,
        producer: &BaseProducer<Quiet>,
        topic: &str,
        partition: Option<i32>,
        items: &[Item<'_>],
    ) -> Result<Vec<i64>, KafkaError> {
        let mut reports = Vec::with_capacity(items.len());
        for &(key, value, sig) in items {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let mut report = Box::new(tx);
            loop {
                let mut rec = BaseRecord::with_opaque_to(topic, report)
                    .key(key)
                    .payload(value);
                if let Some(p) = partition {
                    rec = rec.partition(p);
                }
                if let Some(sig) = sig {
                    let h = rdkafka::message::Header {
                        key: crate::sign::HEADER,
                        value: Some(sig.as_bytes()),
                    };
                    rec = rec.headers(rdkafka::message::OwnedHeaders::new().insert(h));
                }
                let full = match producer.send(rec) {
                    Ok(()) => None,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), rec)) => {
                        Some(rec.delivery_opaque)
                    }
                    Err((e, _)) => return Err(e),
                };
                match full {
                    None => break,
                    Some(r) => {
                        report = r;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            reports.push(rx);
        }
        let mut offsets = Vec::with_capacity(reports.len());
        for rx in reports {
            // message.timeout.ms (10 s) bounds the report; the margin is for
            // a busy machine.
            match tokio::time::timeout(Duration::from_secs(30), rx).await {
                Ok(Ok(r)) => offsets.push(r?),
                _ => return Err(KafkaError::Canceled),
            }
        }
        Ok(offsets)
    }

    /// Publishes a completion's result to the results topic, if there is
    /// one (seed 000's result publication): key `PARTITION:OFFSET`, value the
    /// order, instance, attempt and outcome. The machine asks for it
    /// (`Action::PublishResult`) *before* the `completed` record is appended,
    /// so a crash in between publishes the result again rather than never:
    /// subscribers see each result at least once, keyed by order. A result
    /// the broker refuses as too large is shortened, like a record.
    pub(crate) async fn publish_result(
        &self,
        mut msg: crate::record::ResultMessage,
    ) -> Result<(), Stopped> {
        let Some(topic) = &self.results_topic else {
            return Ok(());
        };
        let mut backoff = backoff::APPEND;
        loop {
            let value = with_main_topic(msg.value(), self.orders.main_name());
            match self
                .produce(topic, None, &[(&msg.key, value.as_bytes(), None)])
                .await?
            {
                Ok(_) => return Ok(()),
                Err(e) if too_large(&e) => {
                    if !msg.shrink() {
                        tracing::error!(
                            instance = self.instance,
                            topic,
                            bytes = value.len(),
                            "the broker refuses this result as too large; not published"
                        );
                        return Ok(());
                    }
                    tracing::warn!(
                        instance = self.instance,
                        topic,
                        bytes = value.len(),
                        "the broker refuses this result as too large; shortened"
                    );
                }
                Err(e) => {
                    tracing::warn!(instance = self.instance, topic, error = %e, "publishing the result failed; retrying in {:?}", backoff.peek());
                    backoff.wait().await;
                }
            }
        }
    }

    /// The next event of the claims topic. Cancel-safe: an event received
    /// is kept until it is returned.
    pub(crate) async fn next_claim(&self) -> ClaimEvent {
        let mut q = self.claims_rx.lock().await;
        loop {
            if let Some(ev) = q.buf.pop_front() {
                return ev;
            }
            match q.rx.recv().await {
                Some(batch) => q.buf.extend(batch),
                // The reader thread ended (it does not, while `self` lives).
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// The next event of the claims topic if one is already here, without
    /// waiting: the worker loop folds a whole batch without going back to
    /// its `select!` for each record.
    pub(crate) fn try_next_claim(&self) -> Option<ClaimEvent> {
        let mut q = self.claims_rx.try_lock().ok()?;
        if let Some(ev) = q.buf.pop_front() {
            return Some(ev);
        }
        let batch = q.rx.try_recv().ok()?;
        q.buf.extend(batch);
        q.buf.pop_front()
    }

    /// The end offset (high watermark) of every partition of every orders
    /// topic (R57).
    pub(crate) async fn order_ends(&self) -> BTreeMap<Lane, i64> {
        let mut backoff = backoff::REQUEST;
        loop {
            let asked = std::time::Instant::now();
            let meta = self.producer();
            let orders = self.orders.clone();
            let cache = self.order_partitions.clone();
            let r = blocking(move || -> Result<BTreeMap<Lane, i64>, KafkaError> {
                // The partition list (a metadata request) at most every
                // PARTITIONS_REFRESH (one per orders topic); then the
                // partitions' ends, of every topic at once, one ListOffsets
                // request per leader (`lane_ends`).
                let cached = cache
                    .lock()
                    .ok()
                    .and_then(|c| c.clone())
                    .filter(|(at, parts)| at.elapsed() < PARTITIONS_REFRESH && !parts.is_empty())
                    .map(|(_, parts)| parts);
                let parts = match cached {
                    Some(parts) => parts,
                    None => {
                        let mut parts = Vec::new();
                        for (t, name) in orders.iter() {
                            parts.extend(
                                partitions_now(&*meta, name)?
                                    .into_iter()
                                    .map(|p| Lane::new(t, p)),
                            );
                        }
                        // Partitions added since boot beyond what a
                        // record's frontier can carry are not read: the
                        // most that fit, topic by topic, partition by
                        // partition (the boot refused more than fit).
                        while !crate::record::frontier_fits(&parts) {
                            tracing::error!(
                                lanes = parts.len(),
                                "the orders topics have more partitions than a claims record's \
                                 frontier can carry; the last ones are not read"
                            );
                            parts.truncate(parts.len() * 9 / 10);
                        }
                        if let Ok(mut c) = cache.lock() {
                            *c = Some((std::time::Instant::now(), parts.clone()));
                        }
                        parts
                    }
                };
                lane_ends(&*meta, &orders, &parts, REQUEST_TIMEOUT)
            })
            .await;
            if !matches!(r, Ok(Ok(_))) {
                // Ask for the partitions again next time.
                if let Ok(mut c) = self.order_partitions.lock() {
                    *c = None;
                }
            }
            match r {
                Ok(Ok(ends)) if !ends.is_empty() => {
                    self.gate.saw_ends_asked(&ends, asked);
                    return ends;
                }
                Ok(Ok(_)) => tracing::warn!("the orders topic has no partitions yet"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot read the orders topic's end offsets")
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the orders topic's end offsets"),
            }
            backoff.wait().await;
        }
    }

    /// Reads the orders partitions from the given offsets, so that
    /// [`Kafka::order_arrived`] wakes when a new order comes.
    pub(crate) async fn watch_orders(
        &'static self,
        from: BTreeMap<Lane, i64>,
    ) -> anyhow::Result<()> {
        // Messages read before this do not wake the watch.
        self.arrivals_seen.store(
            *self.arrivals.borrow(),
            std::sync::atomic::Ordering::Relaxed,
        );
        // Off the async threads: a seek waits until the consumer has
        // dropped what it fetched before.
        blocking(move || self.read_orders_at(&from))
            .await?
            .context("cannot read the orders topic")
    }

    /// Points the consumer's orders partitions at `from` and fetches them,
    /// pausing the other orders partitions it has. A partition new to the
    /// consumer is started there (the claims partition stays as it is); one
    /// it has is resumed and then sought, which drops whatever was fetched
    /// before (and waits until it is dropped).
    fn read_orders_at(&self, from: &BTreeMap<Lane, i64>) -> anyhow::Result<()> {
        let mut st = self
            .orders_assigned
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let tpl = |parts: &mut dyn Iterator<Item = (Lane, Offset)>| -> Result<TopicPartitionList, KafkaError> {
            let mut tpl = TopicPartitionList::new();
            for (l, o) in parts {
                if let Some((topic, p)) = self.orders.kafka_lane(l) {
                    tpl.add_partition_offset(topic, p, o)?;
                }
            }
            Ok(tpl)
        };
        let others: Vec<Lane> = st
            .fetching
            .iter()
            .copied()
            .filter(|p| !from.contains_key(p))
            .collect();
        if !others.is_empty() {
            self.consumer
                .pause(&tpl(&mut others.iter().map(|&p| (p, Offset::Invalid)))?)?;
            for p in others {
                st.fetching.remove(&p);
            }
        }
        let (known, new): (Vec<_>, Vec<_>) =
            from.iter().partition(|(p, _)| st.assigned.contains(p));
        if !known.is_empty() {
            // Resumed first, then sought, as the claims partition is at a
            // standby's `go` ([`ClaimsReader::resume_where_read`]): a
            // resume does not wake the consumer's broker thread, asleep
            // for up to a second when it had nothing to fetch, and the
            // seek's return to an active fetch state does only when it
            // comes after the resume. Whatever is fetched between the two
            // is dropped by the seek.
            let paused: Vec<_> = known
                .iter()
                .map(|(&p, _)| p)
                .filter(|p| !st.fetching.contains(p))
                .collect();
            if !paused.is_empty() {
                self.consumer
                    .resume(&tpl(&mut paused.iter().map(|&p| (p, Offset::Invalid)))?)?;
                st.fetching.extend(paused);
            }
            let sought = self.consumer.seek_partitions(
                tpl(&mut known.iter().map(|(&p, &o)| (p, Offset::Offset(o))))?,
                REQUEST_TIMEOUT,
            )?;
            if let Some(e) = sought.elements().iter().find_map(|e| e.error().err()) {
                return Err(e.into());
            }
        }
        for (&l, &o) in &new {
            if let Some((topic, p)) = self.orders.kafka_lane(l) {
                start_fetching(&self.consumer, topic, p, o, FetchInto::MainQueue)?;
            }
            st.assigned.insert(l);
        }
        st.fetching.extend(from.keys());
        Ok(())
    }

    /// [`ClaimsPause`]'s state, whatever a thread that held it left.
    fn pause_state(&self) -> std::sync::MutexGuard<'_, ClaimsPause> {
        self.pause.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reader thread at the end of the log: a look is over, and a
    /// standby before its `go` stops fetching ([`ClaimsPause`]). If it cannot
    /// pause, it reads on: that costs only the fetches.
    fn at_end_of_log(&self) {
        let mut q = self.pause_state();
        q.looking = false;
        if !q.standby || q.paused {
            return;
        }
        match self.claims.pause() {
            Ok(()) => {
                q.paused = true;
                crate::account::mark("paused");
                tracing::debug!(
                    instance = self.instance,
                    "standby caught up: the claims topic is paused until go"
                );
            }
            Err(e) => {
                q.standby = false;
                tracing::debug!(instance = self.instance, error = %e, "standby: cannot pause the claims topic");
            }
        }
    }

    /// A standby's `go`: it reads the claims topic again, for good, from
    /// the position after the last record it read (what the pool wrote
    /// since it caught up is read now, while its fence runs). Under
    /// [`ClaimsPause`]'s lock, so that it cannot cross the reader thread's pause;
    /// a failed resume is tried again at the reader's next round.
    pub(crate) async fn standby_go(&'static self) {
        let r = blocking(move || {
            let mut q = self.pause_state();
            let paused = q.standby && q.paused;
            q.standby = false;
            q.peek = false;
            if !paused {
                return Ok(());
            }
            let next = self.claims.resume_where_read()?;
            q.paused = false;
            crate::account::mark_with("resumed", || next.to_string());
            Ok::<_, anyhow::Error>(())
        })
        .await;
        if let Err(e) = r.and_then(|r| r) {
            tracing::warn!(instance = self.instance, error = %format!("{e:#}"), "standby: cannot read the claims topic again where it stopped");
        }
    }

    /// The shell's wish for quiet ([`ClaimsPause`]): `true` while its job runs and
    /// every record it appended is read back. Either way the reader thread
    /// is woken to pause, or to read again where it stopped.
    pub(crate) fn hush(&self, quiet: bool) {
        self.pause_state().want = quiet;
        self.wake.ring();
    }

    /// One look at the log while quiet ([`ClaimsPause::peek`]): what was written
    /// since the pause is read (an operator's cancel, say), then quiet again.
    pub(crate) fn peek(&self) {
        let mut q = self.pause_state();
        if q.paused && !q.standby {
            q.peek = true;
            drop(q);
            self.wake.ring();
        }
    }

    /// The reader thread, before each round: pauses the claims partition if
    /// the shell wants quiet (and no look is under way), or resumes it where
    /// it stopped if the shell no longer does, or asked for a look; never
    /// before a standby's `go`, whose pause [`Kafka::standby_go`] ends. A
    /// failed resume (`go`'s too) is tried again the next round.
    fn hush_round(&self) {
        let mut q = self.pause_state();
        if q.paused {
            if q.standby || (q.want && !q.peek) {
                return;
            }
            match self.claims.resume_where_read() {
                Ok(next) => {
                    q.paused = false;
                    q.looking = q.want;
                    q.peek = false;
                    crate::account::mark_with("unhushed", || next.to_string());
                }
                Err(e) => {
                    tracing::warn!(instance = self.instance, error = %format!("{e:#}"), "cannot read the claims topic again where it stopped")
                }
            }
        } else if q.want && !q.looking && !q.standby {
            match self.claims.pause() {
                Ok(()) => {
                    q.paused = true;
                    crate::account::mark("hushed");
                }
                // Reading on costs only the fetches.
                Err(e) => {
                    q.looking = true;
                    tracing::debug!(instance = self.instance, error = %e, "cannot pause the claims topic while the job runs")
                }
            }
        }
    }

    /// Stops fetching the orders partitions (paused, not unassigned: see
    /// [`OrdersAssigned`]). While a worker negotiates and runs an order it
    /// has no use for them, and a fetching partition keeps a fetch waiting
    /// at the broker.
    fn pause_orders(&self) {
        let mut st = self
            .orders_assigned
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if st.fetching.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for &l in &st.fetching {
            if let Some((topic, p)) = self.orders.kafka_lane(l) {
                let _ = tpl.add_partition_offset(topic, p, Offset::Invalid);
            }
        }
        match self.consumer.pause(&tpl) {
            Ok(()) => st.fetching.clear(),
            Err(e) => tracing::debug!(error = %e, "pausing the orders topic"),
        }
    }

    /// The orders' ends asked of the brokers less than `within` ago (by a
    /// boot, or by the [`Gate`] for a record naming a new order), raised to
    /// the orders read since, and when they were asked; `None` if there are
    /// none that recent, or they miss a partition.
    pub(crate) fn recent_order_ends(
        &self,
        within: Duration,
    ) -> Option<(std::time::Instant, BTreeMap<Lane, i64>)> {
        self.gate.recent_ends(within)
    }

    /// Raises `ends` (orders' end offsets asked earlier) to what the orders
    /// messages read since show: a message at offset `o` means its
    /// partition ends past `o` ([`Kafka::order_message`] notes it for the
    /// [`Gate`]). An idle worker woken by an order's arrival learns the new
    /// end so, not with a ListOffsets request (one per idle instance and
    /// arrival; issue 35).
    pub(crate) fn raise_to_read(&self, ends: &mut BTreeMap<Lane, i64>) {
        self.gate.raise(ends);
    }

    /// Waits until a message arrives on a watched orders partition.
    /// Cancel-safe: a message read while nobody waited wakes the next wait.
    pub(crate) async fn order_arrived(&self) {
        use std::sync::atomic::Ordering;
        let mut rx = self.arrivals.subscribe();
        loop {
            let n = *rx.borrow_and_update();
            if n > self.arrivals_seen.load(Ordering::Relaxed) {
                self.arrivals_seen.store(n, Ordering::Relaxed);
                return;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// An orders message, as the reader thread reads it: checked against
    /// its partition's watermark, its end noted for the [`Gate`], and kept:
    /// for [`Kafka::fetch_order`] if it is the order it waits for, else
    /// among the [`Payloads`] (the next order this worker claims is often
    /// one already read); then [`Kafka::order_arrived`] is woken.
    fn order_message(&self, lane: Lane, m: &impl Message) {
        let offset = m.offset();
        self.check_order_watermark(lane, offset);
        self.gate.saw_ends(&BTreeMap::from([(lane, offset + 1)]));
        let msg = OrderMessage::of(m);
        let msg = {
            let mut w = self.wanted.lock().unwrap_or_else(|p| p.into_inner());
            match w.order {
                Some(o) if o.lane() == lane && o.offset == offset => {
                    w.got = Some(msg);
                    None
                }
                Some(o) if o.lane() == lane && o.offset < offset && w.got.is_none() => {
                    w.passed = true;
                    Some(msg)
                }
                _ => Some(msg),
            }
        };
        if let Some(msg) = msg {
            if let Ok(mut c) = self.payloads.lock() {
                c.put(lane.at(offset), msg);
            }
        }
        self.arrivals.send_modify(|n| *n += 1);
    }

    /// An order message read at `offset` of `partition`, checked against
    /// the partition's high watermark ([`crate::kafka::topics::check_watermark`]):
    /// the pool learns which orders exist from the orders' ends, so a broker
    /// whose watermarks do not count records would leave orders waiting
    /// forever (issue 25 §4: tansu 0.6 said 1 after 5 records). Exits 2.
    fn check_order_watermark(&self, lane: Lane, offset: i64) {
        let Some((topic, partition)) = self.orders.kafka_lane(lane) else {
            return;
        };
        let ask = || {
            self.producer()
                .ask_ends(topic, &[partition], REQUEST_TIMEOUT)
                .ok()
                .and_then(|ends| ends.get(&partition).copied())
        };
        if let Err(p) = crate::kafka::topics::check_watermark(
            self.consumer.client(),
            topic,
            partition,
            offset,
            ask,
        ) {
            broken(self.instance, &p);
        }
    }

    /// The message of one order (its payload `None` for a message without
    /// payload). [`Unreadable::Deleted`] at once when the order is below its
    /// partition's log start (the broker deleted it: retention,
    /// DeleteRecords).
    pub(crate) async fn fetch_order(
        &'static self,
        order: OrderId,
    ) -> Result<OrderMessage, Unreadable> {
        if let Some(p) = self.payloads.lock().ok().and_then(|mut c| c.take(order)) {
            // Read already (by the idle watch, or before the claim): the
            // orders partitions stop here too. Left fetching, they kept a
            // fetch waiting at the broker all through the job, answered
            // empty every `fetch.wait.max.ms`, and a quiet reader's resume
            // at the job's end waited behind it (bench/RESULTS.md, issue 35).
            self.pause_orders();
            return Ok(p);
        }
        let r = self.fetch_order_read(order).await;
        *self.wanted.lock().unwrap_or_else(|p| p.into_inner()) = Wanted::default();
        // Stop fetching orders until the next wait for one (watch_orders).
        self.pause_orders();
        r
    }

    /// Keeps an order's message for the next [`Kafka::fetch_order`] of it
    /// (read before its claim: `Action::Peek`).
    pub(crate) fn keep_order(&self, order: OrderId, m: OrderMessage) {
        if let Ok(mut c) = self.payloads.lock() {
            c.put(order, m);
        }
    }

    /// The first offset still in an orders partition (its log start), if
    /// the broker says.
    async fn log_start(&self, lane: Lane) -> Option<i64> {
        let (topic, partition) = self.orders.kafka_lane(lane)?;
        let (meta, topic) = (self.producer(), topic.to_string());
        blocking(move || {
            meta.ask_watermarks(&topic, partition, REQUEST_TIMEOUT)
                .ok()
                .map(|(low, _)| low)
        })
        .await
        .ok()
        .flatten()
    }

    /// [`Unreadable::Deleted`] if `order` is below its partition's log start.
    async fn deleted(&self, order: OrderId) -> Option<Unreadable> {
        let log_start = self.log_start(order.lane()).await?;
        (order.offset < log_start).then_some(Unreadable::Deleted { log_start })
    }

    /// Reads the order's partition from the order on (the reader thread
    /// hands the order over: [`Kafka::order_message`]) and waits for it.
    async fn fetch_order_read(&'static self, order: OrderId) -> Result<OrderMessage, Unreadable> {
        *self.wanted.lock().unwrap_or_else(|p| p.into_inner()) = Wanted {
            order: Some(order),
            ..Wanted::default()
        };
        let from = BTreeMap::from([(order.lane(), order.offset)]);
        let mut rx = self.arrivals.subscribe();
        match blocking(move || self.read_orders_at(&from)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(Unreadable::Failed(format!(
                    "cannot read the orders topic: {e:#}"
                )))
            }
            Err(e) => {
                return Err(Unreadable::Failed(format!(
                    "cannot read the orders topic: {e:#}"
                )))
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let (got, passed) = {
                let mut w = self.wanted.lock().unwrap_or_else(|p| p.into_inner());
                (w.got.take(), std::mem::take(&mut w.passed))
            };
            if let Some(m) = got {
                return Ok(m);
            }
            // An order the broker deleted never arrives: the consumer
            // starts again at the log start, past it, or (everything after
            // it deleted too) waits for new orders. A later message of its
            // partition instead of it, or a quiet spell, makes us look at
            // the log start.
            if passed {
                return Err(self.deleted(order).await.unwrap_or_else(|| {
                    Unreadable::Failed(format!(
                        "order {order} is no longer in the orders topic: its consumer skipped to a later offset"
                    ))
                }));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(Unreadable::Failed(format!(
                    "order {order} could not be read from the orders topic in 120 s"
                )));
            }
            match tokio::time::timeout(left.min(DELETED_CHECK), rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return std::future::pending().await,
                Err(_) => {
                    if let Some(d) = self.deleted(order).await {
                        return Err(d);
                    }
                }
            }
        }
    }
}

/// One record to produce: key, value and signature (the `pool-sig`
/// header, docs/protocol.md R5).
type Item<'a> = (&'a str, &'a [u8], Option<&'a str>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_names_the_main_topic() {
        assert_eq!(
            with_main_topic(r#"{"order":"0:1","topic":null}"#.into(), "work"),
            r#"{"order":"0:1","topic":"work"}"#
        );
        let named = r#"{"order":"urgent:0:1","topic":"urgent"}"#;
        assert_eq!(with_main_topic(named.into(), "work"), named);
    }

    #[test]
    fn payloads_are_taken_once_and_older_ones_forgotten() {
        let msg = |p: Option<&[u8]>| OrderMessage {
            payload: p.map(<[u8]>::to_vec),
            traceparent: None,
        };
        let mut c = Payloads::default();
        c.put(OrderId::new(0, 5), msg(Some(b"five")));
        c.put(OrderId::new(0, 6), msg(None));
        c.put(
            OrderId::new(0, 7),
            OrderMessage {
                traceparent: Some("tp".into()),
                ..msg(Some(b"seven"))
            },
        );
        c.put(OrderId::new(1, 1), msg(Some(b"one")));
        assert_eq!(c.bytes, 14);
        assert_eq!(
            c.take(OrderId::new(0, 6)),
            Some(msg(None)),
            "a message without payload"
        );
        assert_eq!(
            c.take(OrderId::new(0, 5)),
            None,
            "forgotten: behind the order taken"
        );
        assert_eq!(
            c.take(OrderId::new(0, 7)),
            Some(OrderMessage {
                traceparent: Some("tp".into()),
                ..msg(Some(b"seven"))
            })
        );
        assert_eq!(c.take(OrderId::new(0, 7)), None, "taken once");
        assert_eq!(c.take(OrderId::new(1, 1)), Some(msg(Some(b"one"))));
        assert_eq!((c.map.len(), c.bytes), (0, 0));
        for o in 0..(PAYLOADS_MAX as i64 + 10) {
            c.put(OrderId::new(2, o), msg(Some(b"x")));
        }
        assert_eq!(c.map.len(), PAYLOADS_MAX, "bounded");
    }
}
