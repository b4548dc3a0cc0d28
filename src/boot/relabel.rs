//! Test hooks of the View (the `testing` feature): renaming positions for
//! the model check (tests/pure/model.rs), the summary the compaction tests
//! compare.

use super::{Contest, Hold, Instance, Settled, View};
use crate::record::{Incarnation, InstanceNo, Lane, OrderId, Outcome, Position};
use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};

/// An instance's incarnation and its hold, as [`Summary`] compares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryHold {
    pub incarnation: Option<Incarnation>,
    /// The order held, if any.
    pub order: Option<OrderId>,
    /// Whether the hold is committed.
    pub committed: bool,
}

/// What the tests compare across compaction: each instance's incarnation
/// and hold, and the frontier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub holds: BTreeMap<InstanceNo, SummaryHold>,
    pub frontier: BTreeMap<Lane, i64>,
}

/// A renaming of log positions (`position`) and a pass over every stored
/// outcome (`outcome`), as [`View::relabel`] applies them.
pub struct Relabel<'a> {
    pub position: &'a dyn Fn(Position) -> Position,
    pub outcome: &'a dyn Fn(&mut Outcome),
}

impl Relabel<'_> {
    fn outcome(&self, o: &Outcome) -> Outcome {
        let mut o = o.clone();
        (self.outcome)(&mut o);
        o
    }
}

impl View {
    /// Renames every log position the view stores through `r.position`, and passes
    /// every stored outcome through `r.outcome`. For the model check only
    /// (tests/pure/model.rs, "Commuting appends"): the protocol treats positions
    /// as names of records — it stores them, compares them for equality and
    /// prints them, and orders one against another only to keep a
    /// checkpoint's newest ids and to forget settled contests, neither of
    /// which happens in those checks, and to compare two records of one
    /// writer (R10, `booted_at`), which every equivalent order keeps in
    /// order — so two logs that differ only in the order of unrelated
    /// records give views equal up to this renaming, and the check counts
    /// them once. `r.outcome` drops the texts
    /// (reasons) that quote positions; no rule reads them. The queue of
    /// settled contests is dropped: it matters only [`CONTEST_MEMORY`]
    /// positions after a contest settled. Only with the `testing` feature.
    pub fn relabel(&mut self, r: &Relabel) {
        let f = r.position;
        for s in self.instances.values_mut() {
            if let Some(b) = &mut s.booted {
                b.at = f(b.at);
            }
            if let Some(h) = &mut s.hold {
                h.claim_pos = f(h.claim_pos);
                h.last_pos = f(h.last_pos);
                h.committed = h.committed.map(f);
                if let Some((_, at)) = &mut h.key {
                    *at = f(*at);
                }
            }
            if let Some(c) = &mut s.last_completed {
                c.at = f(c.at);
                (r.outcome)(&mut c.outcome);
            }
        }
        for c in self.contests.values_mut() {
            for (p, _) in c.stances.values_mut() {
                *p = f(*p);
            }
            c.completed_at = c.completed_at.map(f);
            c.round = c.round.map(f);
            if let Some((p, o)) = &mut c.finished {
                *p = f(*p);
                (r.outcome)(o);
            }
        }
        // When contests settled matters only CONTEST_MEMORY positions
        // later, far beyond any log the model builds.
        self.settled.clear();
        for owner in self.ids.values_mut() {
            owner.at = f(owner.at);
        }
        for c in self.cancels.values_mut() {
            c.at = f(c.at);
        }
        for p in self.parked.values_mut() {
            p.at = f(p.at);
        }
    }

