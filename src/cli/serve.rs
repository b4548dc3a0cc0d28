//! `pool_worker serve --listen ADDR`: the pool on a web page a person keeps
//! open, `/metrics` for Prometheus, `/healthz` and `/readyz`.
//!
//! One process, read-only towards the pool. A thread tails the claims topic
//! with the pool's one claims reader ([`ClaimsReader`], from the beginning:
//! the page counts history; the same gate, so foreign records are skipped
//! as the workers skip them) and folds
//! every record into the core's [`View`], exactly as `status` does, plus
//! what the page needs beside it ([`Board`]): completions per minute,
//! latencies, the newest completions, the failed orders, each recent
//! order's records. Every two seconds it also reads the orders topic's
//! offsets, to count what is waiting (as `status` does).
//!
//! Times come from the records' `ts` (their writers' clocks). An order's
//! latency is from its first claim to its completion; an order whose claim
//! the replay did not see (compaction) counts its job's run time instead.
//!
//! Everything a record or a job's output says is attacker-controlled (anyone
//! who can write the orders topic writes jobs), so every such string goes
//! through [`esc`] (controls shown escaped as `status` shows them, then
//! HTML-escaped) before it is written into a page. The page's script only
//! fetches server-made HTML: it builds nothing from data.

use crate::backoff::Backoff;
use crate::boot::View;
use crate::claims::{ClaimsReader, Polled, Start};
use crate::cli::show::escape_controls;
use crate::cli::source::Source;
use crate::record::{Event, Foreign, OrderId, Record, Status};
use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};
use rdkafka::consumer::BaseConsumer;
use rdkafka::Message;
use serde_json::json;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0: any free port). The bound address is
    /// the first line printed on stdout [env: SERVE_LISTEN]
    #[arg(long, default_value = "127.0.0.1:9095")]
    pub(crate) listen: String,
    #[command(flatten)]
    pub(crate) source: Source,
}

/// `serve`'s own variable (flag over variable over default: see
/// `Command::apply_env`).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(crate) struct ServeEnv {
    #[serde(deserialize_with = "crate::config::parse::text")]
    pub(crate) serve_listen: Option<String>,
}

/// Upper bounds (seconds) of the latency histogram's buckets.
pub(crate) const LATENCY_BUCKETS: [f64; 14] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// Newest completions kept for the page.
const NEWEST: usize = 15;
/// Failed orders kept for the page.
const FAILED: usize = 100;
/// Orders whose records are kept for their page; older ones are read
/// again from the claims topic when asked for.
const STORIES: usize = 2000;
/// Records kept per order (a long job renews its lease again and again);
/// an order with more is read again from the claims topic when asked for.
const STORY_RECORDS: usize = 1000;
/// Minutes shown in the completions chart.
const MINUTES: u64 = 30;
/// How often the orders topic's offsets are read.
const ORDERS_REFRESH: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: String,
}

/// The Prometheus metrics (names: `pool_worker_` and what each is
/// registered as; counters get `_total`, units `_seconds`).
struct Metrics {
    registry: Registry,
    completed: Family<StatusLabel, Counter>,
    waiting: Gauge,
    running: Gauge,
    oldest_waiting: Gauge<f64, AtomicU64>,
    instances: Family<StateLabel, Gauge>,
    takeovers: Counter,
    retries: Counter,
    records: Family<EventLabel, Counter>,
    latency: Histogram,
}

const COMPLETED_HELP: &str =
    "Orders completed, by status (ok, failed, timed_out, error, refused, duplicate, gave_up, deleted, cancelled)";

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registry::with_prefix("pool_worker");
        Metrics {
            completed: registered(
                &mut r,
                "orders_completed",
                COMPLETED_HELP,
                None,
                Family::default(),
            ),
            waiting: registered(
                &mut r,
                "orders_waiting",
                "Orders in the orders topic beyond the claimed frontier",
                None,
                Gauge::default(),
            ),
            running: registered(
                &mut r,
                "orders_running",
                "Orders whose holder committed and has not completed them",
                None,
                Gauge::default(),
            ),
            oldest_waiting: registered(
                &mut r,
                "oldest_waiting_age",
                "Age of the oldest waiting order (0 when none waits)",
                Some(Unit::Seconds),
                Gauge::default(),
            ),
            instances: registered(
                &mut r,
                "instances",
                "Instances by state (idle, negotiating, running)",
                None,
                Family::default(),
            ),
            takeovers: registered(
                &mut r,
                "takeovers",
                "Claims that took over an expired holder's order",
                None,
                Counter::default(),
            ),
            retries: registered(
                &mut r,
                "retries",
                "Runs of an order after its first attempt (committed with attempt > 1)",
                None,
                Counter::default(),
            ),
            records: registered(
                &mut r,
                "claims_records",
                "Claims topic records read, by event (foreign: not the pool's)",
                None,
                Family::default(),
            ),
            latency: registered(
                &mut r,
                "order_latency",
                "From an order's first claim to its completion",
                Some(Unit::Seconds),
                Histogram::new(LATENCY_BUCKETS.iter().copied()),
            ),
            registry: r,
        }
    }
}

