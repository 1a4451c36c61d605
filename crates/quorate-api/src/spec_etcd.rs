//! `spec.etcd` of an `Etcd`: how each etcd member runs (quota, ports, TLS, defragmentation,
//! extra peer URLs, joining an existing cluster). JSON names follow etcd-druid's `EtcdConfig`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, SecretReference as CoreSecretReference};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::tls::{PeerTlsConfig, TlsConfig};

/// Configuration of the etcd process of every member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdConfig {
    /// Backend quota (`quota-backend-bytes`); `8Gi` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quantity>,
    /// Applied raft entries between raft snapshots; 10000 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_count: Option<i64>,
    /// Serve etcd's gRPC gateway (JSON over HTTP) on the client port; false when unset.
    #[serde(
        rename = "enableGRPCGateway",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_grpc_gateway: Option<bool>,
    /// Cron schedule (5 fields, UTC) of defragmentation; `0 0 */3 * *` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmentation_schedule: Option<String>,
    /// Peer port; 2380 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_port: Option<i32>,
    /// Client port; 2379 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_port: Option<i32>,
    /// Port of the wrapper/agent readiness endpoint; 9095 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapper_port: Option<i32>,
    /// Image of the etcd container; taken from the image vector when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Secret with basic-auth credentials (legacy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret_ref: Option<CoreSecretReference>,
    /// `basic` or `extensive` (adds histograms); `basic` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["basic", "extensive"]))]
    pub metrics: Option<String>,
    /// Compute resources of the etcd container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// TLS of the client URL.
    #[serde(
        rename = "clientUrlTls",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_url_tls: Option<TlsConfig>,
    /// TLS of the peer URL.
    #[serde(
        rename = "peerUrlTls",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub peer_url_tls: Option<PeerTlsConfig>,
    /// Time limit of a defragmentation call (Go duration); `15m` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub etcd_defrag_timeout: Option<String>,
    /// How often a member renews its member lease (Go duration); `10s` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub heartbeat_duration: Option<String>,
    /// Extra labels, annotations and traffic distribution of the client Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_service: Option<ClientService>,
    /// bbolt freelist type, `array` or `map`; `array` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["array", "map"]))]
    pub backend_bbolt_freelist_type: Option<String>,
    /// Extra peer URLs advertised by individual members (at most 10 entries); druid's name.
    #[serde(
        rename = "additionalAdvertisePeerURLs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub additional_advertise_peer_urls: Option<Vec<AdditionalPeerUrl>>,
    /// Deprecated: quorate's earlier spelling of `additionalAdvertisePeerURLs`, still read so
    /// manifests written for it keep working; use `additionalAdvertisePeerURLs`.
    #[serde(
        rename = "additionalAdvertisePeerUrls",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_additional_advertise_peer_urls: Option<Vec<AdditionalPeerUrl>>,
    /// Join an existing etcd cluster instead of bootstrapping a new one (create-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_with_existing_cluster: Option<BootstrapWithExistingCluster>,
}

/// The JSON name of the extra peer URLs, as druid spells it.
pub const ADDITIONAL_PEER_URLS_FIELD: &str = "additionalAdvertisePeerURLs";
/// quorate's earlier spelling of [`ADDITIONAL_PEER_URLS_FIELD`], read with a deprecation warning.
pub const LEGACY_ADDITIONAL_PEER_URLS_FIELD: &str = "additionalAdvertisePeerUrls";

impl EtcdConfig {
    /// The extra peer URLs under whichever spelling the manifest used (druid's first), with
    /// the JSON name it came from.
    pub fn additional_peer_urls(&self) -> Option<(&'static str, &[AdditionalPeerUrl])> {
        match (
            &self.additional_advertise_peer_urls,
            &self.legacy_additional_advertise_peer_urls,
        ) {
            (Some(urls), _) => Some((ADDITIONAL_PEER_URLS_FIELD, urls)),
            (None, Some(urls)) => Some((LEGACY_ADDITIONAL_PEER_URLS_FIELD, urls)),
            (None, None) => None,
        }
    }
}

/// User additions to the client Service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientService {
    /// Annotations added to the client Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels added to the client Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// `PreferClose`, `PreferSameZone` or `PreferSameNode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["PreferClose", "PreferSameZone", "PreferSameNode"]))]
    pub traffic_distribution: Option<String>,
}

/// Extra peer URLs one member advertises in addition to its in-cluster address.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalPeerUrl {
    /// The member, as `<etcd-name>-<ordinal>`.
    pub member_name: String,
    /// URLs with scheme, host and port (at most 5); `https` iff peer TLS is configured.
    pub urls: Vec<String>,
}

/// The existing (source) cluster a new `Etcd` joins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapWithExistingCluster {
    /// Members of the source cluster, as its member list reports them.
    pub members: Vec<BootstrapMember>,
    /// Client endpoints of the source cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_endpoints: Vec<String>,
}

/// One member of the source cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapMember {
    /// etcd member name in the source cluster.
    pub name: String,
    /// Peer URLs the source member advertises.
    pub peer_urls: Vec<String>,
}
