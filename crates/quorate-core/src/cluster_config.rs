//! The cluster configuration every member's agent reads: rendered once by the controller (the
//! local runtime writes it as a file, the operator as the `<name>-config` ConfigMap) so that the
//! agents never need the `Etcd` object or the Kubernetes API to start etcd.

use serde::{Deserialize, Serialize};

/// Everything an agent needs to run its member, for one cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfig {
    /// Name of the `Etcd` object.
    pub cluster_name: String,
    /// Namespace of the `Etcd` object.
    pub namespace: String,
    /// `initial-cluster-token`; unique per cluster incarnation so a wiped member can never be
    /// mistaken for the old one by a live peer.
    pub cluster_token: String,
    /// The members that run, in ordinal order: the desired ones, then any that are leaving.
    pub members: Vec<MemberEndpoints>,
    /// Members of `members` that are not desired but still in etcd's membership (a scale-in,
    /// or a wake at a smaller size): they keep running until etcd removed them, and never
    /// join or bootstrap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaving: Vec<String>,
    /// Members that form the cluster when it is created for the first time. A member outside
    /// this set (added by a later scale-out) always joins as a learner.
    pub bootstrap_members: Vec<String>,
    /// Host etcd listens on (`127.0.0.1` locally, `0.0.0.0` in a pod).
    pub listen_host: String,
    /// The etcd version the members run. Configurations written before quorate chose
    /// versions ran etcd 3.4.
    #[serde(default = "unrecorded_version")]
    pub etcd_version: quorate_api::EtcdVersion,
    /// The version the `Etcd` asks for (`quorate.io/etcd-version`), the end of a chained
    /// change; `None` without the annotation. The agents read it to know whether the step
    /// they run waits for raft-snapshot evidence (core
    /// `etcd_version::reads_snapshot_evidence`); not part of the rollout hash: a new request
    /// restarts nothing by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version_target: Option<quorate_api::EtcdVersion>,
    /// etcd tuning taken from the spec.
    pub etcd: EtcdSettings,
    /// Client TLS, when `spec.etcd.clientUrlTls` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<TlsFiles>,
    /// Peer TLS, when `spec.etcd.peerUrlTls` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_tls: Option<TlsFiles>,
    /// The agents' HTTPS, when `spec.backup.tls` is set: they serve with its server
    /// certificate, and with a client certificate configured they require one from its CA
    /// for the endpoints that take snapshots (and present it to each other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_tls: Option<TlsFiles>,
    /// Secrets the agent writes as files before etcd uses them (Kubernetes: the TLS Secrets,
    /// read through the API; locally the files exist already and this is empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_files: Vec<SecretFiles>,
    /// How often an agent renews its member lease, in milliseconds.
    pub heartbeat_millis: u64,
    /// Backups, when `spec.backup.store` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupConfig>,
    /// Set while `spec.replicas` is 0: names this hibernation (the `Etcd`'s generation), so the
    /// backup leader's final-snapshot report can be matched to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernation_request: Option<String>,
    /// An explicit request to recover from quorum loss (the `quorate.io/recover` annotation's
    /// value): members that did not report may be treated as lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_request: Option<String>,
    /// Maintenance settings. Not part of what a rollout rolls: changing them restarts nothing.
    #[serde(default)]
    pub maintenance: MaintenanceConfig,
    /// The Secret holding the bearer token the agents require on `/snapshot/full` and
    /// `/snapshot/delta` (read through the coordination: the API, or the local `secrets/`
    /// directory); `None` (configurations written before tokens) leaves them open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_token_secret: Option<String>,
}

/// When and how the members' databases are defragmented (core `maintenance::defrag`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceConfig {
    /// `spec.etcd.defragmentationSchedule` (cron, UTC).
    pub defrag_schedule: String,
    /// `spec.etcd.etcdDefragTimeout` in seconds: how long one member's defragmentation may take.
    pub defrag_timeout_secs: u64,
    /// Thresholds that start a defragmentation between schedules.
    pub defrag_thresholds: quorate_api::defrag::DefragThresholds,
    /// An on-demand request (`quorate.io/defragment`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_request: Option<String>,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            defrag_schedule: quorate_api::defaults::DEFAULT_DEFRAGMENTATION_SCHEDULE.to_string(),
            defrag_timeout_secs: 15 * 60,
            defrag_thresholds: Default::default(),
            defrag_request: None,
        }
    }
}

impl MaintenanceConfig {
    /// The settings an `Etcd` asks for (validated: invalid thresholds fall back to defaults).
    pub fn from_etcd(etcd: &quorate_api::Etcd) -> Self {
        let spec = &etcd.spec.etcd;
        MaintenanceConfig {
            defrag_schedule: spec.defragmentation_cron().as_str().to_string(),
            defrag_timeout_secs: spec.etcd_defrag_timeout().as_secs(),
            defrag_thresholds: quorate_api::defrag::DefragThresholds::of(etcd).unwrap_or_default(),
            defrag_request: crate::components::cluster_config::annotation(
                etcd,
                quorate_api::defrag::DEFRAGMENT,
            ),
        }
    }

