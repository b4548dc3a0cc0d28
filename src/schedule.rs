//! Schedules without a leader (`SCHEDULE_FILE`, docs/deploy.md,
//! "Schedules"): periodic orders, each firing run once across the pool.
//!
//! A firing of schedule `name` at time `t` is a JSON order whose `id` is
//! `schedule:<name>:<t>` (`t` in RFC 3339, UTC, to the second). The run is
//! once because of R46: only the first order in the log to announce an id
//! runs; a second copy of a firing completes `duplicate`. What this module
//! decides is who *produces* a firing to the orders topic, so that copies
//! are rare, and none is skipped:
//!
//! * a firing is **known** once the log announced its id ([`View::ids_with_prefix`],
//!   R46) or this process produced it itself; a schedule's **last** firing
//!   is the newest known one, and only firings after it are **due**;
//! * a due firing is **on time** while younger than the schedule's grace
//!   (`grace_secs`, 60 s by default), else **missed** (nobody idle produced
//!   it in time: the pool was down, or busy); missed ones follow the
//!   schedule's `catch_up` policy ([`CatchUp`]); a schedule with no firing
//!   known starts with its newest firing within the grace;
//! * *turns*, as R28–R29 for orders: an idle instance `k`-th in the idle
//!   queue (R26, 0 = first) when it first sees the firing due produces it
//!   at `t + k` turns if it was idle and looking at `t`; one that became
//!   idle after `t` (a boot, a job's end) or looked late, at `s + 1 + k`
//!   turns from when it saw it (`s`), so that a firing produced just before
//!   by someone else has a whole turn to be announced first. The place is
//!   the one at first sight: the first in line leaves the queue when it
//!   claims the firing it produced, and the others must not move up. A turn is
//!   `CLAIM_DEFER_MS`, at least [`MIN_TURN_MS`]. Anyone but the first in
//!   line at `t` also waits while an order waits at the claim frontier: the
//!   firing may be it, not announced yet.
//!
//! Pure: the shell hands in the time (ms since the epoch, its wall clock)
//! and carries out what [`Scheduler::plan`] returns.

use crate::boot::View;
use crate::record::{InstanceNo, OrderId};
use chrono::{DateTime, SecondsFormat, TimeZone as _, Utc};
use chrono_tz::Tz;
use std::collections::{BTreeMap, BTreeSet};

/// Every firing's id starts with this, then the schedule's name and `:`.
pub const ID_PREFIX: &str = "schedule:";

/// A turn is `CLAIM_DEFER_MS`, but never less than this (with
/// `CLAIM_DEFER_MS=0`, R31, every idle instance would otherwise produce
/// every firing).
pub const MIN_TURN_MS: u64 = 1_000;

/// With `catch_up: "all"`, at most this many missed firings (the newest)
/// are produced; older ones are skipped.
pub const CATCH_UP_MAX: usize = 100;

/// At most this many due firings are looked at per schedule and plan
/// (on time and missed together, newest first).
pub const DUE_MAX: usize = 1_000;

/// The default grace: a firing younger than this is on time.
pub const DEFAULT_GRACE_SECS: u64 = 60;

/// Longest schedule name (the id must stay under the 256 characters R46
/// allows).
pub const MAX_NAME_CHARS: usize = 64;

/// What happens to the firings missed while no instance could produce them
/// (older than the grace when the pool looks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// Skipped.
    None,
    /// Only the newest missed firing runs.
    #[default]
    Latest,
    /// Each runs, oldest first, at most [`CATCH_UP_MAX`] (the newest).
    All,
}

/// One periodic order.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub name: String,
    /// The cron pattern as written (5 fields, or 6 with seconds first).
    pub cron: String,
    pub zone: Tz,
    pub catch_up: CatchUp,
    pub grace_ms: u64,
    /// The order, without its `id`.
    order: serde_json::Map<String, serde_json::Value>,
    pattern: croner::Cron,
}

/// One entry of `SCHEDULE_FILE`, as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    cron: String,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    catch_up: CatchUp,
    #[serde(default)]
    grace_secs: Option<u64>,
    #[serde(default)]
    order: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    order_text: Option<String>,
}

/// Parses the text of a `SCHEDULE_FILE`: a JSON array of schedules. Any
/// error names the schedule and what is wrong with it.
pub fn parse(text: &str) -> Result<Vec<Schedule>, String> {
    let entries: Vec<Entry> =
        serde_json::from_str(text).map_err(|e| format!("not a JSON array of schedules: {e}"))?;
    let mut names = BTreeSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let s = Schedule::from_entry(e).map_err(|why| format!("schedule {}: {why}", i + 1))?;
        if !names.insert(s.name.clone()) {
            return Err(format!(
                "schedule {}: the name '{}' is used twice",
                i + 1,
                s.name
            ));
        }
        out.push(s);
    }
    Ok(out)
}

