//! The `Etcd` status as the operator computes it, from what it observes (member and snapshot
//! leases, the StatefulSet, pod readiness) and what this pass did: pure, so the rules are
//! tested without an API server. Conditions and member health follow druid's rules
//! (`quorate-core`), the same ones local mode uses.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::autoscaling::v1::CrossVersionObjectReference;
use quorate_api::Etcd;
use quorate_api::status::{EtcdStatus, LastError, LastOperationState};
use quorate_core::backup_ready::{BackupLeases, backup_ready_from_leases};
use quorate_core::conditions::{
    SKIP_MERGE, StatefulSetRollout, check_all_members_updated, member_checks, merge_conditions,
};
use quorate_core::last_operation::{ErrorCode, last_error, reconcile_operation};
use quorate_core::lease::MemberLease;
use quorate_core::member_health::{HealthThresholds, member_statuses};

/// What the spec flow did in this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassOutcome {
    /// Every component is as desired.
    Succeeded,
    /// A component must wait (e.g. for members to report peer TLS); try again soon.
    Requeue(String),
    /// Some components could not be synced.
    Failed(Vec<(ErrorCode, String)>),
    /// Spec reconciliation is suspended by annotation.
    Suspended,
    /// The spec flow did not run (up to date, or waiting for the reconcile annotation).
    NotRun,
}

/// What the status is computed from.
pub struct StatusInputs<'a> {
    /// The `Etcd` as read.
    pub etcd: &'a Etcd,
    /// Member leases of the cluster.
    pub leases: &'a [MemberLease],
    /// Snapshot leases, when backups are configured.
    pub backup: Option<BackupLeases>,
    /// The StatefulSet, if it exists.
    pub statefulset: Option<&'a StatefulSet>,
    /// Readiness of the etcd container, by member lease name (pod readiness).
    pub ready: &'a BTreeMap<String, bool>,
    /// The spec flow's outcome.
    pub outcome: &'a PassOutcome,
    /// Identifies the operator process, for `lastOperation.runID`.
    pub run_id: &'a str,
    /// Now.
    pub now: Timestamp,
}

