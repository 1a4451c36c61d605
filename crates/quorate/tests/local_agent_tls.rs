//! The agents' API over TLS (`spec.backup.tls`) on a local cluster with backups: HTTPS only,
//! snapshots only for a client certificate from the CA (any member, forwarded to the backup
//! leader over TLS), every refusal counted, a rotated server certificate served and a CA
//! rotated through a bundle, without restarting any agent or etcd.

mod support;

use std::time::Duration;

use support::{Local, condition, eventually, manifest, metric, path_str, runtime};

/// Three members with backups, the agents' TLS from the Secrets `agent-*` (generated locally).
fn with_agent_tls(name: &str) -> String {
    manifest(name, 3, "").replace(
        "  backup: {}\n",
        "  backup:\n    tls:\n      tlsCASecretRef:\n        name: agent-ca\n        dataKey: ca.crt\n      \
         serverTLSSecretRef:\n        name: agent-server\n      clientTLSSecretRef:\n        name: agent-client\n    \
         store:\n      provider: Local\n      container: bucket\n      prefix: main\n    deltaSnapshotPeriod: 1s\n",
    )
}

/// What a request over HTTPS gave: the status and body, and the server's certificate (DER).
struct Answer {
    code: u16,
    body: String,
    server_cert: Vec<u8>,
}

/// `GET https://127.0.0.1:port/path` trusting `ca`, presenting `client` (cert, key PEM) if given.
fn https_get(
    port: u16,
    path: &str,
    ca: &[u8],
    client: Option<(&[u8], &[u8])>,
) -> Result<Answer, String> {
    let config = quorate_coord::agent_tls::client_config_from_pem(ca, client, "test").unwrap();
    runtime().block_on(async {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .tls_info(true)
            .build()
            .unwrap();
        let response = http
            .get(format!("https://127.0.0.1:{port}{path}"))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        let server_cert = response
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .and_then(|i| i.peer_certificate().map(<[u8]>::to_vec))
            .unwrap_or_default();
        let code = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Ok(Answer {
            code,
            body,
            server_cert,
        })
    })
}

