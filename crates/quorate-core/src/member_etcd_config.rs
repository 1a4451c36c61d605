//! The etcd configuration of one member: which flags its etcd process gets, derived from the
//! cluster configuration and from how the member starts (bootstrap, join, or restart on its
//! own data). Pure, so "what would member i run with" is answerable without running anything.

use crate::cluster_config::{ClusterConfig, MemberEndpoints, TlsFiles};
use quorate_api::EtcdVersion;
use thiserror::Error;

/// How a member's etcd starts; decides `initial-cluster` and `initial-cluster-state`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartMode {
    /// Part of the first start of a brand-new cluster: every bootstrap member starts at once.
    Bootstrap,
    /// Joins a running cluster whose members (name, peer URL) are given, including itself.
    Join {
        /// Current members of the running cluster, this member included.
        initial_cluster: Vec<(String, String)>,
    },
    /// The data directory already holds this member's state; initial-* flags are ignored by etcd.
    Restart,
    /// Quorum-loss recovery: the data directory holds this member's state, and etcd starts as a
    /// one-member cluster with it (`--force-new-cluster`), dropping every other member. Used
    /// once, for the start the recovery decided; later starts are `Restart`.
    ForceNewCluster,
}

/// Why a member configuration cannot be computed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The member is not part of the desired cluster.
    #[error(
        "member {member:?} is not in the configuration of cluster {cluster:?} (members: {known}); \
         check the member index or the cluster's replicas"
    )]
    UnknownMember {
        /// The member asked for.
        member: String,
        /// The cluster.
        cluster: String,
        /// Names that are known.
        known: String,
    },
}

/// Flags that matter for a running member: when any of them changes, etcd must restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeFlags {
    /// Which etcd runs: the binary, and the flags that differ between versions.
    pub etcd_version: EtcdVersion,
    /// `--name`.
    pub name: String,
    /// `--data-dir`.
    pub data_dir: String,
    /// `--listen-peer-urls`.
    pub listen_peer_urls: String,
    /// `--listen-client-urls`.
    pub listen_client_urls: String,
    /// `--initial-advertise-peer-urls` (also what the agent keeps in etcd's member list).
    pub advertise_peer_urls: String,
    /// `--advertise-client-urls`.
    pub advertise_client_urls: String,
    /// `--quota-backend-bytes`.
    pub quota_backend_bytes: u64,
    /// `--snapshot-count`.
    pub snapshot_count: u64,
    /// `--auto-compaction-mode`.
    pub auto_compaction_mode: String,
    /// `--auto-compaction-retention`.
    pub auto_compaction_retention: String,
    /// `--enable-grpc-gateway`.
    pub enable_grpc_gateway: bool,
    /// `--metrics`.
    pub metrics: String,
    /// `--heartbeat-interval`.
    pub raft_heartbeat_millis: u64,
    /// `--election-timeout`.
    pub election_timeout_millis: u64,
    /// Client TLS files.
    pub client_tls: Option<TlsFiles>,
    /// Peer TLS files.
    pub peer_tls: Option<TlsFiles>,
    /// `--listen-metrics-urls`: plain-HTTP `/metrics` and `/health`.
    pub listen_metrics_urls: Option<String>,
}

/// Flags etcd reads only when its data directory is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapFlags {
    /// `--initial-cluster` as (name, peer URL) pairs.
    pub initial_cluster: Vec<(String, String)>,
    /// `--initial-cluster-state`: `new` or `existing`.
    pub initial_cluster_state: &'static str,
    /// `--initial-cluster-token`.
    pub initial_cluster_token: String,
    /// `--force-new-cluster`: start as a one-member cluster on the existing data.
    pub force_new_cluster: bool,
}

/// The complete etcd configuration of one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberEtcdConfig {
    /// Flags whose change requires a restart.
    pub runtime: RuntimeFlags,
    /// Flags used on first start only.
    pub bootstrap: BootstrapFlags,
}

