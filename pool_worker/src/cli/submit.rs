//! `pool_worker submit`: send one order, and optionally wait for its result.
//!
//! ```text
//! pool_worker submit -- sh -c 'echo hi'        # argv, sent as a JSON order
//! pool_worker submit --text 'echo hi'          # a plain-text command line
//! pool_worker submit --json order.json         # a JSON order from a file (- for stdin)
//! pool_worker submit --wait -- make test       # wait, print the result, exit with the job's code
//! pool_worker submit --in 10m -- make report    # not run before ten minutes from now
//! pool_worker submit --at 2026-11-27T06:00:00+01:00 --key db -- make backup
//! pool_worker submit --topic urgent -- make hotfix  # to a priority topic (R57)
//! ```
//!
//! `--topic` names one of `ORDERS_TOPIC`'s topics; the default is the main
//! one (the list's last), so that a priority is asked for, never given by
//! mistake.
//!
//! `--at` and `--in` set the order's `not_before`, `--key` its `key`
//! (docs/protocol.md R54, R56): the order is sent as JSON, a plain-text
//! command line (`--text`, or a `--json-file` that holds one) as
//! `{"cmd": [...]}`, which runs the same words the same way.
//!
//! The order is checked with the workers' own parser before it is sent, so a
//! malformed order is refused here with the reason instead of being completed
//! as an error later. It prints the order's `PARTITION:OFFSET` (its identity
//! in the pool; `TOPIC:PARTITION:OFFSET` in a priority topic). `--wait` then reads the claims topic (from its newest
//! checkpoint, [`crate::kafka::claims_reader`]) until the order's `completed` record
//! appears, prints the outcome, and exits with the job's
//! exit code (1 when the order did not run to an exit code, for example a
//! time-out or a refusal).

use crate::cli::blocking;
use crate::kafka::claims_reader::{Polled, Start};
use crate::kafka::tools::Source;
use crate::process_exit::Exit;
use crate::record::{Event, OrderId, Outcome, Position, Record, Topic};
use anyhow::{bail, Context};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SubmitArgs {
    /// A plain-text command line (split like a shell would, run without one).
    #[arg(long, conflicts_with_all = ["json_file", "argv"])]
    pub(crate) text: Option<String>,
    /// A JSON order from this file (`-` for standard input).
    #[arg(long = "json-file", value_name = "FILE", conflicts_with = "argv")]
    pub(crate) json_file: Option<String>,
    /// Not run before this time (RFC 3339: 2026-11-27T06:00:00Z,
    /// 2026-11-27T07:00:00+01:00): the order's `not_before`. The instance
    /// that claims the order judges it by its own clock.
    #[arg(long, value_name = "TIME", value_parser = parse_at, conflicts_with = "in_")]
    pub(crate) at: Option<String>,
    /// Not run before this long from now (90s, 15m, 2h, 1d, 1h30m): the
    /// order's `not_before`, this machine's clock plus DURATION.
    #[arg(long = "in", id = "in_", value_name = "DURATION", value_parser = parse_in)]
    pub(crate) in_: Option<Duration>,
    /// The order's `key`: at most KEY_CONCURRENCY orders of one key run at
    /// once across the pool (not empty; at most 256 bytes).
    #[arg(long, value_name = "KEY")]
    pub(crate) key: Option<String>,
    /// The orders topic to send it to: one of ORDERS_TOPIC's (R57: an idle
    /// instance takes an order of the first topic that has one). Default:
    /// the main topic, the list's last.
    #[arg(long, value_name = "NAME")]
    pub(crate) topic: Option<String>,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) source: Source,
    /// The program and its arguments (after `--`).
    #[arg(last = true)]
    pub(crate) argv: Vec<String>,
}

/// `--wait` and how long it waits (`submit`, `retry`).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct WaitArgs {
    /// Wait for the order's completion, print it, exit with the job's code.
    #[arg(long)]
    pub(crate) wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value_t = 3600)]
    pub(crate) wait_timeout_secs: u64,
}

/// `--at`: an RFC 3339 time, kept as written.
fn parse_at(t: &str) -> Result<String, String> {
    crate::orders::check_not_before(t)
        .map(|_| t.to_string())
        .map_err(|_| {
            format!("{t:?} is not an RFC 3339 time at or after 1970 (like 2026-11-27T06:00:00Z)")
        })
}

