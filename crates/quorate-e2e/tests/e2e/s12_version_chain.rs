//! Scenario 12: etcd versions chained on Kubernetes (issue 29). A 3-member cluster with backups
//! created on etcd 3.5 is asked once for 3.7 and goes 3.5 → 3.6 → 3.7 (the 3.6 → 3.7 step waits
//! until every member has a raft snapshot taken at 3.6), then asked once for 3.5 and comes back
//! 3.7 → 3.6 → 3.5 through etcd's downgrade API — all under `quorate canary --write-timeout 5s`,
//! with no member pod replaced.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use quorate_api::Etcd;
use quorate_e2e::manifests::{EtcdShape, canary_pod};
use quorate_e2e::members::{
    PodIncarnations, lease_annotations, lease_versions, wait_canary_writing, wait_fully_ready,
    writer_totals,
};
use quorate_e2e::{E2eEnv, Scenario, status_summary};

use crate::READY_TIMEOUT;

/// How long one whole chain (two steps, each a rolling restart of three members) may take.
const CHAIN_TIMEOUT: Duration = Duration::from_secs(600);

/// Applies `version` and waits until every member runs it and reports it as etcd's cluster
/// version; returns the lowest cluster version the members reported on the way, in order, each
/// once.
async fn chain_to(
    s: &mut Scenario,
    shape: &EtcdShape<'_>,
    members: &[String],
    version: &'static str,
) -> Vec<String> {
    let ns = s.namespace.clone();
    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let started = Instant::now();
    s.cluster
        .apply(
            &EtcdShape {
                reconcile: true,
                etcd_version: Some(version),
                ..shape.clone()
            }
            .yaml(),
        )
        .await;
    let prefix = format!("{version}.");
    let mut seen: Vec<String> = Vec::new();
    loop {
        let servers = lease_versions(&leases, members).await;
        let clusters = lease_annotations(&leases, members, "quorate.io/etcd-cluster-version").await;
        // The lowest cluster version any member reports: each member's only moves one way, so
        // this one does too, whatever order the members report in.
        let lowest = clusters
            .iter()
            .filter_map(|c| {
                let minor = c.split('.').nth(1)?.parse::<u32>().ok()?;
                Some((minor, format!("3.{minor}")))
            })
            .min();
        if let Some((_, minor)) = lowest
            && seen.last() != Some(&minor)
        {
            seen.push(minor);
        }
        // Agents publish the server version in full (`3.7.3`) and the cluster version as etcd
        // reports it (`3.7`).
        if servers.iter().all(|v| v.starts_with(&prefix))
            && clusters
                .iter()
                .all(|v| v == version || v.starts_with(&prefix))
        {
            break;
        }
        if started.elapsed() > CHAIN_TIMEOUT {
            let etcd = etcds.get(shape.name).await.expect("the Etcd");
            panic!(
                "every member on etcd {version} (servers {servers:?}, cluster versions \
                 {clusters:?}): {}",
                status_summary(&etcd)
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    s.measure(
        &format!("apply {version} → every member and the cluster version on {version}"),
        format!(
            "{:.1} s through {}",
            started.elapsed().as_secs_f64(),
            seen.join(" → ")
        ),
    );
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_etcd_3_5_to_3_7_and_back_to_3_5_under_a_canary() {
    let Some(env) = E2eEnv::from_env_or_skip("s12_etcd_3_5_to_3_7_and_back_to_3_5_under_a_canary")
    else {
        return;
    };
    let mut s = Scenario::start(&env, "s12-version-chain").await;
    let ns = s.namespace.clone();
    let name = "etcd-chain";
    let bucket = s.bucket_dir().display().to_string();
    let v35 = EtcdShape {
        local_bucket: Some(&bucket),
        etcd_version: Some("3.5"),
        ..EtcdShape::new(name, &ns, 3)
    };
    s.cluster.apply(&v35.yaml()).await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    let members: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let mut incarnations = PodIncarnations::default();
    incarnations.observe(&pods, &members).await;

    s.cluster
        .apply(&canary_pod(&env.image, name, &ns, "5s"))
        .await;
    let canary = format!("{name}-canary");
    wait_canary_writing(&s.cluster, &ns, &canary).await;

    let up = chain_to(&mut s, &v35, &members, "3.7").await;
    assert_eq!(
        up.iter()
            .skip_while(|v| *v != "3.5")
            .cloned()
            .collect::<Vec<_>>(),
        ["3.5", "3.6", "3.7"],
        "the cluster version took each minor step up: {up:?}"
    );
    let down = chain_to(&mut s, &v35, &members, "3.5").await;
    assert_eq!(
        down.iter()
            .skip_while(|v| *v != "3.7")
            .cloned()
            .collect::<Vec<_>>(),
        ["3.7", "3.6", "3.5"],
        "the cluster version took each minor step down: {down:?}"
    );

    incarnations.observe(&pods, &members).await;
    for pod in &members {
        assert_eq!(
            incarnations.restarts(pod),
            0,
            "{pod} restarted etcd in place, not replaced"
        );
    }
    let writes = writer_totals(&mut s, &canary, "writer (3.5 → 3.7 → 3.5)").await;
    assert_eq!(writes.failed, 0, "no write failed through the chain");
    assert!(writes.longest_ms < 5000, "no write waited 5 s");
    s.pass().await;
}
