//! Linearizability, partitioned by key (each key is an independent register, so the history is
//! linearizable iff every key's sub-history is): each key's operations are searched with
//! Wing–Gong–Lowe against the key model. Serializable gets are left out (etcd does not promise
//! they are linearizable; the read check judges them), as are unanswered gets and unknown
//! writes that did not apply; unknown writes that applied are in, at the revision the watch
//! shows, never returning.

use std::collections::{BTreeMap, HashMap};

use super::anomaly::{Anomaly, OpRef};
use super::model::{Step, ValueId, Version};
use super::shrink::minimal_failing;
use super::unknowns::Effect;
use super::wgl::{SearchOp, Verdict, search};
use crate::history::{Event, History, Op, Outcome, Versioned};

/// The per-key verdicts and the work they took.
pub(crate) struct Linearizability {
    /// [`Anomaly::NotLinearizable`] and [`Anomaly::CheckIncomplete`], by key.
    pub(crate) anomalies: Vec<Anomaly>,
    /// Search steps over all keys (shrinking excluded).
    pub(crate) steps: u64,
}

/// Searches every key's linearizable operations, each within `max_steps` (and as much again to
/// shrink a failure).
pub(crate) fn check(history: &History, effects: &[Effect], max_steps: u64) -> Linearizability {
    let events = &history.events;
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let linearizable = match effects[i] {
            Effect::Applied(_) => true,
            Effect::Acknowledged => !matches!(
                e.op,
                Op::Get {
                    serializable: true,
                    ..
                }
            ),
            Effect::NotApplied | Effect::Ignored => false,
        };
        if linearizable {
            by_key.entry(e.op.key()).or_default().push(i);
        }
    }

    let mut anomalies = Vec::new();
    let mut steps = 0;
    for (key, mut indices) in by_key {
        indices.sort_by_key(|&i| (events[i].call_ns, i));
        let mut values = Interner::default();
        let (indices, ops): (Vec<usize>, Vec<SearchOp>) = indices
            .into_iter()
            .filter_map(|i| Some((i, search_op(&events[i], effects[i], &mut values)?)))
            .unzip();
        let result = search(&ops, max_steps);
        steps += result.steps;
        match result.verdict {
            Verdict::Linearizable => {}
            Verdict::Incomplete => anomalies.push(Anomaly::CheckIncomplete {
                key: key.to_owned(),
                operations: ops.len(),
                steps: result.steps,
            }),
            Verdict::NotLinearizable => {
                let minimal = minimal_failing(&ops, &dependencies(&ops), max_steps)
                    .into_iter()
                    .map(|j| {
                        let i = indices[j];
                        match effects[i] {
                            Effect::Applied(revision) => OpRef::applied(history, i, revision),
                            _ => OpRef::new(history, i),
                        }
                    })
                    .collect();
                anomalies.push(Anomaly::NotLinearizable {
                    key: key.to_owned(),
                    operations: ops.len(),
                    minimal,
                });
            }
        }
    }
    Linearizability { anomalies, steps }
}

/// Numbers a key's values in order of appearance.
#[derive(Default)]
struct Interner<'h> {
    ids: HashMap<&'h str, ValueId>,
}

impl<'h> Interner<'h> {
    fn id(&mut self, value: &'h str) -> ValueId {
        let next = ValueId::try_from(self.ids.len()).expect("fewer than 2^32 values per key");
        *self.ids.entry(value).or_insert(next)
    }

    fn version(&mut self, v: &'h Option<Versioned>) -> Option<Version> {
        v.as_ref().map(|v| Version {
            value: self.id(&v.value),
            mod_revision: v.mod_revision,
        })
    }
}

/// The operation as the search sees it; `None` if it is not a step (never, for the events
/// [`check`] selects from well-formed histories).
fn search_op<'h>(e: &'h Event, effect: Effect, values: &mut Interner<'h>) -> Option<SearchOp> {
    let step = match (effect, &e.op, &e.outcome) {
        (Effect::Applied(revision), Op::Put { value, .. }, _) => Step::Put {
            value: values.id(value),
            revision,
        },
        (Effect::Applied(revision), Op::Delete { .. }, _) => Step::DeleteOne { revision },
        (
            Effect::Applied(revision),
            Op::CompareAndPut {
                expected_mod_revision,
                value,
                ..
            },
            _,
        ) => Step::CasSucceeded {
            expected: *expected_mod_revision,
            value: values.id(value),
            revision,
        },
        (Effect::Acknowledged, Op::Put { value, .. }, Outcome::Put { revision }) => Step::Put {
            value: values.id(value),
            revision: *revision,
        },
        (Effect::Acknowledged, _, Outcome::Delete { revision, deleted }) => match deleted {
            0 => Step::DeleteNone {
                revision: *revision,
            },
            _ => Step::DeleteOne {
                revision: *revision,
            },
        },
        (Effect::Acknowledged, _, Outcome::Get { revision, found }) => Step::Get {
            revision: *revision,
            found: values.version(found),
        },
        (
            Effect::Acknowledged,
            Op::CompareAndPut {
                expected_mod_revision,
                value,
                ..
            },
            Outcome::CompareAndPut {
                revision,
                succeeded,
                current,
            },
        ) => {
            if *succeeded {
                Step::CasSucceeded {
                    expected: *expected_mod_revision,
                    value: values.id(value),
                    revision: *revision,
                }
            } else {
                Step::CasFailed {
                    expected: *expected_mod_revision,
                    revision: *revision,
                    current: values.version(current),
                }
            }
        }
        _ => return None,
    };
    let ret = match effect {
        Effect::Applied(_) => u64::MAX,
        _ => e.return_ns,
    };
    Some(SearchOp {
        call: e.call_ns,
        ret,
        step,
    })
}

/// What each operation depended on, for shrinking: the write of the value it read, the write
/// at the revision it names, and the key's last write at or before the revision it observed.
fn dependencies(ops: &[SearchOp]) -> Vec<Vec<usize>> {
    let mut writes: Vec<(i64, usize)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((o.step.created_revision()?, i)))
        .collect();
    writes.sort_unstable();
    let writer: HashMap<ValueId, usize> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((o.step.written_value()?, i)))
        .collect();
    ops.iter()
        .enumerate()
        .map(|(i, o)| {
            let mut deps = Vec::new();
            if let Some(seen) = o.step.observed_revision() {
                let n = writes.partition_point(|&(r, _)| r <= seen);
                deps.extend(n.checked_sub(1).map(|n| writes[n].1));
            }
            if let Some(named) = o.step.named_revision()
                && let Ok(n) = writes.binary_search_by_key(&named, |&(r, _)| r)
            {
                deps.push(writes[n].1);
            }
            deps.extend(o.step.read_value().and_then(|v| writer.get(&v)));
            deps.retain(|&d| d != i);
            deps
        })
        .collect()
}
