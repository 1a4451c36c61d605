//! Scenario 2: a one-member cluster without peer TLS is changed to peer TLS and three replicas
//! in one apply, while a writer pod keeps writing.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use quorate_api::Etcd;
use quorate_e2e::etcd::fully_ready;
use quorate_e2e::manifests::{EtcdShape, canary_pod};
use quorate_e2e::members::{
    PodIncarnations, canary_totals, count_prefix, member_list, wait_canary_writing,
    wait_fully_ready,
};
use quorate_e2e::tls::peer_tls_secrets;
use quorate_e2e::{E2eEnv, Scenario, namespace_state, status_summary, wait_for};

use crate::READY_TIMEOUT;

/// The member lease annotation the agent sets from the peer URLs etcd has registered.
const TLS_ENABLED: &str = "member.etcd.gardener.cloud/tls-enabled";

/// The TLS-enabling scale-out of DEP-03, improved: the operator first gives the one existing
/// member peer TLS in its configuration (its agent writes the Secrets' files and restarts etcd
/// in place: no pod is replaced), waits for its lease to say `tls-enabled: true`, and only then
/// grows the StatefulSet; the two new members join as learners and are promoted; a writer pod
/// (`quorate canary --write-timeout 5s`) sees zero failed writes, no write waits more than 2 s,
/// and every acknowledged write is there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_peer_tls_and_scale_out_without_failed_writes() {
    let Some(env) = E2eEnv::from_env_or_skip("s2_peer_tls_and_scale_out_without_failed_writes")
    else {
        return;
    };
    scale_out_one_to_three(&env, "s2-tls-scale", false).await;
}

/// The baseline of the benchmark: the same 1→3 scale-out under the same writer, with peer TLS
/// on from the start, so nothing restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2b_scale_out_with_peer_tls_already_on() {
    let Some(env) = E2eEnv::from_env_or_skip("s2b_scale_out_with_peer_tls_already_on") else {
        return;
    };
    scale_out_one_to_three(&env, "s2b-scale-baseline", true).await;
}

