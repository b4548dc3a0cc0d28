//! A claims record as one readable line ([`describe`]): what `show`,
//! `status`, `dev` and the checks (tests/pure) print for a record, after
//! its key. Pure text from a record; the command line makes it safe for a
//! terminal.

use super::{Body, Event, Outcome, Record};

/// What a record says, after its key.
pub fn describe(rec: &Record) -> String {
    let order = rec.order().map_or_else(|| "?".into(), |o| o.to_string());
    let mut s = match rec.event() {
        Event::Booted => format!("incarnation {}", rec.incarnation),
        Event::Claimed | Event::Committed => describe_claim_or_commit(rec, &order),
        Event::Yielded | Event::Lease => format!("order {order}"),
        Event::Cancelled => format!("order {order}, cancelled by an operator"),
        Event::Revoked => format!(
            "order {order}, fencing incarnation {}{}",
            match &rec.body {
                Body::Revoked { fences, .. } => fences.as_str(),
                _ => "?",
            },
            rec.rank()
                .map_or(String::new(), |r| format!(", the taker at rank {r}"))
        ),
        Event::Completed => match rec.outcome() {
            Some(o) => describe_outcome(o, &order),
            None => format!("order {order}"),
        },
        Event::Checkpoint => describe_checkpoint(rec),
        Event::Parked => describe_park(rec, &order),
    };
    if let Body::Lease {
        order_key: Some(k), ..
    }
    | Body::Claimed {
        order_key: Some(k), ..
    } = &rec.body
    {
        s.push_str(&format!(" (key {})", clip(k, 40)));
    }
    if let Some(id) = &rec.order_id() {
        s.push_str(&format!(" (id {})", clip(id, 40)));
    }
    if let Some(by) = rec.by() {
        s.push_str(&format!(" by instance {by}"));
    }
    let reason = rec
        .reason()
        .or(rec.outcome().and_then(|o| o.reason.as_deref()));
    if let Some(r) = reason {
        s.push_str(&format!(": {}", clip(r, 80)));
    }
    s
}

/// A park's description: until when, and behind which key.
fn describe_park(rec: &Record, order: &str) -> String {
    let mut s = format!("order {order} attempt {}, waits", rec.attempt());
    if let Body::Parked {
        until, order_key, ..
    } = &rec.body
    {
        if let Some(u) = until {
            let at = chrono::DateTime::from_timestamp_millis(*u as i64)
                .map_or_else(|| u.to_string(), |t| t.to_rfc3339());
            s.push_str(&format!(" until {at}"));
        }
        if let Some(k) = order_key {
            s.push_str(&format!(" for room on key {}", clip(k, 40)));
        }
    }
    s
}

/// A claim's or a commit's description: its attempt, whom it takes over
/// from, its rank, whom it passes over.
fn describe_claim_or_commit(rec: &Record, order: &str) -> String {
    let mut s = format!("order {order} attempt {}", rec.attempt());
    if !rec.takeover_of().is_empty() {
        let from: Vec<String> = rec
            .takeover_of()
            .iter()
            .map(|c| c.instance.to_string())
            .collect();
        s.push_str(&format!(", taking over from instance {}", from.join(", ")));
    }
    if let Some(r) = rec.rank() {
        s.push_str(&format!(", rank {r}"));
    }
    if matches!(rec.body, Body::Claimed { unpark: true, .. }) {
        s.push_str(", out of the park");
    }
    if !rec.passed_over().is_empty() {
        let who: Vec<String> = rec.passed_over().iter().map(|i| i.to_string()).collect();
        s.push_str(&format!(", passing over instance {}", who.join(", ")));
    }
    s
}

/// A completion's description: its status, exit code, time, links and
/// first line of output.
fn describe_outcome(o: &Outcome, order: &str) -> String {
    let mut s = format!("order {order} {}", o.status);
    if let Some(c) = o.exit_code {
        s.push_str(&format!(" exit {c}"));
    }
    s.push_str(&format!(" in {} ms", o.duration_ms));
    if let Some(r) = &o.retry_of {
        s.push_str(&format!(", retry of {r}"));
    }
    if let Some(t) = &o.traceparent {
        s.push_str(&format!(", traceparent {t}"));
    }
    if let Some(line) = first_line(&o.stdout_tail) {
        s.push_str(&format!(" | {}", clip(line, 60)));
    }
    s
}

/// A checkpoint's description: what it summarises, and the frontier.
fn describe_checkpoint(rec: &Record) -> String {
    let next: Vec<String> = rec.next.iter().map(|(p, o)| format!("{p}:{o}")).collect();
    match rec.snapshot() {
        Some(snap) => format!(
            "the log before #{}: {} instances, {} open contests, {} ids; frontier {}",
            snap.at,
            snap.instances.len(),
            snap.contests.len(),
            snap.ids.len(),
            next.join(" ")
        ),
        None => format!("frontier {}", next.join(" ")),
    }
}

/// The first line of `text` that is not blank, trimmed.
pub fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|l| !l.is_empty())
}

/// At most `n` characters, with `…` when cut.
pub fn clip(s: &str, n: usize) -> String {
    let s = s.replace(['\n', '\r'], " ");
    if s.chars().count() <= n {
        s
    } else {
        let mut c: String = s.chars().take(n.saturating_sub(1)).collect();
        c.push('…');
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "ab…");
        assert_eq!(clip("a\nb", 5), "a b");
    }

    /// A park says its attempt, until when and behind which key.
    #[test]
    fn parks() {
        let mut p =
            Record::of(3, Event::Parked, "a1", 5).with_order(crate::record::OrderId::new(0, 17));
        p.set_attempt(2);
        p.set_until(Some(1_795_716_000_000));
        p.set_order_key(Some("k".into()));
        assert_eq!(
            describe(&p),
            "order 0:17 attempt 2, waits until 2026-11-26T18:00:00+00:00 for room on key k"
        );
        p.set_until(None);
        assert_eq!(
            describe(&p),
            "order 0:17 attempt 2, waits for room on key k"
        );
    }
}
