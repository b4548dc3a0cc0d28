//! The one reader of the claims topic (issue 20, "one claims reader"): the
//! worker's boot replay and live tail (pool_worker/src/kafka/clients.rs), and every tool —
//! `status`, `history`, `audit`, `serve`, `submit --wait`, `retry`,
//! `cancel` and `dev`'s live trail — read the claims topic through
//! [`ClaimsReader`]:
//!
//! * one consumer configuration ([`config`]): no group membership, no
//!   commit, partition EOF (how a reader knows it caught up) and the fetch
//!   sizes of a replay, the user's `KAFKA_*` properties last;
//! * partition 0 read from a position ([`ClaimsReader::start_at`]; a tool's
//!   consumer is assigned it, the worker's, which has no group, starts it by
//!   hand: [`start_fetching`]), every
//!   record decoded and judged by the pool's [`Gate`] (signature, possible
//!   claims): foreign ones come out as `Err`;
//! * the newest checkpoint near the end of the log
//!   ([`ClaimsReader::find_checkpoint`], src/checkpoint.rs), for the readers
//!   that need only the pool's current [`View`]: the worker's boot,
//!   `submit --wait` (and `retry --wait`, `cancel`'s wait) and `retry`'s
//!   check of the original. `status`, `serve`, `history`, `audit` and
//!   `cancel`'s check count or show history (completions by status, each
//!   record), which a snapshot does not carry, and `dev` prints every
//!   record: they read from the beginning.

use crate::backoff;
use crate::boot::View;
use crate::checkpoint::{Snapshot, DEFAULT_CHECKPOINT_EVERY};
use crate::kafka::client_config::{client_config, Silent, CLAIMS_FETCH_WAIT_MS};
use crate::kafka::topics::{lane_ends, order_ends_now, Asks};
use crate::orders_topics::OrdersTopics;
use crate::record::Lane;
use crate::record::{Foreign, Record};
use anyhow::{bail, Context};
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far back from the end of the claims topic a reader looks for a
/// checkpoint at most: many checkpoint intervals (a stretch of leases
/// and other records without a boot can leave the newest one far behind).
pub const CHECKPOINT_WINDOW: i64 = 16 * DEFAULT_CHECKPOINT_EVERY as i64;

/// Where a reader looks first: the last two checkpoint intervals, which
/// hold the newest checkpoint whenever processes boot (one writes a
/// checkpoint when the newest is `DEFAULT_CHECKPOINT_EVERY` behind, R23).
/// Only when these hold none does it look on back to [`CHECKPOINT_WINDOW`].
pub const CHECKPOINT_NEAR: i64 = 2 * DEFAULT_CHECKPOINT_EVERY as i64;

/// How long one watermark request, or the whole checkpoint search, may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The claims consumer's settings (every reader's): `brokers` and the
/// shared client settings ([`client_config`]), a consumer that joins no
/// group (`group` only names it) and never commits, with partition EOF and
/// the fetch sizes of a replay, and then `props` (the user's `KAFKA_*`),
/// which override all of it.
///
/// A boot replays the whole topic through a small local queue that resumes
/// fetching at once when it drains: librdkafka's `fetch.queue.backoff.ms`
/// is 1 s by default, and a replay longer than `queued.min.messages`
/// (100,000) records waited for it, up to a second per pause
/// (bench/RESULTS.md). A small queue (1 MB fetches, 2 MB or 5,000 records
/// queued) also bounds a replay's memory, and was not slower than 4 MB
/// fetches into an 8 MB queue (which a replay fills faster than the
/// worker folds it). `fetch.wait.max.ms`: see [`CLAIMS_FETCH_WAIT_MS`].
///
/// `group`: the `group.id` (a tool's consumer, which is assigned partitions
/// and joins no group); `None` for a consumer whose partitions are started
/// by hand ([`start_fetching`]: the worker's), which has none, whatever the
/// properties say.
pub fn config(
    brokers: &str,
    props: &BTreeMap<String, String>,
    group: Option<&str>,
) -> ClientConfig {
    let mut c = client_config(brokers, &BTreeMap::new());
    if let Some(group) = group {
        c.set("group.id", group);
    }
    c.set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", CLAIMS_FETCH_WAIT_MS.to_string())
        .set("fetch.error.backoff.ms", "50")
        .set("auto.offset.reset", "earliest")
        .set("max.partition.fetch.bytes", "1048576")
        .set("fetch.max.bytes", "1048576")
        .set("queued.max.messages.kbytes", "2048")
        .set("queued.min.messages", "5000")
        .set("fetch.queue.backoff.ms", "1");
    for (k, v) in props {
        c.set(k, v);
    }
    // Last, whatever the user's properties say: a reader must never see a
    // record of an aborted transaction, nor one of a transaction still open
    // (docs/protocol.md R16). librdkafka's default, made sure of.
    c.set("isolation.level", "read_committed");
    if group.is_none() {
        c.remove("group.id");
    }
    c
}

