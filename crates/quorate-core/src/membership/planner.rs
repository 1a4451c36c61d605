//! The membership planner: given etcd's member list (with health) and the members the spec
//! wants, the one next membership change that is safe to make now.
//!
//! One step at a time, because every membership change must be committed by a quorum before
//! the next one is judged; the caller applies the step, observes again and asks again.
//!
//! Rules, in the order they are tried:
//! 1. no desired members or no voters: wait (bootstrap and hibernation are not membership changes);
//! 2. healthy voters below quorum: wait; no change can be committed without a quorum;
//! 3. a learner that is not wanted: remove it (this frees etcd's single learner slot);
//! 4. a voter that is not wanted and is down: remove it ("remove the failed member before
//!    adding its replacement", etcd FAQ);
//! 5. a wanted learner: promote it once healthy, else wait for it;
//! 6. a wanted member that is missing: add it as a learner (first in desired order), after
//!    removing an unwanted member that holds its peer URL;
//! 7. a voter that is not wanted and healthy: remove it (non-leaders first; the leader hands
//!    leadership to a healthy voter first), but only while every wanted member is healthy:
//!    a scale-in never shrinks a cluster that is already short of a member;
//! 8. otherwise: converged.
//!
//! Every change passes one gate: afterwards there is at least one voter and the healthy
//! voters are at least a quorum (`n/2+1`) of the voters.

use super::Member;
use std::collections::HashSet;
use std::fmt;

/// A member as etcd's member list reports it, plus what the caller observed of its health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedMember {
    /// The member list entry.
    pub member: Member,
    /// Reachable and serving (for a learner: running and following the leader).
    pub healthy: bool,
    /// The current raft leader.
    pub is_leader: bool,
}

impl std::ops::Deref for ObservedMember {
    type Target = Member;

    fn deref(&self) -> &Member {
        &self.member
    }
}

impl std::ops::DerefMut for ObservedMember {
    fn deref_mut(&mut self) -> &mut Member {
        &mut self.member
    }
}

impl ObservedMember {
    /// Healthy in the sense that counts for quorum: a member that never started is never healthy.
    fn counts_healthy(&self) -> bool {
        self.healthy && self.is_started()
    }

    fn member_ref(&self) -> MemberRef {
        MemberRef {
            id: self.id,
            name: self.name.clone(),
        }
    }
}

/// A member the spec wants, identified by name and peer URLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredMember {
    /// Member name (`<etcd>-<i>`).
    pub name: String,
    /// Peer URLs the member will advertise.
    pub peer_urls: Vec<String>,
}

impl DesiredMember {
    /// The desired members of `cluster` as the planner wants them (leaving members are not):
    /// what every agent's turn to join or promote is judged against.
    pub fn of_cluster(cluster: &crate::cluster_config::ClusterConfig) -> Vec<DesiredMember> {
        cluster
            .desired_members()
            .map(|m| DesiredMember {
                name: m.name.clone(),
                peer_urls: vec![m.peer_url.clone()],
            })
            .collect()
    }
}

/// Names one member in a step, by ID (for the etcd call) and name (for people).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRef {
    /// etcd member ID.
    pub id: u64,
    /// Member name; empty for a member that never started.
    pub name: String,
}

impl fmt::Display for MemberRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_member(f, &self.name, self.id)
    }
}

fn write_member(f: &mut fmt::Formatter<'_>, name: &str, id: u64) -> fmt::Result {
    if name.is_empty() {
        write!(f, "never-started member {id:x}")
    } else {
        write!(f, "{name} ({id:x})")
    }
}

/// The one next thing to do about membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Add this member as a learner (`MemberAddAsLearner`); its etcd then starts and joins.
    AddLearner {
        /// Name the new member will start with.
        name: String,
        /// Peer URLs to register.
        peer_urls: Vec<String>,
    },
    /// Promote this learner to a voting member (`MemberPromote`).
    Promote {
        /// etcd member ID of the learner.
        id: u64,
        /// Its name.
        name: String,
    },
    /// Remove this member (`MemberRemove`).
    Remove {
        /// etcd member ID.
        id: u64,
        /// Its name (empty if it never started).
        name: String,
        /// Why it goes.
        reason: RemoveReason,
    },
    /// Hand leadership to another voter (`MoveLeader`) so the leader can be removed next.
    MoveLeader {
        /// The current leader.
        from: MemberRef,
        /// A healthy voter that stays.
        to: MemberRef,
    },
    /// Nothing may be changed now; observe again later.
    Wait {
        /// Why, in terms a person understands.
        reason: WaitReason,
    },
    /// The member list is the desired one; nothing to do.
    ///
    /// This is about membership only: a wanted member may still be unhealthy (restarting it
    /// is not a membership change).
    Converged,
}

