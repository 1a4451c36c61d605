//! Facts a local cluster keeps for its whole life: its identity (which makes the etcd cluster
//! token unique per incarnation), when it was created, which members bootstrapped it, and the
//! ports each member was given.

use crate::ports::MemberPorts;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The contents of `cluster.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    /// Unique ID of this incarnation (also the object's `metadata.uid`).
    pub uid: String,
    /// When the cluster was first created.
    pub created: jiff::Timestamp,
    /// Members that bootstrap the cluster; fixed at the first start with members.
    #[serde(default)]
    pub bootstrap_members: Vec<String>,
    /// Ports by member name.
    #[serde(default)]
    pub ports: BTreeMap<String, MemberPorts>,
    /// When the snapshot leases were created (the first reconcile with backups configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_leases_created: Option<jiff::Timestamp>,
    /// etcd's members (by name) as its leader last listed them: members here that are no
    /// longer desired are leaving, and keep running until etcd removed them. Kept across a
    /// hibernation, so a wake at a smaller size knows whom to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_members: Vec<String>,
    /// Where a requested hibernation (`spec.replicas: 0`) stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernation: Option<quorate_core::hibernation::Hibernation>,
    /// The etcd version the members are configured with: the current step of a version
    /// change, while the object's `quorate.io/etcd-version` names its target. Absent in a
    /// record written before chained changes: the object's annotation is then what runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<quorate_api::EtcdVersion>,
}

impl ClusterRecord {
    /// A record for a cluster created now, with a random identity.
    pub fn new(created: jiff::Timestamp, random: u128) -> Self {
        Self {
            uid: format_uid(random),
            created,
            bootstrap_members: Vec::new(),
            ports: BTreeMap::new(),
            snapshot_leases_created: None,
            etcd_members: Vec::new(),
            hibernation: None,
            etcd_version: None,
        }
    }

    /// Members that are not desired but still in etcd's membership, in ordinal order. Until the
    /// leader's list was first read (a record written before quorate kept it), every member
    /// that was ever given ports counts: never fewer members than etcd may have.
    pub fn leaving(&self, desired: &[String]) -> Vec<String> {
        let known: Vec<&String> = if self.etcd_members.is_empty() {
            self.ports.keys().collect()
        } else {
            self.etcd_members.iter().collect()
        };
        known
            .into_iter()
            .filter(|m| !desired.contains(m))
            .cloned()
            .collect()
    }

    /// The members that run: none once hibernated, else the desired ones, then the leaving.
    pub fn members_to_run(&self, desired: &[String]) -> Vec<String> {
        if desired.is_empty() && self.hibernated() {
            return Vec::new();
        }
        desired
            .iter()
            .cloned()
            .chain(self.leaving(desired))
            .collect()
    }

    /// Whether the members were stopped for a hibernation.
    pub fn hibernated(&self) -> bool {
        matches!(
            self.hibernation,
            Some(quorate_core::hibernation::Hibernation::Hibernated { .. })
        )
    }

    /// `--initial-cluster-token`: the cluster name plus part of its identity, by the same rule
    /// as on Kubernetes.
    pub fn cluster_token(&self, name: &str) -> String {
        quorate_core::components::cluster_config::cluster_token(name, &self.uid)
    }
}

/// Formats 128 random bits as a UUID-shaped string.
fn format_uid(random: u128) -> String {
    let hex = format!("{random:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_unique_per_incarnation() {
        let t = jiff::Timestamp::UNIX_EPOCH;
        let a = ClusterRecord::new(t, 0x1234_5678_9abc_def0_1122_3344_5566_7788);
        let b = ClusterRecord::new(t, 0x8765_4321_9abc_def0_1122_3344_5566_7788);
        assert_eq!(a.uid, "12345678-9abc-def0-1122-334455667788");
        assert_eq!(a.cluster_token("etcd-main"), "etcd-main-12345678");
        assert_ne!(a.cluster_token("etcd-main"), b.cluster_token("etcd-main"));
    }
}
