//! The Wing–Gong–Lowe linearizability search over one key's operations, with the memoisation
//! of Lowe's paper and porcupine: a state already reached with the same set of operations
//! linearized is never explored twice. Operations that never returned (applied unknown writes)
//! have a return time of `u64::MAX`. The search is bounded in steps and says so when it stops.
//!
//! One pruning on top: the model's floor (the revision of the last operation linearized) only
//! rises, so a choice that lifts it above what some operation not yet linearized allows (see
//! [`Step::floor_limit`]) is abandoned at once instead of when that operation's return entry is
//! reached. etcd's revisions nearly fix the order, so this keeps the search close to linear in
//! the history's length even under heavy concurrency and with never-returning writes.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use super::model::{KeyState, Step};

/// One operation to linearize: its real-time interval and what it did.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SearchOp {
    /// When it was called.
    pub(crate) call: u64,
    /// When it returned; `u64::MAX` for never.
    pub(crate) ret: u64,
    /// What it did.
    pub(crate) step: Step,
}

/// The search's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A linearization exists.
    Linearizable,
    /// None exists.
    NotLinearizable,
    /// The step bound was hit first.
    Incomplete,
}

/// The answer and the work it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Search {
    /// The answer.
    pub(crate) verdict: Verdict,
    /// Steps taken (one per entry visited).
    pub(crate) steps: u64,
}

const NIL: usize = usize::MAX;

/// An entry of the doubly-linked call/return list; index 0 is the head sentinel.
struct Node {
    prev: usize,
    next: usize,
    op: usize,
    /// For a call entry, its return entry; `NIL` for a return entry.
    matching: usize,
}

/// Searches for a linearization of `ops` from the absent key, in at most `max_steps` steps.
pub(crate) fn search(ops: &[SearchOp], max_steps: u64) -> Search {
    let mut nodes = entries(ops);
    let mut linearized = Bits::new(ops.len());
    let mut limits = Limits::new(ops.iter().map(|o| o.step.floor_limit()));
    let mut cache: HashSet<CacheKey, BuildHasherDefault<FxHasher>> = HashSet::default();
    let mut calls: Vec<(usize, KeyState)> = Vec::new();
    let mut state = KeyState::default();
    let mut entry = nodes[0].next;
    let mut steps = 0;
    let done = |verdict, steps| Search { verdict, steps };
    while nodes[0].next != NIL {
        if steps >= max_steps {
            return done(Verdict::Incomplete, steps);
        }
        steps += 1;
        if nodes[entry].matching != NIL {
            let op = nodes[entry].op;
            let next = ops[op].step.apply(state).filter(|&next| {
                limits.remove(op);
                linearized.set(op);
                let live = next.floor <= limits.min() && cache.insert(linearized.key(next));
                if !live {
                    limits.restore(op);
                    linearized.clear(op);
                }
                live
            });
            match next {
                Some(next) => {
                    calls.push((entry, state));
                    state = next;
                    lift(&mut nodes, entry);
                    entry = nodes[0].next;
                }
                None => entry = nodes[entry].next,
            }
        } else {
            // A return entry: the operation it closes must already be linearized, so undo the
            // latest choice and try the next candidate after it.
            let Some((call, before)) = calls.pop() else {
                return done(Verdict::NotLinearizable, steps);
            };
            state = before;
            limits.restore(nodes[call].op);
            linearized.clear(nodes[call].op);
            unlift(&mut nodes, call);
            entry = nodes[call].next;
        }
    }
    done(Verdict::Linearizable, steps)
}

/// The list of call and return entries in time order (a call before a return at equal times:
/// operations touching in time count as concurrent), behind a head sentinel.
fn entries(ops: &[SearchOp]) -> Vec<Node> {
    let mut order: Vec<(u64, bool, usize)> = ops
        .iter()
        .enumerate()
        .flat_map(|(i, o)| [(o.call, false, i), (o.ret, true, i)])
        .collect();
    order.sort_unstable();
    let mut nodes: Vec<Node> = Vec::with_capacity(order.len() + 1);
    let mut return_node = vec![NIL; ops.len()];
    nodes.push(Node {
        prev: NIL,
        next: if order.is_empty() { NIL } else { 1 },
        op: NIL,
        matching: NIL,
    });
    for (pos, &(_, is_return, op)) in order.iter().enumerate() {
        let index = pos + 1;
        if is_return {
            return_node[op] = index;
        }
        nodes.push(Node {
            prev: index - 1,
            next: if index < order.len() { index + 1 } else { NIL },
            op,
            matching: if is_return { NIL } else { 0 },
        });
    }
    for node in &mut nodes[1..] {
        if node.matching == 0 {
            node.matching = return_node[node.op];
        }
    }
    nodes
}

/// Takes a call entry and its return entry out of the list.
fn lift(nodes: &mut [Node], call: usize) {
    unlink(nodes, call);
    unlink(nodes, nodes[call].matching);
}

fn unlink(nodes: &mut [Node], i: usize) {
    let (prev, next) = (nodes[i].prev, nodes[i].next);
    nodes[prev].next = next;
    if next != NIL {
        nodes[next].prev = prev;
    }
}

/// Puts back what [`lift`] took out, in reverse order.
fn unlift(nodes: &mut [Node], call: usize) {
    relink(nodes, nodes[call].matching);
    relink(nodes, call);
}

fn relink(nodes: &mut [Node], i: usize) {
    let (prev, next) = (nodes[i].prev, nodes[i].next);
    nodes[prev].next = i;
    if next != NIL {
        nodes[next].prev = i;
    }
}

