//! Which member pod to replace next when the StatefulSet's pod template changed. The
//! StatefulSet uses `updateStrategy: OnDelete`, so its controller replaces nothing by itself:
//! quorate deletes one outdated pod at a time, as an etcd expert would roll by hand: pods that
//! serve nothing first, then followers in ordinal order, the leader last (etcd hands
//! leadership to a peer, all updated by then, when it stops gracefully), and the next only
//! once every member is ready again. A replaced member that fails to come back stops the
//! rollout, and the rest keep running.

/// One member pod as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPod {
    /// Pod name (= member name).
    pub name: String,
    /// It runs the StatefulSet's update revision.
    pub updated: bool,
    /// The pod is Ready and its member lease says etcd serves with a leader.
    pub ready: bool,
    /// It is being deleted.
    pub terminating: bool,
    /// Its member lease names it the leader.
    pub leader: bool,
    /// Positive evidence that it failed since it started: a container restarted or is
    /// crash-looping, with etcd's or the agent's last word (`None`: nothing failed).
    pub failure: Option<String>,
}

/// What the rollout does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutStep {
    /// No existing pod runs an older template (missing pods are the StatefulSet
    /// controller's to create, from the current one).
    Complete,
    /// Delete this pod; the StatefulSet controller recreates it from the new template.
    Replace {
        /// The pod.
        pod: String,
        /// Why this one now, for the event.
        why: String,
    },
    /// Nothing to do before something changes.
    Wait(String),
    /// A replaced member did not come back: the rollout stops here until it does.
    Stopped {
        /// The pod.
        pod: String,
        /// What went wrong.
        why: String,
    },
}

/// The next step over `pods` (in ordinal order) of a StatefulSet of `replicas`.
pub fn next_step(pods: &[MemberPod], replicas: usize) -> RolloutStep {
    if pods.iter().all(|p| p.updated && !p.terminating) {
        return RolloutStep::Complete;
    }
    if let Some(p) = pods.iter().find(|p| p.terminating) {
        return RolloutStep::Wait(format!("{} is being replaced", p.name));
    }
    if pods.len() < replicas {
        return RolloutStep::Wait(format!(
            "{} of {replicas} member pods exist; waiting for the StatefulSet to create the rest",
            pods.len()
        ));
    }
    if let Some(p) = pods.iter().find(|p| p.updated && !p.ready) {
        return match &p.failure {
            Some(why) => RolloutStep::Stopped {
                pod: p.name.clone(),
                why: format!("{} did not come back after its update: {why}", p.name),
            },
            None => RolloutStep::Wait(format!("{} is starting with the new template", p.name)),
        };
    }
    let outdated = || pods.iter().filter(|p| !p.updated);
    if let Some(p) = outdated().find(|p| !p.ready) {
        return RolloutStep::Replace {
            pod: p.name.clone(),
            why: "it is not ready, so replacing it first costs nothing".into(),
        };
    }
    if let Some(p) = outdated().find(|p| !p.leader) {
        return RolloutStep::Replace {
            pod: p.name.clone(),
            why: "every member is ready; followers go first, in ordinal order".into(),
        };
    }
    match outdated().next() {
        Some(p) => RolloutStep::Replace {
            pod: p.name.clone(),
            why: "the leader goes last; etcd hands leadership to an updated member as it stops"
                .into(),
        },
        None => RolloutStep::Complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(i: usize, updated: bool) -> MemberPod {
        MemberPod {
            name: format!("etcd-main-{i}"),
            updated,
            ready: true,
            terminating: false,
            leader: i == 0,
            failure: None,
        }
    }

    fn replaced(step: RolloutStep) -> String {
        match step {
            RolloutStep::Replace { pod, .. } => pod,
            other => panic!("expected a replacement, got {other:?}"),
        }
    }

    #[test]
    fn followers_go_in_ordinal_order_and_the_leader_last() {
        let mut pods = vec![pod(0, false), pod(1, false), pod(2, false)];
        assert_eq!(replaced(next_step(&pods, 3)), "etcd-main-1");
        pods[1].updated = true;
        assert_eq!(replaced(next_step(&pods, 3)), "etcd-main-2");
        pods[2].updated = true;
        assert_eq!(replaced(next_step(&pods, 3)), "etcd-main-0");
        pods[0].updated = true;
        assert_eq!(next_step(&pods, 3), RolloutStep::Complete);
    }

    #[test]
    fn an_unready_outdated_member_goes_first() {
        let mut pods = vec![pod(0, false), pod(1, false), pod(2, false)];
        pods[2].ready = false;
        assert_eq!(replaced(next_step(&pods, 3)), "etcd-main-2");
    }

    #[test]
    fn one_at_a_time_and_only_once_every_member_is_back() {
        let mut pods = vec![pod(0, false), pod(1, true), pod(2, false)];
        pods[1].terminating = true;
        assert!(
            matches!(next_step(&pods, 3), RolloutStep::Wait(w) if w.contains("etcd-main-1 is being replaced"))
        );
        assert!(
            matches!(next_step(&pods[..2], 3), RolloutStep::Wait(_)),
            "a pod is missing"
        );
        assert_eq!(
            next_step(&[pod(1, true)], 3),
            RolloutStep::Complete,
            "none outdated"
        );
        pods[1].terminating = false;
        pods[1].ready = false;
        assert!(matches!(next_step(&pods, 3), RolloutStep::Wait(w) if w.contains("starting")));
    }

    #[test]
    fn a_replaced_member_that_fails_stops_the_rollout() {
        let mut pods = vec![pod(0, false), pod(1, true), pod(2, false)];
        pods[1].ready = false;
        pods[1].failure = Some("container etcd restarted 3 times".into());
        match next_step(&pods, 3) {
            RolloutStep::Stopped { pod, why } => {
                assert_eq!(pod, "etcd-main-1");
                assert!(why.contains("restarted 3 times"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
