//! What each operation did, with the unknown writes patched from the watch: an unknown put or
//! compare-and-put applied iff the watch shows its (unique) value on its key, at that revision;
//! an unknown delete applied iff it is needed to account for a watched delete of its key that
//! no acknowledged delete accounts for.
//!
//! Deletes carry no value, so which unknown delete made which unaccounted delete is a choice.
//! A delete could only have made the one at revision r if it was called before some
//! acknowledged operation with a header revision of r or more returned (that operation had
//! seen r; see [`Placement`]); among those still unpaired, the unaccounted deletes of a key, in
//! revision order, each take the one called last. Every delete eligible for r sits the same
//! way against the real-time order (nothing that returned before its call is at r or later),
//! and eligibility only grows with r, so this pairing is rejected by the later checks only if
//! every pairing would be; taking the latest call keeps the never-returning operations the
//! search must carry few. An unknown delete left over either did not apply or found the key
//! absent; both leave no trace, so it is left out like a write that did not apply. A watched
//! delete no unknown delete was called in time for is an [`Anomaly::PhantomDelete`].

use std::collections::{BTreeMap, HashSet};

use super::anomaly::Anomaly;
use super::placement::{Placement, placement};
use super::watch::WatchIndex;
use crate::history::{History, Op, Outcome};

/// What the checker takes an operation to have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// etcd answered: the outcome says what happened.
    Acknowledged,
    /// An unknown write the watch shows applied, at this revision.
    Applied(i64),
    /// An unknown write that did not apply (or, for a delete, left no trace).
    NotApplied,
    /// An unknown read, or a malformed event: nothing to check.
    Ignored,
}

impl Effect {
    /// Whether this is an unknown write (applied or not), for the report's counts.
    pub(crate) fn resolved_unknown(self) -> Option<bool> {
        match self {
            Effect::Applied(_) => Some(true),
            Effect::NotApplied => Some(false),
            _ => None,
        }
    }
}

/// The effect of every event, and the watched deletes nothing accounts for.
pub(crate) struct Resolution {
    /// `effects[i]` is what `history.events[i]` did.
    pub(crate) effects: Vec<Effect>,
    /// [`Anomaly::PhantomDelete`]s.
    pub(crate) anomalies: Vec<Anomaly>,
}

/// Resolves every usable event's effect against the watch.
pub(crate) fn resolve(history: &History, usable: &[bool], watch: &WatchIndex<'_>) -> Resolution {
    let mut effects = Vec::with_capacity(history.events.len());
    // Per key: revisions of acknowledged deletes, and the unknown deletes.
    let mut deletes: BTreeMap<&str, (HashSet<i64>, Vec<usize>)> = BTreeMap::new();
    for (i, e) in history.events.iter().enumerate() {
        let effect = if !usable[i] {
            Effect::Ignored
        } else if e.outcome.acknowledged() {
            if let (Op::Delete { key }, Outcome::Delete { revision, deleted }) = (&e.op, &e.outcome)
                && *deleted == 1
            {
                deletes.entry(key).or_default().0.insert(*revision);
            }
            Effect::Acknowledged
        } else {
            match &e.op {
                Op::Get { .. } => Effect::Ignored,
                Op::Delete { key } => {
                    deletes.entry(key).or_default().1.push(i);
                    Effect::NotApplied
                }
                Op::Put { key, value } | Op::CompareAndPut { key, value, .. } => {
                    match watch.put_of(value) {
                        Some(c) if c.key == *key => Effect::Applied(c.mod_revision),
                        _ => Effect::NotApplied,
                    }
                }
            }
        };
        effects.push(effect);
    }

    let mut anomalies = Vec::new();
    for key in history.watched.iter().map(|c| c.key.as_str()) {
        deletes.entry(key).or_default();
    }
    let seen_by = SeenBy::new(history, &effects);
    for (key, (acknowledged, mut unknown)) in deletes {
        unknown.sort_by_key(|&i| (history.events[i].call_ns, i));
        let mut unknown = unknown.into_iter().peekable();
        let mut eligible = Vec::new();
        for c in watch.deletes_of(key) {
            if acknowledged.contains(&c.mod_revision) {
                continue;
            }
            let deadline = seen_by.deadline(c.mod_revision);
            while let Some(&i) = unknown.peek()
                && history.events[i].call_ns < deadline
            {
                eligible.push(i);
                unknown.next();
            }
            match eligible.pop() {
                Some(i) => effects[i] = Effect::Applied(c.mod_revision),
                None => anomalies.push(Anomaly::PhantomDelete {
                    key: key.to_owned(),
                    revision: c.mod_revision,
                }),
            }
        }
    }
    Resolution { effects, anomalies }
}

