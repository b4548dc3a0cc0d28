//! `pool_worker status` and `pool_worker history`: the pool as the claims
//! topic tells it.
//!
//! Both read the claims topic from its beginning to its end with the pool's
//! one claims reader ([`crate::claims`]), and fold it into the same
//! [`View`] a worker builds at boot, so what they show is what the workers
//! themselves conclude. `status` adds the orders topic's offsets, to count
//! what is waiting. Neither writes anything.
//!
//! Counts of completions come from the records the replay saw: on a claims
//! topic that Kafka has compacted, completions older than
//! `min.compaction.lag.ms` may be gone, and the counts say "at least".
//! They are history, which a checkpoint does not carry: `status` reads from
//! the beginning, not from the newest checkpoint.

use crate::boot::View;
use crate::exit::Exit;
use crate::kafka::client_config;
use crate::record::{Event, OrderId, Record, Status};
use anyhow::{bail, Context};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Where to read from: the same variables as the worker's. Each flag falls
/// back to its variable (read by [`crate::config::read`], see
/// [`Source::apply_env`]), then to its default.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// Bootstrap servers [env: KAFKA_BROKERS]
    #[arg(long, default_value = "localhost:9092")]
    pub brokers: String,
    /// The orders topic [env: ORDERS_TOPIC]
    #[arg(long, default_value = "work_orders")]
    pub orders_topic: String,
    /// The claims topic [env: COORDINATION_TOPIC]
    #[arg(long, default_value = "work_claims")]
    pub coordination_topic: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// A file holding the pool's claims key (or set CLAIMS_KEY): records
    /// not signed with it are foreign, as the workers take them
    /// [env: CLAIMS_KEY_FILE]
    #[arg(long, value_name = "FILE")]
    pub claims_key_file: Option<String>,
}

/// The variables [`Source`]'s flags fall back to, and `CLAIMS_KEY`.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub struct SourceEnv {
    #[serde(deserialize_with = "crate::config::parse::text")]
    pub kafka_brokers: Option<String>,
    #[serde(deserialize_with = "crate::config::parse::text")]
    pub orders_topic: Option<String>,
    #[serde(deserialize_with = "crate::config::parse::text")]
    pub coordination_topic: Option<String>,
    #[serde(deserialize_with = "crate::config::parse::text")]
    pub claims_key_file: Option<String>,
    /// A secret: never in a Debug or an error.
    pub claims_key: Option<String>,
}

impl Source {
    /// Flag over variable over default: fills the flags not given on the
    /// command line `m` from the environment.
    pub fn apply_env(&mut self, m: &clap::ArgMatches) -> Result<(), crate::config::ConfigError> {
        self.apply_vars(m, crate::config::env_vars())
    }

    /// [`Source::apply_env`] with these variables.
    pub fn apply_vars(
        &mut self,
        m: &clap::ArgMatches,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), crate::config::ConfigError> {
        use crate::config::flag_or_env;
        let env: SourceEnv = crate::config::read(vars)?;
        flag_or_env(m, "brokers", &mut self.brokers, env.kafka_brokers);
        flag_or_env(m, "orders_topic", &mut self.orders_topic, env.orders_topic);
        flag_or_env(
            m,
            "coordination_topic",
            &mut self.coordination_topic,
            env.coordination_topic,
        );
        flag_or_env(
            m,
            "claims_key_file",
            &mut self.claims_key_file,
            env.claims_key_file.map(Some),
        );
        Ok(())
    }

    /// What decides which claims records are the pool's, as a worker with
    /// the same `CLAIMS_KEY` / `CLAIMS_KEY_FILE` decides it.
    pub fn gate(&self) -> anyhow::Result<crate::kafka::Gate> {
        let value = crate::config::read_env::<SourceEnv>()?.claims_key;
        let file = self
            .claims_key_file
            .as_deref()
            .filter(|f| !f.trim().is_empty())
            .map(|f| (f, std::fs::read(f)));
        let key = crate::sign::ClaimsKey::from_sources(value.as_deref(), file)
            .map_err(anyhow::Error::msg)?;
        Ok(crate::kafka::Gate::new(key, &self.orders_topic))
    }
}