/// `--in`: a duration like `90s`, `15m`, `2h`, `1d` (humantime's).
fn parse_in(d: &str) -> Result<Duration, String> {
    humantime::parse_duration(d)
        .map_err(|e| format!("{d:?} is not a duration like 90s, 15m, 2h, 1d: {e}"))
}

/// `payload` with `not_before` and `key` set (none: unchanged). A JSON
/// order gets the fields (refused if it has one already, whose value the
/// option would silently replace); a plain-text command line becomes
/// `{"cmd": [its words]}`: a plain-text order is exactly that, a program
/// and its arguments, run without a shell. An invalid order is refused
/// with the parser's reason.
pub(crate) fn with_terms(
    payload: Vec<u8>,
    not_before: Option<&str>,
    key: Option<&str>,
) -> Result<Vec<u8>, String> {
    if not_before.is_none() && key.is_none() {
        return Ok(payload);
    }
    let spec =
        crate::orders::parse(Some(&payload)).map_err(|e| format!("not a valid order: {e}"))?;
    let text = String::from_utf8_lossy(&payload);
    let mut order = if text.trim_start().starts_with('{') {
        match serde_json::from_str::<serde_json::Value>(text.trim()) {
            Ok(serde_json::Value::Object(o)) => o,
            _ => return Err("not a valid order: not a JSON object".into()),
        }
    } else {
        let crate::orders::OrderKind::Command { argv } = spec.kind else {
            return Err("not a valid order: a plain-text order is a command line".into());
        };
        let mut o = serde_json::Map::new();
        o.insert("cmd".into(), json!(argv));
        o
    };
    for (field, value, option) in [
        ("not_before", not_before, "--at/--in"),
        ("key", key, "--key"),
    ] {
        let Some(value) = value else { continue };
        if order.contains_key(field) {
            return Err(format!(
                "the order has '{field}' already: give it there or with {option}, not both"
            ));
        }
        order.insert(field.into(), json!(value));
    }
    let out = serde_json::Value::Object(order).to_string().into_bytes();
    crate::orders::parse(Some(&out)).map_err(|e| format!("not a valid order: {e}"))?;
    Ok(out)
}

/// `now` plus `d` as RFC 3339 (ms), if it is a time RFC 3339 can write
/// (up to the year 9999).
fn in_from(now: std::time::SystemTime, d: Duration) -> Result<String, String> {
    const YEAR_10000: Duration = Duration::from_secs(253_402_300_800);
    match now.checked_add(d) {
        Some(t)
            if t.duration_since(std::time::UNIX_EPOCH)
                .is_ok_and(|s| s < YEAR_10000) =>
        {
            Ok(humantime::format_rfc3339_millis(t).to_string())
        }
        _ => Err(format!(
            "--in {}: too far ahead",
            humantime::format_duration(d)
        )),
    }
}

impl SubmitArgs {
    /// `--topic` must be one of the orders topics (exit 2 otherwise).
    pub(crate) fn check_topic(&self) -> Result<(), crate::env::ConfigError> {
        self.topic().map(drop)
    }

    /// The orders topic `--topic` names (the main one without it).
    fn topic(&self) -> Result<Topic, crate::env::ConfigError> {
        let orders = self.source.orders()?;
        match &self.topic {
            None => Ok(Topic::MAIN),
            Some(name) => orders.topic_of(name.trim()).ok_or_else(|| {
                crate::env::ConfigError(format!(
                    "--topic {name}: not one of ORDERS_TOPIC ({orders})"
                ))
            }),
        }
    }

    /// The order's `not_before` from `--at`, or `--in` from `now` (this
    /// machine's clock), as RFC 3339.
    fn not_before(&self, now: std::time::SystemTime) -> Result<Option<String>, String> {
        if let Some(at) = &self.at {
            return Ok(Some(at.clone()));
        }
        let Some(d) = self.in_ else {
            return Ok(None);
        };
        in_from(now, d).map(Some)
    }

    fn base_payload(&self) -> anyhow::Result<Vec<u8>> {
        if let Some(t) = &self.text {
            return Ok(t.clone().into_bytes());
        }
        if let Some(f) = &self.json_file {
            return if f == "-" {
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)
                    .context("reading standard input")?;
                Ok(v)
            } else {
                std::fs::read(f).with_context(|| format!("cannot read {f}"))
            };
        }
        if self.argv.is_empty() {
            bail!("nothing to submit: give `-- PROGRAM ARGS...`, --text or --json-file");
        }
        Ok(json!({ "cmd": self.argv }).to_string().into_bytes())
    }
}

