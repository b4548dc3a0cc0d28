//! The embedded Kafka broker: a real Kafka-protocol server inside the process.
//!
//! Development and the integration tests need a Kafka cluster, and a JVM is a
//! heavy thing to ask of a newcomer or a CI box. librdkafka ships a *mock
//! cluster* (`rdkafka::mocking::MockCluster`): brokers that speak enough of the
//! Kafka protocol (produce, fetch, list offsets, metadata, consumer groups)
//! for any Kafka client, listening on `127.0.0.1` on ports of its choosing. A
//! worker process, `kcat`, or a test in another process connects to it
//! exactly as it would to a real cluster. What it lacks: topic administration
//! over the wire (no CreateTopics, so topics are created here with
//! [`Broker::create_topic`]), persistence (the log lives in memory and dies
//! with the process), and compaction (the claims topic just grows, which is
//! harmless in development).
//!
//! What it adds is fault injection, which is why the tests use it: all
//! brokers can be taken [down](Broker::all_down) (connections are closed and
//! new ones refused, but the port is kept, so clients reconnect by themselves
//! after [`Broker::all_up`]) and every request can be delayed by a
//! [round-trip time](Broker::round_trip_time).
//!
//! # One thread owns the cluster
//!
//! `MockCluster` holds a raw pointer and so is neither `Send` nor `Sync`. The
//! C functions behind it are in fact thread-safe (each posts an operation to
//! the mock cluster's own thread and waits for the answer), but rather than
//! assert that with `unsafe`, [`Broker`] keeps the cluster on a thread of its
//! own and talks to it over a channel: every method sends a [`Control`]
//! message and waits for the reply. The methods block only for as long as the
//! mock cluster takes to apply the change (microseconds), so they may be
//! called from async code too. Dropping the `Broker` stops the thread, which
//! destroys the cluster.
//!
//! # The `broker` subcommand
//!
//! `pool_worker broker` runs the same thing as a process: see
//! `pool_worker/src/cli/broker.rs`.
//!
//! # Settings the workers need against it
//!
//! The mock broker holds an empty fetch for the whole of the consumer's
//! `fetch.wait.max.ms` and does not answer it early when data arrives (a
//! real Kafka broker does). With the worker's default, Kafka's 500 ms, every
//! step of an order would wait up to half a second here. [`WORKER_ENV`] lists
//! what workers set against this broker, and only against it: `pool_worker
//! dev`, the integration tests and the benchmark set it, and `pool_worker
//! broker` prints it (on stderr, and as `worker_env` in the `--json` line)
//! for whoever starts workers by hand.

