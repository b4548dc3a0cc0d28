//! The claim negotiation (docs/protocol.md R32, ranks R33), as one pure
//! function: after reading past its own claim, an instance asks [`decide`]
//! after every record until the answer is not [`Decision::Wait`]. Why two
//! commits cannot happen: docs/protocol-proofs.md, "No order is committed
//! twice".

use crate::boot::{Stance, View};
use crate::record::{InstanceNo, OrderId};

/// What an instance that claimed an order does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Commit,
    /// Yield, with the reason that goes into the `yielded` record.
    Yield(String),
    /// Keep reading: a rival with a higher number has not decided yet.
    Wait {
        on: Vec<InstanceNo>,
    },
}

/// Decides for instance `me`, whose claim on `order` is in `view`.
///
/// Call it only once the view has read past `me`'s claim.
pub fn decide(view: &View, me: InstanceNo, order: OrderId) -> Decision {
    let Some(contest) = view.contest(order) else {
        // Our own claim is in the view, so this is unreachable for a correct
        // caller; yielding is the safe answer.
        return Decision::Yield("no record of this order".into());
    };
    if contest.late_for(me) {
        return Decision::Yield("late claim: the order was claimed and settled before".into());
    }
    if let Some(at) = contest.completed_at {
        return Decision::Yield(format!("order already completed (claims #{at})"));
    }
    // A void completion: its writer's hold was revoked or fenced, but the
    // job ran to its end; or compaction erased the claim that made it valid
    // (R15, R32.1). Either way, not again.
    if let Some((at, _)) = &contest.finished {
        return Decision::Yield(format!(
            "order already ran to its end (claims #{at}, a void completion)"
        ));
    }
    // R55: a claim made before the order was parked ended with that round.
    if let Some(at) = contest.outrun(me) {
        return Decision::Yield(format!(
            "the order was parked after this claim (claims #{at}); it is claimed again"
        ));
    }
    let rivals = || contest.rivals(me);
    if let Some((i, _)) = rivals().find(|(_, (_, s))| *s == Stance::Committed) {
        return Decision::Yield(format!("instance {i} committed first"));
    }
    let undecided: Vec<InstanceNo> = rivals()
        .filter(|(_, (_, s))| *s == Stance::Undecided)
        .map(|(i, _)| *i)
        .collect();
    // Ranks are instance numbers, except for takeovers, which stand where
    // the hold they took over stood (R33).
    let mine = contest.rank(me);
    if let Some(lower) = undecided.iter().find(|i| contest.rank(**i) < mine) {
        let (rank, _) = contest.rank(*lower);
        return Decision::Yield(if rank == lower.get() {
            format!("instance {lower} claimed too and has the lower number")
        } else {
            format!("instance {lower} claimed too and ranks lower (it took over a claim of rank {rank})")
        });
    }
    if !undecided.is_empty() {
        return Decision::Wait { on: undecided };
    }
    Decision::Commit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Event, Outcome, Position, Record, Status};

    fn wait_on(i: &[u32]) -> Decision {
        let on = i.iter().copied().map(InstanceNo::new).collect();
        Decision::Wait { on }
    }

    /// A record of instance `i` about order `0:o`. Its claims are takeover
    /// claims (of instance 9's hold), which are never their own decision
    /// (R34), so that these tests see undecided rivals; a first claim that
    /// met no rival is committed at once (`a_first_claim_is_its_own_commit`).
    fn rec(i: u32, ev: Event, o: i64) -> Record {
        let mut r = Record::of(i, ev, "x", 0).with_order(OrderId::new(0, o));
        r.set_attempt(1);
        if ev == Event::Claimed {
            r.set_takeover_of(vec![crate::record::Cite {
                instance: InstanceNo::new(9),
                incarnation: "z".into(),
            }]);
        }
        if ev == Event::Completed {
            r.set_outcome(Some(Outcome::not_run(Status::Ok, "x")));
        }
        r
    }

    fn decide_on(log: &[(u32, Event)], me: u32) -> Decision {
        let mut v = View::new();
        for (p, (i, ev)) in log.iter().enumerate() {
            let _ = v.apply(Position::new(p as u64), &rec(*i, *ev, 0));
        }
        decide(&v, InstanceNo::new(me), OrderId::new(0, 0))
    }

    use Event::*;

    #[test]
    fn a_first_claim_is_its_own_commit() {
        let mut v = View::new();
        let o = OrderId::new(0, 0);
        let claim = |i: u32| Record::of(i, Claimed, "x", 0).with_order(o);
        let _ = v.apply(Position::new(0), &claim(2));
        let _ = v.apply(Position::new(1), &claim(1));
        let h = v.hold(InstanceNo::new(2)).unwrap();
        assert_eq!(h.committed, Some(h.claim_pos));
        assert_eq!(v.hold(InstanceNo::new(1)).unwrap().committed, None);
        assert!(
            matches!(decide(&v, InstanceNo::new(1), o), Decision::Yield(r) if r.contains("instance 2 committed"))
        );
    }

    #[test]
    fn no_rival_commits() {
        assert_eq!(decide_on(&[(2, Claimed)], 2), Decision::Commit);
    }

    #[test]
    fn a_lower_undecided_rival_wins_at_once() {
        assert!(matches!(
            decide_on(&[(1, Claimed), (2, Claimed)], 2),
            Decision::Yield(_)
        ));
        assert!(matches!(
            decide_on(&[(2, Claimed), (1, Claimed)], 2),
            Decision::Yield(_)
        ));
    }

    #[test]
    fn a_higher_undecided_rival_is_waited_for() {
        assert_eq!(decide_on(&[(2, Claimed), (1, Claimed)], 1), wait_on(&[2]));
    }

    #[test]
    fn a_higher_rival_that_committed_wins() {
        let d = decide_on(&[(2, Claimed), (1, Claimed), (2, Committed)], 1);
        assert!(matches!(d, Decision::Yield(r) if r.contains("instance 2 committed")));
    }

    #[test]
    fn a_higher_rival_that_yielded_drops_out() {
        assert_eq!(
            decide_on(&[(2, Claimed), (1, Claimed), (2, Yielded)], 1),
            Decision::Commit
        );
    }

    #[test]
    fn several_rivals_yield_to_any_lower_else_wait_on_the_higher() {
        let log = [(3, Claimed), (1, Claimed), (5, Claimed), (2, Claimed)];
        assert!(matches!(decide_on(&log, 2), Decision::Yield(_)));
        assert!(matches!(decide_on(&log, 5), Decision::Yield(_)));
        assert_eq!(decide_on(&log, 1), wait_on(&[2, 3, 5]));
        let mut log = log.to_vec();
        log.extend([(2, Yielded), (3, Yielded)]);
        assert_eq!(decide_on(&log, 1), wait_on(&[5]));
        log.push((5, Yielded));
        assert_eq!(decide_on(&log, 1), Decision::Commit);
    }

    #[test]
    fn a_completed_order_is_never_committed_again() {
        let log = [(2, Claimed), (2, Committed), (2, Completed), (1, Claimed)];
        assert!(matches!(decide_on(&log, 1), Decision::Yield(r) if r.contains("completed")));
    }

    #[test]
    fn a_crashed_claimant_resumes_by_negotiating() {
        // Instance 1 claimed and crashed; 2 claimed and committed meanwhile
        // (it read past its claim before 1's claim landed). On resume 1 must
        // yield, not run.
        let log = [(2, Claimed), (1, Claimed), (2, Committed)];
        assert!(matches!(decide_on(&log, 1), Decision::Yield(_)));
    }
}
