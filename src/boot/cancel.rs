//! Operators' cancels in the View (docs/protocol.md R51; acted on by the
//! holder, R52, in src/worker.rs).

use super::{Cancel, View};
use crate::record::{OrderId, Position, Record};

impl View {
    /// An operator's cancel of an order. Noted unless the order is known to
    /// have run to its end (its contest is completed or finished) or to
    /// be settled and forgotten (behind the frontier with no contest: it
    /// was completed long ago; a claim of it now is late and yields), and
    /// unless an earlier cancel of it is noted (the first one counts).
    /// Inert otherwise: it changes no hold, stance or frontier, so the
    /// negotiation is untouched; only a holder reads it, before it runs
    /// the job and while it runs (src/worker.rs).
    pub(super) fn apply_cancel(&mut self, pos: Position, rec: &Record) {
        let Some(order) = rec.order() else { return };
        let done = match self.contests.get(&order) {
            Some(c) => c.completed_at.is_some() || c.finished.is_some(),
            None => order.offset < self.next_offset(order.lane()),
        };
        if !done {
            let reason = rec.reason().unwrap_or_default().to_string();
            self.cancels
                .entry(order)
                .or_insert(Cancel { at: pos, reason });
        }
    }

    /// The cancel of `order` this view read, if the order was not completed
    /// when it landed: its position and the operator's reason.
    pub fn cancel(&self, order: OrderId) -> Option<(Position, &str)> {
        self.cancels.get(&order).map(|c| (c.at, c.reason.as_str()))
    }
}
