//! The checker's findings: each variant is one way a run's history contradicts what etcd
//! promises, and its message names the key, client, revision and value involved, so a failed
//! run can be diagnosed from the report alone.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::render::{OpText, OutcomeText, StateText};
use crate::history::{Event, History, Outcome, Versioned, WatchChange};

/// One client operation as an anomaly cites it, so that the message reads without the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRef {
    /// Its position in [`History::events`], to find it in the recorded history.
    pub index: usize,
    /// The operation as the client recorded it.
    pub event: Event,
    /// For an unknown write the watch shows applied, the revision it applied at (the checker
    /// then treats it as never returning).
    pub applied_revision: Option<i64>,
}

impl OpRef {
    /// Cites `history.events[index]`.
    pub(crate) fn new(history: &History, index: usize) -> Self {
        OpRef {
            index,
            event: history.events[index].clone(),
            applied_revision: None,
        }
    }

    /// Cites `history.events[index]`, an unknown write the watch shows applied at `revision`.
    pub(crate) fn applied(history: &History, index: usize, revision: i64) -> Self {
        OpRef {
            applied_revision: Some(revision),
            ..OpRef::new(history, index)
        }
    }

    /// The revision the operation is placed at: etcd's header revision, or for an applied
    /// unknown write the revision the watch shows.
    pub fn revision(&self) -> Option<i64> {
        self.applied_revision.or(self.event.outcome.revision())
    }

    /// Whether the operation created its revision (an acknowledged put, delete of a present key
    /// or successful compare-and-put, or an applied unknown write), which makes the revisions
    /// around it strictly ordered.
    pub fn created_revision(&self) -> bool {
        self.applied_revision.is_some()
            || matches!(
                self.event.outcome,
                Outcome::Put { .. }
                    | Outcome::Delete { deleted: 1, .. }
                    | Outcome::CompareAndPut {
                        succeeded: true,
                        ..
                    }
            )
    }
}

impl fmt::Display for OpRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.event;
        write!(
            f,
            "client {} [{}..{} ns] {} -> {}",
            e.client,
            e.call_ns,
            e.return_ns,
            OpText(&e.op),
            OutcomeText(&e.outcome)
        )?;
        if let Some(revision) = self.applied_revision {
            write!(f, ", applied at revision {revision} per the watch")?;
        }
        Ok(())
    }
}

/// One way the history contradicts etcd's guarantees (or the recorder's own rules).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Anomaly {
    /// The recorder broke its own rules (an outcome of the wrong kind, a return before the call,
    /// a value written twice, a client running two operations at once): the event cannot be
    /// judged, so it is reported and, unless only its timing is off, left out of the checks.
    MalformedEvent {
        /// The event.
        event: OpRef,
        /// What is wrong with it.
        reason: String,
    },
    /// Two watched changes carry the same revision: with single-key operations every revision
    /// is exactly one change, so the watch repeated or invented one.
    DuplicateWatchRevision {
        /// The revision delivered twice.
        revision: i64,
        /// The key of its first delivery.
        first_key: String,
        /// The key of its second delivery.
        second_key: String,
    },
    /// A watched change's revision is below one delivered before it: a watch delivers in
    /// revision order, so history was reordered or rewritten.
    WatchOutOfOrder {
        /// The key of the late change.
        key: String,
        /// Its revision.
        revision: i64,
        /// The highest revision delivered before it.
        previous_revision: i64,
    },
    /// The watch shows a value put that no client wrote to that key: etcd invented a write.
    PhantomWrite {
        /// The key.
        key: String,
        /// The revision of the watched put.
        revision: i64,
        /// The value nobody wrote there.
        value: String,
    },
    /// The watch shows a delete of a key that no client's delete of that key accounts for: none
    /// acknowledged at that revision, and no unknown one left that was called before the
    /// revision had been seen.
    PhantomDelete {
        /// The key.
        key: String,
        /// The revision of the watched delete.
        revision: i64,
    },
    /// One value appears in two watched changes, though every value is written once: a write
    /// was applied twice.
    DuplicateWrite {
        /// The key of the second appearance.
        key: String,
        /// The value.
        value: String,
        /// The revision it first appeared at.
        first_revision: i64,
        /// The revision it appeared at again.
        second_revision: i64,
    },
    /// An acknowledged write is not in the watch at the revision etcd acknowledged it with: the
    /// cluster lost (or moved) a write it had promised to keep.
    LostWrite {
        /// The acknowledged write.
        write: OpRef,
        /// The revision etcd acknowledged.
        revision: i64,
        /// What the watch has at that revision instead, if anything.
        watched_instead: Option<WatchChange>,
        /// For a put, where the watch shows its value instead (key, revision), if anywhere.
        value_watched_at: Option<(String, i64)>,
    },
    /// A compare-and-put acknowledged as failed, whose value the watch shows written anyway.
    FailedWriteApplied {
        /// The compare-and-put.
        write: OpRef,
        /// The revision the watch shows its value at.
        revision: i64,
    },
    /// A key's operations have no linearization: no single order consistent with real time
    /// explains every answer. `minimal` is a small sub-history that already fails.
    NotLinearizable {
        /// The key.
        key: String,
        /// How many of the key's operations were searched.
        operations: usize,
        /// A minimal failing history, in call order.
        minimal: Vec<OpRef>,
    },
    /// The linearizability search for a key hit its step bound without an answer: the key is
    /// unchecked, which must not pass silently.
    CheckIncomplete {
        /// The key.
        key: String,
        /// How many of the key's operations were searched.
        operations: usize,
        /// The steps taken.
        steps: u64,
    },
    /// `earlier` returned before `later` was called, yet `later`'s revision is below
    /// `earlier`'s (or equal although `later` created a revision): etcd's revision order
    /// contradicts real time.
    RealTimeOrder {
        /// The operation that returned first (the highest revision seen before `later`'s call).
        earlier: OpRef,
        /// The operation called after it.
        later: OpRef,
    },
    /// A client's own consecutive acknowledged operations went back in revision (or a write
    /// did not move it forward).
    ClientOrder {
        /// The client.
        client: u32,
        /// Its operation before.
        earlier: OpRef,
        /// Its next operation.
        later: OpRef,
    },
    /// A read's answer differs from the key's state at the read's own header revision as the
    /// watch shows it: stale reads are fine, answers that never were true at that revision are
    /// not.
    ReadMismatch {
        /// The read (a get, a failed compare-and-put's else branch or a delete that found
        /// nothing).
        read: OpRef,
        /// The key.
        key: String,
        /// The read's header revision.
        revision: i64,
        /// What the read answered.
        got: Option<Versioned>,
        /// The key's state at that revision per the watch.
        watched: Option<Versioned>,
    },
}