pub(crate) async fn run(args: SubmitArgs) -> anyhow::Result<Exit> {
    let base = args.base_payload()?;
    let terms = args
        .not_before(std::time::SystemTime::now())
        .and_then(|nb| with_terms(base, nb.as_deref(), args.key.as_deref()));
    let payload = match terms {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pool_worker submit: {e}");
            return Ok(Exit::Config);
        }
    };
    send(&args.source, args.topic()?, payload, &args.wait).await
}

/// Sends one order to the orders topic `topic` (checked first:
/// [`Exit::Config`] if invalid), prints its `PARTITION:OFFSET`
/// (`TOPIC:PARTITION:OFFSET` outside the main topic), and with `--wait`
/// waits for its completion (`submit`, `retry`). Returns the exit status:
/// with `--wait`, the job's own ([`Exit::Job`]; or [`Exit::WaitTimedOut`]).
pub(crate) async fn send(
    src: &Source,
    topic: Topic,
    payload: Vec<u8>,
    wait: &WaitArgs,
) -> anyhow::Result<Exit> {
    let (order, claims_from) = match check_and_send(src, topic, &payload).await? {
        Ok(sent) => sent,
        Err(e) => {
            eprintln!("pool_worker submit: {e}");
            return Ok(Exit::Config);
        }
    };
    if src.json {
        println!(
            "{}",
            json!({"event": "submitted", "order": order.to_string()})
        );
    } else {
        println!("{order}");
    }
    if !wait.wait {
        return Ok(Exit::Ok);
    }
    let timeout = Duration::from_secs(wait.wait_timeout_secs);
    let Some(outcome) = await_completion(src, claims_from, order, timeout).await? else {
        eprintln!(
            "pool_worker submit: order {order} not completed within {} s",
            wait.wait_timeout_secs
        );
        return Ok(Exit::WaitTimedOut);
    };
    // The job's own exit status; a job that ended without one (killed by a
    // signal, never started) is a failure.
    Ok(match outcome.exit_code {
        Some(c) => Exit::Job(c.clamp(0, 255) as u8),
        None => Exit::Failure,
    })
}

/// Checks `payload` with the workers' own parser and sends it to the
/// orders topic `topic`: the order (its position) and the claims topic's end just
/// before it was sent (its completion is looked for from there), or why it
/// is not a valid order (nothing sent). `submit`, `retry` and `serve`'s
/// submit and retry buttons.
pub(crate) async fn check_and_send(
    src: &Source,
    topic: Topic,
    payload: &[u8],
) -> anyhow::Result<Result<(OrderId, i64), String>> {
    if let Err(e) = crate::orders::parse(Some(payload)) {
        return Ok(Err(format!("not a valid order: {e}")));
    }
    // A bad CLAIMS_KEY is refused before anything is sent.
    src.gate()?;
    // Start reading the claims topic at its current end *before* sending, so
    // that no completion can be missed.
    let s = src.clone();
    let claims_from = blocking(move || s.claims_end()).await?;
    let order = src.send_order_to(topic, payload).await?;
    Ok(Ok((order, claims_from)))
}

/// Waits at most `timeout` for `order`'s completion (see
/// [`wait_completed`]; `from`: the claims topic's end before the order or
/// its cancel was written) and prints it ([`print_completion`]); its
/// outcome, or `None` when the time ran out (`submit`, `retry`, `cancel`).
pub(crate) async fn await_completion(
    src: &Source,
    from: i64,
    order: OrderId,
    timeout: Duration,
) -> anyhow::Result<Option<Outcome>> {
    let s = src.clone();
    let done = blocking(move || wait_completed(&s, from, order, timeout)).await?;
    let Some((rec, outcome)) = done else {
        return Ok(None);
    };
    print_completion(
        &mut std::io::stdout(),
        &mut std::io::stderr(),
        src.json,
        order,
        &rec,
        &outcome,
    );
    Ok(Some(outcome))
}

