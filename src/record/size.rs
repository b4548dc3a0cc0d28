//! Every byte budget of the pool and every rule that cuts text to one, in
//! one place (issue 28): what a job's output is cut to while it runs
//! ([`Tail`], `OUTPUT_LIMIT_BYTES`), what an outcome is cut to in a record
//! ([`Outcome::fit`]: tails, reason), the halving after a broker refused a
//! message as too large ([`halved_tail_budget`]: `Record::shrink`,
//! `ResultMessage::shrink`), and the bounds the readers check
//! ([`MAX_RECORD_BYTES`]). Lengths of text in a record are counted as
//! written, after JSON escaping ([`json_len`]).

use super::Outcome;
use std::collections::VecDeque;

/// Largest coordination record we accept (a completed record carries bounded
/// output tails, a checkpoint carries a summary; both stay far below this).
pub const MAX_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// The most bytes a record the pool writes may take, by construction:
/// Kafka's default `max.message.bytes` (1,048,588, kept by
/// scripts/create-topics.sh for the claims topic) less room for the key and
/// the batch's own overhead. A `completed` record holds two tails of at most
/// [`MAX_TAIL_BYTES`] and a reason of at most [`MAX_REASON_BYTES`], all
/// counted as written (after JSON escaping), plus small fields.
pub const RECORD_LIMIT: usize = 1_000_000;

/// The most bytes of one output tail in a record, as written (after JSON
/// escaping), and so the largest `OUTPUT_LIMIT_BYTES`: a `completed`
/// record (two tails, a bounded reason, small fields) stays well within
/// the claims topic's `max.message.bytes` (Kafka's default, 1 MB, which
/// scripts/create-topics.sh keeps): see [`RECORD_LIMIT`].
pub const MAX_TAIL_BYTES: usize = 256 * 1024;

/// The most bytes of a reason in a record, as written.
pub const MAX_REASON_BYTES: usize = 2048;

/// The most bytes a record's `next` (the writer's frontier, one entry per
/// partition of every orders topic, docs/protocol.md R8, R57) may take as
/// written: a pool whose orders topics have more partitions than fit is
/// refused at boot, and partitions added later beyond it are not read
/// ([`frontier_fits`]). A `completed` record (two tails, a reason) or a
/// checkpoint (its ids, its frontier, `next`) then stays within
/// [`RECORD_LIMIT`].
pub const MAX_FRONTIER_BYTES: usize = 128 * 1024;

/// Whether a frontier over `lanes` fits [`MAX_FRONTIER_BYTES`], counting
/// each entry at its largest (`"T:P":<19 digits>,`).
pub fn frontier_fits<'a>(lanes: impl IntoIterator<Item = &'a super::Lane>) -> bool {
    let bytes: usize = lanes
        .into_iter()
        .map(|l| l.to_string().len() + 2 + 1 + 19 + 1)
        .sum();
    bytes <= MAX_FRONTIER_BYTES
}

/// How many bytes `c` takes inside a JSON string as serde_json writes it.
fn json_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// How many bytes `s` takes inside a JSON string (without the quotes).
pub fn json_len(s: &str) -> usize {
    s.chars().map(json_char_len).sum()
}

/// The marker left where text was cut.
const CUT: &str = "…";

/// `s`, cut on a character boundary so that it takes at most `max` bytes
/// inside a JSON string: its beginning (a reason) or, with `keep_end`, its
/// end (an output tail), with "…" where it was cut.
pub fn fit_json(s: &str, max: usize, keep_end: bool) -> String {
    if json_len(s) <= max {
        return s.to_string();
    }
    let budget = max.saturating_sub(CUT.len());
    let mut used = 0;
    let mut take = |c: &char| {
        used += json_char_len(*c);
        used <= budget
    };
    if keep_end {
        let kept: Vec<char> = s.chars().rev().take_while(|c| take(c)).collect();
        let mut out = String::from(if max >= CUT.len() { CUT } else { "" });
        out.extend(kept.into_iter().rev());
        out
    } else {
        let mut out: String = s.chars().take_while(|c| take(c)).collect();
        if max >= CUT.len() {
            out.push_str(CUT);
        }
        out
    }
}

/// Default bytes kept of each of a job's stdout and stderr
/// (`OUTPUT_LIMIT_BYTES`).
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;

/// The largest `OUTPUT_LIMIT_BYTES`: the most a record may carry of one
/// tail ([`MAX_TAIL_BYTES`] says why).
pub const MAX_OUTPUT_LIMIT: usize = MAX_TAIL_BYTES;

