//! The `Etcd` status as the operator observes it: this module fills the one observed-state
//! input of `quorate_core::status` from Kubernetes objects (member and snapshot leases, the
//! StatefulSet, pod readiness) and the pass's outcome, and decides when and how the computed
//! status is written. The rules themselves live in core, shared with local mode.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::autoscaling::v1::CrossVersionObjectReference;
use quorate_api::Etcd;
use quorate_api::status::EtcdStatus;
use quorate_core::backup_ready::BackupLeases;
use quorate_core::conditions::{ETCD_VERSION_CURRENT, StatefulSetRollout};
use quorate_core::etcd_version::VersionDecision;
use quorate_core::lease::MemberLease;
use quorate_core::status::refresh::refresh_now;
use quorate_core::status::{MemberObservation, ObservedCluster, Workload};

/// What the spec flow did in this pass (shared with local mode, which reports its passes the
/// same way).
pub use quorate_core::status::PassOutcome;

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
    /// What each member's pod says (presence, readiness of the etcd container), by member
    /// lease name.
    pub members: &'a BTreeMap<String, MemberObservation>,
    /// Which member pods run and why (voters, hibernation), from `spec_flow::scale`.
    pub scale: Option<&'a quorate_core::scale_plan::ScalePlan>,
    /// The spec flow's outcome.
    pub outcome: &'a PassOutcome,
    /// The etcd version decision the spec flow configured the members with (core
    /// `etcd_version::decide`), for `EtcdVersionCurrent`; `None` when no spec flow ran this
    /// pass (the condition then keeps what the last one said).
    pub etcd_version: Option<&'a VersionDecision>,
    /// Identifies the operator process, for `lastOperation.runID`.
    pub run_id: &'a str,
    /// Now.
    pub now: Timestamp,
}

/// The new status, by the rules of `quorate_core::status::compute_status`.
///
/// Members are judged from their leases, corrected by what their pods say for certain; etcd's
/// alarms and member list are not observed by the operator, except etcd's voting members as the
/// leader's agent publishes them.
pub fn compute_status(i: StatusInputs<'_>) -> EtcdStatus {
    let previous = i.etcd.status.clone().unwrap_or_default();
    let sts_status = i.statefulset.and_then(|s| s.status.as_ref());
    let members = i.members.clone();
    let workload = Workload {
        // With `OnDelete` the StatefulSet controller counts as current only the pods of a
        // revision it never moves on from; the pods of the latest template are the current ones.
        current_replicas: sts_status
            .map(|s| {
                s.current_replicas
                    .unwrap_or(0)
                    .max(s.updated_replicas.unwrap_or(0))
            })
            .unwrap_or(0),
        ready_replicas: sts_status.and_then(|s| s.ready_replicas).unwrap_or(0),
        rollout: i.statefulset.map(rollout_of),
        reference: i.statefulset.map(|_| CrossVersionObjectReference {
            api_version: Some("apps/v1".to_string()),
            kind: "StatefulSet".to_string(),
            name: i.etcd.metadata.name.clone().unwrap_or_default(),
        }),
    };
    let mut status = quorate_core::status::compute_status(&ObservedCluster {
        etcd: i.etcd,
        previous: &previous,
        leases: i.leases,
        members,
        workload,
        alarms: Vec::new(),
        unstarted: Vec::new(),
        backup: i.backup,
        voters: i.scale.and_then(|p| p.voters.clone()),
        hibernation: i.scale.and_then(|p| p.hibernation.clone()),
        etcd_version: i.etcd_version.cloned(),
        outcome: i.outcome,
        pass_waits_for_members: true,
        run_id: i.run_id,
        now: i.now,
    });
    if i.etcd_version.is_none() {
        keep_etcd_version_condition(&previous, &mut status);
    }
    spec_valid_condition(&mut status, &previous, i.etcd, i.now);
    status
}

/// A pass without a spec flow decided no etcd version (only the spec flow moves a version
/// change on), so `EtcdVersionCurrent` stays as the last spec flow left it instead of
/// disappearing until the next one.
fn keep_etcd_version_condition(previous: &EtcdStatus, status: &mut EtcdStatus) {
    let kept = previous
        .conditions
        .iter()
        .find(|c| c.type_ == ETCD_VERSION_CURRENT);
    if let Some(kept) = kept
        && !status.conditions.iter().any(|c| c.type_ == kept.type_)
    {
        status.conditions.push(kept.clone());
        status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    }
}

