//! etcd's membership as the leader's agent publishes it on its member lease
//! ([`MEMBERSHIP_ANNOTATION`]), for a controller that does not talk to etcd itself (the
//! operator): which members a scale-in still has to remove, and when a StatefulSet may shrink.
//! Among several leases carrying one (a former leader's may linger), the one from the highest
//! raft term is the newest leader's word: terms only grow, so no clock is needed to tell.

use crate::lease::MemberLease;
use serde::{Deserialize, Serialize};

/// Member lease annotation: the member list as this member, while leading, last read it.
pub const MEMBERSHIP_ANNOTATION: &str = "quorate.io/etcd-members";

/// etcd's member list as a leader read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedMembership {
    /// The cluster ID (hex).
    pub cluster_id: String,
    /// The raft term the publishing member led in.
    pub term: u64,
    /// The started members (a member added but never started has no name yet).
    pub members: Vec<PublishedMember>,
}

/// One member of a [`PublishedMembership`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedMember {
    /// Member name.
    pub name: String,
    /// A non-voting learner.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learner: bool,
}

impl PublishedMembership {
    /// The membership of `list` as read by a leader in raft term `term`.
    pub fn new(list: &super::MemberList, term: u64) -> Self {
        Self {
            cluster_id: format!("{:x}", list.cluster_id),
            term,
            members: list
                .members
                .iter()
                .filter(|m| m.is_started())
                .map(|m| PublishedMember {
                    name: m.name.clone(),
                    learner: m.is_learner,
                })
                .collect(),
        }
    }

    /// The newest leader's word among `leases` (highest term), if any lease carries one.
    pub fn latest(leases: &[MemberLease]) -> Option<Self> {
        leases
            .iter()
            .filter_map(|l| {
                serde_json::from_str::<Self>(l.annotations.get(MEMBERSHIP_ANNOTATION)?).ok()
            })
            .max_by_key(|m| m.term)
    }

    /// Names of every started member.
    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Names of the voting members.
    pub fn voters(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| !m.learner)
            .map(|m| m.name.clone())
            .collect()
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a membership serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::{Member, MemberList};

    fn lease(name: &str, published: Option<&PublishedMembership>) -> MemberLease {
        let mut l = MemberLease::new(name);
        if let Some(p) = published {
            l.annotations
                .insert(MEMBERSHIP_ANNOTATION.into(), p.to_annotation());
        }
        l
    }

    fn list(names: &[&str]) -> MemberList {
        MemberList {
            cluster_id: 0xabc,
            members: names
                .iter()
                .enumerate()
                .map(|(i, n)| Member::new(i as u64 + 1, n, vec![], *n == "e-2"))
                .chain([Member::new(99, "", vec!["http://e-3:2380".into()], true)])
                .collect(),
        }
    }

    #[test]
    fn the_highest_term_wins_whatever_the_lease_order() {
        let old = PublishedMembership::new(&list(&["e-0", "e-1", "e-2"]), 4);
        let new = PublishedMembership::new(&list(&["e-0", "e-1"]), 5);
        let leases = [
            lease("e-0", Some(&new)),
            lease("e-1", Some(&old)),
            lease("e-2", None),
        ];
        assert_eq!(PublishedMembership::latest(&leases), Some(new.clone()));
        let reversed = [lease("e-1", Some(&old)), lease("e-0", Some(&new))];
        assert_eq!(PublishedMembership::latest(&reversed), Some(new));
        assert_eq!(PublishedMembership::latest(&[lease("e-0", None)]), None);
    }

    #[test]
    fn never_started_members_are_left_out_and_learners_are_not_voters() {
        let p = PublishedMembership::new(&list(&["e-0", "e-1", "e-2"]), 1);
        assert_eq!(p.names(), ["e-0", "e-1", "e-2"]);
        assert_eq!(p.voters(), ["e-0", "e-1"]);
        assert_eq!(p.cluster_id, "abc");
    }
}
