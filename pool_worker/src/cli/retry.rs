//! `pool_worker retry P:O`: send an order's payload again, as a new order
//! that names the original (issue 19, part 3).
//!
//! ```text
//! pool_worker retry 0:17            # prints the new order's PARTITION:OFFSET
//! pool_worker retry --wait 0:17     # and waits for its result, like submit --wait
//! ```
//!
//! The payload is read from the orders topic (the one record of what was
//! asked) and sent as a JSON order with two fields added or replaced:
//!
//! * `retry_of: "P:O"`, which the worker carries into the new order's
//!   `completed` record, so `history` of the retry shows the original and
//!   `history` of the original shows its retries;
//! * `id: "retry-of:P:O"`: the original's own `id` would make the retry a
//!   `duplicate`, and this one makes a second `retry P:O` (a double click)
//!   a `duplicate` instead of a second run. To run an order a third time,
//!   retry the retry.
//!
//! A plain-text order is sent as `{"cmd": [its words]}`, which runs exactly
//! the same argv (the text form is split into words and run without a
//! shell). The link is in the payload rather than in a Kafka header so that
//! it is checked by the order parser like every other field, and is seen by
//! every reader of the orders topic (kcat, mirrors, scripts that copy only
//! values). A `traceparent` header of the original becomes the retry's
//! `traceparent` field when the order has none, so the retry stays in the
//! same trace.
//!
//! An order that is still waiting or running is not sent again (it would
//! run twice): only one the claims topic shows ended (or gone: below the
//! frontier and held by nobody).

use crate::cli::blocking;
use crate::cli::submit::WaitArgs;
use crate::kafka::tools::{message_at, Source};
use crate::orders::{self, OrderKind};
use crate::process_exit::Exit;
use crate::record::OrderId;
use anyhow::bail;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RetryArgs {
    /// The order to send again, as PARTITION:OFFSET (main orders topic) or
    /// TOPIC:PARTITION:OFFSET; it is sent again to its own topic.
    pub(crate) order: OrderId,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) source: Source,
}

/// How long reading the original order may take.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn run(args: RetryArgs) -> anyhow::Result<Exit> {
    let order = args.order;
    match prepare(&args.source, order).await? {
        // To the original's own topic (R57): a retry keeps its priority.
        Ok(payload) => {
            crate::cli::submit::send(&args.source, order.topic, payload, &args.wait).await
        }
        Err(why) => {
            eprintln!("pool_worker retry: order {order} {why}");
            Ok(Exit::Failure)
        }
    }
}

/// The payload of the retry of `order`, read from the orders topic, or
/// why it must not be sent again now (it waits, it is held, it is not a
/// valid order; the words follow "order P:O"). `retry` and `serve`'s retry
/// button; [`crate::cli::submit::check_and_send`] sends it.
pub(crate) async fn prepare(
    src: &Source,
    order: OrderId,
) -> anyhow::Result<Result<Vec<u8>, String>> {
    let s = src.clone();
    let (payload, header) = blocking(move || read_order(&s, order)).await?;
    let s = src.clone();
    if let Some(why) = blocking(move || where_is(&s, order)).await? {
        return Ok(Err(format!("{why}; nothing sent")));
    }
    Ok(retry_payload(payload.as_deref(), order, header.as_deref())
        .map_err(|why| format!("cannot be sent again: {why}")))
}

/// Why `order` must not be sent again now, from the claims topic: it waits
/// (at or past the frontier) or an instance holds it.
fn where_is(src: &Source, order: OrderId) -> anyhow::Result<Option<String>> {
    // Only the current view is needed: from the newest checkpoint.
    let view = crate::kafka::tools::current_view(src)?;
    if order.offset >= view.next_offset(order.lane()) {
        return Ok(Some("has not been claimed yet (it waits)".into()));
    }
    let holder = view
        .instances()
        .find(|(_, s)| s.hold.as_ref().is_some_and(|h| h.order == order));
    Ok(holder.map(|(i, _)| format!("is still held by instance {i} (it runs, or is about to)")))
}

