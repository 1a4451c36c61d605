//! Scenario 8: the life after day one: a 5-member cluster shrinks to 3 under a writer, and a
//! cluster with backups hibernates and wakes at the same revision.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams};
use quorate_api::Etcd;
use quorate_e2e::etcd::{condition_status, fully_ready};
use quorate_e2e::manifests::{EtcdShape, canary_pod};
use quorate_e2e::members::{
    canary_totals, count_prefix, etcdctl, local_value, member_list, revision, wait_canary_writing,
    wait_fully_ready,
};
use quorate_e2e::{E2eEnv, Scenario, namespace_state, status_summary, wait_for};

use crate::READY_TIMEOUT;

/// The `ScaleOperationComplete` condition's reason.
fn scale_reason(etcd: &Etcd) -> String {
    etcd.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "ScaleOperationComplete")
        })
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

async fn statefulset_replicas(s: &Scenario, name: &str) -> i32 {
    Api::<StatefulSet>::namespaced(s.cluster.client.clone(), &s.namespace)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|s| s.spec?.replicas)
        .unwrap_or(-1)
}

async fn claims(s: &Scenario) -> Vec<String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(s.cluster.client.clone(), &s.namespace);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    names
}

/// 5 → 3 while `quorate canary` writes with a 5 s write timeout: members 4 and 3 leave etcd's
/// membership one at a time (the leader handing over first if it leaves), the StatefulSet
/// shrinks only after they left, their PVCs and leases are deleted, and no write fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_scale_in_five_to_three_under_a_canary() {
    let Some(env) = E2eEnv::from_env_or_skip("s8_scale_in_five_to_three_under_a_canary") else {
        return;
    };
    let mut s = Scenario::start(&env, "s8-scale-in").await;
    let ns = s.namespace.clone();
    let name = "etcd-shrink";
    s.create_ready_etcd(name, 5, false).await;
    s.cluster
        .apply(&canary_pod(&env.image, name, &ns, "5s"))
        .await;
    let canary = format!("{name}-canary");
    wait_canary_writing(&s.cluster, &ns, &canary).await;

    let changed = Instant::now();
    let three = EtcdShape {
        reconcile: true,
        ..EtcdShape::new(name, &ns, 3)
    };
    s.cluster.apply(&three.yaml()).await;
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let pod0 = format!("{name}-0");
    let mut shrunk_at = None;
    let mut last = String::new();
    loop {
        let t = changed.elapsed().as_secs_f64();
        let replicas = statefulset_replicas(&s, name).await;
        if shrunk_at.is_none() && replicas == 3 {
            shrunk_at = Some(t);
            // The StatefulSet shrinks only once etcd no longer lists the members above 3.
            let list = member_list(&s.cluster, &ns, &pod0)
                .await
                .unwrap_or_default();
            assert!(
                list.iter()
                    .all(|m| m.name != format!("{name}-3") && m.name != format!("{name}-4")),
                "the StatefulSet shrank while etcd still listed a leaving member: {list:?}"
            );
        }
        let etcd = etcds.get(name).await.expect("the Etcd");
        if fully_ready(&etcd, 3, false) && scale_reason(&etcd) == "Complete" {
            break;
        }
        let state = format!(
            "{}; scale {}; sts {replicas}",
            status_summary(&etcd),
            scale_reason(&etcd)
        );
        if state != last {
            println!("  [{t:>6.1}s] {state}");
            last = state;
        }
        assert!(
            changed.elapsed() < READY_TIMEOUT,
            "timed out scaling in; last state: {last}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    s.measure(
        "apply→3 members, complete",
        format!("{:.1} s", changed.elapsed().as_secs_f64()),
    );
    s.record_number(
        "scale_in_seconds",
        format!("{:.1}", changed.elapsed().as_secs_f64()),
    );
    let list = member_list(&s.cluster, &ns, &pod0)
        .await
        .expect("member list");
    let mut names: Vec<&str> = list.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [pod0.as_str(), &format!("{name}-1"), &format!("{name}-2")]
    );
    assert!(list.iter().all(|m| !m.is_learner));

    wait_for(
        "the PVCs and leases of members 3 and 4 deleted",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            let claims = claims(&s).await;
            let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
            let lease_left = leases
                .get_opt(&format!("{name}-4"))
                .await
                .ok()
                .flatten()
                .is_some()
                || leases
                    .get_opt(&format!("{name}-3"))
                    .await
                    .ok()
                    .flatten()
                    .is_some();
            let expected: Vec<String> = (0..3).map(|i| format!("{name}-{name}-{i}")).collect();
            if claims == expected && !lease_left {
                Ok(())
            } else {
                Err(format!(
                    "PVCs {claims:?}, a departed member's lease left: {lease_left}"
                ))
            }
        },
    )
    .await;

    let totals = canary_totals(&s.cluster, &ns, &canary)
        .await
        .expect("canary totals");
    s.writer_held(&totals, 5000);
    let through = totals["acknowledged_through"].as_u64().unwrap_or(0);
    for i in 0..3 {
        let stored = count_prefix(&s.cluster, &ns, &format!("{name}-{i}"), "canary/").await;
        assert!(
            stored >= through,
            "{through} writes acknowledged, {name}-{i} holds {stored}"
        );
    }
    s.pass().await;
}

