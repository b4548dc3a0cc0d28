//! `pool_worker status` and `pool_worker history`: the pool as the claims
//! topic tells it.
//!
//! Both read the claims topic from its beginning to its end with the pool's
//! one claims reader ([`crate::kafka::claims_reader`]), and fold it into the same
//! [`View`] a worker builds at boot, so what they show is what the workers
//! themselves conclude. `status` adds the orders topic's offsets, to count
//! what is waiting. Neither writes anything.
//!
//! Counts of completions come from the records the replay saw: on a claims
//! topic that Kafka has compacted, completions older than
//! `min.compaction.lag.ms` may be gone. Then `status` says at least how
//! many records were erased ([`Erased`]) and that the completion counts are
//! lower bounds ("at least"; JSON: `erased`, `completed_is_lower_bound`);
//! what compaction cannot take (the frontier, so `claimed` and `waiting`,
//! and each instance's state, R8, R43) stays exact. `history` of an order
//! whose records are gone says so. Counts are history, which a checkpoint
//! does not carry: `status` reads from the beginning, not from the newest
//! checkpoint.

use crate::boot::View;
use crate::cli::show::{escape_controls, json_line};
use crate::erased::Erased;
use crate::kafka::tools::Source;
use crate::process_exit::Exit;
use crate::record::{Event, OrderId, Position, Record, Status};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) source: Source,
    /// Refresh in place every 2 seconds until Ctrl-C.
    #[arg(long)]
    pub(crate) watch: bool,
    /// List the orders that did not end `ok`, each with its status and reason.
    #[arg(long)]
    pub(crate) failed: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct HistoryArgs {
    /// The order, as PARTITION:OFFSET (main orders topic) or
    /// TOPIC:PARTITION:OFFSET.
    pub(crate) order: OrderId,
    #[command(flatten)]
    pub(crate) source: Source,
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// The pool's state as one JSON value (the `--json` form; the text form is
/// made from it).
pub(crate) fn snapshot(src: &Source, now_ms: u64) -> anyhow::Result<serde_json::Value> {
    let schedules = src.schedules()?;
    let records = crate::kafka::tools::read_all(src)?;
    let mut view = View::new();
    let mut tally = Tally::default();
    let mut erased = Erased::new();
    for (pos, r) in &records {
        erased.note(*pos, r.as_ref().ok());
        match r {
            Ok(rec) => {
                if view.apply(Position::new(*pos), rec).is_ok() && rec.event() == Event::Completed {
                    tally.completed(*pos, rec);
                }
            }
            Err(_) => view.skip(Position::new(*pos)),
        }
    }
    let c = src.consumer()?;
    let offsets = src.order_offsets(&c, TIMEOUT)?;
    let orders = src.waiting(&c, &offsets, |p| view.next_offset(p));
    let instances = instance_rows(&view, &tally.last_completion, now_ms);
    let Tally {
        by_status,
        mut not_ok,
        retried,
        ..
    } = tally;
    for f in &mut not_ok {
        let by = f["order"]
            .as_str()
            .and_then(|o| retried.get(o))
            .cloned()
            .unwrap_or_default();
        f["retried_as"] = by.into();
    }
    let completed: u64 = by_status.values().sum();
    let claimed: i64 = view.frontier().values().sum();
    let count = |s: Status| by_status.get(s.as_str()).copied().unwrap_or(0);
    Ok(json!({
        "claims_records": records.len(),
        // Records known erased (compaction; seqs missing, at least): the
        // completion counts below are then lower bounds.
        "erased": erased,
        "completed_is_lower_bound": erased.any(),
        "foreign_records": view.foreign,
        "orders_in_topic": orders.in_topic,
        "claimed": claimed,
        "completed": completed,
        // Every completion but `ok` (by_status.failed is one kind of it).
        "not_ok": completed - count(Status::Ok),
        // Orders the broker deleted before they ran (retention,
        // DeleteRecords): completed `deleted`, at once.
        "deleted": count(Status::Deleted),
        // Orders an operator cancelled (`pool_worker cancel`): never run,
        // or their job killed.
        "cancelled": count(Status::Cancelled),
        "by_status": by_status,
        "waiting": orders.waiting,
        // Each orders topic in priority order (R57): what it holds and
        // what of it waits.
        "orders_by_topic": orders.by_topic.iter().map(|(topic, held, waiting)| json!({
            "topic": topic, "in_topic": held, "waiting": waiting,
        })).collect::<Vec<_>>(),
        "oldest_waiting_age_ms": orders.oldest_ts.map(|t| (now_ms as i64 - t).max(0)),
        "instances": instances,
        // Orders parked (docs/protocol.md R54): not due yet, or waiting
        // for room on their key, held by nobody.
        "parked": parked_rows(&view, now_ms),
        "not_ok_orders": not_ok,
        // SCHEDULE_FILE's schedules: next firings, the last one announced.
        "schedules": crate::schedule_file::rows(&schedules, &view, now_ms),
    }))
}

/// What `status` counts of the valid completions, in log order.
#[derive(Default)]
struct Tally {
    by_status: BTreeMap<&'static str, u64>,
    /// Each instance's newest completion.
    last_completion: BTreeMap<u32, serde_json::Value>,
    /// The orders that did not end `ok` (`--failed`).
    not_ok: Vec<serde_json::Value>,
    /// Retries' completions by the order they ran again (`retry_of`).
    retried: BTreeMap<String, Vec<serde_json::Value>>,
}

impl Tally {
    /// The valid completion `rec`, at `pos`.
    fn completed(&mut self, pos: u64, rec: &Record) {
        let o = rec.outcome();
        let status = o.map_or(Status::Error, |o| o.status);
        let order = rec.order().map(|o| o.to_string());
        *self.by_status.entry(status.as_str()).or_default() += 1;
        if let (Some(of), Some(me)) = (o.and_then(|o| o.retry_of.clone()), &order) {
            self.retried
                .entry(of)
                .or_default()
                .push(json!({"order": me, "status": status.as_str()}));
        }
        if status != Status::Ok {
            self.not_ok.push(json!({
                "order": order,
                "status": status.as_str(),
                "exit_code": o.and_then(|o| o.exit_code),
                "reason": o.and_then(|o| o.reason.clone()),
                "instance": rec.instance,
                "attempt": rec.attempt(),
                "ts": rec.ts,
                "pos": pos,
            }));
        }
        self.last_completion.insert(
            rec.instance.get(),
            json!({"order": order, "status": status.as_str(), "ts": rec.ts}),
        );
    }
}

/// How far ahead of this host's clock an instance's newest `ts` is, when
/// by more than this (ms): its clock runs ahead by at least that much.
const CLOCK_AHEAD_MS: u64 = 2_000;

/// By how much at least an instance's clock runs ahead of this host's,
/// when its newest record's `ts` (`newest_ts`) is more than
/// [`CLOCK_AHEAD_MS`] in this host's future (`status`, `serve`).
pub(crate) fn clock_ahead(newest_ts: u64, now_ms: u64) -> Option<u64> {
    newest_ts
        .checked_sub(now_ms)
        .filter(|d| *d > CLOCK_AHEAD_MS)
}

/// Each instance as `status` shows it, with its newest completion, and by
/// how much at least its clock runs ahead of this host's (`clock_ahead_ms`:
/// its newest record's `ts` is in this host's future). Leases do not read
/// `ts` (docs/protocol.md R36), but the times shown for it are off by that.
fn instance_rows(
    view: &View,
    last_completion: &BTreeMap<u32, serde_json::Value>,
    now_ms: u64,
) -> Vec<serde_json::Value> {
    view.instances()
        .map(|(i, s)| {
            let (state, order, since) = match &s.hold {
                None => ("idle", None, None),
                Some(h) if h.committed.is_none() => {
                    ("negotiating", Some(h.order.to_string()), Some(h.last_ts))
                }
                Some(h) => ("running", Some(h.order.to_string()), Some(h.last_ts)),
            };
            json!({
                "instance": i,
                "state": state,
                "order": order,
                "since_ts": since,
                "attempt": s.hold.as_ref().map(|h| h.attempt),
                "incarnation": s.booted.as_ref().map(|b| b.incarnation.clone()),
                "last_completion": last_completion.get(&i.get()),
                "clock_ahead_ms": clock_ahead(s.last_ts, now_ms),
            })
        })
        .collect()
}

/// `ms` since the epoch as RFC 3339 (ms, UTC), as `not_before` is written.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    std::time::UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .filter(|t| *t < std::time::UNIX_EPOCH + Duration::from_secs(253_402_300_800))
        .map_or_else(
            || format!("{ms} ms"),
            |t| humantime::format_rfc3339_millis(t).to_string(),
        )
}

