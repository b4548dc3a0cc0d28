//! The pages as HTML, made on the server from a [`Board`]: every string a
//! record or a job's output carries goes through [`esc`].

use super::board::{reason_of, Board, InstanceRow, LATENCY_BUCKETS, MINUTES};
use crate::cli::show::escape_controls;
use crate::record::{Event, OrderId, Record};
use std::fmt::Write as _;

/// `s` as HTML text: control characters shown escaped (as `status` shows
/// them on a terminal), then `&`, `<`, `>`, `"` and `'` escaped.
pub(crate) fn esc(s: &str) -> String {
    html_escape::encode_quoted_attribute(&escape_controls(s, false)).into_owned()
}

/// Like [`esc`], keeping newlines and tabs (a job's output in a `<pre>`).
pub(crate) fn esc_lines(s: &str) -> String {
    html_escape::encode_quoted_attribute(&escape_controls(s, true)).into_owned()
}

pub(super) fn layout(title: &str, body: &str) -> String {
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
    parked_panel(&mut s, b, now);
    if b.view.foreign > 0 {
        let _ = write!(
            s,
            "<p class=\"meta\">{} foreign claims records skipped</p>",
            b.view.foreign
        );
    }
    if let Some(e) = b.erased.sentence() {
        let _ = write!(
            s,
            "<p class=\"meta\" id=\"erased\">{}; waiting, running and the instances are exact</p>",
            esc(&e)
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
    // With priority topics (R57), what waits in each, first topic first.
    if b.waiting_by_topic.len() > 1 {
        for (i, (topic, _, waiting)) in b.waiting_by_topic.iter().enumerate() {
            let k = format!("waiting in {}", esc(topic));
            card(s, &format!("waiting-{i}"), waiting.to_string(), &k, "");
        }
    }
    card(s, "running", running.to_string(), "running", "");
    // On a compacted topic, the completions counted are those whose
    // records survive: at least this many.
    let at_least = if b.erased.any() { "≥ " } else { "" };
    card(
        s,
        "completed",
        format!("{at_least}{}", b.completed_total()),
        "completed",
        "",
    );
    card(
        s,
        "not-ok",
        format!("{at_least}{}", b.not_ok_total()),
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
        let mut lease = r
            .lease_ts
            .map_or("–".into(), |t| age(now.saturating_sub(t)));
        if let Some(ahead) = crate::cli::status::clock_ahead(r.newest_ts, now) {
            lease.push_str(&format!(
                " <small class=\"warn\">(its clock runs {} ahead of this host's)</small>",
                age(ahead)
            ));
        }
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

/// The parked orders' table (docs/protocol.md R54–R56: not due yet, or
/// waiting for room on their key, held by nobody), as `status` lists
/// them; nothing when there is none.
fn parked_panel(s: &mut String, b: &Board, now: u64) {
    let rows = crate::cli::status::parked_rows(&b.view, now);
    if rows.is_empty() {
        return;
    }
    let _ = write!(s, "<section class=\"panel\"><h2>Parked orders <small>{} held by nobody until due and their key has room</small></h2><table id=\"parked\"><thead><tr><th>order</th><th>due</th><th>key</th><th>attempt</th></tr></thead><tbody>", rows.len());
    for p in &rows {
        let order = p["order"].as_str().and_then(|o| o.parse::<OrderId>().ok());
        let due = p["due"].as_bool().unwrap_or(true);
        let when = match p["until"].as_str() {
            Some(t) if due => format!("{} <span class=\"pill ok\">due</span>", esc(t)),
            Some(t) => esc(t),
            None => "– <span class=\"pill ok\">due</span>".into(),
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{when}</td><td>{}</td><td>{}</td></tr>",
            order.map_or_else(|| "?".into(), order_link),
            esc(&clip(p["key"].as_str().unwrap_or("–"), 80)),
            p["attempt"].as_u64().unwrap_or(0)
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
    note: Option<&str>,
    now: u64,
    actions: &str,
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
        None if note.is_some() => {
            let _ = write!(
                s,
                "<p class=\"statuses\"><span class=\"pill idle\" id=\"order-status\">erased</span> {}</p>",
                esc(note.unwrap_or_default())
            );
        }
        None if story.is_empty() => s.push_str("<p class=\"statuses\"><span class=\"pill idle\" id=\"order-status\">no record</span> no record about this order in the claims topic</p>"),
        None => s.push_str("<p class=\"statuses\"><span class=\"pill run\" id=\"order-status\">not completed</span></p>"),
    }
    // The message of an action and its forms (logged in; see actions.rs).
    s.push_str(actions);
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
    crate::cli::status::print_history(&mut out, false, order, story, &[], note, None);
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

    fn row(newest_ts: u64) -> InstanceRow {
        InstanceRow {
            instance: 2,
            state: "running",
            order: Some(OrderId::new(0, 7)),
            since_ts: Some(1_000),
            lease_ts: Some(1_000),
            newest_ts,
            attempt: Some(1),
            last: None,
        }
    }

    /// The page lists the parked orders: due time, "due" once past, key
    /// (escaped), attempt; no table when none is parked.
    #[test]
    fn the_page_lists_parked_orders() {
        let mut b = Board::new();
        let mut s = String::new();
        parked_panel(&mut s, &b, 0);
        assert_eq!(s, "");
        b.view = crate::cli::status::tests::parking_view();
        let mut s = String::new();
        parked_panel(&mut s, &b, 1_795_716_030_000);
        let rows: Vec<&str> = s.split("<tr>").skip(2).collect();
        assert_eq!(rows.len(), 3, "{s}");
        assert_eq!(
            rows[0],
            "<td><a href=\"/order/0:0\">0:0</a></td><td>2026-11-26T18:00:00.000Z <span class=\"pill ok\">due</span></td><td>a</td><td>1</td></tr>"
        );
        assert_eq!(
            rows[1],
            "<td><a href=\"/order/0:1\">0:1</a></td><td>– <span class=\"pill ok\">due</span></td><td>b\\x1b[2J</td><td>1</td></tr>"
        );
        assert!(
            rows[2].starts_with("<td><a href=\"/order/0:2\">0:2</a></td><td>2026-11-26T18:01:00.000Z</td><td>–</td><td>2</td></tr>"),
            "{s}"
        );
        assert!(s.contains("3 held by nobody"), "{s}");
    }

    /// The instances' table says when an instance's clock runs ahead of
    /// this host's (its newest record's time in the future), and only then.
    #[test]
    fn the_instances_table_says_when_a_clock_runs_ahead() {
        let now = 10_000;
        let mut s = String::new();
        instances_panel(&mut s, &[row(now + 90_000)], now);
        assert!(s.contains("its clock runs"), "{s}");
        let mut s = String::new();
        instances_panel(&mut s, &[row(now + 500)], now);
        assert!(!s.contains("its clock runs"), "{s}");
    }
}
