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

mod actions;
mod auth;
mod board;
mod html;

use crate::backoff::Backoff;
use crate::kafka::claims_reader::{Polled, Start};
use crate::kafka::tools::{Source, ToolClient};
use crate::record::OrderId;
use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use board::{Board, Done};
use html::{esc, layout, render_live, render_order};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// Its --help: the doc of `Command::Serve` (pool_worker/src/cli.rs).
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
    #[serde(deserialize_with = "crate::env::parse::text")]
    pub(crate) serve_listen: Option<String>,
    /// The token that lets a person act from the page (auth.rs). A secret:
    /// never in a Debug or an error.
    pub(crate) serve_token: Option<String>,
    /// A file holding it (not both).
    #[serde(deserialize_with = "crate::env::parse::text")]
    pub(crate) serve_token_file: Option<String>,
}

/// How often the orders topic's offsets are read.
const ORDERS_REFRESH: Duration = Duration::from_secs(2);

// ------------------------------------------------------------------ the tail

/// The claims topic, folded into `board` for as long as the process runs;
/// the orders topic's offsets read every [`ORDERS_REFRESH`].
fn tail(src: Source, board: Arc<Mutex<Board>>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let (reader, orders) = loop {
        // A topic the brokers refuse to this principal (no ACL) or a claims
        // topic with several partitions: waiting changes nothing, so one
        // line and exit 1 (no broker answering yet is waited for).
        if let Ok(c) = src.consumer() {
            if let Ok(Err(problem)) = src.check_topics(&c, Duration::from_secs(5)) {
                eprintln!("pool_worker: {problem}");
                crate::process_exit::exit_now(crate::process_exit::Exit::Failure);
            }
        }
        let opened = src
            .claims_reader(Start::Beginning)
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
                Polled::Error(e) => crate::kafka::claims_reader::say_error(&e),
                Polled::Broken(p) => {
                    eprintln!("pool_worker: {p}");
                    crate::process_exit::exit_now(crate::process_exit::Exit::Failure);
                }
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
fn refresh_orders(src: &Source, c: &ToolClient, board: &Mutex<Board>) {
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
    b.waiting_by_topic = w.by_topic;
    b.orders_read |= caught_up;
}

/// The message at one offset of `topic`: its timestamp and payload, if it
/// can be read within a few seconds.
fn read_message(
    c: &ToolClient,
    topic: &str,
    p: i32,
    offset: i64,
) -> Option<(Option<i64>, Vec<u8>)> {
    let m = crate::kafka::tools::message_at(c, topic, p, offset, Duration::from_secs(5))
        .filter(|m| m.offset == offset)?;
    Some((m.timestamp, m.payload.unwrap_or_default()))
}

// ------------------------------------------------------------------ the web

#[derive(Clone)]
struct App {
    board: Arc<Mutex<Board>>,
    src: Source,
    /// The token, when one is set: the page can act (actions.rs).
    auth: Option<Arc<auth::Auth>>,
    /// `SCHEDULE_FILE`'s schedules: their next firings are shown.
    schedules: Arc<Vec<crate::schedule::Schedule>>,
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<crate::process_exit::Exit> {
    // Configuration errors (a bad key, a rejected property) before listening.
    args.source.gate()?;
    args.source.client_config()?;
    let env: ServeEnv = crate::env::read_env()?;
    let auth =
        auth::Auth::from_sources(env.serve_token.as_deref(), env.serve_token_file.as_deref())?
            .map(Arc::new);
    let schedules = Arc::new(args.source.schedules()?);
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
    match &auth {
        Some(_) => tracing::info!("serve: a token is set: who logs in with it can submit, cancel and retry orders from the page"),
        None => tracing::info!("serve: no SERVE_TOKEN nor SERVE_TOKEN_FILE: the page is read-only"),
    }
    let board = Arc::new(Mutex::new(Board::new()));
    let (src, b) = (args.source.clone(), board.clone());
    std::thread::Builder::new()
        .name("claims-tail".into())
        .spawn(move || tail(src, b))?;
    let with_actions = auth.is_some();
    let app = App {
        board,
        src: args.source,
        auth,
        schedules,
    };
    let mut router = Router::new()
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
        );
    // Without a token, no route acts: a POST anywhere is 404 or 405.
    if with_actions {
        router = router.merge(actions::routes()).route(
            "/actions.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    ACTIONS_SCRIPT,
                )
            }),
        );
    }
    let router = router
        .layer(axum::middleware::map_response(security_headers))
        .with_state(app);
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(crate::process_exit::Exit::Ok)
}