/// What decides whether a claims record read from Kafka is the pool's
/// (issue 18, "the claims topic's trust boundary"): its signature, with
/// `CLAIMS_KEY` (src/sign.rs), and whether its claims are possible at all
/// ([`Record::impossible`]) against the orders topic's end offsets. The
/// ends known so far are used first; a record that seems to pass them is
/// checked again against ends fetched after it was read (a lagging reader's
/// ends may be older than the record), so only what is impossible is
/// refused.
#[derive(Clone)]
pub struct Gate {
    key: Option<crate::sign::ClaimsKey>,
    /// The orders topics (R57): a record about a topic not among them is
    /// not judged ([`Record::impossible`]).
    orders: OrdersTopics,
    /// The highest end offset known of each orders partition.
    known: Arc<std::sync::Mutex<BTreeMap<Lane, i64>>>,
    /// Orders partitions known to exist (a partition is never removed):
    /// a record these ends, asked fresh, find possible is the pool's
    /// without asking for the topic's metadata again.
    partitions: Arc<std::sync::Mutex<Vec<Lane>>>,
    /// When the brokers were last asked for the ends of every orders
    /// partition ([`Gate::saw_ends_asked`]).
    asked_at: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Gate {
    pub fn new(key: Option<crate::sign::ClaimsKey>, orders: &OrdersTopics) -> Gate {
        Gate {
            key,
            orders: orders.clone(),
            known: Arc::default(),
            partitions: Arc::default(),
            asked_at: Arc::default(),
        }
    }

    /// Notes that the orders topic has (at least) `partitions`.
    pub(crate) fn saw_partitions(&self, partitions: impl IntoIterator<Item = Lane>) {
        if let Ok(mut k) = self.partitions.lock() {
            k.extend(partitions);
            k.sort_unstable();
            k.dedup();
        }
    }

    /// The orders partitions known to exist.
    pub(crate) fn lanes(&self) -> Vec<Lane> {
        self.partitions
            .lock()
            .map(|k| k.clone())
            .unwrap_or_default()
    }

    /// Raises `ends` to the end offsets known here, lane by lane (both are
    /// lower bounds of the brokers' ends: an end offset never falls).
    pub(crate) fn raise(&self, ends: &mut BTreeMap<Lane, i64>) {
        if let Ok(k) = self.known.lock() {
            for (lane, end) in ends.iter_mut() {
                if let Some(&e) = k.get(lane) {
                    *end = (*end).max(e);
                }
            }
        }
    }

    /// [`Gate::saw_ends`] for ends just asked of the brokers, when they
    /// cover every orders topic: noted with the time they were asked at
    /// ([`Gate::recent_ends`]).
    pub(crate) fn saw_ends_asked(&self, ends: &BTreeMap<Lane, i64>, at: Instant) {
        self.saw_ends(ends);
        if self.covers(ends) {
            if let Ok(mut a) = self.asked_at.lock() {
                *a = Some(a.map_or(at, |was| was.max(at)));
            }
        }
    }

    /// The known ends of every orders partition known to exist, and when
    /// they were asked, if that was less than `within` ago: each is at
    /// least the brokers' end then (raised since by the orders read).
    pub(crate) fn recent_ends(&self, within: Duration) -> Option<(Instant, BTreeMap<Lane, i64>)> {
        let at = (*self.asked_at.lock().ok()?)?;
        if at.elapsed() >= within {
            return None;
        }
        let lanes = self.lanes();
        let known = self.known.lock().ok()?;
        let ends: BTreeMap<Lane, i64> = lanes
            .iter()
            .map(|l| known.get(l).map(|&e| (*l, e)))
            .collect::<Option<_>>()?;
        (!ends.is_empty() && self.covers(&ends)).then_some((at, ends))
    }

    /// Raises the known end offsets (an end offset never falls).
    pub(crate) fn saw_ends(&self, ends: &BTreeMap<Lane, i64>) {
        if let Ok(mut k) = self.known.lock() {
            for (&p, &e) in ends {
                let v = k.entry(p).or_insert(e);
                *v = (*v).max(e);
            }
        }
    }

    /// Decodes a message of the claims topic; `Err` for a foreign record.
    /// `client` fetches the orders topic's ends when needed (retried while
    /// `live` says so: the verdict must not depend on a failed request).
    pub fn decode(
        &self,
        client: &dyn Asks,
        m: &impl Message,
        live: &dyn Fn() -> bool,
    ) -> Result<Record, Foreign> {
        use rdkafka::message::Headers;
        let sig = m.headers().and_then(|h| {
            h.iter()
                .find(|h| h.key == crate::sign::HEADER)
                .and_then(|h| h.value)
        });
        let verdict = crate::sign::verdict(self.key.as_ref(), m.payload(), sig);
        let rec = Record::decode_with(m.key(), m.payload(), verdict)?;
        // Ends judge a record only about the topics they have lanes of
        // (R57: a record of a topic not read is not judged), so only ends
        // of every orders topic may pass one.
        if self
            .known
            .lock()
            .is_ok_and(|k| self.covers(&k) && rec.impossible(&k).is_none())
        {
            return Ok(rec);
        }
        // Ends asked now for the partitions known to exist: a record they
        // find possible is (a partition the record names is among them, and
        // its end is fresh). Only one they refuse is judged on the topic's
        // metadata too (a partition added since, or a foreign record).
        let parts = self.lanes();
        if !parts.is_empty() {
            let asked = Instant::now();
            if let Ok(ends) = lane_ends(client, &self.orders, &parts, REQUEST_TIMEOUT) {
                self.saw_ends_asked(&ends, asked);
                if self.covers(&ends) && rec.impossible(&ends).is_none() {
                    return Ok(rec);
                }
            }
        }
        let mut backoff = backoff::REQUEST;
        let fresh = loop {
            let asked = Instant::now();
            match order_ends_now(client, &self.orders) {
                Ok(ends) if !ends.is_empty() => break (asked, ends),
                Ok(_) => tracing::warn!("the orders topic has no partitions yet"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the orders topic's end offsets to check a claims record")
                }
            }
            if !live() {
                return Err(Foreign::Impossible(
                    "not checked: the reader stopped".into(),
                ));
            }
            backoff.wait_blocking();
        };
        let (asked, fresh) = fresh;
        self.saw_partitions(fresh.keys().copied());
        self.saw_ends_asked(&fresh, asked);
        match rec.impossible(&fresh) {
            Some(why) => Err(Foreign::Impossible(why)),
            None => Ok(rec),
        }
    }

    /// Whether `ends` have a lane of every orders topic.
    fn covers(&self, ends: &BTreeMap<Lane, i64>) -> bool {
        self.orders
            .iter()
            .all(|(t, _)| ends.keys().any(|l| l.topic == t))
    }

    /// The signature header of a record's value, if the pool has a key.
    pub fn sign(&self, value: &[u8]) -> Option<String> {
        self.key.as_ref().map(|k| k.sign(value))
    }
}

/// A reader of the claims topic's one partition: see the module doc.
pub struct ClaimsReader<X: ConsumerContext + 'static = Silent> {
    consumer: Arc<BaseConsumer<X>>,
    /// The claims partition's own queue when the consumer is shared with
    /// other topics ([`ClaimsReader::sharing`]): the worker's one consumer
    /// also reads the orders topic, whose messages and end-of-partition
    /// events stay on the consumer's main queue. (rdkafka's end-of-partition
    /// error names the partition, not the topic: on one queue, the orders'
    /// partition 0 and the claims partition could not be told apart.)
    queue: Option<PartitionQueue<X>>,
    /// Whether a shared consumer fetches the claims partition already
    /// (started once, [`start_fetching`]: later starts seek).
    started: AtomicBool,
    /// The consumer's configuration, for the checkpoint search's own
    /// consumer ([`ClaimsReader::find_checkpoint`]).
    config: ClientConfig,
    gate: Gate,
    topic: String,
    /// Where the reader was started ([`ClaimsReader::start_at`]); its
    /// consumer is assigned there once, so nothing below it is read.
    from: AtomicU64,
    /// The last record read was the last of the topic: the next poll says
    /// [`Polled::End`] at once.
    end_next: AtomicBool,
    /// The position after the last record [`ClaimsReader::poll`] returned
    /// (where the reader was started before that): where
    /// [`ClaimsReader::resume_where_read`] goes on.
    next: AtomicU64,
    /// A client that never fetches, for the reader's questions (the topic's
    /// end, the orders' ends the [`Gate`] checks records against). Asked on
    /// the fetching consumer, they waited behind its fetch, which Apache
    /// Kafka holds at the log's end for `fetch.wait.max.ms` (a broker
    /// answers one connection's requests in order): up to 500 ms per
    /// question, a second of every boot.
    asks: Arc<dyn Asks>,
    /// How far below the end a record may be and still be taken for the
    /// last: 1 (exact) for the tools, 2 for a worker, whose records are
    /// each followed by a commit marker ([`ClaimsReader::marker_slack`]).
    slack: i64,
    /// What a shared consumer's checkpoint search read ([`Kept`]), for the
    /// replay that starts among it; then what is left of it to poll.
    kept: std::sync::Mutex<Kept>,
    /// [`ClaimsReader::start_at`] started among the kept records and some
    /// are left to poll.
    kept_left: AtomicBool,
}