/// `metric`, registered in `r` as `name` (in `unit`, if any).
fn registered<M: Metric + Clone>(
    r: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    metric: M,
) -> M {
    match unit {
        Some(unit) => r.register_with_unit(name, help, unit, metric.clone()),
        None => r.register(name, help, metric.clone()),
    }
    metric
}

/// One completion, as the page lists it.
#[derive(Clone, Debug)]
pub(crate) struct Done {
    pub(crate) order: OrderId,
    pub(crate) instance: u32,
    pub(crate) status: Status,
    pub(crate) ts: u64,
    pub(crate) latency_ms: u64,
    pub(crate) exit_code: Option<i32>,
    pub(crate) reason: String,
}

/// The claims topic folded: the core's [`View`] and what the page and the
/// metrics add to it. No I/O: records, positions and times in.
pub(crate) struct Board {
    pub(crate) view: View,
    metrics: Metrics,
    /// Records read (all, foreign ones too).
    pub(crate) records: u64,
    /// The claims topic's end when the tail started; ready once read to it.
    pub(crate) start_end: Option<u64>,
    pub(crate) caught_up: bool,
    /// The orders topic was read at least once.
    pub(crate) orders_read: bool,
    pub(crate) by_status: BTreeMap<&'static str, u64>,
    /// An order's first claim's `ts`, until it completes.
    first_claim: HashMap<OrderId, u64>,
    /// Each instance's hold's claim `ts` (since when it holds it).
    claim_since: HashMap<u32, u64>,
    /// Completions per minute (`ts` / 60 000).
    per_minute: BTreeMap<u64, u64>,
    /// Completions per latency bucket (the last one: above all bounds).
    latency_counts: [u64; LATENCY_BUCKETS.len() + 1],
    pub(crate) newest: VecDeque<Done>,
    pub(crate) failed: VecDeque<Done>,
    /// Records about each recent order, in log order, as `history` lists them.
    stories: HashMap<OrderId, Vec<(u64, Record)>>,
    story_order: VecDeque<OrderId>,
    /// Orders with more than [`STORY_RECORDS`] records.
    too_long: std::collections::HashSet<OrderId>,
    pub(crate) orders_in_topic: i64,
    pub(crate) waiting: i64,
    pub(crate) oldest_waiting_ts: Option<i64>,
}

impl Default for Board {
    fn default() -> Self {
        Board::new()
    }
}

impl Board {
    pub(crate) fn new() -> Board {
        Board {
            view: View::new(),
            metrics: Metrics::new(),
            records: 0,
            start_end: None,
            caught_up: false,
            orders_read: false,
            by_status: BTreeMap::new(),
            first_claim: HashMap::new(),
            claim_since: HashMap::new(),
            per_minute: BTreeMap::new(),
            latency_counts: [0; LATENCY_BUCKETS.len() + 1],
            newest: VecDeque::new(),
            failed: VecDeque::new(),
            stories: HashMap::new(),
            story_order: VecDeque::new(),
            too_long: Default::default(),
            orders_in_topic: 0,
            waiting: 0,
            oldest_waiting_ts: None,
        }
    }

    /// Folds the record at `pos` (or a foreign one) in: the same rule as
    /// `status` (a completion counts when the view applies it).
    pub(crate) fn apply(&mut self, pos: u64, r: Result<Record, Foreign>) {
        self.records += 1;
        if let Some(end) = self.start_end {
            self.caught_up |= pos + 1 >= end;
        }
        let rec = match r {
            Ok(rec) => rec,
            Err(_) => {
                self.view.skip(pos);
                self.metrics
                    .records
                    .get_or_create(&EventLabel {
                        event: "foreign".into(),
                    })
                    .inc();
                return;
            }
        };
        self.metrics
            .records
            .get_or_create(&EventLabel {
                event: rec.event().as_str().into(),
            })
            .inc();
        let applied = self.view.apply(pos, &rec).is_ok();
        let order = rec.order();
        if applied {
            match (rec.event(), order) {
                (Event::Claimed, Some(o)) => {
                    self.first_claim.entry(o).or_insert(rec.ts);
                    self.claim_since.insert(rec.instance, rec.ts);
                    if !rec.takeover_of().is_empty() {
                        self.metrics.takeovers.inc();
                    }
                }
                (Event::Committed, Some(_)) if rec.attempt() > 1 => {
                    self.metrics.retries.inc();
                }
                (Event::Completed, Some(o)) => self.completed(o, &rec),
                _ => {}
            }
        }
        if let Some(o) = order {
            if !self.stories.contains_key(&o) {
                self.story_order.push_back(o);
                if self.story_order.len() > STORIES {
                    if let Some(old) = self.story_order.pop_front() {
                        self.stories.remove(&old);
                        self.too_long.remove(&old);
                    }
                }
            }
            let story = self.stories.entry(o).or_default();
            if story.len() < STORY_RECORDS {
                story.push((pos, rec));
            } else {
                self.too_long.insert(o);
            }
        }
    }

