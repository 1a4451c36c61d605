//! What a running member does while its etcd runs, one module per duty. Each timer of the loop
//! in `member.rs` gathers one observation ([`Seen`]; on the probe tick, with etcd's status
//! answer, a [`Tick`]); each duty takes it, asks its one pure decision in core and acts on the
//! answer; the loop only schedules. A new duty is one more module here, fed by the same
//! observation (see docs/architecture.md, "where does a new agent duty go").

pub mod defrag;
pub mod peer_urls;
pub mod promote;
pub mod quorum;
pub mod rollout;
pub mod scale_in;

use crate::executor::Executor;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::lease::MemberLease;
use quorate_core::member_etcd_config::StartMode;
use quorate_core::membership::planner::ObservedMember;
use quorate_etcd::MemberStatus;
use tokio::sync::OnceCell;

/// Why a duty ends this run of etcd: the loop stops etcd and goes on as it says.
#[derive(Debug)]
pub enum Ending {
    /// The configuration changed and it is this member's turn to restart.
    ConfigChanged,
    /// A quorum-loss recovery dropped this member: its data belongs to the old membership.
    Dropped,
    /// This member recovers the cluster: start next in this mode, without deciding again.
    Recover(StartMode),
    /// This member's data is an older state of the bucket's history: replace it (why).
    BehindBackup(String),
}

/// What the coordination holds for one timer's duties, read at most once and only when a duty
/// asks for it (a read that fails is `None` for every duty of this timer).
pub struct Seen<'a, C> {
    coord: &'a C,
    leases: OnceCell<Option<Vec<MemberLease>>>,
    latest: OnceCell<Option<ClusterConfig>>,
}

impl<'a, C: Coordination> Seen<'a, C> {
    /// Nothing read yet.
    pub fn new(coord: &'a C) -> Self {
        Seen {
            coord,
            leases: OnceCell::new(),
            latest: OnceCell::new(),
        }
    }

    /// Every member lease.
    pub async fn leases(&self) -> Option<&[MemberLease]> {
        self.leases
            .get_or_init(|| async { self.coord.member_leases().await.ok() })
            .await
            .as_deref()
    }

    /// The cluster configuration as the coordination holds it now.
    pub async fn latest(&self) -> Option<&ClusterConfig> {
        self.latest
            .get_or_init(|| async { self.coord.cluster_config().await.ok() })
            .await
            .as_ref()
    }

    /// The coordination itself, for what a duty writes.
    pub fn coord(&self) -> &'a C {
        self.coord
    }
}

/// What one probe tick saw, gathered once and handed to every duty that needs it.
pub struct Tick<'a, C> {
    /// This member's etcd's status answer.
    pub status: &'a MemberStatus,
    /// etcd's view of every listed member (health, leadership), as another member lists them:
    /// read once per tick, and only while this member is a learner (its own etcd does not
    /// answer for the cluster, and only a learner's duty needs it).
    pub membership: Option<Vec<ObservedMember>>,
    /// The coordination's state for this tick.
    pub seen: Seen<'a, C>,
}

impl<'a, C: Coordination> Tick<'a, C> {
    /// The observation of this tick for member `me`, whose etcd answered `status`.
    pub async fn observe(
        coord: &'a C,
        cluster: &ClusterConfig,
        me: &str,
        status: &'a MemberStatus,
    ) -> Self {
        let membership = if status.is_learner {
            let executor = Executor::new(cluster, me);
            match executor.peers_member_list().await {
                Some(list) => Some(executor.observe(&list).await),
                None => None,
            }
        } else {
            None
        };
        Tick {
            status,
            membership,
            seen: Seen::new(coord),
        }
    }
}
