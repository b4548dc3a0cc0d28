//! Commuting appends: which records of the claims log are independent, and
//! the canonical form of a world up to the order of independent records
//! (tests/pure/model.rs, module doc, "Reductions", 5).
//!
//! Two worlds whose logs differ only in the order in which independent
//! records landed behave alike: every process, the referee and every rule
//! read a record the same whatever independent records land around it, and
//! positions are only names to the protocol. So the model check counts
//! them as one state, by fingerprinting the canonical form: the log in a
//! canonical order of its class ([`World::canonical_order`]), every stored
//! position renamed to match ([`View::relabel`]), and the reasons (texts
//! that quote positions, which no rule reads) left out.

use super::*;
use std::hash::{Hash, Hasher};

/// Whether two records may affect each other's meaning, so that which of
/// the two lands first can matter to a reader. Every rule of src/boot.rs
/// that relates two records relates records of the same instance number
/// (fences, duplicates, holds; a revocation also its writer's), of the same
/// order (its contest: but two holders' claims and decisions each touch only
/// their own stance, see [`plain`], and so does a decision against another's
/// completion, see [`stance`]; except that which of two claims lands first,
/// and whether a rival's yield lands before a claim, decides whether that
/// claim is its own commit, R34), with the same order id, or a claim and
/// a record whose frontier passes the claim's order (the claim's lateness);
/// a checkpoint carries the whole view. Records that are related in none of
/// these ways *commute*: a view that reads them in either order is the
/// same, up to the positions it stores (`View::relabel`).
/// The `commuting` proptests in tests/pure/model.rs test this against the View
/// itself (the same View, and the same verdict on each record, in either
/// order), on random records and on protocol-shaped logs.
pub fn depends(a: &Record, b: &Record) -> bool {
    depends_in(a, b, false)
}

/// [`depends`], for logs in which no record is ever erased (no compaction)
/// and no decision is stray: a claim then also commutes with another
/// instance's decision (`committed` or `yielded`) of the same order. The
/// decision's writer holds the order by a valid claim that lands before
/// the decision, so wherever the two land, a claim that lands after the
/// decision finds the order's contest open, and only the claim that opens
/// a contest is judged for lateness (`passes` would say the decision's
/// frontier makes the claim late). Under compaction this is unsound: the
/// writer's claim can be erased later, and then the stray decision raises
/// the frontier before the contest opens (tests/pure/model.rs, module doc,
/// "Reductions", 9).
pub fn depends_unerased(a: &Record, b: &Record) -> bool {
    depends_in(a, b, true)
}

fn depends_in(a: &Record, b: &Record, unerased: bool) -> bool {
    // A claim's `passed_over` instances are its business too: it takes
    // them out of the idle queue until they next write (src/boot.rs).
    let who = |r: &Record| {
        [r.instance]
            .into_iter()
            .chain(r.by())
            .chain(r.passed_over().iter().copied())
            .collect::<Vec<InstanceNo>>()
    };
    if who(a).iter().any(|i| who(b).contains(i)) {
        return true;
    }
    // A checkpoint carries the whole view; whether a cancel is noted
    // depends on the order's contest and on the frontier (src/boot.rs,
    // `apply_cancel`): neither commutes with anything.
    let barrier = |r: &Record| matches!(r.event(), Event::Checkpoint | Event::Cancelled);
    if barrier(a) || barrier(b) {
        return true;
    }
    if a.order_id().is_some() && a.order_id() == b.order_id() {
        return true;
    }
    // R54–R56: a holder's key check counts the holds of its key (opened
    // by a claim or a lease that announces it, closed by any completion,
    // yield, park or revocation) and the parked orders of its key (parked,
    // claimed again): such a claim or lease, and a park, depend on every
    // record about an order. (Coarse: the records do not all say their
    // key.)
    let keyed = |r: &Record| {
        r.order_keyed
            || matches!(
                &r.body,
                Body::Parked { .. }
                    | Body::Lease {
                        order_key: Some(_),
                        ..
                    }
                    | Body::Claimed {
                        order_key: Some(_),
                        ..
                    }
                    | Body::Claimed { unpark: true, .. }
            )
    };
    if (keyed(a) && b.order().is_some()) || (keyed(b) && a.order().is_some()) {
        return true;
    }
    // R34: whether a first claim is its own commit depends on the rivals'
    // stances when it lands: on another claim of the order (undecided
    // then), and on another's yield of it (the rival is out then).
    let fuses = |c: &Record, x: &Record| {
        c.event() == Event::Claimed
            && c.takeover_of().is_empty()
            && matches!(x.event(), Event::Claimed | Event::Yielded)
    };
    if a.order().is_some() && a.order() == b.order() && (fuses(a, b) || fuses(b, a)) {
        return true;
    }
    if a.order().is_some()
        && a.order() == b.order()
        && !(plain(a) && plain(b))
        && !(stance(a, b) || stance(b, a))
    {
        return true;
    }
    passes(a, b, unerased) || passes(b, a, unerased)
}

