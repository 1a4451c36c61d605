//! Scenario 6: deleting an `Etcd` removes every component the operator made for it.

use std::time::{Duration, Instant};

use quorate_e2e::{E2eEnv, Scenario, wait_for};

/// Every kind of component druid makes, for `kubectl get`.
const COMPONENT_KINDS: &str = "statefulsets,services,configmaps,serviceaccounts,roles,rolebindings,leases,poddisruptionbudgets,pods";

/// `kubectl delete etcd` returns once the finalizer is gone, and by then no component is left:
/// StatefulSet, Services, ConfigMap, ServiceAccount, Role, RoleBinding, member and snapshot
/// Leases, PodDisruptionBudget, and the pods with them. The volume claims stay, as with
/// druid and with any StatefulSet: data is never deleted implicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_deleting_the_etcd_removes_every_component() {
    let Some(env) = E2eEnv::from_env_or_skip("s6_deleting_the_etcd_removes_every_component") else {
        return;
    };
    let mut s = Scenario::start(&env, "s6-delete").await;
    let ns = s.namespace.clone();
    let name = "etcd-gone";
    s.create_ready_etcd(name, 1, true).await;
    let selector = format!("app.kubernetes.io/part-of={name}");
    let components = || async {
        s.cluster
            .kubectl(&[
                "-n",
                &ns,
                "get",
                COMPONENT_KINDS,
                "-l",
                &selector,
                "-o",
                "name",
            ])
            .await
            .ok()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let before = components().await;
    println!("  components: {before:?}");
    for kind in [
        "statefulset.apps/",
        "service/",
        "configmap/",
        "serviceaccount/",
        "role.rbac.authorization.k8s.io/",
        "rolebinding.rbac.authorization.k8s.io/",
        "lease.coordination.k8s.io/",
        "poddisruptionbudget.policy/",
    ] {
        assert!(
            before.iter().any(|c| c.starts_with(kind)),
            "no {kind} labelled {selector}: {before:?}"
        );
    }

    let t = Instant::now();
    s.cluster
        .kubectl(&["-n", &ns, "delete", "etcd", name, "--timeout=120s"])
        .await
        .ok();
    let left = wait_for(
        "no component left",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let left = components().await;
            if left.is_empty() {
                Ok(left)
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;
    assert!(left.is_empty());
    let deleted = t.elapsed().as_secs_f64();
    s.measure(
        "kubectl delete etcd→no component left",
        format!("{deleted:.1} s"),
    );
    s.record_number("delete_seconds", format!("{deleted:.1}"));
    s.pass().await;
}
