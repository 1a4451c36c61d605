//! One-line renderings of operations, outcomes and key states, shared by every anomaly's message
//! so that all of them read the same way.

use std::fmt;

use crate::history::{Op, Outcome, Versioned};

/// An operation as a message shows it: `put k = "v"`, `serializable get k`, ...
pub(crate) struct OpText<'a>(pub(crate) &'a Op);

impl fmt::Display for OpText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Op::Put { key, value } => write!(f, "put {key} = {value:?}"),
            Op::Delete { key } => write!(f, "delete {key}"),
            Op::Get {
                key,
                serializable: false,
            } => write!(f, "get {key}"),
            Op::Get {
                key,
                serializable: true,
            } => write!(f, "serializable get {key}"),
            Op::CompareAndPut {
                key,
                expected_mod_revision,
                value,
            } => write!(
                f,
                "compare-and-put {key}: if mod_revision == {expected_mod_revision} then put {value:?}"
            ),
        }
    }
}

/// An outcome as a message shows it: `ok at revision 7`, `found "v" (mod_revision 5) at
/// revision 9`, `unknown (timeout)`, ...
pub(crate) struct OutcomeText<'a>(pub(crate) &'a Outcome);

impl fmt::Display for OutcomeText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Outcome::Put { revision } => write!(f, "ok at revision {revision}"),
            Outcome::Delete { revision, deleted } => {
                write!(f, "deleted {deleted} at revision {revision}")
            }
            Outcome::Get { revision, found } => {
                write!(f, "{} at revision {revision}", StateText(found.as_ref()))
            }
            Outcome::CompareAndPut {
                revision,
                succeeded: true,
                ..
            } => write!(f, "succeeded at revision {revision}"),
            Outcome::CompareAndPut {
                revision,
                succeeded: false,
                current,
            } => write!(
                f,
                "failed, key {}, at revision {revision}",
                StateText(current.as_ref())
            ),
            Outcome::Unknown { error } => write!(f, "unknown ({error})"),
        }
    }
}

/// A key's state as a message shows it: `"v" (mod_revision 5)` or `absent`.
pub(crate) struct StateText<'a>(pub(crate) Option<&'a Versioned>);

impl fmt::Display for StateText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{:?} (mod_revision {})", v.value, v.mod_revision),
            None => f.write_str("absent"),
        }
    }
}
