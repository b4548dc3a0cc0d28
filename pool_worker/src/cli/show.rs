//! Text from orders and records made safe to show: on a terminal
//! ([`escape_controls`], [`json_line`]) and as one readable line per
//! claims record ([`describe`], with the core's [`describe_record`]).

pub(crate) use crate::record::text::{clip, describe as describe_record, first_line};
use crate::record::{Foreign, Record};

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
pub(crate) fn escape_controls(s: &str, lines: bool) -> String {
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
pub(crate) fn json_line(v: &serde_json::Value) -> String {
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

/// One claims record, decoded and judged, as a readable line (without
/// the offset), e.g. `3:claimed     order 0:17 attempt 1`; a foreign one
/// with its raw key and value.
pub(crate) fn describe(
    record: &Result<Record, Foreign>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> String {
    match record {
        Ok(rec) => format!("{:<13} {}", rec.key(), describe_record(rec)),
        Err(why) => format!(
            "{:<13} (not a pool_worker record: {why}) {}",
            key.map_or("(no key)".into(), |k| clip(&String::from_utf8_lossy(k), 40)),
            value.map_or("(no value)".into(), |v| clip(
                &String::from_utf8_lossy(v),
                80
            )),
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::{Body, Cite, Event, OrderId, Outcome, Status};
    use serde_json::json;

    /// What a job can print to take over the terminal of whoever reads
    /// its result: clear the screen and move the cursor (ESC, CSI), rewrite
    /// the line (CR), a C1 CSI, bidi overrides, a fake newline.
    pub(crate) const NASTY: &str =
        "ok\x1b[2J\x1b]0;title\x07\rfake\u{9b}31m\u{202e}txt\u{2066}\x7f\x08\nnext\tcol";

    pub(crate) fn no_controls_but_newlines_and_tabs(s: &str) {
        for c in s.chars() {
            assert!(
                c == '\n' || c == '\t' || !unsafe_for_terminal(c),
                "{c:?} in {s:?}"
            );
        }
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

    /// One claims record as a readable line (without the offset), e.g.
    /// `3:claimed     order 0:17 attempt 1`.
    fn describe_claim(key: Option<&[u8]>, value: Option<&[u8]>) -> String {
        describe(&Record::decode(key, value), key, value)
    }

    #[test]
    fn readable_lines() {
        let mut claim = Record::of(3, Event::Claimed, "a1", 0).with_order(OrderId::new(0, 17));
        claim.set_attempt(1);
        let key = claim.key();
        assert_eq!(
            describe_claim(Some(key.as_bytes()), Some(&claim.encode())),
            "3:claimed     order 0:17 attempt 1"
        );
        claim.set_takeover_of(vec![Cite {
            instance: 2.into(),
            incarnation: "b".into(),
        }]);
        assert!(describe_record(&claim).ends_with("taking over from instance 2"));
        claim.set_rank(Some(0));
        assert!(describe_record(&claim).ends_with("taking over from instance 2, rank 0"));

        let mut cp = Record::of(3, Event::Checkpoint, "a1", 0);
        cp.set_snapshot(Some(Box::new(crate::boot::View::new().snapshot())));
        cp.next.insert(0.into(), 18);
        assert_eq!(
            describe_record(&cp),
            "the log before #0: 0 instances, 0 open contests, 0 ids; frontier 0:18"
        );

        let mut done = Record::of(3, Event::Completed, "a1", 0).with_order(OrderId::new(0, 17));
        done.set_outcome(Some(Outcome {
            status: Status::Ok,
            exit_code: Some(0),
            duration_ms: 12,
            reason: None,
            stdout_tail: "\nhello\nworld\n".into(),
            stderr_tail: String::new(),
            traceparent: None,
            retry_of: None,
        }));
        assert_eq!(
            describe_record(&done),
            "order 0:17 ok exit 0 in 12 ms | hello"
        );
        if let Body::Completed { outcome: o, .. } = &mut done.body {
            o.retry_of = Some("0:3".into());
            o.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        }
        assert_eq!(
            describe_record(&done),
            "order 0:17 ok exit 0 in 12 ms, retry of 0:3, traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 | hello"
        );
        done.set_outcome(Some(Outcome::not_run(Status::Error, "bad JSON order")));
        assert_eq!(
            describe_record(&done),
            "order 0:17 error in 0 ms: bad JSON order"
        );

        let foreign = describe_claim(None, Some(b"\xff{oops"));
        assert!(foreign.contains("not a pool_worker record"), "{foreign}");
        assert!(describe_claim(Some(b"x"), None).contains("(no value)"));
    }
}
