//! `pool_worker dev`: the whole pool in one command, for trying it out.
//!
//! A newcomer should be able to see the pool work before they have a Kafka
//! cluster, topics or a supervisor. `pool_worker dev` puts the three pieces
//! the production deployment spreads over several machines into one process:
//!
//! 1. the embedded broker ([`crate::kafka::broker`]) on a free 127.0.0.1 port, with
//!    the orders topic and the one-partition claims topic created;
//! 2. the supervisor ([`crate::supervise`]), running `--instances` copies of
//!    this executable in worker mode (`KAFKA_BROKERS` pointing at the broker,
//!    `LEASE_MS=5000` and `SETTLE_MS=1000` unless set, so that takeovers and
//!    restarts after a crash are quick to watch);
//! 3. a reader of the claims topic that prints each record as it arrives, one
//!    readable line per record, so the negotiation can be watched live:
//!
//! ```text
//! supervisor  instance 2 started pid 41230
//! claims #0    2:booted      incarnation 5f1c9e
//! claims #1    2:claimed     order 0:0 attempt 1
//! claims #2    2:committed   order 0:0 attempt 1
//! claims #3    2:completed   order 0:0 ok exit 0 in 4 ms | hello from the pool
//! supervisor  instance 2 exited code 0 after 0.6s (restarts: 0)
//! ```
//!
//! It also prints the `kcat` commands that send an order and read the audit
//! trail, so that the next step, talking to the pool from outside, is one
//! paste away. It runs until Ctrl-C, then stops the workers and the broker
//! (whose topics live in memory only).
//!
//! With `--demo` it also sends a handful of sample orders (one that works,
//! one that fails, one malformed, one that times out, one naming a missing
//! program), waits at most `--demo-timeout-secs` (60) for a `completed` record of
//! each, prints a table of the results and the whole audit trail, and exits:
//! 0 if every order completed, 1 if the deadline passed first.
//!
//! Workers' own logs go to stderr prefixed `[i] ` (`--worker-output`), so
//! stdout shows only the story: supervisor events and claims records. With
//! `--json` every stdout line is a JSON object instead (see [`run`]).
//!
//! The claims trail is read with the pool's one claims reader
//! ([`crate::kafka::claims_reader`]): from the beginning (every record is printed), each
//! record judged by the same gate as the workers' (`CLAIMS_KEY`, possible
//! claims), so a record they skip shows as foreign.

use crate::cli::broker::TopicArgs;
use crate::cli::show::{clip, describe, first_line};
use crate::kafka::broker::Broker;
use crate::kafka::claims_reader::{Polled, Start};
use crate::kafka::tools::{PlainProducer, Source, SourceEnv};
use crate::process_exit::Exit;
use crate::process_exit::Signals;
use crate::record::Foreign;
use crate::record::{Event, OrderId, Record};
use crate::supervise::{ChildOutput, SupEvent, Supervisor, SupervisorConfig};
use anyhow::Context as _;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Most instances `dev` starts.
pub(crate) const MAX_DEV_INSTANCES: u32 = 64;

/// The lease for dev workers unless `LEASE_MS` is set: short, so a takeover
/// after a killed worker happens while you watch.
pub(crate) const DEV_LEASE_MS: &str = "5000";

/// The settling wait for dev workers unless `SETTLE_MS` is set: the
/// embedded broker is on loopback, where a killed worker's requests land
/// within milliseconds (docs/protocol.md R16).
pub(crate) const DEV_SETTLE_MS: &str = "1000";

