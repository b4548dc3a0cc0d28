//! `pool_worker submit`: send one order, and optionally wait for its result.
//!
//! ```text
//! pool_worker submit -- sh -c 'echo hi'        # argv, sent as a JSON order
//! pool_worker submit --text 'echo hi'          # a plain-text command line
//! pool_worker submit --json order.json         # a JSON order from a file (- for stdin)
//! pool_worker submit --wait -- make test       # wait, print the result, exit with the job's code
//! ```
//!
//! The order is checked with the workers' own parser before it is sent, so a
//! malformed order is refused here with the reason instead of being completed
//! as an error later. It prints the order's `PARTITION:OFFSET` (its identity
//! in the pool). `--wait` then reads the claims topic (from its newest
//! checkpoint, [`crate::kafka::claims_reader`]) until the order's `completed` record
//! appears, prints the outcome, and exits with the job's
//! exit code (1 when the order did not run to an exit code, for example a
//! time-out or a refusal).

use crate::cli::blocking;
use crate::kafka::claims_reader::{Polled, Start};
use crate::kafka::tools::Source;
use crate::process_exit::Exit;
use crate::record::{Event, OrderId, Outcome, Position, Record};
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

impl SubmitArgs {
    fn payload(&self) -> anyhow::Result<Vec<u8>> {
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
    let payload = args.payload()?;
    send(&args.source, payload, &args.wait).await
}

/// Sends one order (checked first: [`Exit::Config`] if invalid), prints
/// its `PARTITION:OFFSET`, and with `--wait` waits for its completion
/// (`submit`, `retry`). Returns the exit status: with `--wait`, the job's
/// own ([`Exit::Job`]; or [`Exit::WaitTimedOut`]).
pub(crate) async fn send(src: &Source, payload: Vec<u8>, wait: &WaitArgs) -> anyhow::Result<Exit> {
    let (order, claims_from) = match check_and_send(src, &payload).await? {
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
/// orders topic: the order (its position) and the claims topic's end just
/// before it was sent (its completion is looked for from there), or why it
/// is not a valid order (nothing sent). `submit`, `retry` and `serve`'s
/// submit and retry buttons.
pub(crate) async fn check_and_send(
    src: &Source,
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
    let order = src.send_order(payload).await?;
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