    fn completed(&mut self, order: OrderId, rec: &Record) {
        let status = rec.outcome().map_or(Status::Error, |o| o.status);
        *self.by_status.entry(status.as_str()).or_default() += 1;
        self.metrics
            .completed
            .get_or_create(&StatusLabel {
                status: status.as_str().into(),
            })
            .inc();
        let latency_ms = match self.first_claim.remove(&order) {
            Some(t) => rec.ts.saturating_sub(t),
            None => rec.outcome().map_or(0, |o| o.duration_ms),
        };
        let secs = latency_ms as f64 / 1000.0;
        self.metrics.latency.observe(secs);
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.latency_counts[bucket] += 1;
        let minute = rec.ts / 60_000;
        *self.per_minute.entry(minute).or_default() += 1;
        let newest = self
            .per_minute
            .keys()
            .next_back()
            .copied()
            .unwrap_or(minute);
        while self
            .per_minute
            .first_key_value()
            .is_some_and(|(m, _)| *m + 2 * MINUTES < newest)
        {
            self.per_minute.pop_first();
        }
        let outcome = rec.outcome();
        let done = Done {
            order,
            instance: rec.instance,
            status,
            ts: rec.ts,
            latency_ms,
            exit_code: outcome.and_then(|o| o.exit_code),
            reason: outcome.map(reason_of).unwrap_or_default(),
        };
        if status != Status::Ok {
            self.failed.push_front(done.clone());
            self.failed.truncate(FAILED);
        }
        self.newest.push_front(done);
        self.newest.truncate(NEWEST);
    }

    /// The records about `order` this process kept, if it kept them.
    pub(crate) fn story(&self, order: OrderId) -> Option<&[(u64, Record)]> {
        if self.too_long.contains(&order) {
            return None;
        }
        self.stories.get(&order).map(Vec::as_slice)
    }

    /// Each instance as the page shows it: number, state, order, since
    /// (ts), newest lease or decision (ts), attempt.
    pub(crate) fn instances(&self) -> Vec<InstanceRow> {
        self.view
            .instances()
            .map(|(i, s)| {
                let (state, order, since, last) = match &s.hold {
                    None => ("idle", None, Some(s.idle_ts).filter(|t| *t > 0), None),
                    Some(h) => (
                        if h.committed.is_none() {
                            "negotiating"
                        } else {
                            "running"
                        },
                        Some(h.order),
                        Some(self.claim_since.get(&i).copied().unwrap_or(h.last_ts)),
                        Some(h.last_ts),
                    ),
                };
                InstanceRow {
                    instance: i,
                    state,
                    order,
                    since_ts: since,
                    lease_ts: last,
                    attempt: s.hold.as_ref().map(|h| h.attempt),
                    last: s
                        .last_completed
                        .as_ref()
                        .map(|(o, _, _, out)| (*o, out.status)),
                }
            })
            .collect()
    }

    /// Completions in each of the `MINUTES` minutes up to `now_ms`'s, oldest first.
    pub(crate) fn per_minute(&self, now_ms: u64) -> Vec<(u64, u64)> {
        let now = now_ms / 60_000;
        (now.saturating_sub(MINUTES - 1)..=now)
            .map(|m| (m, self.per_minute.get(&m).copied().unwrap_or(0)))
            .collect()
    }

    pub(crate) fn completed_total(&self) -> u64 {
        self.by_status.values().sum()
    }

    pub(crate) fn not_ok_total(&self) -> u64 {
        self.completed_total() - self.by_status.get("ok").copied().unwrap_or(0)
    }

    /// The metrics in the OpenMetrics text format, gauges set as of `now_ms`.
    pub(crate) fn metrics_text(&self, now_ms: u64) -> String {
        let m = &self.metrics;
        m.waiting.set(self.waiting);
        let rows = self.instances();
        let count = |s: &str| rows.iter().filter(|r| r.state == s).count() as i64;
        m.running.set(count("running"));
        for s in ["idle", "negotiating", "running"] {
            m.instances
                .get_or_create(&StateLabel { state: s.into() })
                .set(count(s));
        }
        m.oldest_waiting.set(
            self.oldest_waiting_age_ms(now_ms)
                .map_or(0.0, |a| a as f64 / 1000.0),
        );
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &m.registry);
        out
    }

    pub(crate) fn oldest_waiting_age_ms(&self, now_ms: u64) -> Option<u64> {
        self.oldest_waiting_ts
            .map(|t| (now_ms as i64 - t).max(0) as u64)
    }
}

/// Why an order did not end well, in one line: its reason, else its
/// stderr's or stdout's last line.
fn reason_of(o: &crate::record::Outcome) -> String {
    if let Some(r) = o.reason.as_deref().filter(|r| !r.trim().is_empty()) {
        return r.to_string();
    }
    if o.status == Status::Ok {
        return String::new();
    }
    let last = |t: &str| {
        t.lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(str::to_string)
    };
    last(&o.stderr_tail)
        .or_else(|| last(&o.stdout_tail))
        .unwrap_or_else(|| match o.exit_code {
            Some(c) => format!("exit {c}"),
            None => String::new(),
        })
}

pub(crate) struct InstanceRow {
    pub(crate) instance: u32,
    pub(crate) state: &'static str,
    pub(crate) order: Option<OrderId>,
    pub(crate) since_ts: Option<u64>,
    pub(crate) lease_ts: Option<u64>,
    pub(crate) attempt: Option<u32>,
    pub(crate) last: Option<(OrderId, Status)>,
}

// ------------------------------------------------------------------ the tail