/// Claims and decisions of an order's own holders: of two such records of
/// different instances about one order, neither changes how the other is
/// read (each instance has its own stance and hold). Completions (which
/// settle the order for everyone), revocations and takeovers do.
fn plain(r: &Record) -> bool {
    matches!(
        r.event(),
        Event::Claimed | Event::Committed | Event::Yielded | Event::Lease
    ) && r.takeover_of().is_empty()
        && r.by().is_none()
}

/// A decision of one holder (`a`) and another instance's completion of the
/// same order (`b`; the caller has ruled out the same instance): each sets
/// only its own writer's stance and hold, and the completion marks the
/// order completed, which no rule applying a decision reads (a decision is
/// judged against its own writer's claim). A claim is not among them: after
/// a completion whose claim compaction erased, a claim of the order opens
/// the contest as late, before it as not late (the commuting proptests in
/// tests/pure/model.rs found it); nor are two completions.
fn stance(a: &Record, b: &Record) -> bool {
    matches!(a.event(), Event::Yielded | Event::Committed)
        && plain(a)
        && b.event() == Event::Completed
        && b.takeover_of().is_empty()
        && b.by().is_none()
}

/// Whether `x` raises the frontier of claim `c`'s partition past `c`'s
/// order (so `c` lands behind the frontier after `x`, and may be late, not
/// before). Not when `x` is a claim of the same order: a valid one opens
/// the order's contest first, whichever of the two lands first (and
/// lateness is judged only when a contest opens), a void one raises
/// nothing.
fn passes(c: &Record, x: &Record, unerased: bool) -> bool {
    let Some(o) = c.order().filter(|_| c.event() == Event::Claimed) else {
        return false;
    };
    if x.event() == Event::Claimed && x.order() == Some(o) && plain(x) && plain(c) {
        return false;
    }
    let decision = matches!(x.event(), Event::Committed | Event::Yielded);
    if unerased && decision && x.order() == Some(o) && plain(x) && plain(c) {
        return false;
    }
    let own = x
        .order()
        .filter(|xo| x.event() == Event::Claimed && xo.lane() == o.lane())
        .map(|xo| xo.offset + 1);
    let next = x.next.get(&o.lane()).copied();
    own.into_iter().chain(next).any(|f| f > o.offset)
}

/// What [`World::fingerprint`] needs of a log entry that is fixed once its
/// record lands, computed then ([`landed`]) instead of at every fingerprint
/// (recomputing them took a tenth of the model check's time).
#[derive(Clone, Copy, Debug, Default)]
pub struct Landed {
    /// The state of the record's key hash ([`hash_record`] with positions
    /// as they are) before `erased`, which can change, is mixed in.
    key: u64,
    /// The earlier positions whose records this one depends on
    /// ([`depends`], [`depends_unerased`]), as bit sets; only for the
    /// first 128 positions (the model's logs stay below; longer logs, in
    /// the simulation, are never fingerprinted).
    deps: u128,
    deps_unerased: u128,
}

/// [`Landed`] for `rec`, landing after `log`.
pub(super) fn landed(log: &[Entry], rec: &Record) -> Landed {
    let mut h = Mix::default();
    hash_record(rec, &|p| p, &mut h);
    let (mut deps, mut deps_unerased) = (0u128, 0u128);
    if log.len() < 128 {
        for (q, e) in log.iter().enumerate() {
            if depends_in(&e.rec, rec, false) {
                deps |= 1 << q;
            }
            if depends_in(&e.rec, rec, true) {
                deps_unerased |= 1 << q;
            }
        }
    }
    Landed {
        key: h.0,
        deps,
        deps_unerased,
    }
}