/// Prints a completion: as one JSON line, or the job's output tails (stdout
/// and stderr) and a summary line. The tails and the reason come from the
/// job, that is, from whoever wrote the order: their control characters are
/// escaped (`show::escape_controls`), so that they cannot drive the
/// terminal (move the cursor, rewrite earlier lines, set the title...).
pub(crate) fn print_completion(
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
    json: bool,
    order: OrderId,
    rec: &Record,
    outcome: &Outcome,
) {
    use crate::cli::show::{escape_controls, json_line};
    if json {
        let v = json!({"event": "completed", "order": order.to_string(), "instance": rec.instance, "outcome": outcome});
        let _ = writeln!(out, "{}", json_line(&v));
        return;
    }
    let _ = write!(out, "{}", escape_controls(&outcome.stdout_tail, true));
    let _ = out.flush();
    let tail = escape_controls(&outcome.stderr_tail, true);
    // The summary starts a line of its own: a tail cannot make it look
    // like part of the job's output, nor end a line it wrote.
    let _ = write!(
        err,
        "{tail}{}",
        if tail.is_empty() || tail.ends_with('\n') {
            ""
        } else {
            "\n"
        }
    );
    let _ = writeln!(
        err,
        "order {order}: {} on instance {} (attempt {}){}{}",
        outcome.status,
        rec.instance,
        rec.attempt(),
        outcome
            .exit_code
            .map(|c| format!(", exit {c}"))
            .unwrap_or_default(),
        outcome
            .reason
            .as_deref()
            .map(|r| format!(": {}", escape_controls(r, false)))
            .unwrap_or_default()
    );
}

