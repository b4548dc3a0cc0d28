//! The appender of worker mode: the machine's records and results go out
//! one at a time, in the order asked, each retried until acknowledged, on a
//! task of its own.

use crate::kafka::{Kafka, Stopped};
use crate::record::{Event, InstanceNo};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long a process stopped by a signal waits for the appends it has in
/// flight (a process killed outright loses them; the protocol tolerates
/// both).
pub(super) const SIGNAL_FLUSH: Duration = Duration::from_secs(5);

/// How long a process stopped by a signal then waits for the abort of the
/// transaction of an append still in flight.
pub(super) const SIGNAL_ABORT: Duration = Duration::from_secs(2);

/// Appends the machine's records and publishes its results in the order the
/// machine asked (a completion's result before its record, R47), one at a
/// time, each retried until acknowledged, on a task of its own: the worker loop goes on reading the claims topic
/// meanwhile. The machine acts on its records only once it reads them back
/// from the log, which usually happens before librdkafka reports the
/// acknowledgment; waiting for the acknowledgment in the loop cost 1–2 ms
/// per append, three appends per order (bench/RESULTS.md).
pub(super) struct Appender {
    tx: mpsc::UnboundedSender<Out>,
    pub(super) sent: std::cell::Cell<u64>,
    acked: watch::Receiver<u64>,
    /// Set once the producer stopped for good (fenced, or failed): nothing
    /// more is appended, and the process exits (docs/protocol.md R16).
    stopped: watch::Receiver<Option<Stopped>>,
}

/// One thing for the appender's task to produce.
enum Out {
    /// Records appended in one transaction (one record, or a last
    /// `completed` and its heir's `booted`: docs/protocol.md R16).
    Records(Vec<crate::record::Record>),
    Result(Box<crate::record::ResultMessage>),
}

impl Appender {
    pub(super) fn start(kafka: &'static Kafka) -> Appender {
        let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
        let (acked_tx, acked) = watch::channel(0u64);
        let (stopped_tx, stopped) = watch::channel(None);
        tokio::spawn(async move {
            let mut n = 0;
            while let Some(out) = rx.recv().await {
                let r = match out {
                    Out::Result(msg) => kafka.publish_result(*msg).await,
                    Out::Records(recs) => {
                        let first = recs.first().map_or("", |r| r.event().as_str());
                        crate::account::mark_with("append", || first.into());
                        let r = kafka.append_all(&recs).await;
                        crate::account::mark_with("acked", || first.into());
                        r.map(|pos| {
                            for (rec, pos) in recs.iter().zip(pos.unwrap_or_default()) {
                                log_step(rec, pos)
                            }
                        })
                    }
                };
                match r {
                    Ok(()) => {}
                    Err(stop) => {
                        // Stop appending: this record and every later one
                        // are dropped.
                        let _ = stopped_tx.send(Some(stop));
                        return;
                    }
                }
                n += 1;
                let _ = acked_tx.send(n);
            }
        });
        Appender {
            tx,
            sent: std::cell::Cell::new(0),
            acked,
            stopped,
        }
    }

    /// Waits until the producer stops for good.
    pub(super) async fn stopped(&self) -> Stopped {
        let mut s = self.stopped.clone();
        let got = s.wait_for(Option::is_some).await.map(|v| *v);
        match got {
            Ok(v) => v.unwrap_or(Stopped::Failed),
            // The appender task ended otherwise (it does not): never.
            Err(_) => std::future::pending().await,
        }
    }

    /// Appends `recs` in one transaction, in order: all land or none
    /// ([`crate::worker::Action::AppendAll`]).
    pub(super) fn append_all(&self, recs: Vec<crate::record::Record>) {
        if recs.is_empty() {
            return;
        }
        self.sent.set(self.sent.get() + 1);
        let _ = self.tx.send(Out::Records(recs));
    }

    /// [`Action::PublishResult`]: publishes after every append asked for
    /// before it, and before every one asked for after it.
    pub(super) fn publish(&self, msg: crate::record::ResultMessage) {
        self.sent.set(self.sent.get() + 1);
        let _ = self.tx.send(Out::Result(Box::new(msg)));
    }

    /// Waits until every append so far is acknowledged (at most `limit`);
    /// whether they all were.
    pub(super) async fn flush(&self, limit: Option<Duration>) -> bool {
        let sent = self.sent.get();
        let mut acked = self.acked.clone();
        let all = async move {
            tokio::select! {
                r = acked.wait_for(|&n| n >= sent) => r.is_ok(),
                // Stopped for good: the rest will never be acknowledged.
                _ = self.stopped() => false,
            }
        };
        match limit {
            Some(l) => tokio::time::timeout(l, all).await.unwrap_or(false),
            None => all.await,
        }
    }
}

/// One log line per protocol step.
fn log_step(rec: &crate::record::Record, pos: u64) {
    let order = rec.order().map(|o| o.to_string()).unwrap_or_default();
    match rec.event() {
        Event::Completed => {
            let (status, code) = rec
                .outcome()
                .as_ref()
                .map(|o| (o.status.as_str(), o.exit_code))
                .unwrap_or(("?", None));
            let o = rec.outcome();
            let traceparent = o.and_then(|o| o.traceparent.as_deref());
            let retry_of = o.and_then(|o| o.retry_of.as_deref());
            tracing::info!(instance = rec.instance.get(), order, event = "completed", pos, status, exit_code = ?code, attempt = rec.attempt().get(), traceparent, retry_of);
        }
        Event::Yielded => {
            tracing::info!(
                instance = rec.instance.get(),
                order,
                event = "yielded",
                pos,
                reason = rec.reason().unwrap_or("")
            );
        }
        Event::Lease => tracing::debug!(instance = rec.instance.get(), order, event = "lease", pos),
        Event::Revoked => {
            tracing::info!(
                instance = rec.instance.get(),
                by = rec.by().map(InstanceNo::get),
                order,
                event = "revoked",
                pos,
                reason = rec.reason().unwrap_or("")
            );
        }
        // No order and no attempt: the incarnation says which process.
        ev @ (Event::Booted | Event::Checkpoint) => tracing::info!(
            instance = rec.instance.get(),
            event = ev.as_str(),
            pos,
            incarnation = %rec.incarnation
        ),
        ev => tracing::info!(
            instance = rec.instance.get(),
            order,
            event = ev.as_str(),
            pos,
            attempt = rec.attempt().get()
        ),
    }
}