impl World {
    /// [`Config::causal`]: the superseded records below every live reader
    /// that have none of the records the horizon protects in their causal
    /// past or at their position: each instance number's newest `booted`,
    /// and each undecided claim ([`HorizonRule::Claim`]) or every record
    /// about the order of an undecided claim ([`HorizonRule::Contest`]).
    pub(super) fn erasable_causal(&self, cfg: &Config) -> Vec<usize> {
        self.erasable_causal_in(cfg, &self.causal_pasts())
    }

    /// [`World::erasable_causal`], given the log's [`World::causal_pasts`].
    pub(super) fn erasable_causal_in(&self, cfg: &Config, pasts: &[u128]) -> Vec<usize> {
        assert_ne!(
            cfg.horizon,
            HorizonRule::Hold,
            "the causal horizon protects open negotiations only"
        );
        let mut reader = self.log.len();
        for inst in self.insts.iter().filter(|i| i.worker.is_some()) {
            reader = reader.min(inst.cursor);
        }
        let mut protected: u128 = 0;
        for p in self.newest_booted.iter().flatten() {
            protected |= 1 << p;
        }
        for (_, inst) in self.referee.instances() {
            if let Some(hold) = inst.hold.as_ref().filter(|h| h.committed.is_none()) {
                protected |= 1 << hold.claim_pos.get();
            }
        }
        let open = self.open_orders(cfg);
        for (p, e) in self.log.iter().enumerate() {
            if e.rec.order().is_some_and(|o| open.contains(&o)) {
                protected |= 1 << p;
            }
        }
        let superseded = self.superseded();
        (0..reader)
            .filter(|&p| superseded[p])
            .filter(|&p| (pasts[p] | 1 << p) & protected == 0)
            .collect()
    }

    /// For each position, the earlier positions it depends on, directly or
    /// through others ([`depends`]), as a bit set: the records that stay
    /// before it in every order of the log that the protocol cannot tell
    /// apart from this one.
    pub fn causal_pasts(&self) -> Vec<u128> {
        let direct = self.dependencies(false);
        let mut pasts: Vec<u128> = Vec::with_capacity(direct.len());
        for (p, &d) in direct.iter().enumerate() {
            let past = (0..p)
                .filter(|&q| d >> q & 1 == 1)
                .fold(d, |past, q| past | pasts[q]);
            pasts.push(past);
        }
        pasts
    }

    /// For each position, the earlier positions whose records it depends on
    /// directly ([`depends`]), as a bit set (computed as each record landed,
    /// [`landed`]).
    fn dependencies(&self, unerased: bool) -> Vec<u128> {
        assert!(
            self.log.len() <= 128,
            "the model's log outgrew its bit sets"
        );
        self.log
            .iter()
            .map(|e| {
                if unerased {
                    e.cached.deps_unerased
                } else {
                    e.cached.deps
                }
            })
            .collect()
    }

    /// [`World::dependencies`] computed pairwise from the records, as
    /// before they were computed as records land (for the reference
    /// [`World::fingerprint_by_copy`]).
    fn dependencies_pairwise(&self, unerased: bool) -> Vec<u128> {
        let n = self.log.len();
        assert!(n <= 128, "the model's log outgrew its bit sets");
        let mut direct: Vec<u128> = vec![0; n];
        for (p, deps) in direct.iter_mut().enumerate() {
            for q in 0..p {
                if depends_in(&self.log[q].rec, &self.log[p].rec, unerased) {
                    *deps |= 1 << q;
                }
            }
        }
        direct
    }

    /// The log's positions in a canonical order: the same for every log
    /// that differs from this one only in the order of independent records
    /// ([`depends`]). Repeatedly takes, of the records whose dependencies
    /// are all taken, the one with the smallest `key`; two such records are
    /// independent, hence of different instances, hence different, so only
    /// a collision of `key` can make the choice depend on positions.
    pub fn canonical_order(&self, key: &[u64], unerased: bool) -> Vec<usize> {
        canonical_order_of(key, &self.dependencies(unerased))
    }
}

