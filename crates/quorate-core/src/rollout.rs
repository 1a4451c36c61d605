//! Quorum-aware rolling restarts. When a change of the cluster configuration needs etcd to
//! restart, every member would notice it at the same moment; restarting them together loses
//! quorum. Each agent publishes the configuration it runs (a hash, on its member lease) and
//! restarts only when it is its turn: followers in ordinal order, the leader last, and only
//! while every other member is up.

use crate::cluster_config::ClusterConfig;
use crate::lease::MemberLease;
use jiff::{SignedDuration, Timestamp};

/// Member-lease annotation carrying the hash of the configuration the member's etcd runs with.
pub const CONFIG_HASH_ANNOTATION: &str = "quorate.io/etcd-config-hash";

/// Hash of the settings every member shares (etcd flags and TLS), which is what a rollout rolls.
/// FNV-1a, so it is the same for every build and platform.
pub fn config_hash(cluster: &ClusterConfig) -> String {
    let shared = serde_json::json!({
        "etcd": cluster.etcd,
        "clientTls": cluster.client_tls,
        "peerTls": cluster.peer_tls,
    });
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in shared.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Decides whether member `me` may restart now to apply configuration `desired_hash`.
/// `Err` says what it waits for.
pub fn may_restart(
    cluster: &ClusterConfig,
    me: &str,
    leases: &[MemberLease],
    desired_hash: &str,
    now: Timestamp,
) -> Result<(), String> {
    let fresh_within = SignedDuration::from_millis(3 * cluster.heartbeat_millis.max(1000) as i64);
    let lease_of = |name: &str| {
        cluster
            .member(name)
            .and_then(|m| leases.iter().find(|l| l.name == m.lease_name))
    };
    let is_leader = |name: &str| {
        lease_of(name)
            .and_then(|l| l.holder_identity.as_deref())
            .is_some_and(|h| h.ends_with(":Leader"))
    };
    // Followers first in ordinal order, the leader last: one election at most.
    let mut order: Vec<&str> = cluster.members.iter().map(|m| m.name.as_str()).collect();
    order.sort_by_key(|name| is_leader(name));
    let mut before_me = true;
    for name in order {
        if name == me {
            before_me = false;
            continue;
        }
        let Some(lease) = lease_of(name) else {
            return Err(format!(
                "waiting for {name} to report (no lease yet) before restarting {me}"
            ));
        };
        let fresh = lease
            .renew_time
            .is_some_and(|t| now.duration_since(t) <= fresh_within);
        if !fresh {
            return Err(format!(
                "{name} is not known to be up; restarting {me} now could lose quorum"
            ));
        }
        let applied = lease
            .annotations
            .get(CONFIG_HASH_ANNOTATION)
            .map(String::as_str)
            == Some(desired_hash);
        if before_me && !applied {
            return Err(format!(
                "{name} restarts with the new configuration before {me}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member_etcd_config::tests::three_members;
    use std::collections::BTreeMap;

    fn lease(name: &str, role: &str, hash: &str, renewed: Timestamp) -> MemberLease {
        MemberLease {
            name: name.into(),
            holder_identity: Some(format!("1:2:{role}")),
            renew_time: Some(renewed),
            annotations: BTreeMap::from([(CONFIG_HASH_ANNOTATION.to_string(), hash.to_string())]),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_000_000).unwrap()
    }

    #[test]
    fn followers_restart_in_order_and_the_leader_last() {
        let c = three_members();
        // etcd-main-0 leads; 1 and 2 follow; nobody has the new config "new" yet.
        let leases = vec![
            lease("etcd-main-0", "Leader", "old", now()),
            lease("etcd-main-1", "Member", "old", now()),
            lease("etcd-main-2", "Member", "old", now()),
        ];
        assert_eq!(
            may_restart(&c, "etcd-main-1", &leases, "new", now()),
            Ok(())
        );
        assert!(may_restart(&c, "etcd-main-2", &leases, "new", now()).is_err());
        assert!(may_restart(&c, "etcd-main-0", &leases, "new", now()).is_err());

        let leases = vec![
            lease("etcd-main-0", "Leader", "old", now()),
            lease("etcd-main-1", "Member", "new", now()),
            lease("etcd-main-2", "Member", "old", now()),
        ];
        assert_eq!(
            may_restart(&c, "etcd-main-2", &leases, "new", now()),
            Ok(())
        );
        assert!(may_restart(&c, "etcd-main-0", &leases, "new", now()).is_err());

        let leases = vec![
            lease("etcd-main-0", "Leader", "old", now()),
            lease("etcd-main-1", "Member", "new", now()),
            lease("etcd-main-2", "Member", "new", now()),
        ];
        assert_eq!(
            may_restart(&c, "etcd-main-0", &leases, "new", now()),
            Ok(())
        );
    }

    #[test]
    fn nobody_restarts_while_another_member_is_down() {
        let c = three_members();
        let stale = now() - SignedDuration::from_secs(120);
        let leases = vec![
            lease("etcd-main-0", "Leader", "old", now()),
            lease("etcd-main-1", "Member", "old", now()),
            lease("etcd-main-2", "Member", "old", stale),
        ];
        let err = may_restart(&c, "etcd-main-1", &leases, "new", now()).unwrap_err();
        assert!(err.contains("etcd-main-2 is not known to be up"), "{err}");
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
}
