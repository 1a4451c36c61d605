//! The `Etcd` webhook: on CREATE and UPDATE it runs the validation local mode runs
//! (`quorate_api::validate`, and `validate_update` with druid's transition rules on updates), so a
//! manifest `quorate up` refuses is refused by the cluster too, with the same lines. Kubernetes
//! 1.20 drops the CRD's CEL rules, so without this webhook it would accept them.

use std::fmt;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use quorate_api::{Etcd, ValidationErrors, validate, validate_update};
use serde_json::Value;

use super::review::{object_key, refuse_invalid, refuse_unreadable};

/// What the webhook decided about one request.
#[derive(Clone, Debug, PartialEq)]
pub enum EtcdVerdict {
    /// Nothing to object to.
    Allowed,
    /// The object (or the change) breaks validation rules; refused with these problems.
    Invalid(ValidationErrors),
    /// The object cannot be read as an `Etcd` at all (wrong type, unknown enum value, ...).
    Unreadable(Unreadable),
}

/// Why an object could not be decoded as an `Etcd`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct Unreadable {
    /// Where decoding failed, e.g. `spec.replicas` (`.` when the whole object is wrong).
    pub path: String,
    /// What serde found there and what it expected.
    pub message: String,
}

/// Decodes an object of an AdmissionRequest as an `Etcd`, naming the field when it fails.
pub fn decode_etcd(object: &Value) -> Result<Etcd, Unreadable> {
    serde_path_to_error::deserialize(object).map_err(|e| Unreadable {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// The decision for one request, given its operation and its objects as JSON.
///
/// An UPDATE that leaves `spec` as it was is allowed without validation: it only changes
/// metadata (finalizers, annotations, labels), and refusing it would keep an `Etcd` that
/// predates the webhook (or a newer rule) from ever being deleted or annotated. An UPDATE whose
/// stored object cannot be decoded gets the rules for new objects only, so it can be repaired.
pub fn judge_etcd(
    operation: &Operation,
    object: Option<&Value>,
    old: Option<&Value>,
) -> EtcdVerdict {
    match operation {
        Operation::Create => match object {
            Some(object) => check(object, None),
            None => missing_object(),
        },
        Operation::Update => {
            let Some(object) = object else {
                return missing_object();
            };
            if let Some(old) = old
                && old.get("spec") == object.get("spec")
            {
                return EtcdVerdict::Allowed;
            }
            check(object, old)
        }
        Operation::Delete | Operation::Connect => EtcdVerdict::Allowed,
    }
}

fn check(object: &Value, old: Option<&Value>) -> EtcdVerdict {
    let etcd = match decode_etcd(object) {
        Ok(etcd) => etcd,
        Err(e) => return EtcdVerdict::Unreadable(e),
    };
    let old = old.and_then(|old| decode_etcd(old).ok());
    let result = match &old {
        Some(old) => validate_update(old, &etcd),
        None => validate(&etcd),
    };
    match result {
        Ok(()) => EtcdVerdict::Allowed,
        Err(errors) => EtcdVerdict::Invalid(errors),
    }
}

fn missing_object() -> EtcdVerdict {
    EtcdVerdict::Unreadable(Unreadable {
        path: ".".to_string(),
        message: "the AdmissionRequest carries no object".to_string(),
    })
}

/// The message of a refusal: a first line naming the object, then exactly the lines `quorate
/// up`/`quorate apply` print for the same manifest (the `Display` of [`ValidationErrors`]).
pub fn invalid_message(key: &str, errors: &ValidationErrors) -> String {
    format!("Etcd {key} is invalid:\n{errors}")
}

/// The message when the object is not an `Etcd` at all.
pub fn unreadable_message(key: &str, unreadable: &Unreadable) -> String {
    format!(
        "Etcd {key} cannot be read as {}: {unreadable}; fix the field's type or value",
        quorate_api::etcd::API_VERSION
    )
}

impl fmt::Display for EtcdVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdVerdict::Allowed => f.write_str("allowed"),
            EtcdVerdict::Invalid(errors) => write!(f, "invalid: {errors}"),
            EtcdVerdict::Unreadable(u) => write!(f, "unreadable: {u}"),
        }
    }
}