/// [`World::canonical_order`], given the log's direct dependencies. The
/// records that are ready (every dependency taken) are kept in a bit set,
/// updated from the dependents of the record just taken, so that each
/// choice looks at the few ready records only (rescanning the whole log
/// for each choice took a tenth of the model check's time).
fn canonical_order_of(key: &[u64], direct: &[u128]) -> Vec<usize> {
    let n = direct.len();
    let bits = |mut set: u128| {
        std::iter::from_fn(move || {
            (set != 0).then(|| {
                let p = set.trailing_zeros() as usize;
                set &= set - 1;
                p
            })
        })
    };
    // dependents[q]: the positions that depend on position q directly.
    let mut dependents = [0u128; 128];
    let mut ready: u128 = 0;
    for (p, &d) in direct.iter().enumerate() {
        if d == 0 {
            ready |= 1 << p;
        }
        for q in bits(d) {
            dependents[q] |= 1 << p;
        }
    }
    let mut taken: u128 = 0;
    let mut out = Vec::with_capacity(n);
    while ready != 0 {
        // The smallest (key, position) among the ready: on a tie of keys
        // the first in position order is kept.
        let next = bits(ready)
            .reduce(|best, p| if key[p] < key[best] { p } else { best })
            .expect("ready is not empty");
        taken |= 1 << next;
        ready &= !(1 << next);
        ready |= bits(dependents[next])
            .filter(|&p| direct[p] & !taken == 0)
            .fold(0, |r, p| r | 1 << p);
        out.push(next);
    }
    assert_eq!(out.len(), n, "a partial order has a minimal element");
    out
}

/// [`canonical_order_of`] by rescanning the log for each choice, as it
/// was computed before (for the reference [`World::fingerprint_by_copy`]).
fn canonical_order_by_scan(key: &[u64], direct: &[u128]) -> Vec<usize> {
    let n = direct.len();
    let mut taken: u128 = 0;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let next = (0..n)
            .filter(|&p| taken >> p & 1 == 0 && direct[p] & !taken == 0)
            .min_by_key(|&p| (key[p], p))
            .expect("a partial order has a minimal element");
        taken |= 1 << next;
        out.push(next);
    }
    out
}

impl World {
    /// The fingerprint of this world's canonical form (see the module doc).
    ///
    /// The referee, the ghosts derived from records (`newest_booted`,
    /// `max_claimed`, `claimed_count`, `completed`, and each order's
    /// `first_pos`, `committed_by`, `claimed`, `completions`,
    /// `finished_void`) are functions of the log, which is hashed, so they
    /// are left out (the referee reads every record in log order, and
    /// independent records commute in a View).
    ///
    /// `unerased`: the configuration never erases a record, so the finer
    /// [`depends_unerased`] applies (its assumptions are checked here and
    /// by [`World::strays`]).
    pub fn fingerprint(&self, unerased: bool) -> u64 {
        let key: Vec<u64> = self
            .log
            .iter()
            .map(|e| {
                let mut h = Mix(e.cached.key);
                e.erased.hash(&mut h);
                h.finish()
            })
            .collect();
        self.assert_unerased(unerased);
        let order = self.canonical_order(&key, unerased);
        self.hash_canonical(&key, &order, false)
    }

    /// [`World::fingerprint`] as it was computed before
    /// `Worker::hash_relabeled` and [`Landed`]: each live process copied,
    /// renamed and hashed, every record's key and dependencies computed
    /// afresh. Kept as the reference the model tests compare it with.
    pub fn fingerprint_by_copy(&self, unerased: bool) -> u64 {
        let key: Vec<u64> = self
            .log
            .iter()
            .map(|e| {
                let mut h = Mix::default();
                hash_record(&e.rec, &|p| p, &mut h);
                e.erased.hash(&mut h);
                h.finish()
            })
            .collect();
        self.assert_unerased(unerased);
        let order = canonical_order_by_scan(&key, &self.dependencies_pairwise(unerased));
        self.hash_canonical(&key, &order, true)
    }

    /// The finer relation ([`depends_unerased`]) is only for logs with no
    /// erased and no stray record.
    fn assert_unerased(&self, unerased: bool) {
        if unerased {
            assert!(
                self.log.iter().all(|e| !e.erased) && self.strays == 0,
                "the unerased commuting relation was used on a log with an erased or stray record"
            );
        }
    }