/// The parked orders (docs/protocol.md R54–R56), in order: each with its
/// due time (`until`: RFC 3339; `until_ms`), whether it is due at
/// `now_ms` (no `not_before`, or one past: it waits only for room on its
/// key, or for an idle instance), its key and the attempt a claim of it
/// carries on (`status`, `history`, the dashboard).
pub(crate) fn parked_rows(view: &View, now_ms: u64) -> Vec<serde_json::Value> {
    view.parked()
        .map(|(order, p)| {
            json!({
                "order": order.to_string(),
                "until_ms": p.until,
                "until": p.until.map(rfc3339_ms),
                "due": p.until.is_none_or(|u| u <= now_ms),
                "key": p.key,
                "attempt": p.attempt,
            })
        })
        .collect()
}

/// A parked order's due time ([`parked_rows`]): RFC 3339, with "(due)"
/// once it has passed; "- (due)" without one.
fn parked_when(p: &serde_json::Value) -> String {
    let due = p["due"].as_bool().unwrap_or(true);
    match p["until"].as_str() {
        Some(t) if due => format!("{t} (due)"),
        Some(t) => t.to_string(),
        None => "- (due)".to_string(),
    }
}

/// One parked order ([`parked_rows`]) as a row of `status`'s table. The
/// key is the order author's text: escaped.
pub(crate) fn parked_line(p: &serde_json::Value) -> String {
    escape_controls(
        &format!(
            "{:<10} {:<32} {:<16} {}",
            p["order"].as_str().unwrap_or("?"),
            parked_when(p),
            p["key"].as_str().unwrap_or("-"),
            p["attempt"]
        ),
        false,
    )
}

