//! `pool_worker cancel P:O [--reason TEXT]`: an operator cancels an order
//! (issue 19, last part).
//!
//! ```text
//! pool_worker cancel 0:17 --reason "sent by mistake"   # waits for the outcome (60 s)
//! pool_worker cancel 0:17 --no-wait                     # records the cancel, prints how to follow it
//! ```
//!
//! The cancel is one record of the claims topic (`cancelled`, key
//! `cancel:P:O`, signed with the pool's `CLAIMS_KEY` when one is set, like
//! every record of the pool), and the pool's own rules act on it
//! (docs/protocol.md R51, R52): an order whose first commit
//! comes after the cancel in the log is completed `cancelled` without
//! running; a job running when its holder reads the cancel is killed and
//! completed `cancelled`. Nothing here decides for the pool; the tool only
//! refuses what would mean nothing:
//!
//! * an order that does not exist (past the end of its partition, or a
//!   partition the orders topic does not have): an error, exit 1, nothing
//!   written (the workers would take such a record for an impossible one);
//! * an order already completed: it is left as it is (the tool prints its
//!   status), exit 0, nothing written;
//! * an order already cancelled: nothing written again; the tool waits for
//!   its outcome as for its own.
//!
//! Then it waits (bounded, `--wait-timeout-secs`) for the order's
//! completion and prints it. An order still waiting for its turn behind
//! many others can take longer than that to be completed `cancelled`: the
//! tool then says the cancel is recorded and how to follow it (`history`).

use crate::cli::blocking;
use crate::kafka::claims_reader::Gate;
use crate::kafka::tools::Source;
use crate::process_exit::Exit;
use crate::record::{Event, OrderId, Position, Record};
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CancelArgs {
    /// The order to cancel, as PARTITION:OFFSET (main orders topic) or
    /// TOPIC:PARTITION:OFFSET (its cancel's key is `cancel:TOPIC:P:O`).
    pub(crate) order: OrderId,
    /// Why (kept in the order's `completed` record; at most 2 KiB as written).
    #[arg(long, default_value = "cancelled by an operator")]
    pub(crate) reason: String,
    /// Do not wait for the order to be completed `cancelled`.
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// How long to wait for the outcome.
    #[arg(long, default_value_t = 60)]
    pub(crate) wait_timeout_secs: u64,
    #[command(flatten)]
    pub(crate) source: Source,
}

/// What the claims topic says of an order, for the tool.
#[derive(Debug, PartialEq)]
pub(crate) enum Found {
    /// Completed (valid completion): its status and position.
    Completed(crate::record::Status, u64),
    /// A cancel of it was recorded at this position (not completed yet).
    Cancelled(u64),
    /// Neither: to be cancelled.
    Open,
}

/// Replays the claims records as the workers do and says where `order`
/// stands.
pub(crate) fn find(
    records: &[(u64, Result<Record, crate::record::Foreign>)],
    order: OrderId,
) -> Found {
    let mut view = crate::boot::View::new();
    let mut completed = None;
    for (pos, r) in records {
        match r {
            Ok(rec) => {
                let valid = view.apply(Position::new(*pos), rec).is_ok();
                if valid && rec.event() == Event::Completed && rec.order() == Some(order) {
                    let status = rec
                        .outcome()
                        .as_ref()
                        .map_or(crate::record::Status::Error, |o| o.status);
                    completed.get_or_insert((status, *pos));
                }
            }
            Err(_) => view.skip(Position::new(*pos)),
        }
    }
    match (completed, view.cancel(order)) {
        (Some((s, p)), _) => Found::Completed(s, p),
        (None, Some((p, _))) => Found::Cancelled(p.get()),
        (None, None) => Found::Open,
    }
}

/// What [`cancel`] did.
#[derive(Debug, PartialEq)]
pub(crate) enum CancelOutcome {
    /// Nothing written: the order does not exist (why).
    NoSuchOrder(String),
    /// Nothing written: the order is already completed (its status, its
    /// completion's position).
    AlreadyCompleted(crate::record::Status, u64),
    /// Nothing written again: a cancel of it is at this position.
    AlreadyCancelled(u64),
    /// The cancel was written at this position.
    Recorded(u64),
}