impl Step {
    /// Whether applying this step changes membership or leadership.
    pub fn is_change(&self) -> bool {
        !matches!(self, Step::Wait { .. } | Step::Converged)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::AddLearner { name, peer_urls } => {
                write!(f, "add {name} as a learner at {}", peer_urls.join(","))
            }
            Step::Promote { id, name } => {
                f.write_str("promote learner ")?;
                write_member(f, name, *id)
            }
            Step::Remove { id, name, reason } => {
                f.write_str("remove ")?;
                write_member(f, name, *id)?;
                write!(f, ": {reason}")
            }
            Step::MoveLeader { from, to } => {
                write!(f, "move leadership from {from} to {to} before removing it")
            }
            Step::Wait { reason } => write!(f, "wait: {reason}"),
            Step::Converged => f.write_str("membership matches the desired members"),
        }
    }
}

/// Why a member is removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoveReason {
    /// A learner that is not one of the desired members.
    UnwantedLearner,
    /// A voter that is not desired and is down; removed before anything is added.
    UnwantedUnhealthy,
    /// A voter that is not desired (scale-in or replacement).
    Unwanted,
    /// The member's own agent found its data gone: its stale entry goes, and it rejoins as a
    /// learner that gets the data from the leader.
    LostItsData,
    /// Not desired, and it holds the peer URL a desired member needs (etcd rejects duplicates).
    PeerUrlNeededBy {
        /// The desired member waiting for the URL.
        desired: String,
    },
}

impl fmt::Display for RemoveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoveReason::UnwantedLearner => f.write_str("learner is not a desired member"),
            RemoveReason::UnwantedUnhealthy => {
                f.write_str("not a desired member and unhealthy; removed before any addition")
            }
            RemoveReason::Unwanted => f.write_str("not a desired member"),
            RemoveReason::LostItsData => f.write_str(
                "its data is gone; it rejoins as a learner and gets the data from the leader",
            ),
            RemoveReason::PeerUrlNeededBy { desired } => {
                write!(
                    f,
                    "not a desired member and holds the peer URL of {desired}"
                )
            }
        }
    }
}

/// Why nothing may be changed now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// The desired member list is empty (hibernation is handled elsewhere).
    NoDesiredMembers,
    /// etcd reports no voting member at all.
    NoVoters,
    /// Fewer healthy voters than a quorum: no membership change can be committed.
    QuorumLost {
        /// Healthy voters.
        healthy: usize,
        /// All voters.
        voters: usize,
    },
    /// A learner was added but its etcd has not started yet.
    LearnerNotStarted {
        /// Its member ID.
        id: u64,
    },
    /// A learner runs but is not healthy (yet); it is promoted once it is.
    LearnerNotHealthy {
        /// Its member ID.
        id: u64,
        /// Its name.
        name: String,
    },
    /// A healthy member would leave while a member that stays is not healthy.
    RemainingMemberUnhealthy {
        /// The member that would leave.
        leaving: MemberRef,
        /// The first staying member that is not healthy.
        unhealthy: MemberRef,
    },
    /// Removing this member now would leave fewer healthy voters than a quorum.
    RemovalWouldLoseQuorum {
        /// The member that cannot be removed yet.
        member: MemberRef,
        /// Healthy voters after the removal.
        healthy_after: usize,
        /// Voters after the removal.
        voters_after: usize,
    },
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::NoDesiredMembers => f.write_str("no members are desired"),
            WaitReason::NoVoters => f.write_str("etcd reports no voting members"),
            WaitReason::QuorumLost { healthy, voters } => write!(
                f,
                "quorum lost: {healthy} of {voters} voting members are healthy, {} needed; \
                 no membership change is possible until enough members are back",
                quorum(*voters)
            ),
            WaitReason::LearnerNotStarted { id } => {
                write!(f, "learner {id:x} was added but has not started yet")
            }
            WaitReason::LearnerNotHealthy { id, name } => {
                f.write_str("learner ")?;
                write_member(f, name, *id)?;
                f.write_str(" is not healthy yet; it is promoted once it is")
            }
            WaitReason::RemainingMemberUnhealthy { leaving, unhealthy } => write!(
                f,
                "{leaving} leaves only while every member that stays is healthy, and {unhealthy} \
                 is not"
            ),
            WaitReason::RemovalWouldLoseQuorum {
                member,
                healthy_after,
                voters_after,
            } => {
                if *voters_after == 0 {
                    write!(
                        f,
                        "{member} is the last voting member and cannot be removed"
                    )
                } else {
                    write!(
                        f,
                        "removing {member} would leave {healthy_after} healthy of \
                         {voters_after} voting members, below the quorum of {}",
                        quorum(*voters_after)
                    )
                }
            }
        }
    }
}