    /// The hash of the world with its log in `order` (records' keys in
    /// `key`) and every stored position renamed to match; each live
    /// process hashed through [`Worker::hash_relabeled`], or `by_copy`
    /// renamed on a copy and hashed (the reference).
    fn hash_canonical(&self, key: &[u64], order: &[usize], by_copy: bool) -> u64 {
        // Destructured, so that a field added to World must be placed here.
        let World {
            log,
            insts,
            orphans,
            crashes,
            dups,
            referee: _,
            orders,
            newest_booted: _,
            max_claimed: _,
            claimed_count: _,
            completed: _,
            violation,
            now,
            jumps,
            pauses,
            outages,
            takeovers,
            second_runs_takeover,
            second_runs_death,
            stale_runs,
            lease_ms,
            forge_seen,
            leases,
            strays,
            settling,
            fence,
            handover,
            clocked,
            starts_marked,
            starts_unmarked,
            starts_handed: _,
            handed_view,
            handed_view_skips,
            views_loaded: _,
            views_refused: _,
            forged,
            cancels,
            shared_cancel_key,
            trust,
            clocks,
            guard_in_loop,
            judge_leases,
            cuts,
            freezes,
            thaws,
            terms,
            key_concurrency,
            topics,
            per_topic,
            ends,
            parks,
            unparked_runs,
        } = self;

        let n = order.len();
        let mut to = vec![0u64; n];
        for (new, &old) in order.iter().enumerate() {
            to[old] = new as u64;
        }
        let f = |p: Position| {
            let i = p.get() as usize;
            Position::new(if i < n { to[i] } else { p.get() })
        };
        let g = |o: &mut Outcome| o.reason = None;
        let mut h = Mix::default();
        // Forged records are never reordered here: tests/pure/model.rs checks
        // them without this reduction.
        (forged, cancels, shared_cancel_key, trust, fence, handover).hash(&mut h);
        (handed_view, handed_view_skips).hash(&mut h);
        (clocks, guard_in_loop, judge_leases, cuts, freezes, thaws).hash(&mut h);
        (terms, key_concurrency, parks, unparked_runs).hash(&mut h);
        (topics, per_topic, ends).hash(&mut h);
        for &p in order {
            // The key is the record's hash, unless it names a position.
            let names = log[p].rec.seen().is_some()
                || matches!(
                    log[p].rec.body,
                    Body::Claimed {
                        park_at: Some(_),
                        ..
                    }
                );
            match names {
                false => h.write_u64(key[p]),
                true => {
                    hash_record(&log[p].rec, &f, &mut h);
                    log[p].erased.hash(&mut h);
                }
            }
        }
        for inst in insts {
            let Inst {
                worker,
                cursor,
                pending,
                asked,
                running,
                fetched,
                ran,
                starts,
                crashed,
                frozen_until,
                down_until,
                next_tick,
                marker,
                died_at,
                fenced,
                deadline,
                wake_at,
                guard,
                killed,
                loop_frozen,
                cut_until,
                deaths,
                handing,
                handed,
                view,
            } = inst;
            // A handed view's snapshot ends at a cut of the log, which a
            // renaming of its positions does not keep: tests/pure/model.rs
            // checks handed views without this reduction, as checkpoints.
            assert!(
                view.is_none(),
                "a handed view in a world fingerprinted up to commuting appends"
            );
            fetched.hash(&mut h);
            match worker {
                Some(w) if by_copy => {
                    let mut w = w.clone();
                    w.relabel(&Relabel {
                        position: &f,
                        outcome: &g,
                    });
                    (1u8, w).hash(&mut h);
                }
                Some(w) => {
                    1u8.hash(&mut h);
                    let r = Relabel {
                        position: &f,
                        outcome: &g,
                    };
                    w.hash_relabeled(&r, &mut h);
                }
                None => 0u8.hash(&mut h),
            }
            pending.len().hash(&mut h);
            for t in pending {
                t.len().hash(&mut h);
                for r in t {
                    hash_record(r, &f, &mut h);
                }
            }
            (
                cursor,
                asked,
                running,
                ran,
                starts,
                crashed,
                frozen_until,
                down_until,
                next_tick,
                marker,
                died_at,
                wake_at,
            )
                .hash(&mut h);
            (fenced, deadline, handing, handed).hash(&mut h);
            (guard, killed, loop_frozen, cut_until, deaths).hash(&mut h);
        }
        orphans.len().hash(&mut h);
        for t in orphans {
            t.len().hash(&mut h);
            for r in t {
                hash_record(r, &f, &mut h);
            }
        }
        for o in orders {
            let OrderGhost {
                runner,
                runs,
                deaths_running,
                completions,
                first_commit,
                finished_void,
                claimed,
                started,
                first_pos: _,
                committed_by: _,
                open,
                ended,
            } = o;
            (
                runner,
                runs,
                deaths_running,
                completions,
                first_commit.map(|p| f(Position::new(p as u64))),
                finished_void,
                claimed,
                started,
                open,
                ended,
            )
                .hash(&mut h);
        }
        violation.as_ref().map(|(name, _)| name).hash(&mut h);
        (
            crashes,
            dups,
            now,
            jumps,
            pauses,
            outages,
            takeovers,
            second_runs_takeover,
            second_runs_death,
            stale_runs,
        )
            .hash(&mut h);
        (
            lease_ms,
            forge_seen,
            leases,
            strays,
            settling,
            fence,
            clocked,
            starts_marked,
            starts_unmarked,
        )
            .hash(&mut h);
        h.finish()
    }
}

