//! Metadata every managed object carries: the namespace of its `Etcd`, druid's labels
//! (`managed-by`, `part-of`, `component`, `name`) and a controller owner reference to the
//! `Etcd`, so garbage collection, the component-protection webhook and druid-aware tooling all
//! recognise the object.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use quorate_api::Etcd;
use quorate_api::names::component_labels;

use super::error::ComponentError;

/// Name, namespace and uid of an `Etcd`, checked once so builders need not repeat it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdIdentity {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl EtcdIdentity {
    /// The identity of `etcd`; an error names the first missing field.
    pub fn of(etcd: &Etcd) -> Result<Self, ComponentError> {
        let name = non_empty(etcd.metadata.name.as_deref());
        let missing = |field| ComponentError::MissingMetadata {
            field,
            name: name.clone().unwrap_or_default(),
        };
        Ok(Self {
            name: name.clone().ok_or_else(|| missing("name"))?,
            namespace: non_empty(etcd.metadata.namespace.as_deref())
                .ok_or_else(|| missing("namespace"))?,
            uid: non_empty(etcd.metadata.uid.as_deref()).ok_or_else(|| missing("uid"))?,
        })
    }

    /// The controller owner reference to the `Etcd`: deleting the `Etcd` deletes the object,
    /// and the object cannot outlive it by accident.
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: quorate_api::etcd::API_VERSION.to_string(),
            kind: quorate_api::etcd::KIND.to_string(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// Metadata of the managed object `resource_name` of kind `component` (one of
    /// [`quorate_api::names::component`]).
    pub fn object_meta(&self, component: &str, resource_name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(resource_name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(component_labels(&self.name, component, resource_name)),
            owner_references: Some(vec![self.owner_reference()]),
            ..ObjectMeta::default()
        }
    }
}

fn non_empty(value: Option<&str>) -> Option<String> {
    value.filter(|v| !v.is_empty()).map(str::to_string)
}

/// `base` with `overrides` laid over it (druid's `MergeMaps`: later maps win).
pub(crate) fn merged(
    base: &BTreeMap<String, String>,
    overrides: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = base.clone();
    out.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use quorate_api::EtcdSpec;

    /// An `Etcd` as the API server would hand it over.
    pub(crate) fn etcd(name: &str, replicas: i32) -> Etcd {
        let mut e = Etcd::new(
            name,
            EtcdSpec {
                replicas,
                ..EtcdSpec::default()
            },
        );
        e.metadata.namespace = Some("shoot".into());
        e.metadata.uid = Some("0a1b2c3d-0000-4000-8000-000000000001".into());
        e
    }

    #[test]
    fn owner_reference_is_a_blocking_controller_reference_to_the_etcd() {
        let id = EtcdIdentity::of(&etcd("etcd-main", 3)).unwrap();
        let r = id.owner_reference();
        assert_eq!(r.api_version, "druid.gardener.cloud/v1alpha1");
        assert_eq!(r.kind, "Etcd");
        assert_eq!(r.name, "etcd-main");
        assert_eq!(r.uid, "0a1b2c3d-0000-4000-8000-000000000001");
        assert_eq!(r.controller, Some(true));
        assert_eq!(r.block_owner_deletion, Some(true));
    }

    #[test]
    fn object_meta_has_druids_four_labels_and_the_namespace() {
        let id = EtcdIdentity::of(&etcd("etcd-main", 3)).unwrap();
        let m = id.object_meta("etcd-role", "druid.gardener.cloud:etcd:etcd-main");
        assert_eq!(m.namespace.as_deref(), Some("shoot"));
        let labels = m.labels.unwrap();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "etcd-druid");
        assert_eq!(labels["app.kubernetes.io/part-of"], "etcd-main");
        assert_eq!(labels["app.kubernetes.io/component"], "etcd-role");
        assert_eq!(
            labels["app.kubernetes.io/name"],
            "druid.gardener.cloud-etcd-etcd-main"
        );
        assert_eq!(m.owner_references.unwrap().len(), 1);
    }

    #[test]
    fn missing_metadata_is_named() {
        let mut e = etcd("etcd-main", 1);
        e.metadata.uid = None;
        assert_eq!(
            EtcdIdentity::of(&e),
            Err(ComponentError::MissingMetadata {
                field: "uid",
                name: "etcd-main".into()
            })
        );
        e.metadata.namespace = Some(String::new());
        let err = EtcdIdentity::of(&e).unwrap_err();
        assert!(err.to_string().contains("metadata.namespace"), "{err}");
    }

    #[test]
    fn merged_lets_the_later_map_win() {
        let a = BTreeMap::from([("x".to_string(), "1".to_string())]);
        let b = BTreeMap::from([
            ("x".to_string(), "2".to_string()),
            ("y".to_string(), "3".to_string()),
        ]);
        let m = merged(&a, &b);
        assert_eq!(m["x"], "2");
        assert_eq!(m["y"], "3");
    }
}
