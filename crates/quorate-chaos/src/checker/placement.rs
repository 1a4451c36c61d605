//! Where an operation sits in etcd's single revision order, which real-time and per-client
//! order are checked against: its header revision (for an applied unknown write, the revision
//! the watch shows), and whether it created that revision. Serializable gets have no place:
//! their header revision is one member's, possibly stale.

use super::unknowns::Effect;
use crate::history::{Event, Op, Outcome};

/// An operation's place in the revision order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The revision.
    pub(crate) revision: i64,
    /// Whether the operation created it: then everything before it in real time is strictly
    /// below, not just at or below.
    pub(crate) created: bool,
}

impl Placement {
    /// Whether `self` may come after `earlier` (which finished first, in real time or in a
    /// client's order): not below it, and above it if `self` created its revision.
    pub(crate) fn may_follow(self, earlier: Placement) -> bool {
        if self.created {
            self.revision > earlier.revision
        } else {
            self.revision >= earlier.revision
        }
    }
}

/// The operation's place, if it has one (applied or acknowledged, and not a serializable get).
pub(crate) fn placement(event: &Event, effect: Effect) -> Option<Placement> {
    let place = |revision, created| Some(Placement { revision, created });
    match effect {
        Effect::Applied(revision) => place(revision, true),
        Effect::Acknowledged => match (&event.op, &event.outcome) {
            (
                Op::Get {
                    serializable: true, ..
                },
                _,
            ) => None,
            (_, Outcome::Put { revision }) => place(*revision, true),
            (_, Outcome::Delete { revision, deleted }) => place(*revision, *deleted == 1),
            (_, Outcome::Get { revision, .. }) => place(*revision, false),
            (
                _,
                Outcome::CompareAndPut {
                    revision,
                    succeeded,
                    ..
                },
            ) => place(*revision, *succeeded),
            (_, Outcome::Unknown { .. }) => None,
        },
        Effect::NotApplied | Effect::Ignored => None,
    }
}
