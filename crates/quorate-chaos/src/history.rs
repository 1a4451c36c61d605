//! What the clients did and saw: every operation with the time it was called, the time it
//! returned and its result. Times are nanoseconds since the run's start (one monotonic clock in
//! one process), so "A returned before B was called" is exact.

use quorate_core::history_line::{
    HistoryLine, HistoryOp, HistoryOutcome, LeaseLine, OpLine, WatchLine,
};
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
    /// The lease client's operations (checked apart: `crate::leases`).
    pub leases: Vec<LeaseLine>,
}

/// A history file that does not describe a history the suite could have recorded.
#[derive(Debug, thiserror::Error)]
pub enum HistoryFileError {
    /// A line is not JSON of the documented shape.
    #[error(transparent)]
    Line(#[from] quorate_core::history_line::HistoryLineError),
    /// A line is JSON but lacks what its operation needs.
    #[error("history line {line}: {reason}")]
    Incomplete {
        /// 1-based number among the file's non-blank lines.
        line: usize,
        /// What is missing.
        reason: String,
    },
}

impl History {
    /// The history as the lines of a history file (`docs/reference/history-format.md`):
    /// every client operation in the order recorded, then every watched change in delivery
    /// order, then the lease client's operations.
    pub fn to_lines(&self) -> Vec<HistoryLine> {
        let ops = self.events.iter().map(|e| HistoryLine::Op(e.to_line()));
        let watched = self.watched.iter().map(|w| {
            HistoryLine::Watch(WatchLine {
                key: w.key.clone(),
                mod_revision: w.mod_revision,
                value: w.value.clone(),
            })
        });
        let leases = self.leases.iter().cloned().map(HistoryLine::Lease);
        ops.chain(watched).chain(leases).collect()
    }

    /// The history as a history file's text: one JSON object per line.
    pub fn to_jsonl(&self) -> String {
        self.to_lines().iter().map(|l| l.to_json() + "\n").collect()
    }

    /// Reads a history file's text back.
    pub fn from_jsonl(text: &str) -> Result<History, HistoryFileError> {
        let mut history = History::default();
        for (i, line) in HistoryLine::parse_all(text)?.into_iter().enumerate() {
            match line {
                HistoryLine::Op(op) => {
                    history.events.push(Event::from_line(&op).map_err(|reason| {
                        HistoryFileError::Incomplete {
                            line: i + 1,
                            reason,
                        }
                    })?)
                }
                HistoryLine::Watch(w) => history.watched.push(WatchChange {
                    key: w.key,
                    mod_revision: w.mod_revision,
                    value: w.value,
                }),
                HistoryLine::Lease(l) => history.leases.push(l),
            }
        }
        Ok(history)
    }
}

impl Event {
    /// This event as a history file's line.
    pub fn to_line(&self) -> OpLine {
        let mut line = OpLine {
            client: self.client,
            call_ns: self.call_ns,
            return_ns: self.return_ns,
            key: self.op.key().to_owned(),
            value: self.op.written_value().map(str::to_owned),
            ..OpLine::default()
        };
        line.op = match &self.op {
            Op::Put { .. } => HistoryOp::Put,
            Op::Delete { .. } => HistoryOp::Delete,
            Op::Get { serializable, .. } => {
                line.serializable = *serializable;
                HistoryOp::Get
            }
            Op::CompareAndPut {
                expected_mod_revision,
                ..
            } => {
                line.expected_mod_revision = Some(*expected_mod_revision);
                HistoryOp::CompareAndSwap
            }
        };
        line.revision = self.outcome.revision();
        let set_found = |line: &mut OpLine, found: &Option<Versioned>| {
            line.found = Some(found.is_some());
            if let Some(v) = found {
                line.found_value = Some(v.value.clone());
                line.mod_revision = Some(v.mod_revision);
            }
        };
        match &self.outcome {
            Outcome::Put { .. } => {}
            Outcome::Delete { deleted, .. } => line.deleted = Some(*deleted),
            Outcome::Get { found, .. } => set_found(&mut line, found),
            Outcome::CompareAndPut {
                succeeded, current, ..
            } => {
                line.succeeded = Some(*succeeded);
                if !succeeded {
                    set_found(&mut line, current);
                }
            }
            Outcome::Unknown { error } => {
                line.outcome = HistoryOutcome::Unknown;
                line.error = Some(error.clone());
            }
        }
        line
    }

    /// The event a history file's line records; the reason when a field its operation needs
    /// is missing.
    pub fn from_line(line: &OpLine) -> Result<Event, String> {
        let key = line.key.clone();
        let value = || {
            line.value
                .clone()
                .ok_or_else(|| format!("{:?} of {key:?} without \"value\"", line.op))
        };
        let need = |what: &str, v: Option<i64>| {
            v.ok_or_else(|| format!("{:?} of {key:?} without {what:?}", line.op))
        };
        let op = match line.op {
            HistoryOp::Put => Op::Put {
                key: key.clone(),
                value: value()?,
            },
            HistoryOp::Delete => Op::Delete { key: key.clone() },
            HistoryOp::Get => Op::Get {
                key: key.clone(),
                serializable: line.serializable,
            },
            HistoryOp::CompareAndSwap => Op::CompareAndPut {
                key: key.clone(),
                expected_mod_revision: need("expected_mod_revision", line.expected_mod_revision)?,
                value: value()?,
            },
        };
        let found = || -> Result<Option<Versioned>, String> {
            if line.found != Some(true) {
                return Ok(None);
            }
            Ok(Some(Versioned {
                value: line
                    .found_value
                    .clone()
                    .ok_or_else(|| format!("found {key:?} without \"found_value\""))?,
                mod_revision: need("mod_revision", line.mod_revision)?,
            }))
        };
        let outcome = match (line.outcome, &op) {
            (HistoryOutcome::Unknown, _) => Outcome::Unknown {
                error: line.error.clone().unwrap_or_default(),
            },
            (HistoryOutcome::Ok, Op::Put { .. }) => Outcome::Put {
                revision: need("revision", line.revision)?,
            },
            (HistoryOutcome::Ok, Op::Delete { .. }) => Outcome::Delete {
                revision: need("revision", line.revision)?,
                deleted: need("deleted", line.deleted)?,
            },
            (HistoryOutcome::Ok, Op::Get { .. }) => Outcome::Get {
                revision: need("revision", line.revision)?,
                found: found()?,
            },
            (HistoryOutcome::Ok, Op::CompareAndPut { .. }) => {
                let succeeded = line
                    .succeeded
                    .ok_or_else(|| format!("compare_and_swap of {key:?} without \"succeeded\""))?;
                Outcome::CompareAndPut {
                    revision: need("revision", line.revision)?,
                    succeeded,
                    current: if succeeded { None } else { found()? },
                }
            }
        };
        Ok(Event {
            client: line.client,
            op,
            call_ns: line.call_ns,
            return_ns: line.return_ns,
            outcome,
        })
    }
}