/// Computes the configuration member `me` runs with.
pub fn member_etcd_config(
    cluster: &ClusterConfig,
    me: &str,
    data_dir: &str,
    mode: &StartMode,
) -> Result<MemberEtcdConfig, ConfigError> {
    let member = cluster
        .member(me)
        .ok_or_else(|| ConfigError::UnknownMember {
            member: me.to_string(),
            cluster: cluster.cluster_name.clone(),
            known: cluster
                .members
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let runtime = runtime_flags(cluster, member, data_dir);
    let (initial_cluster, initial_cluster_state) = match mode {
        StartMode::Bootstrap => (
            cluster
                .members
                .iter()
                .filter(|m| cluster.is_bootstrap_member(&m.name))
                .map(|m| (m.name.clone(), m.peer_url.clone()))
                .collect(),
            "new",
        ),
        StartMode::Join { initial_cluster } => (initial_cluster.clone(), "existing"),
        StartMode::Restart | StartMode::ForceNewCluster => (
            vec![(member.name.clone(), member.peer_url.clone())],
            "existing",
        ),
    };
    Ok(MemberEtcdConfig {
        runtime,
        bootstrap: BootstrapFlags {
            initial_cluster,
            initial_cluster_state,
            initial_cluster_token: cluster.cluster_token.clone(),
            force_new_cluster: *mode == StartMode::ForceNewCluster,
        },
    })
}

fn runtime_flags(
    cluster: &ClusterConfig,
    member: &MemberEndpoints,
    data_dir: &str,
) -> RuntimeFlags {
    let peer_scheme = if cluster.peer_tls.is_some() {
        "https"
    } else {
        "http"
    };
    let client_scheme = if cluster.client_tls.is_some() {
        "https"
    } else {
        "http"
    };
    let host = &cluster.listen_host;
    RuntimeFlags {
        etcd_version: cluster.etcd_version,
        name: member.name.clone(),
        data_dir: data_dir.to_string(),
        listen_peer_urls: format!("{peer_scheme}://{host}:{}", member.peer_port),
        listen_client_urls: format!("{client_scheme}://{host}:{}", member.client_port),
        advertise_peer_urls: member.peer_url.clone(),
        advertise_client_urls: member.client_url.clone(),
        quota_backend_bytes: cluster.etcd.quota_backend_bytes,
        snapshot_count: cluster.etcd.snapshot_count,
        auto_compaction_mode: cluster.etcd.auto_compaction_mode.clone(),
        auto_compaction_retention: cluster.etcd.auto_compaction_retention.clone(),
        enable_grpc_gateway: cluster.etcd.enable_grpc_gateway,
        metrics: cluster.etcd.metrics.clone(),
        raft_heartbeat_millis: cluster.etcd.raft_heartbeat_millis,
        election_timeout_millis: cluster.etcd.election_timeout_millis,
        client_tls: cluster.client_tls.clone(),
        peer_tls: cluster.peer_tls.clone(),
        listen_metrics_urls: member
            .metrics_port
            .map(|port| format!("http://{host}:{port}")),
    }
}

impl MemberEtcdConfig {
    /// Command-line arguments for the `etcd` binary.
    pub fn to_args(&self) -> Vec<String> {
        let r = &self.runtime;
        let b = &self.bootstrap;
        let mut args = vec![
            format!("--name={}", r.name),
            format!("--data-dir={}", r.data_dir),
            format!("--listen-peer-urls={}", r.listen_peer_urls),
            format!("--listen-client-urls={}", r.listen_client_urls),
            format!("--initial-advertise-peer-urls={}", r.advertise_peer_urls),
            format!("--advertise-client-urls={}", r.advertise_client_urls),
            format!(
                "--initial-cluster={}",
                b.initial_cluster
                    .iter()
                    .map(|(n, u)| format!("{n}={u}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!("--initial-cluster-state={}", b.initial_cluster_state),
            format!("--initial-cluster-token={}", b.initial_cluster_token),
            format!("--quota-backend-bytes={}", r.quota_backend_bytes),
            format!("--snapshot-count={}", r.snapshot_count),
            format!("--auto-compaction-mode={}", r.auto_compaction_mode),
            format!(
                "--auto-compaction-retention={}",
                r.auto_compaction_retention
            ),
            format!("--enable-grpc-gateway={}", r.enable_grpc_gateway),
            format!("--metrics={}", r.metrics),
            format!("--heartbeat-interval={}", r.raft_heartbeat_millis),
            format!("--election-timeout={}", r.election_timeout_millis),
        ];
        args.extend(version_flags(r.etcd_version));
        if let Some(urls) = &r.listen_metrics_urls {
            args.push(format!("--listen-metrics-urls={urls}"));
        }
        if let Some(tls) = &r.client_tls {
            args.push(format!("--cert-file={}", tls.cert_file));
            args.push(format!("--key-file={}", tls.key_file));
            args.push(format!("--trusted-ca-file={}", tls.ca_file));
            args.push("--client-cert-auth=true".to_string());
        }
        if let Some(tls) = &r.peer_tls {
            args.push(format!("--peer-cert-file={}", tls.cert_file));
            args.push(format!("--peer-key-file={}", tls.key_file));
            args.push(format!("--peer-trusted-ca-file={}", tls.ca_file));
            args.push("--peer-client-cert-auth=true".to_string());
        }
        if b.force_new_cluster {
            args.push("--force-new-cluster".to_string());
        }
        args
    }
}

/// The flags one etcd version needs and another does not know. The same two safety features
/// on every version from 3.5: 3.5 has them as `--experimental-*` flags, 3.6 maps those to
/// feature gates (and refuses a flag together with its gate), 3.7 removed the flags and fails
/// to start on them. `--enable-v2` (gone in 3.6) is never passed, and every other flag quorate
/// renders exists unchanged from 3.4 to 3.7; `--snapshot-count` is always explicit (see
/// `quorate_api::defaults`), so the default that fell from 100,000 to 10,000 in 3.6 never
/// matters.
fn version_flags(version: EtcdVersion) -> Vec<String> {
    if version >= EtcdVersion::V3_6 {
        vec![format!("--feature-gates={}", FEATURE_GATES.join(","))]
    } else if version >= EtcdVersion::V3_5 {
        vec![
            // Compares the members' hashes after every compaction, so a corrupted member is
            // found while its peers still hold the data (off by default in 3.5).
            "--experimental-compact-hash-check-enabled=true".to_string(),
            // A member being defragmented answers "unhealthy" instead of stalling its clients.
            "--experimental-stop-grpc-service-on-defrag=true".to_string(),
        ]
    } else {
        // 3.4 logs with the deprecated capnslog unless told otherwise; 3.5 uses zap already.
        vec![
            "--logger=zap".to_string(),
            "--log-outputs=stderr".to_string(),
        ]
    }
}

/// Whether the etcd running with `running` must restart to pick up `latest` (its runtime flags
/// differ); a configuration that no longer describes `me` is not a restart reason.
pub fn restart_needed(
    running: &MemberEtcdConfig,
    latest: &ClusterConfig,
    me: &str,
    data_dir: &str,
) -> bool {
    match member_etcd_config(latest, me, data_dir, &StartMode::Restart) {
        Ok(next) => next.runtime != running.runtime,
        Err(_) => false,
    }
}

/// The feature gates quorate turns on from etcd 3.6: the gates of the two experimental flags
/// it sets on 3.5 (`ExperimentalFlagToFeatureMap` in etcd's `server/features`).
pub const FEATURE_GATES: [&str; 2] = ["CompactHashCheck=true", "StopGRPCServiceOnDefrag=true"];

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cluster_config::EtcdSettings;

    pub(crate) fn three_members() -> ClusterConfig {
        let members = (0..3)
            .map(|i| MemberEndpoints {
                name: format!("etcd-main-{i}"),
                lease_name: format!("etcd-main-{i}"),
                peer_url: format!("http://127.0.0.1:{}", 2380 + 10 * i),
                client_url: format!("http://127.0.0.1:{}", 2379 + 10 * i),
                peer_port: 2380 + 10 * i,
                client_port: 2379 + 10 * i,
                agent_url: format!("http://127.0.0.1:{}", 8080 + 10 * i),
                agent_port: 8080 + 10 * i,
                metrics_port: None,
            })
            .collect();
        ClusterConfig {
            cluster_name: "etcd-main".into(),
            namespace: "default".into(),
            cluster_token: "etcd-main-abc".into(),
            members,
            leaving: Vec::new(),
            bootstrap_members: vec![
                "etcd-main-0".into(),
                "etcd-main-1".into(),
                "etcd-main-2".into(),
            ],
            listen_host: "127.0.0.1".into(),
            etcd_version: EtcdVersion::V3_4,
            etcd_version_target: None,
            etcd: EtcdSettings {
                quota_backend_bytes: 8 << 30,
                snapshot_count: 10_000,
                auto_compaction_mode: "periodic".into(),
                auto_compaction_retention: "30m".into(),
                enable_grpc_gateway: false,
                metrics: "basic".into(),
                raft_heartbeat_millis: 100,
                election_timeout_millis: 1000,
            },
            client_tls: None,
            peer_tls: None,
            agent_tls: None,
            secret_files: Vec::new(),
            heartbeat_millis: 10_000,
            backup: None,
            recovery_request: None,
            maintenance: Default::default(),
            agent_token_secret: None,
            hibernation_request: None,
        }
    }

    #[test]
    fn bootstrap_lists_every_bootstrap_member_as_new() {
        let cfg = member_etcd_config(&three_members(), "etcd-main-1", "/d", &StartMode::Bootstrap)
            .unwrap();
        let args = cfg.to_args();
        assert!(args.contains(&"--name=etcd-main-1".to_string()));
        assert!(args.contains(&"--initial-cluster-state=new".to_string()));
        assert!(args.contains(
            &"--initial-cluster=etcd-main-0=http://127.0.0.1:2380,etcd-main-1=http://127.0.0.1:2390,etcd-main-2=http://127.0.0.1:2400"
                .to_string()
        ));
        assert!(args.contains(&"--listen-client-urls=http://127.0.0.1:2389".to_string()));
    }

    #[test]
    fn bootstrap_excludes_members_added_later() {
        let mut cluster = three_members();
        cluster.bootstrap_members = vec!["etcd-main-0".into()];
        let cfg = member_etcd_config(&cluster, "etcd-main-0", "/d", &StartMode::Bootstrap).unwrap();
        assert_eq!(cfg.bootstrap.initial_cluster.len(), 1);
    }

    #[test]
    fn join_uses_the_running_membership_and_existing_state() {
        let initial = vec![
            (
                "etcd-main-0".to_string(),
                "http://127.0.0.1:2380".to_string(),
            ),
            (
                "etcd-main-2".to_string(),
                "http://127.0.0.1:2400".to_string(),
            ),
        ];
        let cfg = member_etcd_config(
            &three_members(),
            "etcd-main-2",
            "/d",
            &StartMode::Join {
                initial_cluster: initial.clone(),
            },
        )
        .unwrap();
        assert_eq!(cfg.bootstrap.initial_cluster, initial);
        assert_eq!(cfg.bootstrap.initial_cluster_state, "existing");
    }

    #[test]
    fn runtime_flags_ignore_the_start_mode() {
        let c = three_members();
        let a = member_etcd_config(&c, "etcd-main-0", "/d", &StartMode::Bootstrap).unwrap();
        let b = member_etcd_config(&c, "etcd-main-0", "/d", &StartMode::Restart).unwrap();
        assert_eq!(a.runtime, b.runtime);
        assert_ne!(a.bootstrap, b.bootstrap);
    }

    #[test]
    fn peer_tls_switches_scheme_and_adds_files() {
        let mut c = three_members();
        c.peer_tls = Some(TlsFiles {
            ca_file: "/ca".into(),
            cert_file: "/crt".into(),
            key_file: "/key".into(),
            client_cert_file: None,
            client_key_file: None,
            trusted_ca_digest: None,
        });
        let args = member_etcd_config(&c, "etcd-main-0", "/d", &StartMode::Restart)
            .unwrap()
            .to_args();
        assert!(args.contains(&"--listen-peer-urls=https://127.0.0.1:2380".to_string()));
        assert!(args.contains(&"--peer-trusted-ca-file=/ca".to_string()));
    }

    #[test]
    fn each_version_gets_the_flags_it_knows_and_a_version_change_restarts() {
        let mut c = three_members();
        let v34 = member_etcd_config(&c, "etcd-main-0", "/d", &StartMode::Restart).unwrap();
        let args = v34.to_args();
        assert!(args.contains(&"--logger=zap".to_string()), "{args:?}");
        assert!(
            !args.iter().any(|a| a.contains("compact-hash-check")),
            "{args:?}"
        );
        c.etcd_version = EtcdVersion::V3_5;
        let v35 = member_etcd_config(&c, "etcd-main-0", "/d", &StartMode::Restart).unwrap();
        let args = v35.to_args();
        assert!(
            args.contains(&"--experimental-compact-hash-check-enabled=true".to_string()),
            "{args:?}"
        );
        assert!(!args.iter().any(|a| a.starts_with("--logger")), "{args:?}");
        assert_ne!(
            v34.runtime, v35.runtime,
            "a version change must restart etcd"
        );
        for version in [EtcdVersion::V3_6, EtcdVersion::V3_7] {
            c.etcd_version = version;
            let args = member_etcd_config(&c, "etcd-main-0", "/d", &StartMode::Restart)
                .unwrap()
                .to_args();
            assert!(
                args.contains(
                    &"--feature-gates=CompactHashCheck=true,StopGRPCServiceOnDefrag=true"
                        .to_string()
                ),
                "{version}: {args:?}"
            );
            assert!(
                !args
                    .iter()
                    .any(|a| a.starts_with("--experimental") || a.starts_with("--enable-v2")),
                "{version}: {args:?}"
            );
        }
    }

    #[test]
    fn unknown_member_is_named_in_the_error() {
        let err = member_etcd_config(&three_members(), "etcd-main-7", "/d", &StartMode::Restart)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("etcd-main-7") && text.contains("etcd-main-0, etcd-main-1, etcd-main-2"),
            "{text}"
        );
    }

    #[test]
    fn only_a_change_of_etcd_flags_needs_a_restart() {
        let cluster = three_members();
        let running =
            member_etcd_config(&cluster, "etcd-main-1", "/d", &StartMode::Restart).unwrap();
        assert!(!restart_needed(&running, &cluster, "etcd-main-1", "/d"));
        let mut bigger = cluster.clone();
        bigger.etcd.quota_backend_bytes += 1;
        assert!(restart_needed(&running, &bigger, "etcd-main-1", "/d"));
        let mut without_me = cluster.clone();
        without_me.members.retain(|m| m.name != "etcd-main-1");
        assert!(!restart_needed(&running, &without_me, "etcd-main-1", "/d"));
    }
}
