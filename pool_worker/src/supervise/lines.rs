//! The lines a supervisor writes on a standby's standard input, both
//! sides of them: [`Line::text`] is what `supervise` writes, [`Line::parse`]
//! what the worker reads (pool_worker/src/run.rs, `SupervisorLines`). One
//! spelling of each, as ready.rs keeps the words of the other direction.

/// One line of the supervisor to a standby.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// `booted`: the instance's current process has booted (its fences
    /// are done): the standby may initialise its own transactional id
    /// ([`super::TXN_SLOT`]).
    Booted,
    /// `go`, `go done` or `go handed`: its turn, and how its predecessor
    /// ended.
    Go(Went),
    /// `heir <incarnation>`, once it runs: the instance's next process
    /// ([`super::INCARNATION`]; docs/protocol.md R16, "Handed boot").
    Heir(String),
}

/// How a standby's predecessor ended, as its `go` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Went {
    /// `go`: it exited (or was killed) without saying `done`: the standby
    /// fences its id first.
    Exited,
    /// `go done`: it said `done`: every append acknowledged, none to come.
    Done,
    /// `go handed`: it said `done`, its last transaction holding the
    /// standby's `booted` (R16, "Handed boot"): no fence of its id, no
    /// `booted` to append.
    Handed,
}

impl Line {
    /// The line as written, with its end.
    pub(crate) fn text(&self) -> String {
        match self {
            Line::Booted => "booted\n".into(),
            Line::Go(Went::Exited) => "go\n".into(),
            Line::Go(Went::Done) => "go done\n".into(),
            Line::Go(Went::Handed) => "go handed\n".into(),
            Line::Heir(h) => format!("heir {h}\n"),
        }
    }

    /// A line's meaning; `None` for any other line.
    pub(crate) fn parse(line: &str) -> Option<Line> {
        match line.trim() {
            "booted" => Some(Line::Booted),
            "go" => Some(Line::Go(Went::Exited)),
            "go done" => Some(Line::Go(Went::Done)),
            "go handed" => Some(Line::Go(Went::Handed)),
            l => l
                .strip_prefix("heir ")
                .map(str::trim)
                .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
                .map(|h| Line::Heir(h.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The supervisor's lines to a standby (TXN_SLOT, INCARNATION): the
    /// three `go` lines, `booted` and `heir X`; any other line is none;
    /// what the supervisor writes is what the worker reads.
    #[test]
    fn a_standbys_supervisor_lines() {
        assert_eq!(Line::parse("go"), Some(Line::Go(Went::Exited)));
        assert_eq!(Line::parse("go done\n"), Some(Line::Go(Went::Done)));
        assert_eq!(Line::parse("booted"), Some(Line::Booted));
        // R16, "Handed boot".
        assert_eq!(Line::parse("go handed"), Some(Line::Go(Went::Handed)));
        assert_eq!(
            Line::parse("heir 0123456789abcdef\n"),
            Some(Line::Heir("0123456789abcdef".into()))
        );
        for other in ["", "done", "go now", "GO", "heir", "heir ", "heir a b"] {
            assert_eq!(Line::parse(other), None, "{other:?}");
        }
        for line in [
            Line::Booted,
            Line::Go(Went::Exited),
            Line::Go(Went::Done),
            Line::Go(Went::Handed),
            Line::Heir("0123456789abcdef".into()),
        ] {
            let text = line.text();
            assert!(
                text.ends_with('\n') && text.matches('\n').count() == 1,
                "{text:?}"
            );
            assert_eq!(Line::parse(&text), Some(line));
        }
    }
}
