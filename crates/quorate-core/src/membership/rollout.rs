//! Quorum-aware rolling restarts. When a change of the cluster configuration needs etcd to
//! restart, every member would notice it at the same moment; restarting them together loses
//! quorum. Each agent publishes the configuration it runs (a hash, on its member lease) and
//! restarts only when it is its turn: followers in ordinal order, the leader last, and only
//! while every other member is up.

use super::planner::MemberRef;
use super::recovery::EtcdAnswer;
use super::turns::{self, Activity, TurnPeer, may_take_turn};
use crate::cluster_config::{ClusterConfig, TlsFiles};
use crate::lease::MemberLease;
use crate::upgrade::{DowngradeEvidence, downgrade_gate, snapshot_gate};
use quorate_api::EtcdVersion;

/// Member-lease annotation carrying the [`rollout_key`] of the configuration the member's etcd
/// runs with.
pub const CONFIG_HASH_ANNOTATION: &str = "quorate.io/etcd-config-hash";

/// Hash of the settings every member shares (etcd flags and TLS file paths), which is what the
/// cluster configuration asks for; the CA digests only the agents know are left out.
/// FNV-1a, so it is the same for every build and platform.
pub fn config_hash(cluster: &ClusterConfig) -> String {
    let without_digest = |tls: &Option<TlsFiles>| {
        tls.clone().map(|t| TlsFiles {
            trusted_ca_digest: None,
            ..t
        })
    };
    let shared = serde_json::json!({
        "etcd": cluster.etcd,
        "etcdVersion": cluster.etcd_version,
        "clientTls": without_digest(&cluster.client_tls),
        "peerTls": without_digest(&cluster.peer_tls),
    });
    content_digest(shared.to_string().as_bytes())
}

/// What a member publishes on its lease and a rollout's turns compare: the [`config_hash`],
/// then `+ca-<digest>` when the agent knows what the CA bundles etcd trusts hold. etcd reads
/// them only at start, so a changed bundle rolls through the members like a changed flag.
pub fn rollout_key(cluster: &ClusterConfig) -> String {
    let digests: Vec<&str> = [&cluster.client_tls, &cluster.peer_tls]
        .into_iter()
        .flatten()
        .filter_map(|t| t.trusted_ca_digest.as_deref())
        .collect();
    let hash = config_hash(cluster);
    if digests.is_empty() {
        hash
    } else {
        format!("{hash}+ca-{}", content_digest(digests.join(",").as_bytes()))
    }
}

/// The [`config_hash`] part of a published [`rollout_key`]: what status compares with the
/// configuration it rendered, which knows no CA content.
pub fn published_config_hash(rollout_key: &str) -> &str {
    rollout_key.split('+').next().unwrap_or_default()
}

/// FNV-1a of `bytes` as 16 hex digits: a change detector, not a security hash.
pub fn content_digest(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// One member as a rollout turn sees it: what etcd answered for it just now and the
/// configuration it published on its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutPeer {
    /// Member name.
    pub name: String,
    /// Its etcd's status answer, `None` when it did not answer.
    pub answer: Option<EtcdAnswer>,
    /// The configuration hash it published (`quorate.io/etcd-config-hash`).
    pub config_hash: Option<String>,
}

impl RolloutPeer {
    /// The members etcd lists (`answers`: each with its etcd's answer, in desired order) with
    /// the configuration their leases publish. A configured member etcd does not list yet (a
    /// pod of a scale-out not started) is nobody's quorum and no one waits for it.
    pub fn from_leases(
        cluster: &ClusterConfig,
        leases: &[MemberLease],
        answers: &[(String, Option<EtcdAnswer>)],
    ) -> Vec<RolloutPeer> {
        let lease_name = |name: &str| {
            cluster
                .member(name)
                .map_or_else(|| name.to_string(), |m| m.lease_name.clone())
        };
        let mut peers: Vec<RolloutPeer> = answers
            .iter()
            .filter(|(name, _)| !name.is_empty())
            .map(|(name, answer)| RolloutPeer {
                name: name.clone(),
                answer: *answer,
                config_hash: leases
                    .iter()
                    .find(|l| l.name == lease_name(name))
                    .and_then(|l| l.annotations.get(CONFIG_HASH_ANNOTATION).cloned()),
            })
            .collect();
        let ordinal = |name: &str| cluster.members.iter().position(|m| m.name == name);
        peers.sort_by_key(|p| ordinal(&p.name).unwrap_or(usize::MAX));
        peers
    }
}