/// The tools' client context: librdkafka's own log and error callbacks
/// say nothing (at debug level at most). A tool reports what failed itself,
/// once, instead of librdkafka's `AllBrokersDown` every second (issue 19).
pub struct Silent;

impl ClientContext for Silent {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::debug!(target: "librdkafka", "{fac}: {message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, "kafka: {reason}");
    }
}

impl ConsumerContext for Silent {}

/// How long [`Source::probe`] waits for a broker to answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl Source {
    /// Asks the brokers for the claims topic's metadata, for at most
    /// [`PROBE_TIMEOUT`]: when none answers, the one line the person who
    /// ran the tool needs (which address, which variable or flag to set).
    pub fn probe(&self) -> anyhow::Result<()> {
        let c: BaseConsumer<Silent> = self
            .client_config()?
            .create_with_context(Silent)
            .context("cannot create a Kafka client")?;
        match c.fetch_metadata(Some(&self.coordination_topic), PROBE_TIMEOUT) {
            Ok(_) => Ok(()),
            Err(e) => bail!(
                "no Kafka broker answered at {} within {} s ({e}); start one (`pool_worker dev` runs a pool on an embedded broker) or set KAFKA_BROKERS (or --brokers) to your brokers' host:port list",
                self.brokers,
                PROBE_TIMEOUT.as_secs()
            ),
        }
    }

    /// The client settings every command shares (`KAFKA_<PROPERTY>`, and
    /// `KAFKA_<PROPERTY>_FILE`, as the worker reads them), with these
    /// brokers. A rejected property is a [`crate::config::ConfigError`]
    /// (exit 2).
    pub fn client_config(&self) -> anyhow::Result<rdkafka::ClientConfig> {
        let settings = crate::config::KafkaSettings::from_env()?;
        Ok(client_config(&self.brokers, &settings.props))
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct StatusArgs {
    #[command(flatten)]
    pub source: Source,
    /// Refresh in place every 2 seconds until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// List the orders that did not end `ok`, each with its status and reason.
    #[arg(long)]
    pub failed: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct HistoryArgs {
    /// The order, as PARTITION:OFFSET.
    pub order: OrderId,
    #[command(flatten)]
    pub source: Source,
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// A client of the pool's topics that joins no group and commits nothing.
pub fn consumer(src: &Source) -> anyhow::Result<BaseConsumer<Silent>> {
    src.client_config()?
        .set("group.id", "pool_worker-status")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create_with_context(Silent)
        .context("cannot create a Kafka consumer")
}

/// The pool's state as one JSON value (the `--json` form; the text form is
/// made from it).
pub fn snapshot(src: &Source, now_ms: u64) -> anyhow::Result<serde_json::Value> {
    let records = crate::claims::read_all(src)?;
    let mut view = View::new();
    let mut by_status: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut last_completion: BTreeMap<u32, serde_json::Value> = BTreeMap::new();
    // The orders that did not end `ok` (`--failed`), in log order.
    let mut not_ok: Vec<serde_json::Value> = Vec::new();
    // Retries' completions by the order they ran again (`retry_of`).
    let mut retried: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for (pos, r) in &records {
        match r {
            Ok(rec) => {
                if view.apply(*pos, rec).is_ok() && rec.event() == Event::Completed {
                    let status = rec.outcome().map_or(Status::Error, |o| o.status);
                    *by_status.entry(status.as_str()).or_default() += 1;
                    if let (Some(of), Some(me)) =
                        (rec.outcome().and_then(|o| o.retry_of.clone()), rec.order())
                    {
                        retried
                            .entry(of)
                            .or_default()
                            .push(json!({"order": me.to_string(), "status": status.as_str()}));
                    }
                    if status != Status::Ok {
                        let o = rec.outcome();
                        not_ok.push(json!({
                            "order": rec.order().map(|o| o.to_string()),
                            "status": status.as_str(),
                            "exit_code": o.and_then(|o| o.exit_code),
                            "reason": o.and_then(|o| o.reason.clone()),
                            "instance": rec.instance,
                            "attempt": rec.attempt(),
                            "ts": rec.ts,
                            "pos": pos,
                        }));
                    }
                    last_completion.insert(
                        rec.instance,
                        json!({"order": rec.order().map(|o| o.to_string()), "status": status.as_str(), "ts": rec.ts}),
                    );
                }
            }
            Err(_) => view.skip(*pos),
        }
    }
    // The orders topic: per partition, its offsets and the frontier.
    let c = consumer(src)?;
    let md = c
        .fetch_metadata(Some(&src.orders_topic), TIMEOUT)
        .with_context(|| format!("cannot read topic '{}'", src.orders_topic))?;
    let parts: Vec<i32> = md
        .topics()
        .first()
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    let (mut in_topic, mut waiting, mut oldest_ts): (i64, i64, Option<i64>) = (0, 0, None);
    for p in parts {
        let (low, high) = c.fetch_watermarks(&src.orders_topic, p, TIMEOUT)?;
        in_topic += high - low;
        let next = view.next_offset(p).max(low);
        if next < high {
            waiting += high - next;
            if let Some(ts) = message_ts(&c, &src.orders_topic, p, next) {
                oldest_ts = Some(oldest_ts.map_or(ts, |o: i64| o.min(ts)));
            }
        }
    }
    let instances: Vec<serde_json::Value> = view
        .instances()
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
                "incarnation": s.booted.as_ref().map(|(_, inc)| inc.clone()),
                "last_completion": last_completion.get(&i),
            })
        })
        .collect();
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
    Ok(json!({
        "claims_records": records.len(),
        "foreign_records": view.foreign,
        "orders_in_topic": in_topic,
        "claimed": claimed,
        "completed": completed,
        // Every completion but `ok` (by_status.failed is one kind of it).
        "not_ok": completed - by_status.get("ok").copied().unwrap_or(0),
        // Orders the broker deleted before they ran (retention,
        // DeleteRecords): completed `deleted`, at once.
        "deleted": by_status.get(Status::Deleted.as_str()).copied().unwrap_or(0),
        // Orders an operator cancelled (`pool_worker cancel`): never run,
        // or their job killed.
        "cancelled": by_status.get(Status::Cancelled.as_str()).copied().unwrap_or(0),
        "by_status": by_status,
        "waiting": waiting,
        "oldest_waiting_age_ms": oldest_ts.map(|t| (now_ms as i64 - t).max(0)),
        "instances": instances,
        "not_ok_orders": not_ok,
    }))
}

