//! Scenario 1: a 3-member cluster with backups becomes ready and serves a client pod.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use quorate_e2e::manifests::client_pod;
use quorate_e2e::members::local_value;
use quorate_e2e::{E2eEnv, Scenario, status_summary, wait_for};

/// Scenario 1 (issue 5, first bullet): a 3-member `Etcd` with backups to a volume-backed
/// `Local` store becomes Ready / Quorate / AllMembersReady / BackupReady; `kubectl get etcd
/// -o wide` shows it; a client pod writes and reads a key through the client Service; every
/// member has it; the bucket has a full snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_three_members_with_local_backups_become_ready() {
    let Some(env) = E2eEnv::from_env_or_skip("s1_three_members_with_local_backups_become_ready")
    else {
        return;
    };
    let mut s = Scenario::start(&env, "s1-ready").await;
    let ns = s.namespace.clone();
    let name = "etcd-e2e";
    let bucket_root = s.bucket_dir();

    // kubectl apply -> Ready, as a user would wait for it.
    let applied = Instant::now();
    let ready = s.create_ready_etcd(name, 3, true).await;
    let to_ready = applied.elapsed().as_secs_f64();
    s.measure(
        "apply→Ready (3 members, BackupReady)",
        format!("{to_ready:.1} s"),
    );
    println!("  {}", status_summary(&ready));

    // Restart counts of the member pods (expected 0: nothing should have crashed on the way).
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let mut restarts = Vec::new();
    for i in 0..3 {
        let pod = pods.get(&format!("{name}-{i}")).await.expect("member pod");
        let n: i32 = pod
            .status
            .as_ref()
            .and_then(|st| st.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0);
        restarts.push(format!("{name}-{i}={n}"));
    }
    s.measure("pod restarts", restarts.join(" "));
    // A new cluster that does not choose a version runs etcd 3.6, as every member reports.
    let etcds: Api<quorate_api::Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let versions = wait_for(
        "every member reports etcd 3.6 in the status",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            let etcd = etcds.get(name).await.map_err(|e| e.to_string())?;
            let versions: Vec<String> = etcd
                .status
                .map(|st| st.members)
                .unwrap_or_default()
                .into_iter()
                .map(|m| m.etcd_version.unwrap_or_default())
                .collect();
            if versions.len() == 3 && versions.iter().all(|v| v.starts_with("3.6.")) {
                Ok(versions)
            } else {
                Err(format!("{versions:?}"))
            }
        },
    )
    .await;
    s.measure("etcd versions", versions.join(" "));
    s.record_number("apply_to_ready_seconds", format!("{to_ready:.1}"));
    s.record_number("restarts", restarts.join(" "));

    // What the user sees.
    let wide = s
        .cluster
        .kubectl(&["-n", &ns, "get", "etcd", name, "-o", "wide"])
        .await
        .ok();
    println!("$ kubectl get etcd -o wide\n{}", wide.trim_end());
    let mut lines = wide.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(
        header.join(" "),
        "NAME READY QUORATE ALL MEMBERS READY BACKUP READY SCALE AGE CLUSTER SIZE CURRENT REPLICAS READY REPLICAS",
        "druid's printer columns and quorate's SCALE"
    );
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    assert_eq!(row.len(), 10, "one value per column: {row:?}");
    assert_eq!(row[0], name);
    assert_eq!(
        &row[1..5],
        ["true", "True", "True", "True"],
        "READY QUORATE ALL-MEMBERS-READY BACKUP-READY"
    );
    assert_eq!(row[5], "Complete", "SCALE");
    assert_eq!(
        &row[7..10],
        ["3", "3", "3"],
        "CLUSTER SIZE, CURRENT REPLICAS, READY REPLICAS"
    );

    // A client pod writes and reads a key through the client Service.
    let key = "e2e/s1";
    let value = format!("written-through-{name}-client");
    let written = Instant::now();
    s.cluster
        .apply(&client_pod(&env.image, name, &ns, key, &value))
        .await;
    let pod_name = format!("{name}-client-check");
    let phase = wait_for(
        "client pod finished",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            match pods.get_opt(&pod_name).await {
                Ok(Some(p)) => match p.status.and_then(|st| st.phase).as_deref() {
                    Some(phase @ ("Succeeded" | "Failed")) => Ok(phase.to_string()),
                    other => Err(format!("phase {other:?}")),
                },
                Ok(None) => Err("not found".into()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    let put = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &pod_name, "-c", "put"])
        .await;
    let get = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &pod_name, "-c", "get"])
        .await;
    println!(
        "$ kubectl logs {pod_name} -c put\n{}{}",
        put.stdout, put.stderr
    );
    println!(
        "$ kubectl logs {pod_name} -c get\n{}{}",
        get.stdout, get.stderr
    );
    assert_eq!(phase, "Succeeded", "the client pod failed");
    assert_eq!(put.stdout.trim(), "OK");
    assert_eq!(get.stdout.trim(), value);
    s.measure(
        "client pod put+get",
        format!("{:.1} s", written.elapsed().as_secs_f64()),
    );

    // Every member has the write (a serializable read answers from the member's own data).
    for i in 0..3 {
        let member = format!("{name}-{i}");
        let out = local_value(&s.cluster, &ns, &member, key).await;
        assert_eq!(out, value, "member {member} does not have the write");
    }

    // The backups: both snapshot leases name a revision, and (where the node is this machine)
    // the bucket holds a full snapshot in etcd-backup-restore's v2 layout.
    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
    for lease in [format!("{name}-full-snap"), format!("{name}-delta-snap")] {
        let l = leases.get(&lease).await.expect("snapshot lease");
        let holder = l.spec.and_then(|sp| sp.holder_identity).unwrap_or_default();
        assert!(
            !holder.is_empty(),
            "lease {lease} names no snapshot revision"
        );
        println!("  lease {lease}: holderIdentity {holder}");
    }
    if env.node_is_local() {
        let v2 = bucket_root.join("backups").join(name).join("v2");
        let files: Vec<String> = std::fs::read_dir(&v2)
            .unwrap_or_else(|e| panic!("the bucket directory {}: {e}", v2.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        println!("  bucket {}: {files:?}", v2.display());
        assert!(
            files.iter().any(|f| f.starts_with("Full-")),
            "no full snapshot in {}: {files:?}",
            v2.display()
        );
    }
    s.pass().await;
}
