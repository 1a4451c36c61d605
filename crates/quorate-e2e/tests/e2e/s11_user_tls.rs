//! Scenario 11: client and peer TLS with the certificates a user brings (DNS names only, as
//! Gardener issues them), the agents' API over TLS and encrypted backups, a TLS client writing
//! through `<name>-client`, a client without a certificate refused, and every leaf certificate
//! (client, server, peer, agents) rotated under that writer with nothing restarted.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use quorate_e2e::manifests::{EtcdShape, certless_client_pod, tls_canary_pod};
use quorate_e2e::members::{PodIncarnations, canary_totals, wait_canary_writing, wait_fully_ready};
use quorate_e2e::tls::{IssuedTls, UserTls};
use quorate_e2e::{E2eEnv, Scenario, wait_for};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::READY_TIMEOUT;

/// How long a rotated leaf may take to be served: the agents re-read the Secrets every minute.
const ROTATION_TIMEOUT: Duration = Duration::from_secs(150);

/// What member `host` serves on `port` (2379 etcd's clients, 8080 the agent)
/// for `path` to a client of `ca` presenting `identity`: the certificate (DER), the status and
/// the body.
async fn request(
    (ip, host): (IpAddr, &str),
    port: u16,
    path: &str,
    ca: &str,
    identity: &(String, String),
) -> Result<(Vec<u8>, u16, String), String> {
    let tls = quorate_coord::agent_tls::client_config_from_pem(
        ca.as_bytes(),
        Some((identity.0.as_bytes(), identity.1.as_bytes())),
        "the scenario's CA",
    )
    .map_err(|e| e.to_string())?;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .tls_info(true)
        .resolve(host, SocketAddr::new(ip, port))
        .build()
        .map_err(|e| e.to_string())?;
    let response = http
        .get(format!("https://{host}:{port}{path}"))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let cert = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate().map(<[u8]>::to_vec))
        .unwrap_or_default();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap_or_default();
    Ok((cert, status, body))
}

/// The certificate member `host` presents on `port` in a TLS handshake with a client of `ca`
/// presenting `identity`. For the peer port: etcd then closes the connection, because it
/// accepts peers only at addresses their certificate names, which the node is not.
async fn handshake_certificate(
    (ip, host): (IpAddr, &str),
    port: u16,
    ca: &str,
    identity: &(String, String),
) -> Result<Vec<u8>, String> {
    let config = quorate_coord::agent_tls::client_config_from_pem(
        ca.as_bytes(),
        Some((identity.0.as_bytes(), identity.1.as_bytes())),
        "the scenario's CA",
    )
    .map_err(|e| e.to_string())?;
    let server_name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    tokio::task::spawn_blocking(move || {
        let mut tcp = std::net::TcpStream::connect_timeout(
            &SocketAddr::new(ip, port),
            Duration::from_secs(10),
        )
        .map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut tls = rustls::ClientConnection::new(std::sync::Arc::new(config), server_name)
            .map_err(|e| e.to_string())?;
        while tls.is_handshaking() {
            tls.complete_io(&mut tcp)
                .map_err(|e| format!("TLS handshake with {ip}:{port}: {e}"))?;
        }
        tls.peer_certificates()
            .and_then(|chain| chain.first())
            .map(|cert| cert.to_vec())
            .ok_or_else(|| format!("{ip}:{port} presented no certificate"))
    })
    .await
    .map_err(|e| e.to_string())?
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("a PEM certificate")
        .to_vec()
}

/// Each member's pod name, IP and DNS name under the peer Service.
async fn members(pods: &Api<Pod>, name: &str, ns: &str) -> Vec<(String, IpAddr, String)> {
    let mut found = Vec::new();
    for i in 0..3 {
        let pod = format!("{name}-{i}");
        let ip = pods
            .get(&pod)
            .await
            .expect("member pod")
            .status
            .and_then(|s| s.pod_ip)
            .expect("a pod IP")
            .parse()
            .expect("an IP address");
        let host = format!("{pod}.{name}-peer.{ns}.svc");
        found.push((pod, ip, host));
    }
    found
}

