//! Scenario 4: every member loses its pod and its volume at once. The cluster is secured as
//! issue 17 asks: its backups are encrypted (`quorate.io/backup-encryption-secret`), so the
//! bucket holds no clear object and the restore decrypts, and its agents serve HTTPS with
//! user-made, DNS-only certificates (`spec.backup.tls`), so an `EtcdOpsTask` succeeds only
//! because the operator presents the client certificate, and a client without one cannot take
//! a snapshot.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use quorate_api::tasks::{EtcdOpsTask, TaskState};
use quorate_e2e::manifests::DELTA_PERIOD_SECONDS;
use quorate_e2e::members::{
    delete_pods_and_claims, etcdctl, local_value, revision, wait_for_voters, wait_fully_ready,
};
use quorate_e2e::{E2eEnv, Scenario, wait_for};

use crate::READY_TIMEOUT;

const KEYS: usize = 5;

/// Writes older than one delta period survive the loss of every pod and every volume: member 0
/// restores from the bucket, the others join it, and each member holds every such write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_every_member_loses_its_volume_and_the_bucket_brings_it_back() {
    let Some(env) =
        E2eEnv::from_env_or_skip("s4_every_member_loses_its_volume_and_the_bucket_brings_it_back")
    else {
        return;
    };
    let mut s = Scenario::start(&env, "s4-total-loss").await;
    let ns = s.namespace.clone();
    let name = "etcd-total";
    s.create_ready_etcd_with(name, 3, true, true).await;
    let pod0 = format!("{name}-0");
    for i in 0..KEYS {
        etcdctl(
            &s.cluster,
            &ns,
            &pod0,
            &["put", &format!("e2e/s4/{i}"), &format!("v{i}")],
        )
        .await
        .ok();
    }
    let written = revision(&s.cluster, &ns, &pod0).await;

    // The writes are older than one delta period once the delta snapshot lease has passed them.
    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
    let delta_lease = format!("{name}-delta-snap");
    let t = Instant::now();
    wait_for(
        &format!("a delta snapshot through revision {written}"),
        Duration::from_secs(6 * DELTA_PERIOD_SECONDS),
        Duration::from_secs(1),
        || async {
            let holder = leases
                .get_opt(&delta_lease)
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec)
                .and_then(|sp| sp.holder_identity)
                .unwrap_or_default();
            match holder.parse::<i64>() {
                Ok(r) if r >= written => Ok(()),
                _ => Err(format!("{delta_lease} holderIdentity {holder:?}")),
            }
        },
    )
    .await;
    s.measure(
        "write→delta snapshot",
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    );

    // Every pod and every volume at once.
    let t = Instant::now();
    let members: Vec<(String, String)> = (0..3)
        .map(|i| (format!("{name}-{i}"), format!("{name}-{name}-{i}")))
        .collect();
    delete_pods_and_claims(&s.cluster, &ns, &members, READY_TIMEOUT).await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    let voters = wait_for_voters(&s.cluster, &ns, &pod0, 3, READY_TIMEOUT).await;
    s.measure(
        "all pods+PVCs deleted→3 voters",
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    );
    println!("  members after the restore: {voters:?}");

    for (pod, _) in &members {
        for i in 0..KEYS {
            assert_eq!(
                local_value(&s.cluster, &ns, pod, &format!("e2e/s4/{i}")).await,
                format!("v{i}"),
                "{pod} lacks a write older than one delta period"
            );
        }
    }
    let restored = revision(&s.cluster, &ns, &pod0).await;
    assert!(
        restored >= written,
        "the restored cluster is at revision {restored}, behind the backed-up {written}"
    );
    // Every object in the bucket is encrypted: named `.enc`, starting with quorate's header.
    let v2 = s.bucket_dir().join("backups").join(name).join("v2");
    let objects: Vec<std::path::PathBuf> = std::fs::read_dir(&v2)
        .unwrap_or_else(|e| panic!("{}: {e}", v2.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!objects.is_empty(), "{} is empty", v2.display());
    for object in &objects {
        let text = object.display().to_string();
        assert!(text.contains(".enc"), "{text} is not named as encrypted");
        let head = std::fs::read(object).unwrap();
        assert!(head.starts_with(b"QRTENC"), "{text} is not encrypted");
    }
    // An on-demand full snapshot through the agents' HTTPS: the operator presents the client
    // certificate of spec.backup.tls.
    s.cluster
        .apply(&format!(
            "apiVersion: druid.gardener.cloud/v1alpha1\nkind: EtcdOpsTask\nmetadata:\n  name: full-over-tls\n  \
             namespace: {ns}\nspec:\n  etcdName: {name}\n  config:\n    onDemandSnapshot:\n      type: full\n"
        ))
        .await;
    let tasks: Api<EtcdOpsTask> = Api::namespaced(s.cluster.client.clone(), &ns);
    wait_for(
        "the EtcdOpsTask over HTTPS Succeeded",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            let status = tasks
                .get("full-over-tls")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            match status.state {
                Some(TaskState::Succeeded) => Ok(()),
                Some(TaskState::Failed | TaskState::Rejected) => {
                    panic!("the task ended {status:?}")
                }
                other => Err(format!("{other:?} {:?}", status.last_errors)),
            }
        },
    )
    .await;
    // From the node, a client that trusts the CA but has no client certificate: the member
    // answers its probe endpoint and refuses to take a snapshot.
    let secrets: Api<Secret> = Api::namespaced(s.cluster.client.clone(), &ns);
    let ca = secrets
        .get(&format!("{name}-backup-ca"))
        .await
        .expect("the backup CA Secret")
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .expect("ca.crt")
        .0;
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let pod1 = format!("{name}-1");
    let ip: std::net::IpAddr = pods
        .get(&pod1)
        .await
        .expect("member pod 1")
        .status
        .and_then(|st| st.pod_ip)
        .expect("a pod IP")
        .parse()
        .expect("an IP address");
    let host = format!("{pod1}.{name}-peer.{ns}.svc");
    let tls = quorate_coord::agent_tls::client_config_from_pem(&ca, None, "the backup CA")
        .expect("a TLS client");
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .resolve(&host, std::net::SocketAddr::new(ip, 8080))
        .build()
        .expect("an HTTPS client");
    let status = |path: &'static str| {
        let (http, host) = (http.clone(), host.clone());
        async move {
            http.get(format!("https://{host}:8080{path}"))
                .timeout(Duration::from_secs(30))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .map_err(|e| format!("{e:?}"))
        }
    };
    assert_eq!(
        status("/healthz").await,
        Ok(200),
        "the probe endpoint over HTTPS"
    );
    assert_eq!(
        status("/snapshot/full").await,
        Ok(401),
        "a snapshot without the client certificate"
    );
    let log = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &pod0, "-c", "etcd"])
        .await
        .ok();
    assert!(
        log.contains("restoring from the bucket"),
        "{pod0} did not restore from the bucket:\n{log}"
    );
    s.pass().await;
}
