//! Members, leases and conditions the condition checks' tests are built from.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use quorate_api::status::{
    Condition, ConditionStatus, EtcdMemberConditionStatus, EtcdMemberStatus,
};

use crate::lease::MemberLease;

pub(crate) fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

pub(crate) fn now() -> Timestamp {
    t("2024-06-01T10:00:00Z")
}

pub(crate) fn earlier() -> Timestamp {
    t("2024-05-01T10:00:00Z")
}

pub(crate) fn member(name: &str, status: EtcdMemberConditionStatus) -> EtcdMemberStatus {
    EtcdMemberStatus {
        name: name.into(),
        id: None,
        role: None,
        status,
        reason: String::new(),
        last_transition_time: Time(earlier()),
        etcd_version: None,
    }
}

pub(crate) fn members(statuses: &[EtcdMemberConditionStatus]) -> Vec<EtcdMemberStatus> {
    statuses
        .iter()
        .enumerate()
        .map(|(i, s)| member(&format!("etcd-{i}"), *s))
        .collect()
}

pub(crate) fn held(name: &str, holder: &str) -> MemberLease {
    MemberLease {
        holder_identity: Some(holder.into()),
        ..MemberLease::new(name)
    }
}

pub(crate) fn condition(type_: &str, status: ConditionStatus, at: Timestamp) -> Condition {
    Condition {
        type_: type_.into(),
        status,
        last_transition_time: Time(at),
        last_update_time: Time(at),
        reason: "Old".into(),
        message: "old".into(),
    }
}
