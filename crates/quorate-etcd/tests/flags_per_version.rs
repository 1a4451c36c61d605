//! Every etcd setting quorate can set, rendered by `quorate_core::member_etcd_config` for each
//! supported version and checked by that version of etcd itself: a real member starts with
//! exactly the rendered flags (client and peer TLS with client-certificate auth, quota,
//! snapshot count, auto-compaction, metrics level and URL, gRPC gateway, raft timing, the
//! version's own flags: feature gates from 3.6, `--experimental-*` on 3.5, zap on 3.4), serves a
//! quorum read and a write, reports its version, and on 3.6+ reports the feature gates on.
//! etcd refuses to start on an unknown or removed flag, so 3.7 would fail here on any
//! `--experimental-*` flag (etcd #19959).
//!
//! 3.4 is Debian's `etcd` on the PATH; 3.5–3.7 come from `scripts/install-etcd.sh`. A missing
//! version skips with a message unless `QUORATE_REQUIRE_ETCD` names it (CI does).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use quorate_api::EtcdVersion;
use quorate_core::cluster_config::{ClusterConfig, EtcdSettings, MemberEndpoints, TlsFiles};
use quorate_core::member_etcd_config::{StartMode, member_etcd_config};
use quorate_etcd::binaries::EtcdBinaries;
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::{ChildGuard, PortBlock, TestCerts, etcd_of_version_or_skip, eventually};

/// A one-member cluster configuration with every etcd setting set away from etcd's defaults.
fn everything_set(version: EtcdVersion, certs: &TestCerts, ports: &[u16]) -> ClusterConfig {
    let files = |client: bool| TlsFiles {
        ca_file: certs.ca.display().to_string(),
        cert_file: certs.server_cert.display().to_string(),
        key_file: certs.server_key.display().to_string(),
        client_cert_file: client.then(|| certs.client_cert.display().to_string()),
        client_key_file: client.then(|| certs.client_key.display().to_string()),
        trusted_ca_digest: None,
    };
    let (client_port, peer_port, metrics_port) = (ports[0], ports[1], ports[2]);
    ClusterConfig {
        cluster_name: "flags".into(),
        namespace: "default".into(),
        cluster_token: format!("flags-{version}"),
        members: vec![MemberEndpoints {
            name: "flags-0".into(),
            lease_name: "flags-0".into(),
            peer_url: format!("https://127.0.0.1:{peer_port}"),
            client_url: format!("https://127.0.0.1:{client_port}"),
            peer_port,
            client_port,
            agent_url: "http://127.0.0.1:1".into(),
            agent_port: 1,
            metrics_port: Some(metrics_port),
        }],
        leaving: Vec::new(),
        bootstrap_members: vec!["flags-0".into()],
        listen_host: "127.0.0.1".into(),
        etcd_version: version,
        etcd_version_target: None,
        etcd: EtcdSettings {
            quota_backend_bytes: 3 << 30,
            snapshot_count: 25_000,
            auto_compaction_mode: "revision".into(),
            auto_compaction_retention: "1000".into(),
            enable_grpc_gateway: true,
            metrics: "extensive".into(),
            raft_heartbeat_millis: 50,
            election_timeout_millis: 500,
        },
        client_tls: Some(files(true)),
        peer_tls: Some(files(false)),
        agent_tls: None,
        secret_files: Vec::new(),
        heartbeat_millis: 10_000,
        backup: None,
        hibernation_request: None,
        recovery_request: None,
        maintenance: Default::default(),
        agent_token_secret: None,
    }
}

/// The plain-HTTP body of `GET path` on the metrics listener.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text)
}

async fn serves_with_every_setting(version: EtcdVersion, etcd: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(&dir.path().join("tls")).unwrap();
    let block = PortBlock::reserve(3);
    let ports = block.ports().to_vec();
    let cluster = everything_set(version, &certs, &ports);
    let data_dir = dir.path().join("data");
    let args = member_etcd_config(
        &cluster,
        "flags-0",
        &data_dir.display().to_string(),
        &StartMode::Bootstrap,
    )
    .unwrap()
    .to_args();
    for expected in [
        "--client-cert-auth=true",
        "--peer-client-cert-auth=true",
        "--quota-backend-bytes=3221225472",
        "--snapshot-count=25000",
        "--auto-compaction-mode=revision",
        "--auto-compaction-retention=1000",
        "--enable-grpc-gateway=true",
        "--metrics=extensive",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected}: {args:?}");
    }
    let log_path = dir.path().join("etcd.log");
    let log = std::fs::File::create(&log_path).unwrap();
    drop(block.release());
    let _etcd = ChildGuard::spawn(
        Command::new(etcd)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .env_clear(),
    )
    .unwrap();
    let log_tail = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let tls = quorate_etcd::client_tls(&cluster).unwrap();
    let client = MemberClient::connect(
        &cluster.members[0].client_url,
        Some(&tls),
        EtcdTimeouts::default(),
    )
    .await
    .unwrap();
    let status = eventually(
        &format!("etcd {version} serving with every setting"),
        Duration::from_secs(60),
        || async { client.check_health().await.ok() },
    )
    .await;
    assert!(
        status.version.starts_with(&format!("{version}.")),
        "{version} answered as {}",
        status.version
    );
    client.put("k", "v").await.unwrap();
    assert_eq!(client.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));

    let health = http_get(ports[2], "/health").unwrap();
    assert!(health.contains("\"health\":\"true\""), "{health}");
    let metrics = http_get(ports[2], "/metrics").unwrap();
    if version >= EtcdVersion::V3_6 {
        for gate in ["CompactHashCheck", "StopGRPCServiceOnDefrag"] {
            assert!(
                metrics.lines().any(|l| l
                    .starts_with(&format!("etcd_server_feature_enabled{{name=\"{gate}\""))
                    && l.ends_with(" 1")),
                "etcd {version} does not report feature gate {gate} on"
            );
        }
    }
    // Nothing quorate passes is on its way out.
    let text = log_tail();
    assert!(
        !text.contains("deprecated"),
        "etcd {version} warns of a deprecated setting:\n{text}"
    );
}

#[tokio::test]
async fn every_supported_version_starts_and_serves_with_every_setting_quorate_can_set() {
    for version in EtcdVersion::SUPPORTED {
        let found = EtcdBinaries::default().etcd(version);
        let Some(etcd) = (if version == EtcdVersion::V3_4 {
            Some(found.expect("Debian's etcd 3.4 (scripts/install-deps.sh)"))
        } else {
            etcd_of_version_or_skip(version, found)
        }) else {
            continue;
        };
        serves_with_every_setting(version, &etcd).await;
    }
}
