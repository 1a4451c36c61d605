//! Reads against the watch: every answered read (a get, serializable or not; a failed
//! compare-and-put's else branch; a delete that found nothing) must return the key exactly as
//! the watch shows it at the read's own header revision. A serializable get may be stale (its
//! revision old), never wrong; linearizable reads are also held to this, on top of the search.

use super::anomaly::{Anomaly, OpRef};
use super::unknowns::Effect;
use super::watch::WatchIndex;
use crate::history::{History, Outcome};

/// Checks every acknowledged read against the key's state at its revision.
pub(crate) fn check(history: &History, effects: &[Effect], watch: &WatchIndex<'_>) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    for (i, e) in history.events.iter().enumerate() {
        if effects[i] != Effect::Acknowledged {
            continue;
        }
        let (got, revision) = match &e.outcome {
            Outcome::Get { revision, found } => (found.clone(), *revision),
            Outcome::CompareAndPut {
                revision,
                succeeded: false,
                current,
            } => (current.clone(), *revision),
            Outcome::Delete {
                revision,
                deleted: 0,
            } => (None, *revision),
            _ => continue,
        };
        let key = e.op.key();
        let watched = watch.state_at(key, revision);
        if got != watched {
            anomalies.push(Anomaly::ReadMismatch {
                read: OpRef::new(history, i),
                key: key.to_owned(),
                revision,
                got,
                watched,
            });
        }
    }
    anomalies
}
