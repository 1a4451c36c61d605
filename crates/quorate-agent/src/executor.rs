//! The membership executor: the one place the agent observes membership as etcd reports it
//! and carries out membership steps (add a learner, promote, move the leader, remove). The join
//! path, promotion and quorum-loss recovery all go through it, so the planner's decisions are
//! the ones that run.

use crate::metrics::{AgentMetrics, MembershipChange};
use crate::wait::Wait;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::membership::planner::{DesiredMember, ObservedMember, Step};
use quorate_core::membership::recovery::EtcdAnswer;
use quorate_core::membership::{Member, MemberList};
use quorate_etcd::{ClusterClient, EtcdTimeouts, MemberClient, MemberStatus};
use std::time::Duration;

/// Timeouts of the agent's own calls: short, because a member that does not answer within a
/// second is treated as not answering and the question is asked again on the next tick.
pub fn timeouts() -> EtcdTimeouts {
    EtcdTimeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(3),
        ..EtcdTimeouts::default()
    }
}

/// Observes and changes the membership of one cluster on behalf of member `me`.
pub struct Executor<'a> {
    cluster: &'a ClusterConfig,
    me: &'a str,
    metrics: Option<&'a AgentMetrics>,
}

impl<'a> Executor<'a> {
    /// An executor for member `me` of `cluster`.
    pub fn new(cluster: &'a ClusterConfig, me: &'a str) -> Self {
        Executor {
            cluster,
            me,
            metrics: None,
        }
    }

