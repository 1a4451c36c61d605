//! What a running member does on each probe tick, one module per duty. The probe tick gathers
//! one observation ([`Tick`]); each duty takes it, asks its pure decision in core and acts on
//! the answer; the loop in `member.rs` only schedules the ticks. A new duty is one more module
//! here, fed by the same observation (see docs/architecture.md, "where does a new agent duty
//! go").

pub mod promote;
pub mod scale_in;

use crate::executor::Executor;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::membership::planner::ObservedMember;
use quorate_etcd::MemberStatus;

/// What one probe tick saw, gathered once and handed to every duty that needs it.
pub struct Tick<'a> {
    /// This member's etcd's status answer.
    pub status: &'a MemberStatus,
    /// etcd's view of every listed member (health, leadership), as another member lists them:
    /// read once per tick, and only while this member is a learner (its own etcd does not
    /// answer for the cluster, and only a learner's duty needs it).
    pub membership: Option<Vec<ObservedMember>>,
}

impl<'a> Tick<'a> {
    /// The observation of this tick for member `me`, whose etcd answered `status`.
    pub async fn observe(cluster: &ClusterConfig, me: &str, status: &'a MemberStatus) -> Self {
        let membership = if status.is_learner {
            let executor = Executor::new(cluster, me);
            match executor.peers_member_list().await {
                Some(list) => Some(executor.observe(&list).await),
                None => None,
            }
        } else {
            None
        };
        Tick { status, membership }
    }
}