/// The new status. Conditions keep their transition times when unchanged, and
/// `lastOperation` keeps its time when its state and description are unchanged, so an
/// unchanged cluster yields an equal status and no write.
pub fn compute_status(i: StatusInputs<'_>) -> EtcdStatus {
    let etcd = i.etcd;
    let previous = etcd.status.clone().unwrap_or_default();
    let replicas = etcd.spec.replicas;
    let lease_names = quorate_api::names::member_lease_names(etcd);
    let members = member_statuses(
        &lease_names,
        i.leases,
        |member| i.ready.get(member).copied().unwrap_or(false),
        &previous.members,
        &HealthThresholds::default(),
        i.now,
    );
    let rollout = i.statefulset.map(rollout_of);
    let mut checks = member_checks(&members, i.leases, replicas);
    checks.push(check_all_members_updated(rollout.as_ref()));
    if let Some(backup) = &i.backup {
        checks.push(backup_ready_from_leases(etcd, backup, &previous, i.now));
    }
    let conditions = merge_conditions(&previous.conditions, &checks, replicas, SKIP_MERGE, i.now);

    let sts_status = i.statefulset.and_then(|s| s.status.as_ref());
    let ready_replicas = sts_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let current_replicas = sts_status.and_then(|s| s.current_replicas).unwrap_or(0);
    // druid: ready when the StatefulSet has rolled out and enough pods are ready; "enough" is
    // the spec's count once reconciled, else the StatefulSet's.
    let expected = match i.outcome {
        PassOutcome::Succeeded => replicas,
        _ => rollout.as_ref().map_or(replicas, |r| r.replicas),
    };
    let ready = rollout
        .as_ref()
        .is_some_and(|r| r.is_complete() && ready_replicas >= expected);

    let (state, description, errors) = match i.outcome {
        PassOutcome::Succeeded => (
            Some(LastOperationState::Succeeded),
            "every component is as the spec asks".to_string(),
            Vec::new(),
        ),
        PassOutcome::Requeue(why) => (
            Some(LastOperationState::Requeue),
            why.clone(),
            vec![last_error(ErrorCode::RequeueAfter, why.clone(), i.now)],
        ),
        PassOutcome::Failed(failures) => (
            Some(LastOperationState::Error),
            failures
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            failures
                .iter()
                .map(|(code, m)| last_error(*code, m.clone(), i.now))
                .collect(),
        ),
        PassOutcome::Suspended | PassOutcome::NotRun => (None, String::new(), Vec::new()),
    };
    let last_operation = match state {
        None => previous.last_operation.clone(),
        Some(state) => match &previous.last_operation {
            Some(op)
                if op.state == state && op.description == description && op.run_id == i.run_id =>
            {
                Some(op.clone())
            }
            _ => Some(reconcile_operation(
                previous.observed_generation,
                state,
                description,
                i.run_id,
                i.now,
            )),
        },
    };
    let last_errors = match i.outcome {
        PassOutcome::Suspended | PassOutcome::NotRun => previous.last_errors.clone(),
        _ => keep_observed_times(&previous.last_errors, errors),
    };
    let observed_generation = match i.outcome {
        PassOutcome::Succeeded => etcd.metadata.generation,
        _ => previous.observed_generation,
    };
    EtcdStatus {
        observed_generation,
        conditions,
        members,
        // druid copies currentReplicas into both (the scale subresource reads `replicas`).
        current_replicas,
        replicas: current_replicas,
        ready_replicas,
        ready: Some(ready),
        etcd: i.statefulset.map(|_| CrossVersionObjectReference {
            api_version: Some("apps/v1".to_string()),
            kind: "StatefulSet".to_string(),
            name: etcd.metadata.name.clone().unwrap_or_default(),
        }),
        last_operation,
        last_errors,
        selector: Some(quorate_api::names::selector_string(
            etcd.metadata.name.as_deref().unwrap_or_default(),
        )),
        ..previous
    }
}

/// The rollout facts of a StatefulSet.
fn rollout_of(sts: &StatefulSet) -> StatefulSetRollout {
    let status = sts.status.as_ref();
    StatefulSetRollout {
        generation: sts.metadata.generation,
        observed_generation: status.and_then(|s| s.observed_generation),
        replicas: sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
        updated_replicas: status.and_then(|s| s.updated_replicas).unwrap_or(0),
        current_revision: status.and_then(|s| s.current_revision.clone()),
        update_revision: status.and_then(|s| s.update_revision.clone()),
    }
}

