//! Which records speak: fences (docs/protocol.md R10, R37) and duplicates (R7).

use super::{Booted, Instance, LastSeq, View, Void};
use crate::record::{Event, Incarnation, Position, Record};

impl View {
    /// Admits the record at `pos` from its writer, or says why it is void:
    /// a revocation's writer must be current and not revoked (R37); only
    /// the newest incarnation of an instance speaks, and a revoked one is
    /// silent (R10); a `seq` not above the last accepted is a duplicate
    /// (R7). A `booted` makes its incarnation the current one.
    pub(super) fn admit(&mut self, pos: Position, rec: &Record) -> Result<(), Void> {
        self.adopt_newer(pos, rec);
        // Written on another's behalf (a revocation): the writer must not be
        // fenced itself.
        if let Some(w) = rec.by().and_then(|w| self.instances.get(&w)) {
            let current = w
                .booted
                .as_ref()
                .is_none_or(|b| b.incarnation == rec.incarnation);
            if !current || w.revoked.as_ref() == Some(&rec.incarnation) {
                return Err(Void::Fenced);
            }
        }
        let keep_duplicates = self.keeps_duplicates();
        let inst = self.instances.entry(rec.instance).or_default();
        if rec.event() == Event::Booted {
            inst.make_current(pos, &rec.incarnation);
        } else if rec.by().is_none() {
            if inst
                .booted
                .as_ref()
                .is_some_and(|b| b.incarnation != rec.incarnation)
            {
                return Err(Void::Fenced);
            }
            if inst.revoked.as_ref() == Some(&rec.incarnation) {
                return Err(Void::Fenced);
            }
        }
        if rec.by().is_none() && rec.seq > 0 {
            if let Some(last) = &inst.last_seq {
                if last.incarnation == rec.incarnation && rec.seq <= last.seq && !keep_duplicates {
                    return Err(Void::Duplicate);
                }
            }
            inst.last_seq = Some(LastSeq {
                incarnation: rec.incarnation.clone(),
                seq: rec.seq,
            });
        }
        inst.last_ts = inst.last_ts.max(rec.ts);
        Ok(())
    }

    /// R10: a record whose writer incarnation is not its instance's
    /// current one, but names its own `booted` (`booted_at`) after the
    /// current one's and before itself, is of a newer incarnation whose
    /// `booted` this view never read: compaction erased it (R42), as a
    /// cleaner that passed this reader does while it replays, leaving older
    /// records before the reader's place and erasing newer ones after it.
    /// That incarnation becomes current, as its `booted` would have made
    /// it; an older incarnation's record (its `booted_at` before the
    /// current one's) stays void.
    fn adopt_newer(&mut self, pos: Position, rec: &Record) {
        let Some(at) = rec.booted_at.filter(|&a| a < pos) else {
            return;
        };
        if matches!(rec.event(), Event::Booted | Event::Cancelled) {
            return;
        }
        let w = self.instances.entry(rec.writer()).or_default();
        let newer = w
            .booted
            .as_ref()
            .is_some_and(|b| b.incarnation != rec.incarnation && at > b.at);
        if newer {
            w.make_current(at, &rec.incarnation);
            // As its `booted` does (`View::note_idle`).
            w.exiting = false;
            self.adopted += 1;
        }
    }

    /// Whether duplicates are applied (the `KeepDuplicates` flaw).
    #[cfg(any(test, feature = "testing"))]
    fn keeps_duplicates(&self) -> bool {
        self.keep_duplicates
    }

    /// Whether duplicates are applied: never without the `testing` feature.
    #[cfg(not(any(test, feature = "testing")))]
    fn keeps_duplicates(&self) -> bool {
        false
    }
}

impl Instance {
    /// The incarnation whose `booted` is at `at` is the instance's current
    /// one (R10): read, or known by a later record's `booted_at`.
    fn make_current(&mut self, at: Position, incarnation: &Incarnation) {
        self.booted = Some(Booted {
            at,
            incarnation: incarnation.clone(),
        });
        self.revoked = None;
    }
}