use anyhow::{anyhow, bail, Context as _};
use rdkafka::producer::Producer as _;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest number of brokers the subcommand starts (each is a listener and a
/// few threads; more is never useful for a mock).
pub(crate) const MAX_BROKERS: i32 = 16;

/// Largest partition count accepted for a topic.
pub(crate) const MAX_PARTITIONS: i32 = 1024;

/// The workers' environment against the embedded broker, and against it
/// only (see the module docs): consumers' empty fetches held 2 ms instead of
/// 500, which costs an idle worker a few per cent of a core (bench/RESULTS.md,
/// "Idle pool") and saves ~0.5 s per step of an order. Never a default: on a
/// real cluster it would make every idle instance send ~1,000 fetch requests
/// a second for nothing.
///
/// `CLAIMS_FENCE=settle`: librdkafka's mock cluster cannot fence a dead
/// process (docs/protocol.md R16): it gives a new producer of a
/// `transactional.id` a new producer id instead of bumping the epoch, writes
/// no transaction markers, and serves records of open and aborted
/// transactions to read_committed readers (pool_worker/tests/live/fence.rs). Workers
/// settle against it instead (R17, R18). Never a default either: on a real
/// cluster it costs `SETTLE_MS` after every crash.
pub const WORKER_ENV: &[(&str, &str)] =
    &[("KAFKA_FETCH_WAIT_MAX_MS", "2"), ("CLAIMS_FENCE", "settle")];

/// [`WORKER_ENV`] as `NAME=value NAME=value`, for people.
pub fn worker_env_line() -> String {
    WORKER_ENV
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A request to the thread that owns the mock cluster.
enum Control {
    CreateTopic {
        name: String,
        partitions: i32,
    },
    Down,
    Up,
    Rtt(Duration),
    Advertise {
        broker: i32,
        host: String,
        port: u16,
    },
    /// The next requests of one kind get these answers, one each
    /// (`NO_ERROR`: served as usual).
    Errors {
        request: rdkafka::types::RDKafkaApiKey,
        errors: Vec<rdkafka::types::RDKafkaRespErr>,
    },
}

/// The requests [`Broker::request_errors`] can fail, by their protocol name.
const FAILABLE_REQUESTS: &[(&str, rdkafka::types::RDKafkaApiKey)] = {
    use rdkafka::types::RDKafkaApiKey as K;
    &[
        ("Produce", K::Produce),
        ("InitProducerId", K::InitProducerId),
        ("AddPartitionsToTxn", K::AddPartitionsToTxn),
        ("EndTxn", K::EndTxn),
    ]
};

/// The answers [`Broker::request_errors`] can give, by their protocol name.
const INJECTABLE_ERRORS: &[(&str, rdkafka::types::RDKafkaRespErr)] = {
    use rdkafka::types::RDKafkaRespErr as E;
    &[
        ("NO_ERROR", E::RD_KAFKA_RESP_ERR_NO_ERROR),
        ("INVALID_TXN_STATE", E::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE),
        (
            "COORDINATOR_NOT_AVAILABLE",
            E::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        ),
        (
            "NOT_LEADER_FOR_PARTITION",
            E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        ),
    ]
};

type Reply = Result<(), String>;

/// The mock-broker thread: starts the cluster, reports its bootstrap list
/// on `ready`, then carries out the control commands until their channel
/// closes.
fn own_cluster(
    broker_count: i32,
    ready_tx: &mpsc::SyncSender<Result<String, String>>,
    ctl_rx: &mpsc::Receiver<(Control, mpsc::SyncSender<Reply>)>,
) {
    // The cluster belongs to a client configured to start one (rather than
    // `MockCluster::new`), so that its raw handle can be had for what the
    // wrapper does not offer (the advertised address).
    let client: rdkafka::producer::BaseProducer = match rdkafka::ClientConfig::new()
        .set("test.mock.num.brokers", broker_count.to_string())
        .create()
    {
        Ok(c) => c,
        Err(e) => {
            let _ = ready_tx.send(Err(format!("cannot start the mock cluster: {e}")));
            return;
        }
    };
    let Some(cluster) = client.client().mock_cluster() else {
        let _ = ready_tx.send(Err("cannot start the mock cluster".into()));
        return;
    };
    let bootstrap = cluster.bootstrap_servers();
    widen_backlogs(&bootstrap);
    let _ = ready_tx.send(Ok(bootstrap));
    // Replication never exceeds the broker count (and 3 is plenty).
    let replication = broker_count.min(3);
    while let Ok((op, reply)) = ctl_rx.recv() {
        let result = match op {
            Control::CreateTopic { name, partitions } => {
                cluster.create_topic(&name, partitions, replication)
            }
            Control::Down => cluster.broker_down(-1),
            // Up listens again, with librdkafka's backlog.
            Control::Up => cluster.broker_up(-1).inspect(|_| {
                widen_backlogs(&cluster.bootstrap_servers());
            }),
            Control::Rtt(d) => cluster.broker_round_trip_time(-1, d),
            Control::Advertise { broker, host, port } => advertise(&client, broker, &host, port),
            Control::Errors { request, errors } => {
                cluster.request_errors(request, &errors);
                Ok(())
            }
        };
        let _ = reply.send(result.map_err(|e| e.to_string()));
    }
    // The channel is closed: `cluster` is dropped here, which stops the
    // brokers.
}

/// An embedded Kafka cluster of one or more mock brokers on 127.0.0.1.
pub(crate) struct Broker {
    bootstrap: String,
    broker_count: i32,
    /// `None` once dropped; closing the channel ends the owner thread.
    ctl: Option<mpsc::Sender<(Control, mpsc::SyncSender<Reply>)>>,
    thread: Option<JoinHandle<()>>,
}

impl Broker {
    /// Starts `broker_count` brokers and creates `topics` (name, partitions).
    pub(crate) fn start(broker_count: i32, topics: &[(String, i32)]) -> anyhow::Result<Broker> {
        if !(1..=MAX_BROKERS).contains(&broker_count) {
            bail!("broker count must be between 1 and {MAX_BROKERS}, not {broker_count}");
        }
        let (ctl_tx, ctl_rx) = mpsc::channel::<(Control, mpsc::SyncSender<Reply>)>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<String, String>>(1);
        let thread = std::thread::Builder::new()
            .name("mock-broker".into())
            .spawn(move || own_cluster(broker_count, &ready_tx, &ctl_rx))
            .context("cannot start the mock broker thread")?;
        let bootstrap = match ready_rx.recv() {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                let _ = thread.join();
                bail!(e)
            }
            Err(_) => {
                let _ = thread.join();
                bail!("the mock broker thread ended before it started the cluster")
            }
        };
        let broker = Broker {
            bootstrap,
            broker_count,
            ctl: Some(ctl_tx),
            thread: Some(thread),
        };
        for (name, partitions) in topics {
            broker.create_topic(name, *partitions)?;
        }
        Ok(broker)
    }

    /// The `bootstrap.servers` list, e.g. `127.0.0.1:40123`.
    pub(crate) fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }

    /// Creates a topic (an error if it exists or the name is not a legal
    /// Kafka topic name).
    pub(crate) fn create_topic(&self, name: &str, partitions: i32) -> anyhow::Result<()> {
        check_topic_name(name).map_err(|e| anyhow!(e))?;
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            bail!(
                "topic {name}: partitions must be between 1 and {MAX_PARTITIONS}, not {partitions}"
            );
        }
        self.call(Control::CreateTopic {
            name: name.to_string(),
            partitions,
        })
        .with_context(|| format!("cannot create topic {name}"))
    }

    /// All brokers close their connections and refuse new ones.
    pub(crate) fn all_down(&self) -> anyhow::Result<()> {
        self.call(Control::Down)
    }

    /// All brokers accept connections again (on the same ports).
    pub(crate) fn all_up(&self) -> anyhow::Result<()> {
        self.call(Control::Up)
    }

    /// Every broker delays each response by `rtt` (zero to stop).
    pub(crate) fn round_trip_time(&self, rtt: Duration) -> anyhow::Result<()> {
        self.call(Control::Rtt(rtt))
    }

    /// Broker `broker` (1, 2, ...) tells clients to reach it at
    /// `host:port` instead of where it listens: for a TLS terminator in
    /// front of it (pool_worker/tests/live/e2e.rs, `the_pool_runs_orders_over_tls`), whose address clients must use for every
    /// connection, not only the first.
    pub(crate) fn advertise(&self, broker: i32, host: &str, port: u16) -> anyhow::Result<()> {
        if !(1..=self.broker_count).contains(&broker) {
            bail!("there is no broker {broker}");
        }
        self.call(Control::Advertise {
            broker,
            host: host.to_string(),
            port,
        })
    }

    /// The next requests named `request` (a Kafka protocol name: `EndTxn`,
    /// ...) are answered with `errors` (names: `INVALID_TXN_STATE`, ...),
    /// one each, in order; `NO_ERROR` serves one as usual. For the tests'
    /// faults (pool_worker/tests/live/faults.rs).
    pub(crate) fn request_errors(&self, request: &str, errors: &[&str]) -> anyhow::Result<()> {
        let Some(&(_, request)) = FAILABLE_REQUESTS.iter().find(|(n, _)| *n == request) else {
            let known: Vec<&str> = FAILABLE_REQUESTS.iter().map(|(n, _)| *n).collect();
            bail!("unknown request '{request}' (known: {})", known.join(", "));
        };
        let errors = errors
            .iter()
            .map(|e| match INJECTABLE_ERRORS.iter().find(|(n, _)| n == e) {
                Some(&(_, code)) => Ok(code),
                None => {
                    let known: Vec<&str> = INJECTABLE_ERRORS.iter().map(|(n, _)| *n).collect();
                    Err(anyhow!("unknown error '{e}' (known: {})", known.join(", ")))
                }
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.call(Control::Errors { request, errors })
    }

    fn call(&self, op: Control) -> anyhow::Result<()> {
        let ctl = self
            .ctl
            .as_ref()
            .ok_or_else(|| anyhow!("the broker is stopped"))?;
        let (tx, rx) = mpsc::sync_channel(1);
        ctl.send((op, tx))
            .map_err(|_| anyhow!("the mock broker thread has ended"))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(anyhow!(e)),
            Err(_) => Err(anyhow!("the mock broker thread has ended")),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.ctl = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sets a mock broker's advertised address, which rdkafka's wrapper does not
/// offer.
fn advertise(
    client: &rdkafka::producer::BaseProducer,
    broker: i32,
    host: &str,
    port: u16,
) -> rdkafka::error::KafkaResult<()> {
    use rdkafka::bindings as rd;
    let host = std::ffi::CString::new(host).map_err(|_| {
        rdkafka::error::KafkaError::MockCluster(rdkafka::types::RDKafkaErrorCode::InvalidArgument)
    })?;
    // SAFETY: the client is alive for the whole call and was configured with
    // `test.mock.num.brokers`, so it owns a mock cluster; the function copies
    // `host` and takes the cluster's lock.
    unsafe {
        let cluster = rd::rd_kafka_handle_mock_cluster(client.client().native_ptr());
        if cluster.is_null() {
            return Err(rdkafka::error::KafkaError::MockCluster(
                rdkafka::types::RDKafkaErrorCode::Fail,
            ));
        }
        rd::rd_kafka_mock_broker_set_host_port(cluster, broker, host.as_ptr(), i32::from(port));
    }
    Ok(())
}

/// The listen backlog the mock brokers get ([`widen_backlogs`]).
const LISTEN_BACKLOG: libc::c_int = 1024;

/// librdkafka's mock brokers listen with a backlog of 5 (rdkafka_mock.c).
/// When more connections arrive at once — worker processes restarting in a
/// burst open four clients each — the kernel drops the SYNs past it, and
/// each such client connects only after TCP's initial retransmission
/// timeout, 1 s: a worker stalled for a second at boot or before its first
/// claim (bench/RESULTS.md, issue 16; the kernel's ListenOverflows counter
/// rose in every burst). Linux lets a listening socket's backlog be raised
/// by calling `listen` on it again, so this finds the brokers' listening
/// sockets among this process's descriptors, by their ports, and gives
/// them [`LISTEN_BACKLOG`]. Returns how many it widened; best effort,
/// nothing changes where it fails.
pub(crate) fn widen_backlogs(bootstrap: &str) -> usize {
    let ports: Vec<u16> = bootstrap
        .split(',')
        .filter_map(|hp| hp.rsplit_once(':'))
        .filter_map(|(_, p)| p.parse().ok())
        .collect();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .filter(|&fd| listening_on(fd, &ports))
        // SAFETY: `listen` on a descriptor number; on a listening socket it
        // only sets the backlog.
        .filter(|&fd| unsafe { libc::listen(fd, LISTEN_BACKLOG) } == 0)
        .count()
}

/// Whether descriptor `fd` is a listening IPv4 socket on one of `ports`.
fn listening_on(fd: libc::c_int, ports: &[u16]) -> bool {
    let mut accepting: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the buffers are ours and their lengths are given; on a
    // descriptor that is not a socket (or no longer open) the calls fail.
    unsafe {
        if libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut accepting as *mut libc::c_int).cast(),
            &mut len,
        ) != 0
            || accepting == 0
        {
            return false;
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        let mut alen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_in).cast(), &mut alen) != 0
            || libc::c_int::from(addr.sin_family) != libc::AF_INET
        {
            return false;
        }
        ports.contains(&u16::from_be(addr.sin_port))
    }
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, not `.`/`..`.
pub(crate) fn check_topic_name(name: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty()
        || name.len() > 249
        || name == "."
        || name == ".."
        || !name.chars().all(legal)
    {
        return Err(format!(
            "'{name}' is not a legal topic name (1 to 249 characters of a-z, A-Z, 0-9, '.', '_', '-')"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::ClientConfig;

    #[test]
    fn topic_names() {
        assert!(check_topic_name("work_orders").is_ok());
        assert!(check_topic_name("a.b-c_9").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", "é", &"x".repeat(250)] {
            assert!(check_topic_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_broker_listens_with_the_wider_backlog() {
        let broker = Broker::start(3, &[]).unwrap();
        // Each broker's listening socket is found (by its port) and takes
        // the new backlog: again now, and again after down and up, which
        // listens anew.
        assert_eq!(widen_backlogs(&broker.bootstrap()), 3);
        broker.all_down().unwrap();
        broker.all_up().unwrap();
        assert_eq!(widen_backlogs(&broker.bootstrap()), 3);
        assert_eq!(widen_backlogs("127.0.0.1:1"), 0, "no broker there");
    }

    #[test]
    fn starts_creates_topics_and_toggles() {
        let broker = Broker::start(1, &[("t_orders".into(), 3), ("t_claims".into(), 1)]).unwrap();
        assert!(
            broker.bootstrap().starts_with("127.0.0.1:"),
            "{}",
            broker.bootstrap()
        );
        assert!(
            broker.create_topic("t_orders", 1).is_err(),
            "exists already"
        );
        assert!(broker.create_topic("bad name", 1).is_err());

        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .create()
            .unwrap();
        producer
            .send(BaseRecord::<str, str>::to("t_claims").payload("x"))
            .unwrap();
        producer.flush(Duration::from_secs(10)).unwrap();
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", broker.bootstrap())
            .set("group.id", "t")
            .create()
            .unwrap();
        assert_eq!(
            consumer
                .fetch_watermarks("t_claims", 0, Duration::from_secs(10))
                .unwrap(),
            (0, 1)
        );
        let md = consumer
            .fetch_metadata(Some("t_orders"), Duration::from_secs(10))
            .unwrap();
        assert_eq!(md.topics()[0].partitions().len(), 3);

        broker.round_trip_time(Duration::from_millis(5)).unwrap();
        broker.round_trip_time(Duration::ZERO).unwrap();
        broker.all_down().unwrap();
        broker.all_up().unwrap();
        assert_eq!(
            consumer
                .fetch_watermarks("t_claims", 0, Duration::from_secs(10))
                .unwrap(),
            (0, 1)
        );
    }

    #[test]
    fn bad_broker_counts() {
        assert!(Broker::start(0, &[]).is_err());
        assert!(Broker::start(MAX_BROKERS + 1, &[]).is_err());
    }
}