/// How long a condition's `lastUpdateTime` may lag before an otherwise unchanged status is
/// written again: conditions are re-checked every pass, but rewriting the object every 15 s
/// only to move those times would make status writes the bulk of the operator's API traffic.
pub const CONDITION_REFRESH: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// The merge patch that turns `old` into `new`. The status omits empty fields when
/// serialized, and a merge patch leaves out what it omits, so every field `old` has and `new`
/// lacks is set to `null` explicitly: otherwise `lastErrors` of a failed pass would stay after
/// the next successful one, and members of a larger cluster after a scale-in.
pub fn status_patch(old: Option<&EtcdStatus>, new: &EtcdStatus) -> serde_json::Value {
    let mut status = serde_json::to_value(new).expect("a status serializes");
    let old = old.map(|o| serde_json::to_value(o).expect("a status serializes"));
    if let (Some(serde_json::Value::Object(old)), serde_json::Value::Object(fields)) =
        (old, &mut status)
    {
        for key in old.keys() {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": status })
}

/// Whether `new` must be written over `old`: something other than the conditions'
/// `lastUpdateTime` changed, or those times are older than [`CONDITION_REFRESH`].
pub fn needs_write(old: Option<&EtcdStatus>, new: &EtcdStatus, now: Timestamp) -> bool {
    let Some(old) = old else {
        return true;
    };
    let without_update_times = |s: &EtcdStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_update_time =
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    if without_update_times(old) != without_update_times(new) {
        return true;
    }
    old.conditions
        .iter()
        .any(|c| now.duration_since(c.last_update_time.0) > CONDITION_REFRESH)
}

/// The same error seen again keeps the time it was first observed, so a persisting error does
/// not rewrite the status every pass.
fn keep_observed_times(previous: &[LastError], errors: Vec<LastError>) -> Vec<LastError> {
    errors
        .into_iter()
        .map(|e| {
            previous
                .iter()
                .find(|p| p.code == e.code && p.description == e.description)
                .cloned()
                .unwrap_or(e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
    use quorate_api::status::{ConditionStatus, EtcdMemberConditionStatus};

    fn etcd(replicas: i32, generation: i64) -> Etcd {
        let mut e = Etcd::new("main", Default::default());
        e.metadata.namespace = Some("ns".into());
        e.metadata.generation = Some(generation);
        e.spec.replicas = replicas;
        e
    }

    fn sts(replicas: i32, ready: i32) -> StatefulSet {
        let mut sts = StatefulSet {
            spec: Some(StatefulSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                replicas,
                ready_replicas: Some(ready),
                current_replicas: Some(replicas),
                updated_replicas: Some(replicas),
                observed_generation: Some(1),
                current_revision: Some("r1".into()),
                update_revision: Some("r1".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        sts.metadata.generation = Some(1);
        sts
    }

    fn lease(name: &str, renewed: Timestamp, role: &str) -> MemberLease {
        MemberLease {
            name: name.into(),
            holder_identity: Some(format!("1a2b:c3d4:{role}")),
            renew_time: Some(renewed),
            ..Default::default()
        }
    }

    fn now() -> Timestamp {
        "2026-11-24T10:00:00Z".parse().unwrap()
    }

    fn inputs<'a>(
        etcd: &'a Etcd,
        leases: &'a [MemberLease],
        sts: Option<&'a StatefulSet>,
        ready: &'a BTreeMap<String, bool>,
        outcome: &'a PassOutcome,
    ) -> StatusInputs<'a> {
        StatusInputs {
            etcd,
            leases,
            backup: None,
            statefulset: sts,
            ready,
            outcome,
            run_id: "run-1",
            now: now(),
        }
    }

    fn condition(status: &EtcdStatus, type_: &str) -> ConditionStatus {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status)
            .unwrap_or_else(|| panic!("no {type_} in {:?}", status.conditions))
    }

    #[test]
    fn a_healthy_cluster_is_ready_quorate_and_all_members_ready() {
        let e = etcd(3, 4);
        let leases: Vec<_> = (0..3)
            .map(|i| {
                lease(
                    &format!("main-{i}"),
                    now(),
                    if i == 0 { "Leader" } else { "Member" },
                )
            })
            .collect();
        let s = sts(3, 3);
        let ready = BTreeMap::new();
        let status = compute_status(inputs(
            &e,
            &leases,
            Some(&s),
            &ready,
            &PassOutcome::Succeeded,
        ));
        assert_eq!(status.observed_generation, Some(4));
        assert_eq!(status.ready, Some(true));
        assert_eq!((status.replicas, status.ready_replicas), (3, 3));
        assert_eq!(status.members.len(), 3);
        assert!(
            status
                .members
                .iter()
                .all(|m| m.status == EtcdMemberConditionStatus::Ready)
        );
        assert_eq!(condition(&status, "Ready"), ConditionStatus::True);
        assert_eq!(condition(&status, "AllMembersReady"), ConditionStatus::True);
        assert_eq!(
            status.last_operation.unwrap().state,
            LastOperationState::Succeeded
        );
        assert_eq!(
            status.selector.as_deref(),
            Some("app.kubernetes.io/managed-by=etcd-druid,app.kubernetes.io/part-of=main")
        );
    }

    #[test]
    fn a_requeue_keeps_the_generation_and_records_why() {
        let mut e = etcd(3, 5);
        e.status = Some(EtcdStatus {
            observed_generation: Some(4),
            ..Default::default()
        });
        let outcome = PassOutcome::Requeue("waiting for peer TLS on main-0".into());
        let ready = BTreeMap::new();
        let status = compute_status(inputs(&e, &[], None, &ready, &outcome));
        assert_eq!(status.observed_generation, Some(4));
        assert_eq!(status.ready, Some(false));
        assert_eq!(status.last_errors.len(), 1);
        assert_eq!(status.last_errors[0].code, "ERR_REQUEUE_AFTER");
        let op = status.last_operation.unwrap();
        assert_eq!(op.state, LastOperationState::Requeue);
        assert_eq!(op.description, "waiting for peer TLS on main-0");
    }

    #[test]
    fn an_unchanged_cluster_is_rewritten_only_to_refresh_condition_times() {
        let e = etcd(1, 1);
        let leases = [lease("main-0", now(), "Leader")];
        let s = sts(1, 1);
        let ready = BTreeMap::new();
        let first = compute_status(inputs(
            &e,
            &leases,
            Some(&s),
            &ready,
            &PassOutcome::Succeeded,
        ));
        let mut again = e.clone();
        again.status = Some(first.clone());
        let mut later = inputs(&again, &leases, Some(&s), &ready, &PassOutcome::NotRun);
        later.now = now() + jiff::SignedDuration::from_secs(15);
        let second = compute_status(later);
        assert!(!needs_write(
            Some(&first),
            &second,
            now() + jiff::SignedDuration::from_secs(15)
        ));
        // A minute later the condition times are refreshed.
        assert!(needs_write(
            Some(&first),
            &second,
            now() + jiff::SignedDuration::from_secs(61)
        ));
        // Any real change is written at once.
        let mut changed = second.clone();
        changed.ready_replicas = 0;
        assert!(needs_write(
            Some(&first),
            &changed,
            now() + jiff::SignedDuration::from_secs(15)
        ));
        assert!(needs_write(None, &first, now()));
    }

    #[test]
    fn failures_are_listed_with_their_codes_and_keep_their_first_time() {
        let e = etcd(1, 1);
        let outcome = PassOutcome::Failed(vec![(
            ErrorCode::SyncConfigMap,
            "apply ConfigMap ns/main-config: forbidden".into(),
        )]);
        let ready = BTreeMap::new();
        let first = compute_status(inputs(&e, &[], None, &ready, &outcome));
        assert_eq!(first.last_errors[0].code, "ERR_SYNC_CONFIGMAP");
        let mut again = e.clone();
        again.status = Some(first.clone());
        let mut later = inputs(&again, &[], None, &ready, &outcome);
        later.now = now() + jiff::SignedDuration::from_secs(30);
        assert_eq!(compute_status(later).last_errors, first.last_errors);
    }

    #[test]
    fn a_patch_clears_what_the_new_status_no_longer_has() {
        let old = EtcdStatus {
            last_errors: vec![last_error(
                ErrorCode::RequeueAfter,
                "waiting",
                Timestamp::UNIX_EPOCH,
            )],
            ready: Some(false),
            ..EtcdStatus::default()
        };
        let new = EtcdStatus {
            ready: Some(true),
            ..EtcdStatus::default()
        };
        let patch = status_patch(Some(&old), &new);
        assert_eq!(patch["status"]["lastErrors"], serde_json::Value::Null);
        assert!(
            patch["status"]
                .as_object()
                .unwrap()
                .contains_key("lastErrors")
        );
        assert_eq!(patch["status"]["ready"], true);
        let first = status_patch(None, &new);
        assert!(
            !first["status"]
                .as_object()
                .unwrap()
                .contains_key("lastErrors")
        );
    }
}