/// The claims topic, folded into `board` for as long as the process runs;
/// the orders topic's offsets read every [`ORDERS_REFRESH`].
fn tail(src: Source, board: Arc<Mutex<Board>>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let (reader, orders) = loop {
        let opened = ClaimsReader::open(&src, Start::Beginning)
            .and_then(|(t, _, _)| Ok((t.end(Duration::from_secs(30))?, t)))
            .and_then(|(end, t)| Ok((end, t, src.consumer()?)));
        match opened {
            Ok((end, t, c)) => {
                let mut b = lock(&board);
                b.start_end = Some(end);
                b.caught_up = end == 0;
                break (t, c);
            }
            Err(e) => {
                tracing::warn!("serve: cannot read the claims topic yet: {e:#}");
                backoff.wait_blocking();
            }
        }
    };
    let mut next_refresh = Instant::now();
    let mut was_caught_up = false;
    loop {
        let caught_up = {
            let polled = reader.poll(Duration::from_millis(200), &|| true);
            let mut b = lock(&board);
            match polled {
                Polled::Record(pos, r) => b.apply(pos, r),
                Polled::End => b.caught_up = true,
                Polled::Nothing => {}
                Polled::Error(e) => crate::claims::say_error(&e),
            }
            b.caught_up
        };
        // Count the waiting orders at once when the replay catches up.
        if Instant::now() >= next_refresh || caught_up != was_caught_up {
            was_caught_up = caught_up;
            refresh_orders(&src, &orders, &board);
            next_refresh = Instant::now() + ORDERS_REFRESH;
        }
    }
}

fn lock(board: &Mutex<Board>) -> std::sync::MutexGuard<'_, Board> {
    board.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waiting orders and the oldest one's timestamp, as `status` counts them:
/// beyond the view's frontier, per partition.
fn refresh_orders(
    src: &Source,
    c: &BaseConsumer<crate::cli::source::Silent>,
    board: &Mutex<Board>,
) {
    let offsets = match src.order_offsets(c, Duration::from_secs(5)) {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("serve: cannot read the orders topic's offsets: {e:#}");
            return;
        }
    };
    // Counted against the frontier as of now; the page is ready once a
    // count was made against a caught-up view.
    let (next, caught_up) = {
        let b = lock(board);
        (b.view.frontier().clone(), b.caught_up)
    };
    let w = src.waiting(c, &offsets, |p| next.get(&p).copied().unwrap_or(0));
    let mut b = lock(board);
    b.orders_in_topic = w.in_topic;
    b.waiting = w.waiting;
    b.oldest_waiting_ts = w.oldest_ts;
    b.orders_read |= caught_up;
}

/// The message at one offset of `topic`: its timestamp and payload, if it
/// can be read within a few seconds.
fn read_message(
    c: &BaseConsumer<crate::cli::source::Silent>,
    topic: &str,
    p: i32,
    offset: i64,
) -> Option<(Option<i64>, Vec<u8>)> {
    let m = crate::cli::source::message_at(c, topic, p, offset, Duration::from_secs(5))
        .filter(|m| m.offset() == offset)?;
    Some((
        m.timestamp().to_millis(),
        m.payload().unwrap_or_default().to_vec(),
    ))
}

// ------------------------------------------------------------------ the web

#[derive(Clone)]
struct App {
    board: Arc<Mutex<Board>>,
    src: Source,
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<crate::exit::Exit> {
    // Configuration errors (a bad key, a rejected property) before listening.
    args.source.gate()?;
    args.source.client_config()?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{addr}");
        let _ = out.flush();
    }
    tracing::info!("serve: http://{addr}/ (metrics: /metrics, health: /healthz, /readyz)");
    let board = Arc::new(Mutex::new(Board::new()));
    let (src, b) = (args.source.clone(), board.clone());
    std::thread::Builder::new()
        .name("claims-tail".into())
        .spawn(move || tail(src, b))?;
    let app = App {
        board,
        src: args.source,
    };
    let router = Router::new()
        .route("/", get(page))
        .route("/live", get(live))
        .route("/api/state", get(state))
        .route("/order/{id}", get(order_page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "up\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/style.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE) }),
        )
        .route(
            "/live.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    SCRIPT,
                )
            }),
        )
        .with_state(app);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(crate::exit::Exit::Ok)
}

const STYLE: &str = include_str!("serve/style.css");
const SCRIPT: &str = include_str!("serve/live.js");