/// The records a worker's checkpoint search polled from the window's near
/// part on ([`ClaimsReader::find_checkpoint`]): the replay that starts at a
/// checkpoint among them polls them from here ([`ClaimsReader::start_at`])
/// and goes on where the search stopped. Sought back instead, the consumer
/// waited for the fetch it had sent at the log's end, which the broker
/// holds for `fetch.wait.max.ms` when nothing new comes: 100 ms of every
/// boot (bench/RESULTS.md).
#[derive(Default)]
struct Kept {
    /// The position the search started at: every record from here to the
    /// last of `records` was polled, and the consumer goes on after it.
    from: u64,
    records: std::collections::VecDeque<rdkafka::message::OwnedMessage>,
    /// Whether `from` and `records` hold a search's reading.
    some: bool,
    /// The position after the last record the search polled.
    next: u64,
}

/// What one [`ClaimsReader::poll`] got.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // records are the common variant: boxing would allocate for each one
pub enum Polled<T = Result<Record, Foreign>> {
    /// The record at this position, or why it is foreign.
    Record(u64, T),
    /// The reader is at the topic's end.
    End,
    /// Nothing within the wait.
    Nothing,
    /// The consumer reported an error (librdkafka retries by itself).
    Error(KafkaError),
    /// The broker cannot be worked with: it returned a record at or past
    /// the high watermark it reports ([`crate::kafka::topics::check_watermark`]).
    Broken(crate::kafka::topics::TopicProblem),
}

/// Where a tool's reader starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// At the log's first record (a tool that counts or shows history).
    Beginning,
    /// At the newest checkpoint near the end whose view is of the log
    /// before a position `<= at_most` (a tool that needs only the current
    /// view, and records from `at_most` on), else at the beginning.
    NewestCheckpoint { at_most: u64 },
}