/// `spec.replicas: 0` takes a final full snapshot, then stops every pod and keeps the volumes;
/// `spec.replicas: 3` wakes the members on their own data: same member IDs, same revision,
/// every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8b_hibernate_and_wake_at_the_same_revision() {
    let Some(env) = E2eEnv::from_env_or_skip("s8b_hibernate_and_wake_at_the_same_revision") else {
        return;
    };
    let mut s = Scenario::start(&env, "s8b-hibernate").await;
    let ns = s.namespace.clone();
    let name = "etcd-sleepy";
    s.create_ready_etcd(name, 3, true).await;
    let pod0 = format!("{name}-0");
    for i in 0..5 {
        etcdctl(
            &s.cluster,
            &ns,
            &pod0,
            &["put", &format!("e2e/s8/{i}"), &format!("v{i}")],
        )
        .await
        .ok();
    }
    let written = revision(&s.cluster, &ns, &pod0).await;
    let mut ids: Vec<u64> = member_list(&s.cluster, &ns, &pod0)
        .await
        .expect("member list")
        .iter()
        .map(|m| m.id)
        .collect();
    ids.sort();

    let bucket = s.bucket_dir().display().to_string();
    let shape = |replicas| EtcdShape {
        local_bucket: Some(bucket.as_str()),
        reconcile: true,
        ..EtcdShape::new(name, &ns, replicas)
    };
    let t = Instant::now();
    s.cluster.apply(&shape(0).yaml()).await;
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let etcd = wait_for(
        "hibernated",
        READY_TIMEOUT,
        Duration::from_secs(1),
        || async {
            let etcd = etcds.get(name).await.map_err(|e| e.to_string())?;
            if scale_reason(&etcd) == "Hibernated" && statefulset_replicas(&s, name).await == 0 {
                Ok(etcd)
            } else {
                Err(format!(
                    "{}; scale {}",
                    status_summary(&etcd),
                    scale_reason(&etcd)
                ))
            }
        },
    )
    .await;
    s.measure(
        "apply→hibernated",
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    );
    assert_eq!(
        condition_status(etcd.status.as_ref(), "ScaleOperationComplete"),
        "True"
    );
    let message = etcd
        .status
        .as_ref()
        .and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == "ScaleOperationComplete")
        })
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let snapshot: i64 = message
        .rsplit(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {message:?}"));
    assert!(
        snapshot >= written,
        "the final snapshot ({snapshot}) reaches the head ({written})"
    );
    let table = s
        .cluster
        .kubectl(&["-n", &ns, "get", "etcd", name])
        .await
        .ok();
    assert!(table.contains("Hibernated"), "{table}");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    wait_for(
        "no member pod",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            match pods.get_opt(&pod0).await {
                Ok(None) => Ok(()),
                _ => Err(namespace_state(&s.cluster.client, &ns).await),
            }
        },
    )
    .await;
    assert_eq!(claims(&s).await.len(), 3, "the volumes are kept");

    let t = Instant::now();
    s.cluster.apply(&shape(3).yaml()).await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    s.measure("apply→awake", format!("{:.1} s", t.elapsed().as_secs_f64()));
    let mut woke: Vec<u64> = member_list(&s.cluster, &ns, &pod0)
        .await
        .expect("member list")
        .iter()
        .map(|m| m.id)
        .collect();
    woke.sort();
    assert_eq!(woke, ids, "the members woke on their own data and IDs");
    assert_eq!(
        revision(&s.cluster, &ns, &pod0).await,
        written,
        "same revision"
    );
    for i in 0..3 {
        for k in 0..5 {
            assert_eq!(
                local_value(
                    &s.cluster,
                    &ns,
                    &format!("{name}-{i}"),
                    &format!("e2e/s8/{k}")
                )
                .await,
                format!("v{k}")
            );
        }
    }
    s.pass().await;
}