/// Cancels `order` (see the module doc): what was done, and the claims
/// topic's end before the replay (its completion is looked for from
/// there). `cancel` and `serve`'s cancel button.
pub(crate) async fn cancel(
    src: &Source,
    order: OrderId,
    reason: &str,
) -> anyhow::Result<(CancelOutcome, i64)> {
    // A bad CLAIMS_KEY is refused before anything is read or sent.
    let gate = src.gate()?;
    let s = src.clone();
    if let Err(why) = blocking(move || s.find_order(&s.consumer()?, order)).await? {
        return Ok((CancelOutcome::NoSuchOrder(why), 0));
    }
    // Completions are looked for from the claims topic's end as it is now,
    // before the replay: none can be missed between the two.
    let s = src.clone();
    let from = blocking(move || s.claims_end()).await?;
    let s = src.clone();
    let records = blocking(move || crate::kafka::tools::read_all(&s)).await?;
    let done = match find(&records, order) {
        Found::Completed(status, pos) => CancelOutcome::AlreadyCompleted(status, pos),
        Found::Cancelled(pos) => CancelOutcome::AlreadyCancelled(pos),
        Found::Open => CancelOutcome::Recorded(write_cancel(src, &gate, order, reason).await?),
    };
    Ok((done, from))
}

pub(crate) async fn run(args: CancelArgs) -> anyhow::Result<Exit> {
    let order = args.order;
    let (done, from) = cancel(&args.source, order, &args.reason).await?;
    let at = match done {
        CancelOutcome::NoSuchOrder(why) => {
            eprintln!("pool_worker cancel: {why}; nothing written");
            return Ok(Exit::Failure);
        }
        CancelOutcome::AlreadyCompleted(status, pos) => {
            println!("order {order} is already completed ({status}, claims #{pos}): left as it is");
            return Ok(Exit::Ok);
        }
        CancelOutcome::AlreadyCancelled(pos) => {
            println!("order {order} was already cancelled (claims #{pos}); nothing written");
            pos
        }
        CancelOutcome::Recorded(pos) => {
            println!("order {order}: cancel recorded (claims #{pos})");
            pos
        }
    };
    follow(&args, from, at).await
}

/// Writes the cancel of `order` (signed when the pool has a key) to the
/// claims topic; its position.
async fn write_cancel(
    src: &Source,
    gate: &Gate,
    order: OrderId,
    reason: &str,
) -> anyhow::Result<u64> {
    let rec = Record::cancel(
        order,
        &crate::clock::new_incarnation(),
        crate::clock::wall_ms(),
        reason,
    );
    let value = rec.encode();
    let sig = gate.sign(&value);
    let key = rec.key();
    let offset = src
        .send_to_claims("the cancel", &key, &value, sig.as_deref())
        .await?;
    Ok(offset.max(0) as u64)
}

/// After the cancel at `at`: unless `--no-wait`, waits for the order's
/// completion (looked for from `from`) and says what became of it.
async fn follow(args: &CancelArgs, from: i64, at: u64) -> anyhow::Result<Exit> {
    let order = args.order;
    let follow = format!("follow it with `pool_worker history {order}`");
    if args.no_wait {
        println!("{follow}");
        return Ok(Exit::Ok);
    }
    let timeout = Duration::from_secs(args.wait_timeout_secs);
    let done = crate::cli::submit::await_completion(&args.source, from, order, timeout).await?;
    let Some(outcome) = done else {
        println!(
            "order {order} is not completed yet (claims #{at} cancels it: it is completed `cancelled` when an instance reaches it); {follow}"
        );
        return Ok(Exit::Ok);
    };
    if outcome.status != crate::record::Status::Cancelled {
        eprintln!(
            "order {order} ended {} before the cancel took effect: left as it is",
            outcome.status
        );
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Outcome, Status};

    fn rec(ev: Event, o: i64) -> Record {
        let mut r = Record::of(1, ev, "a", 0).with_order(OrderId::new(0, o));
        r.set_attempt(1);
        if ev == Event::Completed {
            r.set_outcome(Some(Outcome::not_run(Status::Failed, "x")));
        }
        r
    }

    #[test]
    fn an_order_is_found_completed_cancelled_or_open() {
        let (o0, o1, o2) = (OrderId::new(0, 0), OrderId::new(0, 1), OrderId::new(0, 2));
        let log: Vec<(u64, Result<Record, crate::record::Foreign>)> = [
            rec(Event::Booted, 0),
            rec(Event::Claimed, 0),
            rec(Event::Committed, 0),
            rec(Event::Completed, 0),
            Record::cancel(o1, "op", 0, "why"),
        ]
        .into_iter()
        .enumerate()
        .map(|(p, r)| (p as u64, Ok(r)))
        .chain([(5, Err(crate::record::Foreign::NoValue))])
        .collect();
        assert_eq!(find(&log, o0), Found::Completed(Status::Failed, 3));
        assert_eq!(find(&log, o1), Found::Cancelled(4));
        assert_eq!(find(&log, o2), Found::Open);
    }
}