impl Anomaly {
    /// Whether this is an acknowledged write the cluster lost, the anomaly the suite counts.
    pub fn is_lost_write(&self) -> bool {
        matches!(self, Anomaly::LostWrite { .. })
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::MalformedEvent { event, reason } => {
                write!(f, "malformed event #{}: {event}: {reason}", event.index)
            }
            Anomaly::DuplicateWatchRevision {
                revision,
                first_key,
                second_key,
            } => write!(
                f,
                "duplicate watch revision: revision {revision} was delivered for key {first_key} \
                 and again for key {second_key}; each revision is one change"
            ),
            Anomaly::WatchOutOfOrder {
                key,
                revision,
                previous_revision,
            } => write!(
                f,
                "watch out of order: key {key} at revision {revision} was delivered after \
                 revision {previous_revision}"
            ),
            Anomaly::PhantomWrite {
                key,
                revision,
                value,
            } => write!(
                f,
                "phantom write: the watch shows {key} = {value:?} at revision {revision}, but no \
                 client wrote that value to {key}"
            ),
            Anomaly::PhantomDelete { key, revision } => write!(
                f,
                "phantom delete: the watch shows {key} deleted at revision {revision}, but no \
                 client's delete of {key} accounts for it"
            ),
            Anomaly::DuplicateWrite {
                key,
                value,
                first_revision,
                second_revision,
            } => write!(
                f,
                "duplicate write: the watch shows {value:?} at revision {first_revision} and \
                 again on {key} at revision {second_revision}; it was written once"
            ),
            Anomaly::LostWrite {
                write,
                revision,
                watched_instead,
                value_watched_at,
            } => {
                write!(
                    f,
                    "lost write: {write} was acknowledged, but the watch has "
                )?;
                match watched_instead {
                    Some(c) => match &c.value {
                        Some(v) => write!(f, "{} = {v:?} at revision {revision} instead", c.key)?,
                        None => write!(f, "a delete of {} at revision {revision} instead", c.key)?,
                    },
                    None => write!(f, "nothing at revision {revision}")?,
                }
                if let Some((key, at)) = value_watched_at {
                    write!(f, "; its value appears on {key} at revision {at}")?;
                }
                Ok(())
            }
            Anomaly::FailedWriteApplied { write, revision } => write!(
                f,
                "failed write applied: {write} was acknowledged as not written, but the watch \
                 shows its value written at revision {revision}"
            ),
            Anomaly::NotLinearizable {
                key,
                operations,
                minimal,
            } => {
                write!(
                    f,
                    "not linearizable: the {operations} operations on {key} have no \
                     linearization; a minimal failing history ({} operations):",
                    minimal.len()
                )?;
                for op in minimal {
                    write!(f, "\n    {op}")?;
                }
                Ok(())
            }
            Anomaly::CheckIncomplete {
                key,
                operations,
                steps,
            } => write!(
                f,
                "check incomplete: the linearizability search over the {operations} operations \
                 on {key} stopped after {steps} steps without an answer; {key} is unchecked"
            ),
            Anomaly::RealTimeOrder { earlier, later } => write!(
                f,
                "real-time order: {earlier} returned before {later} was called, but revision {} \
                 is {} revision {}",
                Rev(later.revision()),
                if later.created_revision() {
                    "not above"
                } else {
                    "below"
                },
                Rev(earlier.revision())
            ),
            Anomaly::ClientOrder {
                client,
                earlier,
                later,
            } => write!(
                f,
                "client order: client {client} went from revision {} to revision {}: {earlier}, \
                 then {later}",
                Rev(earlier.revision()),
                Rev(later.revision())
            ),
            Anomaly::ReadMismatch {
                read,
                key,
                revision,
                got,
                watched,
            } => write!(
                f,
                "wrong read: {read} saw {key} {} at revision {revision}, but the watch has {key} \
                 {} at that revision",
                StateText(got.as_ref()),
                StateText(watched.as_ref())
            ),
        }
    }
}

/// A revision that may be missing (never, for the operations anomalies cite by revision).
struct Rev(Option<i64>);

impl fmt::Display for Rev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(r) => write!(f, "{r}"),
            None => f.write_str("?"),
        }
    }
}