impl Outcome {
    /// The outcome cut to fit a record: each tail within `tail_bytes` (at
    /// most [`MAX_TAIL_BYTES`]) and the reason within [`MAX_REASON_BYTES`],
    /// as written.
    pub fn fit(mut self, tail_bytes: usize) -> Outcome {
        let tail_bytes = tail_bytes.min(MAX_TAIL_BYTES);
        self.stdout_tail = fit_json(&self.stdout_tail, tail_bytes, true);
        self.stderr_tail = fit_json(&self.stderr_tail, tail_bytes, true);
        self.reason = self.reason.map(|r| fit_json(&r, MAX_REASON_BYTES, false));
        self
    }
}

/// The halving rule, after the broker refused a message holding this
/// outcome as too large: the tail budget of the next try, half the longer
/// output tail as written (0: no output left to cut).
pub fn halved_tail_budget(outcome: &Outcome) -> usize {
    json_len(&outcome.stdout_tail).max(json_len(&outcome.stderr_tail)) / 2
}

/// The last `limit` bytes of a stream (memory stays at about `limit`
/// whatever the stream's length).
#[derive(Debug)]
pub struct Tail {
    buf: VecDeque<u8>,
    limit: usize,
    cut: bool,
}

impl Tail {
    pub fn new(limit: usize) -> Self {
        Tail {
            buf: VecDeque::new(),
            limit,
            cut: false,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        if data.len() >= self.limit {
            self.cut |= !self.buf.is_empty() || data.len() > self.limit;
            self.buf.clear();
            self.buf.extend(&data[data.len() - self.limit..]);
        } else {
            let excess = (self.buf.len() + data.len()).saturating_sub(self.limit);
            if excess > 0 {
                self.cut = true;
                self.buf.drain(..excess);
            }
            self.buf.extend(data);
        }
    }

    /// The tail as text: invalid UTF-8 replaced, a character split by the
    /// cut dropped, and never more than `limit` bytes even after replacement.
    pub fn into_string(mut self) -> String {
        let bytes = self.buf.make_contiguous();
        let mut start = 0;
        if self.cut {
            while start < bytes.len().min(3) && bytes[start] & 0xC0 == 0x80 {
                start += 1;
            }
        }
        let text = String::from_utf8_lossy(&bytes[start..]);
        if text.len() <= self.limit {
            return text.into_owned();
        }
        let mut from = text.len() - self.limit;
        while !text.is_char_boundary(from) {
            from += 1;
        }
        text[from..].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail::new(4);
        t.push(b"ab");
        t.push(b"cde");
        assert_eq!(t.buf.len(), 4);
        t.push(b"");
        assert_eq!(t.into_string(), "bcde");
        let mut t = Tail::new(4);
        t.push(b"x");
        t.push(b"0123456789");
        assert_eq!(t.into_string(), "6789");
        let mut t = Tail::new(0);
        t.push(b"abc");
        assert_eq!(t.into_string(), "");
        // A cut through "é" drops its stray continuation byte.
        let mut t = Tail::new(2);
        t.push("zé!".as_bytes());
        assert_eq!(t.into_string(), "!");
        let mut t = Tail::new(3);
        t.push("zé!".as_bytes());
        assert_eq!(t.into_string(), "é!");
        // Replacement characters (3 bytes each) do not exceed the limit.
        let mut t = Tail::new(4);
        t.push(b"\xff\xff\xff\xff");
        assert_eq!(t.into_string(), "\u{fffd}");
    }

    proptest! {
        #[test]
        fn tail_matches_a_model(limit in 0usize..40, chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 0..20)) {
            let mut t = Tail::new(limit);
            let mut all = Vec::new();
            for c in &chunks {
                t.push(c);
                all.extend_from_slice(c);
                prop_assert!(t.buf.len() <= limit);
            }
            prop_assert_eq!(t.buf.iter().copied().collect::<Vec<_>>(), all[all.len().saturating_sub(limit)..].to_vec());
            prop_assert!(t.into_string().len() <= limit);
        }
    }

    #[test]
    fn a_frontier_fits_up_to_its_budget() {
        use crate::record::{Lane, Topic};
        let main: Vec<Lane> = (0..4000).map(Lane::from).collect();
        assert!(frontier_fits(&main), "4,000 main partitions");
        let t = Topic::named(&"t".repeat(240)).unwrap();
        let long: Vec<Lane> = (0..1000).map(|p| Lane::new(t, p)).collect();
        assert!(!frontier_fits(&long), "1,000 partitions of a 240-byte name");
        assert!(frontier_fits(&long[..400]));
    }
}
