//! The watch stream: its own integrity (revisions strictly increasing, each value once, every
//! put written by a client) and an index over it, the ground truth every other check compares
//! against (a complete watch from revision 1: a write not in it did not apply).

use std::collections::HashMap;

use super::anomaly::Anomaly;
use crate::history::{History, Versioned, WatchChange};

/// Lookups into the watched changes: by value, by revision, and each key's changes in revision
/// order (to reconstruct the key at any revision).
pub(crate) struct WatchIndex<'h> {
    changes: &'h [WatchChange],
    by_value: HashMap<&'h str, usize>,
    by_revision: HashMap<i64, usize>,
    by_key: HashMap<&'h str, Vec<usize>>,
}

impl<'h> WatchIndex<'h> {
    /// Indexes `changes`; where a value or revision repeats, its first delivery wins (the
    /// repetition is reported by [`check_stream`]).
    pub(crate) fn new(changes: &'h [WatchChange]) -> Self {
        let mut by_value = HashMap::new();
        let mut by_revision = HashMap::new();
        let mut by_key: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, c) in changes.iter().enumerate() {
            if let Some(v) = &c.value {
                by_value.entry(v.as_str()).or_insert(i);
            }
            by_revision.entry(c.mod_revision).or_insert(i);
            by_key.entry(c.key.as_str()).or_default().push(i);
        }
        for list in by_key.values_mut() {
            list.sort_by_key(|&i| (changes[i].mod_revision, i));
        }
        WatchIndex {
            changes,
            by_value,
            by_revision,
            by_key,
        }
    }

    /// The watched put of `value`, if the watch has one.
    pub(crate) fn put_of(&self, value: &str) -> Option<&'h WatchChange> {
        self.by_value.get(value).map(|&i| &self.changes[i])
    }

    /// The change delivered at `revision`, if any.
    pub(crate) fn at(&self, revision: i64) -> Option<&'h WatchChange> {
        self.by_revision.get(&revision).map(|&i| &self.changes[i])
    }

    /// The watched deletes of `key`, in revision order.
    pub(crate) fn deletes_of(&self, key: &str) -> impl Iterator<Item = &'h WatchChange> + '_ {
        self.by_key
            .get(key)
            .into_iter()
            .flatten()
            .map(|&i| &self.changes[i])
            .filter(|c| c.value.is_none())
    }

    /// `key` as it was at `revision`: its last change at or before it.
    pub(crate) fn state_at(&self, key: &str, revision: i64) -> Option<Versioned> {
        let list = self.by_key.get(key)?;
        let n = list.partition_point(|&i| self.changes[i].mod_revision <= revision);
        let last = &self.changes[*list.get(n.checked_sub(1)?)?];
        last.value.as_ref().map(|value| Versioned {
            value: value.clone(),
            mod_revision: last.mod_revision,
        })
    }
}

/// Checks the stream itself: revisions strictly increase (a repeated one is a duplicate, a lower
/// one out of order), no value appears twice, and every watched put is of a value some client
/// wrote to that key. Gaps are not anomalies: writes outside the workload's prefix consume
/// revisions too; a missing acknowledged write is found by the lost-write check instead.
pub(crate) fn check_stream(history: &History) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    let written_to: HashMap<&str, &str> = history
        .events
        .iter()
        .filter_map(|e| Some((e.op.written_value()?, e.op.key())))
        .collect();
    let mut seen_revision: HashMap<i64, &str> = HashMap::new();
    let mut seen_value: HashMap<&str, i64> = HashMap::new();
    let mut highest = i64::MIN;
    for c in &history.watched {
        if let Some(first_key) = seen_revision.insert(c.mod_revision, &c.key) {
            anomalies.push(Anomaly::DuplicateWatchRevision {
                revision: c.mod_revision,
                first_key: first_key.to_owned(),
                second_key: c.key.clone(),
            });
            continue;
        }
        if c.mod_revision < highest {
            anomalies.push(Anomaly::WatchOutOfOrder {
                key: c.key.clone(),
                revision: c.mod_revision,
                previous_revision: highest,
            });
        }
        highest = highest.max(c.mod_revision);
        let Some(value) = &c.value else { continue };
        if let Some(first_revision) = seen_value.insert(value, c.mod_revision) {
            anomalies.push(Anomaly::DuplicateWrite {
                key: c.key.clone(),
                value: value.clone(),
                first_revision,
                second_revision: c.mod_revision,
            });
        }
        if written_to.get(value.as_str()) != Some(&c.key.as_str()) {
            anomalies.push(Anomaly::PhantomWrite {
                key: c.key.clone(),
                revision: c.mod_revision,
                value: value.clone(),
            });
        }
    }
    anomalies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(key: &str, mod_revision: i64, value: Option<&str>) -> WatchChange {
        WatchChange {
            key: key.into(),
            mod_revision,
            value: value.map(Into::into),
        }
    }

    #[test]
    fn state_at_reconstructs_a_key() {
        let changes = vec![
            change("a", 2, Some("x")),
            change("b", 3, Some("y")),
            change("a", 4, None),
            change("a", 6, Some("z")),
        ];
        let index = WatchIndex::new(&changes);
        let at = |r| index.state_at("a", r).map(|v| (v.value, v.mod_revision));
        assert_eq!(at(1), None);
        assert_eq!(at(3), Some(("x".into(), 2)));
        assert_eq!(at(5), None);
        assert_eq!(at(99), Some(("z".into(), 6)));
        assert_eq!(index.state_at("c", 9), None);
        assert_eq!(index.deletes_of("a").count(), 1);
        assert_eq!(index.at(3).map(|c| c.key.as_str()), Some("b"));
        assert_eq!(index.put_of("z").map(|c| c.mod_revision), Some(6));
    }

    #[test]
    fn out_of_order_and_repeated_changes_are_reported() {
        let history = History {
            leases: Vec::new(),
            events: vec![],
            watched: vec![
                change("a", 5, None),
                change("a", 4, None),
                change("b", 4, None),
            ],
        };
        let anomalies = check_stream(&history);
        assert!(matches!(
            anomalies[0],
            Anomaly::WatchOutOfOrder {
                revision: 4,
                previous_revision: 5,
                ..
            }
        ));
        assert!(matches!(
            anomalies[1],
            Anomaly::DuplicateWatchRevision { revision: 4, .. }
        ));
    }
}