async fn metrics(State(app): State<App>) -> Response {
    let text = lock(&app.board).metrics_text(crate::run::now_ms());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn readyz(State(app): State<App>) -> Response {
    let b = lock(&app.board);
    if b.caught_up && b.orders_read {
        (StatusCode::OK, "ready\n".to_string()).into_response()
    } else {
        let why = match b.start_end {
            None => "not connected to the claims topic yet".to_string(),
            Some(end) if !b.caught_up => format!(
                "catching up: {} of {} claims records read",
                b.view.end(),
                end
            ),
            Some(_) => "the orders topic not read yet".to_string(),
        };
        (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
    }
}

async fn state(State(app): State<App>) -> Response {
    let now = crate::run::now_ms();
    let b = lock(&app.board);
    let instances: Vec<serde_json::Value> = b
        .instances()
        .iter()
        .map(|r| {
            json!({"instance": r.instance, "state": r.state, "order": r.order.map(|o| o.to_string()),
                   "since_ts": r.since_ts, "lease_ts": r.lease_ts, "attempt": r.attempt})
        })
        .collect();
    let done = |d: &Done| {
        json!({"order": d.order.to_string(), "instance": d.instance, "status": d.status.as_str(), "ts": d.ts,
               "latency_ms": d.latency_ms, "exit_code": d.exit_code, "reason": d.reason})
    };
    let v = json!({
        "ready": b.caught_up && b.orders_read,
        "claims_records": b.records,
        "orders_in_topic": b.orders_in_topic,
        "waiting": b.waiting,
        "running": instances.iter().filter(|i| i["state"] == "running").count(),
        "completed": b.completed_total(),
        "not_ok": b.not_ok_total(),
        "by_status": b.by_status,
        "oldest_waiting_age_ms": b.oldest_waiting_age_ms(now),
        "instances": instances,
        "newest": b.newest.iter().map(done).collect::<Vec<_>>(),
        "failed": b.failed.iter().map(done).collect::<Vec<_>>(),
        "per_minute": b.per_minute(now).iter().map(|(m, n)| json!([m * 60_000, n])).collect::<Vec<_>>(),
    });
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

async fn page(State(app): State<App>) -> Html<String> {
    let body = {
        let b = lock(&app.board);
        render_live(&b, crate::run::now_ms())
    };
    Html(layout(
        "pool_worker",
        &format!(
            "<header><h1>pool_worker</h1><span class=\"src\">{} · orders <b>{}</b> · claims <b>{}</b></span></header>\
             <main id=\"live\">{body}</main><script src=\"/live.js\"></script>",
            esc(&app.src.brokers),
            esc(&app.src.orders_topic),
            esc(&app.src.coordination_topic)
        ),
    ))
}

async fn live(State(app): State<App>) -> Html<String> {
    let b = lock(&app.board);
    Html(render_live(&b, crate::run::now_ms()))
}

async fn order_page(State(app): State<App>, Path(id): Path<String>) -> Response {
    let order: OrderId = match id.parse() {
        Ok(o) => o,
        Err(e) => {
            let body = format!(
                "<main><p class=\"err\">{}</p><p><a href=\"/\">back</a></p></main>",
                esc(&e)
            );
            return (StatusCode::BAD_REQUEST, Html(layout("bad order", &body))).into_response();
        }
    };
    let kept = {
        let b = lock(&app.board);
        match b.story(order) {
            Some(s) => Some(s.to_vec()),
            // Not claimed yet: nothing to read.
            None if order.offset >= b.view.next_offset(order.partition) => Some(Vec::new()),
            None => None,
        }
    };
    let src = app.src.clone();
    let fetched = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let story = match kept {
            Some(s) => s,
            // Not kept (an older order): read the claims topic as `history` does.
            None => crate::claims::read_all(&src)?
                .into_iter()
                .filter_map(|(p, r)| r.ok().map(|r| (p, r)))
                .filter(|(_, r)| r.order() == Some(order))
                .collect(),
        };
        let c = src.consumer()?;
        let text = read_message(&c, &src.orders_topic, order.partition, order.offset);
        Ok((story, text))
    })
    .await;
    let (story, text) = match fetched {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Html(layout(
                    "error",
                    &format!(
                        "<main><p class=\"err\">{}</p></main>",
                        esc(&format!("{e:#}"))
                    ),
                )),
            )
                .into_response()
        }
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, esc(&e.to_string())).into_response(),
    };
    let now = crate::run::now_ms();
    let code = if story.is_empty() && text.is_none() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    (
        code,
        Html(layout(
            &format!("order {order}"),
            &render_order(order, &story, text.as_ref().map(|t| t.1.as_slice()), now),
        )),
    )
        .into_response()
}

// ------------------------------------------------------------------ HTML

/// `s` as HTML text: control characters shown escaped (as `status` shows
/// them on a terminal), then `&`, `<`, `>`, `"` and `'` escaped.
pub(crate) fn esc(s: &str) -> String {
    html_escape::encode_quoted_attribute(&escape_controls(s, false)).into_owned()
}

/// Like [`esc`], keeping newlines and tabs (a job's output in a `<pre>`).
pub(crate) fn esc_lines(s: &str) -> String {
    html_escape::encode_quoted_attribute(&escape_controls(s, true)).into_owned()
}

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{}</title><link rel=\"stylesheet\" href=\"/style.css\"></head><body>{body}</body></html>",
        esc(title)
    )
}

