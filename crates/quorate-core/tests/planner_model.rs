//! Model-based property tests of the membership planner: a simulated etcd cluster (up to 7
//! members, random health, at most one learner) to which the planner's steps are applied one
//! by one, with the safety rules checked after every step.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::sample::subsequence;
use quorate_core::membership::join::{JoinDecision, may_join};
use quorate_core::membership::planner::{
    DesiredMember, ObservedMember, Step, WaitReason, next_step, quorum,
};

const POOL: [&str; 9] = ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"];

fn url(name: &str) -> String {
    format!("https://{name}:2380")
}

#[derive(Clone, Debug)]
struct Member {
    id: u64,
    name: String,
    started: bool,
    learner: bool,
    healthy: bool,
    leader: bool,
}

/// A tiny etcd: membership, learners, health and one leader.
#[derive(Clone, Debug)]
struct Cluster {
    members: Vec<Member>,
    next_id: u64,
}

impl Cluster {
    fn observed(&self) -> Vec<ObservedMember> {
        self.members
            .iter()
            .map(|m| ObservedMember {
                member: quorate_core::membership::Member::new(
                    m.id,
                    if m.started { &m.name } else { "" },
                    vec![url(&m.name)],
                    m.learner,
                ),
                healthy: m.started && m.healthy,
                is_leader: m.leader,
            })
            .collect()
    }

    fn voters(&self) -> usize {
        self.members.iter().filter(|m| !m.learner).count()
    }

    fn healthy_voters(&self) -> usize {
        self.members
            .iter()
            .filter(|m| !m.learner && m.started && m.healthy)
            .count()
    }

    fn learners(&self) -> usize {
        self.members.iter().filter(|m| m.learner).count()
    }

    fn has_quorum(&self) -> bool {
        self.voters() > 0 && self.healthy_voters() >= quorum(self.voters())
    }

    fn by_id(&self, id: u64) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// Raft: without a live leader, a quorum elects a healthy voter; without quorum, nobody leads.
    fn elect(&mut self) {
        let live_leader = self
            .members
            .iter()
            .any(|m| m.leader && m.healthy && m.started && !m.learner);
        if !self.has_quorum() {
            self.members.iter_mut().for_each(|m| m.leader = false);
        } else if !live_leader {
            self.members.iter_mut().for_each(|m| m.leader = false);
            if let Some(m) = self
                .members
                .iter_mut()
                .find(|m| !m.learner && m.started && m.healthy)
            {
                m.leader = true;
            }
        }
    }

    /// Applies a step the way etcd would.
    fn apply(&mut self, step: &Step) {
        match step {
            Step::AddLearner { name, .. } => {
                self.members.push(Member {
                    id: self.next_id,
                    name: name.clone(),
                    started: false,
                    learner: true,
                    healthy: true,
                    leader: false,
                });
                self.next_id += 1;
            }
            Step::Promote { id, .. } => {
                let m = self.members.iter_mut().find(|m| m.id == *id).unwrap();
                m.learner = false;
            }
            Step::Remove { id, .. } => {
                self.members.retain(|m| m.id != *id);
                self.elect();
            }
            Step::MoveLeader { from, to } => {
                for m in &mut self.members {
                    m.leader = m.id == to.id;
                }
                assert_ne!(from.id, to.id);
            }
            Step::Wait { reason } => {
                // The environment makes progress: an added learner's etcd starts.
                if let WaitReason::LearnerNotStarted { id } = reason {
                    let m = self.members.iter_mut().find(|m| m.id == *id).unwrap();
                    m.started = true;
                }
            }
            Step::Converged => {}
        }
    }

    fn names(&self) -> BTreeSet<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }
}

fn desired_of(names: &[String]) -> Vec<DesiredMember> {
    names
        .iter()
        .map(|n| DesiredMember {
            name: n.clone(),
            peer_urls: vec![url(n)],
        })
        .collect()
}

/// Checks the planner's step against the safety rules, before it is applied.
fn check_step(before: &Cluster, step: &Step, desired: &[String]) -> Result<(), TestCaseError> {
    if !before.has_quorum() {
        prop_assert!(
            matches!(step, Step::Wait { .. }),
            "quorum lost but planner said {step}"
        );
    }
    if !step.is_change() {
        return Ok(());
    }
    let mut after = before.clone();
    after.apply(step);
    prop_assert!(
        after.learners() <= 1,
        "{step} leaves {} learners",
        after.learners()
    );
    prop_assert!(
        after.voters() > 0 && after.healthy_voters() >= quorum(after.voters()),
        "{step} leaves {} healthy of {} voters",
        after.healthy_voters(),
        after.voters()
    );
    match step {
        Step::AddLearner { name, peer_urls } => {
            prop_assert!(desired.contains(name));
            prop_assert_eq!(peer_urls, &vec![url(name)]);
            prop_assert!(!before.names().contains(name), "{name} added twice");
            prop_assert_eq!(before.learners(), 0);
        }
        Step::Promote { id, .. } => {
            let m = before.by_id(*id).expect("promoted member exists");
            prop_assert!(m.learner && m.started && m.healthy);
            prop_assert!(desired.contains(&m.name));
        }
        Step::Remove { id, .. } => {
            let m = before.by_id(*id).expect("removed member exists");
            prop_assert!(
                !m.leader,
                "the leader is removed only after leadership moved"
            );
            prop_assert!(!desired.contains(&m.name), "a desired member was removed");
        }
        Step::MoveLeader { from, to } => {
            let f = before.by_id(from.id).expect("leader exists");
            let t = before.by_id(to.id).expect("target exists");
            prop_assert!(f.leader);
            prop_assert!(!desired.contains(&f.name));
            prop_assert!(!t.learner && t.started && t.healthy);
        }
        Step::Wait { .. } | Step::Converged => unreachable!(),
    }
    Ok(())
}