/// One member → three with peer TLS under a canary writer; `tls_from_start` says whether the
/// first member already has peer TLS or gets it in the same apply as the new replicas.
async fn scale_out_one_to_three(env: &E2eEnv, scenario: &str, tls_from_start: bool) {
    let mut s = Scenario::start(env, scenario).await;
    let ns = s.namespace.clone();
    let name = "etcd-tls";
    let one = EtcdShape {
        peer_tls: tls_from_start,
        ..EtcdShape::new(name, &ns, 1)
    };
    s.cluster.apply(&peer_tls_secrets(name, &ns, 3)).await;
    let applied = Instant::now();
    s.cluster.apply(&one.yaml()).await;
    wait_fully_ready(&s.cluster, &ns, name, 1, false, READY_TIMEOUT).await;
    s.measure(
        "apply→Ready (1 member)",
        format!("{:.1} s", applied.elapsed().as_secs_f64()),
    );

    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
    let lease_tls = || async {
        leases
            .get_opt(&format!("{name}-0"))
            .await
            .ok()
            .flatten()
            .and_then(|l| l.metadata.annotations)
            .and_then(|a| a.get(TLS_ENABLED).cloned())
            .unwrap_or_default()
    };
    let tls_before = wait_for(
        "the member lease's tls-enabled annotation",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            match lease_tls().await.as_str() {
                "" => Err("not set yet".to_string()),
                v => Ok(v.to_string()),
            }
        },
    )
    .await;
    assert_eq!(
        tls_before == "true",
        tls_from_start,
        "{TLS_ENABLED}={tls_before} before the change"
    );

    // The writer starts before the change and runs through it.
    s.cluster
        .apply(&canary_pod(&env.image, name, &ns, "5s"))
        .await;
    let canary = format!("{name}-canary");
    wait_canary_writing(&s.cluster, &ns, &canary).await;

    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let statefulsets: Api<StatefulSet> = Api::namespaced(s.cluster.client.clone(), &ns);
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let member_pods: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    let mut seen = PodIncarnations::default();
    seen.observe(&pods, &member_pods).await;

    // One apply: three replicas, and peer TLS when it was off (with the reconcile annotation,
    // as druid's default of no auto-reconcile requires).
    let changed = Instant::now();
    s.cluster
        .apply(
            &EtcdShape {
                replicas: 3,
                peer_tls: true,
                reconcile: true,
                ..one.clone()
            }
            .yaml(),
        )
        .await;
    let mut tls_on_at = None;
    let mut grown_at = None;
    let mut last = String::new();
    let voters = loop {
        let t = changed.elapsed().as_secs_f64();
        seen.observe(&pods, &member_pods).await;
        if tls_on_at.is_none() && lease_tls().await == "true" {
            tls_on_at = Some(t);
            println!("  [{t:>6.1}s] lease {name}-0: {TLS_ENABLED}=true");
        }
        let replicas = statefulsets
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.spec)
            .and_then(|s| s.replicas)
            .unwrap_or(0);
        if grown_at.is_none() && replicas >= 3 {
            grown_at = Some(t);
            println!("  [{t:>6.1}s] StatefulSet {name}: replicas {replicas}");
            assert!(
                tls_on_at.is_some(),
                "the StatefulSet grew before the lease said peer TLS is on"
            );
        }
        let etcd = etcds.get(name).await.expect("the Etcd");
        if fully_ready(&etcd, 3, false) {
            match member_list(&s.cluster, &ns, &member_pods[0]).await {
                Ok(list) if list.len() == 3 && list.iter().all(|m| !m.is_learner) => break list,
                Ok(list) => last = format!("member list {list:?}"),
                Err(e) => last = e,
            }
        } else {
            let state = format!(
                "{}; {}",
                status_summary(&etcd),
                namespace_state(&s.cluster.client, &ns).await
            );
            if state != last {
                println!("  [{t:>6.1}s] {state}");
                last = state;
            }
        }
        assert!(
            changed.elapsed() < READY_TIMEOUT,
            "timed out waiting for three voters with peer TLS; last state: {last}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let to_voters = changed.elapsed().as_secs_f64();
    s.measure("apply→3 voters with peer TLS", format!("{to_voters:.1} s"));
    s.record_number("scale_out_seconds", format!("{to_voters:.1}"));
    s.measure(
        "lease tls-enabled / StatefulSet grown at",
        format!(
            "{:.1} s / {:.1} s",
            tls_on_at.unwrap_or_default(),
            grown_at.unwrap_or_default()
        ),
    );
    seen.observe(&pods, &member_pods).await;
    s.measure("pod restarts", seen.summary());
    s.record_number("restarts", seen.summary());

    // Done means done: the waiting of the TLS step is no longer reported as an error.
    wait_for(
        "lastErrors cleared after the successful reconcile",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            let etcd = etcds.get(name).await.map_err(|e| e.to_string())?;
            match etcd.status.as_ref().map(|st| st.last_errors.len()) {
                Some(0) | None => Ok(()),
                _ => Err(status_summary(&etcd)),
            }
        },
    )
    .await;
    for member in &voters {
        assert!(
            member.peer_urls.iter().all(|u| u.starts_with("https://")),
            "member {} still has a plain peer URL: {:?}",
            member.name,
            member.peer_urls
        );
    }
    // No pod is replaced: enabling peer TLS restarts etcd in place in pod-0.
    for pod in &member_pods {
        assert_eq!(seen.restarts(pod), 0, "{pod} was not replaced");
    }
    // Inside pod-0 the agent started etcd once more for TLS (once in all when TLS was on).
    let log = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &member_pods[0], "-c", "etcd"])
        .await
        .ok();
    let starts = log.lines().filter(|l| l.contains("etcd started")).count();
    let expected = if tls_from_start { 1 } else { 2 };
    assert_eq!(starts, expected, "etcd starts in pod-0:\n{log}");

    // The writer: nothing failed, nothing acknowledged is missing.
    let totals = canary_totals(&s.cluster, &ns, &canary)
        .await
        .expect("canary totals");
    s.writer_held(&totals, 2001);
    let through = totals["acknowledged_through"].as_u64().unwrap_or(0);
    let stored = count_prefix(&s.cluster, &ns, &member_pods[2], "canary/").await;
    assert!(
        stored >= through,
        "{through} writes were acknowledged but the newest member holds {stored}"
    );
    s.pass().await;
}