#[test]
fn agents_serve_https_and_take_snapshots_only_for_client_certificates() {
    let local = Local::new();
    let name = "guarded";
    let path = local.manifest("guarded.yaml", &with_agent_tls(name));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(&local, name, "BackupReady")?.0 == "True").then_some(())
    });
    let secrets = local.cluster_dir(name).join("secrets");
    let read = |p: &str| std::fs::read(secrets.join(p)).unwrap();
    let (ca, cert, key) = (
        read("agent-ca/ca.crt"),
        read("agent-client/tls.crt"),
        read("agent-client/tls.key"),
    );
    let ports: Vec<u16> = (0..3).map(|i| local.agent_port(name, i)).collect();
    let metrics = |port| https_get(port, "/metrics", &ca, None).unwrap().body;

    // Every certificate in use is watched: the soonest on the leases, each in the metrics.
    let (valid, message) = eventually("CertificatesValid", Duration::from_secs(30), || {
        condition(&local, name, "CertificatesValid").filter(|c| c.1.contains("expires at"))
    });
    assert_eq!(valid, "True", "{message}");
    let server_cert = secrets.join("agent-server/tls.crt").display().to_string();
    let expiry = metric(
        &metrics(ports[0]),
        &format!("quorate_certificate_expiry_timestamp_seconds{{file=\"{server_cert}\"}}"),
    );
    assert!(
        expiry.is_some_and(|t| t > jiff::Timestamp::now().as_second() as f64),
        "{}",
        metrics(ports[0])
    );

    // Plain HTTP gets no answer; the failed handshake is counted.
    let plain = std::panic::catch_unwind(|| support::http_get(ports[0], "/healthz"));
    assert!(
        plain.is_err() || plain.as_ref().is_ok_and(|(code, _)| *code != 200),
        "plain HTTP answered"
    );
    let handshakes = |port| {
        metric(
            &metrics(port),
            "quorate_agent_requests_refused_total{path=\"(tls handshake)\"}",
        )
    };
    assert!(
        handshakes(ports[0]).unwrap_or(0.0) >= 1.0,
        "{}",
        metrics(ports[0])
    );

    // Without a client certificate: probes and metrics answer, snapshots are refused.
    let health = https_get(ports[1], "/healthz", &ca, None).unwrap();
    assert_eq!(health.code, 200, "{}", health.body);
    let refused = https_get(ports[1], "/snapshot/full", &ca, None).unwrap();
    assert_eq!(refused.code, 401, "{}", refused.body);
    assert!(
        refused.body.contains("client certificate"),
        "{}",
        refused.body
    );
    assert_eq!(
        metric(
            &metrics(ports[1]),
            "quorate_agent_requests_refused_total{path=\"/snapshot/full\"}"
        ),
        Some(1.0)
    );

    // A certificate from another CA: the handshake is refused.
    let other = tempfile::tempdir().unwrap();
    let stranger = quorate_testkit::TestCerts::generate(other.path()).unwrap();
    let (s_cert, s_key) = (
        std::fs::read(&stranger.client_cert).unwrap(),
        std::fs::read(&stranger.client_key).unwrap(),
    );
    let before = handshakes(ports[2]).unwrap_or(0.0);
    let denied = https_get(ports[2], "/snapshot/full", &ca, Some((&s_cert, &s_key)));
    assert!(
        denied.is_err() || denied.as_ref().is_ok_and(|a| a.code == 401),
        "a foreign certificate was accepted"
    );
    assert!(
        handshakes(ports[2]).unwrap_or(0.0) > before,
        "{}",
        metrics(ports[2])
    );

    // With the cluster's client certificate every member takes it (followers forward to the
    // backup leader, over TLS with their own client certificate).
    for port in &ports {
        let taken = https_get(*port, "/snapshot/full", &ca, Some((&cert, &key))).unwrap();
        assert_eq!(taken.code, 200, "agent on {port}: {}", taken.body);
        assert!(taken.body.contains("Full-"), "{}", taken.body);
    }

    // A rotated server certificate (same CA) is served from the next connection on, with no
    // agent or etcd restarted: the local runtime issues the missing leaf again.
    let first = https_get(ports[0], "/healthz", &ca, None)
        .unwrap()
        .server_cert;
    let pids = |f: &dyn Fn(&str) -> Option<i32>| -> Vec<Option<i32>> {
        (0..3).map(|i| f(&format!("{name}-{i}"))).collect()
    };
    let agents = pids(&|m| local.agent_pid(name, m));
    let etcds = pids(&|m| local.etcd_pid(name, m));
    let nothing_restarted = || {
        assert_eq!(
            pids(&|m| local.agent_pid(name, m)),
            agents,
            "an agent restarted"
        );
        assert_eq!(
            pids(&|m| local.etcd_pid(name, m)),
            etcds,
            "an etcd restarted"
        );
    };
    std::fs::remove_file(secrets.join("agent-server/tls.crt")).unwrap();
    std::fs::remove_file(secrets.join("agent-server/tls.key")).unwrap();
    local.ok(&["apply", "-f", path_str(&path)]);
    let rotated = eventually(
        "the new server certificate to be served",
        Duration::from_secs(60),
        || {
            let served = https_get(ports[0], "/healthz", &ca, None).ok()?.server_cert;
            (!served.is_empty() && served != first).then_some(served)
        },
    );
    assert_eq!(
        rotated,
        std::fs::read(secrets.join("agent-server/tls.crt"))
            .map(|pem| {
                use rustls::pki_types::pem::PemObject;
                rustls::pki_types::CertificateDer::from_pem_slice(&pem)
                    .unwrap()
                    .to_vec()
            })
            .unwrap()
    );
    nothing_restarted();
    let taken = https_get(ports[2], "/snapshot/delta", &ca, Some((&cert, &key))).unwrap();
    assert_eq!(taken.code, 200, "{}", taken.body);

    // CA rotation through a bundle, with nothing restarted. 1: the CA file holds the old and
    // the new CA, so certificates of either are trusted.
    let new = tempfile::tempdir().unwrap();
    let next = quorate_testkit::TestCerts::generate(new.path()).unwrap();
    let new_ca = std::fs::read(&next.ca).unwrap();
    let (new_cert, new_key) = (
        std::fs::read(&next.client_cert).unwrap(),
        std::fs::read(&next.client_key).unwrap(),
    );
    let bundle = [ca.clone(), new_ca.clone()].concat();
    std::fs::write(secrets.join("agent-ca/ca.crt"), &bundle).unwrap();
    // 2: new leaves from the new CA: the agents' server certificate and the client one they
    // present to each other.
    for (from, to) in [
        (&next.server_cert, "agent-server/tls.crt"),
        (&next.server_key, "agent-server/tls.key"),
        (&next.client_cert, "agent-client/tls.crt"),
        (&next.client_key, "agent-client/tls.key"),
    ] {
        std::fs::copy(from, secrets.join(to)).unwrap();
    }
    for (who, client) in [("old", (&cert, &key)), ("new", (&new_cert, &new_key))] {
        let taken = https_get(
            ports[1],
            "/snapshot/delta",
            &new_ca,
            Some((client.0, client.1)),
        )
        .unwrap_or_else(|e| panic!("{who} client certificate during the rotation: {e}"));
        assert_eq!(taken.code, 200, "{who}: {}", taken.body);
    }
    // 3: the old CA leaves the bundle: its certificates are refused, the new ones work.
    std::fs::write(secrets.join("agent-ca/ca.crt"), &new_ca).unwrap();
    let old_client = https_get(ports[1], "/snapshot/delta", &new_ca, Some((&cert, &key)));
    assert!(
        old_client.is_err() || old_client.as_ref().is_ok_and(|a| a.code == 401),
        "a certificate of the retired CA was accepted"
    );
    let taken = https_get(
        ports[1],
        "/snapshot/delta",
        &new_ca,
        Some((&new_cert, &new_key)),
    )
    .unwrap();
    assert_eq!(taken.code, 200, "{}", taken.body);
    nothing_restarted();
}