    /// The parsed schedule (the default when it does not parse).
    pub fn schedule(&self) -> quorate_api::CronSchedule {
        quorate_api::CronSchedule::parse(&self.defrag_schedule).unwrap_or_else(|_| {
            quorate_api::CronSchedule::parse(
                quorate_api::defaults::DEFAULT_DEFRAGMENTATION_SCHEDULE,
            )
            .expect("the default schedule is valid")
        })
    }
}

/// What the backup leader needs: the backup spec as written, plus where this environment keeps
/// `Local` buckets and store credentials, and which leases record the snapshots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupConfig {
    /// `spec.backup` of the `Etcd`.
    pub spec: quorate_api::BackupSpec,
    /// Directory under which `Local` containers (buckets) live.
    pub local_root: String,
    /// Directory holding the store Secret's keys as files, if `store.secretRef` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_dir: Option<String>,
    /// Name of the lease recording the newest full snapshot's revision.
    pub full_snapshot_lease: String,
    /// Name of the lease recording the newest delta snapshot's revision.
    pub delta_snapshot_lease: String,
    /// Identity of the cluster, written beside the backups so another cluster's bucket is not
    /// restored or overwritten by accident.
    pub cluster_uid: String,
    /// Use the backups even when another cluster claimed the prefix (`quorate.io/adopt-backups`).
    #[serde(default)]
    pub adopt_foreign_backups: bool,
    /// An explicit request to start a new backup chain where the bucket's chain belongs to
    /// another history (`quorate.io/new-backup-chain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_chain_request: Option<String>,
    /// The Secret of backup encryption keys (`quorate.io/backup-encryption-secret`), which the
    /// agent copies into [`BackupConfig::encryption_key_dir`] before it uses the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_secret: Option<String>,
    /// Directory the backup encryption keys are read from; set exactly when backups are
    /// encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_dir: Option<String>,
    /// Clear objects written before this instant are accepted although keys are configured
    /// (`quorate.io/accept-plaintext-before`: a bucket's migration window to encryption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_plaintext_before: Option<jiff::Timestamp>,
}

/// How a member's own agent reaches its etcd (see [`ClusterConfig::own_client_endpoint`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnClientEndpoint {
    /// The URL to connect to: the loopback address (or the address etcd listens on).
    pub url: String,
    /// The name the server certificate is verified against: the client URL's DNS name, when
    /// the URL names one; `None` when it is an address.
    pub server_name: Option<String>,
}

impl ClusterConfig {
    /// How member `name`'s own agent reaches its etcd: on loopback when etcd listens on every
    /// address (in a pod), else on the address it listens on; never through the client URL's
    /// DNS name, so its stops and starts do not wait on cluster DNS (which may be gone while
    /// a cluster is deleted). TLS still verifies the certificate against that DNS name.
    pub fn own_client_endpoint(&self, name: &str) -> Option<OwnClientEndpoint> {
        let member = self.member(name)?;
        let scheme = member
            .client_url
            .split_once("://")
            .map_or("http", |(s, _)| s);
        let host = match self.listen_host.as_str() {
            "0.0.0.0" | "" => "127.0.0.1".to_string(),
            "::" | "[::]" => "[::1]".to_string(),
            h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            h => h.to_string(),
        };
        let url_host = member
            .client_url
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
            .map(|authority| authority.rsplit_once(':').map_or(authority, |(h, _)| h));
        let server_name = url_host
            .filter(|h| {
                h.trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_err()
            })
            .map(str::to_string);
        Some(OwnClientEndpoint {
            url: format!("{scheme}://{host}:{}", member.client_port),
            server_name,
        })
    }

    /// The endpoints of the member called `name`, if it runs (desired or leaving).
    pub fn member(&self, name: &str) -> Option<&MemberEndpoints> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Whether `name` is leaving: it runs until etcd removed it, but is not desired.
    pub fn is_leaving(&self, name: &str) -> bool {
        self.leaving.iter().any(|n| n == name)
    }

    /// The desired members (every member that is not leaving), in ordinal order.
    pub fn desired_members(&self) -> impl Iterator<Item = &MemberEndpoints> {
        self.members.iter().filter(|m| !self.is_leaving(&m.name))
    }

    /// Client URLs of the desired members: what clients of the cluster are given.
    pub fn desired_client_urls(&self) -> Vec<String> {
        self.desired_members()
            .map(|m| m.client_url.clone())
            .collect()
    }

    /// Client URLs of every running member (desired or leaving), for cluster-wide calls.
    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// Whether `name` belongs to the set that bootstraps a brand-new cluster.
    pub fn is_bootstrap_member(&self, name: &str) -> bool {
        self.bootstrap_members.iter().any(|n| n == name)
    }
}

