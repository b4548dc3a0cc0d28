//! Which records speak: fences (docs/protocol.md R10, R37) and duplicates (R7).

use super::{Booted, LastSeq, View, Void};
use crate::record::{Event, Position, Record};

impl View {
    /// Admits the record at `pos` from its writer, or says why it is void:
    /// a revocation's writer must be current and not revoked (R37); only
    /// the newest incarnation of an instance speaks, and a revoked one is
    /// silent (R10); a `seq` not above the last accepted is a duplicate
    /// (R7). A `booted` makes its incarnation the current one.
    pub(super) fn admit(&mut self, pos: Position, rec: &Record) -> Result<(), Void> {
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
            inst.booted = Some(Booted {
                at: pos,
                incarnation: rec.incarnation.clone(),
            });
            inst.revoked = None;
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
