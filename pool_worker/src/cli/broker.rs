//! `pool_worker broker`: the embedded broker ([`crate::kafka::broker`]) as a process.
//!
//! `pool_worker broker` runs the same thing as a process, for tests in other
//! processes and for trying the pool by hand. It creates the topics, prints
//! one line with the bootstrap address, then obeys commands on standard
//! input, one per line, answering each with one line:
//!
//! ```text
//! down            -> ok down          all brokers refuse connections
//! up              -> ok up            and accept them again
//! rtt <ms>        -> ok rtt <ms>      delay every request by <ms>
//! create <topic> <partitions>  -> ok create <topic> <partitions>
//! errors <request> <error>...   -> ok errors ...   the next <request>s
//!                 (EndTxn, Produce, ...) get these answers, one each
//!                 (INVALID_TXN_STATE, ..., NO_ERROR: served as usual)
//! quit            -> ok quit          then exit 0
//! anything else   -> error <why>
//! ```
//!
//! End of input, SIGTERM and SIGINT also end it with status 0.
//!
//!
//! Standard input is read on a plain thread rather than with
//! `tokio::io::stdin`, whose blocking read cannot be cancelled and would
//! hold up the runtime's shutdown.

use crate::kafka::broker::{
    check_topic_name, worker_env_line, Broker, MAX_BROKERS, MAX_PARTITIONS, WORKER_ENV,
};
use crate::process_exit::Exit;
use crate::process_exit::Signals;
use std::io::Write as _;
use std::time::Duration;

/// The pool's topics, as `broker` and `dev` create them.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct TopicArgs {
    /// The orders topics to create, comma-separated, in priority order
    /// (the last is the main topic, R57) [env: ORDERS_TOPIC]
    #[arg(long, default_value = "work_orders", value_name = "TOPICS")]
    pub(crate) orders_topic: String,
    /// Partitions of each orders topic.
    #[arg(long, default_value_t = 1)]
    pub(crate) orders_partitions: i32,
    /// The coordination (claims) topic to create; always one partition
    /// [env: COORDINATION_TOPIC]
    #[arg(long, default_value = "work_claims")]
    pub(crate) coordination_topic: String,
    /// Also create this results topic (one partition; `dev` passes it to
    /// the workers) [env: RESULTS_TOPIC]
    #[arg(long)]
    pub(crate) results_topic: Option<String>,
}

impl TopicArgs {
    /// Flag over variable over default (see [`crate::env::flag_or_env`]).
    pub(crate) fn apply_env(
        &mut self,
        m: &clap::ArgMatches,
    ) -> Result<(), crate::env::ConfigError> {
        crate::config::TopicsEnv::apply(
            m,
            &mut self.orders_topic,
            &mut self.coordination_topic,
            &mut self.results_topic,
        )
    }

    /// The orders topics (`--orders-topic` / `ORDERS_TOPIC`), checked.
    pub(crate) fn orders(
        &self,
    ) -> Result<crate::orders_topics::OrdersTopics, crate::env::ConfigError> {
        crate::orders_topics::OrdersTopics::beside_claims(
            &self.orders_topic,
            &self.coordination_topic,
        )
    }

    /// The results topic, if one is named.
    pub(crate) fn results_topic(&self) -> Option<&str> {
        self.results_topic.as_deref().filter(|t| !t.is_empty())
    }

    /// The topics to create: (name, partitions).
    pub(crate) fn to_create(&self) -> Vec<(String, i32)> {
        // Every orders topic of the list (a bad list is `check`'s to refuse:
        // its names are created as given and refused there).
        let orders: Vec<String> = match self.orders() {
            Ok(o) => o.names().to_vec(),
            Err(_) => self
                .orders_topic
                .split(',')
                .map(|t| t.trim().to_string())
                .collect(),
        };
        let mut topics: Vec<(String, i32)> = orders
            .into_iter()
            .map(|t| (t, self.orders_partitions))
            .collect();
        topics.push((self.coordination_topic.clone(), 1));
        if let Some(r) = self.results_topic() {
            topics.push((r.to_string(), 1));
        }
        topics
    }

    /// Valid names, each once, and a partition count the broker takes.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !(1..=MAX_PARTITIONS).contains(&self.orders_partitions) {
            return Err(format!(
                "--orders-partitions must be between 1 and {MAX_PARTITIONS}"
            ));
        }
        let topics = self.to_create();
        for (i, (name, _)) in topics.iter().enumerate() {
            check_topic_name(name)?;
            if topics[..i].iter().any(|(n, _)| n == name) {
                return Err(format!("topic '{name}' is named twice"));
            }
        }
        Ok(())
    }
}

/// `pool_worker broker`: run the embedded broker as a process.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BrokerArgs {
    #[command(flatten)]
    pub(crate) topics: TopicArgs,
    /// Number of mock brokers.
    #[arg(long, default_value_t = 1)]
    pub(crate) brokers: i32,
    /// Print the bootstrap line as JSON: {"bootstrap":"127.0.0.1:PORT",
    /// "worker_env":{...}} (the settings workers need against this broker).
    #[arg(long)]
    pub(crate) json: bool,
    /// HOST:PORT, comma-separated, one per broker: the address each broker
    /// tells clients to use instead of its own (for a TLS terminator in
    /// front of it; see docs/deploy.md, "Trying TLS").
    #[arg(long, value_name = "HOST:PORT,...")]
    pub(crate) advertise: Option<String>,
}