    /// The same executor, recording the membership changes it carries out in `metrics`
    /// (etcd-backup-restore's learner, promote and remove durations).
    pub fn with_metrics(mut self, metrics: &'a AgentMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The client URLs of every desired member except this one and those named in `skip`.
    fn peer_urls(&self, skip: &[&str]) -> Vec<String> {
        self.cluster
            .members
            .iter()
            .filter(|m| m.name != self.me && !skip.contains(&m.name.as_str()))
            .map(|m| m.client_url.clone())
            .collect()
    }

    /// One member's client for `url`.
    pub async fn member_client(&self, url: &str) -> Option<MemberClient> {
        let tls = quorate_etcd::client_tls(self.cluster);
        MemberClient::connect(url, tls.as_ref(), timeouts())
            .await
            .ok()
    }

    /// A client for the cluster-wide calls, over the given URLs.
    async fn cluster_client(&self, urls: &[String]) -> Result<ClusterClient, Wait> {
        let tls = quorate_etcd::client_tls(self.cluster);
        ClusterClient::new(urls, tls.as_ref(), timeouts())
            .await
            .map_err(|e| Wait::new(format!("no member of the cluster answers: {e}")))
    }

    /// The member list as the first other desired member that answers knows it, with its
    /// cluster ID; `None` when none answers.
    pub async fn peers_member_list(&self) -> Option<MemberList> {
        self.peers_member_list_except(&[]).await
    }

    /// [`Self::peers_member_list`], not asking the members named in `skip`.
    pub async fn peers_member_list_except(&self, skip: &[&str]) -> Option<MemberList> {
        for url in self.peer_urls(skip) {
            if let Some(client) = self.member_client(&url).await
                && let Ok(list) = client.member_list_of_cluster().await
            {
                return Some(list);
            }
        }
        None
    }

    /// The member list as the cluster's leader answers it (asked among the other members):
    /// the one list that has applied every committed membership change. `None` when no other
    /// member answers as leader.
    pub async fn leader_member_list(&self) -> Option<MemberList> {
        for url in self.peer_urls(&[]) {
            let Some(client) = self.member_client(&url).await else {
                continue;
            };
            if let Ok(status) = client.status().await
                && status.leader_id == status.member_id
                && status.leader_id != 0
            {
                return client.member_list_of_cluster().await.ok();
            }
        }
        None
    }

    /// What one member's etcd answers about itself now, `None` if it does not.
    pub async fn answer(&self, url: &str) -> Option<MemberStatus> {
        self.member_client(url).await?.status().await.ok()
    }

    /// etcd's view of every listed member for the planner: listed in `list`, healthy when its
    /// etcd answers within `list`'s cluster with a leader.
    pub async fn observe(&self, list: &MemberList) -> Vec<ObservedMember> {
        let mut observed = Vec::with_capacity(list.members.len());
        for member in &list.members {
            let status = match self.url_of(member) {
                Some(url) if member.is_started() => self.answer(&url).await,
                _ => None,
            };
            let healthy = status
                .as_ref()
                .is_some_and(|s| s.cluster_id == list.cluster_id && s.leader_id != 0);
            let is_leader = status
                .as_ref()
                .is_some_and(|s| s.leader_id == s.member_id && s.leader_id != 0);
            observed.push(ObservedMember {
                member: member.clone(),
                healthy,
                is_leader,
            });
        }
        observed
    }

    /// Where to reach a listed member: its advertised client URL, else the desired member's.
    pub fn url_of(&self, member: &Member) -> Option<String> {
        member.client_urls.first().cloned().or_else(|| {
            self.cluster
                .members
                .iter()
                .find(|d| d.name == member.name || member.peer_urls.contains(&d.peer_url))
                .map(|d| d.client_url.clone())
        })
    }

    /// The answers of every listed member, for recovery and rollout decisions.
    pub async fn answers(&self, list: &MemberList) -> Vec<(Member, Option<EtcdAnswer>)> {
        let mut out = Vec::with_capacity(list.members.len());
        for member in &list.members {
            let answer = match self.url_of(member) {
                Some(url) => self.answer(&url).await.map(|s| EtcdAnswer {
                    cluster_id: s.cluster_id,
                    member_id: s.member_id,
                    revision: s.revision,
                    leader_id: s.leader_id,
                }),
                None => None,
            };
            out.push((member.clone(), answer));
        }
        out
    }

    /// The desired members as the planner wants them (leaving members are not).
    pub fn desired(&self) -> Vec<DesiredMember> {
        DesiredMember::of_cluster(self.cluster)
    }

    /// Carries out one membership step through the cluster; returns the member list after it.
    /// etcd's refusals that lift by themselves ("unhealthy cluster", "learner not in sync",
    /// "too many learners") are waits, not failures.
    pub async fn apply(&self, step: &Step) -> Result<Vec<Member>, Wait> {
        let client = self.cluster_client(&self.cluster.client_urls()).await?;
        let started = std::time::Instant::now();
        let result = match step {
            Step::AddLearner { peer_urls, .. } => {
                client.add_learner(peer_urls).await.map(|(_, list)| list)
            }
            Step::Promote { id, .. } => client.promote(*id).await,
            Step::Remove { id, .. } => client.remove(*id).await,
            Step::MoveLeader { to, .. } => client
                .move_leader(to.id)
                .await
                .and(client.member_list().await),
            Step::Wait { reason } => return Err(Wait::new(reason.to_string())),
            Step::Converged => return client.member_list().await.map_err(Wait::from_etcd),
        };
        let change = match step {
            Step::AddLearner { .. } => Some(MembershipChange::AddLearner),
            Step::Promote { .. } => Some(MembershipChange::Promote),
            Step::Remove { .. } => Some(MembershipChange::Remove),
            _ => None,
        };
        if let (Some(metrics), Some(change)) = (self.metrics, change) {
            metrics.membership_change(change, started.elapsed(), result.is_ok());
        }
        match result {
            Ok(list) => {
                tracing::info!(member = %self.me, %step, "membership step done");
                Ok(list)
            }
            Err(e) => Err(Wait::new(format!("{step}: {e}"))),
        }
    }

    /// Removes this member's stale entry `id` after it lost its data.
    pub async fn remove_stale_self(&self, id: u64) -> Result<Vec<Member>, Wait> {
        self.apply(&Step::Remove {
            id,
            name: self.me.to_string(),
            reason: quorate_core::membership::planner::RemoveReason::LostItsData,
        })
        .await
    }
}

/// The URL and client TLS with which member `me`'s agent reaches its own etcd: loopback, not
/// the client URL's DNS name (core `own_client_endpoint`), the certificate still verified
/// against that name.
pub(crate) fn own_etcd(
    cluster: &ClusterConfig,
    me: &str,
) -> (String, Option<quorate_etcd::EtcdTls>) {
    let Some(own) = cluster.own_client_endpoint(me) else {
        return (String::new(), quorate_etcd::client_tls(cluster));
    };
    let tls = quorate_etcd::client_tls(cluster).map(|tls| quorate_etcd::EtcdTls {
        domain_name: own.server_name.clone(),
        ..tls
    });
    (own.url, tls)
}
