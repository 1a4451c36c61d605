//! The next change to a cluster's StatefulSet. Peer TLS is enabled before the cluster grows
//! (DEP-03): the StatefulSet first gets the TLS mounts at its current size, every running
//! member's agent restarts etcd in place with its https peer URL and reports it on its member
//! lease (`member.etcd.gardener.cloud/tls-enabled`), and only then does the StatefulSet grow.
//! The pod template does not change with the size, so growing restarts nobody: one restart in
//! all where druid needs two.

/// What the controller sees of the StatefulSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedStatefulSet {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready_replicas: i32,
    /// Whether its pod template carries the desired TLS mounts (client and peer).
    pub tls_mounts_match: bool,
}

/// Everything the decision needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatefulSetInputs {
    /// `spec.replicas` of the `Etcd`.
    pub desired_replicas: i32,
    /// Whether the `Etcd` asks for peer TLS.
    pub desired_peer_tls: bool,
    /// The StatefulSet, if it exists.
    pub observed: Option<ObservedStatefulSet>,
    /// The `tls-enabled` annotation of the member leases of ordinals `0..observed.replicas`,
    /// in ordinal order, by lease name (`None`: not reported yet).
    pub member_tls: Vec<(String, Option<bool>)>,
}

/// The one change to make in this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatefulSetStep {
    /// Apply the desired StatefulSet with this many replicas (create it, or bring it to the
    /// desired state). When `replicas` is below the desired count, this pass only changes the
    /// TLS mounts and the next pass waits for the members to report TLS.
    Apply {
        /// Replicas to apply.
        replicas: i32,
    },
    /// Mounts are in place; these members have not yet reported the desired peer TLS state.
    WaitForPeerTls {
        /// Lease names still reporting the other state (or nothing).
        pending: Vec<String>,
    },
    /// The TLS mounts must change but only some pods of a multi-member cluster are ready;
    /// rolling them now could cost quorum.
    WaitForReadyPods {
        /// Ready pods.
        ready: i32,
        /// Pods.
        replicas: i32,
    },
}

/// Decides the next StatefulSet change.
pub fn next_statefulset_step(inputs: &StatefulSetInputs) -> StatefulSetStep {
    let Some(observed) = &inputs.observed else {
        return StatefulSetStep::Apply {
            replicas: inputs.desired_replicas,
        };
    };
    if !observed.tls_mounts_match {
        if observed.replicas > 1 && observed.ready_replicas < observed.replicas {
            return StatefulSetStep::WaitForReadyPods {
                ready: observed.ready_replicas,
                replicas: observed.replicas,
            };
        }
        // Change the mounts at the current size; growing waits until TLS is reported. A
        // hibernated (0) set has nobody to restart, so it wakes at full size.
        let replicas = match observed.replicas {
            0 => inputs.desired_replicas,
            n => n.min(inputs.desired_replicas),
        };
        return StatefulSetStep::Apply { replicas };
    }
    let pending: Vec<String> = inputs
        .member_tls
        .iter()
        .take(observed.replicas.max(0) as usize)
        .filter(|(_, tls)| *tls != Some(inputs.desired_peer_tls))
        .map(|(name, _)| name.clone())
        .collect();
    if !pending.is_empty() && inputs.desired_replicas > observed.replicas {
        return StatefulSetStep::WaitForPeerTls { pending };
    }
    StatefulSetStep::Apply {
        replicas: inputs.desired_replicas,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(states: &[Option<bool>]) -> Vec<(String, Option<bool>)> {
        states
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("main-{i}"), *s))
            .collect()
    }

    fn inputs(
        desired: i32,
        tls: bool,
        observed: Option<(i32, i32, bool)>,
        member_tls: &[Option<bool>],
    ) -> StatefulSetInputs {
        StatefulSetInputs {
            desired_replicas: desired,
            desired_peer_tls: tls,
            observed: observed.map(|(replicas, ready, m)| ObservedStatefulSet {
                replicas,
                ready_replicas: ready,
                tls_mounts_match: m,
            }),
            member_tls: leases(member_tls),
        }
    }

    #[test]
    fn a_missing_statefulset_is_created_at_full_size() {
        assert_eq!(
            next_statefulset_step(&inputs(3, true, None, &[])),
            StatefulSetStep::Apply { replicas: 3 }
        );
    }

    #[test]
    fn tls_then_scale_advances_one_step_per_pass() {
        // 1 member without TLS, asked for 3 with peer TLS: mounts first, at one replica.
        let step = next_statefulset_step(&inputs(3, true, Some((1, 1, false)), &[Some(false)]));
        assert_eq!(step, StatefulSetStep::Apply { replicas: 1 });
        // Mounts in place, member not restarted with https yet: wait.
        let step = next_statefulset_step(&inputs(3, true, Some((1, 1, true)), &[Some(false)]));
        assert_eq!(
            step,
            StatefulSetStep::WaitForPeerTls {
                pending: vec!["main-0".into()]
            }
        );
        // No report yet counts as not done.
        let step = next_statefulset_step(&inputs(3, true, Some((1, 0, true)), &[None]));
        assert!(matches!(step, StatefulSetStep::WaitForPeerTls { .. }));
        // Reported: grow.
        let step = next_statefulset_step(&inputs(3, true, Some((1, 1, true)), &[Some(true)]));
        assert_eq!(step, StatefulSetStep::Apply { replicas: 3 });
    }

    #[test]
    fn only_the_existing_members_must_report_tls() {
        let step = next_statefulset_step(&inputs(
            5,
            true,
            Some((3, 3, true)),
            &[Some(true), Some(true), Some(true), None, None],
        ));
        assert_eq!(step, StatefulSetStep::Apply { replicas: 5 });
    }

    #[test]
    fn mounts_do_not_roll_a_partly_ready_multi_member_cluster() {
        let step = next_statefulset_step(&inputs(3, true, Some((3, 2, false)), &[]));
        assert_eq!(
            step,
            StatefulSetStep::WaitForReadyPods {
                ready: 2,
                replicas: 3
            }
        );
        // A single member is rolled even when not ready: nothing else could lose quorum.
        let step = next_statefulset_step(&inputs(1, true, Some((1, 0, false)), &[]));
        assert_eq!(step, StatefulSetStep::Apply { replicas: 1 });
    }

    #[test]
    fn a_same_size_change_is_applied_without_waiting_for_leases() {
        // Nothing grows, so there is nothing to hold back; the TLS report follows by itself.
        let step = next_statefulset_step(&inputs(3, true, Some((3, 3, true)), &[None, None, None]));
        assert_eq!(step, StatefulSetStep::Apply { replicas: 3 });
    }

    #[test]
    fn a_hibernated_cluster_wakes_at_full_size() {
        let step = next_statefulset_step(&inputs(3, true, Some((0, 0, false)), &[]));
        assert_eq!(step, StatefulSetStep::Apply { replicas: 3 });
    }
}