/// What a rollout's turns are about, for the reasons a member waits.
const RESTART: Activity = Activity {
    doing: "restarting",
    done_first: "restarts with the new configuration",
};

fn turn_peers(members: &[RolloutPeer], desired_hash: &str) -> Vec<TurnPeer> {
    members
        .iter()
        .map(|m| TurnPeer {
            name: m.name.clone(),
            answer: m.answer,
            done: m.config_hash.as_deref() == Some(desired_hash),
        })
        .collect()
}

/// Decides whether member `me` may restart now to apply configuration `desired_hash`, from
/// etcd's own view of every member (`members`, in desired order, `me` included): every other
/// member must answer in `me`'s cluster with a leader, and the followers before `me` (ordinal
/// order, the leader last) must already run the new configuration (see [`turns`](super::turns)).
/// `Err` says what it waits for.
pub fn may_restart(me: &str, members: &[RolloutPeer], desired_hash: &str) -> Result<(), String> {
    may_take_turn(me, &turn_peers(members, desired_hash), RESTART)
}

/// When `me` leads and its turn to restart came, the follower leadership moves to first: the
/// first (in desired order) that answers in the same cluster and already runs `desired_hash`,
/// so the new leader is an updated, healthy member and no election waits for a timeout.
/// `None` when `me` does not lead or no such follower exists (a one-member cluster).
pub fn handover_target(
    me: &str,
    members: &[RolloutPeer],
    desired_hash: &str,
) -> Option<(String, u64)> {
    turns::handover_target(me, &turn_peers(members, desired_hash))
}

/// What a member whose etcd must restart for a new configuration observed, gathered once by
/// its rollout duty and judged by [`restart_turn`].
#[derive(Clone, Debug)]
pub struct RestartEvidence<'a> {
    /// This member's name.
    pub me: &'a str,
    /// The etcd version this member runs now.
    pub running: EtcdVersion,
    /// The configuration to restart with.
    pub latest: &'a ClusterConfig,
    /// Every member lease (configuration hashes, final snapshot reports).
    pub leases: &'a [MemberLease],
    /// Every member etcd lists, with its etcd's answer just now.
    pub answers: &'a [(String, Option<EtcdAnswer>)],
    /// This member's etcd's downgrade evidence; read only when `latest` runs an older version
    /// than `running` (`None` otherwise).
    pub downgrade: Option<DowngradeEvidence>,
}

/// What a member whose configuration changed does now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartTurn {
    /// Restart etcd with the new configuration now.
    Restart,
    /// This member leads and its turn came: move leadership to this updated follower first;
    /// the next check restarts it once it no longer leads.
    HandOver(MemberRef),
    /// Not yet; why (a person reads it on the lease).
    Wait(String),
}

