//! etcd's own view of a local cluster, polled in the background for the status and the
//! supervisor's membership decisions: active alarms (a NOSPACE cluster refuses every write
//! whatever its leases say), voting members etcd lists that never started, and the member list
//! as the leader answers it. The supervisor reads the latest view on each pass without waiting
//! on etcd.

use std::time::Duration;

use quorate_core::cluster_config::ClusterConfig;
use quorate_core::membership::MemberList;
use quorate_core::status::{AlarmKind, EtcdAlarm, UnstartedMember};
use quorate_etcd::{ClusterClient, EtcdError, EtcdTimeouts};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often etcd is asked.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// What etcd last said about the cluster; empty when it could not be asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdView {
    /// Active alarms.
    pub alarms: Vec<EtcdAlarm>,
    /// Voting members listed but never started.
    pub unstarted: Vec<UnstartedMember>,
    /// The member list as the leader answers it; `None` when no leader answered.
    pub leader_list: Option<MemberList>,
}

impl EtcdView {
    /// Names of the started voting members the leader lists.
    pub fn voters(&self) -> Option<Vec<String>> {
        self.leader_list.as_ref().map(|l| {
            l.members
                .iter()
                .filter(|m| m.is_started() && !m.is_learner)
                .map(|m| m.name.clone())
                .collect()
        })
    }

    /// Whether the leader positively lists no member called `name` (`false` without a leader's
    /// word): the one evidence on which a member's process stops and its data goes to the trash.
    pub fn leader_lacks(&self, name: &str) -> bool {
        self.leader_list
            .as_ref()
            .is_some_and(|l| !l.members.is_empty() && !l.members.iter().any(|m| m.name == name))
    }

    /// Names of every started member the leader lists, learners included.
    pub fn started_members(&self) -> Option<Vec<String>> {
        self.leader_list.as_ref().map(|l| {
            l.members
                .iter()
                .filter(|m| m.is_started())
                .map(|m| m.name.clone())
                .collect()
        })
    }
}

/// Asks the members of `config` for alarms and the member list (the first member that answers).
pub async fn observe(config: &ClusterConfig) -> Result<EtcdView, EtcdError> {
    let tls = quorate_etcd::client_tls(config);
    let client =
        ClusterClient::new(&config.client_urls(), tls.as_ref(), EtcdTimeouts::fast()).await?;
    let members = client.member_list().await?;
    // The leader has applied every committed membership change; another member may lag.
    let leader_list = match client.leader().await {
        Ok((leader, _)) => leader.member_list_of_cluster().await.ok(),
        Err(_) => None,
    };
    let mut alarms = None;
    let mut last_error = None;
    for member in client.member_clients() {
        match member.alarms().await {
            Ok(found) => {
                alarms = Some(found);
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let alarms = match (alarms, last_error) {
        (Some(found), _) => found,
        (None, Some(e)) => return Err(e),
        (None, None) => Vec::new(),
    };
    Ok(EtcdView {
        alarms: alarms
            .into_iter()
            .map(|a| EtcdAlarm {
                member_id: a.member_id,
                kind: match a.kind {
                    quorate_etcd::AlarmKind::NoSpace => AlarmKind::NoSpace,
                    quorate_etcd::AlarmKind::Corrupt => AlarmKind::Corrupt,
                },
            })
            .collect(),
        unstarted: members
            .into_iter()
            .filter(|m| !m.is_started() && !m.is_learner)
            .map(|m| UnstartedMember {
                id: m.id,
                peer_urls: m.peer_urls,
            })
            .collect(),
        leader_list,
    })
}

/// A background task keeping the latest [`EtcdView`] of the cluster whose configuration it is
/// given; stopped when dropped.
pub struct EtcdViewPoller {
    config: watch::Sender<Option<ClusterConfig>>,
    view: watch::Receiver<EtcdView>,
    task: JoinHandle<()>,
}

impl EtcdViewPoller {
    /// Starts polling; nothing is asked until [`EtcdViewPoller::set_config`] is called.
    pub fn start() -> Self {
        let (config, mut config_rx) = watch::channel(None::<ClusterConfig>);
        let (view_tx, view) = watch::channel(EtcdView::default());
        let task = tokio::spawn(async move {
            loop {
                let current = config_rx.borrow_and_update().clone();
                if let Some(config) = current {
                    let seen = tokio::time::timeout(POLL_EVERY, observe(&config)).await;
                    // Unreachable etcd says nothing for certain: no alarms, no unstarted members.
                    let seen = match seen {
                        Ok(Ok(view)) => view,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "etcd view unavailable");
                            EtcdView::default()
                        }
                        Err(_) => EtcdView::default(),
                    };
                    view_tx.send_if_modified(|v| {
                        let changed = *v != seen;
                        *v = seen;
                        changed
                    });
                }
                if let Ok(Err(_)) = tokio::time::timeout(POLL_EVERY, config_rx.changed()).await {
                    break;
                }
            }
        });
        Self { config, view, task }
    }

    /// Polls the cluster `config` describes from now on.
    pub fn set_config(&self, config: &ClusterConfig) {
        self.config.send_if_modified(|c| {
            let changed = c.as_ref() != Some(config);
            if changed {
                *c = Some(config.clone());
            }
            changed
        });
    }

    /// The latest view.
    pub fn latest(&self) -> EtcdView {
        self.view.borrow().clone()
    }
}

impl Drop for EtcdViewPoller {
    fn drop(&mut self) {
        self.task.abort();
    }
}