/// `ts` (ms since the epoch) as HH:MM:SS UTC.
fn clock(ts: u64) -> String {
    let s = ts / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A duration in ms, short: 350 ms, 4.2 s, 3 min 5 s, 2 h 10 min.
fn age(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {} s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{} h {} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

fn status_class(s: &str) -> &'static str {
    match s {
        "ok" => "ok",
        "running" => "run",
        "negotiating" => "neg",
        "idle" => "idle",
        // An operator's decision, not a failure of the order.
        "cancelled" => "idle",
        _ => "bad",
    }
}

fn order_link(o: OrderId) -> String {
    format!("<a href=\"/order/{o}\">{o}</a>")
}

/// A bar chart as inline SVG: one bar per value, labels under some.
fn bars(values: &[(String, u64)], label_every: usize, title: &str, class: &str) -> String {
    let (w, h, top, bottom) = (560.0_f64, 150.0_f64, 18.0_f64, 22.0_f64);
    let max = values.iter().map(|v| v.1).max().unwrap_or(0).max(1);
    let n = values.len().max(1) as f64;
    let bw = w / n;
    let mut s = format!(
        "<svg class=\"chart {class}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\">",
        esc(title)
    );
    let _ = write!(s, "<text x=\"0\" y=\"12\" class=\"max\">max {max}</text>");
    let _ = write!(
        s,
        "<line x1=\"0\" y1=\"{y}\" x2=\"{w}\" y2=\"{y}\" class=\"axis\"/>",
        y = h - bottom
    );
    for (i, (label, v)) in values.iter().enumerate() {
        let bh = (h - top - bottom) * (*v as f64) / (max as f64);
        let x = i as f64 * bw;
        let _ = write!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{}: {v}</title></rect>",
            x + 1.0,
            h - bottom - bh,
            (bw - 2.0).max(1.0),
            bh,
            esc(label)
        );
        if label_every > 0 && i % label_every == 0 {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"lbl\">{}</text>",
                x + 1.0,
                h - 6.0,
                esc(label)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// The part of the page that updates live.
pub(crate) fn render_live(b: &Board, now: u64) -> String {
    let mut s = String::new();
    let rows = b.instances();
    let ready = b.caught_up && b.orders_read;
    let _ = write!(
        s,
        "<p class=\"meta\">{} · {} claims records · updated {} UTC</p>",
        if ready {
            "<span class=\"pill ok\">live</span>"
        } else {
            "<span class=\"pill neg\">catching up</span>"
        },
        b.records,
        clock(now)
    );
    totals(&mut s, b, &rows, now);
    charts(&mut s, b, now);
    // One row: the instances beside the newest completions.
    instances_panel(&mut s, &rows, now);
    newest_panel(&mut s, b);
    failed_panel(&mut s, b);
    if b.view.foreign > 0 {
        let _ = write!(
            s,
            "<p class=\"meta\">{} foreign claims records skipped</p>",
            b.view.foreign
        );
    }
    s
}

/// The cards of totals, then the completions by status.
fn totals(s: &mut String, b: &Board, rows: &[InstanceRow], now: u64) {
    let running = rows.iter().filter(|r| r.state == "running").count();
    let oldest = b.oldest_waiting_age_ms(now).map_or("–".to_string(), age);
    s.push_str("<section class=\"cards\">");
    let card = |s: &mut String, id: &str, v: String, k: &str, class: &str| {
        let _ = write!(s, "<div class=\"card {class}\"><div class=\"v\" id=\"{id}\">{v}</div><div class=\"k\">{k}</div></div>");
    };
    card(s, "waiting", b.waiting.to_string(), "waiting", "");
    card(s, "running", running.to_string(), "running", "");
    card(
        s,
        "completed",
        b.completed_total().to_string(),
        "completed",
        "",
    );
    card(
        s,
        "not-ok",
        b.not_ok_total().to_string(),
        "not ok",
        if b.not_ok_total() > 0 { "bad" } else { "" },
    );
    card(s, "oldest", esc(&oldest), "oldest waiting", "");
    card(
        s,
        "in-topic",
        b.orders_in_topic.to_string(),
        "orders in topic",
        "",
    );
    s.push_str("</section>");
    s.push_str("<p class=\"statuses\">");
    if b.by_status.is_empty() {
        s.push_str("no completions yet");
    }
    // ok first, then the others by name.
    let ok = b.by_status.get_key_value("ok");
    for (k, v) in ok
        .into_iter()
        .chain(b.by_status.iter().filter(|(k, _)| **k != "ok"))
    {
        let _ = write!(
            s,
            "<span class=\"pill {}\" id=\"status-{k}\">{k} {v}</span> ",
            status_class(k)
        );
    }
    s.push_str("</p>");
}

/// The completions per minute and the latency histogram.
fn charts(s: &mut String, b: &Board, now: u64) {
    let minutes: Vec<(String, u64)> = b
        .per_minute(now)
        .into_iter()
        .map(|(m, n)| (clock(m * 60_000)[..5].to_string(), n))
        .collect();
    let mut lat: Vec<(String, u64)> = LATENCY_BUCKETS
        .iter()
        .zip(b.latency_counts.iter())
        .map(|(le, n)| (format!("≤{}", short_secs(*le)), *n))
        .collect();
    lat.push((
        format!(
            ">{}",
            short_secs(LATENCY_BUCKETS[LATENCY_BUCKETS.len() - 1])
        ),
        b.latency_counts[LATENCY_BUCKETS.len()],
    ));
    let _ = write!(
        s,
        "<section class=\"row\"><div class=\"panel\"><h2>Completions per minute <small>last {MINUTES} min</small></h2>{}</div>\
         <div class=\"panel\"><h2>Latency <small>first claim → completion</small></h2>{}</div></section>",
        bars(&minutes, 5, "completions per minute", "c1"),
        bars(&lat, 2, "latency histogram", "c2")
    );
}

/// The instances' table (opens the row the newest completions close).
fn instances_panel(s: &mut String, rows: &[InstanceRow], now: u64) {
    s.push_str("<section class=\"row\"><div class=\"panel\"><h2>Instances</h2><table><thead><tr><th>#</th><th>state</th><th>order</th><th>since</th><th>lease age</th><th>last completion</th></tr></thead><tbody>");
    if rows.is_empty() {
        s.push_str("<tr><td colspan=\"6\" class=\"none\">no instance has booted</td></tr>");
    }
    for r in rows {
        let since = r.since_ts.map_or("–".into(), |t| {
            format!(
                "{} <small>({} ago)</small>",
                clock(t),
                age(now.saturating_sub(t))
            )
        });
        let lease = r
            .lease_ts
            .map_or("–".into(), |t| age(now.saturating_sub(t)));
        let order = r.order.map_or("–".into(), |o| {
            format!(
                "{}{}",
                order_link(o),
                r.attempt
                    .filter(|a| *a > 1)
                    .map_or(String::new(), |a| format!(" <small>attempt {a}</small>"))
            )
        });
        let last = r.last.map_or("–".into(), |(o, st)| {
            format!(
                "{} <span class=\"pill {}\">{st}</span>",
                order_link(o),
                status_class(st.as_str())
            )
        });
        let _ = write!(
            s,
            "<tr><td>{}</td><td><span class=\"pill {}\">{}</span></td><td>{order}</td><td>{since}</td><td>{lease}</td><td>{last}</td></tr>",
            r.instance,
            status_class(r.state),
            r.state
        );
    }
    s.push_str("</tbody></table></div>");
}

/// The newest completions' table (closes the row).
fn newest_panel(s: &mut String, b: &Board) {
    s.push_str("<div class=\"panel\"><h2>Newest completions</h2><table><thead><tr><th>order</th><th>status</th><th>instance</th><th>at</th><th>latency</th></tr></thead><tbody>");
    if b.newest.is_empty() {
        s.push_str("<tr><td colspan=\"5\" class=\"none\">none yet</td></tr>");
    }
    for d in &b.newest {
        let _ = write!(
            s,
            "<tr><td>{}</td><td><span class=\"pill {}\">{}</span></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            order_link(d.order),
            status_class(d.status.as_str()),
            d.status,
            d.instance,
            clock(d.ts),
            age(d.latency_ms)
        );
    }
    s.push_str("</tbody></table></div></section>");
}

/// The failed orders' table.
fn failed_panel(s: &mut String, b: &Board) {
    let _ = write!(s, "<section class=\"panel\"><h2>Failed orders <small>{} not ok; newest {} shown</small></h2><table id=\"failed\"><thead><tr><th>order</th><th>status</th><th>exit</th><th>instance</th><th>at</th><th>reason</th></tr></thead><tbody>", b.not_ok_total(), b.failed.len());
    if b.failed.is_empty() {
        s.push_str("<tr><td colspan=\"6\" class=\"none\">none</td></tr>");
    }
    for d in &b.failed {
        let _ = write!(
            s,
            "<tr><td>{}</td><td><span class=\"pill bad\">{}</span></td><td>{}</td><td>{}</td><td>{}</td><td class=\"reason\">{}</td></tr>",
            order_link(d.order),
            d.status,
            d.exit_code.map_or("–".into(), |c| c.to_string()),
            d.instance,
            clock(d.ts),
            esc(&clip(&d.reason, 200))
        );
    }
    s.push_str("</tbody></table></section>");
}

fn short_secs(s: f64) -> String {
    if s >= 60.0 {
        format!("{}m", s / 60.0)
    } else {
        format!("{s}s")
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(n - 1).collect();
        c.push('…');
        c
    }
}

/// An order's page: its text from the orders topic, its records as
/// `pool_worker history` prints them, and its completion's output.
pub(crate) fn render_order(
    order: OrderId,
    story: &[(u64, Record)],
    text: Option<&[u8]>,
    now: u64,
) -> String {
    let mut s =
        format!("<header><h1><a href=\"/\">pool_worker</a> › order {order}</h1></header><main>");
    let done = story
        .iter()
        .rev()
        .find(|(_, r)| r.event() == Event::Completed)
        .and_then(|(_, r)| r.outcome().map(|o| (r, o)));
    match done {
        Some((r, o)) => {
            let _ = write!(
                s,
                "<p class=\"statuses\"><span class=\"pill {}\" id=\"order-status\">{}</span> on instance {} at {} UTC ({} ago), job ran {}{}</p>",
                status_class(o.status.as_str()),
                o.status,
                r.instance,
                clock(r.ts),
                age(now.saturating_sub(r.ts)),
                age(o.duration_ms),
                o.exit_code.map_or(String::new(), |c| format!(", exit {c}"))
            );
            let reason = reason_of(o);
            if !reason.is_empty() {
                let _ = write!(s, "<p class=\"reason\">reason: {}</p>", esc(&reason));
            }
        }
        None if story.is_empty() => s.push_str("<p class=\"statuses\"><span class=\"pill idle\" id=\"order-status\">no record</span> no record about this order in the claims topic</p>"),
        None => s.push_str("<p class=\"statuses\"><span class=\"pill run\" id=\"order-status\">not completed</span></p>"),
    }
    s.push_str("<section class=\"panel\"><h2>Order</h2>");
    match text {
        Some(t) => {
            let t = String::from_utf8_lossy(&t[..t.len().min(64 * 1024)]);
            let _ = write!(s, "<pre id=\"order-text\">{}</pre>", esc_lines(&t));
        }
        None => s.push_str(
            "<p class=\"none\">not in the orders topic (deleted, or not written yet)</p>",
        ),
    }
    s.push_str("</section><section class=\"panel\"><h2>Story <small>as <code>pool_worker history</code> prints it</small></h2>");
    let mut out = Vec::new();
    crate::cli::status::print_history(&mut out, false, order, story, &[]);
    let _ = write!(
        s,
        "<pre id=\"story\">{}</pre></section>",
        esc_lines(&String::from_utf8_lossy(&out))
    );
    if let Some((_, o)) = done {
        for (name, tail) in [("stdout", &o.stdout_tail), ("stderr", &o.stderr_tail)] {
            if !tail.is_empty() {
                let _ = write!(s, "<section class=\"panel\"><h2>{name} <small>tail</small></h2><pre id=\"{name}\">{}</pre></section>", esc_lines(tail));
            }
        }
    }
    s.push_str("</main>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Outcome;

    const EVIL: &str = "<script>alert(1)</script>\"'&<img src=x onerror=alert(2)>\x1b[2J\u{202e}";

    fn board_with_a_failure() -> (Board, OrderId) {
        let o = OrderId::new(0, 7);
        let mut b = Board::new();
        b.apply(0, Ok(Record::of(1, Event::Booted, "inc", 1_000)));
        let mut claim = Record::of(1, Event::Claimed, "inc", 2_000).with_order(o);
        claim.seq = 1;
        claim.set_attempt(1);
        claim.next = BTreeMap::from([(0, 8)]);
        b.apply(1, Ok(claim));
        let mut commit = Record::of(1, Event::Committed, "inc", 2_100).with_order(o);
        commit.seq = 2;
        commit.set_attempt(1);
        b.apply(2, Ok(commit));
        let mut done = Record::of(1, Event::Completed, "inc", 5_000).with_order(o);
        done.seq = 3;
        done.set_attempt(1);
        done.set_outcome(Some(Outcome {
            status: Status::Failed,
            exit_code: Some(3),
            duration_ms: 2_800,
            reason: None,
            stdout_tail: EVIL.into(),
            stderr_tail: EVIL.into(),
            traceparent: None,
            retry_of: None,
        }));
        b.apply(3, Ok(done));
        b.apply(4, Err(Foreign::BadSignature));
        (b, o)
    }

    /// Counts, latency from the first claim, and the metrics' names.
    #[test]
    fn the_board_counts_what_the_records_say() {
        let (b, o) = board_with_a_failure();
        assert_eq!(b.by_status.get("failed"), Some(&1), "{:?}", b.by_status);
        assert_eq!(
            (b.completed_total(), b.not_ok_total(), b.records),
            (1, 1, 5)
        );
        let d = &b.failed[0];
        assert_eq!((d.order, d.latency_ms, d.exit_code), (o, 3_000, Some(3)));
        assert_eq!(b.view.foreign, 1);
        let m = b.metrics_text(10_000);
        for line in [
            "pool_worker_orders_completed_total{status=\"failed\"} 1",
            "pool_worker_claims_records_total{event=\"foreign\"} 1",
            "pool_worker_claims_records_total{event=\"completed\"} 1",
            "pool_worker_order_latency_seconds_count 1",
            "pool_worker_order_latency_seconds_bucket{le=\"5.0\"} 1",
            "pool_worker_order_latency_seconds_bucket{le=\"2.5\"} 0",
            "pool_worker_instances{state=\"idle\"} 1",
            "pool_worker_orders_running 0",
        ] {
            assert!(m.lines().any(|l| l == line), "no {line:?} in\n{m}");
        }
        assert_eq!(b.per_minute(60_000).iter().map(|(_, n)| n).sum::<u64>(), 1);
    }

    /// Job output and reasons reach the page as text, never as markup.
    #[test]
    fn job_output_is_escaped_on_every_page() {
        let (b, o) = board_with_a_failure();
        let live = render_live(&b, 10_000);
        let story: Vec<(u64, Record)> = b.story(o).unwrap().to_vec();
        assert_eq!(story.len(), 3, "claim, commit, completion");
        let order = render_order(o, &story, Some(EVIL.as_bytes()), 10_000);
        for page in [&live, &order] {
            assert!(
                !page.contains("<script")
                    && !page.contains("<img")
                    && !page.contains('\x1b')
                    && !page.contains('\u{202e}'),
                "{page}"
            );
        }
        assert!(
            live.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "the reason is shown: {live}"
        );
        assert!(
            order.contains("&lt;img src=x onerror=alert(2)&gt;") && order.contains("\\x1b[2J"),
            "{order}"
        );
        assert!(order.contains("id=\"order-status\">failed<"), "{order}");
    }
}
