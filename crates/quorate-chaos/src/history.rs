//! What the clients did and saw: every operation with the time it was called, the time it
//! returned and its result. Times are nanoseconds since the run's start (one monotonic clock in
//! one process), so "A returned before B was called" is exact.

use serde::{Deserialize, Serialize};

/// A key's value and the revision that last modified it, as a get or a failed compare shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versioned {
    /// The value.
    pub value: String,
    /// The key's `mod_revision`.
    pub mod_revision: i64,
}

/// One client operation on one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `put key value`; every value written in a run is unique.
    Put { key: String, value: String },
    /// `del key`.
    Delete { key: String },
    /// `get key`, linearizable (the default) or serializable (one member's local view).
    Get { key: String, serializable: bool },
    /// `txn: if mod_revision(key) == expected then put key value else get key`;
    /// `expected == 0` means "the key does not exist".
    CompareAndPut {
        key: String,
        expected_mod_revision: i64,
        value: String,
    },
}

impl Op {
    /// The key the operation touches.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. }
            | Op::Delete { key }
            | Op::Get { key, .. }
            | Op::CompareAndPut { key, .. } => key,
        }
    }

    /// Whether the operation can change the store.
    pub fn writes(&self) -> bool {
        !matches!(self, Op::Get { .. })
    }

    /// The value the operation would write, if any.
    pub fn written_value(&self) -> Option<&str> {
        match self {
            Op::Put { value, .. } | Op::CompareAndPut { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// What etcd answered. `revision` is the response header's revision: for a write that changed
/// the store, the revision it created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The put was acknowledged.
    Put { revision: i64 },
    /// The delete was acknowledged; `deleted` is 0 or 1.
    Delete { revision: i64, deleted: i64 },
    /// The get's answer; `None` for a missing key.
    Get {
        revision: i64,
        found: Option<Versioned>,
    },
    /// The txn's answer: whether the compare held, and otherwise the key as the else branch
    /// read it.
    CompareAndPut {
        revision: i64,
        succeeded: bool,
        current: Option<Versioned>,
    },
    /// No answer (timeout, connection lost, leader change): a write may or may not have
    /// taken effect, at any time after it was called.
    Unknown { error: String },
}

impl Outcome {
    /// The response header's revision, if etcd answered.
    pub fn revision(&self) -> Option<i64> {
        match self {
            Outcome::Put { revision }
            | Outcome::Delete { revision, .. }
            | Outcome::Get { revision, .. }
            | Outcome::CompareAndPut { revision, .. } => Some(*revision),
            Outcome::Unknown { .. } => None,
        }
    }

    /// Whether etcd answered.
    pub fn acknowledged(&self) -> bool {
        !matches!(self, Outcome::Unknown { .. })
    }
}

/// One operation as a client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The client (one sequential stream of operations).
    pub client: u32,
    /// What was asked.
    pub op: Op,
    /// When it was called (ns since the run's start).
    pub call_ns: u64,
    /// When the answer arrived; for [`Outcome::Unknown`], when the client gave up.
    pub return_ns: u64,
    /// What came back.
    pub outcome: Outcome,
}

/// One change a watch delivered, in the order it was delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchChange {
    /// The key.
    pub key: String,
    /// The revision of the change.
    pub mod_revision: i64,
    /// The value put, or `None` for a delete.
    pub value: Option<String>,
}

/// The whole record of a run: what the clients did, and what one watch from revision 1 saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// Every client operation.
    pub events: Vec<Event>,
    /// Every change the run's watcher received, in order (a resumed watch continues the list).
    pub watched: Vec<WatchChange>,
}
