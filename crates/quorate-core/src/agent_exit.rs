//! The exit codes of `quorate agent`: the contract between the agent process and whoever
//! supervises it. Local mode's supervisor restarts an agent that crashed but not one whose
//! member was removed on purpose, and tells the two apart by this code. It lives in core, below
//! both programs, because neither program crate may depend on the other; the agent maps its
//! own end (`AgentExit::code`) onto it and the local runtime reads it.

/// Exit code of `quorate agent` when its member was removed from the cluster.
pub const AGENT_EXIT_REMOVED: u8 = 3;

/// How long a stopping agent (SIGTERM) gives its backup loop to take the last delta snapshot
/// (catch up with etcd, upload what the member captured) before it stops etcd, so a deleted
/// or rescheduled pod's newest writes reach the bucket.
pub const LAST_DELTA_SECONDS: u64 = 10;

/// How long etcd gets to stop on SIGTERM (etcd hands its leadership over and flushes) before
/// the agent kills it.
pub const ETCD_STOP_SECONDS: u64 = 10;

/// What the agent needs beyond the two bounds: closing its clients and the HTTP server and
/// exiting.
pub const EXIT_MARGIN_SECONDS: u64 = 5;

/// The grace a member pod gets between SIGTERM and SIGKILL (`terminationGracePeriodSeconds`):
/// exactly what the agent's stop takes at most, the last delta, etcd's stop and the exit.
pub const fn termination_grace_seconds() -> u64 {
    LAST_DELTA_SECONDS + ETCD_STOP_SECONDS + EXIT_MARGIN_SECONDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pods_grace_covers_every_step_of_the_agents_stop() {
        assert_eq!(termination_grace_seconds(), 25);
        assert!(termination_grace_seconds() > LAST_DELTA_SECONDS + ETCD_STOP_SECONDS);
    }
}
