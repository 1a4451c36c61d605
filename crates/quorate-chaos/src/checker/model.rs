//! The sequential specification of one etcd key, as the linearizability search steps it: the
//! key's value and `mod_revision` (absent = `None`), plus the revision of the last operation
//! linearized on it (`floor`). etcd's revisions follow its linearization order, so each
//! operation's header revision must be at least the floor, and above it if the operation created
//! a revision; this is what makes "a put at revision r needs r above the current mod_revision"
//! hold across deletes and reads too.

/// A value, interned per key so that states are small and cheap to compare.
pub(crate) type ValueId = u32;

/// A present key: which value, written at which revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Version {
    /// The value.
    pub(crate) value: ValueId,
    /// The revision that wrote it.
    pub(crate) mod_revision: i64,
}

/// The model's state for one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct KeyState {
    /// The key's value, `None` while absent.
    pub(crate) current: Option<Version>,
    /// The revision of the last operation linearized on the key (0 at the start).
    pub(crate) floor: i64,
}

impl KeyState {
    /// The key's `mod_revision`, 0 while absent (what a compare against "absent" tests).
    fn mod_revision(self) -> i64 {
        self.current.map_or(0, |v| v.mod_revision)
    }
}

/// One operation as the model sees it: what etcd (or, for an applied unknown write, the watch)
/// says it did. Unknown writes that did not apply are not steps at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A put that created `revision`.
    Put { value: ValueId, revision: i64 },
    /// A delete that removed the key at `revision` (`deleted` = 1).
    DeleteOne { revision: i64 },
    /// A delete that found nothing (`deleted` = 0), answered at `revision`.
    DeleteNone { revision: i64 },
    /// A get that answered `found` at `revision`.
    Get {
        revision: i64,
        found: Option<Version>,
    },
    /// A compare-and-put whose compare held and whose put created `revision`.
    CasSucceeded {
        expected: i64,
        value: ValueId,
        revision: i64,
    },
    /// A compare-and-put whose compare failed, its else branch reading `current` at `revision`.
    CasFailed {
        expected: i64,
        revision: i64,
        current: Option<Version>,
    },
}

impl Step {
    /// The state after this step from `s`, or `None` if the step cannot happen there.
    pub(crate) fn apply(self, s: KeyState) -> Option<KeyState> {
        let reads_at = |revision: i64| revision >= s.floor;
        let writes_at = |revision: i64| revision > s.floor;
        let next = |current, floor| Some(KeyState { current, floor });
        match self {
            Step::Put { value, revision } if writes_at(revision) => next(
                Some(Version {
                    value,
                    mod_revision: revision,
                }),
                revision,
            ),
            Step::DeleteOne { revision } if writes_at(revision) && s.current.is_some() => {
                next(None, revision)
            }
            Step::DeleteNone { revision } if reads_at(revision) && s.current.is_none() => {
                next(None, revision)
            }
            Step::Get { revision, found } if reads_at(revision) && found == s.current => {
                next(s.current, revision)
            }
            Step::CasSucceeded {
                expected,
                value,
                revision,
            } if writes_at(revision) && s.mod_revision() == expected => next(
                Some(Version {
                    value,
                    mod_revision: revision,
                }),
                revision,
            ),
            Step::CasFailed {
                expected,
                revision,
                current,
            } if reads_at(revision) && s.mod_revision() != expected && current == s.current => {
                next(s.current, revision)
            }
            _ => None,
        }
    }

    /// The highest floor the key may have when this step is linearized: its revision, or just
    /// below it if it creates the revision. Floors only rise, so a state whose floor is above
    /// the limit of an operation not yet linearized has no future.
    pub(crate) fn floor_limit(self) -> i64 {
        match self.created_revision() {
            Some(revision) => revision - 1,
            None => match self {
                Step::DeleteNone { revision }
                | Step::Get { revision, .. }
                | Step::CasFailed { revision, .. } => revision,
                _ => i64::MAX,
            },
        }
    }