const STYLE: &str = include_str!("serve/style.css");
const SCRIPT: &str = include_str!("serve/live.js");
const ACTIONS_SCRIPT: &str = include_str!("serve/actions.js");

/// On every answer: no framing (a page with buttons must not be clickable
/// through another site's frame), nothing but this server's own scripts,
/// styles and forms.
async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    r
}

async fn metrics(State(app): State<App>) -> Response {
    let text = lock(&app.board).metrics_text(crate::clock::wall_ms());
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
    let now = crate::clock::wall_ms();
    let b = lock(&app.board);
    let instances: Vec<serde_json::Value> = b
        .instances()
        .iter()
        .map(|r| {
            json!({"instance": r.instance, "state": r.state, "order": r.order.map(|o| o.to_string()),
                   "since_ts": r.since_ts, "lease_ts": r.lease_ts, "attempt": r.attempt,
                   "clock_ahead_ms": crate::cli::status::clock_ahead(r.newest_ts, now)})
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
        // Each orders topic in priority order (R57), as `status` says it.
        "orders_by_topic": b.waiting_by_topic.iter().map(|(topic, held, waiting)| json!({
            "topic": topic, "in_topic": held, "waiting": waiting,
        })).collect::<Vec<_>>(),
        "running": instances.iter().filter(|i| i["state"] == "running").count(),
        "completed": b.completed_total(),
        "not_ok": b.not_ok_total(),
        // Positions with no record (compaction): completed and not_ok are
        // then lower bounds.
        "erased": b.erased,
        "completed_is_lower_bound": b.erased.any(),
        "by_status": b.by_status,
        "oldest_waiting_age_ms": b.oldest_waiting_age_ms(now),
        "instances": instances,
        "newest": b.newest.iter().map(done).collect::<Vec<_>>(),
        "failed": b.failed.iter().map(done).collect::<Vec<_>>(),
        "per_minute": b.per_minute(now).iter().map(|(m, n)| json!([m * 60_000, n])).collect::<Vec<_>>(),
        "schedules": crate::schedule_file::rows(&app.schedules, &b.view, now),
    });
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

async fn page(State(app): State<App>, h: HeaderMap) -> Response {
    let (viewer, flash) = actions::viewer(&app, &h);
    let topics = app
        .src
        .orders()
        .map(|o| o.names().to_vec())
        .unwrap_or_default();
    let (head, controls) = actions::main_controls(&viewer, &topics);
    let body = {
        let b = lock(&app.board);
        let now = crate::clock::wall_ms();
        render_live(&b, now) + &schedules_panel(&app.schedules, &b.view, now)
    };
    let html = layout(
        "pool_worker",
        &format!(
            "<header><h1>pool_worker</h1><span class=\"src\">{} · orders <b>{}</b> · claims <b>{}</b></span>{head}</header>\
             {}{controls}<main id=\"live\">{body}</main><script src=\"/live.js\"></script>",
            esc(&app.src.brokers),
            esc(&app.src.orders_topic),
            esc(&app.src.coordination_topic),
            actions::flash_html(flash.as_ref()),
        ),
    );
    actions::page_response(&viewer, flash.is_some(), html)
}

async fn live(State(app): State<App>) -> Html<String> {
    let b = lock(&app.board);
    let now = crate::clock::wall_ms();
    Html(render_live(&b, now) + &schedules_panel(&app.schedules, &b.view, now))
}

/// The schedules' table: each one's next firings and the last one the log
/// announced (none without `SCHEDULE_FILE`).
fn schedules_panel(
    schedules: &[crate::schedule::Schedule],
    view: &crate::boot::View,
    now: u64,
) -> String {
    if schedules.is_empty() {
        return String::new();
    }
    let rows = crate::schedule_file::rows(schedules, view, now);
    let mut s = String::from(
        "<section><div class=\"panel\"><h2>Schedules</h2><table><thead><tr><th>name</th><th>cron</th><th>zone</th><th>catch-up</th><th>next (UTC)</th><th>last run</th></tr></thead><tbody>",
    );
    for r in rows.as_array().into_iter().flatten() {
        let text = |k: &str| esc(r[k].as_str().unwrap_or(""));
        let next: Vec<String> = r["next"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(esc))
            .collect();
        let last = match (r["last"]["at"].as_str(), r["last"]["order"].as_str()) {
            (Some(at), Some(order)) => format!(
                "{} (<a href=\"/order/{}\">{}</a>)",
                esc(at),
                esc(order),
                esc(order)
            ),
            _ => "none known".to_string(),
        };
        s.push_str(&format!(
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{last}</td></tr>",
            text("name"),
            text("cron"),
            text("zone"),
            text("catch_up"),
            next.join("<br>")
        ));
    }
    s.push_str("</tbody></table></div></section>");
    s
}

async fn order_page(State(app): State<App>, Path(id): Path<String>, h: HeaderMap) -> Response {
    let parsed = app
        .src
        .orders()
        .map_err(|e| e.0)
        .and_then(|o| o.parse_order(&id));
    let order: OrderId = match parsed {
        Ok(o) => o,
        Err(e) => {
            let body = format!(
                "<main><p class=\"err\">{}</p><p><a href=\"/\">back</a></p></main>",
                esc(&e)
            );
            return (StatusCode::BAD_REQUEST, Html(layout("bad order", &body))).into_response();
        }
    };
    // The records kept, and what compaction took of them (as `history`
    // says it).
    let kept = {
        let b = lock(&app.board);
        let with_note = |s: Vec<(u64, crate::record::Record)>| {
            let note = crate::cli::status::compaction_note(order, &s, &b.view, &b.erased);
            (s, note)
        };
        match b.story(order) {
            Some(s) => Some(with_note(s.to_vec())),
            // Not claimed yet: nothing to read.
            None if order.offset >= b.view.next_offset(order.lane()) => Some((Vec::new(), None)),
            None => None,
        }
    };
    let src = app.src.clone();
    let fetched = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let (story, note) = match kept {
            Some(s) => s,
            // Not kept (an older order): read the claims topic as `history` does.
            None => {
                let log = crate::kafka::tools::read_all(&src)?;
                let mut view = crate::boot::View::new();
                let mut erased = crate::erased::Erased::new();
                let mut story = Vec::new();
                for (p, r) in log {
                    erased.note(p, r.as_ref().ok());
                    match r {
                        Ok(r) => {
                            let _ = view.apply(crate::record::Position::new(p), &r);
                            if r.order() == Some(order) {
                                story.push((p, r));
                            }
                        }
                        Err(_) => view.skip(crate::record::Position::new(p)),
                    }
                }
                let note = crate::cli::status::compaction_note(order, &story, &view, &erased);
                (story, note)
            }
        };
        let c = src.consumer()?;
        let topic = src.topic_name(order.topic)?;
        let text = read_message(&c, &topic, order.partition, order.offset);
        Ok((story, note, text))
    })
    .await;
    let (story, note, text) = match fetched {
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
    let now = crate::clock::wall_ms();
    let code = if story.is_empty() && text.is_none() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    let (viewer, flash) = actions::viewer(&app, &h);
    let completed = story
        .iter()
        .any(|(_, r)| r.event() == crate::record::Event::Completed);
    let controls = format!(
        "{}{}",
        actions::flash_html(flash.as_ref()),
        actions::order_controls(&viewer, order, completed)
    );
    let html = layout(
        &format!("order {order}"),
        &render_order(
            order,
            &story,
            text.as_ref().map(|t| t.1.as_slice()),
            note.as_deref(),
            now,
            &controls,
        ),
    );
    let mut r = actions::page_response(&viewer, flash.is_some(), html);
    *r.status_mut() = code;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Event, Foreign, Outcome, Record, Status};
    use std::collections::BTreeMap;

    const EVIL: &str = "<script>alert(1)</script>\"'&<img src=x onerror=alert(2)>\x1b[2J\u{202e}";

    /// A board of order `o` run by instance 1: booted, claimed, committed,
    /// completed at 5 s with `outcome`, announcing `id`.
    fn board_with_a_run(o: OrderId, id: Option<&str>, outcome: Outcome) -> Board {
        let mut b = Board::new();
        b.apply(0, Ok(Record::of(1, Event::Booted, "inc", 1_000)));
        let mut claim = Record::of(1, Event::Claimed, "inc", 2_000).with_order(o);
        claim.seq = 1;
        claim.set_attempt(1);
        claim.next = BTreeMap::from([(o.lane(), o.offset + 1)]);
        b.apply(1, Ok(claim));
        let mut commit = Record::of(1, Event::Committed, "inc", 2_100).with_order(o);
        commit.seq = 2;
        commit.set_attempt(1);
        b.apply(2, Ok(commit));
        let mut done = Record::of(1, Event::Completed, "inc", 5_000).with_order(o);
        done.seq = 3;
        done.set_attempt(1);
        done.set_order_id(id.map(str::to_string));
        done.set_outcome(Some(outcome));
        b.apply(3, Ok(done));
        b
    }

    fn board_with_a_failure() -> (Board, OrderId) {
        let o = OrderId::new(0, 7);
        let mut b = board_with_a_run(
            o,
            None,
            Outcome {
                status: Status::Failed,
                exit_code: Some(3),
                duration_ms: 2_800,
                reason: None,
                stdout_tail: EVIL.into(),
                stderr_tail: EVIL.into(),
                traceparent: None,
                retry_of: None,
            },
        );
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

    /// On a compacted claims topic (seqs missing), the page and the
    /// metrics say that the counts are lower bounds and how much is gone;
    /// an order whose records are all erased is shown as erased, not as
    /// unknown.
    #[test]
    fn a_compacted_topic_is_said_to_be_one() {
        let o = OrderId::new(0, 3);
        let mut b = Board::new();
        // The incarnation's seqs 1 to 5 (at 0 to 4), 7 (at 6) and 10 (at
        // 9) erased: 7 records.
        let mut booted = Record::of(1, Event::Booted, "inc", 1_000);
        booted.seq = 6;
        b.apply(5, Ok(booted));
        let mut claim = Record::of(1, Event::Claimed, "inc", 2_000).with_order(o);
        claim.seq = 8;
        claim.set_attempt(1);
        claim.next = BTreeMap::from([(0.into(), 8)]);
        b.apply(7, Ok(claim));
        let mut commit = Record::of(1, Event::Committed, "inc", 2_100).with_order(o);
        commit.seq = 9;
        commit.set_attempt(1);
        b.apply(8, Ok(commit));
        let mut done = Record::of(1, Event::Completed, "inc", 5_000).with_order(o);
        done.seq = 11;
        done.set_attempt(1);
        done.set_outcome(Some(Outcome::not_run(Status::Ok, "")));
        b.apply(10, Ok(done));
        assert_eq!(
            (b.erased.records, b.erased.first, b.erased.before),
            (7, Some(0), Some(10))
        );
        assert_eq!(b.completed_total(), 1);
        let m = b.metrics_text(10_000);
        for line in [
            "pool_worker_claims_erased_records 7",
            "pool_worker_order_latency_seconds_count 1",
        ] {
            assert!(m.lines().any(|l| l == line), "no {line:?} in\n{m}");
        }
        let live = render_live(&b, 10_000);
        assert!(
            live.contains("id=\"erased\"") && live.contains("compaction erased at least 7 records"),
            "{live}"
        );
        assert!(live.contains("id=\"completed\">≥ 1<"), "{live}");
        // Order 0:1 was claimed (the frontier is 8), nothing of it survives.
        let gone = OrderId::new(0, 1);
        let note = crate::cli::status::compaction_note(gone, &[], &b.view, &b.erased);
        let page = render_order(gone, &[], None, note.as_deref(), 10_000, "");
        assert!(
            page.contains("id=\"order-status\">erased<")
                && page.contains("no record about order 0:1 survives"),
            "{page}"
        );
        // Not claimed yet: no note.
        assert_eq!(
            crate::cli::status::compaction_note(OrderId::new(0, 8), &[], &b.view, &b.erased),
            None
        );
    }

    /// The schedules' table: each schedule's next firings after `now`, in
    /// UTC from its own zone, and the last firing the log announced,
    /// linked to its order; nothing at all without schedules.
    #[test]
    fn the_schedules_table_shows_next_firings_and_the_last_run() {
        let schedules = crate::schedule::parse(
            r#"[{"name":"nightly","cron":"30 2 * * *","zone":"Europe/Paris","order":{"cmd":["true"]}},
                {"name":"hourly","cron":"0 * * * *","catch_up":"all","order":{"cmd":["true"]}}]"#,
        )
        .unwrap();
        // Order 0:7, the firing of 28 February (02:30 in Paris, UTC+1),
        // committed and completed by instance 1, which announced its id.
        let b = board_with_a_run(
            OrderId::new(0, 7),
            Some("schedule:nightly:2026-02-28T01:30:00Z"),
            Outcome::not_run(Status::Ok, ""),
        );

        // 1 March 2026, 00:10 UTC (01:10 in Paris).
        let now = 1_772_323_800_000;
        let html = schedules_panel(&schedules, &b.view, now);
        let row = |name: &str| {
            let at = html
                .find(&format!("<tr><td>{name}</td>"))
                .unwrap_or_else(|| panic!("no row of {name}: {html}"));
            let end = at + html[at..].find("</tr>").unwrap();
            html[at..end].to_string()
        };
        let nightly = row("nightly");
        assert!(
            nightly.contains(
                "<td>2026-03-01T01:30:00Z<br>2026-03-02T01:30:00Z<br>2026-03-03T01:30:00Z</td>"
            ),
            "{nightly}"
        );
        assert!(
            nightly.contains("<td>Europe/Paris</td><td>latest</td>"),
            "{nightly}"
        );
        assert!(
            nightly.contains("2026-02-28T01:30:00Z (<a href=\"/order/0:7\">0:7</a>)"),
            "{nightly}"
        );
        let hourly = row("hourly");
        assert!(
            hourly.contains(
                "<td>2026-03-01T01:00:00Z<br>2026-03-01T02:00:00Z<br>2026-03-01T03:00:00Z</td>"
            ),
            "{hourly}"
        );
        assert!(
            hourly.contains("<td>all</td>") && hourly.contains("none known"),
            "{hourly}"
        );
        assert_eq!(schedules_panel(&[], &b.view, now), "");
    }

    /// Job output and reasons reach the page as text, never as markup.
    #[test]
    fn job_output_is_escaped_on_every_page() {
        let (b, o) = board_with_a_failure();
        let live = render_live(&b, 10_000);
        let story: Vec<(u64, Record)> = b.story(o).unwrap().to_vec();
        assert_eq!(story.len(), 3, "claim, commit, completion");
        let order = render_order(o, &story, Some(EVIL.as_bytes()), None, 10_000, "");
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