impl Schedule {
    fn from_entry(e: Entry) -> Result<Schedule, String> {
        let name = e.name;
        if name.is_empty()
            || name.chars().count() > MAX_NAME_CHARS
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "name '{name}': 1 to {MAX_NAME_CHARS} letters, digits, '-', '_' or '.'"
            ));
        }
        let pattern = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(&e.cron)
            .map_err(|err| format!("'{name}': cron '{}': {err}", e.cron))?;
        let zone = match e.zone.as_deref() {
            None => Tz::UTC,
            Some(z) => z.parse::<Tz>().map_err(|_| {
                format!("'{name}': unknown time zone '{z}' (an IANA name, e.g. Europe/Paris)")
            })?,
        };
        let grace_secs = e.grace_secs.unwrap_or(DEFAULT_GRACE_SECS);
        if !(1..=7 * 24 * 3600).contains(&grace_secs) {
            return Err(format!(
                "'{name}': grace_secs={grace_secs} is out of range (1 to 604800)"
            ));
        }
        let order = match (e.order, e.order_text) {
            (Some(o), None) => o,
            (None, Some(text)) => {
                let argv = shell_words::split(&text)
                    .map_err(|err| format!("'{name}': order_text: {err}"))?;
                let mut o = serde_json::Map::new();
                o.insert("cmd".into(), serde_json::json!(argv));
                o
            }
            _ => return Err(format!("'{name}': exactly one of order and order_text")),
        };
        if order.contains_key("id") {
            return Err(format!(
                "'{name}': the order has an id; each firing gets its own (schedule:{name}:<time>)"
            ));
        }
        let s = Schedule {
            grace_ms: grace_secs * 1000,
            name,
            cron: e.cron,
            zone,
            catch_up: e.catch_up,
            order,
            pattern,
        };
        // A firing must be an order the workers accept.
        let sample = s.firing(DateTime::<Utc>::UNIX_EPOCH);
        crate::orders::parse(Some(sample.order.as_bytes()))
            .map_err(|err| format!("'{}': the order is not valid: {err}", s.name))?;
        Ok(s)
    }

    /// The id prefix of this schedule's firings.
    pub fn id_prefix(&self) -> String {
        format!("{ID_PREFIX}{}:", self.name)
    }

    /// The firing at `t`: its id and its order's text.
    pub fn firing(&self, at: DateTime<Utc>) -> Firing {
        let id = format!("{}{}", self.id_prefix(), id_time(at));
        let mut order = self.order.clone();
        order.insert("id".into(), serde_json::Value::String(id.clone()));
        Firing {
            schedule: self.name.clone(),
            at,
            id,
            order: serde_json::Value::Object(order).to_string(),
        }
    }

    /// The newest firing the log announced (R46: as far as it remembers
    /// ids), and the order that announced it.
    pub fn last_known(&self, view: &View) -> Option<(DateTime<Utc>, OrderId)> {
        let prefix = self.id_prefix();
        view.ids_with_prefix(&prefix)
            .filter_map(|(id, order)| Some((parse_id_time(&id[prefix.len()..])?, order)))
            .max_by_key(|(t, _)| *t)
    }

    /// The next `n` firings after `now` (ms).
    pub fn next_after(&self, now: u64, n: usize) -> Vec<DateTime<Utc>> {
        let Some(start) = utc(now) else {
            return Vec::new();
        };
        self.pattern
            .iter_after(start.with_timezone(&self.zone))
            .take(n)
            .map(|t| t.with_timezone(&Utc))
            .collect()
    }

    /// The firings in `(after, now]`, newest first, at most `max`.
    fn due(
        &self,
        after: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        max: usize,
    ) -> Vec<DateTime<Utc>> {
        self.pattern
            .iter_from(now.with_timezone(&self.zone), croner::Direction::Backward)
            .map(|t| t.with_timezone(&Utc))
            .take_while(|t| after.is_none_or(|a| *t > a))
            .take(max)
            .collect()
    }
}

/// A firing to produce: an order for the orders topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Firing {
    pub schedule: String,
    pub at: DateTime<Utc>,
    /// `schedule:<name>:<at>`.
    pub id: String,
    /// The JSON order, with `id`.
    pub order: String,
}

/// What [`Scheduler::plan`] decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Produce these now, in this order (oldest first per schedule).
    pub produce: Vec<Firing>,
    /// Plan again then (ms), unless something happens before.
    pub wake_at: Option<u64>,
}

/// What an idle process knows when it plans.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    pub me: InstanceNo,
    /// Since when this process is idle (ms, its clock).
    pub since: u64,
    /// An order waits at the claim frontier (the firing may be it).
    pub waiting: bool,
    /// `CLAIM_DEFER_MS`.
    pub defer_ms: u64,
}