impl<X: ConsumerContext + 'static> ClaimsReader<X> {
    /// Creates the consumer from `config` (see [`config`]); nothing is
    /// assigned yet ([`ClaimsReader::start_at`]).
    pub fn new(
        config: &ClientConfig,
        context: X,
        topic: &str,
        gate: Gate,
        asks: Option<Arc<dyn Asks>>,
    ) -> anyhow::Result<ClaimsReader<X>> {
        let consumer = config
            .create_with_context(context)
            .context("cannot create a Kafka consumer")?;
        let asks = match asks {
            Some(a) => a,
            None => {
                let c: BaseConsumer = config.create().context("cannot create a Kafka client")?;
                Arc::new(c)
            }
        };
        Ok(ClaimsReader {
            consumer: Arc::new(consumer),
            queue: None,
            started: AtomicBool::new(false),
            config: config.clone(),
            gate,
            topic: topic.to_string(),
            from: AtomicU64::new(0),
            end_next: AtomicBool::new(false),
            next: AtomicU64::new(0),
            asks,
            slack: 1,
            kept: Default::default(),
            kept_left: AtomicBool::new(false),
        })
    }

    /// A reader on `consumer`, which other topics' partitions share (the
    /// worker's one consumer, pool_worker/src/kafka/clients.rs): the claims
    /// partition gets a queue of its own, and `wake` is called whenever that
    /// queue goes from empty to not empty (the thread polling it may be
    /// waiting on something else). The consumer has no `group.id`: its
    /// partitions are started by hand ([`start_fetching`]); the checkpoint
    /// search reads through this consumer too ([`ClaimsReader::find_checkpoint`]). `config`: the
    /// consumer's settings ([`config`]).
    pub fn sharing(
        consumer: Arc<BaseConsumer<X>>,
        config: &ClientConfig,
        topic: &str,
        gate: Gate,
        asks: Arc<dyn Asks>,
        wake: impl Fn() + Send + Sync + 'static,
    ) -> anyhow::Result<ClaimsReader<X>> {
        let mut queue = consumer
            .split_partition_queue(topic, 0)
            .with_context(|| format!("cannot read topic '{topic}' on a queue of its own"))?;
        queue.set_nonempty_callback(wake);
        Ok(ClaimsReader {
            consumer,
            queue: Some(queue),
            started: AtomicBool::new(false),
            config: config.clone(),
            gate,
            topic: topic.to_string(),
            from: AtomicU64::new(0),
            end_next: AtomicBool::new(false),
            next: AtomicU64::new(0),
            asks,
            slack: 1,
            kept: Default::default(),
            kept_left: AtomicBool::new(false),
        })
    }

    /// A worker's reader: a record one or two below the end counts as the
    /// last. A record in a transaction of its own (R16) is followed by its
    /// commit marker, which takes an offset but is never delivered, so the
    /// exact rule missed the end after every worker's record and waited for
    /// librdkafka's end-of-partition event instead, which comes from a fetch
    /// the broker holds for `fetch.wait.max.ms`: 100 ms of most boots on
    /// Apache Kafka. When the last two records are plain (a tool's `cancel`,
    /// or a broker that cannot fence), the worker says "caught up" one
    /// record early; the protocol takes that as it takes a record that lands
    /// a moment later, and the next poll delivers it at once. A tool, which
    /// must read everything up to the end, keeps the exact rule.
    pub fn marker_slack(mut self) -> Self {
        self.slack = 2;
        self
    }

    /// The consumer, for metadata requests.
    pub fn consumer(&self) -> &BaseConsumer<X> {
        &self.consumer
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Reads on from position `pos` (0: from the beginning). An offset
    /// rather than "beginning", which costs an offset query; should the log
    /// no longer start there, `auto.offset.reset=earliest` starts at its
    /// first record.
    ///
    /// A shared consumer's claims partition is started once
    /// ([`start_fetching`]; the orders partitions beside it stay as they
    /// are); a later start
    /// (after the checkpoint search) seeks, which drops whatever was
    /// fetched for the old position (librdkafka's version barrier).
    ///
    /// A start among what a worker's checkpoint search read ([`Kept`])
    /// polls those records first and goes on where the search stopped,
    /// without a seek. Returns whether it sought (or assigned) the
    /// partition.
    pub fn start_at(&self, pos: u64) -> anyhow::Result<bool> {
        self.from.store(pos, Ordering::Relaxed);
        self.next.store(pos, Ordering::Relaxed);
        self.end_next.store(false, Ordering::Relaxed);
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.some && kept.from <= pos {
            kept.some = false;
            while kept
                .records
                .front()
                .is_some_and(|m| (m.offset().max(0) as u64) < pos)
            {
                kept.records.pop_front();
            }
            if kept.records.is_empty() {
                // Read to the end already (the search reads to it).
                self.next.store(kept.next.max(pos), Ordering::Relaxed);
                self.end_next.store(true, Ordering::Relaxed);
            } else {
                self.kept_left.store(true, Ordering::Relaxed);
            }
            return Ok(false);
        }
        *kept = Kept::default();
        drop(kept);
        self.go_to(pos as i64)?;
        Ok(true)
    }

    /// The next of the kept records [`ClaimsReader::start_at`] started
    /// among, if any is left: as [`ClaimsReader::poll_map`] gives a record
    /// (the last of them was read to the log's end, so the next poll says
    /// [`Polled::End`]). The consumer fetched them a moment ago, below the
    /// watermark the search asked for.
    fn poll_kept<T>(
        &self,
        f: impl FnOnce(&rdkafka::message::OwnedMessage) -> T,
    ) -> Option<Polled<T>> {
        if !self.kept_left.load(Ordering::Relaxed) {
            return None;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let m = kept.records.pop_front()?;
        if kept.records.is_empty() {
            self.kept_left.store(false, Ordering::Relaxed);
            self.end_next.store(true, Ordering::Relaxed);
        }
        let pos = m.offset().max(0) as u64;
        self.next.store(pos + 1, Ordering::Relaxed);
        Some(Polled::Record(pos, f(&m)))
    }

    /// Stops fetching the claims partition (a standby that caught up,
    /// until its `go`: pool_worker/src/kafka/clients.rs). What was fetched
    /// and not yet polled is dropped (librdkafka's version barrier): the
    /// next poll returns nothing until [`ClaimsReader::resume_where_read`].
    pub fn pause(&self) -> anyhow::Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Invalid)?;
        self.consumer
            .pause(&tpl)
            .context("cannot pause the claims topic")
    }

    /// Fetches the claims partition again after [`ClaimsReader::pause`],
    /// from the position after the last record polled; returns that
    /// position.
    ///
    /// Resumed, then sought there, in this order (both are operations of
    /// librdkafka's main thread, served in turn). A resume alone leaves the
    /// consumer's broker thread asleep: it has had nothing to fetch since
    /// the pause, and only an operation of its own, a socket's event or its
    /// one-second timeout wakes it, so the first fetch waited up to a
    /// second (bench/RESULTS.md, issue 35: the reverted attempt's slow
    /// `booted`). The seek's fetch state going back to active wakes it,
    /// and a resume after the seek came too late for that wake-up. The
    /// position sought is librdkafka's own resume position too (the last
    /// message consumed, plus one), made explicit. (A seek to position 0
    /// changes no fetch state and wakes nothing: only a standby that found
    /// the log empty may wait for that timeout.)
    pub fn resume_where_read(&self) -> anyhow::Result<u64> {
        let next = self.next.load(Ordering::Relaxed);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Invalid)?;
        self.consumer
            .resume(&tpl)
            .context("cannot resume the claims topic")?;
        self.go_to(next as i64)?;
        Ok(next)
    }

    /// Points the consumer's claims partition at `offset`.
    fn go_to(&self, offset: i64) -> anyhow::Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(offset))?;
        if self.queue.is_none() {
            self.consumer
                .assign(&tpl)
                .context("cannot assign the claims topic")?;
        } else if self.started.swap(true, Ordering::Relaxed) {
            self.consumer
                .seek_partitions(tpl, REQUEST_TIMEOUT)
                .context("cannot seek the claims topic")?
                .elements()
                .iter()
                .find_map(|e| e.error().err())
                .map_or(Ok(()), Err)
                .context("cannot seek the claims topic")?;
        } else {
            // The shared consumer has no group (see [`start_fetching`]);
            // its claims partition's messages stay on the partition's own
            // queue ([`ClaimsReader::sharing`]).
            start_fetching(
                &self.consumer,
                &self.topic,
                0,
                offset,
                FetchInto::PartitionQueue,
            )
            .context("cannot start reading the claims topic")?;
        }
        Ok(())
    }

    /// The next message or event of the claims partition.
    fn next(&self, wait: Duration) -> Option<KafkaResult<BorrowedMessage<'_>>> {
        match &self.queue {
            Some(q) => q.poll(wait),
            None => self.consumer.poll(wait),
        }
    }

    /// The claims topic's end offset now.
    pub fn end(&self, timeout: Duration) -> anyhow::Result<u64> {
        let high = self
            .asks
            .ask_ends(&self.topic, &[0], timeout)
            .with_context(|| format!("cannot read topic '{}'", self.topic))?
            .get(&0)
            .copied()
            .unwrap_or(0);
        Ok(high.max(0) as u64)
    }

    /// The next record, waiting at most `wait`; `live` bounds the gate's
    /// retries (see [`Gate::decode`]).
    pub fn poll(&self, wait: Duration, live: &dyn Fn() -> bool) -> Polled {
        if let Some(p) = self.poll_kept(|m| self.gate.decode(&*self.asks, m, live)) {
            return p;
        }
        self.poll_map(wait, |m| self.gate.decode(&*self.asks, m, live))
    }

    /// [`ClaimsReader::poll`], with the message's key and value as read
    /// (`dev` shows a foreign record's bytes).
    pub fn poll_raw(&self, wait: Duration, live: &dyn Fn() -> bool) -> Polled<Raw> {
        if let Some(p) = self.poll_kept(|m| self.raw(m, live)) {
            return p;
        }
        self.poll_map(wait, |m| self.raw(m, live))
    }

    /// A message as [`ClaimsReader::poll_raw`] gives it: decoded, with its
    /// key and value as read.
    fn raw(&self, m: &impl Message, live: &dyn Fn() -> bool) -> Raw {
        Raw {
            record: self.gate.decode(&*self.asks, m, live),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
        }
    }

    /// The reader is at the end once it has read the record below the
    /// high watermark that came with the fetch that brought it, and not only
    /// once librdkafka's partition EOF arrives: that comes from a fetch
    /// sent at the end, which Apache Kafka holds for the whole
    /// `fetch.wait.max.ms` (500 ms) when nothing new arrives, and a boot
    /// waited for two of them.
    fn poll_map<T>(&self, wait: Duration, f: impl FnOnce(&BorrowedMessage<'_>) -> T) -> Polled<T> {
        if self.end_next.swap(false, Ordering::Relaxed) {
            return Polled::End;
        }
        match self.next(wait) {
            None => Polled::Nothing,
            Some(Ok(m)) => {
                // Asked through `asks`: on the fetching consumer the
                // request would wait behind its held fetch.
                let ask = || {
                    self.asks
                        .ask_ends(&self.topic, &[m.partition()], REQUEST_TIMEOUT)
                        .ok()
                        .and_then(|ends| ends.get(&m.partition()).copied())
                };
                let end = crate::kafka::topics::cached_high(
                    self.consumer.client(),
                    &self.topic,
                    m.partition(),
                );
                if let Err(p) = crate::kafka::topics::check_watermark_at(
                    end,
                    &self.topic,
                    m.partition(),
                    m.offset(),
                    ask,
                ) {
                    return Polled::Broken(p);
                }
                // See [`ClaimsReader::marker_slack`].
                if end > 0 && m.offset() + self.slack >= end {
                    self.end_next.store(true, Ordering::Relaxed);
                }
                self.next
                    .store(m.offset().max(0) as u64 + 1, Ordering::Relaxed);
                Polled::Record(m.offset().max(0) as u64, f(&m))
            }
            Some(Err(KafkaError::PartitionEOF(_))) => Polled::End,
            Some(Err(e)) => Polled::Error(e),
        }
    }

    /// The newest checkpoint (src/checkpoint.rs) among the last `window`
    /// positions of the log whose view is of the log before a position
    /// `<= at_most`: only records keyed `<n>:checkpoint` are decoded, and
    /// only those the [`Gate`] accepts count. The last [`CHECKPOINT_NEAR`]
    /// positions are read first, and the rest of the window only when they
    /// hold no such checkpoint. `None` when the log is not longer than the
    /// part of the window read (replaying it all costs no more), holds no
    /// such checkpoint there, or the search takes longer than a few seconds.
    ///
    /// A tool's search reads with a consumer of its own, dropped after it,
    /// so that the reader's consumer is assigned once ([`ClaimsReader::start_at`]):
    /// librdkafka (2.x) can abort on `rktp->rktp_started` when one consumer
    /// is assigned again while its previous assignment is still stopping
    /// (confluentinc/librdkafka#5573). A shared consumer's ([`ClaimsReader::sharing`],
    /// the worker's) is never stopped: the search starts the claims
    /// partition where it starts ([`start_fetching`]), and
    /// [`ClaimsReader::start_at`] then seeks it, so the worker's boot needs
    /// no client of its own for the search.
    /// Either seeks for the second part of the window.
    ///
    /// Only a checkpoint written less than `max_age_ms` ago counts
    /// ([`crate::checkpoint::DEFAULT_CHECKPOINT_MAX_AGE_MS`], R24).
    pub fn find_checkpoint(&self, window: i64, at_most: u64, max_age_ms: u64) -> Option<Snapshot> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let oldest = now.saturating_sub(max_age_ms);
        let (low, high) = self.watermarks().ok()?;
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let near = CHECKPOINT_NEAR.min(window);
        let mut own: Option<BaseConsumer<Silent>> = None;
        // What the shared consumer polls in the near part, for the replay
        // ([`Kept`]).
        let mut keep = self
            .queue
            .as_ref()
            .map(|_| std::collections::VecDeque::new());
        // (from, to): the near part, then the rest of the window.
        for (from, to) in [(high - near, high), (high - window, high - near)] {
            if from >= to {
                return None;
            }
            if from <= low {
                // The log is no longer than this: replay it all.
                return None;
            }
            match (&self.queue, &own) {
                (Some(_), _) => self.go_to(from).ok()?,
                (None, None) => {
                    let search: BaseConsumer<Silent> =
                        self.config.create_with_context(Silent).ok()?;
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition_offset(&self.topic, 0, Offset::Offset(from))
                        .ok()?;
                    search.assign(&tpl).ok()?;
                    own = Some(search);
                }
                (None, Some(search)) => search
                    .seek(&self.topic, 0, Offset::Offset(from), REQUEST_TIMEOUT)
                    .ok()?,
            }
            let poll = |wait: Duration| match &own {
                Some(search) => search.poll(wait),
                None => self.next(wait),
            };
            let position = || match &own {
                Some(search) => position_of(search, &self.topic),
                None => position_of(&self.consumer, &self.topic),
            };
            let ends_log = to == high;
            let kept = keep.as_mut().filter(|_| ends_log);
            if let Some(best) = self.search(
                poll, position, kept, to, ends_log, at_most, oldest, deadline,
            )? {
                if let Some(records) = keep.take().filter(|_| ends_log) {
                    let next = records
                        .back()
                        .map_or(from as u64, |m: &rdkafka::message::OwnedMessage| {
                            m.offset().max(0) as u64 + 1
                        });
                    *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Kept {
                        from: from as u64,
                        records,
                        some: true,
                        next,
                    };
                }
                return Some(best);
            }
        }
        None
    }

    /// The claims partition's log start and end (as `fetch_watermarks`
    /// gives them: two ListOffsets requests at once), with, in the request
    /// for the end, the ends of the orders partitions the [`Gate`] knows
    /// of, which it is told: the replay's first record that names an order
    /// asked for them in a request of its own (one more per process, issue
    /// 35). Asked together, they are as fresh as the records before the
    /// claims topic's end: an order those name existed when it was written.
    fn watermarks(&self) -> Result<(i64, i64), KafkaError> {
        let lanes: Vec<(Lane, (&str, i32))> = self
            .gate
            .lanes()
            .into_iter()
            .filter_map(|l| Some((l, self.gate.orders.kafka_lane(l)?)))
            .collect();
        let parts: Vec<(&str, i32)> = std::iter::once((self.topic.as_str(), 0))
            .chain(lanes.iter().map(|(_, k)| *k))
            .collect();
        let asked = Instant::now();
        let (low, ends) = std::thread::scope(|s| {
            let low = s.spawn(|| self.asks.ask_start(&self.topic, 0, REQUEST_TIMEOUT));
            let ends = self.asks.ask_ends_of(&parts, REQUEST_TIMEOUT);
            let low = low
                .join()
                .unwrap_or(Err(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail)));
            (low, ends)
        });
        let (low, ends) = (low?, ends?);
        let (&high, orders) = ends
            .split_first()
            .ok_or(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail))?;
        self.gate.saw_ends_asked(
            &lanes
                .iter()
                .map(|(l, _)| *l)
                .zip(orders.iter().copied())
                .collect(),
            asked,
        );
        Ok((low, high))
    }

    /// The newest checkpoint [`ClaimsReader::find_checkpoint`] accepts
    /// among the records `poll` gives before position `to`: `Some(None)`
    /// when there is none, `None` when the search took past `deadline`.
    ///
    /// Where `to` is the log's end (`ends_log`), the last record is
    /// followed by its transaction's commit marker (R16), which is never
    /// delivered: a record one below the end is the last, as the worker's
    /// reader takes it ([`ClaimsReader::marker_slack`]), and the consumer's
    /// `position` past `to` (control records included) ends the search
    /// too. Waiting for librdkafka's end-of-partition event instead cost a
    /// fetch held for `fetch.wait.max.ms` (100 ms) on every boot.
    #[allow(clippy::too_many_arguments)]
    fn search<'a>(
        &self,
        poll: impl Fn(Duration) -> Option<KafkaResult<BorrowedMessage<'a>>>,
        position: impl Fn() -> Option<i64>,
        mut keep: Option<&mut std::collections::VecDeque<rdkafka::message::OwnedMessage>>,
        to: i64,
        ends_log: bool,
        at_most: u64,
        oldest: u64,
        deadline: Instant,
    ) -> Option<Option<Snapshot>> {
        let slack = if ends_log { 2 } else { 1 };
        let mut best: Option<Snapshot> = None;
        loop {
            // Too slow: replay from the beginning instead.
            let left = deadline.checked_duration_since(Instant::now())?;
            match poll(left.min(Duration::from_millis(10))) {
                None => {
                    // Only at the end: after the seek back for the rest of
                    // the window, the position may still be the first
                    // part's end, and records follow `to` there anyway.
                    if ends_log && position().is_some_and(|p| p >= to) {
                        return Some(best);
                    }
                }
                Some(Ok(m)) => {
                    if let Some(k) = keep.as_mut() {
                        k.push_back(m.detach());
                    }
                    if m.offset() >= to {
                        return Some(best);
                    }
                    if m.key().is_some_and(|k| k.ends_with(b":checkpoint")) {
                        // Signed, and possible: a checkpoint is a whole view.
                        let live = || Instant::now() < deadline;
                        if let Ok(rec) = self.gate.decode(&*self.asks, &m, &live) {
                            let young = rec.ts >= oldest;
                            if let Some(snap) = rec.snapshot().filter(|s| {
                                young
                                    && s.at.get() <= at_most
                                    && best.as_ref().is_none_or(|b| s.at > b.at)
                            }) {
                                best = Some(snap.clone());
                            }
                        }
                    }
                    if m.offset() + slack >= to {
                        return Some(best);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => return Some(best),
                Some(Err(e)) => {
                    tracing::warn!(topic = %self.topic, error = %e, "looking for a checkpoint");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

/// `consumer`'s position in partition 0 of `topic`: past the last record
/// or control record polled. `None`: not known.
fn position_of<X: ConsumerContext>(consumer: &BaseConsumer<X>, topic: &str) -> Option<i64> {
    let tpl = consumer.position().ok()?;
    match tpl.find_partition(topic, 0)?.offset() {
        Offset::Offset(n) if n >= 0 => Some(n),
        _ => None,
    }
}

/// A record as [`ClaimsReader::poll_raw`] read it.
#[derive(Clone, Debug)]
pub struct Raw {
    pub record: Result<Record, Foreign>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// Where [`start_fetching`] delivers a partition's messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FetchInto {
    /// The partition's own queue ([`BaseConsumer::split_partition_queue`]).
    PartitionQueue,
    /// The client's main queue, which a consumer without a `group.id`
    /// polls ([`BaseConsumer::poll`]).
    MainQueue,
}

/// Starts fetching `topic`'s `partition` at `offset` on a consumer made
/// without a `group.id` (the worker's one consumer, pool_worker/src/kafka/clients.rs):
/// librdkafka's simple consumer (`rd_kafka_consume_start`), which rdkafka
/// does not wrap. Later moves are seeks, pauses and resumes, which work on
/// such a partition as on an assigned one.
///
/// Why not `assign`: librdkafka lets only a consumer with a `group.id`
/// assign, and such a consumer looks for its group's coordinator and keeps
/// a connection to it (FindCoordinator, ApiVersions, a broker thread), from
/// each of the pool's processes, though the pool never commits an offset
/// (seed 002: offsets by hand).
pub(crate) fn start_fetching<X: ConsumerContext>(
    consumer: &BaseConsumer<X>,
    topic: &str,
    partition: i32,
    offset: i64,
    into: FetchInto,
) -> anyhow::Result<()> {
    use rdkafka::bindings as rd;
    let rkt = TopicHandle::new(consumer.client(), topic)?;
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` and `rkt.0` are live handles. The main queue's handle is
    // a new reference, dropped once here (a queue forwarded to keeps a
    // reference of its own); the partition keeps its topic when `rkt` is
    // dropped.
    let started = unsafe {
        match into {
            FetchInto::PartitionQueue => rd::rd_kafka_consume_start(rkt.0, partition, offset),
            FetchInto::MainQueue => {
                let main = rd::rd_kafka_queue_get_main(rk);
                let r = rd::rd_kafka_consume_start_queue(rkt.0, partition, offset, main);
                rd::rd_kafka_queue_destroy(main);
                r
            }
        }
    };
    if started == -1 {
        bail!(
            "cannot read partition {partition} of topic '{topic}': {}",
            last_error()
        );
    }
    Ok(())
}

/// An application's handle on a topic of a client (`rd_kafka_topic_new`),
/// destroyed when dropped; rdkafka keeps its own inside its calls.
pub(crate) struct TopicHandle(*mut rdkafka::bindings::rd_kafka_topic_t);

// SAFETY: librdkafka's topic handles may be used and destroyed from any
// thread.
unsafe impl Send for TopicHandle {}
unsafe impl Sync for TopicHandle {}

impl TopicHandle {
    pub(crate) fn new<X: rdkafka::ClientContext>(
        client: &rdkafka::client::Client<X>,
        topic: &str,
    ) -> anyhow::Result<TopicHandle> {
        let name = std::ffi::CString::new(topic)?;
        // SAFETY: the client is live, `name` is NUL-terminated and outlives
        // the call; the handle is destroyed once, in `drop`.
        let rkt = unsafe {
            rdkafka::bindings::rd_kafka_topic_new(
                client.native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        if rkt.is_null() {
            bail!("cannot use topic '{topic}': {}", last_error());
        }
        Ok(TopicHandle(rkt))
    }
}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: a handle this value took, destroyed once.
        unsafe { rdkafka::bindings::rd_kafka_topic_destroy(self.0) };
    }
}

/// librdkafka's error of this thread's last legacy call.
fn last_error() -> rdkafka::types::RDKafkaErrorCode {
    // SAFETY: reads a thread-local of librdkafka's.
    rdkafka::types::RDKafkaErrorCode::from(unsafe { rdkafka::bindings::rd_kafka_last_error() })
}

/// How long a tool may take to read the claims topic to its end.
const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

impl ClaimsReader<Silent> {
    /// A tool's reader of `topic`, with these settings (see [`config`]),
    /// started at `start`. Returns the view of the log before where it
    /// starts (empty, or loaded from the checkpoint) and that position.
    pub fn open(
        config: &ClientConfig,
        topic: &str,
        gate: Gate,
        start: Start,
    ) -> anyhow::Result<(ClaimsReader, View, u64)> {
        let reader = ClaimsReader::new(config, Silent, topic, gate, None)?;
        let mut view = View::new();
        let mut at = 0;
        if let Start::NewestCheckpoint { at_most } = start {
            if let Some(snap) = reader.find_checkpoint(
                CHECKPOINT_WINDOW,
                at_most,
                crate::checkpoint::DEFAULT_CHECKPOINT_MAX_AGE_MS,
            ) {
                view = View::from_snapshot(&snap);
                at = snap.at.get();
            }
        }
        reader.start_at(at)?;
        Ok((reader, view, at))
    }

    /// Reads on to the end the topic has now (bounded in time), handing
    /// every record to `each`.
    pub fn read_to_end(
        &self,
        mut each: impl FnMut(u64, Result<Record, Foreign>),
    ) -> anyhow::Result<()> {
        let high = self.end(TOOL_TIMEOUT)?;
        let deadline = Instant::now() + TOOL_TIMEOUT;
        let live = || Instant::now() < deadline;
        let mut at_end = self.from.load(Ordering::Relaxed) >= high;
        while !at_end {
            if Instant::now() > deadline {
                bail!("reading '{}' took more than {:?}", self.topic, TOOL_TIMEOUT);
            }
            match self.poll(Duration::from_millis(500), &live) {
                Polled::Record(pos, r) => {
                    at_end = pos + 1 >= high;
                    each(pos, r);
                }
                Polled::End => at_end = true,
                Polled::Nothing => {}
                Polled::Error(e) => say_error(&e),
                Polled::Broken(p) => bail!(p),
            }
        }
        Ok(())
    }
}

/// A tool's line for an error of its claims consumer (librdkafka retries
/// by itself; the tool goes on).
pub fn say_error(e: &KafkaError) {
    eprintln!("pool_worker: reading the claims topic: {e}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(topics: &str) -> (Gate, OrdersTopics) {
        let orders = OrdersTopics::parse("ORDERS_TOPIC", topics).expect("topics");
        (Gate::new(None, &orders), orders)
    }

    /// Ends asked of the brokers are reused only while recent, only when
    /// they cover every partition known to exist, and raised by what was
    /// read since; ends learnt from messages alone never count as asked.
    #[test]
    fn recent_ends_are_asked_ones_raised_by_what_was_read() {
        let (g, orders) = gate("work");
        let main = orders.topics()[0];
        let (l0, l1) = (Lane::new(main, 0), Lane::new(main, 1));
        g.saw_partitions([l0, l1]);
        // Ends from messages read are no answer of the brokers.
        g.saw_ends(&BTreeMap::from([(l0, 5), (l1, 3)]));
        assert_eq!(g.recent_ends(Duration::from_secs(60)), None);
        let asked = Instant::now();
        g.saw_ends_asked(&BTreeMap::from([(l0, 7), (l1, 2)]), asked);
        let (at, ends) = g.recent_ends(Duration::from_secs(60)).expect("recent");
        assert_eq!(at, asked);
        // Each end the highest known: l1's message-read 3 over the asked 2.
        assert_eq!(ends, BTreeMap::from([(l0, 7), (l1, 3)]));
        // An order read since raises what is told.
        g.saw_ends(&BTreeMap::from([(l0, 9)]));
        let mut told = BTreeMap::from([(l0, 7), (l1, 2)]);
        g.raise(&mut told);
        assert_eq!(told, BTreeMap::from([(l0, 9), (l1, 3)]));
        // Too old.
        assert_eq!(g.recent_ends(Duration::ZERO), None);
        // A partition added since, whose end was never asked.
        g.saw_partitions([Lane::new(main, 2)]);
        assert_eq!(g.recent_ends(Duration::from_secs(60)), None);
    }

    /// Ends that miss an orders topic (R57) are not marked as asked.
    #[test]
    fn ends_missing_a_topic_are_not_recent() {
        let (g, orders) = gate("urgent,work");
        let [urgent, main] = orders.topics()[..] else {
            panic!("two topics")
        };
        let (u, m) = (Lane::new(urgent, 0), Lane::new(main, 0));
        g.saw_partitions([u, m]);
        g.saw_ends_asked(&BTreeMap::from([(m, 4)]), Instant::now());
        assert_eq!(g.recent_ends(Duration::from_secs(60)), None);
        g.saw_ends_asked(&BTreeMap::from([(u, 1), (m, 4)]), Instant::now());
        assert!(g.recent_ends(Duration::from_secs(60)).is_some());
    }
}