/// Hashes a record with its positions (`seen`, `park_at`, `booted_at`) renamed by `f`, leaving out
/// its reasons.
fn hash_record(r: &Record, f: &dyn Fn(Position) -> Position, h: &mut Mix) {
    // Destructured, so that a field added to Record must be placed here.
    let Record {
        instance,
        incarnation,
        ts,
        seq,
        booted_at,
        next,
        body,
        order_keyed,
    } = r;
    (instance, incarnation, ts, seq, next, order_keyed).hash(h);
    booted_at.map(f).hash(h);
    std::mem::discriminant(body).hash(h);
    let outcome = match body {
        Body::Booted => None,
        Body::Claimed {
            order,
            attempt,
            takeover_of,
            rank,
            passed_over,
            order_id,
            unpark,
            park_at,
            order_key,
        } => {
            (
                order,
                attempt,
                takeover_of,
                rank,
                passed_over,
                order_id,
                unpark,
                park_at.map(f),
                order_key,
            )
                .hash(h);
            None
        }
        Body::Committed { order, attempt } => {
            (order, attempt).hash(h);
            None
        }
        Body::Yielded {
            order,
            attempt,
            reason: _,
        } => {
            (order, attempt).hash(h);
            None
        }
        Body::Lease {
            order,
            attempt,
            order_id,
            order_key,
        } => {
            (order, attempt, order_id, order_key).hash(h);
            None
        }
        Body::Parked {
            order,
            attempt,
            until,
            order_key,
        } => {
            (order, attempt, until, order_key).hash(h);
            None
        }
        Body::Revoked {
            order,
            by,
            fences,
            seen,
            rank,
            attempt,
            reason: _,
        } => {
            (order, by, fences, f(*seen), rank, attempt).hash(h);
            None
        }
        Body::Completed {
            order,
            attempt,
            exits,
            order_id,
            outcome,
        } => {
            (order, attempt, exits, order_id).hash(h);
            Some(outcome)
        }
        Body::Checkpoint { snapshot } => {
            snapshot.hash(h);
            None
        }
        Body::Cancelled { order, reason: _ } => {
            order.hash(h);
            None
        }
    };
    if let Some(Outcome {
        status,
        exit_code,
        duration_ms,
        reason: _,
        stdout_tail,
        stderr_tail,
        traceparent,
        retry_of,
    }) = outcome
    {
        (
            status,
            exit_code,
            duration_ms,
            stdout_tail,
            stderr_tail,
            traceparent,
            retry_of,
        )
            .hash(h);
    }
}

/// A fast 64-bit hash for fingerprints: each word mixed in by the
/// splitmix64 finaliser (SipHash took a quarter of the model check's time).
#[derive(Default)]
struct Mix(u64);

impl Mix {
    fn word(&mut self, x: u64) {
        let mut z = (self.0 ^ x).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }
}

impl Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(b) ^ (rest.len() as u64) << 59);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.word(x);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
