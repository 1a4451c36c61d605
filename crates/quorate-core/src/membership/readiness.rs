//! When a member is ready for client traffic (the pod's readiness, `/healthz`): only when it
//! serves linearizable reads as a voter. A learner answers etcd's status but rejects
//! linearizable reads by design, and a member without a leader serves nothing consistent, so
//! neither may take client traffic: the Service would send clients to a member that fails
//! them.

/// What the agent last saw of its own etcd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadinessEvidence {
    /// etcd answered its status with a leader present.
    pub has_leader: bool,
    /// etcd reports this member as a learner.
    pub is_learner: bool,
    /// A linearizable (quorum) read through this member completed.
    pub linearizable_read: bool,
}

/// Whether the member is ready: a voter with a leader whose linearizable read completed.
pub fn is_ready(evidence: ReadinessEvidence) -> bool {
    evidence.has_leader && !evidence.is_learner && evidence.linearizable_read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_voter_that_reads_linearizably_with_a_leader_is_ready() {
        let ready = ReadinessEvidence {
            has_leader: true,
            is_learner: false,
            linearizable_read: true,
        };
        assert!(is_ready(ready));
        // A learner is not ready, even if a read happened to succeed.
        assert!(!is_ready(ReadinessEvidence {
            is_learner: true,
            ..ready
        }));
        assert!(!is_ready(ReadinessEvidence {
            has_leader: false,
            ..ready
        }));
        assert!(!is_ready(ReadinessEvidence {
            linearizable_read: false,
            ..ready
        }));
        assert!(!is_ready(ReadinessEvidence::default()));
    }
}
