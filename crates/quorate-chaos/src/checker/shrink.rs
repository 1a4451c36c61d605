//! A minimal failing history for a key whose operations cannot be linearized, small enough to
//! read: first the shortest failing prefix by call time, then operations dropped greedily
//! (halves, quarters, ..., single operations, as in delta debugging) while what is left still
//! fails.
//!
//! Dropping a write that a kept operation depended on would make a history fail for a reason
//! that is not the real one ("get returned v, which nobody wrote"), so the sub-histories tried
//! are always closed under dependencies: an operation keeps the write of the value it read, the
//! write at the revision it names, and the key's last write at or before the revision it
//! observed (see [`super::model::Step::observed_revision`]); so a delete or compare-and-put
//! keeps the write before it, back to the nearest put.
//!
//! Whether a prefix fails is not strictly monotone in its length, so the prefix is found by
//! galloping and then bisecting: it fails, and the prefix one operation shorter that the
//! bisection tried last did not. The whole search shares one step budget; when it runs out,
//! the smallest failing history found so far is returned.

use super::wgl::{SearchOp, Verdict, search};

/// Shrinks `ops` (in call order; known not linearizable) to a small failing sub-history,
/// returned as indices into `ops` in call order. `deps[i]` are the operations `ops[i]` depended
/// on.
pub(crate) fn minimal_failing(ops: &[SearchOp], deps: &[Vec<usize>], budget: u64) -> Vec<usize> {
    let mut shrinker = Shrinker { ops, deps, budget };
    let mut current = shrinker.shortest_failing_prefix();
    let mut chunk = (current.len() / 2).max(1);
    loop {
        let mut changed = false;
        let mut start = 0;
        while start < current.len() && shrinker.budget > 0 {
            let end = (start + chunk).min(current.len());
            let kept = current[..start].iter().chain(&current[end..]).copied();
            let candidate = shrinker.closure(kept);
            if candidate.len() < current.len() && shrinker.fails(&candidate) {
                current = candidate;
                changed = true;
            } else {
                start += chunk;
            }
        }
        if chunk > 1 {
            chunk /= 2;
        } else if !changed || shrinker.budget == 0 {
            return current;
        }
    }
}

/// The shrinking state: the key's operations, their dependencies and the steps left.
struct Shrinker<'a> {
    ops: &'a [SearchOp],
    deps: &'a [Vec<usize>],
    budget: u64,
}

impl Shrinker<'_> {
    /// The shortest prefix (closed under dependencies) that fails, by galloping then bisecting.
    fn shortest_failing_prefix(&mut self) -> Vec<usize> {
        let n = self.ops.len();
        let (mut passes, mut fails) = (0, 1);
        while fails < n && !self.fails(&self.closure(0..fails)) {
            passes = fails;
            fails *= 2;
        }
        let mut fails = fails.min(n);
        while fails - passes > 1 {
            let mid = passes + (fails - passes) / 2;
            if self.fails(&self.closure(0..mid)) {
                fails = mid;
            } else {
                passes = mid;
            }
        }
        self.closure(0..fails)
    }

    /// Whether the sub-history `subset` is found not linearizable within the budget left.
    fn fails(&mut self, subset: &[usize]) -> bool {
        if self.budget == 0 {
            return false;
        }
        let ops: Vec<SearchOp> = subset.iter().map(|&i| self.ops[i]).collect();
        let result = search(&ops, self.budget);
        self.budget -= result.steps;
        result.verdict == Verdict::NotLinearizable
    }

    /// `seed` with everything it depends on, transitively, in call order.
    fn closure(&self, seed: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let mut keep = vec![false; self.ops.len()];
        let mut stack: Vec<usize> = seed.into_iter().collect();
        while let Some(i) = stack.pop() {
            if !keep[i] {
                keep[i] = true;
                stack.extend(&self.deps[i]);
            }
        }
        (0..keep.len()).filter(|&i| keep[i]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::model::{Step, Version};

    fn op(call: u64, ret: u64, step: Step) -> SearchOp {
        SearchOp { call, ret, step }
    }

    #[test]
    fn keeps_the_stale_read_and_the_writes_it_contradicts() {
        let read = |revision| Step::Get {
            revision,
            found: Some(Version {
                value: 0,
                mod_revision: 2,
            }),
        };
        let mut ops = vec![op(
            0,
            10,
            Step::Put {
                value: 0,
                revision: 2,
            },
        )];
        let mut deps = vec![vec![]];
        // Linearizable reads of the first write.
        for i in 0..20u32 {
            let t = 11 + 10 * u64::from(i);
            ops.push(op(t, t + 5, read(2)));
            deps.push(vec![0]);
        }
        ops.push(op(
            300,
            310,
            Step::Put {
                value: 1,
                revision: 3,
            },
        ));
        deps.push(vec![]);
        // The stale read, after the second write returned.
        ops.push(op(320, 330, read(2)));
        deps.push(vec![0]);
        let minimal = minimal_failing(&ops, &deps, 1_000_000);
        assert_eq!(minimal, vec![0, 21, 22]);
    }
}