/// The original order's payload and its `traceparent` header, read from
/// the orders topic.
fn read_order(src: &Source, order: OrderId) -> anyhow::Result<(Option<Vec<u8>>, Option<String>)> {
    let c = src.consumer()?;
    let topic = src.topic_name(order.topic)?;
    let low = match src.find_order(&c, order)? {
        Ok(low) => low,
        Err(why) => bail!(why),
    };
    if order.offset < low {
        bail!("order {order} is no longer in '{topic}' (retention or DeleteRecords: the partition starts at {low})");
    }
    let Some(m) = message_at(&c, &topic, order.partition, order.offset, READ_TIMEOUT) else {
        bail!(
            "order {order} could not be read from '{topic}' within {} s",
            READ_TIMEOUT.as_secs()
        )
    };
    if m.offset > order.offset {
        bail!(
            "order {order} is no longer in '{topic}' (the next message read is at {})",
            m.offset
        )
    }
    let header = m
        .header("traceparent")
        .and_then(|v| std::str::from_utf8(v).ok().map(|s| s.trim().to_string()));
    Ok((m.payload, header))
}

/// The payload of the retry of `original` (see the module doc): a JSON
/// order with `retry_of` and `id` set; `header` is the original's
/// `traceparent` header, used if valid and the order has no `traceparent`.
/// `Err` when the original is not a valid order (it would only fail again).
pub(crate) fn retry_payload(
    payload: Option<&[u8]>,
    original: OrderId,
    header: Option<&str>,
) -> Result<Vec<u8>, String> {
    let spec = orders::parse(payload).map_err(|e| format!("it is not a valid order ({e})"))?;
    let text = payload
        .and_then(|p| std::str::from_utf8(p).ok())
        .unwrap_or_default()
        .trim();
    let mut obj = if text.starts_with('{') {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => return Err("its JSON is not an object".into()),
        }
    } else {
        let OrderKind::Command { argv } = spec.kind else {
            return Err("a plain-text order that is not a command".into());
        };
        let mut m = serde_json::Map::new();
        m.insert("cmd".into(), argv.into());
        m
    };
    obj.insert("retry_of".into(), original.to_string().into());
    obj.insert("id".into(), format!("retry-of:{original}").into());
    if !obj.contains_key("traceparent") {
        if let Some(t) = header.filter(|t| orders::check_traceparent(t).is_ok()) {
            obj.insert("traceparent".into(), t.into());
        }
    }
    let out = serde_json::Value::Object(obj).to_string().into_bytes();
    // What is sent must parse as it did, with the link.
    match orders::parse(Some(&out)) {
        Ok(s) if s.retry_of == Some(original) => Ok(out),
        Ok(_) => Err("the retry does not name the original".into()),
        Err(e) => Err(format!("the retry would not be a valid order ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retried(payload: &str, header: Option<&str>) -> orders::OrderSpec {
        let out = retry_payload(Some(payload.as_bytes()), OrderId::new(1, 7), header).unwrap();
        orders::parse(Some(&out)).unwrap()
    }

    #[test]
    fn a_retry_runs_the_same_and_names_the_original() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        // Plain text: the same argv, as JSON.
        let original = orders::parse(Some(br#"sh -c "echo 'a b' >> /tmp/x""#)).unwrap();
        let r = retried(r#"sh -c "echo 'a b' >> /tmp/x""#, Some(tp));
        assert_eq!((r.kind, r.shell), (original.kind, false));
        assert_eq!(r.retry_of, Some(OrderId::new(1, 7)));
        assert_eq!(r.id.as_deref(), Some("retry-of:1:7"));
        assert_eq!(
            r.traceparent.as_deref(),
            Some(tp),
            "the header's trace context"
        );
        // JSON: every field kept, the id and the link replaced.
        let j = r#"{"cmd":["a|b"],"shell":true,"env":{"A":"1"},"timeout_secs":5,"id":"job-1","retry_of":"0:1"}"#;
        let r = retried(j, Some("not a trace context"));
        assert!(
            r.shell && r.env["A"] == "1" && r.timeout == Some(Duration::from_secs(5)),
            "{r:?}"
        );
        assert_eq!(
            (r.id.as_deref(), r.retry_of),
            (Some("retry-of:1:7"), Some(OrderId::new(1, 7)))
        );
        assert_eq!(r.traceparent, None, "an invalid header is not carried");
        let own = "00-11111111111111111111111111111111-2222222222222222-00";
        let r = retried(
            &format!(r#"{{"url":"http://h/o","traceparent":"{own}"}}"#),
            Some(tp),
        );
        assert_eq!(
            r.traceparent.as_deref(),
            Some(own),
            "the order's own trace context wins"
        );
        // An invalid original is not sent again.
        for bad in [&b"{\"cmd\": 5}"[..], b"", b"echo 'unclosed", b"\xff"] {
            assert!(
                retry_payload(Some(bad), OrderId::new(0, 0), None).is_err(),
                "{bad:?}"
            );
        }
        assert!(retry_payload(None, OrderId::new(0, 0), None).is_err());
    }
}
