//! Scale-out from one agent's point of view: is it this member's turn to add itself as a
//! learner, to start, or to promote itself? Only the member the planner names acts, so the
//! agents of a scale-out join one at a time instead of racing for etcd's single learner slot.

use super::planner::{
    DesiredMember, ObservedMember, Step, dedup_desired, match_members, next_step,
};

/// What one agent should do about its own membership now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinDecision {
    /// This member is not in the desired set: it must not join (and must not start etcd).
    NotDesired,
    /// It is this member's turn: add itself as a learner with these peer URLs.
    AddSelfAsLearner {
        /// Peer URLs to register, from the desired member.
        peer_urls: Vec<String>,
    },
    /// This member is in etcd's member list but its etcd has never started: start it, joining
    /// the existing cluster (`initial-cluster-state=existing`).
    Start {
        /// The member ID etcd assigned when it was added.
        id: u64,
    },
    /// This member is a healthy learner and the planner promotes it now.
    PromoteSelf {
        /// Its member ID.
        id: u64,
    },
    /// This member is a started voting member: nothing left to join.
    Joined,
    /// Not this member's turn, or the cluster is not ready; `step` says what comes first.
    Wait {
        /// The cluster's next step according to the planner.
        step: Step,
    },
}

/// Tells the agent of member `me` what to do, given etcd's member list and the desired members.
pub fn may_join(observed: &[ObservedMember], desired: &[DesiredMember], me: &str) -> JoinDecision {
    let wanted = dedup_desired(desired);
    let Some(my_index) = wanted.iter().position(|d| d.name == me) else {
        return JoinDecision::NotDesired;
    };
    let matching = match_members(observed, &wanted);
    if let Some(mine) = matching.of_desired[my_index].map(|i| &observed[i]) {
        if !mine.is_started() {
            return JoinDecision::Start { id: mine.id };
        }
        if !mine.is_learner {
            return JoinDecision::Joined;
        }
    }
    match next_step(observed, desired) {
        Step::AddLearner { name, peer_urls } if name == me => {
            JoinDecision::AddSelfAsLearner { peer_urls }
        }
        Step::Promote { id, name } if name == me => JoinDecision::PromoteSelf { id },
        step => JoinDecision::Wait { step },
    }
}

#[cfg(test)]
mod tests {
    use super::super::Member;
    use super::*;
    use crate::membership::planner::WaitReason;

    fn url(name: &str) -> String {
        format!("http://{name}:2380")
    }

    fn member(id: u64, name: &str, is_learner: bool, healthy: bool) -> ObservedMember {
        ObservedMember {
            member: Member::new(id, name, vec![url(name)], is_learner),
            healthy,
            is_leader: id == 1,
        }
    }

    fn unstarted(id: u64, name: &str) -> ObservedMember {
        let mut m = member(id, name, true, false);
        m.name = String::new();
        m
    }

    fn want(names: &[&str]) -> Vec<DesiredMember> {
        names
            .iter()
            .map(|n| DesiredMember {
                name: n.to_string(),
                peer_urls: vec![url(n)],
            })
            .collect()
    }

    #[test]
    fn only_the_first_missing_member_adds_itself() {
        let observed = [member(1, "e-0", false, true)];
        let desired = want(&["e-0", "e-1", "e-2"]);
        assert_eq!(
            may_join(&observed, &desired, "e-1"),
            JoinDecision::AddSelfAsLearner {
                peer_urls: vec![url("e-1")]
            }
        );
        let JoinDecision::Wait { step } = may_join(&observed, &desired, "e-2") else {
            panic!("e-2 must wait for e-1");
        };
        assert_eq!(
            step,
            Step::AddLearner {
                name: "e-1".into(),
                peer_urls: vec![url("e-1")]
            }
        );
    }

    #[test]
    fn an_added_member_starts_its_etcd() {
        let observed = [member(1, "e-0", false, true), unstarted(7, "e-1")];
        let desired = want(&["e-0", "e-1", "e-2"]);
        assert_eq!(
            may_join(&observed, &desired, "e-1"),
            JoinDecision::Start { id: 7 }
        );
        assert_eq!(
            may_join(&observed, &desired, "e-2"),
            JoinDecision::Wait {
                step: Step::Wait {
                    reason: WaitReason::LearnerNotStarted { id: 7 }
                }
            }
        );
    }

    #[test]
    fn a_healthy_learner_promotes_itself_and_an_unhealthy_one_waits() {
        let desired = want(&["e-0", "e-1"]);
        let healthy = [member(1, "e-0", false, true), member(7, "e-1", true, true)];
        assert_eq!(
            may_join(&healthy, &desired, "e-1"),
            JoinDecision::PromoteSelf { id: 7 }
        );
        let lagging = [member(1, "e-0", false, true), member(7, "e-1", true, false)];
        assert!(matches!(
            may_join(&lagging, &desired, "e-1"),
            JoinDecision::Wait {
                step: Step::Wait {
                    reason: WaitReason::LearnerNotHealthy { id: 7, .. }
                }
            }
        ));
    }

    #[test]
    fn a_voter_has_joined_even_when_others_are_still_missing() {
        let observed = [member(1, "e-0", false, true)];
        assert_eq!(
            may_join(&observed, &want(&["e-0", "e-1"]), "e-0"),
            JoinDecision::Joined
        );
    }

    #[test]
    fn a_member_outside_the_desired_set_never_joins() {
        let observed = [member(1, "e-0", false, true)];
        assert_eq!(
            may_join(&observed, &want(&["e-0"]), "e-5"),
            JoinDecision::NotDesired
        );
    }

    #[test]
    fn nobody_joins_without_quorum() {
        let observed = [
            member(1, "e-0", false, false),
            member(2, "e-1", false, true),
        ];
        assert_eq!(
            may_join(&observed, &want(&["e-0", "e-1", "e-2"]), "e-2"),
            JoinDecision::Wait {
                step: Step::Wait {
                    reason: WaitReason::QuorumLost {
                        healthy: 1,
                        voters: 2
                    }
                }
            }
        );
    }
}