/// The parked orders' table (`status`); nothing when there is none.
pub(crate) fn render_parked(rows: &[serde_json::Value]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{} parked orders (held by nobody until due and their key has room):\n{:<10} {:<32} {:<16} attempt\n",
        rows.len(),
        "order",
        "due",
        "key"
    );
    for p in rows {
        out.push_str(&parked_line(p));
        out.push('\n');
    }
    out
}

/// The text form of `status --failed`: one line per order that did not
/// end `ok`, with its status, exit code and reason (escaped: a reason can
/// carry a job's text).
pub(crate) fn render_failed(s: &serde_json::Value) -> String {
    let list = s["not_ok_orders"].as_array().cloned().unwrap_or_default();
    let lower = s["completed_is_lower_bound"].as_bool().unwrap_or(false);
    let mut out = format!(
        "{}{} orders did not end ok{}\n",
        if lower { "at least " } else { "" },
        list.len(),
        if lower {
            " (compaction erased older completions; these are the ones that survive)"
        } else {
            ""
        }
    );
    for f in &list {
        let mut line = format!(
            "{:<10} {:<10} instance {} attempt {}",
            f["order"].as_str().unwrap_or("?"),
            f["status"].as_str().unwrap_or("?"),
            f["instance"],
            f["attempt"]
        );
        if let Some(c) = f["exit_code"].as_i64() {
            line.push_str(&format!(", exit {c}"));
        }
        if let Some(r) = f["reason"].as_str() {
            line.push_str(&format!(": {r}"));
        }
        for r in f["retried_as"].as_array().into_iter().flatten() {
            line.push_str(&format!(
                " (retried as {} {})",
                r["order"].as_str().unwrap_or("?"),
                r["status"].as_str().unwrap_or("?")
            ));
        }
        out.push_str(&escape_controls(&line, false));
        out.push('\n');
    }
    out
}

/// The text form of a snapshot.
pub(crate) fn render(s: &serde_json::Value) -> String {
    let n = |k: &str| s[k].as_i64().unwrap_or(0);
    let lower = s["completed_is_lower_bound"].as_bool().unwrap_or(false);
    let at_least = if lower { "at least " } else { "" };
    let mut out = String::new();
    out.push_str(&format!(
        "orders: {} in topic, {} claimed, {at_least}{} completed ({at_least}{} not ok), {} waiting",
        n("orders_in_topic"),
        n("claimed"),
        n("completed"),
        n("not_ok"),
        n("waiting")
    ));
    if let Some(age) = s["oldest_waiting_age_ms"].as_i64() {
        out.push_str(&format!(", oldest waiting {:.1} s", age as f64 / 1000.0));
    }
    out.push('\n');
    // With priority topics (R57), what waits in each, first topic first.
    if let Some(topics) = s["orders_by_topic"].as_array().filter(|t| t.len() > 1) {
        let each: Vec<String> = topics
            .iter()
            .map(|t| {
                format!(
                    "{} {} waiting of {}",
                    t["topic"].as_str().unwrap_or("?"),
                    t["waiting"].as_i64().unwrap_or(0),
                    t["in_topic"].as_i64().unwrap_or(0)
                )
            })
            .collect();
        out.push_str(&format!(
            "by topic, in priority order: {}\n",
            each.join(", ")
        ));
    }
    if n("deleted") > 0 {
        out.push_str(&format!(
            "{} orders deleted by the broker (retention or DeleteRecords) before they ran: completed `deleted`\n",
            n("deleted")
        ));
    }
    if n("cancelled") > 0 {
        out.push_str(&format!(
            "{} orders cancelled by an operator (pool_worker cancel): completed `cancelled`\n",
            n("cancelled")
        ));
    }
    if lower {
        let e = &s["erased"];
        out.push_str(&format!(
            "compaction erased at least {} records of the claims topic (positions {} to {}): the completions counted \
             are those whose records survive, lower bounds; claimed, waiting and the instances' states are exact\n",
            e["records"].as_u64().unwrap_or(0),
            e["first"].as_u64().unwrap_or(0),
            e["before"].as_u64().unwrap_or(1).saturating_sub(1)
        ));
    }
    if let Some(by) = s["by_status"].as_object() {
        let parts: Vec<String> = by.iter().map(|(k, v)| format!("{k} {v}")).collect();
        if !parts.is_empty() {
            out.push_str(&format!(
                "completions by status{}: {}\n",
                if lower { " (at least)" } else { "" },
                parts.join(", ")
            ));
        }
    }
    out.push_str("instance  state        order      last completion\n");
    for i in s["instances"].as_array().into_iter().flatten() {
        let order = escape_controls(i["order"].as_str().unwrap_or("-"), false);
        let last = match &i["last_completion"] {
            serde_json::Value::Null => "-".to_string(),
            l => format!(
                "{} {}",
                l["order"].as_str().unwrap_or("?"),
                l["status"].as_str().unwrap_or("?")
            ),
        };
        let last = escape_controls(&last, false);
        out.push_str(&format!(
            "{:<9} {:<12} {:<10} {}\n",
            i["instance"].as_u64().unwrap_or(0),
            escape_controls(i["state"].as_str().unwrap_or("?"), false),
            order,
            last
        ));
    }
    for i in s["instances"].as_array().into_iter().flatten() {
        if let Some(ahead) = i["clock_ahead_ms"].as_u64() {
            out.push_str(&format!(
                "instance {}'s clock runs at least {:.1} s ahead of this host's (its newest record's time is in the future):                  leases do not depend on it, times shown for it are off\n",
                i["instance"].as_u64().unwrap_or(0),
                ahead as f64 / 1000.0
            ));
        }
    }
    out.push_str(&render_parked(
        s["parked"].as_array().map_or(&[][..], Vec::as_slice),
    ));
    out.push_str(&crate::schedule_file::render(&s["schedules"]));
    if n("foreign_records") > 0 {
        out.push_str(&format!(
            "{} foreign records skipped\n",
            n("foreign_records")
        ));
    }
    out
}

pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<Exit> {
    loop {
        let src = args.source.clone();
        let mut s = crate::cli::blocking(move || snapshot(&src, crate::clock::wall_ms())).await?;
        if !args.failed {
            // The list is for --failed: it grows with the pool's history.
            s.as_object_mut().map(|o| o.remove("not_ok_orders"));
        }
        if args.failed && args.source.json {
            let v = json!({"not_ok": s["not_ok"], "orders": s["not_ok_orders"]});
            println!("{}", json_line(&v));
        } else if args.source.json {
            println!("{}", json_line(&s));
        } else if args.failed {
            if args.watch {
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", render_failed(&s));
        } else {
            if args.watch {
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", render(&s));
        }
        if !args.watch {
            return Ok(Exit::Ok);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(Exit::Ok),
        }
    }
}

pub(crate) async fn history(args: HistoryArgs) -> anyhow::Result<Exit> {
    let src = args.source.clone();
    let records = crate::cli::blocking(move || crate::kafka::tools::read_all(&src)).await?;
    // The view (frontier, holds) and the records known erased, to say what
    // compaction took.
    let mut view = View::new();
    let mut erased = Erased::new();
    for (pos, r) in &records {
        erased.note(*pos, r.as_ref().ok());
        match r {
            Ok(rec) => drop(view.apply(Position::new(*pos), rec)),
            Err(_) => view.skip(Position::new(*pos)),
        }
    }
    let ours: Vec<(u64, Record)> = records
        .into_iter()
        .filter_map(|(p, r)| r.ok().map(|r| (p, r)))
        .collect();
    let mine: Vec<(u64, Record)> = ours
        .iter()
        .filter(|(_, r)| r.order() == Some(args.order))
        .cloned()
        .collect();
    // The completions of orders sent again as retries of this one
    // (`pool_worker retry`): the link from the original to its retries.
    let name = args.order.to_string();
    let retries: Vec<(u64, Record)> = ours
        .into_iter()
        .filter(|(_, r)| {
            r.event() == Event::Completed
                && r.outcome().and_then(|o| o.retry_of.as_deref()) == Some(name.as_str())
        })
        .collect();
    let note = compaction_note(args.order, &mine, &view, &erased);
    let parked = parked_rows(&view, crate::clock::wall_ms())
        .into_iter()
        .find(|p| p["order"] == args.order.to_string());
    print_history(
        &mut std::io::stdout(),
        args.source.json,
        args.order,
        &mine,
        &retries,
        note.as_deref(),
        parked.as_ref(),
    );
    // An order with no record to show is an error for a script (a mistyped
    // PARTITION:OFFSET, or one whose records compaction erased); the line
    // above says which.
    Ok(if mine.is_empty() {
        Exit::Failure
    } else {
        Exit::Ok
    })
}

/// What compaction took of `order`'s story, in one sentence, given the
/// records about it that survive (`mine`), the view of the whole log as
/// read and the records known erased from it; `None` when nothing known
/// missing could be about it.
pub(crate) fn compaction_note(
    order: OrderId,
    mine: &[(u64, Record)],
    view: &View,
    erased: &Erased,
) -> Option<String> {
    let (first, before) = (erased.first?, erased.before?);
    let claimed = order.offset < view.next_offset(order.lane());
    if !claimed {
        return None;
    }
    let held = view
        .instances()
        .any(|(_, s)| s.hold.as_ref().is_some_and(|h| h.order == order));
    let completed = mine.iter().any(|(_, r)| r.event() == Event::Completed);
    let what = format!(
        "compaction erased at least {} records of the claims topic (positions {first} to {})",
        erased.records,
        before - 1
    );
    let frontier = view.next_offset(order.lane());
    let holder = if held {
        "an instance holds it now"
    } else {
        "no instance holds it now"
    };
    Some(match mine.last() {
        None => format!(
            "no record about order {order} survives: it was claimed (the frontier of partition {} is {frontier}), \
             and {what}; {holder}",
            order.partition
        ),
        Some(_) if !completed && !held => format!(
            "no completion of order {order} survives: {what}, and the records above are those that remain; {holder}"
        ),
        Some((last, _)) if first < *last => {
            format!("{what}: records of order {order} may be among them")
        }
        Some(_) => return None,
    })
}

/// Positions of the claims among `mine` (the records about one order, in
/// log order) that were their writer's commit: a first claim that met no
/// rival, which no `committed` follows (docs/protocol.md R34). Judged by a
/// View of these records alone (all that `history` and the dashboard's
/// story hold): a claim its writer yielded right after (a late claim, or
/// one whose rival compaction erased) is none.
pub(crate) fn own_commits(mine: &[(u64, Record)]) -> BTreeSet<u64> {
    let mut view = View::new();
    // Instance → its claim read as its commit, with no decision since.
    let mut open = BTreeMap::new();
    let mut own = BTreeSet::new();
    for (p, r) in mine {
        if view.apply(Position::new(*p), r).is_err() {
            continue;
        }
        let i = r.instance;
        match r.event() {
            Event::Claimed => {
                open.remove(&i);
                if view
                    .hold(i)
                    .is_some_and(|h| h.fused_at(h.order, Position::new(*p)))
                {
                    own.insert(*p);
                    open.insert(i, *p);
                }
            }
            Event::Committed | Event::Completed => {
                open.remove(&i);
            }
            // The writer's yield is the decision after all (R11).
            Event::Yielded => {
                if let Some(c) = open.remove(&i) {
                    own.remove(&c);
                }
            }
            _ => {}
        }
    }
    own
}

/// Prints the records about one order (`history`): a JSON line, or a line
/// per record with its fields' control characters escaped; a claim that
/// was its own commit ([`own_commits`]) says so (`own_commit` in JSON).
/// `retries`: the completions of the orders that ran it again; `note`:
/// what compaction took of the story ([`compaction_note`]); `parked`:
/// the order's row if it is parked now ([`parked_rows`]).
pub(crate) fn print_history(
    out: &mut impl std::io::Write,
    json: bool,
    order: OrderId,
    mine: &[(u64, Record)],
    retries: &[(u64, Record)],
    note: Option<&str>,
    parked: Option<&serde_json::Value>,
) {
    let own = own_commits(mine);
    let line = |(p, r): &(u64, Record)| {
        format!(
            "#{p:<6} {:<13} {}{}",
            r.key(),
            escape_controls(&crate::record::describe(r), false),
            if own.contains(p) {
                " (its own commit: it met no rival, R34)"
            } else {
                ""
            }
        )
    };
    if json {
        let list = |l: &[(u64, Record)]| -> Vec<serde_json::Value> {
            l.iter()
                .map(|(p, r)| {
                    let mut v = json!({"pos": p, "key": r.key(), "record": r});
                    if r.event() == Event::Claimed {
                        v["own_commit"] = own.contains(p).into();
                    }
                    v
                })
                .collect()
        };
        let v = json!({"order": order.to_string(), "records": list(mine), "retries": list(retries), "compaction": note, "parked": parked});
        let _ = writeln!(out, "{}", json_line(&v));
        return;
    }
    if let Some(n) = note {
        let _ = writeln!(out, "{n}");
    } else if mine.is_empty() {
        let _ = writeln!(out, "no record about order {order} in the claims topic");
    }
    for r in mine {
        let _ = writeln!(out, "{}", line(r));
    }
    if let Some(p) = parked {
        let line = format!(
            "parked now, held by nobody until due and its key has room: due {}, key {}, attempt {}",
            parked_when(p),
            p["key"].as_str().unwrap_or("-"),
            p["attempt"]
        );
        let _ = writeln!(out, "{}", escape_controls(&line, false));
    }
    for r in retries {
        let retry = r.1.order().map_or_else(|| "?".into(), |o| o.to_string());
        let _ = writeln!(out, "retried as {retry}: {}", line(r));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cli::show::tests::{no_controls_but_newlines_and_tabs, NASTY};
    use crate::record::{Outcome, Status};

    fn completed(stdout: &str, reason: &str) -> (Record, Outcome) {
        let outcome = Outcome {
            status: Status::Failed,
            exit_code: Some(1),
            duration_ms: 5,
            reason: Some(reason.into()),
            stdout_tail: stdout.into(),
            stderr_tail: stdout.into(),
            traceparent: None,
            retry_of: None,
        };
        let mut r = Record::of(2, Event::Completed, "inc\x1b[1A", 1).with_order(OrderId::new(0, 4));
        r.set_outcome(Some(outcome.clone()));
        (r, outcome)
    }

    /// A View of instance 1 parking 0:0 (until 1_795_716_000_000, key
    /// "a"), 0:1 (no time: its key, with a control character, had no
    /// room) and 0:2 (until 1_795_716_060_000, no key, attempt 2), then
    /// holding 0:3.
    pub(crate) fn parking_view() -> View {
        let lines = [
            (
                "1:booted",
                r#"{"instance":1,"event":"booted","incarnation":"a","ts":1,"seq":1,"next":{"0":0}}"#,
            ),
            (
                "1:claimed",
                r#"{"instance":1,"event":"claimed","partition":0,"offset":0,"incarnation":"a","ts":2,"seq":2,"attempt":1,"next":{"0":1}}"#,
            ),
            (
                "park:0:0",
                r#"{"instance":1,"event":"parked","partition":0,"offset":0,"incarnation":"a","ts":3,"seq":3,"attempt":1,"next":{"0":1},"until":1795716000000,"order_key":"a"}"#,
            ),
            (
                "1:claimed",
                r#"{"instance":1,"event":"claimed","partition":0,"offset":1,"incarnation":"a","ts":4,"seq":4,"attempt":1,"next":{"0":2}}"#,
            ),
            (
                "park:0:1",
                r#"{"instance":1,"event":"parked","partition":0,"offset":1,"incarnation":"a","ts":5,"seq":5,"attempt":1,"next":{"0":2},"order_key":"b\u001b[2J"}"#,
            ),
            (
                "1:claimed",
                r#"{"instance":1,"event":"claimed","partition":0,"offset":2,"incarnation":"a","ts":6,"seq":6,"attempt":1,"next":{"0":3}}"#,
            ),
            (
                "park:0:2",
                r#"{"instance":1,"event":"parked","partition":0,"offset":2,"incarnation":"a","ts":7,"seq":7,"attempt":2,"next":{"0":3},"until":1795716060000}"#,
            ),
            (
                "1:claimed",
                r#"{"instance":1,"event":"claimed","partition":0,"offset":3,"incarnation":"a","ts":8,"seq":8,"attempt":1,"next":{"0":4}}"#,
            ),
        ];
        let mut view = View::new();
        for (p, (k, v)) in lines.iter().enumerate() {
            let rec = Record::decode(Some(k.as_bytes()), Some(v.as_bytes()))
                .unwrap_or_else(|e| panic!("{v}: {e:?}"));
            view.apply(Position::new(p as u64), &rec)
                .unwrap_or_else(|e| panic!("{v}: {e:?}"));
        }
        assert_eq!(view.parked().count(), 3);
        view
    }

    /// `status` lists the parked orders with their due time ("(due)" once
    /// past), key and attempt, in JSON and as text (the key escaped).
    #[test]
    fn status_lists_parked_orders() {
        let view = parking_view();
        // Between the two times: 0:0 is due, 0:2 is not.
        let now = 1_795_716_030_000;
        let rows = parked_rows(&view, now);
        assert_eq!(
            rows,
            vec![
                json!({"order": "0:0", "until_ms": 1_795_716_000_000u64,
                    "until": "2026-11-26T18:00:00.000Z", "due": true, "key": "a", "attempt": 1}),
                json!({"order": "0:1", "until_ms": null, "until": null, "due": true,
                    "key": "b\u{1b}[2J", "attempt": 1}),
                json!({"order": "0:2", "until_ms": 1_795_716_060_000u64,
                    "until": "2026-11-26T18:01:00.000Z", "due": false, "key": null, "attempt": 2}),
            ]
        );
        let text = render(&json!({"instances": [], "parked": rows}));
        let table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("parked orders"))
            .collect();
        assert_eq!(
            table[0],
            "3 parked orders (held by nobody until due and their key has room):"
        );
        assert!(
            table[1].starts_with("order")
                && table[1].contains("due")
                && table[1].ends_with("attempt")
        );
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            cells(table[2]),
            ["0:0", "2026-11-26T18:00:00.000Z", "(due)", "a", "1"]
        );
        assert_eq!(cells(table[3]), ["0:1", "-", "(due)", "b\\x1b[2J", "1"]);
        assert_eq!(
            cells(table[4]),
            ["0:2", "2026-11-26T18:01:00.000Z", "-", "2"]
        );
        no_controls_but_newlines_and_tabs(&text);
        // Later, both times have passed.
        let later = parked_rows(&view, 1_795_716_060_000);
        assert!(later.iter().all(|r| r["due"] == true), "{later:?}");
        // None parked: no table.
        assert!(!render(&json!({"instances": [], "parked": []})).contains("parked"));
    }

    /// R57: with priority topics, `status` says what waits in each, in
    /// priority order; with one topic it says nothing more.
    #[test]
    fn status_shows_waiting_orders_per_topic_in_priority_order() {
        let text = render(&json!({
            "instances": [], "parked": [], "waiting": 5, "orders_in_topic": 9,
            "orders_by_topic": [
                {"topic": "urgent", "in_topic": 2, "waiting": 1},
                {"topic": "work", "in_topic": 7, "waiting": 4},
            ],
        }));
        assert!(
            text.contains(
                "by topic, in priority order: urgent 1 waiting of 2, work 4 waiting of 7\n"
            ),
            "{text}"
        );
        let one = render(&json!({
            "instances": [], "parked": [],
            "orders_by_topic": [{"topic": "work", "in_topic": 7, "waiting": 4}],
        }));
        assert!(!one.contains("by topic"), "{one}");
    }

    /// `history` of a parked order says so, in text and in JSON.
    #[test]
    fn history_says_an_order_is_parked() {
        let view = parking_view();
        let rows = parked_rows(&view, 1_795_715_000_000);
        let history = |json: bool, offset: i64, parked: Option<&serde_json::Value>| {
            let mut out = Vec::new();
            print_history(
                &mut out,
                json,
                OrderId::new(0, offset),
                &[],
                &[],
                None,
                parked,
            );
            String::from_utf8(out).unwrap()
        };
        let text = history(false, 2, Some(&rows[2]));
        assert!(
            text.contains("parked now, held by nobody until due and its key has room: due 2026-11-26T18:01:00.000Z, key -, attempt 2"),
            "{text}"
        );
        let v: serde_json::Value = serde_json::from_str(&history(true, 0, Some(&rows[0]))).unwrap();
        assert_eq!(v["parked"]["key"], "a");
        assert_eq!(v["parked"]["due"], false);
        assert!(!history(false, 3, None).contains("parked"));
    }

    /// An instance whose newest record's `ts` is in this host's future is
    /// shown with its clock ahead; one within the slack is not.
    #[test]
    fn status_says_which_clocks_run_ahead() {
        let now = 1_000_000;
        let mut view = View::new();
        let recs = [
            Record::of(1, Event::Booted, "one", now - 5_000),
            Record::of(2, Event::Booted, "two", now + 60_000),
            Record::of(3, Event::Booted, "three", now + 1_000),
        ];
        for (p, r) in recs.iter().enumerate() {
            let mut r = r.clone();
            r.seq = 1;
            view.apply(Position::new(p as u64), &r).unwrap();
        }
        let rows = instance_rows(&view, &BTreeMap::new(), now);
        let ahead: Vec<_> = rows.iter().map(|r| r["clock_ahead_ms"].as_u64()).collect();
        assert_eq!(ahead, vec![None, Some(60_000), None]);
        let text = render(&json!({ "instances": rows }));
        assert!(
            text.contains("instance 2's clock runs at least 60.0 s ahead"),
            "{text}"
        );
        assert!(!text.contains("instance 1's clock") && !text.contains("instance 3's clock"));
    }

    /// `submit --wait`: the job's output and reason reach the terminal
    /// escaped, in text and in JSON.
    #[test]
    fn submit_wait_prints_no_control_characters() {
        let (rec, outcome) = completed(NASTY, NASTY);
        for json in [false, true] {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            crate::cli::submit::print_completion(
                &mut out,
                &mut err,
                json,
                OrderId::new(0, 4),
                &rec,
                &outcome,
            );
            let (out, err) = (
                String::from_utf8(out).unwrap(),
                String::from_utf8(err).unwrap(),
            );
            no_controls_but_newlines_and_tabs(&out);
            no_controls_but_newlines_and_tabs(&err);
            if json {
                let v: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
                assert_eq!(v["outcome"]["stdout_tail"], NASTY, "the same value");
            } else {
                assert!(
                    out.contains("\\x1b[2J") && out.contains("\nnext\tcol"),
                    "{out}"
                );
                let last = err.lines().last().unwrap();
                assert!(
                    last.starts_with("order 0:4: failed on instance 2") && last.contains("\\nnext"),
                    "{err}"
                );
            }
        }
    }

    /// On a compacted claims topic, `status` says the completion counts
    /// are lower bounds and what was erased; `history` of an order whose
    /// records are gone says so instead of "no record".
    #[test]
    fn status_and_history_say_what_compaction_erased() {
        let snap = json!({
            "orders_in_topic": 10, "claimed": 9, "completed": 4, "not_ok": 1, "waiting": 1,
            "completed_is_lower_bound": true,
            "erased": {"records": 12, "first": 0, "before": 20},
            "by_status": {"ok": 3, "failed": 1},
            "instances": [],
        });
        let text = render(&snap);
        assert!(
            text.starts_with("orders: 10 in topic, 9 claimed, at least 4 completed (at least 1 not ok), 1 waiting"),
            "{text}"
        );
        assert!(
            text.contains(
                "compaction erased at least 12 records of the claims topic (positions 0 to 19)"
            ) && text.contains("completions by status (at least): failed 1, ok 3"),
            "{text}"
        );
        let whole = json!({"orders_in_topic": 1, "claimed": 1, "completed": 1, "not_ok": 0, "instances": []});
        let text = render(&whole);
        assert!(
            !text.contains("at least") && !text.contains("erased"),
            "{text}"
        );
        // history: order 0:2 claimed (a record at 6 carries the frontier
        // 0:5), its records gone: its writer's seqs 1 to 6 are missing.
        let mut view = View::new();
        let mut erased = Erased::new();
        let mut b = Record::of(1, Event::Booted, "a", 1);
        b.seq = 7;
        b.next = BTreeMap::from([(0.into(), 5)]);
        erased.note(6, Some(&b));
        view.apply(Position::new(6), &b).unwrap();
        let note = compaction_note(OrderId::new(0, 2), &[], &view, &erased).unwrap();
        assert!(
            note.starts_with("no record about order 0:2 survives: it was claimed (the frontier of partition 0 is 5)")
                && note.contains("compaction erased at least 6 records")
                && note.ends_with("no instance holds it now"),
            "{note}"
        );
        let mut out = Vec::new();
        print_history(
            &mut out,
            false,
            OrderId::new(0, 2),
            &[],
            &[],
            Some(&note),
            None,
        );
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out.trim_end(), note);
        assert_eq!(
            compaction_note(OrderId::new(0, 7), &[], &view, &erased),
            None
        );
    }

    /// `history` marks a claim that met no rival as its own commit (R34),
    /// not a claim that met a committed rival, nor one its writer yielded
    /// right after.
    #[test]
    fn history_marks_a_claim_that_was_its_own_commit() {
        let o = OrderId::new(0, 3);
        let rec = |i: u32, ev: Event, seq: u64| {
            let mut r = Record::of(i, ev, &format!("inc{i}"), 1).with_order(o);
            r.seq = seq;
            r
        };
        let mut done = rec(1, Event::Completed, 3);
        done.set_outcome(Some(Outcome::not_run(Status::Ok, "")));
        let mine = [
            (4, rec(1, Event::Claimed, 2)),
            (5, rec(2, Event::Claimed, 2)),
            (6, rec(2, Event::Yielded, 3)),
            (7, done),
        ];
        assert_eq!(own_commits(&mine), BTreeSet::from([4]));
        let mut out = Vec::new();
        print_history(&mut out, false, o, &mine, &[], None, None);
        let out = String::from_utf8(out).unwrap();
        let marked: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("its own commit"))
            .collect();
        assert_eq!(marked.len(), 1, "{out}");
        assert!(marked[0].starts_with("#4 "), "{out}");
        let mut out = Vec::new();
        print_history(&mut out, true, o, &mine, &[], None, None);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["records"][0]["own_commit"], true);
        assert_eq!(v["records"][1]["own_commit"], false);
        assert!(v["records"][2].get("own_commit").is_none());
        // Its writer's yield right after makes it none (R11).
        let undone = [
            (4, rec(1, Event::Claimed, 2)),
            (5, rec(1, Event::Yielded, 3)),
        ];
        assert!(own_commits(&undone).is_empty());
    }

    /// `history` and `status`: record fields reach the terminal escaped.
    #[test]
    fn history_and_status_print_no_control_characters() {
        let (rec, _) = completed(NASTY, NASTY);
        let mut booted = Record::of(2, Event::Booted, NASTY, 1);
        booted.set_reason(Some(NASTY.into()));
        let mine = [(3, booted), (7, rec)];
        for json in [false, true] {
            let mut out = Vec::new();
            print_history(&mut out, json, OrderId::new(0, 4), &mine, &[], None, None);
            let out = String::from_utf8(out).unwrap();
            no_controls_but_newlines_and_tabs(&out);
            assert_eq!(out.lines().count(), if json { 1 } else { 2 }, "{out}");
            if json {
                let v: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
                assert_eq!(v["records"][1]["record"]["outcome"]["stdout_tail"], NASTY);
            }
        }
        let snap = json!({
            "orders_in_topic": 1,
            "instances": [{"instance": 2, "state": NASTY, "order": NASTY, "last_completion": {"order": NASTY, "status": NASTY}}],
        });
        let text = render(&snap);
        no_controls_but_newlines_and_tabs(&text);
        assert_eq!(text.lines().count(), 3, "one line per instance: {text}");
        let snap = json!({"not_ok_orders": [
            {"order": "0:4", "status": "failed", "exit_code": 3, "reason": NASTY, "instance": 2, "attempt": 1,
             "retried_as": [{"order": "0:9", "status": "ok"}]},
            {"order": "0:5", "status": "gave_up", "reason": "lost", "instance": 1, "attempt": 3, "retried_as": []},
        ]});
        let text = render_failed(&snap);
        no_controls_but_newlines_and_tabs(&text);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "a count, then one line per order: {text}");
        assert!(lines[0].starts_with("2 orders"), "{text}");
        assert!(
            lines[1].starts_with("0:4")
                && lines[1].contains("exit 3")
                && lines[1].ends_with("(retried as 0:9 ok)"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("0:5")
                && lines[2].contains("gave_up")
                && lines[2].ends_with(": lost"),
            "{text}"
        );
    }
}