/// Addresses of one member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberEndpoints {
    /// etcd member name.
    pub name: String,
    /// Name of this member's lease.
    pub lease_name: String,
    /// Advertised peer URL.
    pub peer_url: String,
    /// Advertised client URL.
    pub client_url: String,
    /// Port etcd listens on for peers.
    pub peer_port: u16,
    /// Port etcd listens on for clients.
    pub client_port: u16,
    /// Base URL of this member's agent HTTP server.
    pub agent_url: String,
    /// Port the agent listens on.
    pub agent_port: u16,
    /// Port etcd serves `/metrics` and `/health` on over plain HTTP (`--listen-metrics-urls`),
    /// so Prometheus scrapes etcd without a client certificate; `None` in a configuration
    /// written before quorate set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_port: Option<u16>,
}

/// etcd flags that come from the spec and are the same on every member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSettings {
    /// `--quota-backend-bytes`.
    pub quota_backend_bytes: u64,
    /// `--snapshot-count`.
    pub snapshot_count: u64,
    /// `--auto-compaction-mode` (`periodic` or `revision`).
    pub auto_compaction_mode: String,
    /// `--auto-compaction-retention`.
    pub auto_compaction_retention: String,
    /// `--enable-grpc-gateway`.
    pub enable_grpc_gateway: bool,
    /// `--metrics` (`basic` or `extensive`).
    pub metrics: String,
    /// `--heartbeat-interval` in milliseconds (etcd's raft heartbeat, not the lease heartbeat).
    pub raft_heartbeat_millis: u64,
    /// `--election-timeout` in milliseconds.
    pub election_timeout_millis: u64,
}

/// Paths of the certificate files of one TLS configuration, as mounted or written for the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsFiles {
    /// Trusted CA bundle.
    pub ca_file: String,
    /// Server certificate.
    pub cert_file: String,
    /// Server key.
    pub key_file: String,
    /// Client certificate for the agent's own connections (client TLS only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<String>,
    /// Client key for the agent's own connections (client TLS only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<String>,
    /// A digest of what `ca_file` held when the agent last read it; never set by the operator.
    /// etcd reads its CA bundle only at start, so a new digest restarts etcd in turn like a
    /// changed flag (a CA rotated through a bundle), while leaves are re-read per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_ca_digest: Option<String>,
}

impl EtcdSettings {
    /// The settings an `Etcd` asks for, with druid's defaults filled in. Raft timing keeps
    /// etcd's defaults (100 ms heartbeat, 1 s election), which druid does not expose either.
    pub fn from_etcd(etcd: &quorate_api::Etcd) -> Self {
        let spec = &etcd.spec;
        Self {
            quota_backend_bytes: spec.etcd.quota_bytes(),
            snapshot_count: spec.etcd.snapshot_count(),
            auto_compaction_mode: spec.auto_compaction_mode().as_str().to_string(),
            auto_compaction_retention: spec.auto_compaction_retention().to_string(),
            enable_grpc_gateway: spec.etcd.enable_grpc_gateway(),
            metrics: spec.etcd.metrics().as_str().to_string(),
            raft_heartbeat_millis: 100,
            election_timeout_millis: 1000,
        }
    }
}

fn unrecorded_version() -> quorate_api::EtcdVersion {
    quorate_api::EtcdVersion::UNRECORDED
}

/// One Secret whose every key the agent writes as the file `<dir>/<key>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretFiles {
    /// The Secret's name (in the cluster's namespace).
    pub secret: String,
    /// The directory its keys go to.
    pub dir: String,
}

#[cfg(test)]
mod tests {
    use crate::member_etcd_config::tests::three_members;

    #[test]
    fn a_pods_agent_reaches_its_etcd_on_loopback_and_verifies_the_dns_name() {
        let mut config = three_members();
        config.listen_host = "0.0.0.0".into();
        config.members[1].client_url = "https://etcd-main-1.etcd-main-peer.ns.svc:2389".into();
        let own = config.own_client_endpoint("etcd-main-1").unwrap();
        assert_eq!(own.url, "https://127.0.0.1:2389");
        assert_eq!(
            own.server_name.as_deref(),
            Some("etcd-main-1.etcd-main-peer.ns.svc")
        );
        assert!(config.own_client_endpoint("etcd-main-9").is_none());
    }

    #[test]
    fn a_specific_listen_address_is_used_and_an_address_url_needs_no_server_name() {
        let mut config = three_members();
        config.listen_host = "10.0.0.7".into();
        config.members[0].client_url = "http://10.0.0.7:2379".into();
        let own = config.own_client_endpoint("etcd-main-0").unwrap();
        assert_eq!(own.url, "http://10.0.0.7:2379");
        assert_eq!(own.server_name, None);
        config.listen_host = "::".into();
        assert_eq!(
            config.own_client_endpoint("etcd-main-0").unwrap().url,
            "http://[::1]:2379"
        );
    }
}
