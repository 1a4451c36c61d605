//! What the operator creates for an `Etcd`'s agents (Role, RoleBinding, member and snapshot
//! leases, and optionally the ConfigMap), created directly, so agent-side tests can run without
//! an operator. Rendered by the operator's own builders, so they cannot drift from it.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::PostParams;
use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::components::config_map::{self, CLUSTER_CONFIG_KEY};
use quorate_core::components::{
    ComponentContext, member_leases, role, role_binding, snapshot_leases,
};

/// Creates the Role, RoleBinding and leases of `etcd` in its namespace, and its ConfigMap when
/// `config` is given: the rendered one for `Rendered`, or the rendered one with `cluster.json`
/// replaced (loopback URLs the test's own etcd listens on). Panics on failure: test setup.
pub async fn create_agent_objects(client: &Client, etcd: &Etcd, config: AgentConfig<'_>) {
    let ns = etcd.metadata.namespace.clone().unwrap_or_default();
    let pp = PostParams::default();
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&pp, &role::build(etcd, etcd.spec.replicas).expect("role"))
        .await
        .expect("create Role");
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&pp, &role_binding::build(etcd).expect("binding"))
        .await
        .expect("create RoleBinding");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let all = member_leases::build(etcd, etcd.spec.replicas)
        .expect("member leases")
        .into_iter()
        .chain(snapshot_leases::build(etcd).expect("snapshot leases"));
    for lease in all {
        leases.create(&pp, &lease).await.expect("create lease");
    }
    let ctx = ComponentContext::new("quorate:test", "alpine:test");
    let mut cm = config_map::build(etcd, &ctx).expect("config map");
    match config {
        AgentConfig::None => return,
        AgentConfig::Rendered => {}
        AgentConfig::Replaced(config) => {
            cm.data.get_or_insert_default().insert(
                CLUSTER_CONFIG_KEY.to_string(),
                serde_json::to_string_pretty(config).expect("json"),
            );
        }
    }
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&pp, &cm)
        .await
        .expect("create ConfigMap");
}

/// Which ConfigMap [`create_agent_objects`] creates.
#[derive(Clone, Copy, Debug)]
pub enum AgentConfig<'a> {
    /// None.
    None,
    /// The one the operator renders.
    Rendered,
    /// The rendered one with this `cluster.json`.
    Replaced(&'a ClusterConfig),
}