/// Votes needed to commit anything in a cluster of `voters` voting members.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// Whether a cluster with these counts can still commit: at least one voter and a healthy quorum.
fn keeps_quorum(voters: usize, healthy: usize) -> bool {
    voters > 0 && healthy >= quorum(voters)
}

/// Which observed member is which desired member.
#[derive(Debug)]
pub(crate) struct Matching {
    /// Per desired member (same order), the index of the observed member that is it.
    pub(crate) of_desired: Vec<Option<usize>>,
    /// Whether each observed member (same order) matched a desired one.
    pub(crate) wanted: Vec<bool>,
}

/// Desired members without repeated names; the first occurrence wins.
pub(crate) fn dedup_desired(desired: &[DesiredMember]) -> Vec<&DesiredMember> {
    let mut seen = HashSet::new();
    desired
        .iter()
        .filter(|d| seen.insert(d.name.as_str()))
        .collect()
}

/// Matches by name first, then never-started members by a shared peer URL. Each side
/// matches at most once; a second member with the same name is unwanted.
pub(crate) fn match_members(observed: &[ObservedMember], desired: &[&DesiredMember]) -> Matching {
    let mut of_desired = vec![None; desired.len()];
    let mut wanted = vec![false; observed.len()];
    for (d, slot) in desired.iter().zip(of_desired.iter_mut()) {
        if let Some(i) = (0..observed.len())
            .find(|&i| !wanted[i] && observed[i].is_started() && observed[i].name == d.name)
        {
            wanted[i] = true;
            *slot = Some(i);
        }
    }
    for (d, slot) in desired.iter().zip(of_desired.iter_mut()) {
        if slot.is_some() {
            continue;
        }
        if let Some(i) = (0..observed.len()).find(|&i| {
            !wanted[i]
                && !observed[i].is_started()
                && shares_url(&observed[i].peer_urls, &d.peer_urls)
        }) {
            wanted[i] = true;
            *slot = Some(i);
        }
    }
    Matching { of_desired, wanted }
}

fn shares_url(a: &[String], b: &[String]) -> bool {
    a.iter().any(|u| b.contains(u))
}