    /// The revision the step created, if it wrote.
    pub(crate) fn created_revision(self) -> Option<i64> {
        match self {
            Step::Put { revision, .. }
            | Step::DeleteOne { revision }
            | Step::CasSucceeded { revision, .. } => Some(revision),
            _ => None,
        }
    }

    /// The revision whose state of the key the step depended on: a read's header revision, or
    /// the revision just before a conditional write's own. `None` for a put, which depends on
    /// nothing.
    pub(crate) fn observed_revision(self) -> Option<i64> {
        match self {
            Step::Put { .. } => None,
            Step::DeleteOne { revision } | Step::CasSucceeded { revision, .. } => {
                Some(revision - 1)
            }
            Step::DeleteNone { revision }
            | Step::Get { revision, .. }
            | Step::CasFailed { revision, .. } => Some(revision),
        }
    }

    /// The write revision the step names explicitly: the `mod_revision` a read returned or a
    /// successful compare expected.
    pub(crate) fn named_revision(self) -> Option<i64> {
        match self {
            Step::Get { found: Some(v), .. }
            | Step::CasFailed {
                current: Some(v), ..
            } => Some(v.mod_revision),
            Step::CasSucceeded { expected, .. } if expected > 0 => Some(expected),
            _ => None,
        }
    }

    /// The value the step wrote, if it wrote one.
    pub(crate) fn written_value(self) -> Option<ValueId> {
        match self {
            Step::Put { value, .. } | Step::CasSucceeded { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The value the step returned, if it read one.
    pub(crate) fn read_value(self) -> Option<ValueId> {
        match self {
            Step::Get { found: Some(v), .. }
            | Step::CasFailed {
                current: Some(v), ..
            } => Some(v.value),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(value: ValueId, mod_revision: i64) -> Option<Version> {
        Some(Version {
            value,
            mod_revision,
        })
    }

    #[test]
    fn steps_follow_etcd() {
        let s0 = KeyState::default();
        let s1 = Step::Put {
            value: 1,
            revision: 5,
        }
        .apply(s0)
        .unwrap();
        assert_eq!(s1.current, at(1, 5));
        // A later write needs a later revision.
        assert!(
            Step::Put {
                value: 2,
                revision: 5
            }
            .apply(s1)
            .is_none()
        );
        // A read at or after the floor sees exactly the state.
        assert!(
            Step::Get {
                revision: 7,
                found: at(1, 5)
            }
            .apply(s1)
            .is_some()
        );
        assert!(
            Step::Get {
                revision: 4,
                found: at(1, 5)
            }
            .apply(s1)
            .is_none()
        );
        assert!(
            Step::Get {
                revision: 7,
                found: None
            }
            .apply(s1)
            .is_none()
        );
        // Compare-and-put: succeeds iff mod_revision matches, fails reporting the state.
        assert!(
            Step::CasSucceeded {
                expected: 5,
                value: 3,
                revision: 6
            }
            .apply(s1)
            .is_some()
        );
        assert!(
            Step::CasSucceeded {
                expected: 0,
                value: 3,
                revision: 6
            }
            .apply(s1)
            .is_none()
        );
        assert!(
            Step::CasFailed {
                expected: 0,
                revision: 6,
                current: at(1, 5)
            }
            .apply(s1)
            .is_some()
        );
        // Deletes: 1 of a present key, 0 of an absent one.
        let s2 = Step::DeleteOne { revision: 6 }.apply(s1).unwrap();
        assert_eq!(s2.current, None);
        assert!(Step::DeleteOne { revision: 7 }.apply(s2).is_none());
        assert!(Step::DeleteNone { revision: 6 }.apply(s2).is_some());
        assert!(Step::DeleteNone { revision: 6 }.apply(s1).is_none());
        assert!(
            Step::CasSucceeded {
                expected: 0,
                value: 4,
                revision: 7
            }
            .apply(s2)
            .is_some()
        );
    }
}