/// quorate's condition for an `Etcd` that breaks the validation rules (created while the
/// webhook was absent, or by druid): present, False, with every problem, while it is invalid;
/// absent once it is valid, so a valid `Etcd`'s status is what druid would write.
fn spec_valid_condition(
    status: &mut EtcdStatus,
    previous: &EtcdStatus,
    etcd: &Etcd,
    now: Timestamp,
) {
    use quorate_api::status::{Condition, ConditionStatus};
    status.conditions.retain(|c| c.type_ != SPEC_VALID);
    let Err(problems) = quorate_api::validate(etcd) else {
        return;
    };
    let message = format!(
        "the spec is invalid, so the operator changes nothing in the cluster until it is fixed: {}",
        problems.to_string().replace('\n', "; ")
    );
    let before = previous.conditions.iter().find(|c| c.type_ == SPEC_VALID);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    let since = before
        .filter(|c| c.status == ConditionStatus::False)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    status.conditions.push(Condition {
        type_: SPEC_VALID.to_string(),
        status: ConditionStatus::False,
        last_transition_time: since,
        last_update_time: now,
        reason: "InvalidSpec".to_string(),
        message,
    });
}

/// The condition [`spec_valid_condition`] writes.
pub const SPEC_VALID: &str = "SpecValid";