/// The one next safe membership step from `observed` toward `desired`. See the module docs
/// for the rules. Pure: the same inputs always give the same step.
pub fn next_step(observed: &[ObservedMember], desired: &[DesiredMember]) -> Step {
    let desired = dedup_desired(desired);
    if desired.is_empty() {
        return wait(WaitReason::NoDesiredMembers);
    }
    let voters = observed.iter().filter(|m| !m.is_learner).count();
    let healthy = observed
        .iter()
        .filter(|m| !m.is_learner && m.counts_healthy())
        .count();
    if voters == 0 {
        return wait(WaitReason::NoVoters);
    }
    if !keeps_quorum(voters, healthy) {
        return wait(WaitReason::QuorumLost { healthy, voters });
    }
    let matching = match_members(observed, &desired);
    let plan = Plan {
        observed,
        matching: &matching,
        voters,
        healthy,
    };
    let unwanted = || (0..observed.len()).filter(|&i| !matching.wanted[i]);

    // 3. Unwanted learners: removing a learner never affects quorum.
    if let Some(i) = unwanted().find(|&i| observed[i].is_learner) {
        return remove(&observed[i], RemoveReason::UnwantedLearner);
    }
    // 4. Unwanted voters that are down go before anything is added.
    if let Some(i) = unwanted().find(|&i| !observed[i].counts_healthy()) {
        return plan.remove_voter(i, RemoveReason::UnwantedUnhealthy);
    }
    // 5. Wanted learners: promote a healthy one, else wait for the first.
    let learners: Vec<&ObservedMember> = observed.iter().filter(|m| m.is_learner).collect();
    if let Some(l) = learners.iter().find(|l| l.counts_healthy()) {
        // Promotion adds a healthy voter: the gate holds whenever quorum holds now; it is
        // checked anyway so that no change bypasses it.
        if keeps_quorum(voters + 1, healthy + 1) {
            return Step::Promote {
                id: l.id,
                name: l.name.clone(),
            };
        }
    }
    if let Some(l) = learners.first() {
        return wait(if l.is_started() {
            WaitReason::LearnerNotHealthy {
                id: l.id,
                name: l.name.clone(),
            }
        } else {
            WaitReason::LearnerNotStarted { id: l.id }
        });
    }
    // 6. The first missing member in desired order, as a learner (none exists at this point).
    if let Some(d) = desired
        .iter()
        .zip(&matching.of_desired)
        .find_map(|(d, m)| m.is_none().then_some(*d))
    {
        if let Some(i) = unwanted().find(|&i| shares_url(&observed[i].peer_urls, &d.peer_urls)) {
            return plan.remove_voter(
                i,
                RemoveReason::PeerUrlNeededBy {
                    desired: d.name.clone(),
                },
            );
        }
        return Step::AddLearner {
            name: d.name.clone(),
            peer_urls: d.peer_urls.clone(),
        };
    }
    // 7. Healthy unwanted voters; non-leaders first so leadership moves at most once, and
    //    only while every member that stays is healthy.
    if let Some(i) = unwanted()
        .find(|&i| !observed[i].is_leader)
        .or_else(|| unwanted().next())
    {
        if let Some(j) =
            (0..observed.len()).find(|&j| matching.wanted[j] && !observed[j].counts_healthy())
        {
            return wait(WaitReason::RemainingMemberUnhealthy {
                leaving: observed[i].member_ref(),
                unhealthy: observed[j].member_ref(),
            });
        }
        return plan.remove_voter(i, RemoveReason::Unwanted);
    }
    Step::Converged
}

/// The counts a removal is judged against.
struct Plan<'a> {
    observed: &'a [ObservedMember],
    matching: &'a Matching,
    voters: usize,
    healthy: usize,
}

impl Plan<'_> {
    /// Removes voter `i` if quorum survives it; a leader first hands leadership over.
    fn remove_voter(&self, i: usize, reason: RemoveReason) -> Step {
        let target = &self.observed[i];
        let voters_after = self.voters - 1;
        let healthy_after = self.healthy - usize::from(target.counts_healthy());
        if !keeps_quorum(voters_after, healthy_after) {
            return wait(WaitReason::RemovalWouldLoseQuorum {
                member: target.member_ref(),
                healthy_after,
                voters_after,
            });
        }
        if target.is_leader {
            // The gate above guarantees another healthy voter exists; prefer one that stays.
            let candidates = || {
                (0..self.observed.len()).filter(|&j| {
                    j != i && !self.observed[j].is_learner && self.observed[j].counts_healthy()
                })
            };
            let to = candidates()
                .find(|&j| self.matching.wanted[j])
                .or_else(|| candidates().next());
            return match to {
                Some(j) => Step::MoveLeader {
                    from: target.member_ref(),
                    to: self.observed[j].member_ref(),
                },
                None => wait(WaitReason::RemovalWouldLoseQuorum {
                    member: target.member_ref(),
                    healthy_after,
                    voters_after,
                }),
            };
        }
        remove(target, reason)
    }
}

fn remove(m: &ObservedMember, reason: RemoveReason) -> Step {
    Step::Remove {
        id: m.id,
        name: m.name.clone(),
        reason,
    }
}