impl BrokerArgs {
    /// `--advertise` as (host, port), one per broker.
    fn advertised(&self) -> Result<Vec<(String, u16)>, String> {
        let Some(list) = &self.advertise else {
            return Ok(Vec::new());
        };
        let out: Vec<(String, u16)> = list
            .split(',')
            .map(|a| {
                let (h, p) = a
                    .trim()
                    .rsplit_once(':')
                    .ok_or_else(|| format!("--advertise: '{a}' is not HOST:PORT"))?;
                let port = p
                    .parse()
                    .map_err(|_| format!("--advertise: bad port in '{a}'"))?;
                if h.is_empty() {
                    return Err(format!("--advertise: no host in '{a}'"));
                }
                Ok((h.to_string(), port))
            })
            .collect::<Result<_, String>>()?;
        if out.len() != self.brokers as usize {
            return Err(format!(
                "--advertise names {} addresses for {} brokers",
                out.len(),
                self.brokers
            ));
        }
        Ok(out)
    }

    fn check(&self) -> Result<(), String> {
        if !(1..=MAX_BROKERS).contains(&self.brokers) {
            return Err(format!("--brokers must be between 1 and {MAX_BROKERS}"));
        }
        self.advertised()?;
        self.topics.check()
    }
}

/// Runs `pool_worker broker`; returns the exit status.
pub(crate) async fn run(args: BrokerArgs) -> anyhow::Result<Exit> {
    if let Err(e) = args.check() {
        eprintln!("pool_worker broker: {e}");
        return Ok(Exit::Config);
    }
    // Handlers first, so that a signal right after the bootstrap line is seen.
    let mut stop = Signals::new()?;
    let broker = Broker::start(args.brokers, &args.topics.to_create())?;
    for (i, (host, port)) in args
        .advertised()
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        broker.advertise(i as i32 + 1, &host, port)?;
    }
    let bootstrap = broker.bootstrap();
    if args.json {
        let env: serde_json::Map<String, serde_json::Value> = WORKER_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        say(&serde_json::json!({ "bootstrap": bootstrap, "worker_env": env }).to_string());
    } else {
        say(&format!("bootstrap {bootstrap}"));
        // Standard output is the control channel (one line per command), so
        // the advice goes to stderr.
        eprintln!(
            "pool_worker broker: workers against this embedded broker need {} \
             (it holds empty fetches for the whole wait; never set it for a real Kafka cluster)",
            worker_env_line()
        );
    }

    let mut lines = stdin_lines();
    loop {
        let line = tokio::select! {
            line = lines.recv() => match line {
                Some(line) => line,
                None => break, // end of input
            },
            _ = stop.recv() => break,
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match obey(&broker, line) {
            Ok(Some(ack)) => say(&format!("ok {ack}")),
            Ok(None) => {
                say("ok quit");
                break;
            }
            Err(e) => say(&format!("error {e}")),
        }
    }
    drop(broker);
    Ok(Exit::Ok)
}

/// Applies one control command; `Ok(None)` is `quit`, `Ok(Some(ack))` names
/// what was done.
fn obey(broker: &Broker, line: &str) -> Result<Option<String>, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let err = |e: anyhow::Error| format!("{e:#}");
    match words.as_slice() {
        ["down"] => broker.all_down().map_err(err).map(|()| Some("down".into())),
        ["up"] => broker.all_up().map_err(err).map(|()| Some("up".into())),
        ["rtt", ms] => {
            let ms: u32 = ms
                .parse()
                .map_err(|_| format!("rtt wants milliseconds, not '{ms}'"))?;
            broker
                .round_trip_time(Duration::from_millis(ms.into()))
                .map_err(err)
                .map(|()| Some(format!("rtt {ms}")))
        }
        ["create", name, partitions] => {
            let p: i32 = partitions
                .parse()
                .map_err(|_| format!("create wants a partition count, not '{partitions}'"))?;
            broker
                .create_topic(name, p)
                .map_err(err)
                .map(|()| Some(format!("create {name} {p}")))
        }
        ["errors", request, errors @ ..] if !errors.is_empty() => broker
            .request_errors(request, errors)
            .map_err(err)
            .map(|()| Some(format!("errors {request} {}", errors.join(" ")))),
        ["quit"] => Ok(None),
        _ => Err(format!(
            "unknown command '{}' (expected down, up, rtt <ms>, create <topic> <partitions>, errors <request> <error>..., quit)",
            line.chars().take(80).collect::<String>()
        )),
    }
}

/// Writes one line to stdout and flushes it (a closed stdout is ignored: the
/// broker keeps serving whoever still uses it).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Standard input, line by line, read on a detached thread (see the module
/// docs). The channel closes at end of input or on a read error; lines that
/// are not UTF-8 are passed on lossily (and then refused as commands).
fn stdin_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let spawned = std::thread::Builder::new()
        .name("broker-stdin".into())
        .spawn(move || {
            use std::io::{BufRead as _, Read as _};
            let stdin = std::io::stdin();
            let mut input = stdin.lock();
            let mut buf = Vec::new();
            loop {
                buf.clear();
                // A control line is short; a longer one is cut (and refused).
                match (&mut input).take(4096).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx
                            .blocking_send(String::from_utf8_lossy(&buf).into_owned())
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        });
    if spawned.is_err() {
        // Without a reader the channel is closed at once: treated as end of
        // input, so the broker exits rather than running uncontrolled.
        let (_tx, rx) = tokio::sync::mpsc::channel(1);
        return rx;
    }
    rx
}
