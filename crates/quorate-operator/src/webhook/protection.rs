//! Component protection, as etcd-druid's `etcdcomponentprotection` webhook: the resources the
//! operator manages for an `Etcd` (labelled `app.kubernetes.io/managed-by=etcd-druid` and
//! `app.kubernetes.io/part-of=<etcd>`) may be changed or deleted only by the operator itself, by
//! exempt service accounts, by the etcd pods renewing their leases, or by anyone once the `Etcd`
//! carries `druid.gardener.cloud/disable-etcd-component-protection` or is gone or going. A hand
//! edit would otherwise be silently undone by the next reconcile, or break the cluster first.
//!
//! The decision is a pure function of the request ([`ComponentRequest`]) and of what is known
//! about the owning `Etcd` ([`EtcdFacts`]); reading that `Etcd` is the caller's job, and only
//! needed when [`first_step`] asks for it.

use std::collections::BTreeMap;
use std::fmt;

use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use quorate_api::annotations::DISABLE_ETCD_COMPONENT_PROTECTION;
use quorate_api::names::{LABEL_MANAGED_BY, LABEL_PART_OF, MANAGED_BY_VALUE, service_account_name};

use super::service_account_username;

/// The kinds the operator creates per `Etcd`, as (API group, kind); requests for other kinds are
/// allowed whatever their labels say.
pub const PROTECTED_KINDS: &[(&str, &str)] = &[
    ("", "ServiceAccount"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("coordination.k8s.io", "Lease"),
    ("policy", "PodDisruptionBudget"),
    ("", "Service"),
    ("", "ConfigMap"),
    ("apps", "StatefulSet"),
];

/// Who may change protected components besides anyone, once protection is off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtectionConfig {
    /// The operator's own username (`system:serviceaccount:<ns>:<sa>`): it creates, updates and
    /// deletes the components, so it is never refused.
    pub operator_user: String,
    /// Further usernames that are never refused (druid's `exemptServiceAccounts`), e.g. a
    /// backup tool that patches the StatefulSet.
    pub exempt_users: Vec<String>,
}

/// The facts of one admission request that the decision depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentRequest {
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// API group of the object's kind (`""` for the core group).
    pub group: String,
    /// The object's kind, e.g. `ConfigMap`.
    pub kind: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The (possibly impersonated) user making the request.
    pub username: String,
    /// Labels of the stored object (UPDATE, DELETE), if it was sent.
    pub old_labels: Option<BTreeMap<String, String>>,
    /// Labels of the object after the request (CREATE, UPDATE), if it was sent.
    pub new_labels: Option<BTreeMap<String, String>>,
}

impl ComponentRequest {
    /// The facts of an AdmissionRequest.
    pub fn from_admission(request: &AdmissionRequest<DynamicObject>) -> ComponentRequest {
        let labels = |o: &Option<DynamicObject>| o.as_ref().map(|o| o.labels().clone());
        ComponentRequest {
            operation: request.operation.clone(),
            group: request.kind.group.clone(),
            kind: request.kind.kind.clone(),
            namespace: request.namespace.clone().unwrap_or_default(),
            name: request.name.clone(),
            username: request.user_info.username.clone().unwrap_or_default(),
            old_labels: labels(&request.old_object),
            new_labels: labels(&request.object),
        }
    }

    /// The `Etcd` this object is managed for, if it is managed at all. The stored object's labels
    /// count first, so removing the labels in an UPDATE does not escape protection.
    pub fn owning_etcd(&self) -> Option<&str> {
        [&self.old_labels, &self.new_labels]
            .into_iter()
            .flatten()
            .find_map(|labels| {
                let managed =
                    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE);
                labels
                    .get(LABEL_PART_OF)
                    .filter(|etcd| managed && !etcd.is_empty())
                    .map(String::as_str)
            })
    }

    fn is_protected_kind(&self) -> bool {
        PROTECTED_KINDS
            .iter()
            .any(|(group, kind)| *group == self.group && *kind == self.kind)
    }
}

/// What is known about the `Etcd` a component belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdFacts {
    /// There is no such `Etcd` (in the component's namespace).
    Missing,
    /// The `Etcd` has a deletionTimestamp: its components are going away with it.
    Deleting,
    /// The `Etcd` exists.
    Present {
        /// It carries `druid.gardener.cloud/disable-etcd-component-protection`.
        protection_disabled: bool,
    },
}

