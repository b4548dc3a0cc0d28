//! Test hooks of the View (the `testing` feature): renaming positions for
//! the model check (tests/pure/model.rs), the summary the compaction tests
//! compare.

use super::{Contest, Hold, Instance, View};
use crate::record::{OrderId, Outcome};
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hash;

/// An instance's incarnation and its hold (the order, and whether it is
/// committed), as [`Summary`] compares them.
pub type SummaryHold = (Option<String>, Option<(OrderId, bool)>);

/// What the tests compare across compaction: each instance's incarnation
/// and hold, and the frontier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub holds: BTreeMap<u32, SummaryHold>,
    pub frontier: BTreeMap<i32, i64>,
}

impl View {
    /// Renames every log position the view stores through `f`, and passes
    /// every stored outcome through `g`. For the model check only
    /// (tests/pure/model.rs, "Commuting appends"): the protocol treats positions
    /// as names of records — it stores them, compares them for equality and
    /// prints them, and orders one against another only to keep a
    /// checkpoint's newest ids and to forget settled contests, neither of
    /// which happens in those checks — so two logs that differ only in the
    /// order of unrelated records give views equal up to this renaming, and
    /// the check counts them once. `g` drops the texts
    /// (reasons) that quote positions; no rule reads them. The queue of
    /// settled contests is dropped: it matters only [`CONTEST_MEMORY`]
    /// positions after a contest settled. Only with the `testing` feature.
    pub fn relabel(&mut self, f: &dyn Fn(u64) -> u64, g: &dyn Fn(&mut Outcome)) {
        for s in self.instances.values_mut() {
            if let Some((p, _)) = &mut s.booted {
                *p = f(*p);
            }
            if let Some(h) = &mut s.hold {
                h.claim_pos = f(h.claim_pos);
                h.last_pos = f(h.last_pos);
                h.committed = h.committed.map(f);
            }
            if let Some((_, p, _, o)) = &mut s.last_completed {
                *p = f(*p);
                g(o);
            }
        }
        for c in self.contests.values_mut() {
            for (p, _) in c.stances.values_mut() {
                *p = f(*p);
            }
            c.completed_at = c.completed_at.map(f);
            if let Some((p, o)) = &mut c.finished {
                *p = f(*p);
                g(o);
            }
        }
        // When contests settled matters only CONTEST_MEMORY positions
        // later, far beyond any log the model builds.
        self.settled.clear();
        for (_, p) in self.ids.values_mut() {
            *p = f(*p);
        }
        for (p, _) in self.cancels.values_mut() {
            *p = f(*p);
        }
    }

    /// Feeds `h` exactly what hashing a copy of the view after
    /// [`View::relabel`]`(f, g)` would, without making the copy (the model
    /// check fingerprints every state this way; cloning and dropping the
    /// views' maps took about a tenth of its time). tests/pure/model.rs compares
    /// the two on the states of small explorations. Only with the `testing`
    /// feature.
    pub fn hash_relabeled<H: std::hash::Hasher>(
        &self,
        f: &dyn Fn(u64) -> u64,
        g: &dyn Fn(&mut Outcome),
        h: &mut H,
    ) {
        // Destructured, so that a field added to View must be placed here
        // (in declaration order: that is the order the derived Hash uses).
        let View {
            keep_duplicates,
            end,
            foreign,
            void,
            completions,
            instances,
            frontier,
            contests,
            settled: _,
            ids,
            checkpoint,
            cancels,
        } = self;
        let outcome = |o: &Outcome| {
            let mut o = o.clone();
            g(&mut o);
            o
        };
        (keep_duplicates, end, foreign, void, completions).hash(h);
        instances.len().hash(h);
        for (i, s) in instances {
            let Instance {
                booted,
                last_seq,
                hold,
                revoked,
                last_completed,
                last_ts,
                idle_ts,
                passed_over,
                exiting,
            } = s;
            i.hash(h);
            booted.as_ref().map(|(p, inc)| (f(*p), inc)).hash(h);
            last_seq.hash(h);
            hold.as_ref()
                .map(|hold| {
                    let Hold {
                        order,
                        claim_pos,
                        attempt,
                        committed,
                        order_id,
                        last_ts,
                        last_pos,
                        incarnation,
                        rank,
                        pending,
                        took_over,
                    } = hold;
                    (
                        order,
                        f(*claim_pos),
                        attempt,
                        committed.map(f),
                        order_id,
                        last_ts,
                        f(*last_pos),
                        incarnation,
                        rank,
                        pending,
                        took_over,
                    )
                })
                .hash(h);
            revoked.hash(h);
            last_completed
                .as_ref()
                .map(|(o, p, a, out)| (o, f(*p), a, outcome(out)))
                .hash(h);
            last_ts.hash(h);
            idle_ts.hash(h);
            passed_over.hash(h);
            exiting.hash(h);
        }
        frontier.hash(h);
        contests.len().hash(h);
        for (o, c) in contests {
            let Contest {
                stances,
                late,
                completed_at,
                finished,
                ranks,
                heirs,
            } = c;
            o.hash(h);
            stances.len().hash(h);
            for (i, (p, s)) in stances {
                (i, (f(*p), s)).hash(h);
            }
            late.hash(h);
            completed_at.map(f).hash(h);
            finished
                .as_ref()
                .map(|(p, out)| (f(*p), outcome(out)))
                .hash(h);
            (ranks, heirs).hash(h);
        }
        // `relabel` clears the queue of settled contests.
        VecDeque::<(u64, OrderId)>::new().hash(h);
        ids.len().hash(h);
        for (id, (o, p)) in ids {
            (id, (o, f(*p))).hash(h);
        }
        checkpoint.hash(h);
        cancels.len().hash(h);
        for (o, (p, r)) in cancels {
            (o, (f(*p), r)).hash(h);
        }
    }

    /// The facts that must not depend on compaction (for the tests).
    pub fn summary(&self) -> Summary {
        Summary {
            holds: self
                .instances
                .iter()
                .map(|(i, s)| {
                    let inc = s.booted.as_ref().map(|(_, inc)| inc.clone());
                    let hold = s.hold.as_ref().map(|h| (h.order, h.committed.is_some()));
                    (*i, (inc, hold))
                })
                .filter(|(_, (inc, hold))| inc.is_some() || hold.is_some())
                .collect(),
            frontier: self.frontier.clone(),
        }
    }
}