/// The rollout facts of a StatefulSet.
/// With `OnDelete` the StatefulSet controller never moves `currentRevision`; every replica
/// updated is the rollout's end.
fn rollout_of(sts: &StatefulSet) -> StatefulSetRollout {
    let status = sts.status.as_ref();
    let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let updated_replicas = status.and_then(|s| s.updated_replicas).unwrap_or(0);
    let update_revision = status.and_then(|s| s.update_revision.clone());
    StatefulSetRollout {
        generation: sts.metadata.generation,
        observed_generation: status.and_then(|s| s.observed_generation),
        replicas,
        updated_replicas,
        current_revision: if updated_replicas == replicas {
            update_revision.clone()
        } else {
            status.and_then(|s| s.current_revision.clone())
        },
        update_revision,
    }
}

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
/// `lastUpdateTime` changed, or `new` refreshes a condition's time and core's
/// [`refresh_now`] says the refresh is due (older than [`CONDITION_REFRESH`], put off while
/// `waiting` clusters wait for their spec flow). A condition carried over unchanged (its time
/// too, as `EtcdVersionCurrent` between spec flows) starts no write: writing would not make it
/// any younger, so every later pass would write again (at 4 passes a minute, 4 writes per
/// cluster instead of 1).
///
/// [`CONDITION_REFRESH`]: quorate_core::status::refresh::CONDITION_REFRESH
pub fn needs_write(
    old: Option<&EtcdStatus>,
    new: &EtcdStatus,
    now: Timestamp,
    waiting: usize,
) -> bool {
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
    let oldest_refreshed = old
        .conditions
        .iter()
        .filter(|c| {
            new.conditions
                .iter()
                .any(|n| n.type_ == c.type_ && n.last_update_time != c.last_update_time)
        })
        .map(|c| now.duration_since(c.last_update_time.0))
        .max();
    oldest_refreshed.is_some_and(|age| refresh_now(age, waiting))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
    use quorate_api::status::{ConditionStatus, EtcdMemberConditionStatus, LastOperationState};
    use quorate_core::last_operation::{ErrorCode, last_error};

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
        members: &'a BTreeMap<String, MemberObservation>,
        outcome: &'a PassOutcome,
    ) -> StatusInputs<'a> {
        StatusInputs {
            etcd,
            leases,
            backup: None,
            statefulset: sts,
            members,
            scale: None,
            outcome,
            etcd_version: None,
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
    fn etcd_version_current_follows_the_spec_flows_decision_and_stays_without_one() {
        let v = |s| quorate_api::EtcdVersion::parse(s).unwrap();
        let e = etcd(3, 4);
        let ready = BTreeMap::new();
        let outcome = PassOutcome::Succeeded;
        let step = VersionDecision {
            run: v("3.6"),
            target: v("3.7"),
            progress: Some("etcd 3.5 → 3.6 → 3.7: step to 3.6 runs".into()),
            snapshot_wait: false,
        };
        let mut i = inputs(&e, &[], None, &ready, &outcome);
        i.etcd_version = Some(&step);
        let changing = compute_status(i);
        assert_eq!(
            condition(&changing, "EtcdVersionCurrent"),
            ConditionStatus::False
        );
        let c = changing
            .conditions
            .iter()
            .find(|c| c.type_ == "EtcdVersionCurrent")
            .unwrap();
        assert!(c.message.contains("step to 3.6 runs"), "{c:?}");

        // A pass without a spec flow keeps what the last one said.
        let mut e = etcd(3, 4);
        e.status = Some(changing);
        let kept = compute_status(inputs(&e, &[], None, &ready, &PassOutcome::NotRun));
        assert_eq!(
            condition(&kept, "EtcdVersionCurrent"),
            ConditionStatus::False
        );

        let done = VersionDecision {
            run: v("3.7"),
            target: v("3.7"),
            progress: None,
            snapshot_wait: false,
        };
        let mut i = inputs(&e, &[], None, &ready, &outcome);
        i.etcd_version = Some(&done);
        let current = compute_status(i);
        assert_eq!(
            condition(&current, "EtcdVersionCurrent"),
            ConditionStatus::True
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
            now() + jiff::SignedDuration::from_secs(15),
            0
        ));
        // A minute later the condition times are refreshed...
        let minute = now() + jiff::SignedDuration::from_secs(61);
        assert!(needs_write(Some(&first), &second, minute, 0));
        // ... unless clusters wait for their spec flow; then later.
        assert!(!needs_write(Some(&first), &second, minute, 3));
        let much_later = now() + jiff::SignedDuration::from_secs(301);
        assert!(needs_write(Some(&first), &second, much_later, 3));
        // Any real change is written at once, whatever waits.
        let mut changed = second.clone();
        changed.ready_replicas = 0;
        assert!(needs_write(
            Some(&first),
            &changed,
            now() + jiff::SignedDuration::from_secs(15),
            3
        ));
        assert!(needs_write(None, &first, now(), 3));
    }

    #[test]
    fn a_condition_carried_over_with_its_old_time_starts_no_write_every_pass() {
        let e = etcd(1, 1);
        let leases = [lease("main-0", now(), "Leader")];
        let s = sts(1, 1);
        let ready = BTreeMap::new();
        let mut first = compute_status(inputs(
            &e,
            &leases,
            Some(&s),
            &ready,
            &PassOutcome::Succeeded,
        ));
        // As the last spec flow left it: `NotRun` passes carry it over, time and all.
        let mut version = first.conditions[0].clone();
        version.type_ = ETCD_VERSION_CURRENT.to_string();
        first.conditions.retain(|c| c.type_ != ETCD_VERSION_CURRENT);
        first.conditions.push(version);
        let mut again = e.clone();
        again.status = Some(first.clone());
        let minute = now() + jiff::SignedDuration::from_secs(61);
        let mut later = inputs(&again, &leases, Some(&s), &ready, &PassOutcome::NotRun);
        later.now = minute;
        let refreshed = compute_status(later);
        assert!(needs_write(Some(&first), &refreshed, minute, 0));
        // The next pass, 15 s after that write, finds only the carried-over time old.
        let next_time = minute + jiff::SignedDuration::from_secs(15);
        let mut written = e.clone();
        written.status = Some(refreshed.clone());
        let mut next = inputs(&written, &leases, Some(&s), &ready, &PassOutcome::NotRun);
        next.now = next_time;
        let next_status = compute_status(next);
        let kept = |st: &EtcdStatus| {
            st.conditions
                .iter()
                .find(|c| c.type_ == ETCD_VERSION_CURRENT)
                .map(|c| c.last_update_time.clone())
        };
        assert_eq!(kept(&next_status), kept(&first), "carried over unchanged");
        assert!(!needs_write(Some(&refreshed), &next_status, next_time, 0));
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