/// Waits until every member serves the certificates of `issued` on its client, peer and agent
/// ports; returns each member's etcd process start time (from etcd's `/metrics`, so a restart
/// of etcd changes it).
async fn wait_serving(
    pods: &Api<Pod>,
    (name, ns): (&str, &str),
    issued: &IssuedTls,
    user_tls: &UserTls,
    timeout: Duration,
) -> Vec<Option<String>> {
    let (server, peer) = (der(&issued.server_cert), der(&issued.peer.0));
    let agent = der(&issued.backup_server_cert);
    let (peer_ca, backup_ca) = (user_tls.peer_ca(), user_tls.backup_ca());
    let members = members(pods, name, ns).await;
    wait_for(
        "every member serving the issued client and peer certificates",
        timeout,
        Duration::from_secs(2),
        || async {
            let mut started = Vec::new();
            for (pod, ip, host) in &members {
                let at = (*ip, host.as_str());
                let (cert, _, metrics) =
                    request(at, 2379, "/metrics", &issued.client_ca, &issued.client).await?;
                if cert != server {
                    return Err(format!("{pod} serves another client-port certificate"));
                }
                let cert = handshake_certificate(at, 2380, &peer_ca, &issued.peer).await?;
                if cert != peer {
                    return Err(format!("{pod} serves another peer certificate"));
                }
                let (cert, ..) =
                    request(at, 8080, "/healthz", &backup_ca, &issued.backup_client).await?;
                if cert != agent {
                    return Err(format!("{pod}'s agent serves another certificate"));
                }
                started.push(
                    metrics
                        .lines()
                        .find(|l| l.starts_with("process_start_time_seconds "))
                        .map(str::to_string),
                );
            }
            Ok(started)
        },
    )
    .await
}

/// How often etcd started in each member pod (the agent logs each start).
async fn etcd_starts(s: &Scenario, ns: &str, name: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    for i in 0..3 {
        let log = s
            .cluster
            .kubectl(&["-n", ns, "logs", &format!("{name}-{i}"), "-c", "etcd"])
            .await
            .ok();
        starts.push(log.lines().filter(|l| l.contains("etcd started")).count());
    }
    starts
}