    /// Feeds `h` exactly what hashing a copy of the view after
    /// [`View::relabel`]`(r)` would, without making the copy (the model
    /// check fingerprints every state this way; cloning and dropping the
    /// views' maps took about a tenth of its time). tests/pure/model.rs compares
    /// the two on the states of small explorations. Only with the `testing`
    /// feature.
    pub fn hash_relabeled<H: Hasher>(&self, r: &Relabel, h: &mut H) {
        // Destructured, so that a field added to View must be placed here
        // (in declaration order: that is the order the derived Hash uses).
        let View {
            keep_duplicates,
            end,
            foreign,
            void,
            completions,
            adopted,
            instances,
            frontier,
            contests,
            settled: _,
            ids,
            checkpoint,
            stale_before,
            cancels,
            parked,
        } = self;
        let f = r.position;
        (keep_duplicates, end, foreign, void, completions, adopted).hash(h);
        instances.len().hash(h);
        for (i, s) in instances {
            i.hash(h);
            s.hash_relabeled(r, h);
        }
        frontier.hash(h);
        contests.len().hash(h);
        for (o, c) in contests {
            o.hash(h);
            c.hash_relabeled(r, h);
        }
        // `relabel` clears the queue of settled contests.
        VecDeque::<Settled>::new().hash(h);
        ids.len().hash(h);
        for (id, owner) in ids {
            (id, (owner.order, f(owner.at))).hash(h);
        }
        checkpoint.hash(h);
        stale_before.hash(h);
        cancels.len().hash(h);
        for (o, c) in cancels {
            (o, (f(c.at), &c.reason)).hash(h);
        }
        parked.len().hash(h);
        for (o, p) in parked {
            (o, (f(p.at), p.attempt, p.until, &p.key)).hash(h);
        }
    }

    /// The facts that must not depend on compaction (for the tests).
    pub fn summary(&self) -> Summary {
        Summary {
            holds: self
                .instances
                .iter()
                .map(|(i, s)| {
                    let hold = SummaryHold {
                        incarnation: s.booted.as_ref().map(|b| b.incarnation.clone()),
                        order: s.hold.as_ref().map(|h| h.order),
                        committed: s.hold.as_ref().is_some_and(|h| h.committed.is_some()),
                    };
                    (*i, hold)
                })
                .filter(|(_, s)| s.incarnation.is_some() || s.order.is_some())
                .collect(),
            frontier: self.frontier.clone(),
        }
    }
}

impl Instance {
    /// Feeds `h` what hashing this instance after relabeling would.
    fn hash_relabeled<H: Hasher>(&self, r: &Relabel, h: &mut H) {
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
        } = self;
        let f = r.position;
        booted.as_ref().map(|b| (f(b.at), &b.incarnation)).hash(h);
        last_seq.hash(h);
        hold.as_ref().map(|hold| hold.relabeled(f)).hash(h);
        revoked.hash(h);
        last_completed
            .as_ref()
            .map(|c| (c.order, f(c.at), c.attempt, r.outcome(&c.outcome)))
            .hash(h);
        (last_ts, idle_ts, passed_over, exiting).hash(h);
    }
}

impl Hold {
    /// This hold with its positions renamed through `f`.
    fn relabeled(&self, f: &dyn Fn(Position) -> Position) -> Hold {
        Hold {
            claim_pos: f(self.claim_pos),
            last_pos: f(self.last_pos),
            committed: self.committed.map(f),
            key: self.key.as_ref().map(|(k, at)| (k.clone(), f(*at))),
            ..self.clone()
        }
    }
}

impl Contest {
    /// Feeds `h` what hashing this contest after relabeling would.
    fn hash_relabeled<H: Hasher>(&self, r: &Relabel, h: &mut H) {
        let Contest {
            stances,
            late,
            completed_at,
            finished,
            ranks,
            heirs,
            parked_once,
            round,
            stale,
        } = self;
        let f = r.position;
        stances.len().hash(h);
        for (i, (p, s)) in stances {
            (i, (f(*p), s)).hash(h);
        }
        late.hash(h);
        completed_at.map(f).hash(h);
        finished
            .as_ref()
            .map(|(p, out)| (f(*p), r.outcome(out)))
            .hash(h);
        (ranks, heirs, parked_once, round.map(f), stale).hash(h);
    }
}
