//! `SCHEDULE_FILE`: the pool's periodic orders (docs/deploy.md,
//! "Schedules"). The file is read once, at start; a bad one stops the
//! process with one line (exit 2). Who produces each firing is the core's
//! decision (src/schedule.rs); the worker's loop carries it out
//! (pool_worker/src/run.rs), `status` and `serve` show the next firings
//! ([`rows`]).

use crate::boot::View;
use crate::env::ConfigError;
use crate::schedule::{id_time, Schedule};
use serde_json::json;

/// How many next firings `status` and the dashboard show per schedule.
pub const SHOWN: usize = 3;

/// The schedules in the file at `path`; an unreadable or bad file is a
/// [`ConfigError`] naming it.
pub fn load(path: &str) -> Result<Vec<Schedule>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("SCHEDULE_FILE='{path}' cannot be read: {e}")))?;
    let schedules = crate::schedule::parse(&text)
        .map_err(|e| ConfigError(format!("SCHEDULE_FILE='{path}': {e}")))?;
    // A pattern that matches no time (30 February) never fires: say so now.
    let now = crate::clock::wall_ms();
    if let Some(s) = schedules.iter().find(|s| s.next_after(now, 1).is_empty()) {
        return Err(ConfigError(format!(
            "SCHEDULE_FILE='{path}': schedule '{}': cron '{}' never fires",
            s.name, s.cron
        )));
    }
    Ok(schedules)
}

/// Each schedule, its next firings after `now` and the last one the log
/// announced (R46), as `status --json` and the dashboard's state show them.
pub fn rows(schedules: &[Schedule], view: &View, now: u64) -> serde_json::Value {
    schedules
        .iter()
        .map(|s| {
            let last = s.last_known(view).map(|(t, order)| {
                json!({"at": id_time(t), "order": order.to_string(),
                       "id": format!("{}{}", s.id_prefix(), id_time(t))})
            });
            json!({
                "name": s.name,
                "cron": s.cron,
                "zone": s.zone.name(),
                "catch_up": format!("{:?}", s.catch_up).to_lowercase(),
                "next": s.next_after(now, SHOWN).into_iter().map(id_time).collect::<Vec<_>>(),
                "last": last,
            })
        })
        .collect()
}

/// One line per schedule, for `status`'s text.
pub fn render(rows: &serde_json::Value) -> String {
    let mut out = String::new();
    for r in rows.as_array().into_iter().flatten() {
        let next: Vec<&str> = r["next"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str())
            .collect();
        let last = match r["last"]["at"].as_str() {
            Some(at) => format!(
                "last run {at} (order {})",
                r["last"]["order"].as_str().unwrap_or("?")
            ),
            None => "no run known".to_string(),
        };
        out.push_str(&format!(
            "schedule {} ({} {}): next {}; {last}\n",
            r["name"].as_str().unwrap_or(""),
            r["cron"].as_str().unwrap_or(""),
            r["zone"].as_str().unwrap_or(""),
            if next.is_empty() {
                "none".to_string()
            } else {
                next.join(", ")
            },
        ));
    }
    out
}
