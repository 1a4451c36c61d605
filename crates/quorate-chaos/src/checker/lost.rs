//! Nothing acknowledged is lost: every acknowledged put, successful compare-and-put and delete
//! that deleted a key is in the watch at exactly the revision etcd acknowledged, with its value
//! (or as a delete of its key); a compare-and-put acknowledged as failed is nowhere in it.

use super::anomaly::{Anomaly, OpRef};
use super::unknowns::Effect;
use super::watch::WatchIndex;
use crate::history::{History, Op, Outcome};

/// Checks every acknowledged write against the watch.
pub(crate) fn check(history: &History, effects: &[Effect], watch: &WatchIndex<'_>) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    for (i, e) in history.events.iter().enumerate() {
        if effects[i] != Effect::Acknowledged {
            continue;
        }
        let key = e.op.key();
        // The value the write put (None for a delete), and the revision it created.
        let (value, revision) = match (&e.op, &e.outcome) {
            (Op::Put { value, .. }, Outcome::Put { revision })
            | (
                Op::CompareAndPut { value, .. },
                Outcome::CompareAndPut {
                    revision,
                    succeeded: true,
                    ..
                },
            ) => (Some(value), *revision),
            (Op::Delete { .. }, Outcome::Delete { revision, deleted }) if *deleted == 1 => {
                (None, *revision)
            }
            (
                Op::CompareAndPut { value, .. },
                Outcome::CompareAndPut {
                    succeeded: false, ..
                },
            ) => {
                if let Some(c) = watch.put_of(value)
                    && c.key == key
                {
                    anomalies.push(Anomaly::FailedWriteApplied {
                        write: OpRef::new(history, i),
                        revision: c.mod_revision,
                    });
                }
                continue;
            }
            _ => continue,
        };
        let watched = watch.at(revision);
        if watched.is_some_and(|c| c.key == key && c.value.as_ref() == value) {
            continue;
        }
        anomalies.push(Anomaly::LostWrite {
            write: OpRef::new(history, i),
            revision,
            watched_instead: watched.cloned(),
            value_watched_at: value
                .and_then(|v| watch.put_of(v))
                .map(|c| (c.key.clone(), c.mod_revision)),
        });
    }
    anomalies
}
