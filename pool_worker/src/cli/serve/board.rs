//! The claims topic folded for the page and the metrics ([`Board`]): no
//! I/O, records, positions and times in.

use crate::boot::View;
use crate::erased::Erased;
use crate::record::{Event, Foreign, OrderId, Position, Record, Status};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;

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
pub(super) const MINUTES: u64 = 30;

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
    erased: Gauge,
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
            erased: registered(
                &mut r,
                "claims_erased_records",
                "Claims records known erased by compaction before this process read them, at least: seqs \
                 missing below a surviving record of the same writer incarnation (the counters count the \
                 records that survive)",
                None,
                Gauge::default(),
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
    /// Records known erased from what was read (compaction, seqs
    /// missing): the counts are then lower bounds.
    pub(crate) erased: Erased,
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
    pub(super) latency_counts: [u64; LATENCY_BUCKETS.len() + 1],
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
    /// Each orders topic in priority order (R57): its name, the orders it
    /// holds, those of them waiting.
    pub(crate) waiting_by_topic: Vec<(String, i64, i64)>,
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
            erased: Erased::new(),
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
            waiting_by_topic: Vec::new(),
        }
    }

    /// Folds the record at `pos` (or a foreign one) in: the same rule as
    /// `status` (a completion counts when the view applies it).
    pub(crate) fn apply(&mut self, pos: u64, r: Result<Record, Foreign>) {
        self.records += 1;
        self.erased.note(pos, r.as_ref().ok());
        if let Some(end) = self.start_end {
            self.caught_up |= pos + 1 >= end;
        }
        let rec = match r {
            Ok(rec) => rec,
            Err(_) => {
                self.view.skip(Position::new(pos));
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
        let applied = self.view.apply(Position::new(pos), &rec).is_ok();
        let order = rec.order();
        if applied {
            match (rec.event(), order) {
                (Event::Claimed, Some(o)) => {
                    self.first_claim.entry(o).or_insert(rec.ts);
                    self.claim_since.insert(rec.instance.get(), rec.ts);
                    if !rec.takeover_of().is_empty() {
                        self.metrics.takeovers.inc();
                    }
                }
                (Event::Committed, Some(_)) if rec.attempt().get() > 1 => {
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
        // From the first claim; an order whose claims the replay did not
        // see (compaction erased them) is shown with its job's run time and
        // left out of the latency histogram, which it would skew.
        let latency_ms = match self.first_claim.remove(&order) {
            Some(t) => {
                let ms = rec.ts.saturating_sub(t);
                let secs = ms as f64 / 1000.0;
                self.metrics.latency.observe(secs);
                let bucket = LATENCY_BUCKETS
                    .iter()
                    .position(|b| secs <= *b)
                    .unwrap_or(LATENCY_BUCKETS.len());
                self.latency_counts[bucket] += 1;
                ms
            }
            None => rec.outcome().map_or(0, |o| o.duration_ms),
        };
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
            instance: rec.instance.get(),
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
                        Some(self.claim_since.get(&i.get()).copied().unwrap_or(h.last_ts)),
                        Some(h.last_ts),
                    ),
                };
                InstanceRow {
                    instance: i.get(),
                    state,
                    order,
                    since_ts: since,
                    lease_ts: last,
                    newest_ts: s.last_ts,
                    attempt: s.hold.as_ref().map(|h| h.attempt.get()),
                    last: s
                        .last_completed
                        .as_ref()
                        .map(|c| (c.order, c.outcome.status)),
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
        m.erased
            .set(i64::try_from(self.erased.records).unwrap_or(i64::MAX));
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
pub(super) fn reason_of(o: &crate::record::Outcome) -> String {
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
    /// The `ts` of the instance's newest record: in this host's future,
    /// its clock runs ahead (shown; leases do not read it, R36).
    pub(crate) newest_ts: u64,
    pub(crate) attempt: Option<u32>,
    pub(crate) last: Option<(OrderId, Status)>,
}