/// The demo's sample orders: (what it shows, payload).
pub(crate) const DEMO_ORDERS: &[(&str, &str)] = &[
    ("a plain command line", "echo hello from the pool"),
    (
        "JSON, with the job's environment",
        r#"{"cmd":["sh","-c","echo order $ORDER_PARTITION:$ORDER_OFFSET ran on instance $INSTANCE_NUMBER"]}"#,
    ),
    ("a command that fails", "false"),
    (
        "stderr and an exit code",
        r#"sh -c "echo something went wrong >&2; exit 7""#,
    ),
    ("malformed: cmd must be a list", r#"{"cmd": 5}"#),
    (
        "runs past its time limit",
        r#"{"cmd":["sleep","5"],"timeout_secs":1}"#,
    ),
    (
        "an order naming a program that does not exist",
        "no-such-program --flag",
    ),
];

/// `pool_worker dev`: broker, supervisor and live audit trail in one process.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DevArgs {
    /// How many worker instances to run (numbered 1 to N).
    #[arg(long, default_value_t = 3)]
    pub(crate) instances: u32,
    /// Send sample orders, show their results and exit.
    #[arg(long)]
    pub(crate) demo: bool,
    /// How long --demo waits for its orders.
    #[arg(long, default_value_t = 60)]
    pub(crate) demo_timeout_secs: u64,
    #[command(flatten)]
    pub(crate) topics: TopicArgs,
    /// Where the workers' own stdout and stderr go.
    #[arg(long, value_enum, default_value_t = ChildOutput::Prefix)]
    pub(crate) worker_output: ChildOutput,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

impl DevArgs {
    /// Where the claims trail is read from: this pool's broker and topics.
    fn source(&self, addr: &str) -> anyhow::Result<Source> {
        Ok(Source {
            brokers: addr.to_string(),
            orders_topic: self.topics.orders_topic.clone(),
            coordination_topic: self.topics.coordination_topic.clone(),
            json: self.json,
            claims_key_file: crate::env::read_env::<SourceEnv>()?.claims_key_file,
            schedule_file: None,
        })
    }

    fn check(&self) -> Result<(), String> {
        if !(1..=MAX_DEV_INSTANCES).contains(&self.instances) {
            return Err(format!(
                "--instances must be between 1 and {MAX_DEV_INSTANCES}"
            ));
        }
        self.topics.check()
    }
}

/// One record of the claims topic as read: decoded and judged by the
/// pool's gate, and its bytes (shown for a foreign record).
#[derive(Clone, Debug)]
pub(crate) struct RawClaim {
    pub(crate) offset: i64,
    pub(crate) record: Result<Record, Foreign>,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
}

/// Runs `pool_worker dev`; returns the exit status.
///
/// With `--json`, stdout carries one object per line: `{"event":"ready",
/// "bootstrap":...}` first, then the supervisor's events (as `supervise
/// --json` prints them), `{"event":"record","offset":N,"key":"3:claimed",
/// "record":{...}}` for each claims record (`"foreign"` with the reason, raw
/// `key` and `value` instead of `record` for a record pool_worker did not
/// write), with `--demo` `{"event":"produced",...}` and `{"event":"result",
/// ...}`, and last `{"event":"done","code":N}`.
pub(crate) async fn run(args: DevArgs) -> anyhow::Result<Exit> {
    if let Err(e) = args.check() {
        eprintln!("pool_worker dev: {e}");
        return Ok(Exit::Config);
    }
    let mut stop = Signals::new()?;
    let out = Out { json: args.json };
    let broker = Broker::start(1, &args.topics.to_create())?;
    let addr = broker.bootstrap();
    out.banner(&args, &addr);
    let (claims_tx, claims) = mpsc::unbounded_channel();
    let source = args.source(&addr)?;
    let tail = tokio::task::spawn_blocking(move || tail_claims(&source, &claims_tx));
    // The workers' clean-exit markers (pool_worker/src/settle.rs) live as long as this
    // broker does: a directory of this run's own, unless STATE_DIR is set.
    let state_dir = std::env::var_os("STATE_DIR")
        .is_none()
        .then(|| std::env::temp_dir().join(format!("pool_worker-dev-{}", std::process::id())));
    let mut cfg = SupervisorConfig::new((1..=args.instances).collect())?;
    cfg.env = worker_env(&args, &addr, state_dir.as_deref());
    cfg.output = args.worker_output;
    let (sup, sup_events) = Supervisor::spawn(cfg);
    let mut pool = Pool {
        out,
        sup,
        sup_events,
        claims,
        trail: Vec::new(),
    };
    let mut demo = if args.demo {
        Some(Demo::send(&out, &addr, &args).await?)
    } else {
        None
    };
    let (code, sup_ended) = pool.watch(demo.as_mut(), &mut stop).await;
    if let Some(d) = &demo {
        out.results(&d.orders, &d.results);
        if !args.json {
            out.trail(&pool.trail);
        }
    }
    // Workers first (they need the broker to finish cleanly), then the rest.
    pool.stop(sup_ended).await;
    // The tail's consumer must be gone before the broker is, or librdkafka
    // reports the broker's disappearance as an error: the tail ends when
    // its receiver is gone.
    drop(pool.claims);
    let _ = tail.await;
    drop(broker);
    if let Some(dir) = &state_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    out.done(code);
    Ok(code)
}

/// The running pool as `dev` watches it: the supervisor and its events,
/// and the claims trail.
struct Pool {
    out: Out,
    sup: Supervisor,
    sup_events: mpsc::UnboundedReceiver<SupEvent>,
    claims: mpsc::UnboundedReceiver<RawClaim>,
    /// Every claims record read so far.
    trail: Vec<RawClaim>,
}

impl Pool {
    /// Prints what happens until a signal, the demo's end (every order
    /// completed, or its deadline), or the supervisor's: the exit status,
    /// and whether the supervisor ended by itself.
    async fn watch(&mut self, mut demo: Option<&mut Demo>, stop: &mut Signals) -> (Exit, bool) {
        let deadline = demo.as_ref().map(|d| d.deadline);
        loop {
            if demo.as_ref().is_some_and(|d| d.pending.is_empty()) {
                return (Exit::Ok, false);
            }
            tokio::select! {
                Some(event) = self.sup_events.recv() => self.out.sup_event(&event),
                Some(claim) = self.claims.recv() => {
                    self.out.claim(&claim);
                    if let (Some(d), Ok(rec)) = (demo.as_deref_mut(), &claim.record) {
                        d.seen(rec);
                    }
                    self.trail.push(claim);
                }
                () = sleep_until(deadline) => {
                    let d = demo.as_ref().map_or((0, 0), |d| (d.pending.len(), d.orders.len()));
                    self.out.note(&format!(
                        "the demo's deadline passed with {} of {} orders not completed",
                        d.0, d.1
                    ));
                    return (Exit::Failure, false);
                }
                ending = self.sup.wait() => {
                    // Every instance retired (e.g. a configuration error).
                    let code = match ending {
                        Ok(e) => e.exit_code(),
                        Err(e) => { self.out.note(&format!("the supervisor failed: {e:#}")); Exit::Failure }
                    };
                    self.out.note("no worker instance is left running");
                    return (code, true);
                }
                _ = stop.recv() => return (Exit::Ok, false),
            }
        }
    }

    /// Stops the workers (unless the supervisor `ended` by itself) and
    /// prints the last events.
    async fn stop(&mut self, ended: bool) {
        if !ended {
            self.out.note("stopping the workers");
            self.sup.stop();
            loop {
                tokio::select! {
                    Some(event) = self.sup_events.recv() => self.out.sup_event(&event),
                    ending = self.sup.wait() => {
                        if let Err(e) = ending {
                            self.out.note(&format!("the supervisor failed: {e:#}"));
                        }
                        break;
                    }
                }
            }
        }
        while let Ok(event) = self.sup_events.try_recv() {
            self.out.sup_event(&event);
        }
    }
}

/// `--demo`: the sample orders sent, and their completions as they come.
struct Demo {
    /// Each sample order and its payload.
    orders: BTreeMap<OrderId, &'static str>,
    /// Those not completed yet.
    pending: BTreeMap<OrderId, &'static str>,
    results: BTreeMap<OrderId, Record>,
    deadline: Instant,
}

impl Demo {
    /// Sends [`DEMO_ORDERS`] and says so.
    async fn send(out: &Out, addr: &str, args: &DevArgs) -> anyhow::Result<Demo> {
        let mut orders = BTreeMap::new();
        // To the main orders topic (the list's last, R57).
        let main = args.topics.orders()?.main_name().to_string();
        for (order, (_, payload)) in produce_demo(addr, &main)
            .await?
            .into_iter()
            .zip(DEMO_ORDERS)
        {
            out.produced(order, payload);
            orders.insert(order, *payload);
        }
        out.note(&format!(
            "sent {} sample orders; waiting up to {} s for their results",
            orders.len(),
            args.demo_timeout_secs
        ));
        Ok(Demo {
            pending: orders.clone(),
            orders,
            results: BTreeMap::new(),
            deadline: Instant::now() + Duration::from_secs(args.demo_timeout_secs),
        })
    }

    /// A claims record read: a completion of a sample order is its result.
    fn seen(&mut self, rec: &Record) {
        if rec.event() != Event::Completed {
            return;
        }
        if let Some(order) = rec.order() {
            if self.pending.remove(&order).is_some() {
                self.results.insert(order, rec.clone());
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The environment of the dev workers (on top of dev's own).
fn worker_env(
    args: &DevArgs,
    addr: &str,
    state_dir: Option<&std::path::Path>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env = vec![
        ("KAFKA_BROKERS", addr.to_string()),
        ("ORDERS_TOPIC", args.topics.orders_topic.clone()),
        ("COORDINATION_TOPIC", args.topics.coordination_topic.clone()),
    ];
    if let Some(r) = args.topics.results_topic() {
        env.push(("RESULTS_TOPIC", r.to_string()));
    }
    if std::env::var_os("LEASE_MS").is_none() {
        env.push(("LEASE_MS", DEV_LEASE_MS.to_string()));
    }
    if std::env::var_os("SETTLE_MS").is_none() {
        env.push(("SETTLE_MS", DEV_SETTLE_MS.to_string()));
    }
    // What the embedded broker needs (pool_worker/src/kafka/broker.rs), unless the user says
    // otherwise.
    for (k, v) in crate::kafka::broker::WORKER_ENV {
        if std::env::var_os(k).is_none() {
            env.push((k, v.to_string()));
        }
    }
    if let Some(dir) = state_dir {
        env.push(("STATE_DIR", dir.display().to_string()));
    }
    env.into_iter().map(|(k, v)| (k.into(), v.into())).collect()
}

/// Sends [`DEMO_ORDERS`] and returns where each landed.
async fn produce_demo(addr: &str, topic: &str) -> anyhow::Result<Vec<OrderId>> {
    let producer = PlainProducer::new(addr, Duration::from_secs(15))
        .context("cannot create the demo producer")?;
    let mut ids = Vec::new();
    for (_, payload) in DEMO_ORDERS {
        let order = producer
            .send(topic, payload)
            .await
            .context("cannot send a demo order")?;
        ids.push(order);
    }
    Ok(ids)
}

/// Reads the claims topic from the beginning and forwards every record until
/// the receiver is gone. Errors are librdkafka's transient ones (it
/// reconnects by itself) and are not fatal.
fn tail_claims(src: &crate::kafka::tools::Source, tx: &mpsc::UnboundedSender<RawClaim>) {
    let reader = match src.claims_reader(Start::Beginning) {
        Ok((r, _, _)) => r,
        Err(e) => {
            eprintln!("pool_worker dev: cannot read the claims topic: {e:#}");
            return;
        }
    };
    let live = || !tx.is_closed();
    while !tx.is_closed() {
        match reader.poll_raw(Duration::from_millis(100), &live) {
            Polled::Record(offset, raw) => {
                let claim = RawClaim {
                    offset: offset as i64,
                    record: raw.record,
                    key: raw.key,
                    value: raw.value,
                };
                if tx.send(claim).is_err() {
                    return;
                }
            }
            Polled::End | Polled::Nothing => {}
            Polled::Error(e) => eprintln!("pool_worker dev: claims reader: {e}"),
            Polled::Broken(p) => {
                eprintln!("pool_worker dev: claims reader: {p}");
                return;
            }
        }
    }
}

/// How the banner names this executable: `pool_worker` when that is what
/// the PATH finds (after `cargo install --path .`), else its full path, so
/// that every line pastes and runs as it is.
fn tool_program() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok());
    let on_path = crate::policy::find_in_path("pool_worker", std::env::var_os("PATH").as_deref())
        .and_then(|p| p.canonicalize().ok());
    match exe {
        Some(exe) if on_path.as_ref() != Some(&exe) => {
            shell_words::quote(&exe.display().to_string()).into_owned()
        }
        _ => "pool_worker".into(),
    }
}

/// The banner's lines for the tools, each with this pool's address (and
/// topics, when they are not the defaults) filled in, ready to paste into
/// another shell; `prog` names this executable.
pub(crate) fn tools_lines(args: &DevArgs, addr: &str, prog: &str) -> String {
    let mut env = format!("KAFKA_BROKERS={addr}");
    if args.topics.orders_topic != "work_orders" {
        env.push_str(&format!(" ORDERS_TOPIC={}", args.topics.orders_topic));
    }
    if args.topics.coordination_topic != "work_claims" {
        env.push_str(&format!(
            " COORDINATION_TOPIC={}",
            args.topics.coordination_topic
        ));
    }
    format!(
        "Talk to the pool with the tools (from another shell):\n\
         \x20 {env} {prog} submit --wait -- echo hello\n\
         \x20 {env} {prog} status\n\
         \x20 {env} {prog} history 0:0\n\
         \x20 {env} {prog} cancel 0:1 --reason \"not needed\"\n\
         \x20 {env} {prog} audit\n\
         \x20 {env} {prog} serve --listen 127.0.0.1:8080\n"
    )
}

/// One row of `--demo`'s results: order, what, instance, status, exit,
/// duration, output.
fn result_row(order: OrderId, payload: &str, rec: Option<&Record>) -> [String; 7] {
    let Some(rec) = rec else {
        return [
            order.to_string(),
            clip(payload, 40),
            "-".into(),
            "not completed".into(),
            "-".into(),
            "-".into(),
            String::new(),
        ];
    };
    let o = rec.outcome();
    let output = o
        .and_then(|o| {
            first_line(&o.stdout_tail)
                .or(o.reason.as_deref())
                .or(first_line(&o.stderr_tail))
        })
        .map_or(String::new(), |l| clip(l, 50));
    [
        order.to_string(),
        clip(payload, 40),
        rec.instance.to_string(),
        o.map_or("?".into(), |o| o.status.to_string()),
        o.and_then(|o| o.exit_code)
            .map_or("-".into(), |c| c.to_string()),
        o.map_or("-".into(), |o| format!("{} ms", o.duration_ms)),
        output,
    ]
}

/// The rows of `--demo`'s results as a table under a header.
fn results_table(rows: &[[String; 7]]) -> String {
    let header = [
        "order", "what", "instance", "status", "exit", "duration", "output",
    ]
    .map(String::from);
    let mut widths = [0usize; 7];
    for row in std::iter::once(&header).chain(rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let fmt_row = |row: &[String; 7]| {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        cells.join("  ").trim_end().to_string()
    };
    let mut text = format!("\nResults:\n{}\n", fmt_row(&header));
    for row in rows {
        text.push_str(&fmt_row(row));
        text.push('\n');
    }
    text
}

/// Everything `dev` prints to stdout, in text or JSON.
#[derive(Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    fn line(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn banner(&self, args: &DevArgs, addr: &str) {
        if self.json {
            self.line(
                &serde_json::json!({
                    "event": "ready", "bootstrap": addr, "orders_topic": args.topics.orders_topic,
                    "coordination_topic": args.topics.coordination_topic,
                    "results_topic": args.topics.results_topic(), "instances": args.instances,
                })
                .to_string(),
            );
            return;
        }
        let (orders, claims) = (&args.topics.orders_topic, &args.topics.coordination_topic);
        let plural = if args.topics.orders_partitions == 1 {
            ""
        } else {
            "s"
        };
        // With priorities (R57), kcat sends to one topic of the list: the
        // main one (the last) by default.
        let names: Vec<&str> = orders.split(',').map(str::trim).collect();
        let main = names.last().copied().unwrap_or(orders.as_str());
        let topics_line = if names.len() > 1 {
            format!(
                "orders topics {} (most urgent first; {p} partition{plural} each)",
                names.join(", "),
                p = args.topics.orders_partitions,
            )
        } else {
            format!(
                "orders topic  {orders} ({p} partition{plural})",
                p = args.topics.orders_partitions
            )
        };
        let mut text = format!(
            "pool_worker dev: an embedded Kafka broker and {n} worker instances\n\
             \n  bootstrap     {addr}\
             \n  {topics_line}\
             \n  claims topic  {claims} (1 partition)\n",
            n = args.instances,
        );
        if let Some(r) = args.topics.results_topic() {
            text.push_str(&format!("  results topic {r}\n"));
        }
        text.push_str(&format!(
            "\nSend an order:\n  echo 'echo hello' | kcat -P -b {addr} -t {main}\n\
             Read the audit trail:\n  kcat -C -b {addr} -t {claims} -f '%k %s\\n'\n\
             Run one more worker by hand:\n  KAFKA_BROKERS={addr} ORDERS_TOPIC={orders} \
             COORDINATION_TOPIC={claims} INSTANCE_NUMBER={next} {mock} {exe}\n\
             ({mock}: for this embedded broker only; a real Kafka cluster needs no such setting)\n",
            next = args.instances + 1,
            mock = crate::kafka::broker::worker_env_line(),
            exe = std::env::current_exe().map_or("pool_worker".into(), |p| p.display().to_string()),
        ));
        text.push_str(&tools_lines(args, addr, &tool_program()));
        if !args.demo {
            text.push_str("Stop with Ctrl-C.\n");
        }
        self.line(&text);
    }

    fn note(&self, text: &str) {
        if self.json {
            self.line(&serde_json::json!({"event": "note", "text": text}).to_string());
        } else {
            self.line(&format!("dev         {text}"));
        }
    }

    fn sup_event(&self, e: &SupEvent) {
        if self.json {
            self.line(&e.json_line());
        } else {
            self.line(&format!("supervisor  {}", e.human()));
        }
    }

    fn claim(&self, c: &RawClaim) {
        if !self.json {
            self.line(&format!(
                "claims #{:<4} {}",
                c.offset,
                describe(&c.record, c.key.as_deref(), c.value.as_deref())
            ));
            return;
        }
        let lossy =
            |b: &Option<Vec<u8>>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
        let v = match &c.record {
            Ok(rec) => serde_json::json!({
                "event": "record", "offset": c.offset, "key": rec.key(), "record": rec,
            }),
            Err(why) => serde_json::json!({
                "event": "record", "offset": c.offset, "key": lossy(&c.key),
                "value": lossy(&c.value), "foreign": why.to_string(),
            }),
        };
        self.line(&v.to_string());
    }

    fn produced(&self, order: OrderId, payload: &str) {
        if self.json {
            self.line(
                &serde_json::json!({"event": "produced", "order": order.to_string(), "payload": payload})
                    .to_string(),
            );
        } else {
            self.line(&format!("dev         sent order {order}: {payload}"));
        }
    }

    fn results(&self, orders: &BTreeMap<OrderId, &str>, results: &BTreeMap<OrderId, Record>) {
        let rows: Vec<[String; 7]> = orders
            .iter()
            .map(|(order, payload)| result_row(*order, payload, results.get(order)))
            .collect();
        if self.json {
            for (row, (order, _)) in rows.iter().zip(orders) {
                let rec = results.get(order);
                self.line(
                    &serde_json::json!({
                        "event": "result", "order": row[0], "payload": orders[order],
                        "instance": rec.map(|r| r.instance),
                        "outcome": rec.and_then(|r| r.outcome()),
                    })
                    .to_string(),
                );
            }
            return;
        }
        self.line(&results_table(&rows));
    }

    fn trail(&self, trail: &[RawClaim]) {
        let mut text = format!(
            "Audit trail ({} records of the claims topic):\n",
            trail.len()
        );
        for c in trail {
            text.push_str(&format!(
                "  #{:<4} {}\n",
                c.offset,
                describe(&c.record, c.key.as_deref(), c.value.as_deref())
            ));
        }
        self.line(&text);
    }

    fn done(&self, code: Exit) {
        let code = code.code();
        if self.json {
            self.line(&format!(r#"{{"event":"done","code":{code}}}"#));
        } else {
            self.line(&format!("dev         done (exit {code})"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_orders_are_what_they_say() {
        for (what, payload) in DEMO_ORDERS {
            let parsed = crate::orders::parse(Some(payload.as_bytes()));
            assert_eq!(
                parsed.is_err(),
                what.starts_with("malformed"),
                "{payload}: {parsed:?}"
            );
        }
        assert!((5..=8).contains(&DEMO_ORDERS.len()));
    }

    /// The banner's tool lines carry the address (issue 19, part 5).
    #[test]
    fn the_banner_shows_the_tools_with_the_address() {
        let mut args = DevArgs {
            instances: 3,
            demo: false,
            demo_timeout_secs: 60,
            topics: TopicArgs {
                orders_partitions: 1,
                orders_topic: "work_orders".into(),
                coordination_topic: "work_claims".into(),
                results_topic: None,
            },
            worker_output: ChildOutput::Prefix,
            json: false,
        };
        let text = tools_lines(&args, "127.0.0.1:4567", "pool_worker");
        for tool in [
            "submit --wait -- echo hello",
            "status",
            "history 0:0",
            "cancel 0:1 --reason \"not needed\"",
            "audit",
            "serve --listen 127.0.0.1:8080",
        ] {
            let line = format!("KAFKA_BROKERS=127.0.0.1:4567 pool_worker {tool}\n");
            assert!(text.contains(&line), "no `{line}` in:\n{text}");
        }
        args.topics.coordination_topic = "mine".into();
        let text = tools_lines(&args, "h:1", "pool_worker");
        assert!(
            text.contains("KAFKA_BROKERS=h:1 COORDINATION_TOPIC=mine pool_worker status\n"),
            "{text}"
        );
    }
}