/// Reads the claims topic until a completion of `order` that the replay
/// accepts (a void one, say of a revoked holder, does not count). The
/// replay starts at the newest checkpoint of the log before `from` (else
/// at the beginning), as a worker's boot does; completions are looked for
/// from `from` on.
pub(crate) fn wait_completed(
    src: &Source,
    from: i64,
    order: OrderId,
    timeout: Duration,
) -> anyhow::Result<Option<(Record, Outcome)>> {
    let start = Start::NewestCheckpoint {
        at_most: from.max(0) as u64,
    };
    let (reader, mut view, _) = src.claims_reader(start)?;
    let deadline = Instant::now() + timeout;
    let live = || Instant::now() < deadline;
    while Instant::now() < deadline {
        let (pos, r) = match reader.poll(Duration::from_millis(500), &live) {
            Polled::Record(pos, r) => (pos, r),
            // A broker whose watermarks do not count records: waiting on
            // would wait for nothing.
            Polled::Broken(p) => bail!(p),
            Polled::End | Polled::Nothing | Polled::Error(_) => continue,
        };
        let Ok(rec) = r else {
            view.skip(Position::new(pos));
            continue;
        };
        let valid = view.apply(Position::new(pos), &rec).is_ok();
        if valid
            && pos as i64 >= from
            && rec.event() == Event::Completed
            && rec.order() == Some(order)
        {
            if let Some(o) = rec.outcome().cloned() {
                return Ok(Some((rec, o)));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::Value;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        submit: SubmitArgs,
    }

    fn args(a: &[&str]) -> Result<SubmitArgs, String> {
        Cli::try_parse_from(std::iter::once("submit").chain(a.iter().copied()))
            .map(|c| c.submit)
            .map_err(|e| e.to_string())
    }

    fn json(p: &[u8]) -> Value {
        serde_json::from_slice(p).unwrap()
    }

    #[test]
    fn without_terms_the_payload_is_unchanged() {
        assert_eq!(
            with_terms(b"echo hi".to_vec(), None, None).unwrap(),
            b"echo hi"
        );
        // Even an invalid one: check_and_send refuses it with the reason.
        assert_eq!(with_terms(b"{".to_vec(), None, None).unwrap(), b"{");
    }

    #[test]
    fn a_plain_text_order_becomes_its_words_in_json() {
        let p = with_terms(
            br#"sh -c "echo 'a b'" # note"#.to_vec(),
            Some("2026-11-27T06:00:00Z"),
            Some("db"),
        )
        .unwrap();
        assert_eq!(
            json(&p),
            serde_json::json!({"cmd": ["sh", "-c", "echo 'a b'"],
                "not_before": "2026-11-27T06:00:00Z", "key": "db"})
        );
        // The same program and arguments, run the same way (no shell).
        let before = crate::orders::parse(Some(br#"sh -c "echo 'a b'" # note"#)).unwrap();
        let after = crate::orders::parse(Some(&p)).unwrap();
        assert_eq!((after.kind, after.shell), (before.kind, before.shell));
        assert_eq!(after.not_before, Some(1_795_759_200_000));
        assert_eq!(after.key.as_deref(), Some("db"));
    }

    #[test]
    fn a_json_order_keeps_its_fields() {
        let order = br#"{"cmd":["make"],"id":"n-1","env":{"A":"1"},"timeout_secs":5}"#;
        let p = with_terms(order.to_vec(), None, Some("k")).unwrap();
        assert_eq!(
            json(&p),
            serde_json::json!({"cmd": ["make"], "id": "n-1", "env": {"A": "1"},
                "timeout_secs": 5, "key": "k"})
        );
        let p = with_terms(order.to_vec(), Some("2026-11-27T07:00:00+01:00"), None).unwrap();
        assert_eq!(json(&p)["not_before"], "2026-11-27T07:00:00+01:00");
        assert_eq!(json(&p).get("key"), None);
    }

    #[test]
    fn terms_refused_with_a_reason() {
        // The order says it already: the option would replace it silently.
        let e = with_terms(br#"{"cmd":["x"],"key":"a"}"#.to_vec(), None, Some("b")).unwrap_err();
        assert_eq!(
            e,
            "the order has 'key' already: give it there or with --key, not both"
        );
        let e = with_terms(
            br#"{"cmd":["x"],"not_before":"2026-11-27T06:00:00Z"}"#.to_vec(),
            Some("2026-11-28T06:00:00Z"),
            None,
        )
        .unwrap_err();
        assert!(
            e.contains("'not_before' already") && e.contains("--at/--in"),
            "{e}"
        );
        // Invalid orders and keys: the parser's reason.
        let e = with_terms(b"echo 'unclosed".to_vec(), None, Some("k")).unwrap_err();
        assert!(e.starts_with("not a valid order: "), "{e}");
        let e = with_terms(b"true".to_vec(), None, Some("")).unwrap_err();
        assert_eq!(e, "not a valid order: bad order: 'key' is empty");
        let long = "k".repeat(257);
        let e = with_terms(b"true".to_vec(), None, Some(&long)).unwrap_err();
        assert!(e.contains("'key' is longer than 256 bytes"), "{e}");
        let e = with_terms(b"{\"cmd\":[\"x\"],".to_vec(), None, Some("k")).unwrap_err();
        assert!(e.starts_with("not a valid order: "), "{e}");
    }

    #[test]
    fn in_is_from_now() {
        let now = std::time::UNIX_EPOCH + Duration::from_millis(1_795_716_000_123);
        let at = |d: &str| in_from(now, parse_in(d).unwrap()).unwrap();
        assert_eq!(at("90s"), "2026-11-26T18:01:30.123Z");
        assert_eq!(at("15m"), "2026-11-26T18:15:00.123Z");
        assert_eq!(at("2h"), "2026-11-26T20:00:00.123Z");
        assert_eq!(at("1d"), "2026-11-27T18:00:00.123Z");
        assert_eq!(at("1h 30m"), "2026-11-26T19:30:00.123Z");
        // What the workers read back.
        assert_eq!(
            crate::orders::check_not_before(&at("90s")),
            Ok(1_795_716_090_123)
        );
        let e = in_from(now, Duration::from_secs(9000 * 365 * 86_400)).unwrap_err();
        assert!(e.contains("too far ahead"), "{e}");
        assert!(in_from(now, Duration::MAX).is_err());
    }

    #[test]
    fn options() {
        let a = args(&["--in", "15m", "--key", "db", "--", "make"]).unwrap();
        assert_eq!(
            (a.in_, a.key.as_deref()),
            (Some(Duration::from_secs(900)), Some("db"))
        );
        let a = args(&["--at", "2026-11-27T06:00:00+01:00", "--text", "make"]).unwrap();
        assert_eq!(a.at.as_deref(), Some("2026-11-27T06:00:00+01:00"));
        assert_eq!(
            a.not_before(std::time::UNIX_EPOCH).unwrap().as_deref(),
            Some("2026-11-27T06:00:00+01:00")
        );
        let e = args(&["--at", "2026-11-27T06:00:00Z", "--in", "1m", "--", "x"]).unwrap_err();
        assert!(e.contains("cannot be used with"), "{e}");
        let e = args(&["--at", "tomorrow", "--", "x"]).unwrap_err();
        assert!(e.contains("\"tomorrow\" is not an RFC 3339 time"), "{e}");
        let e = args(&["--at", "1969-12-31T23:59:59Z", "--", "x"]).unwrap_err();
        assert!(e.contains("at or after 1970"), "{e}");
        let e = args(&["--in", "soon", "--", "x"]).unwrap_err();
        assert!(e.contains("\"soon\" is not a duration like 90s"), "{e}");
        assert!(args(&["--in", "-5m", "--", "x"]).is_err());
        let a = args(&["--", "x"]).unwrap();
        assert_eq!(a.not_before(std::time::SystemTime::now()), Ok(None));
    }
}