/// Three members with client and peer TLS from user-made Secrets whose certificates carry DNS
/// names only, the agents' API over TLS and encrypted backups become ready with backups (peers
/// verify each other by reverse lookup of their pod IPs, which the cluster DNS answers for
/// pods behind the headless peer Service); a TLS writer pod goes through `<name>-client`, a pod
/// without a client certificate is refused; then new leaves for every TLS from the same CAs
/// are applied under the writer: every member serves them within the agents' refresh, no write
/// fails or waits more than 2 s, no pod or etcd restarts, and the agents take a snapshot for
/// the new client certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_user_made_dns_only_certificates_and_leaf_rotation_under_a_canary() {
    let Some(env) = E2eEnv::from_env_or_skip(
        "s11_user_made_dns_only_certificates_and_leaf_rotation_under_a_canary",
    ) else {
        return;
    };
    let mut s = Scenario::start(&env, "s11-user-tls").await;
    let ns = s.namespace.clone();
    let name = "etcd-sec";
    let bucket = s.bucket_dir().display().to_string();
    let keys = format!("{name}-backup-keys");
    let user_tls = UserTls::new(name, &ns, 3);
    let first = user_tls.issue();
    s.cluster.apply(&first.secrets_yaml).await;
    let applied = Instant::now();
    s.cluster
        .apply(
            &EtcdShape {
                name,
                namespace: &ns,
                replicas: 3,
                local_bucket: Some(&bucket),
                peer_tls: true,
                client_tls: true,
                reconcile: false,
                etcd_version: None,
                cpu: quorate_e2e::manifests::DEFAULT_CPU,
                backup_tls: true,
                backup_encryption_secret: Some(&keys),
                pod_revision: None,
            }
            .yaml(),
        )
        .await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    s.measure(
        "apply→Ready with backups (3 members, client, peer and agent TLS)",
        format!("{:.1} s", applied.elapsed().as_secs_f64()),
    );
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let started = wait_serving(
        &pods,
        (name, &ns),
        &first,
        &user_tls,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        started.iter().all(Option::is_some),
        "etcd's metrics name its start time: {started:?}"
    );

    // A client with the certificate writes through the client Service.
    s.cluster
        .apply(&tls_canary_pod(&env.image, name, &ns, "5s"))
        .await;
    let canary = format!("{name}-canary");
    wait_canary_writing(&s.cluster, &ns, &canary).await;

    // One that trusts the CA but has no certificate is refused.
    s.cluster
        .apply(&certless_client_pod(&env.image, name, &ns))
        .await;
    let refused = wait_for(
        "the pod without a client certificate to finish",
        Duration::from_secs(90),
        Duration::from_secs(1),
        || async {
            let pod = pods
                .get(&format!("{name}-no-cert"))
                .await
                .map_err(|e| e.to_string())?;
            match pod.status.and_then(|st| st.phase).as_deref() {
                Some(phase @ ("Succeeded" | "Failed")) => Ok(phase.to_string()),
                other => Err(format!("phase {other:?}")),
            }
        },
    )
    .await;
    let log = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &format!("{name}-no-cert")])
        .await;
    assert_eq!(
        refused, "Failed",
        "a client without a certificate wrote: {}{}",
        log.stdout, log.stderr
    );

    // Rotation: new leaves everywhere, same CAs, under the writer.
    let member_pods: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    let mut seen = PodIncarnations::default();
    seen.observe(&pods, &member_pods).await;
    let starts_before = etcd_starts(&s, &ns, name).await;
    let second = user_tls.issue();
    let rotated = Instant::now();
    s.cluster.apply(&second.secrets_yaml).await;
    let started_after =
        wait_serving(&pods, (name, &ns), &second, &user_tls, ROTATION_TIMEOUT).await;
    s.measure(
        "Secrets applied→every member serves the new leaves",
        format!("{:.1} s", rotated.elapsed().as_secs_f64()),
    );
    // The writer keeps going on the new leaves for a few more writes.
    let through_at_rotation = canary_totals(&s.cluster, &ns, &canary)
        .await
        .and_then(|t| t["acknowledged"].as_u64())
        .unwrap_or(0);
    let totals = wait_for(
        "the writer to go on after the rotation",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            match canary_totals(&s.cluster, &ns, &canary).await {
                Some(t) if t["acknowledged"].as_u64().unwrap_or(0) >= through_at_rotation + 20 => {
                    Ok(t)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    s.writer_held(&totals, 2001);
    seen.observe(&pods, &member_pods).await;
    for pod in &member_pods {
        assert_eq!(seen.restarts(pod), 0, "{pod} was replaced or restarted");
    }
    assert_eq!(
        etcd_starts(&s, &ns, name).await,
        starts_before,
        "etcd restarted inside a pod"
    );
    assert_eq!(started_after, started, "etcd's process start time changed");
    // The agents take snapshots for the new client certificate, forwarding to the backup
    // leader with theirs.
    let (pod, ip, host) = members(&pods, name, &ns).await.remove(1);
    let (_, status, body) = request(
        (ip, &host),
        8080,
        "/snapshot/delta",
        &user_tls.backup_ca(),
        &second.backup_client,
    )
    .await
    .unwrap_or_else(|e| panic!("a delta snapshot through {pod}: {e}"));
    assert_eq!(status, 200, "a delta snapshot through {pod}: {body}");
    s.measure("pod restarts / etcd restarts", "0 / 0");
    s.pass().await;
}
