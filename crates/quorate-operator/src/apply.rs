//! Server-side apply and deletion of the components. One field manager owns everything the
//! operator writes, so a changed desired state replaces the old one field by field and fields
//! other writers own (the agents' lease renewals) are left alone.

use std::fmt::Debug;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::{Client, Resource};
use quorate_core::components::DesiredObject;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;

/// The field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = "quorate-operator";

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Applies one desired component. The one way the operator writes a component, also used by the benchmark's
/// replay of its first pass.
pub async fn apply_component(client: &Client, object: DesiredObject<'_>) -> Result<(), Error> {
    match object {
        DesiredObject::PodDisruptionBudget(o) => apply(client, o).await,
        DesiredObject::ServiceAccount(o) => apply(client, o).await,
        DesiredObject::Role(o) => apply(client, o).await,
        DesiredObject::RoleBinding(o) => apply(client, o).await,
        DesiredObject::MemberLease(o) | DesiredObject::SnapshotLease(o) => apply(client, o).await,
        DesiredObject::ClientService(o) | DesiredObject::PeerService(o) => apply(client, o).await,
        DesiredObject::ConfigMap(o) => apply(client, o).await,
        DesiredObject::StatefulSet(o) => apply(client, o).await,
    }
}

/// Applies the StatefulSet and returns it as the API server stored it: an authoritative read
/// at that moment, which the rollout step uses instead of a GET of its own right after.
pub async fn apply_statefulset(
    client: &Client,
    sts: &k8s_openapi::api::apps::v1::StatefulSet,
) -> Result<k8s_openapi::api::apps::v1::StatefulSet, Error> {
    apply_returning(client, sts).await
}

/// Applies a typed namespaced object (its metadata carries name and namespace).
async fn apply<K>(client: &Client, object: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
{
    apply_returning(client, object).await.map(drop)
}

/// Applies a typed namespaced object and returns it as stored.
async fn apply_returning<K>(client: &Client, object: &K) -> Result<K, Error>
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

/// Deletes an object; absent is fine. Dependents go in the background (pods of a deleted
/// StatefulSet, for instance), PVCs stay, as in druid.
pub async fn delete_if_present<K>(api: &Api<K>, kind: &str, name: &str) -> Result<(), Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
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
