//! The truth rules of [`compute_status`]: what is known for certain wins over fresh leases.

use std::collections::BTreeMap;

use jiff::Timestamp;
use quorate_api::Etcd;
use quorate_api::status::{
    ConditionStatus, EtcdMemberConditionStatus, EtcdStatus, LastOperationState,
};

use super::*;
use crate::conditions::{ALL_MEMBERS_READY, ALL_MEMBERS_UPDATED, READY, REASON_ALARM_RAISED};
use crate::last_operation::ErrorCode;
use crate::lease::MemberLease;
use crate::membership::rollout::CONFIG_HASH_ANNOTATION;

fn now() -> Timestamp {
    "2026-11-24T10:00:00Z".parse().unwrap()
}

fn etcd(replicas: i32) -> Etcd {
    let mut e = Etcd::new("main", Default::default());
    e.metadata.generation = Some(2);
    e.spec.replicas = replicas;
    e
}

/// Leases of `n` members renewed just now, running configuration `hash`.
fn fresh_leases(n: usize, hash: &str) -> Vec<MemberLease> {
    (0..n)
        .map(|i| MemberLease {
            name: format!("main-{i}"),
            holder_identity: Some(format!(
                "{:x}:c1:{}",
                i + 1,
                if i == 0 { "Leader" } else { "Member" }
            )),
            renew_time: Some(now()),
            annotations: BTreeMap::from([(CONFIG_HASH_ANNOTATION.to_string(), hash.to_string())]),
        })
        .collect()
}

fn observations(n: usize, presence: Presence, ready: bool) -> BTreeMap<String, MemberObservation> {
    (0..n)
        .map(|i| (format!("main-{i}"), MemberObservation { presence, ready }))
        .collect()
}

/// A local-style observation of `etcd` whose members are all `presence`/`ready`.
fn observe<'a>(
    etcd: &'a Etcd,
    previous: &'a EtcdStatus,
    leases: &'a [MemberLease],
    presence: Presence,
    ready: bool,
    outcome: &'a PassOutcome,
) -> ObservedCluster<'a> {
    let n = usize::try_from(etcd.spec.replicas).unwrap();
    let members = observations(n, presence, ready);
    let count = if ready && presence != Presence::Stopped {
        etcd.spec.replicas
    } else {
        0
    };
    ObservedCluster {
        etcd,
        previous,
        leases,
        workload: Workload {
            current_replicas: if presence == Presence::Stopped {
                0
            } else {
                etcd.spec.replicas
            },
            ready_replicas: count,
            rollout: Some(rollout_from_config_hashes(etcd, leases, &members, "h1")),
            reference: None,
        },
        members,
        alarms: Vec::new(),
        unstarted: Vec::new(),
        backup: None,
        voters: None,
        hibernation: None,
        etcd_version: None,
        outcome,
        pass_waits_for_members: false,
        run_id: "local-1",
        now: now(),
    }
}

fn condition(status: &EtcdStatus, type_: &str) -> (ConditionStatus, String, String) {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason.clone(), c.message.clone()))
        .unwrap_or_else(|| panic!("no {type_} in {:?}", status.conditions))
}

#[test]
fn a_running_cluster_is_ready_quorate_all_ready_and_all_updated() {
    let e = etcd(3);
    let previous = EtcdStatus::default();
    let leases = fresh_leases(3, "h1");
    let s = compute_status(&observe(
        &e,
        &previous,
        &leases,
        Presence::Running,
        true,
        &PassOutcome::Succeeded,
    ));
    assert_eq!(s.ready, Some(true));
    assert_eq!(condition(&s, READY).0, ConditionStatus::True);
    assert_eq!(condition(&s, ALL_MEMBERS_READY).0, ConditionStatus::True);
    assert_eq!(condition(&s, ALL_MEMBERS_UPDATED).0, ConditionStatus::True);
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(
        s.last_operation.unwrap().state,
        LastOperationState::Succeeded
    );
}

#[test]
fn a_stopped_cluster_is_not_ready_even_with_fresh_leases() {
    let e = etcd(3);
    let previous = EtcdStatus::default();
    let leases = fresh_leases(3, "h1");
    let s = compute_status(&observe(
        &e,
        &previous,
        &leases,
        Presence::Stopped,
        false,
        &PassOutcome::NotRun,
    ));
    assert_eq!(s.ready, Some(false));
    let (ready, reason, _) = condition(&s, READY);
    assert_eq!(
        (ready, reason.as_str()),
        (ConditionStatus::False, "QuorumLost")
    );
    assert_eq!(condition(&s, ALL_MEMBERS_READY).0, ConditionStatus::False);
    assert!(
        s.members
            .iter()
            .all(|m| m.status == EtcdMemberConditionStatus::NotReady
                && m.reason == REASON_MEMBER_STOPPED)
    );
    assert_eq!((s.current_replicas, s.ready_replicas), (0, 0));
}

