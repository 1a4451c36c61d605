//! Transition rules: what may not change between the stored `Etcd` and an update.

use super::{FieldError, Problems};
use crate::etcd::Etcd;
use crate::names::volume_claim_template_name;
use crate::status::ConditionStatus;

/// Condition that says whether the last change of `spec.replicas` is finished.
const SCALE_OPERATION_CONDITION: &str = "ScaleOperationComplete";
/// Condition that records that the cluster joined its source cluster.
const BOOTSTRAPPED_CONDITION: &str = "BootstrappedWithExistingCluster";

pub(super) fn check(old: &Etcd, new: &Etcd, p: &mut Problems) {
    if let Err(e) = check_replicas_change(old, new) {
        p.errors.push(e);
    }
    if let (Ok(Some(from)), Ok(Some(to))) = (
        crate::etcd_version::requested(old),
        crate::etcd_version::requested(new),
    ) && let Err(message) = from.check_change(to)
    {
        p.add(
            format!("metadata.annotations[{}]", crate::annotations::ETCD_VERSION),
            message.to_string(),
        );
    }
    if old.spec.storage_class != new.spec.storage_class {
        p.add(
            "spec.storageClass",
            format!(
                "is immutable; it is {} and cannot become {} (the data volumes already exist)",
                show(old.spec.storage_class.as_deref()),
                show(new.spec.storage_class.as_deref())
            ),
        );
    }
    let (old_vct, new_vct) = (
        volume_claim_template_name(old),
        volume_claim_template_name(new),
    );
    if old_vct != new_vct {
        p.add(
            "spec.volumeClaimTemplate",
            format!(
                "is immutable; the data volumes are named after {old_vct:?} and cannot be renamed to {new_vct:?}"
            ),
        );
    }
    let prefix = |e: &Etcd| e.spec.member_name_prefix.clone().filter(|p| !p.is_empty());
    if prefix(old) != prefix(new) {
        p.add(
            "spec.memberNamePrefix",
            format!(
                "is immutable; it is {} and cannot become {} (etcd member names cannot be renamed)",
                show(prefix(old).as_deref()),
                show(prefix(new).as_deref())
            ),
        );
    }
    // druid's CEL rules: the field cannot be added after creation (removing it is allowed), and
    // while the join is in progress (the condition is False) members and clientEndpoints freeze.
    match (
        &old.spec.etcd.bootstrap_with_existing_cluster,
        &new.spec.etcd.bootstrap_with_existing_cluster,
    ) {
        (None, Some(_)) => p.add(
            "spec.etcd.bootstrapWithExistingCluster",
            "can only be set when the Etcd is created; create a new Etcd to join an existing cluster",
        ),
        (Some(from), Some(to)) if joining(old) => {
            for (field, changed) in [
                ("members", from.members != to.members),
                (
                    "clientEndpoints",
                    from.client_endpoints != to.client_endpoints,
                ),
            ] {
                if changed {
                    p.add(
                        format!("spec.etcd.bootstrapWithExistingCluster.{field}"),
                        format!(
                            "cannot be modified while the bootstrap is in progress ({BOOTSTRAPPED_CONDITION} is False); wait until it is True"
                        ),
                    );
                }
            }
        }
        _ => {}
    }
}

/// The rule for `spec.replicas`: any size, up or down or to 0 (hibernation), but not while an
/// earlier scale operation is unfinished (`ScaleOperationComplete` is False), except that a
/// hibernation still waiting for its final snapshot may be cancelled: its members still run.
pub fn check_replicas_change(old: &Etcd, new: &Etcd) -> Result<(), FieldError> {
    let (from, to) = (old.spec.replicas, new.spec.replicas);
    if from == to || from == 0 {
        return Ok(());
    }
    let unfinished = old.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == SCALE_OPERATION_CONDITION && c.status == ConditionStatus::False)
    });
    match unfinished {
        Some(c) => Err(FieldError::new(
            "spec.replicas",
            format!(
                "cannot go from {from} to {to} while the scale operation to {from} is unfinished \
                 ({SCALE_OPERATION_CONDITION} is False: {}); wait until it is True, then change it",
                c.message
            ),
        )),
        None => Ok(()),
    }
}

/// Whether the join of an existing cluster is in progress: its condition is False. druid reads
/// the condition of the object being written, whose status the API server keeps as stored.
fn joining(etcd: &Etcd) -> bool {
    etcd.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == BOOTSTRAPPED_CONDITION && c.status == ConditionStatus::False)
    })
}

fn show(value: Option<&str>) -> String {
    match value {
        Some(v) => format!("{v:?}"),
        None => "unset".to_string(),
    }
}
