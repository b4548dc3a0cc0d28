//! Which records speak: fences (docs/protocol.md R10, R37) and duplicates (R7).

use super::{View, Void};
use crate::record::{Event, Record};

impl View {
    /// Admits the record at `pos` from its writer, or says why it is void:
    /// a revocation's writer must be current and not revoked (R37); only
    /// the newest incarnation of an instance speaks, and a revoked one is
    /// silent (R10); a `seq` not above the last accepted is a duplicate
    /// (R7). A `booted` makes its incarnation the current one.
    pub(super) fn admit(&mut self, pos: u64, rec: &Record) -> Result<(), Void> {
        // Written on another's behalf (a revocation): the writer must not be
        // fenced itself.
        if let Some(w) = rec.by().and_then(|w| self.instances.get(&w)) {
            let current = w
                .booted
                .as_ref()
                .is_none_or(|(_, cur)| *cur == rec.incarnation);
            if !current || w.revoked.as_deref() == Some(rec.incarnation.as_str()) {
                return Err(Void::Fenced);
            }
        }
        let keep_duplicates = self.keeps_duplicates();
        let inst = self.instances.entry(rec.instance).or_default();
        if rec.event() == Event::Booted {
            inst.booted = Some((pos, rec.incarnation.clone()));
            inst.revoked = None;
        } else if rec.by().is_none() {
            if let Some((_, cur)) = &inst.booted {
                if *cur != rec.incarnation {
                    return Err(Void::Fenced);
                }
            }
            if inst.revoked.as_deref() == Some(rec.incarnation.as_str()) {
                return Err(Void::Fenced);
            }
        }
        if rec.by().is_none() && rec.seq > 0 {
            if let Some((inc, seq)) = &inst.last_seq {
                if *inc == rec.incarnation && rec.seq <= *seq && !keep_duplicates {
                    return Err(Void::Duplicate);
                }
            }
            inst.last_seq = Some((rec.incarnation.clone(), rec.seq));
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
