//! `status.members`: member health from leases by druid's rules, corrected by what the
//! observer knows for certain — a member whose process or pod is known stopped, or that etcd
//! reports an alarm for, is NotReady however fresh its lease; a voting member etcd lists that
//! never started is listed NotReady, since it counts toward quorum.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use quorate_api::status::{EtcdMemberConditionStatus, EtcdMemberStatus};

use super::{ObservedCluster, Presence};
use crate::member_health::{HealthThresholds, member_statuses};

/// Reason: the member's process or pod is known not to run.
pub const REASON_MEMBER_STOPPED: &str = "MemberStopped";
/// Reason: etcd lists the member but it has never started.
pub const REASON_MEMBER_NEVER_STARTED: &str = "MemberNeverStarted";

/// The `status.members` entries for `o`, in member order, unstarted members last.
pub fn observed_members(o: &ObservedCluster<'_>) -> Vec<EtcdMemberStatus> {
    let lease_names = quorate_api::names::member_lease_names(o.etcd);
    let mut members = member_statuses(
        &lease_names,
        o.leases,
        |member| o.member(member).ready,
        &o.previous.members,
        &HealthThresholds::default(),
        o.now,
    );
    for m in &mut members {
        let alarm = o
            .alarms
            .iter()
            .find(|a| m.id.as_deref() == Some(format!("{:x}", a.member_id).as_str()));
        let certain = if o.member(&m.name).presence == Presence::Stopped {
            Some(REASON_MEMBER_STOPPED)
        } else {
            alarm.map(|a| a.kind.member_reason())
        };
        if let Some(reason) = certain {
            m.status = EtcdMemberConditionStatus::NotReady;
            m.reason = reason.to_string();
            m.last_transition_time = transition_time(o, &m.name, m.status, o.now);
        }
    }
    for u in &o.unstarted {
        let name = format!("{:x}", u.id);
        let status = EtcdMemberConditionStatus::NotReady;
        members.push(EtcdMemberStatus {
            last_transition_time: transition_time(o, &name, status, o.now),
            id: Some(name.clone()),
            name,
            role: None,
            status,
            reason: REASON_MEMBER_NEVER_STARTED.to_string(),
            etcd_version: None,
        });
    }
    members
}

/// The member's previous transition time if its status is unchanged, else `now`.
fn transition_time(
    o: &ObservedCluster<'_>,
    name: &str,
    status: EtcdMemberConditionStatus,
    now: Timestamp,
) -> Time {
    o.previous
        .members
        .iter()
        .find(|p| p.name == name && p.status == status)
        .map_or(Time(now), |p| p.last_transition_time.clone())
}

/// Members etcd's alarms name, as "NOSPACE on member etcd-main-0" (the hex member ID when no
/// member lease names it).
pub(super) fn describe_alarms(
    o: &ObservedCluster<'_>,
    members: &[EtcdMemberStatus],
) -> Vec<String> {
    o.alarms
        .iter()
        .map(|a| {
            let id = format!("{:x}", a.member_id);
            let who = members
                .iter()
                .find(|m| m.id.as_deref() == Some(id.as_str()))
                .map_or(id.clone(), |m| m.name.clone());
            format!("{} on member {who}", a.kind)
        })
        .collect()
}