/// Whether member `me` may restart now for a new configuration: an upgrade waits for its final
/// snapshot, a downgrade for etcd's downgrade to be enabled and reached, and every restart for
/// its turn (followers in ordinal order, the leader last, handing over first).
pub fn restart_turn(evidence: &RestartEvidence<'_>) -> RestartTurn {
    let latest = evidence.latest;
    if let Err(why) = snapshot_gate(evidence.running, latest, evidence.leases) {
        return RestartTurn::Wait(why);
    }
    if latest.etcd_version < evidence.running {
        let Some(downgrade) = evidence.downgrade else {
            return RestartTurn::Wait("etcd's downgrade state is not known yet".into());
        };
        if let Err(why) = downgrade_gate(evidence.running, latest.etcd_version, downgrade) {
            return RestartTurn::Wait(why);
        }
    }
    let peers = RolloutPeer::from_leases(latest, evidence.leases, evidence.answers);
    let hash = rollout_key(latest);
    if let Err(why) = may_restart(evidence.me, &peers, &hash) {
        return RestartTurn::Wait(why);
    }
    match handover_target(evidence.me, &peers, &hash) {
        Some((name, id)) => RestartTurn::HandOver(MemberRef { id, name }),
        None => RestartTurn::Restart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member_etcd_config::tests::three_members;

    /// etcd-main-0 leads cluster 0xc1 unless a test says otherwise.
    fn peer(i: u64, hash: &str) -> RolloutPeer {
        RolloutPeer {
            name: format!("etcd-main-{i}"),
            answer: Some(EtcdAnswer {
                cluster_id: 0xc1,
                member_id: i + 1,
                revision: 10,
                leader_id: 1,
            }),
            config_hash: Some(hash.into()),
        }
    }

    #[test]
    fn a_new_ca_bundle_changes_the_rollout_key_but_not_the_configuration_hash() {
        let mut cluster = three_members();
        let plain = rollout_key(&cluster);
        assert_eq!(plain, config_hash(&cluster));
        cluster.peer_tls = Some(TlsFiles {
            ca_file: "/ca".into(),
            cert_file: "/crt".into(),
            key_file: "/key".into(),
            client_cert_file: None,
            client_key_file: None,
            trusted_ca_digest: None,
        });
        let unread = rollout_key(&cluster);
        let hash = config_hash(&cluster);
        assert_eq!(unread, hash, "no digest known: the key is the hash");
        let with_ca = |digest: &str| {
            let mut c = cluster.clone();
            c.peer_tls.as_mut().unwrap().trusted_ca_digest = Some(digest.into());
            c
        };
        let (old, bundle) = (with_ca("old"), with_ca("old+new"));
        assert_eq!(config_hash(&old), hash);
        assert_eq!(config_hash(&bundle), hash);
        assert_ne!(rollout_key(&old), rollout_key(&bundle));
        assert_eq!(published_config_hash(&rollout_key(&bundle)), hash);
        assert_eq!(published_config_hash(&hash), hash);
    }

    #[test]
    fn followers_restart_in_order_and_the_leader_last() {
        let view = [peer(0, "old"), peer(1, "old"), peer(2, "old")];
        assert_eq!(may_restart("etcd-main-1", &view, "new"), Ok(()));
        assert!(may_restart("etcd-main-2", &view, "new").is_err());
        assert!(may_restart("etcd-main-0", &view, "new").is_err());

        let view = [peer(0, "old"), peer(1, "new"), peer(2, "old")];
        assert_eq!(may_restart("etcd-main-2", &view, "new"), Ok(()));
        assert!(may_restart("etcd-main-0", &view, "new").is_err());

        let view = [peer(0, "old"), peer(1, "new"), peer(2, "new")];
        assert_eq!(may_restart("etcd-main-0", &view, "new"), Ok(()));
    }

    #[test]
    fn the_leader_hands_over_to_an_updated_follower_first() {
        let view = [peer(0, "old"), peer(1, "new"), peer(2, "new")];
        assert_eq!(
            handover_target("etcd-main-0", &view, "new"),
            Some(("etcd-main-1".to_string(), 2))
        );
        assert_eq!(
            handover_target("etcd-main-1", &view, "new"),
            None,
            "not the leader"
        );
        let view = [peer(0, "old"), peer(1, "old"), peer(2, "new")];
        assert_eq!(
            handover_target("etcd-main-0", &view, "new"),
            Some(("etcd-main-2".to_string(), 3))
        );
        assert_eq!(
            handover_target("etcd-main-0", &[peer(0, "old")], "new"),
            None
        );
    }

    /// A crashed peer's lease stays fresh for a few heartbeats; its etcd does not answer. The
    /// turn must go by the answer (issue 12, defect 5).
    #[test]
    fn nobody_restarts_while_another_members_etcd_does_not_answer() {
        let mut view = [peer(0, "old"), peer(1, "old"), peer(2, "old")];
        view[2].answer = None;
        let err = may_restart("etcd-main-1", &view, "new").unwrap_err();
        assert!(err.contains("etcd-main-2 does not answer"), "{err}");
        view[2] = peer(2, "old");
        view[2].answer.as_mut().unwrap().leader_id = 0;
        assert!(
            may_restart("etcd-main-1", &view, "new").is_err(),
            "no leader"
        );
        view[2] = peer(2, "old");
        view[2].answer.as_mut().unwrap().cluster_id = 0xf0;
        let err = may_restart("etcd-main-1", &view, "new").unwrap_err();
        assert!(err.contains("cluster f0"), "{err}");
    }

    /// Regression (e2e s2): a one-member cluster asked for peer TLS and three members at once
    /// waited for members 1 and 2, which did not exist yet, before restarting member 0.
    #[test]
    fn configured_members_etcd_does_not_list_are_not_waited_for() {
        let cluster = three_members();
        let answer = EtcdAnswer {
            cluster_id: 0xc1,
            member_id: 1,
            revision: 10,
            leader_id: 1,
        };
        let answers = [("etcd-main-0".to_string(), Some(answer))];
        let peers = RolloutPeer::from_leases(&cluster, &[], &answers);
        assert_eq!(peers.len(), 1);
        assert_eq!(may_restart("etcd-main-0", &peers, "new"), Ok(()));
    }

    #[test]
    fn hash_follows_shared_settings_only() {
        let a = three_members();
        let mut b = three_members();
        b.members.pop();
        assert_eq!(
            config_hash(&a),
            config_hash(&b),
            "membership is not a restart reason"
        );
        b.etcd.quota_backend_bytes += 1;
        assert_ne!(config_hash(&a), config_hash(&b));
    }

    fn answers(leader: u64) -> Vec<(String, Option<EtcdAnswer>)> {
        (0..3)
            .map(|i| {
                let answer = EtcdAnswer {
                    cluster_id: 0xc1,
                    member_id: i + 1,
                    revision: 10,
                    leader_id: leader,
                };
                (format!("etcd-main-{i}"), Some(answer))
            })
            .collect()
    }

    fn lease(name: &str, hash: &str) -> MemberLease {
        let mut lease = MemberLease {
            name: name.into(),
            ..Default::default()
        };
        lease
            .annotations
            .insert(CONFIG_HASH_ANNOTATION.into(), hash.into());
        lease
    }

    #[test]
    fn the_restart_turn_follows_the_order_and_hands_over_last() {
        let cluster = three_members();
        let hash = rollout_key(&cluster);
        let answers = answers(1);
        let evidence = |me, leases| RestartEvidence {
            me,
            running: cluster.etcd_version,
            latest: &cluster,
            leases,
            answers: &answers,
            downgrade: None,
        };
        let old = [
            lease("etcd-main-0", "old"),
            lease("etcd-main-1", "old"),
            lease("etcd-main-2", "old"),
        ];
        assert_eq!(
            restart_turn(&evidence("etcd-main-1", &old)),
            RestartTurn::Restart
        );
        assert!(matches!(
            restart_turn(&evidence("etcd-main-2", &old)),
            RestartTurn::Wait(why) if why.contains("etcd-main-1")
        ));
        let followers_done = [
            lease("etcd-main-0", "old"),
            lease("etcd-main-1", &hash),
            lease("etcd-main-2", &hash),
        ];
        assert_eq!(
            restart_turn(&evidence("etcd-main-0", &followers_done)),
            RestartTurn::HandOver(MemberRef {
                id: 2,
                name: "etcd-main-1".into()
            })
        );
    }

    #[test]
    fn an_upgrade_waits_for_its_snapshot_and_a_downgrade_for_etcds_evidence() {
        let mut latest = three_members();
        latest.etcd_version = EtcdVersion::V3_5;
        latest.backup = Some(crate::upgrade::tests::a_store());
        let answers = answers(2);
        let mut evidence = RestartEvidence {
            me: "etcd-main-0",
            running: EtcdVersion::V3_4,
            latest: &latest,
            leases: &[],
            answers: &answers,
            downgrade: None,
        };
        assert!(
            matches!(restart_turn(&evidence), RestartTurn::Wait(_)),
            "no final snapshot"
        );
        let mut older = three_members();
        older.etcd_version = EtcdVersion::V3_4;
        evidence.running = EtcdVersion::V3_5;
        evidence.latest = &older;
        assert!(matches!(
            restart_turn(&evidence),
            RestartTurn::Wait(why) if why.contains("downgrade state")
        ));
        evidence.downgrade = Some(DowngradeEvidence {
            cluster: Some(EtcdVersion::V3_5),
            enabled_target: None,
            storage: None,
        });
        assert!(
            matches!(restart_turn(&evidence), RestartTurn::Wait(_)),
            "not enabled"
        );
        evidence.downgrade = Some(DowngradeEvidence {
            cluster: Some(EtcdVersion::V3_4),
            enabled_target: Some(EtcdVersion::V3_4),
            storage: Some(EtcdVersion::V3_4),
        });
        assert_eq!(restart_turn(&evidence), RestartTurn::Restart);
    }
}