/// Why a request was allowed, for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllowReason {
    /// CREATE or CONNECT: only UPDATE and DELETE are guarded.
    OperationNotGuarded,
    /// Not one of [`PROTECTED_KINDS`].
    KindNotProtected,
    /// Not labelled as managed for an `Etcd`.
    NotManaged,
    /// The operator itself.
    OperatorUser,
    /// One of the exempt users.
    ExemptUser,
    /// Kubernetes' own controllers (kube-controller-manager, or its per-controller
    /// ServiceAccounts in `kube-system`): the token controller adds a ServiceAccount's token,
    /// the garbage collector removes dependents. Refusing them leaves the pods without a token.
    ControlPlane,
    /// The etcd pods' ServiceAccount renewing a Lease.
    LeaseRenewal,
    /// The `Etcd` has the disable-protection annotation.
    ProtectionDisabled,
    /// The `Etcd` does not exist.
    EtcdMissing,
    /// The `Etcd` is being deleted.
    EtcdDeleting,
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let it through.
    Allow(AllowReason),
    /// Refuse it with this message (which says how to proceed).
    Deny(String),
}

/// What the decision needs next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// Decided from the request alone.
    Done(Decision),
    /// The decision depends on this `Etcd` (in the request's namespace); pass its facts to
    /// [`decide_with_etcd`].
    LookUpEtcd(&'a str),
}

/// Everything that can be decided without reading the `Etcd`, in druid's order: unguarded
/// operations and kinds, unmanaged objects, the operator, exempt users, lease renewals.
pub fn first_step<'a>(request: &'a ComponentRequest, config: &ProtectionConfig) -> Step<'a> {
    if !matches!(request.operation, Operation::Update | Operation::Delete) {
        return Step::Done(Decision::Allow(AllowReason::OperationNotGuarded));
    }
    if !request.is_protected_kind() {
        return Step::Done(Decision::Allow(AllowReason::KindNotProtected));
    }
    let Some(etcd) = request.owning_etcd() else {
        return Step::Done(Decision::Allow(AllowReason::NotManaged));
    };
    if request.username == config.operator_user {
        return Step::Done(Decision::Allow(AllowReason::OperatorUser));
    }
    if config.exempt_users.contains(&request.username) {
        return Step::Done(Decision::Allow(AllowReason::ExemptUser));
    }
    if is_control_plane(&request.username) {
        return Step::Done(Decision::Allow(AllowReason::ControlPlane));
    }
    let etcd_user = service_account_username(&request.namespace, &service_account_name(etcd));
    if request.kind == "Lease"
        && request.operation == Operation::Update
        && request.username == etcd_user
    {
        return Step::Done(Decision::Allow(AllowReason::LeaseRenewal));
    }
    Step::LookUpEtcd(etcd)
}

/// Whether `username` is one of Kubernetes' own controllers.
fn is_control_plane(username: &str) -> bool {
    username == "system:kube-controller-manager"
        || username.starts_with("system:serviceaccount:kube-system:")
}

/// The decision once the owning `Etcd` (named `etcd`) is known.
pub fn decide_with_etcd(request: &ComponentRequest, etcd: &str, facts: &EtcdFacts) -> Decision {
    match facts {
        EtcdFacts::Missing => Decision::Allow(AllowReason::EtcdMissing),
        EtcdFacts::Deleting => Decision::Allow(AllowReason::EtcdDeleting),
        EtcdFacts::Present {
            protection_disabled: true,
        } => Decision::Allow(AllowReason::ProtectionDisabled),
        EtcdFacts::Present {
            protection_disabled: false,
        } => Decision::Deny(denial_message(request, etcd)),
    }
}

/// [`first_step`] and [`decide_with_etcd`] in one, for tests that already know the facts.
#[cfg(test)]
pub fn decide(
    request: &ComponentRequest,
    config: &ProtectionConfig,
    facts: &EtcdFacts,
) -> Decision {
    match first_step(request, config) {
        Step::Done(decision) => decision,
        Step::LookUpEtcd(etcd) => decide_with_etcd(request, etcd, facts),
    }
}

/// Names the resource, the `Etcd`, who was refused, and the two ways forward.
pub fn denial_message(request: &ComponentRequest, etcd: &str) -> String {
    let ns = &request.namespace;
    let action = match request.operation {
        Operation::Delete => "delete",
        _ => "change",
    };
    format!(
        "{kind} {ns}/{name} is managed by quorate for Etcd {ns}/{etcd} and protected: user {user:?} \
         may not {action} it. Change the Etcd instead and the operator updates its components; \
         to {action} it by hand, first set the annotation {DISABLE_ETCD_COMPONENT_PROTECTION} on \
         the Etcd (kubectl annotate etcd -n {ns} {etcd} {DISABLE_ETCD_COMPONENT_PROTECTION}=true) \
         and remove it afterwards",
        kind = request.kind,
        name = request.name,
        user = request.username,
    )
}

