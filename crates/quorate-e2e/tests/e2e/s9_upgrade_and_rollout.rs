//! Scenario 9: a 3-member cluster with backups upgraded from etcd 3.4 to 3.5 under a writer,
//! then a pod template change (more CPU and a pod annotation, so no pod can take it in place)
//! rolled by quorate, one member pod at a time. Scenario 9b: a resources-only change, which
//! quorate resizes in place, and the StatefulSet controller's rollout of the same change (the
//! benchmark's baseline).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use quorate_api::Etcd;
use quorate_e2e::etcd::condition_status;
use quorate_e2e::manifests::{EtcdShape, canary_pod};
use quorate_e2e::members::{
    PodIncarnations, Writes, lease_versions, raft_term, wait_canary_writing, wait_fully_ready,
    writer_totals,
};
use quorate_e2e::{E2eEnv, Scenario, status_summary};

use crate::READY_TIMEOUT;

/// The member whose lease names it the leader.
/// The member whose lease names it leader; right after a leadership change no lease may say so
/// until the new leader renews, so this waits for one.
async fn leader(leases: &Api<Lease>, members: &[String]) -> String {
    quorate_e2e::wait::wait_for(
        "a member lease naming the leader",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            for m in members {
                let holder = leases
                    .get_opt(m)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|l| l.spec?.holder_identity)
                    .unwrap_or_default();
                if holder.ends_with(":Leader") {
                    return Ok(m.clone());
                }
            }
            Err("no lease says Leader".to_string())
        },
    )
    .await
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
        local_bucket: Some(&bucket),
        etcd_version: Some("3.4"),
        ..EtcdShape::new(name, &ns, 3)
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

    // The writer saw no failed write through the upgrade; every acknowledged write is there.
    let upgraded = writer_totals(&mut s, &canary, "writer (upgrade)").await;
    assert_eq!(upgraded.failed, 0, "writes failed during the upgrade");

    // 2. A pod template change no pod can take in place, rolled by quorate: each pod replaced
    // once, the leader's last.
    let leader_now = leader(&leases, &members).await;
    let rolled = measure_rollout(&mut s, &env, name, &members, "", async |s: &Scenario| {
        s.cluster
            .apply(
                &EtcdShape {
                    reconcile: true,
                    etcd_version: Some("3.5"),
                    cpu: "60m",
                    pod_revision: Some("2"),
                    ..v34.clone()
                }
                .yaml(),
            )
            .await;
        let started = Instant::now();
        loop {
            let etcd = etcds.get(name).await.expect("the Etcd");
            seen.observe(&pods, &members).await;
            let all_new = members.iter().all(|m| seen.restarts(m) >= 1);
            if all_new && condition_status(etcd.status.as_ref(), "AllMembersUpdated") == "True" {
                break;
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "every member pod replaced: {}; {}",
                seen.summary(),
                status_summary(&etcd)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    let events: Api<Event> = Api::namespaced(s.cluster.client.clone(), &ns);
    let mut notes: Vec<(String, String)> = events
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
    notes.sort();
    let order: Vec<String> = notes
        .iter()
        .filter_map(|(_, note)| {
            members
                .iter()
                .find(|m| note.starts_with(&format!("replacing {m} ")))
                .cloned()
        })
        .collect();
    s.measure("replacement order", order.join(", "));
    assert_eq!(order.len(), 3, "three replacements: {notes:?}");
    assert_eq!(
        order.last(),
        Some(&leader_now),
        "the leader last: {notes:?}"
    );
    for pod in &members {
        assert_eq!(seen.restarts(pod), 1, "{pod} replaced exactly once");
    }
    assert_eq!(rolled.failed, 0, "no write failed in the rolling update");
    assert!(rolled.longest_ms < 5000, "no write waited 5 s");
    s.pass().await;
}

/// Runs `change` (a pod template change and the wait for its end) under a fresh
/// `quorate canary --write-timeout 5s`, and records for the benchmark how long it took, what
/// the writer saw and how many elections (raft terms) it cost, each record's key starting
/// with `key`.
async fn measure_rollout(
    s: &mut Scenario,
    env: &E2eEnv,
    name: &str,
    members: &[String],
    key: &str,
    change: impl AsyncFnOnce(&Scenario),
) -> Writes {
    let ns = s.namespace.clone();
    let canary = format!("{name}-canary");
    let _ = s
        .cluster
        .kubectl(&[
            "-n",
            &ns,
            "delete",
            "pod",
            &canary,
            "--wait=true",
            "--ignore-not-found",
        ])
        .await;
    s.cluster
        .apply(&canary_pod(&env.image, name, &ns, "5s"))
        .await;
    wait_canary_writing(&s.cluster, &ns, &canary).await;
    let term_before = raft_term(&s.cluster, &ns, &members[0]).await;
    let started = Instant::now();
    change(&*s).await;
    // Done when every member is ready again (a replaced pod may still be starting when its
    // replacement is recorded), the same end for both methods.
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    let seconds = started.elapsed().as_secs_f64();
    // Let the writer see the settled cluster for a moment before reading its totals.
    wait_canary_writing(&s.cluster, &ns, &canary).await;
    let term_after = raft_term(&s.cluster, &ns, &members[0]).await;
    let what = if key.is_empty() {
        "rolling update"
    } else {
        "in-place resize"
    };
    let writes = writer_totals(s, &canary, &format!("writer ({what})")).await;
    let elections = term_after - term_before;
    s.measure(
        &format!("{what} of 3 pods"),
        format!("{seconds:.1} s, {elections} election(s)"),
    );
    s.record_number(&format!("{key}rollout_seconds"), format!("{seconds:.1}"));
    s.record_number(&format!("{key}failed_writes"), writes.failed);
    s.record_number(&format!("{key}longest_write_ms"), writes.longest_ms);
    s.record_number(&format!("{key}elections"), elections);
    writes
}

/// The rollout benchmark's resources-only change (the etcd container's CPU request 50m →
/// 60m): first applied to the `Etcd`, which quorate resizes in place (every pod keeps its UID
/// and containers, etcd never restarts: no election, no failed write); then the same step
/// again (60m → 70m) rolled by the StatefulSet controller (`RollingUpdate`, highest ordinal
/// first, whoever leads: druid's way), with quorate's spec reconcile suspended so it leaves
/// the StatefulSet alone: the baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s9b_a_resources_change_in_place_and_rolled_by_the_statefulset_controller() {
    let Some(env) = E2eEnv::from_env_or_skip(
        "s9b_a_resources_change_in_place_and_rolled_by_the_statefulset_controller",
    ) else {
        return;
    };
    let mut s = Scenario::start(&env, "s9b-rollout-baseline").await;
    let ns = s.namespace.clone();
    let name = "etcd-sts";
    s.create_ready_etcd(name, 3, true).await;
    let members: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    let statefulsets: Api<StatefulSet> = Api::namespaced(s.cluster.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let bucket = s.bucket_dir().display().to_string();
    let mut seen = PodIncarnations::default();
    seen.observe(&pods, &members).await;
    let generation_before = statefulsets
        .get(name)
        .await
        .expect("the StatefulSet")
        .metadata
        .generation;
    let resized = measure_rollout(
        &mut s,
        &env,
        name,
        &members,
        "in_place_",
        async |s: &Scenario| {
            s.cluster
                .apply(
                    &EtcdShape {
                        local_bucket: Some(&bucket),
                        reconcile: true,
                        cpu: "60m",
                        ..EtcdShape::new(name, &s.namespace, 3)
                    }
                    .yaml(),
                )
                .await;
            let started = Instant::now();
            loop {
                let etcd = etcds.get(name).await.expect("the Etcd");
                seen.observe(&pods, &members).await;
                let sts = statefulsets.get(name).await.expect("the StatefulSet");
                let status = sts.status.unwrap_or_default();
                // The new template is applied (a later generation) and every pod runs it.
                let updated = sts.metadata.generation > generation_before
                    && status.observed_generation == sts.metadata.generation
                    && status.updated_replicas == Some(3);
                if updated && condition_status(etcd.status.as_ref(), "AllMembersUpdated") == "True"
                {
                    break;
                }
                assert!(
                    started.elapsed() < READY_TIMEOUT,
                    "every member pod resized: {:?}; {}",
                    status,
                    status_summary(&etcd)
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        },
    )
    .await;
    for pod in &members {
        assert_eq!(
            seen.restarts(pod),
            0,
            "{pod} was resized in place, not replaced or restarted: {}",
            seen.summary()
        );
        let p = pods.get(pod).await.expect("member pod");
        let cpu = p
            .spec
            .and_then(|s| s.containers.into_iter().find(|c| c.name == "etcd"))
            .and_then(|c| c.resources?.requests?.get("cpu").cloned());
        assert_eq!(
            cpu.map(|q| q.0),
            Some("60m".to_string()),
            "{pod}'s CPU request"
        );
    }
    assert_eq!(resized.failed, 0, "no write failed in the in-place resize");
    let events: Api<Event> = Api::namespaced(s.cluster.client.clone(), &ns);
    let in_place = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("RollingUpdate")
                && e.note.as_deref().is_some_and(|n| n.contains("in place"))
        })
        .count();
    assert_eq!(
        in_place, 3,
        "one RollingUpdate event per pod resized in place"
    );

    let writes = measure_rollout(&mut s, &env, name, &members, "", async |s: &Scenario| {
        let ns = &s.namespace;
        s.cluster
            .kubectl(&["-n", ns, "annotate", "etcd", name, "druid.gardener.cloud/suspend-etcd-spec-reconcile=true"])
            .await
            .ok();
        // The StatefulSet is a protected component: a person changing it by hand turns the
        // protection off first, as the webhook's refusal says.
        s.cluster
            .kubectl(&["-n", ns, "annotate", "etcd", name, "druid.gardener.cloud/disable-etcd-component-protection=true"])
            .await
            .ok();
        let patch = r#"{"spec":{"updateStrategy":{"type":"RollingUpdate"},"template":{"spec":{"containers":[{"name":"etcd","resources":{"requests":{"cpu":"70m"}}}]}}}}"#;
        s.cluster
            .kubectl(&["-n", ns, "patch", "statefulset", name, "--type", "strategic", "-p", patch])
            .await
            .ok();
        let started = Instant::now();
        loop {
            let sts = statefulsets.get(name).await.expect("the StatefulSet");
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "the StatefulSet controller's rollout: {:?}",
                sts.status
            );
            let status = sts.status.unwrap_or_default();
            let done = status.observed_generation == sts.metadata.generation
                && status.updated_replicas == Some(3)
                && status.ready_replicas == Some(3)
                && status.current_revision == status.update_revision;
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    s.measure(
        "baseline writer",
        format!("{} failed, longest {} ms", writes.failed, writes.longest_ms),
    );
    s.pass().await;
}
