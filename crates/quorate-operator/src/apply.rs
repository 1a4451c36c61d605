//! Server-side apply and deletion of the components, typed or (for the PodDisruptionBudget,
//! whose API version depends on the cluster) dynamic. One field manager owns everything the
//! operator writes, so a changed desired state replaces the old one field by field and fields
//! other writers own (the agents' lease renewals) are left alone.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

use crate::error::Error;

/// The field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = "quorate-operator";

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Applies a typed namespaced object (its metadata carries name and namespace).
pub async fn apply<K>(client: &Client, object: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
{
    let meta = object.meta();
    let (namespace, name) = (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    );
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    api.patch(&name, &apply_params(), &Patch::Apply(object))
        .await
        .map_err(Error::kube("apply", K::kind(&()), &namespace, &name))
}

/// Applies a manifest of kind `gvk` (with `apiVersion`, `kind` and `metadata`).
pub async fn apply_manifest(
    client: &Client,
    gvk: &GroupVersionKind,
    plural: &str,
    manifest: &serde_json::Value,
) -> Result<(), Error> {
    let namespace = manifest["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
    let resource = ApiResource::from_gvk_with_plural(gvk, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    api.patch(name, &apply_params(), &Patch::Apply(manifest))
        .await
        .map(|_| ())
        .map_err(Error::kube("apply", gvk.kind.clone(), namespace, name))
}

/// Deletes an object; absent is fine. Dependents go in the background (pods of a deleted
/// StatefulSet, for instance), PVCs stay, as in druid.
pub async fn delete_if_present(
    api: &Api<DynamicObject>,
    kind: &str,
    name: &str,
) -> Result<(), Error> {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Kube {
            action: "delete",
            kind: kind.to_string(),
            namespace: api.namespace().unwrap_or_default().to_string(),
            name: name.to_string(),
            source: Box::new(source),
        }),
    }
}