impl fmt::Display for AllowReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllowReason::OperationNotGuarded => "operation not guarded",
            AllowReason::KindNotProtected => "kind not protected",
            AllowReason::NotManaged => "not managed for an Etcd",
            AllowReason::OperatorUser => "operator",
            AllowReason::ExemptUser => "exempt user",
            AllowReason::ControlPlane => "Kubernetes controller",
            AllowReason::LeaseRenewal => "lease renewal by the etcd pods",
            AllowReason::ProtectionDisabled => "protection disabled on the Etcd",
            AllowReason::EtcdMissing => "the Etcd does not exist",
            AllowReason::EtcdDeleting => "the Etcd is being deleted",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATOR: &str = "system:serviceaccount:quorate-system:quorate-operator";
    const ADMIN: &str = "jane";

    fn config() -> ProtectionConfig {
        ProtectionConfig {
            operator_user: OPERATOR.to_string(),
            exempt_users: vec!["system:serviceaccount:backup:velero".to_string()],
        }
    }

    fn managed(etcd: &str) -> Option<BTreeMap<String, String>> {
        Some(quorate_api::names::default_labels(etcd))
    }

    fn request(op: Operation, group: &str, kind: &str, user: &str) -> ComponentRequest {
        ComponentRequest {
            operation: op,
            group: group.to_string(),
            kind: kind.to_string(),
            namespace: "shoot".to_string(),
            name: "etcd-main-config".to_string(),
            username: user.to_string(),
            old_labels: managed("etcd-main"),
            new_labels: managed("etcd-main"),
        }
    }

    fn config_map(op: Operation, user: &str) -> ComponentRequest {
        request(op, "", "ConfigMap", user)
    }

    /// `user` updating the managed ServiceAccount `etcd-main`.
    fn sa_update(user: &str) -> ComponentRequest {
        ComponentRequest {
            name: "etcd-main".into(),
            ..request(Operation::Update, "", "ServiceAccount", user)
        }
    }

    const PROTECTED: EtcdFacts = EtcdFacts::Present {
        protection_disabled: false,
    };

    #[test]
    fn an_admin_may_neither_change_nor_delete_a_managed_config_map() {
        for (op, verb) in [(Operation::Update, "change"), (Operation::Delete, "delete")] {
            let r = config_map(op, ADMIN);
            assert_eq!(first_step(&r, &config()), Step::LookUpEtcd("etcd-main"));
            let Decision::Deny(message) = decide(&r, &config(), &PROTECTED) else {
                panic!("allowed")
            };
            assert_eq!(
                message,
                format!(
                    "ConfigMap shoot/etcd-main-config is managed by quorate for Etcd \
                     shoot/etcd-main and protected: user \"jane\" may not {verb} it. Change the \
                     Etcd instead and the operator updates its components; to {verb} it by hand, \
                     first set the annotation druid.gardener.cloud/disable-etcd-component-protection \
                     on the Etcd (kubectl annotate etcd -n shoot etcd-main \
                     druid.gardener.cloud/disable-etcd-component-protection=true) and remove it \
                     afterwards"
                )
            );
        }
    }

    #[test]
    fn every_managed_kind_is_protected() {
        for (group, kind) in PROTECTED_KINDS {
            let r = request(Operation::Update, group, kind, ADMIN);
            assert!(
                matches!(decide(&r, &config(), &PROTECTED), Decision::Deny(_)),
                "{kind}"
            );
        }
        let r = request(Operation::Update, "", "Secret", ADMIN);
        assert_eq!(
            decide(&r, &config(), &PROTECTED),
            Decision::Allow(AllowReason::KindNotProtected)
        );
        // Same kind name in another group is not ours.
        let r = request(Operation::Update, "example.com", "ConfigMap", ADMIN);
        assert_eq!(
            decide(&r, &config(), &PROTECTED),
            Decision::Allow(AllowReason::KindNotProtected)
        );
    }

    #[test]
    fn create_and_connect_are_not_guarded() {
        for op in [Operation::Create, Operation::Connect] {
            assert_eq!(
                first_step(&config_map(op, ADMIN), &config()),
                Step::Done(Decision::Allow(AllowReason::OperationNotGuarded))
            );
        }
    }

    #[test]
    fn the_operator_and_exempt_users_are_always_allowed() {
        for op in [Operation::Update, Operation::Delete] {
            assert_eq!(
                first_step(&config_map(op.clone(), OPERATOR), &config()),
                Step::Done(Decision::Allow(AllowReason::OperatorUser))
            );
            assert_eq!(
                first_step(
                    &config_map(op, "system:serviceaccount:backup:velero"),
                    &config()
                ),
                Step::Done(Decision::Allow(AllowReason::ExemptUser))
            );
        }
    }

    #[test]
    fn the_etcd_pods_may_renew_leases_but_not_delete_them_or_touch_other_kinds() {
        let etcd_sa = "system:serviceaccount:shoot:etcd-main";
        let renew = request(Operation::Update, "coordination.k8s.io", "Lease", etcd_sa);
        assert_eq!(
            first_step(&renew, &config()),
            Step::Done(Decision::Allow(AllowReason::LeaseRenewal))
        );
        let delete = request(Operation::Delete, "coordination.k8s.io", "Lease", etcd_sa);
        assert_eq!(
            first_step(&delete, &config()),
            Step::LookUpEtcd("etcd-main")
        );
        let other = request(Operation::Update, "", "ConfigMap", etcd_sa);
        assert_eq!(first_step(&other, &config()), Step::LookUpEtcd("etcd-main"));
        // Another Etcd's pods may not renew this one's leases.
        let foreign = request(
            Operation::Update,
            "coordination.k8s.io",
            "Lease",
            "system:serviceaccount:shoot:etcd-events",
        );
        assert_eq!(
            first_step(&foreign, &config()),
            Step::LookUpEtcd("etcd-main")
        );
    }

    #[test]
    fn the_etcd_decides_the_rest() {
        let r = config_map(Operation::Delete, ADMIN);
        assert_eq!(
            decide(
                &r,
                &config(),
                &EtcdFacts::Present {
                    protection_disabled: true
                }
            ),
            Decision::Allow(AllowReason::ProtectionDisabled)
        );
        assert_eq!(
            decide(&r, &config(), &EtcdFacts::Missing),
            Decision::Allow(AllowReason::EtcdMissing)
        );
        assert_eq!(
            decide(&r, &config(), &EtcdFacts::Deleting),
            Decision::Allow(AllowReason::EtcdDeleting)
        );
    }

    #[test]
    fn only_objects_labelled_for_an_etcd_are_protected() {
        let mut r = config_map(Operation::Update, ADMIN);
        r.old_labels = None;
        r.new_labels = Some(BTreeMap::from([(
            LABEL_PART_OF.to_string(),
            "etcd-main".to_string(),
        )]));
        assert_eq!(
            first_step(&r, &config()),
            Step::Done(Decision::Allow(AllowReason::NotManaged))
        );
        let mut other_manager = quorate_api::names::default_labels("etcd-main");
        other_manager.insert(LABEL_MANAGED_BY.to_string(), "helm".to_string());
        r.new_labels = Some(other_manager);
        assert_eq!(
            first_step(&r, &config()),
            Step::Done(Decision::Allow(AllowReason::NotManaged))
        );
    }

    #[test]
    fn removing_the_labels_does_not_escape_protection() {
        let mut r = config_map(Operation::Update, ADMIN);
        r.new_labels = Some(BTreeMap::new());
        assert_eq!(first_step(&r, &config()), Step::LookUpEtcd("etcd-main"));
        // Nor does relabelling it to another Etcd.
        r.new_labels = managed("etcd-other");
        assert_eq!(first_step(&r, &config()), Step::LookUpEtcd("etcd-main"));
    }

    #[test]
    fn request_facts_come_from_the_admission_request() {
        let review: kube::core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "1",
                    "kind": { "group": "", "version": "v1", "kind": "ConfigMap" },
                    "resource": { "group": "", "version": "v1", "resource": "configmaps" },
                    "name": "etcd-main-config",
                    "namespace": "shoot",
                    "operation": "DELETE",
                    "userInfo": { "username": "jane", "groups": ["system:masters"] },
                    "oldObject": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": "etcd-main-config",
                            "namespace": "shoot",
                            "labels": quorate_api::names::default_labels("etcd-main"),
                        },
                    },
                    "dryRun": false,
                },
            }))
            .expect("a review");
        let admission: AdmissionRequest<DynamicObject> = review.try_into().expect("a request");
        let r = ComponentRequest::from_admission(&admission);
        assert_eq!(r, {
            let mut want = config_map(Operation::Delete, ADMIN);
            want.new_labels = None;
            want
        });
    }

    #[test]
    fn kubernetes_own_controllers_are_let_through() {
        // The token controller adding the pods' ServiceAccount token (Kubernetes < 1.24): found
        // by the end-to-end run, where refusing it left the StatefulSet without pods.
        for user in [
            "system:kube-controller-manager",
            "system:serviceaccount:kube-system:token-cleaner",
            "system:serviceaccount:kube-system:generic-garbage-collector",
        ] {
            let r = sa_update(user);
            assert_eq!(
                first_step(&r, &config()),
                Step::Done(Decision::Allow(AllowReason::ControlPlane)),
                "{user}"
            );
        }
        // Someone else's ServiceAccount named like a controller is not.
        let r = sa_update("system:serviceaccount:shoot:kube-controller-manager");
        assert_eq!(first_step(&r, &config()), Step::LookUpEtcd("etcd-main"));
    }
}