/// What kubectl shows as `Warning:` lines for an allowed object: deprecated spellings that are
/// still read (the schema keeps them, so they reach the webhook) and, should the API server not
/// prune them, unknown fields. The same lines local mode prints.
pub fn admission_warnings(object: &Value) -> Vec<String> {
    quorate_api::unknown_fields::unknown_fields(object)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Answers one AdmissionRequest for an `Etcd`.
pub fn review_etcd(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let to_value = |o: &DynamicObject| serde_json::to_value(o).ok();
    let object = request.object.as_ref().and_then(to_value);
    let old = request.old_object.as_ref().and_then(to_value);
    let verdict = judge_etcd(&request.operation, object.as_ref(), old.as_ref());
    let key = object_key(request);
    tracing::debug!(etcd = %key, operation = ?request.operation, %verdict, "Etcd admission");
    match verdict {
        EtcdVerdict::Allowed => {
            let mut allowed = AdmissionResponse::from(request);
            allowed.warnings = object
                .as_ref()
                .map(admission_warnings)
                .filter(|w| !w.is_empty());
            allowed
        }
        EtcdVerdict::Invalid(errors) => {
            refuse_invalid(request, invalid_message(&key, &errors), &errors)
        }
        EtcdVerdict::Unreadable(u) => {
            refuse_unreadable(request, unreadable_message(&key, &u), &u.path, &u.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn etcd(replicas: i64, delta: &str, gc: &str) -> Value {
        json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "Etcd",
            "metadata": { "name": "etcd-main", "namespace": "shoot" },
            "spec": {
                "replicas": replicas,
                "labels": { "app": "etcd-main" },
                "etcd": {},
                "backup": {
                    "deltaSnapshotPeriod": delta,
                    "garbageCollectionPeriod": gc,
                },
            },
        })
    }

    fn typed(value: &Value) -> Etcd {
        decode_etcd(value).expect("decodes")
    }

    #[test]
    fn the_old_peer_urls_spelling_is_allowed_with_a_warning() {
        let mut e = etcd(3, "20s", "1m");
        e["spec"]["etcd"]["additionalAdvertisePeerUrls"] =
            json!([{"memberName": "etcd-main-0", "urls": ["http://a:2380"]}]);
        assert_eq!(
            judge_etcd(&Operation::Create, Some(&e), None),
            EtcdVerdict::Allowed
        );
        assert_eq!(
            admission_warnings(&e),
            [
                "spec.etcd.additionalAdvertisePeerUrls: deprecated spelling, read as \"additionalAdvertisePeerURLs\"; rename it to \"additionalAdvertisePeerURLs\""
            ]
        );
        assert!(admission_warnings(&etcd(3, "20s", "1m")).is_empty());
    }

    #[test]
    fn a_valid_etcd_is_allowed_on_create() {
        let e = etcd(3, "20s", "1m");
        assert_eq!(
            judge_etcd(&Operation::Create, Some(&e), None),
            EtcdVerdict::Allowed
        );
    }

    #[test]
    fn create_refuses_with_exactly_the_errors_local_mode_reports() {
        let e = etcd(3, "20 seconds", "1m");
        let EtcdVerdict::Invalid(errors) = judge_etcd(&Operation::Create, Some(&e), None) else {
            panic!("not refused")
        };
        let local = validate(&typed(&e)).expect_err("local mode refuses it too");
        assert_eq!(errors, local);
        let message = invalid_message("shoot/etcd-main", &errors);
        assert_eq!(
            message,
            "Etcd shoot/etcd-main is invalid:\nspec.backup.deltaSnapshotPeriod: \"20 seconds\" is \
             not a duration; use Go duration syntax such as \"20s\" or \"1m30s\""
        );
    }

    /// The migration window for clear backups: a time, or the webhook refuses it with the
    /// message local mode gives (an update of the annotation alone is checked by the spec flow,
    /// as every annotation is).
    #[test]
    fn the_plaintext_window_must_be_a_time() {
        let mut e = etcd(3, "20s", "1m");
        e["spec"]["backup"]["store"] =
            json!({"provider": "S3", "container": "backups", "prefix": "main"});
        e["metadata"]["annotations"] = json!({
            "quorate.io/backup-encryption-secret": "backup-keys",
            "quorate.io/accept-plaintext-before": "2026-11-20T10:00:00Z",
        });
        assert_eq!(
            judge_etcd(&Operation::Create, Some(&e), None),
            EtcdVerdict::Allowed
        );
        let mut bad = e.clone();
        bad["metadata"]["annotations"]["quorate.io/accept-plaintext-before"] = json!("last week");
        let EtcdVerdict::Invalid(errors) = judge_etcd(&Operation::Create, Some(&bad), None) else {
            panic!("not refused")
        };
        let message = invalid_message("shoot/etcd-main", &errors);
        assert!(
            message.contains(
                "metadata.annotations[quorate.io/accept-plaintext-before]: \"last week\" is not \
                 an RFC 3339 time"
            ),
            "{message}"
        );
        let local = validate(&typed(&bad)).expect_err("local mode refuses it too");
        assert_eq!(errors, local);
    }

    #[test]
    fn every_problem_gets_its_own_line() {
        let e = etcd(-1, "20s", "10s");
        let EtcdVerdict::Invalid(errors) = judge_etcd(&Operation::Create, Some(&e), None) else {
            panic!("not refused")
        };
        let message = invalid_message("shoot/etcd-main", &errors);
        let lines: Vec<&str> = message.lines().collect();
        assert_eq!(lines.len(), 3, "{message}");
        assert!(lines[1].starts_with("spec.replicas: "), "{message}");
        assert!(
            lines[2].starts_with("spec.backup.garbageCollectionPeriod: \"10s\" must be greater"),
            "{message}"
        );
    }

    #[test]
    fn a_replicas_change_during_an_unfinished_scale_is_refused_like_local_mode() {
        let mut old = etcd(5, "20s", "1m");
        old["status"] = json!({ "conditions": [{
            "type": "ScaleOperationComplete", "status": "False", "reason": "ScalingIn",
            "message": "e-4 leaves", "lastTransitionTime": "2026-01-01T00:00:00Z",
            "lastUpdateTime": "2026-01-01T00:00:00Z",
        }]});
        let new = etcd(1, "20s", "1m");
        let EtcdVerdict::Invalid(errors) = judge_etcd(&Operation::Update, Some(&new), Some(&old))
        else {
            panic!("not refused")
        };
        assert_eq!(
            errors,
            validate_update(&typed(&old), &typed(&new)).expect_err("local refuses")
        );
        assert!(errors.to_string().contains("unfinished"), "{errors}");
        let finished = etcd(5, "20s", "1m");
        for to in [0, 3] {
            assert_eq!(
                judge_etcd(
                    &Operation::Update,
                    Some(&etcd(to, "20s", "1m")),
                    Some(&finished)
                ),
                EtcdVerdict::Allowed,
                "5 -> {to}"
            );
        }
    }

    #[test]
    fn metadata_only_updates_of_an_invalid_etcd_are_allowed() {
        let old = etcd(3, "20 seconds", "1m");
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!([]);
        assert_eq!(
            judge_etcd(&Operation::Update, Some(&new), Some(&old)),
            EtcdVerdict::Allowed
        );
        new["spec"]["replicas"] = json!(5);
        assert!(matches!(
            judge_etcd(&Operation::Update, Some(&new), Some(&old)),
            EtcdVerdict::Invalid(_)
        ));
    }

    #[test]
    fn an_undecodable_stored_object_still_lets_a_valid_update_through() {
        let mut old = etcd(3, "20s", "1m");
        old["spec"]["replicas"] = json!("three");
        let new = etcd(1, "20s", "1m");
        assert_eq!(
            judge_etcd(&Operation::Update, Some(&new), Some(&old)),
            EtcdVerdict::Allowed
        );
    }

    #[test]
    fn wrong_types_are_refused_with_the_field() {
        let mut e = etcd(3, "20s", "1m");
        e["spec"]["replicas"] = json!("three");
        let EtcdVerdict::Unreadable(u) = judge_etcd(&Operation::Create, Some(&e), None) else {
            panic!("not refused")
        };
        assert_eq!(u.path, "spec.replicas");
        let message = unreadable_message("shoot/etcd-main", &u);
        assert!(
            message.starts_with(
                "Etcd shoot/etcd-main cannot be read as druid.gardener.cloud/v1alpha1: \
                 spec.replicas: invalid type: string \"three\""
            ),
            "{message}"
        );
    }

    #[test]
    fn delete_and_connect_are_not_judged() {
        assert_eq!(
            judge_etcd(&Operation::Delete, None, None),
            EtcdVerdict::Allowed
        );
        assert_eq!(
            judge_etcd(&Operation::Connect, None, None),
            EtcdVerdict::Allowed
        );
        assert!(matches!(
            judge_etcd(&Operation::Create, None, None),
            EtcdVerdict::Unreadable(_)
        ));
    }
}
