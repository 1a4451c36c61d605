//! Rollout facts of members that publish the configuration they run: each agent writes the
//! hash of its etcd configuration on its member lease, so where no StatefulSet exists (local
//! mode) "every member runs the latest configuration" is read from those hashes.

use std::collections::BTreeMap;

use quorate_api::Etcd;

use super::{MemberObservation, Presence};
use crate::conditions::StatefulSetRollout;
use crate::lease::MemberLease;
use crate::membership::rollout::{CONFIG_HASH_ANNOTATION, published_config_hash};

/// The rollout of `etcd` towards configuration `desired_hash`: a member is updated when it is
/// not known stopped and its lease carries `desired_hash` (with or without the CA digests its
/// agent adds, see `rollout_key`). The configuration is rendered from
/// the generation it was read at, so the observed generation is the `Etcd`'s own.
pub fn rollout_from_config_hashes(
    etcd: &Etcd,
    leases: &[MemberLease],
    members: &BTreeMap<String, MemberObservation>,
    desired_hash: &str,
) -> StatefulSetRollout {
    let names = quorate_api::names::member_lease_names(etcd);
    let updated = names
        .iter()
        .filter(|name| {
            let stopped = members
                .get(name.as_str())
                .is_some_and(|m| m.presence == Presence::Stopped);
            let hash = leases
                .iter()
                .find(|l| &l.name == *name)
                .and_then(|l| l.annotations.get(CONFIG_HASH_ANNOTATION));
            !stopped && hash.map(|h| published_config_hash(h)) == Some(desired_hash)
        })
        .count();
    let updated = i32::try_from(updated).unwrap_or(i32::MAX);
    let replicas = i32::try_from(names.len()).unwrap_or(i32::MAX);
    StatefulSetRollout {
        generation: etcd.metadata.generation,
        observed_generation: etcd.metadata.generation,
        replicas,
        updated_replicas: updated,
        current_revision: (updated == replicas).then(|| desired_hash.to_string()),
        update_revision: Some(desired_hash.to_string()),
    }
}
