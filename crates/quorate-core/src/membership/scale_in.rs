//! Scale-in: the membership steps the cluster's leader carries out for members that leave.
//!
//! A joining member adds and promotes itself, but a leaving member cannot be trusted to remove
//! itself (it may be down, or be the leader). So the current leader's agent asks the planner
//! and carries out only the steps that take a member out: remove an unwanted member (one at a
//! time, highest ordinal first), or hand leadership over first when the leader itself leaves.
//! The leaving member's process stops only after etcd removed it.

use super::planner::{DesiredMember, ObservedMember, RemoveReason, Step, next_step};

/// The planner's next step if it is the leader's to carry out, `None` otherwise (nothing
/// leaves, or the next step belongs to a joining member).
pub fn leader_step(observed: &[ObservedMember], desired: &[DesiredMember]) -> Option<Step> {
    match next_step(&in_leaving_order(observed, desired), desired) {
        step @ (Step::MoveLeader { .. }
        | Step::Remove {
            reason:
                RemoveReason::Unwanted
                | RemoveReason::UnwantedUnhealthy
                | RemoveReason::UnwantedLearner
                | RemoveReason::PeerUrlNeededBy { .. },
            ..
        }) => Some(step),
        step @ Step::Wait { .. } if observed.len() > desired.len() => Some(step),
        _ => None,
    }
}

/// The order the planner looks at members in: the leaving ones first, highest ordinal
/// (`<name>-<i>`) first as a StatefulSet removes them; then the staying ones, lowest ordinal
/// first, so leadership moves to the member least likely to leave next.
fn in_leaving_order(observed: &[ObservedMember], desired: &[DesiredMember]) -> Vec<ObservedMember> {
    let stays = |m: &ObservedMember| desired.iter().any(|d| d.name == m.name);
    let mut sorted = observed.to_vec();
    sorted.sort_by_key(|m| {
        let i = ordinal(&m.name).unwrap_or(u32::MAX);
        if stays(m) { (1, i) } else { (0, u32::MAX - i) }
    });
    sorted
}

fn ordinal(name: &str) -> Option<u32> {
    name.rsplit_once('-').and_then(|(_, i)| i.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::Member;
    use crate::membership::planner::{MemberRef, WaitReason};

    fn member(id: u64, i: u32, leader: bool) -> ObservedMember {
        let name = format!("e-{i}");
        ObservedMember {
            member: Member::new(id, &name, vec![format!("http://{name}:2380")], false),
            healthy: true,
            is_leader: leader,
        }
    }

    fn want(n: u32) -> Vec<DesiredMember> {
        (0..n)
            .map(|i| DesiredMember {
                name: format!("e-{i}"),
                peer_urls: vec![format!("http://e-{i}:2380")],
            })
            .collect()
    }

    fn five(leader: u32) -> Vec<ObservedMember> {
        (0..5)
            .map(|i| member(u64::from(i) + 10, i, i == leader))
            .collect()
    }

    #[test]
    fn the_highest_ordinal_leaves_first() {
        let step = leader_step(&five(0), &want(3)).unwrap();
        assert_eq!(
            step,
            Step::Remove {
                id: 14,
                name: "e-4".into(),
                reason: RemoveReason::Unwanted
            }
        );
    }

    #[test]
    fn a_leaving_leader_hands_over_to_a_member_that_stays() {
        let observed: Vec<_> = five(4).into_iter().filter(|m| m.name != "e-3").collect();
        let step = leader_step(&observed, &want(3)).unwrap();
        match step {
            Step::MoveLeader { from, to } => {
                assert_eq!(
                    from,
                    MemberRef {
                        id: 14,
                        name: "e-4".into()
                    }
                );
                assert_eq!(to.name, "e-0", "the member least likely to leave next");
            }
            other => panic!("expected a leadership move, got {other}"),
        }
    }

    #[test]
    fn nothing_leaving_is_not_the_leaders_business() {
        assert_eq!(leader_step(&five(0), &want(5)), None);
        // A scale-out's next step (adding e-5) belongs to e-5's own agent.
        assert_eq!(leader_step(&five(0), &want(6)), None);
    }

    #[test]
    fn a_blocked_scale_in_says_why() {
        let mut observed = five(0);
        observed[1].healthy = false;
        let step = leader_step(&observed, &want(3)).unwrap();
        assert!(
            matches!(
                step,
                Step::Wait {
                    reason: WaitReason::RemainingMemberUnhealthy { .. }
                }
            ),
            "{step}"
        );
    }
}