/// A cluster of up to 7 members (at most one learner, possibly never started), random health
/// and a leader when a quorum exists.
fn arb_cluster() -> impl Strategy<Value = Cluster> {
    (
        subsequence(POOL.to_vec(), 1..=7).prop_shuffle(),
        prop::collection::vec(any::<bool>(), 7),
        0u8..3, // 0: no learner, 1: started learner, 2: learner not started yet
    )
        .prop_map(|(names, health, learner_kind)| {
            let n = names.len();
            let mut members: Vec<Member> = names
                .iter()
                .zip(&health)
                .enumerate()
                .map(|(i, (name, healthy))| Member {
                    id: 100 + i as u64,
                    name: name.to_string(),
                    started: true,
                    learner: false,
                    healthy: *healthy,
                    leader: false,
                })
                .collect();
            if n >= 2 && learner_kind > 0 {
                members[n - 1].learner = true;
                members[n - 1].started = learner_kind == 1;
            }
            let mut c = Cluster {
                members,
                next_id: 1000,
            };
            c.elect();
            c
        })
}

fn arb_desired() -> impl Strategy<Value = Vec<String>> {
    subsequence(POOL.to_vec(), 1..=7)
        .prop_shuffle()
        .prop_map(|v| v.into_iter().map(String::from).collect())
}

fn all_healthy(mut c: Cluster) -> Cluster {
    c.members.iter_mut().for_each(|m| m.healthy = true);
    c.elect();
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// With faults injected between steps, no step ever breaks a safety rule.
    #[test]
    fn every_step_is_safe_under_faults(
        mut cluster in arb_cluster(),
        desired in arb_desired(),
        faults in prop::collection::vec(prop::option::of((0usize..8, any::<bool>())), 0..40),
    ) {
        let d = desired_of(&desired);
        for fault in faults {
            let step = next_step(&cluster.observed(), &d);
            check_step(&cluster, &step, &desired)?;
            cluster.apply(&step);
            if let Some((i, healthy)) = fault {
                if !cluster.members.is_empty() {
                    let len = cluster.members.len();
                    cluster.members[i % len].healthy = healthy;
                }
                cluster.elect();
            }
        }
    }

    /// From any state where all members are healthy, the planner reaches exactly the desired
    /// members, all voters, within a bounded number of steps and without waiting for
    /// anything but a learner's start.
    #[test]
    fn converges_to_the_desired_members_when_healthy(
        cluster in arb_cluster(),
        desired in arb_desired(),
    ) {
        let mut cluster = all_healthy(cluster);
        let d = desired_of(&desired);
        // add + start + promote per desired member, move-leader + remove per existing one.
        let bound = 3 * desired.len() + 2 * cluster.members.len() + 2;
        let mut converged = false;
        for _ in 0..bound {
            let step = next_step(&cluster.observed(), &d);
            check_step(&cluster, &step, &desired)?;
            match &step {
                Step::Converged => {
                    converged = true;
                    break;
                }
                Step::Wait { reason: WaitReason::LearnerNotStarted { .. } } => {}
                Step::Wait { reason } => prop_assert!(false, "healthy cluster waits: {reason}"),
                _ => {}
            }
            cluster.apply(&step);
        }
        prop_assert!(converged, "not converged within {bound} steps: {cluster:?}");
        let want: BTreeSet<String> = desired.iter().cloned().collect();
        prop_assert_eq!(cluster.names(), want);
        prop_assert_eq!(cluster.learners(), 0);
        prop_assert!(cluster.members.iter().all(|m| m.started));
        prop_assert_eq!(cluster.members.iter().filter(|m| m.leader).count(), 1);
    }

    /// Without a healthy quorum the planner waits, naming the counts.
    #[test]
    fn quorum_loss_only_waits(cluster in arb_cluster(), desired in arb_desired(), seed in any::<u64>()) {
        let mut cluster = cluster;
        // Take voters down until quorum is lost, starting at a seed-chosen position.
        let n = cluster.members.len();
        let mut k = seed as usize;
        while cluster.has_quorum() {
            let m = &mut cluster.members[k % n];
            if !m.learner {
                m.healthy = false;
            }
            k += 1;
        }
        cluster.elect();
        let step = next_step(&cluster.observed(), &desired_of(&desired));
        prop_assert_eq!(
            step,
            Step::Wait {
                reason: WaitReason::QuorumLost {
                    healthy: cluster.healthy_voters(),
                    voters: cluster.voters(),
                }
            }
        );
    }

    /// Of all the agents, only the one the planner names adds or promotes itself.
    #[test]
    fn only_the_named_agent_acts(cluster in arb_cluster(), desired in arb_desired()) {
        let observed = cluster.observed();
        let d = desired_of(&desired);
        let acting: Vec<&str> = POOL
            .iter()
            .copied()
            .filter(|me| {
                let decision = may_join(&observed, &d, me);
                if !desired.iter().any(|n| n == me) {
                    assert_eq!(decision, JoinDecision::NotDesired);
                }
                matches!(
                    decision,
                    JoinDecision::AddSelfAsLearner { .. } | JoinDecision::PromoteSelf { .. }
                )
            })
            .collect();
        match next_step(&observed, &d) {
            Step::AddLearner { name, .. } | Step::Promote { name, .. } => {
                prop_assert_eq!(acting, vec![name.as_str()]);
            }
            _ => prop_assert!(acting.is_empty(), "{acting:?} act without being named"),
        }
    }
}