/// When each revision had certainly happened: the earliest return of an acknowledged operation
/// whose header revision is at least it.
struct SeenBy {
    /// Acknowledged placed operations' header revisions, ascending, with the earliest return
    /// among those at or above each.
    by_revision: Vec<(i64, u64)>,
}

impl SeenBy {
    fn new(history: &History, effects: &[Effect]) -> Self {
        let mut by_revision: Vec<(i64, u64)> = history
            .events
            .iter()
            .zip(effects)
            .filter(|(_, effect)| **effect == Effect::Acknowledged)
            .filter_map(|(e, &effect)| {
                let Placement { revision, .. } = placement(e, effect)?;
                Some((revision, e.return_ns))
            })
            .collect();
        by_revision.sort_unstable();
        let mut earliest = u64::MAX;
        for entry in by_revision.iter_mut().rev() {
            earliest = earliest.min(entry.1);
            entry.1 = earliest;
        }
        SeenBy { by_revision }
    }

    /// The time by which `revision` had happened (`u64::MAX` if no answer shows it).
    fn deadline(&self, revision: i64) -> u64 {
        let n = self.by_revision.partition_point(|&(r, _)| r < revision);
        self.by_revision.get(n).map_or(u64::MAX, |&(_, t)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Event, WatchChange};

    fn unknown(client: u32, call_ns: u64, op: Op) -> Event {
        Event {
            client,
            op,
            call_ns,
            return_ns: call_ns + 5,
            outcome: Outcome::Unknown {
                error: "timeout".into(),
            },
        }
    }

    fn del(key: &str) -> Op {
        Op::Delete { key: key.into() }
    }

    #[test]
    fn unaccounted_deletes_go_to_the_latest_unknown_delete_called_in_time() {
        let watched = vec![
            WatchChange {
                key: "k".into(),
                mod_revision: 2,
                value: Some("v".into()),
            },
            WatchChange {
                key: "k".into(),
                mod_revision: 3,
                value: None,
            },
            WatchChange {
                key: "k".into(),
                mod_revision: 4,
                value: Some("w".into()),
            },
            WatchChange {
                key: "k".into(),
                mod_revision: 5,
                value: None,
            },
            WatchChange {
                key: "j".into(),
                mod_revision: 6,
                value: None,
            },
        ];
        let history = History {
            leases: Vec::new(),
            events: vec![
                unknown(1, 30, del("k")),
                unknown(2, 10, del("k")),
                unknown(
                    3,
                    0,
                    Op::Put {
                        key: "k".into(),
                        value: "w".into(),
                    },
                ),
                unknown(
                    4,
                    0,
                    Op::Put {
                        key: "k".into(),
                        value: "never".into(),
                    },
                ),
                // Had seen revision 3 by 20: only a delete called before could have made it.
                Event {
                    client: 5,
                    op: Op::Get {
                        key: "k".into(),
                        serializable: false,
                    },
                    call_ns: 15,
                    return_ns: 20,
                    outcome: Outcome::Get {
                        revision: 3,
                        found: None,
                    },
                },
            ],
            watched,
        };
        let watch = WatchIndex::new(&history.watched);
        let resolution = resolve(&history, &[true; 5], &watch);
        assert_eq!(
            resolution.effects,
            vec![
                Effect::Applied(5),
                Effect::Applied(3),
                Effect::Applied(4),
                Effect::NotApplied,
                Effect::Acknowledged,
            ]
        );
        assert_eq!(
            resolution.anomalies,
            vec![Anomaly::PhantomDelete {
                key: "j".into(),
                revision: 6
            }]
        );
    }
}