/// A process's schedules and the firings it produced itself.
#[derive(Clone, Debug, Default)]
pub struct Scheduler {
    schedules: Vec<Schedule>,
    /// Per schedule, the firings this process produced (or is producing):
    /// known to it before the log announces them.
    produced: BTreeMap<String, BTreeSet<DateTime<Utc>>>,
    /// Per firing this process saw due: when its turns start and its place
    /// in the idle queue then. Kept, not looked up again: once the first in
    /// line claims the firing it produced, it leaves the queue, and the
    /// others must not move up for that firing.
    seen: BTreeMap<(String, DateTime<Utc>), (u64, u64)>,
}

impl Scheduler {
    pub fn new(schedules: Vec<Schedule>) -> Scheduler {
        Scheduler {
            schedules,
            produced: BTreeMap::new(),
            seen: BTreeMap::new(),
        }
    }

    pub fn schedules(&self) -> &[Schedule] {
        &self.schedules
    }

    /// The firings this idle process should produce now (noted as its
    /// own), and when to plan again.
    pub fn plan(&mut self, view: &View, idle: Idle, now: u64) -> Plan {
        let mut plan = Plan::default();
        let Some(now_t) = utc(now) else {
            return plan;
        };
        let queue = view.idle_queue();
        let place = queue
            .iter()
            .position(|&i| i == idle.me)
            .unwrap_or(queue.len()) as u64;
        let turn = idle.defer_ms.max(MIN_TURN_MS);
        let mut wake = |at: u64| plan.wake_at = Some(plan.wake_at.map_or(at, |w| w.min(at)));
        for s in &self.schedules {
            let mine = self.produced.entry(s.name.clone()).or_default();
            let logged = s.last_known(view).map(|(t, _)| t);
            // What the log knows is known to everyone: forget what it
            // covers.
            if let Some(l) = logged {
                mine.retain(|t| *t > l);
                self.seen.retain(|(n, t), _| *n != s.name || *t > l);
            }
            // Only what the log knows bounds the due firings: those this
            // process produced are left out one by one below (an older one
            // may still be its turn).
            let last = logged;
            let grace_start = now.saturating_sub(s.grace_ms);
            // A schedule with no firing known starts with its newest one
            // within the grace, not with every one of them.
            let due = match last {
                Some(_) => s.due(last, now_t, DUE_MAX),
                None => s.due(utc(grace_start), now_t, 1),
            };
            let (on_time, missed): (Vec<_>, Vec<_>) =
                due.into_iter().partition(|t| ms(*t) > grace_start);
            let caught: Vec<DateTime<Utc>> = match s.catch_up {
                CatchUp::None => Vec::new(),
                CatchUp::Latest => missed.into_iter().take(1).collect(),
                CatchUp::All => missed.into_iter().take(CATCH_UP_MAX).collect(),
            };
            let mut chosen: Vec<DateTime<Utc>> = on_time.into_iter().chain(caught).collect();
            chosen.sort();
            for t in chosen {
                let t_ms = ms(t);
                // Idle at `t` and looking then (within half a turn): turns
                // count from `t`; else from a turn after now.
                let (base, k) = *self.seen.entry((s.name.clone(), t)).or_insert_with(|| {
                    match idle.since <= t_ms && now <= t_ms + turn / 2 {
                        true => (t_ms, place),
                        false => (now.max(idle.since) + turn, place),
                    }
                });
                let first_at_t = base == t_ms && k == 0;
                let at = base + k * turn;
                if mine.contains(&t) {
                    continue;
                }
                if at > now {
                    wake(at);
                } else if first_at_t || !idle.waiting {
                    mine.insert(t);
                    plan.produce.push(s.firing(t));
                }
            }
            // Everyone idle looks at `t` itself, to note its place then.
            if let Some(next) = s.next_after(now, 1).first() {
                wake(ms(*next));
            }
        }
        plan
    }

    /// Producing `firing` failed: it is not this process's any more (a
    /// later plan produces it again, or someone else does).
    pub fn failed(&mut self, firing: &Firing) {
        if let Some(mine) = self.produced.get_mut(&firing.schedule) {
            mine.remove(&firing.at);
        }
    }
}

/// `t` as a firing id writes it: RFC 3339, UTC, to the second.
pub fn id_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The id of schedule `name`'s firing at `at_ms` (ms since the epoch; to
/// the second).
pub fn firing_id(name: &str, at_ms: u64) -> String {
    let at = utc(at_ms - at_ms % 1000).unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
    format!("{ID_PREFIX}{name}:{}", id_time(at))
}

/// The time (ms) of schedule `name`'s firing `id`, if it is one.
pub fn firing_time(name: &str, id: &str) -> Option<u64> {
    let t = id
        .strip_prefix(ID_PREFIX)?
        .strip_prefix(name)?
        .strip_prefix(':')?;
    parse_id_time(t).map(ms)
}

fn parse_id_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn utc(ms: u64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(i64::try_from(ms).ok()?).single()
}

fn ms(t: DateTime<Utc>) -> u64 {
    u64::try_from(t.timestamp_millis()).unwrap_or(0)
}

#[cfg(test)]
mod tests;
