//! Scenario 15: certificates as users make them, with wildcards only, while the cluster grows
//! from three members to five under a TLS canary.

use std::time::Instant;

use quorate_e2e::manifests::{EtcdShape, tls_canary_pod};
use quorate_e2e::members::{canary_totals, wait_canary_writing, wait_fully_ready};
use quorate_e2e::tls::UserTls;
use quorate_e2e::{E2eEnv, Scenario};

use crate::READY_TIMEOUT;

/// Client and peer TLS from Secrets a user made with wildcard names only: the peer certificate
/// names `*.<name>-peer.<ns>.svc` (and `.cluster.local`) and no member, no IP; the server
/// certificate the client Service and the same wildcards. etcd checks a peer's certificate
/// against its address by reverse lookup, which the cluster's CoreDNS answers. Three members
/// with backups grow to five in one apply (the new ones join as learners under certificates
/// that never named them); a canary that presents a client certificate writes through the
/// client Service the whole time: zero failed writes, none waiting 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_wildcard_certificates_and_three_to_five_under_a_tls_canary() {
    let Some(env) =
        E2eEnv::from_env_or_skip("s15_wildcard_certificates_and_three_to_five_under_a_tls_canary")
    else {
        return;
    };
    let mut s = Scenario::start(&env, "s15-wildcard-tls").await;
    let ns = s.namespace.clone();
    let name = "etcd-wild";
    let bucket = s.bucket_dir().display().to_string();
    // No member names in the peer certificate: wildcards only.
    let tls = UserTls::new(name, &ns, 0).issue();
    s.cluster.apply(&tls.secrets_yaml).await;
    let three = EtcdShape {
        local_bucket: Some(&bucket),
        peer_tls: true,
        client_tls: true,
        ..EtcdShape::new(name, &ns, 3)
    };
    s.cluster.apply(&three.yaml()).await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    s.cluster
        .apply(&tls_canary_pod(&env.image, name, &ns, "5s"))
        .await;
    let canary = format!("{name}-canary");
    wait_canary_writing(&s.cluster, &ns, &canary).await;

    let t = Instant::now();
    s.cluster
        .apply(
            &EtcdShape {
                replicas: 5,
                reconcile: true,
                ..three.clone()
            }
            .yaml(),
        )
        .await;
    wait_fully_ready(&s.cluster, &ns, name, 5, true, READY_TIMEOUT).await;
    s.measure(
        "apply 5 replicas→5 ready voters (wildcard TLS)",
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    );
    let totals = canary_totals(&s.cluster, &ns, &canary)
        .await
        .expect("canary totals");
    s.writer_held(&totals, 5000);
    s.pass().await;
}