fn wait(reason: WaitReason) -> Step {
    Step::Wait { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(name: &str) -> String {
        format!("https://{name}.peer:2380")
    }

    fn voter(id: u64, name: &str) -> ObservedMember {
        ObservedMember {
            member: Member::new(id, name, vec![url(name)], false),
            healthy: true,
            is_leader: false,
        }
    }

    fn leader(id: u64, name: &str) -> ObservedMember {
        ObservedMember {
            is_leader: true,
            ..voter(id, name)
        }
    }

    fn down(m: ObservedMember) -> ObservedMember {
        ObservedMember {
            healthy: false,
            is_leader: false,
            ..m
        }
    }

    fn learner(id: u64, name: &str) -> ObservedMember {
        let mut m = voter(id, name);
        m.is_learner = true;
        m
    }

    /// A learner that was added for `name` but never started: no name, not healthy.
    fn unstarted_learner(id: u64, name: &str) -> ObservedMember {
        ObservedMember {
            member: Member::new(id, "", vec![url(name)], true),
            healthy: false,
            is_leader: false,
        }
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
    fn quorum_is_a_strict_majority() {
        assert_eq!(
            (1..=7).map(quorum).collect::<Vec<_>>(),
            vec![1, 2, 2, 3, 3, 4, 4]
        );
    }

    #[test]
    fn nothing_desired_waits() {
        let step = next_step(&[leader(1, "a")], &[]);
        assert_eq!(step, wait(WaitReason::NoDesiredMembers));
    }

    #[test]
    fn no_voters_waits() {
        let step = next_step(&[learner(1, "a")], &want(&["a"]));
        assert_eq!(step, wait(WaitReason::NoVoters));
    }

    #[test]
    fn quorum_loss_only_waits_even_when_changes_are_pending() {
        let observed = [leader(1, "a"), down(voter(2, "b")), down(voter(3, "x"))];
        let step = next_step(&observed, &want(&["a", "b", "c"]));
        assert_eq!(
            step,
            wait(WaitReason::QuorumLost {
                healthy: 1,
                voters: 3
            })
        );
        assert!(step.to_string().contains("1 of 3"), "{step}");
    }

    #[test]
    fn two_members_with_one_down_have_lost_quorum() {
        let observed = [leader(1, "a"), down(voter(2, "b"))];
        assert_eq!(
            next_step(&observed, &want(&["a"])),
            wait(WaitReason::QuorumLost {
                healthy: 1,
                voters: 2
            })
        );
    }

    #[test]
    fn a_never_started_voter_does_not_count_as_healthy() {
        let mut ghost = unstarted_learner(2, "b");
        ghost.is_learner = false;
        ghost.healthy = true; // a stale flag must not make it count
        let step = next_step(&[leader(1, "a"), ghost], &want(&["a", "b"]));
        assert_eq!(
            step,
            wait(WaitReason::QuorumLost {
                healthy: 1,
                voters: 2
            })
        );
    }

    #[test]
    fn matching_set_is_converged() {
        let observed = [voter(2, "b"), leader(1, "a"), voter(3, "c")];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "c"])),
            Step::Converged
        );
    }

    #[test]
    fn scale_out_adds_first_missing_member_in_desired_order() {
        let step = next_step(&[leader(1, "e-0")], &want(&["e-0", "e-2", "e-1"]));
        assert_eq!(
            step,
            Step::AddLearner {
                name: "e-2".into(),
                peer_urls: vec![url("e-2")]
            }
        );
    }

    #[test]
    fn added_learner_that_has_not_started_is_waited_for_not_added_again() {
        let observed = [leader(1, "e-0"), unstarted_learner(9, "e-1")];
        assert_eq!(
            next_step(&observed, &want(&["e-0", "e-1", "e-2"])),
            wait(WaitReason::LearnerNotStarted { id: 9 })
        );
    }

    #[test]
    fn healthy_learner_is_promoted_before_the_next_add() {
        let observed = [leader(1, "e-0"), learner(9, "e-1")];
        assert_eq!(
            next_step(&observed, &want(&["e-0", "e-1", "e-2"])),
            Step::Promote {
                id: 9,
                name: "e-1".into()
            }
        );
    }

    #[test]
    fn unhealthy_learner_blocks_further_adds() {
        let observed = [leader(1, "e-0"), down(learner(9, "e-1"))];
        assert_eq!(
            next_step(&observed, &want(&["e-0", "e-1", "e-2"])),
            wait(WaitReason::LearnerNotHealthy {
                id: 9,
                name: "e-1".into()
            })
        );
    }

    #[test]
    fn with_two_learners_the_healthy_one_is_promoted() {
        let observed = [leader(1, "a"), unstarted_learner(2, "b"), learner(3, "c")];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "c"])),
            Step::Promote {
                id: 3,
                name: "c".into()
            }
        );
    }

    #[test]
    fn unwanted_learner_is_removed_first() {
        let observed = [leader(1, "a"), voter(2, "b"), learner(3, "x")];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "c"])),
            Step::Remove {
                id: 3,
                name: "x".into(),
                reason: RemoveReason::UnwantedLearner
            }
        );
    }

    #[test]
    fn never_started_learner_for_an_unwanted_url_is_removed() {
        let observed = [leader(1, "a"), unstarted_learner(3, "x")];
        assert_eq!(
            next_step(&observed, &want(&["a"])),
            Step::Remove {
                id: 3,
                name: String::new(),
                reason: RemoveReason::UnwantedLearner
            }
        );
    }

    #[test]
    fn failed_member_is_removed_before_its_replacement_is_added() {
        let observed = [leader(1, "a"), voter(2, "b"), down(voter(3, "old"))];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "new"])),
            Step::Remove {
                id: 3,
                name: "old".into(),
                reason: RemoveReason::UnwantedUnhealthy
            }
        );
    }

    #[test]
    fn unhealthy_desired_member_is_not_a_reason_to_add() {
        let observed = [leader(1, "a"), voter(2, "b"), down(voter(3, "c"))];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "c"])),
            Step::Converged
        );
    }

    #[test]
    fn healthy_replacement_is_added_before_the_unwanted_member_leaves() {
        let observed = [leader(1, "a"), voter(2, "b"), voter(3, "old")];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "new"])),
            Step::AddLearner {
                name: "new".into(),
                peer_urls: vec![url("new")]
            }
        );
    }

    #[test]
    fn scale_in_removes_a_follower_before_the_leader() {
        let observed = [leader(1, "a"), voter(2, "b"), voter(3, "c")];
        assert_eq!(
            next_step(&observed, &want(&["c"])),
            Step::Remove {
                id: 2,
                name: "b".into(),
                reason: RemoveReason::Unwanted
            }
        );
    }

    #[test]
    fn unwanted_leader_hands_over_to_a_desired_voter_first() {
        let observed = [leader(1, "a"), voter(2, "x"), voter(3, "c")];
        // x goes first (a follower); then the leader must move, to c, not to x.
        let observed_after_x: Vec<_> = observed.iter().filter(|m| m.id != 2).cloned().collect();
        assert_eq!(
            next_step(&observed_after_x, &want(&["c"])),
            Step::MoveLeader {
                from: MemberRef {
                    id: 1,
                    name: "a".into()
                },
                to: MemberRef {
                    id: 3,
                    name: "c".into()
                }
            }
        );
        let only_leader_unwanted = [leader(1, "a"), voter(2, "x"), voter(3, "c")];
        assert_eq!(
            next_step(&only_leader_unwanted, &want(&["x", "c"])),
            Step::MoveLeader {
                from: MemberRef {
                    id: 1,
                    name: "a".into()
                },
                to: MemberRef {
                    id: 2,
                    name: "x".into()
                }
            }
        );
    }

    #[test]
    fn leadership_never_moves_to_an_unhealthy_voter_or_a_learner() {
        let observed = [
            leader(1, "a"),
            voter(2, "b"),
            down(voter(3, "x")),
            voter(4, "d"),
            learner(5, "e"),
        ];
        // The learner e is promoted first in any case.
        assert_eq!(
            next_step(&observed, &want(&["b", "d", "e", "x"])),
            Step::Promote {
                id: 5,
                name: "e".into()
            }
        );
        // x is down and unwanted: it goes first (rule 4), then the leader hands over to a
        // healthy voter that stays, never to the learner or to x.
        let mut promoted = observed.to_vec();
        promoted[4].is_learner = false;
        promoted.remove(2);
        assert_eq!(
            next_step(&promoted, &want(&["d", "e", "b"])),
            Step::MoveLeader {
                from: MemberRef {
                    id: 1,
                    name: "a".into()
                },
                to: MemberRef {
                    id: 2,
                    name: "b".into()
                }
            }
        );
    }

    #[test]
    fn scale_in_waits_while_a_member_that_stays_is_unhealthy() {
        // 3 voters, c (wanted) is down: x (healthy) must not leave, whatever quorum says.
        let observed = [leader(1, "a"), voter(2, "x"), down(voter(3, "c"))];
        let step = next_step(&observed, &want(&["a", "c"]));
        assert_eq!(
            step,
            wait(WaitReason::RemainingMemberUnhealthy {
                leaving: MemberRef {
                    id: 2,
                    name: "x".into()
                },
                unhealthy: MemberRef {
                    id: 3,
                    name: "c".into()
                },
            })
        );
        assert!(step.to_string().contains("c (3) is not"), "{step}");
        // 5 → 3 with one staying member down: quorum would hold, the scale-in still waits.
        let observed = [
            leader(1, "e-0"),
            down(voter(2, "e-1")),
            voter(3, "e-2"),
            voter(4, "e-3"),
            voter(5, "e-4"),
        ];
        assert!(matches!(
            next_step(&observed, &want(&["e-0", "e-1", "e-2"])),
            Step::Wait {
                reason: WaitReason::RemainingMemberUnhealthy { .. }
            }
        ));
    }

    #[test]
    fn a_leaving_member_that_is_down_goes_while_quorum_holds() {
        // 5 → 3 woken from hibernation: e-3 and e-4 never came back; they are removed one at
        // a time, each only while the healthy voters stay a quorum.
        let observed = [
            leader(1, "e-0"),
            voter(2, "e-1"),
            voter(3, "e-2"),
            down(voter(4, "e-3")),
            down(voter(5, "e-4")),
        ];
        assert_eq!(
            next_step(&observed, &want(&["e-0", "e-1", "e-2"])),
            Step::Remove {
                id: 4,
                name: "e-3".into(),
                reason: RemoveReason::UnwantedUnhealthy
            }
        );
    }

    #[test]
    fn member_holding_a_desired_peer_url_is_removed_before_the_add() {
        let mut old = voter(3, "old");
        old.peer_urls = vec![url("c")];
        let observed = [leader(1, "a"), voter(2, "b"), old];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "c"])),
            Step::Remove {
                id: 3,
                name: "old".into(),
                reason: RemoveReason::PeerUrlNeededBy {
                    desired: "c".into()
                }
            }
        );
    }

    #[test]
    fn the_last_voter_is_never_removed() {
        let mut old = leader(1, "old");
        old.peer_urls = vec![url("new")];
        let step = next_step(&[old], &want(&["new"]));
        assert_eq!(
            step,
            wait(WaitReason::RemovalWouldLoseQuorum {
                member: MemberRef {
                    id: 1,
                    name: "old".into()
                },
                healthy_after: 0,
                voters_after: 0
            })
        );
        assert!(step.to_string().contains("last voting member"), "{step}");
    }

    #[test]
    fn never_started_voter_is_matched_by_peer_url() {
        let mut ghost = unstarted_learner(2, "b");
        ghost.is_learner = false;
        let observed = [leader(1, "a"), voter(3, "c"), ghost];
        assert_eq!(
            next_step(&observed, &want(&["a", "b", "c"])),
            Step::Converged
        );
    }

    #[test]
    fn a_second_member_with_a_desired_name_is_unwanted() {
        let observed = [leader(1, "a"), voter(2, "b"), voter(3, "b")];
        assert_eq!(
            next_step(&observed, &want(&["a", "b"])),
            Step::Remove {
                id: 3,
                name: "b".into(),
                reason: RemoveReason::Unwanted
            }
        );
    }

    #[test]
    fn repeated_desired_names_count_once() {
        let observed = [leader(1, "a")];
        assert_eq!(next_step(&observed, &want(&["a", "a"])), Step::Converged);
    }

    #[test]
    fn is_change_separates_actions_from_waiting() {
        assert!(!Step::Converged.is_change());
        assert!(!wait(WaitReason::NoVoters).is_change());
        assert!(
            Step::Promote {
                id: 1,
                name: "a".into()
            }
            .is_change()
        );
    }

    #[test]
    fn steps_read_as_sentences() {
        let s = Step::Remove {
            id: 0xabc,
            name: String::new(),
            reason: RemoveReason::UnwantedLearner,
        };
        assert_eq!(
            s.to_string(),
            "remove never-started member abc: learner is not a desired member"
        );
        let s = Step::MoveLeader {
            from: MemberRef {
                id: 1,
                name: "a".into(),
            },
            to: MemberRef {
                id: 2,
                name: "b".into(),
            },
        };
        assert_eq!(
            s.to_string(),
            "move leadership from a (1) to b (2) before removing it"
        );
    }
}
