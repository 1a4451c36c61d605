//! What the agent publishes on its member lease: liveness (holder identity and renew time, only
//! while etcd serves with a leader) and, always, the evidence other members decide on: its data
//! state, why it waits, the record of a recovery it carried out, and its defragmentations.

use crate::state::{Phase, SharedState};
use quorate_api::status::EtcdRole;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::conditions::CERTIFICATE_EXPIRY_ANNOTATION;
use quorate_core::hibernation::FINAL_SNAPSHOT_ANNOTATION;
use quorate_core::lease::{HolderIdentity, MemberLease};
use quorate_core::maintenance::defrag::{DEFRAG_ANNOTATION, DefragRecord};
use quorate_core::membership::data_state::{DATA_STATE_ANNOTATION, WAITING_ANNOTATION};
use quorate_core::membership::published::MEMBERSHIP_ANNOTATION;
use quorate_core::membership::recovery::RECOVERY_ANNOTATION;
use quorate_core::membership::rollout::{CONFIG_HASH_ANNOTATION, rollout_key};
use quorate_core::upgrade::{
    CLUSTER_VERSION_ANNOTATION, RUNNING_VERSION_ANNOTATION, SNAPSHOT_CLUSTER_VERSION_ANNOTATION,
};

/// Writes member `me`'s lease from `state`. With `renew`, the lease is renewed (etcd serves
/// with a leader); without, holder and renew time stay as they are and only the evidence is
/// updated. False when it could not be written.
pub async fn publish<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    me: &str,
    state: &SharedState,
    renew: bool,
) -> bool {
    let s = state.get();
    let Some(lease_name) = cluster.member(me).map(|m| m.lease_name.clone()) else {
        return false;
    };
    let mut lease = match (renew, s.member_id) {
        (true, Some(member_id)) => {
            let role = if s.is_leader {
                EtcdRole::Leader
            } else {
                EtcdRole::Member
            };
            let identity = HolderIdentity {
                member_id,
                cluster_id: s.cluster_id,
                role,
            };
            let mut lease = MemberLease::new(lease_name);
            lease.renew(&identity, s.peer_tls_enabled(), crate::clock::now());
            lease
                .annotations
                .insert(CONFIG_HASH_ANNOTATION.to_string(), rollout_key(cluster));
            if let Some(version) = &s.etcd_version {
                lease
                    .annotations
                    .insert(RUNNING_VERSION_ANNOTATION.to_string(), version.clone());
            }
            if let Some(version) = &s.cluster_version {
                lease
                    .annotations
                    .insert(CLUSTER_VERSION_ANNOTATION.to_string(), version.clone());
            }
            if let Some(version) = &s.snapshot_cluster_version {
                lease.annotations.insert(
                    SNAPSHOT_CLUSTER_VERSION_ANNOTATION.to_string(),
                    version.clone(),
                );
            }
            lease
        }
        _ => match coord.member_lease(&lease_name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => MemberLease::new(lease_name),
            Err(e) => {
                tracing::debug!(member = %me, error = %e, "reading the member lease failed");
                return false;
            }
        },
    };
    let annotations = &mut lease.annotations;
    match &s.data_state {
        Some(data) => {
            annotations.insert(DATA_STATE_ANNOTATION.into(), data.to_annotation());
        }
        None => {
            annotations.remove(DATA_STATE_ANNOTATION);
        }
    }
    if s.phase != Phase::Removed && !s.message.is_empty() {
        annotations.insert(WAITING_ANNOTATION.into(), s.message.clone());
    } else {
        annotations.remove(WAITING_ANNOTATION);
    }
    match &s.recovery {
        Some(record) => {
            annotations.insert(
                RECOVERY_ANNOTATION.into(),
                serde_json::to_string(record).expect("a recovery record serializes"),
            );
        }
        None => {
            annotations.remove(RECOVERY_ANNOTATION);
        }
    }
    match &s.membership {
        Some(membership) => {
            annotations.insert(MEMBERSHIP_ANNOTATION.into(), membership.to_annotation());
        }
        None => {
            annotations.remove(MEMBERSHIP_ANNOTATION);
        }
    }
    match s
        .final_snapshot
        .as_ref()
        .filter(|r| s.snapshot_request().as_ref() == Some(&r.request))
    {
        Some(report) => {
            annotations.insert(FINAL_SNAPSHOT_ANNOTATION.into(), report.to_annotation());
        }
        None => {
            annotations.remove(FINAL_SNAPSHOT_ANNOTATION);
        }
    }
    if s.defrag != DefragRecord::default() {
        annotations.insert(DEFRAG_ANNOTATION.into(), s.defrag.to_annotation());
    }
    match &s.certificate_expiry {
        Some(expiry) => {
            annotations.insert(CERTIFICATE_EXPIRY_ANNOTATION.into(), expiry.to_annotation());
        }
        None => {
            annotations.remove(CERTIFICATE_EXPIRY_ANNOTATION);
        }
    }
    let written = match coord.put_member_lease(&lease).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(member = %me, error = %e, "writing the member lease failed");
            false
        }
    };
    if renew {
        state.metrics().member().renewal(written);
    }
    written
}
