//! Scenario 9: a 3-member cluster with backups upgraded from etcd 3.4 to 3.5 under a writer,
//! then a pod template change (more CPU) rolled by quorate, one member pod at a time.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use quorate_api::Etcd;
use quorate_e2e::etcd::condition_status;
use quorate_e2e::manifests::{DEFAULT_CPU, EtcdShape, canary_pod};
use quorate_e2e::members::{
    PodIncarnations, canary_totals, count_prefix, wait_canary_writing, wait_fully_ready,
};
use quorate_e2e::{E2eEnv, Scenario, status_summary};

use crate::READY_TIMEOUT;

/// The etcd version a member's agent publishes on its lease.
async fn lease_versions(leases: &Api<Lease>, members: &[String]) -> Vec<String> {
    let mut versions = Vec::new();
    for m in members {
        let version = leases
            .get_opt(m)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.metadata.annotations)
            .and_then(|a| a.get("quorate.io/etcd-version").cloned())
            .unwrap_or_default();
        versions.push(version);
    }
    versions
}

/// The member whose lease names it the leader.
async fn leader(leases: &Api<Lease>, members: &[String]) -> String {
    for m in members {
        let holder = leases
            .get_opt(m)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default();
        if holder.ends_with(":Leader") {
            return m.clone();
        }
    }
    String::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s9_upgrade_3_4_to_3_5_and_a_rolling_update_under_a_canary() {
    let Some(env) =
        E2eEnv::from_env_or_skip("s9_upgrade_3_4_to_3_5_and_a_rolling_update_under_a_canary")
    else {
        return;
    };
    let mut s = Scenario::start(&env, "s9-upgrade").await;
    let ns = s.namespace.clone();
    let name = "etcd-upg";
    let bucket = s.bucket_dir().display().to_string();
    let v34 = EtcdShape {
        name,
        namespace: &ns,
        replicas: 3,
        local_bucket: Some(&bucket),
        peer_tls: false,
        reconcile: false,
        etcd_version: Some("3.4"),
        cpu: DEFAULT_CPU,
    };
    s.cluster.apply(&v34.yaml()).await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    let members: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let versions = lease_versions(&leases, &members).await;
    assert!(
        versions.iter().all(|v| v.starts_with("3.4.")),
        "{versions:?}"
    );

    s.cluster
        .apply(&canary_pod(&env.image, name, &ns, "5s"))
        .await;
    let canary = format!("{name}-canary");
    wait_canary_writing(&s.cluster, &ns, &canary).await;
    let mut seen = PodIncarnations::default();
    seen.observe(&pods, &members).await;
    let leader_before = leader(&leases, &members).await;

    // 1. The upgrade: etcd restarts in place in each pod, the leader's last.
    let upgrade = Instant::now();
    s.cluster
        .apply(
            &EtcdShape {
                reconcile: true,
                etcd_version: Some("3.5"),
                ..v34.clone()
            }
            .yaml(),
        )
        .await;
    loop {
        seen.observe(&pods, &members).await;
        let versions = lease_versions(&leases, &members).await;
        if versions.iter().all(|v| v.starts_with("3.5.")) {
            break;
        }
        assert!(
            upgrade.elapsed() < Duration::from_secs(300),
            "every member on etcd 3.5: {versions:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    s.measure(
        "upgrade 3.4 → 3.5 (apply → every member on 3.5)",
        format!("{:.1} s", upgrade.elapsed().as_secs_f64()),
    );
    for pod in &members {
        assert_eq!(
            seen.restarts(pod),
            0,
            "{pod} was not replaced for the upgrade"
        );
    }
    // The old leader restarted last, after handing leadership over.
    let log = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &leader_before, "-c", "etcd"])
        .await
        .ok();
    assert!(
        log.contains("moved leadership to an updated member before restarting"),
        "{leader_before} handed over before its restart:\n{log}"
    );
    let full_snapshots = std::fs::read_dir(s.bucket_dir().join("backups").join(name).join("v2"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("Full-"))
                .count()
        })
        .unwrap_or(0);
    assert!(
        full_snapshots >= 2,
        "a full snapshot was taken for the upgrade"
    );

    // 2. A pod template change: each pod replaced once, the leader's last.
    let leader_now = leader(&leases, &members).await;
    let rollout = Instant::now();
    s.cluster
        .apply(
            &EtcdShape {
                reconcile: true,
                etcd_version: Some("3.5"),
                cpu: "60m",
                ..v34.clone()
            }
            .yaml(),
        )
        .await;
    loop {
        seen.observe(&pods, &members).await;
        let etcd = etcds.get(name).await.expect("the Etcd");
        let replaced = members.iter().all(|m| seen.restarts(m) >= 1);
        if replaced && condition_status(etcd.status.as_ref(), "AllMembersUpdated") == "True" {
            break;
        }
        assert!(
            rollout.elapsed() < READY_TIMEOUT,
            "every member pod replaced: {}; {}",
            seen.summary(),
            status_summary(&etcd)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    s.measure(
        "rolling update of 3 pods (apply → AllMembersUpdated)",
        format!("{:.1} s", rollout.elapsed().as_secs_f64()),
    );
    let events: Api<Event> = Api::namespaced(s.cluster.client.clone(), &ns);
    let mut rolled: Vec<(String, String)> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RollingUpdate"))
        .map(|e| {
            let at = e.event_time.map(|t| t.0.to_string()).unwrap_or_default();
            (at, e.note.unwrap_or_default())
        })
        .collect();
    rolled.sort();
    let order: Vec<String> = rolled
        .iter()
        .filter_map(|(_, note)| {
            members
                .iter()
                .find(|m| note.starts_with(&format!("replacing {m} ")))
                .cloned()
        })
        .collect();
    s.measure("replacement order", order.join(", "));
    assert_eq!(order.len(), 3, "three replacements: {rolled:?}");
    assert_eq!(
        order.last(),
        Some(&leader_now),
        "the leader last: {rolled:?}"
    );
    for pod in &members {
        assert_eq!(seen.restarts(pod), 1, "{pod} replaced exactly once");
    }

    // The writer saw no failed write; every acknowledged write is there.
    let totals = canary_totals(&s.cluster, &ns, &canary)
        .await
        .expect("canary totals");
    s.measure(
        "writer",
        format!(
            "{} acknowledged, {} failed, longest write {} ms",
            totals["acknowledged"], totals["failed"], totals["longest_wait_ms"]
        ),
    );
    assert_eq!(totals["failed"], 0, "writes failed: {totals}");
    let through = totals["acknowledged_through"].as_u64().unwrap_or(0);
    let stored = count_prefix(&s.cluster, &ns, &members[0], "canary/").await;
    assert!(stored >= through, "{through} acknowledged, {stored} stored");
    s.pass().await;
}