/// The first message at or after `offset` of `topic`'s partition `p`
/// that `c` reads within `wait` (the tools read single orders this way:
/// `status`'s oldest waiting order, `serve`'s order pages, `retry`).
pub fn message_at<'c>(
    c: &'c BaseConsumer<Silent>,
    topic: &str,
    p: i32,
    offset: i64,
    wait: Duration,
) -> Option<rdkafka::message::BorrowedMessage<'c>> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(offset))
        .ok()?;
    c.assign(&tpl).ok()?;
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            if m.partition() == p && m.offset() >= offset {
                return Some(m);
            }
        }
    }
    None
}

/// The timestamp of the message at one offset, if it can be read quickly.
fn message_ts(c: &BaseConsumer<Silent>, topic: &str, p: i32, offset: i64) -> Option<i64> {
    message_at(c, topic, p, offset, Duration::from_secs(5))?
        .timestamp()
        .to_millis()
}

/// Whether `c` must not reach a terminal as it is: C0 controls (ESC, CR,
/// BEL, backspace...), DEL, C1 controls (U+0080 to U+009F, which some
/// terminals take as CSI and OSC), and the bidirectional controls and
/// separators that reorder or break what is shown (U+061C, U+200E, U+200F,
/// U+2028 to U+202E, U+2066 to U+2069). Job output and claims records come
/// from orders, that is, from anyone who can write the orders topic.
fn unsafe_for_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` made safe to print on a terminal: every control character (see
/// [`unsafe_for_terminal`]) is shown escaped (`\x1b`, `\r`, `\u{202e}`).
/// `lines`: newlines and tabs are kept (a job's output tail); otherwise
/// they are escaped too (a field printed on one line).
pub fn escape_controls(s: &str, lines: bool) -> String {
    if !s.chars().any(unsafe_for_terminal) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' | '\t' if lines => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && unsafe_for_terminal(c) => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if unsafe_for_terminal(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as one line of JSON that is also safe on a terminal:
/// serde_json escapes C0 controls itself; DEL, the C1 controls and the
/// bidirectional controls are written as `\uXXXX` escapes too (the same
/// JSON value, just spelled in ASCII).
pub fn json_line(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if !s.chars().any(unsafe_for_terminal) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_for_terminal(c) {
            // Outside strings JSON has only ASCII punctuation, digits,
            // letters and whitespace, none of them escaped here but for
            // whitespace, which serde_json's compact form does not write.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The text form of `status --failed`: one line per order that did not
/// end `ok`, with its status, exit code and reason (escaped: a reason can
/// carry a job's text).
pub fn render_failed(s: &serde_json::Value) -> String {
    let list = s["not_ok_orders"].as_array().cloned().unwrap_or_default();
    let mut out = format!("{} orders did not end ok\n", list.len());
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
pub fn render(s: &serde_json::Value) -> String {
    let n = |k: &str| s[k].as_i64().unwrap_or(0);
    let mut out = String::new();
    out.push_str(&format!(
        "orders: {} in topic, {} claimed, {} completed ({} not ok), {} waiting",
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
    if let Some(by) = s["by_status"].as_object() {
        let parts: Vec<String> = by.iter().map(|(k, v)| format!("{k} {v}")).collect();
        if !parts.is_empty() {
            out.push_str(&format!("completions by status: {}\n", parts.join(", ")));
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
    if n("foreign_records") > 0 {
        out.push_str(&format!(
            "{} foreign records skipped\n",
            n("foreign_records")
        ));
    }
    out
}

pub async fn status(args: StatusArgs) -> anyhow::Result<Exit> {
    loop {
        let src = args.source.clone();
        let mut s =
            tokio::task::spawn_blocking(move || snapshot(&src, crate::run::now_ms())).await??;
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

pub async fn history(args: HistoryArgs) -> anyhow::Result<Exit> {
    let src = args.source.clone();
    let records = tokio::task::spawn_blocking(move || crate::claims::read_all(&src)).await??;
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
    print_history(
        &mut std::io::stdout(),
        args.source.json,
        args.order,
        &mine,
        &retries,
    );
    // An order the claims topic knows nothing of is an error for a script
    // (a mistyped PARTITION:OFFSET); the line above still says so.
    Ok(if mine.is_empty() {
        Exit::Failure
    } else {
        Exit::Ok
    })
}

/// Prints the records about one order (`history`): a JSON line, or a line
/// per record with its fields' control characters escaped.
/// `retries`: the completions of the orders that ran it again.
pub fn print_history(
    out: &mut impl std::io::Write,
    json: bool,
    order: OrderId,
    mine: &[(u64, Record)],
    retries: &[(u64, Record)],
) {
    let line = |(p, r): &(u64, Record)| {
        format!(
            "#{p:<6} {:<13} {}",
            r.key(),
            escape_controls(&crate::cli::dev::describe_record(r), false)
        )
    };
    if json {
        let list = |l: &[(u64, Record)]| -> Vec<serde_json::Value> {
            l.iter()
                .map(|(p, r)| json!({"pos": p, "key": r.key(), "record": r}))
                .collect()
        };
        let v =
            json!({"order": order.to_string(), "records": list(mine), "retries": list(retries)});
        let _ = writeln!(out, "{}", json_line(&v));
        return;
    }
    if mine.is_empty() {
        let _ = writeln!(out, "no record about order {order} in the claims topic");
    }
    for r in mine {
        let _ = writeln!(out, "{}", line(r));
    }
    for r in retries {
        let retry = r.1.order().map_or_else(|| "?".into(), |o| o.to_string());
        let _ = writeln!(out, "retried as {retry}: {}", line(r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Outcome, Status};

    /// What a job can print to take over the terminal of whoever reads
    /// its result: clear the screen and move the cursor (ESC, CSI), rewrite
    /// the line (CR), a C1 CSI, bidi overrides, a fake newline.
    const NASTY: &str =
        "ok\x1b[2J\x1b]0;title\x07\rfake\u{9b}31m\u{202e}txt\u{2066}\x7f\x08\nnext\tcol";

    fn no_controls_but_newlines_and_tabs(s: &str) {
        for c in s.chars() {
            assert!(
                c == '\n' || c == '\t' || !unsafe_for_terminal(c),
                "{c:?} in {s:?}"
            );
        }
    }

    /// Issue 20: a flag over its variable over its default, the variable
    /// read through `config::read` (an empty one is unset).
    #[test]
    fn a_flag_overrides_its_variable_which_overrides_the_default() {
        use clap::{CommandFactory, FromArgMatches};
        #[derive(clap::Parser, Debug)]
        struct Tool {
            #[command(flatten)]
            source: Source,
        }
        let resolve = |args: &[&str], vars: &[(&str, &str)]| {
            let m = Tool::command().get_matches_from(args);
            let mut t = Tool::from_arg_matches(&m).unwrap();
            let vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            t.source.apply_vars(&m, vars).map(|()| t.source)
        };
        let s = resolve(&["t"], &[]).unwrap();
        assert_eq!(
            (
                s.brokers.as_str(),
                s.orders_topic.as_str(),
                s.claims_key_file
            ),
            ("localhost:9092", "work_orders", None)
        );
        let env = [
            ("KAFKA_BROKERS", "h:1"),
            ("ORDERS_TOPIC", "o"),
            ("COORDINATION_TOPIC", " "),
            ("CLAIMS_KEY_FILE", "/k"),
        ];
        let s = resolve(&["t"], &env).unwrap();
        assert_eq!(
            (
                s.brokers.as_str(),
                s.orders_topic.as_str(),
                s.coordination_topic.as_str()
            ),
            ("h:1", "o", "work_claims")
        );
        assert_eq!(s.claims_key_file.as_deref(), Some("/k"));
        let s = resolve(
            &[
                "t",
                "--brokers",
                "h:2",
                "--claims-key-file",
                "/f",
                "--orders-topic",
                "work_orders",
            ],
            &env,
        )
        .unwrap();
        assert_eq!(
            (
                s.brokers.as_str(),
                s.orders_topic.as_str(),
                s.claims_key_file.as_deref()
            ),
            ("h:2", "work_orders", Some("/f")),
            "a flag wins, even one equal to the default"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        let e = escape_controls(NASTY, true);
        no_controls_but_newlines_and_tabs(&e);
        assert_eq!(
            e,
            "ok\\x1b[2J\\x1b]0;title\\x07\\rfake\\u{009b}31m\\u{202e}txt\\u{2066}\\x7f\\x08\nnext\tcol"
        );
        let one = escape_controls(NASTY, false);
        assert!(
            !one.contains('\n') && !one.contains('\t') && one.contains("\\nnext\\tcol"),
            "{one}"
        );
        assert_eq!(
            escape_controls("plain text, ünïcödé", false),
            "plain text, ünïcödé"
        );
    }

    #[test]
    fn json_stays_json_and_the_same_value() {
        let v = json!({"stdout": NASTY, "n": 3});
        let line = json_line(&v);
        assert!(
            line.is_ascii() || line.chars().all(|c| !unsafe_for_terminal(c)),
            "{line}"
        );
        for c in line.chars() {
            assert!(!unsafe_for_terminal(c), "{c:?} in {line}");
        }
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, v);
    }

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

    /// `history` and `status`: record fields reach the terminal escaped.
    #[test]
    fn history_and_status_print_no_control_characters() {
        let (rec, _) = completed(NASTY, NASTY);
        let mut booted = Record::of(2, Event::Booted, NASTY, 1);
        booted.set_reason(Some(NASTY.into()));
        let mine = [(3, booted), (7, rec)];
        for json in [false, true] {
            let mut out = Vec::new();
            print_history(&mut out, json, OrderId::new(0, 4), &mine, &[]);
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