#[test]
fn one_stopped_member_keeps_quorum_but_not_readiness() {
    let e = etcd(3);
    let previous = EtcdStatus::default();
    let leases = fresh_leases(3, "h1");
    let mut o = observe(
        &e,
        &previous,
        &leases,
        Presence::Running,
        true,
        &PassOutcome::Succeeded,
    );
    o.members.insert(
        "main-2".into(),
        MemberObservation {
            presence: Presence::Stopped,
            ready: false,
        },
    );
    let s = compute_status(&o);
    assert_eq!(s.ready, Some(false));
    assert_eq!(condition(&s, READY).0, ConditionStatus::True);
    let (all, _, message) = condition(&s, ALL_MEMBERS_READY);
    assert_eq!(all, ConditionStatus::False);
    assert!(message.contains("main-2"), "{message}");
    assert_eq!(
        s.last_operation.unwrap().state,
        LastOperationState::Processing
    );
}

#[test]
fn a_nospace_alarm_makes_the_cluster_not_ready_and_is_named() {
    let e = etcd(3);
    let previous = EtcdStatus::default();
    let leases = fresh_leases(3, "h1");
    let mut o = observe(
        &e,
        &previous,
        &leases,
        Presence::Running,
        true,
        &PassOutcome::Succeeded,
    );
    o.alarms = vec![EtcdAlarm {
        member_id: 2,
        kind: AlarmKind::NoSpace,
    }];
    let s = compute_status(&o);
    assert_eq!(s.ready, Some(false));
    let (ready, reason, message) = condition(&s, READY);
    assert_eq!(
        (ready, reason.as_str()),
        (ConditionStatus::False, REASON_ALARM_RAISED)
    );
    assert!(message.contains("NOSPACE on member main-1"), "{message}");
    let (all, _, message) = condition(&s, ALL_MEMBERS_READY);
    assert_eq!(all, ConditionStatus::False);
    assert!(message.contains("main-1"), "{message}");
    let m = s.members.iter().find(|m| m.name == "main-1").unwrap();
    assert_eq!(m.reason, "NoSpaceAlarm");
}

#[test]
fn a_listed_member_that_never_started_counts_against_quorum() {
    let e = etcd(1);
    let previous = EtcdStatus::default();
    let leases = fresh_leases(1, "h1");
    let mut o = observe(
        &e,
        &previous,
        &leases,
        Presence::Running,
        true,
        &PassOutcome::Succeeded,
    );
    o.unstarted = vec![UnstartedMember {
        id: 0xabc,
        peer_urls: vec!["http://127.0.0.1:9999".into()],
    }];
    let s = compute_status(&o);
    let (ready, reason, _) = condition(&s, READY);
    assert_eq!(
        (ready, reason.as_str()),
        (ConditionStatus::False, "QuorumLost")
    );
    let unstarted = s.members.iter().find(|m| m.name == "abc").unwrap();
    assert_eq!(unstarted.reason, REASON_MEMBER_NEVER_STARTED);
}

#[test]
fn members_on_an_old_configuration_are_not_updated() {
    let e = etcd(3);
    let previous = EtcdStatus::default();
    let mut leases = fresh_leases(3, "h1");
    leases[1]
        .annotations
        .insert(CONFIG_HASH_ANNOTATION.into(), "h0".into());
    let s = compute_status(&observe(
        &e,
        &previous,
        &leases,
        Presence::Running,
        true,
        &PassOutcome::Succeeded,
    ));
    let (updated, _, message) = condition(&s, ALL_MEMBERS_UPDATED);
    assert_eq!(updated, ConditionStatus::False);
    assert!(message.starts_with("2 of 3"), "{message}");
    assert_eq!(s.ready, Some(false), "a rollout in progress is not ready");
}

#[test]
fn a_member_that_cannot_start_is_filed_under_its_own_code() {
    let e = etcd(1);
    let previous = EtcdStatus {
        observed_generation: Some(1),
        ..EtcdStatus::default()
    };
    let leases = fresh_leases(1, "h1");
    let outcome = PassOutcome::Failed(vec![(
        ErrorCode::StartMember,
        "starting the agent of main-0: permission denied".into(),
    )]);
    let s = compute_status(&observe(
        &e,
        &previous,
        &leases,
        Presence::Stopped,
        false,
        &outcome,
    ));
    assert_eq!(s.last_errors.len(), 1);
    assert_eq!(s.last_errors[0].code, "ERR_START_MEMBER");
    assert_eq!(
        s.observed_generation,
        Some(1),
        "a failed pass observes nothing new"
    );
    assert_eq!(s.last_operation.unwrap().state, LastOperationState::Error);
}

#[test]
fn a_pass_that_did_not_run_keeps_the_operation() {
    let e = etcd(1);
    let leases = fresh_leases(1, "h1");
    let first = compute_status(&observe(
        &e,
        &EtcdStatus::default(),
        &leases,
        Presence::Running,
        true,
        &PassOutcome::Succeeded,
    ));
    let again = compute_status(&observe(
        &e,
        &first,
        &leases,
        Presence::Stopped,
        false,
        &PassOutcome::NotRun,
    ));
    assert_eq!(again.last_operation, first.last_operation);
    assert_eq!(again.observed_generation, first.observed_generation);
    assert_eq!(again.ready, Some(false));
}