/// The floor limits of the operations not yet linearized, as a min segment tree: the lowest one
/// bounds every state the search may still reach.
struct Limits {
    /// Leaves from `leaves` on, `i64::MAX` for a linearized (or absent) operation.
    tree: Vec<i64>,
    leaves: usize,
    limit: Vec<i64>,
}

impl Limits {
    fn new(limits: impl Iterator<Item = i64>) -> Self {
        let limit: Vec<i64> = limits.collect();
        let leaves = limit.len().next_power_of_two();
        let mut tree = vec![i64::MAX; 2 * leaves];
        tree[leaves..leaves + limit.len()].copy_from_slice(&limit);
        for i in (1..leaves).rev() {
            tree[i] = tree[2 * i].min(tree[2 * i + 1]);
        }
        Limits {
            tree,
            leaves,
            limit,
        }
    }

    fn min(&self) -> i64 {
        self.tree[1]
    }

    fn remove(&mut self, op: usize) {
        self.update(op, i64::MAX);
    }

    fn restore(&mut self, op: usize) {
        self.update(op, self.limit[op]);
    }

    fn update(&mut self, op: usize, value: i64) {
        let mut i = self.leaves + op;
        self.tree[i] = value;
        while i > 1 {
            i /= 2;
            self.tree[i] = self.tree[2 * i].min(self.tree[2 * i + 1]);
        }
    }
}

/// The set of linearized operations. Operations are numbered in call order and the search
/// linearizes roughly in that order, so the set is "everything below a point" plus a few bits
/// above it; the cache stores only that window, keeping its entries small for long histories.
struct Bits {
    words: Vec<u64>,
    /// The first word not all ones.
    low: usize,
    /// One past the last word not all zeros.
    high: usize,
}

/// A memoised configuration: the linearized set (as its window) and the model state.
#[derive(PartialEq, Eq, Hash)]
struct CacheKey {
    low: usize,
    window: Box<[u64]>,
    state: KeyState,
}

impl Bits {
    fn new(n: usize) -> Self {
        Bits {
            words: vec![0; n.div_ceil(64)],
            low: 0,
            high: 0,
        }
    }

    fn set(&mut self, i: usize) {
        let w = i / 64;
        self.words[w] |= 1 << (i % 64);
        self.high = self.high.max(w + 1);
        while self.low < self.words.len() && self.words[self.low] == u64::MAX {
            self.low += 1;
        }
    }

    fn clear(&mut self, i: usize) {
        let w = i / 64;
        self.words[w] &= !(1 << (i % 64));
        self.low = self.low.min(w);
        while self.high > 0 && self.words[self.high - 1] == 0 {
            self.high -= 1;
        }
    }

    fn key(&self, state: KeyState) -> CacheKey {
        CacheKey {
            low: self.low,
            window: self.words[self.low..self.high.max(self.low)].into(),
            state,
        }
    }
}

/// The Fx hash (rustc's): the cache is hashed once per step, and SipHash's resistance to
/// adversarial keys buys nothing here.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::model::Version;

    fn op(call: u64, ret: u64, step: Step) -> SearchOp {
        SearchOp { call, ret, step }
    }

    fn put(value: u32, revision: i64) -> Step {
        Step::Put { value, revision }
    }

    fn get(value: u32, mod_revision: i64, revision: i64) -> Step {
        Step::Get {
            revision,
            found: Some(Version {
                value,
                mod_revision,
            }),
        }
    }

    #[test]
    fn concurrent_writes_and_reads_linearize() {
        let ops = [
            op(0, 10, put(1, 2)),
            op(5, 20, put(2, 3)),
            op(6, 8, get(1, 2, 2)),
            op(9, 30, get(2, 3, 3)),
            op(21, 25, get(2, 3, 4)),
        ];
        assert_eq!(search(&ops, 1000).verdict, Verdict::Linearizable);
    }

    #[test]
    fn a_stale_read_after_a_newer_write_does_not() {
        let ops = [
            op(0, 10, put(1, 2)),
            op(11, 20, put(2, 3)),
            op(21, 30, get(1, 2, 2)),
        ];
        assert_eq!(search(&ops, 1000).verdict, Verdict::NotLinearizable);
    }

    #[test]
    fn a_write_that_never_returned_may_land_late() {
        let ops = [
            op(0, u64::MAX, put(1, 5)),
            op(
                1,
                2,
                Step::Get {
                    revision: 3,
                    found: None,
                },
            ),
            op(3, 4, get(1, 5, 6)),
        ];
        assert_eq!(search(&ops, 1000).verdict, Verdict::Linearizable);
    }

    #[test]
    fn the_step_bound_is_reported() {
        let ops: Vec<_> = (0..40)
            .map(|i| op(0, 100, put(i, i64::from(i) + 2)))
            .collect();
        assert_eq!(search(&ops, 10).verdict, Verdict::Incomplete);
        assert_eq!(search(&ops, 100_000).verdict, Verdict::Linearizable);
    }

    #[test]
    fn bits_keep_a_canonical_window() {
        let mut a = Bits::new(200);
        let mut b = Bits::new(200);
        for i in 0..130 {
            a.set(i);
        }
        a.set(150);
        for i in (0..130).rev() {
            b.set(i);
        }
        b.set(199);
        b.set(150);
        b.clear(199);
        assert!(a.key(KeyState::default()) == b.key(KeyState::default()));
        assert_eq!(a.low, 2);
        a.clear(3);
        assert_eq!(a.low, 0);
    }
}
