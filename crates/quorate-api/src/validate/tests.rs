//! Each rule rejects the right field with a message that names the value and what is allowed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, SecretReference as CoreSecretReference};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::backup::{CompressionSpec, LeaderElectionSpec, StoreSpec};
use crate::etcd::{EtcdSpec, SharedConfig};
use crate::spec_etcd::{
    AdditionalPeerUrl, BootstrapMember, BootstrapWithExistingCluster, ClientService,
};
use crate::status::{Condition, ConditionStatus, EtcdStatus};
use crate::tls::{PeerTlsConfig, SecretReference, TlsConfig};

fn valid() -> Etcd {
    let mut e = Etcd::new(
        "etcd-main",
        EtcdSpec {
            replicas: 3,
            labels: BTreeMap::from([("app".to_string(), "etcd".to_string())]),
            ..EtcdSpec::default()
        },
    );
    e.metadata.namespace = Some("default".into());
    e.spec.backup.store = Some(StoreSpec {
        container: Some("quorate-backups".into()),
        prefix: "etcd-main".into(),
        provider: Some("Local".into()),
        ..StoreSpec::default()
    });
    e.spec.backup.delta_snapshot_period = Some("20s".into());
    e.spec.backup.garbage_collection_period = Some("1m".into());
    e
}

fn secret(name: &str) -> CoreSecretReference {
    CoreSecretReference {
        name: Some(name.into()),
        namespace: None,
    }
}

fn tls(ca: &str, server: &str, client: Option<&str>) -> TlsConfig {
    TlsConfig {
        tls_ca_secret_ref: SecretReference {
            name: Some(ca.into()),
            ..SecretReference::default()
        },
        server_tls_secret_ref: secret(server),
        client_tls_secret_ref: client.map(secret),
    }
}

fn peer_tls() -> PeerTlsConfig {
    PeerTlsConfig {
        tls_ca_secret_ref: SecretReference {
            name: Some("etcd-peer-ca".into()),
            ..SecretReference::default()
        },
        server_tls_secret_ref: secret("etcd-peer-server"),
        ..PeerTlsConfig::default()
    }
}

/// The messages reported at `path`; fails when there are none.
#[track_caller]
fn rejected(etcd: &Etcd, path: &str) -> String {
    let errors = validate(etcd).expect_err("expected the Etcd to be rejected");
    let at: Vec<String> = errors.at(path).map(|e| e.message.clone()).collect();
    assert!(!at.is_empty(), "no error at {path}; got:\n{errors}");
    at.join(" | ")
}

#[track_caller]
fn accepted(etcd: &Etcd) {
    if let Err(e) = validate(etcd) {
        panic!("expected the Etcd to be accepted, got:\n{e}");
    }
}

#[test]
fn a_complete_cluster_and_a_minimal_one_are_accepted() {
    accepted(&valid());
    accepted(&Etcd::new("etcd", EtcdSpec::default()));
}

#[test]
fn name_must_be_a_short_dns_label() {
    let mut e = valid();
    e.metadata.name = None;
    assert!(rejected(&e, "metadata.name").starts_with("is required"));
    for bad in ["Etcd-Main", "etcd_main", "1etcd", "etcd-", &"a".repeat(53)] {
        e.metadata.name = Some(bad.to_string());
        let msg = rejected(&e, "metadata.name");
        assert!(msg.contains("at most 52 lowercase letters"), "{bad}: {msg}");
    }
    e.metadata.name = Some("a".repeat(52));
    accepted(&e);
    e.metadata.namespace = Some("Shoot--A".into());
    rejected(&e, "metadata.namespace");
}

#[test]
fn negative_replicas_are_rejected() {
    let mut e = valid();
    e.spec.replicas = -1;
    assert_eq!(
        rejected(&e, "spec.replicas"),
        "-1 is negative; use 0 to hibernate the cluster or a positive member count"
    );
    e.spec.replicas = 0;
    accepted(&e);
}

#[test]
fn bad_durations_name_the_field_and_the_syntax() {
    let mut e = valid();
    e.spec.backup.delta_snapshot_period = Some("20 seconds".into());
    let errors = validate(&e).unwrap_err();
    assert_eq!(
        errors.to_string(),
        "spec.backup.deltaSnapshotPeriod: \"20 seconds\" is not a duration; use Go duration syntax such as \"20s\" or \"1m30s\""
    );

    let mut e = valid();
    e.spec.etcd.heartbeat_duration = Some("0s".into());
    assert!(rejected(&e, "spec.etcd.heartbeatDuration").contains("is zero"));
    e.spec.etcd.etcd_defrag_timeout = Some("15 min".into());
    rejected(&e, "spec.etcd.etcdDefragTimeout");
    e.spec.backup.etcd_snapshot_timeout = Some("1d".into());
    rejected(&e, "spec.backup.etcdSnapshotTimeout");
    e.spec.backup.delta_snapshot_retention_period = Some("forever".into());
    rejected(&e, "spec.backup.deltaSnapshotRetentionPeriod");
    e.spec.backup.leader_election = Some(LeaderElectionSpec {
        reelection_period: Some("5".into()),
        etcd_connection_timeout: Some("0s".into()),
    });
    rejected(&e, "spec.backup.leaderElection.reelectionPeriod");
    rejected(&e, "spec.backup.leaderElection.etcdConnectionTimeout");

    // A zero delta period is allowed (it turns delta snapshots off).
    let mut e = valid();
    e.spec.backup.delta_snapshot_period = Some("0s".into());
    accepted(&e);
}

#[test]
fn bad_cron_schedules_are_rejected() {
    let mut e = valid();
    e.spec.backup.full_snapshot_schedule = Some("every hour".into());
    e.spec.etcd.defragmentation_schedule = Some("0 25 * * *".into());
    assert!(rejected(&e, "spec.backup.fullSnapshotSchedule").contains("expected 5 fields"));
    assert!(
        rejected(&e, "spec.etcd.defragmentationSchedule")
            .contains("hour field: 25 is out of range 0-23")
    );
    e.spec.backup.full_snapshot_schedule = Some("*/30 * * * *".into());
    e.spec.etcd.defragmentation_schedule = Some("0 3 * * SUN".into());
    accepted(&e);
}

#[test]
fn bad_quantities_are_rejected() {
    let mut e = valid();
    e.spec.etcd.quota = Some(Quantity("8GB".into()));
    e.spec.storage_capacity = Some(Quantity("0".into()));
    e.spec.backup.delta_snapshot_memory_limit = Some(Quantity("-1Mi".into()));
    e.spec.etcd.resources = Some(ResourceRequirements {
        requests: Some(BTreeMap::from([(
            "cpu".to_string(),
            Quantity("lots".into()),
        )])),
        ..ResourceRequirements::default()
    });
    assert!(rejected(&e, "spec.etcd.quota").contains("\"8GB\" is not a quantity"));
    assert!(rejected(&e, "spec.storageCapacity").contains("is zero"));
    assert!(rejected(&e, "spec.backup.deltaSnapshotMemoryLimit").contains("negative"));
    rejected(&e, "spec.etcd.resources.requests.cpu");
}

#[test]
fn store_provider_must_be_a_druid_name() {
    let mut e = valid();
    for name in [
        "aws",
        "S3",
        "azure",
        "ABS",
        "gcp",
        "GCS",
        "openstack",
        "Swift",
        "alicloud",
        "OSS",
        "dell",
        "ECS",
        "openshift",
        "OCS",
        "stackit",
        "Local",
        "local",
    ] {
        e.spec.backup.store.as_mut().unwrap().provider = Some(name.into());
        accepted(&e);
    }
    for bad in ["minio", "s3", "AWS"] {
        e.spec.backup.store.as_mut().unwrap().provider = Some(bad.into());
        let msg = rejected(&e, "spec.backup.store.provider");
        assert!(msg.contains("is not a known provider"), "{msg}");
        assert!(msg.contains("aws, S3"), "{msg}");
    }
    e.spec.backup.store.as_mut().unwrap().provider = None;
    assert!(rejected(&e, "spec.backup.store.provider").starts_with("is required"));
}

#[test]
fn container_rules() {
    let mut e = valid();
    let store = e.spec.backup.store.as_mut().unwrap();
    store.container = None;
    accepted(&e); // Local needs no container
    let store = e.spec.backup.store.as_mut().unwrap();
    store.provider = Some("aws".into());
    assert!(rejected(&e, "spec.backup.store.container").starts_with("is required"));
    for bad in ["ab", "bad/name", &"c".repeat(64)] {
        e.spec.backup.store.as_mut().unwrap().container = Some(bad.to_string());
        assert!(rejected(&e, "spec.backup.store.container").contains("3-63"));
    }
    e.spec.backup.store.as_mut().unwrap().container = Some("My_Bucket.v2-x".into());
    accepted(&e);
    e.spec.backup.store.as_mut().unwrap().prefix = " ".into();
    rejected(&e, "spec.backup.store.prefix");
}

#[test]
fn endpoint_override_and_store_secret() {
    let mut e = valid();
    let store = e.spec.backup.store.as_mut().unwrap();
    store.endpoint_override = Some("http://127.0.0.1:9000".into());
    accepted(&e);
    for bad in ["not a url", "ftp://files.example.com", "http://:9000"] {
        e.spec.backup.store.as_mut().unwrap().endpoint_override = Some(bad.into());
        rejected(&e, "spec.backup.store.endpointOverride");
    }
    let mut e = valid();
    e.spec.backup.store.as_mut().unwrap().secret_ref = Some(CoreSecretReference::default());
    rejected(&e, "spec.backup.store.secretRef.name");
}

#[test]
fn tls_references_need_secret_names() {
    let mut e = valid();
    e.spec.etcd.client_url_tls = Some(tls("etcd-ca", "etcd-server", Some("etcd-client")));
    e.spec.etcd.peer_url_tls = Some(peer_tls());
    e.spec.backup.tls = Some(tls("etcd-ca", "etcd-backup-server", None));
    accepted(&e);

    e.spec.etcd.client_url_tls = Some(tls("", "etcd-server", None));
    assert!(rejected(&e, "spec.etcd.clientUrlTls.tlsCASecretRef.name").starts_with("is empty"));
    assert!(rejected(&e, "spec.etcd.clientUrlTls.clientTLSSecretRef").starts_with("is required"));
    let mut t = tls("etcd-ca", "Bad_Name", Some(""));
    t.tls_ca_secret_ref.data_key = Some(String::new());
    e.spec.etcd.client_url_tls = Some(t);
    rejected(&e, "spec.etcd.clientUrlTls.serverTLSSecretRef.name");
    rejected(&e, "spec.etcd.clientUrlTls.clientTLSSecretRef.name");
    rejected(&e, "spec.etcd.clientUrlTls.tlsCASecretRef.dataKey");

    let mut e = valid();
    let mut p = peer_tls();
    p.server_tls_secret_ref = CoreSecretReference::default();
    e.spec.etcd.peer_url_tls = Some(p);
    rejected(&e, "spec.etcd.peerUrlTls.serverTLSSecretRef.name");
}

/// Names that become file or directory names (a CA key, a store Secret) stay plain names: a
/// path would read or write outside the Secret's directory.
#[test]
fn the_backup_encryption_secret_must_be_a_secret_name_and_needs_a_store() {
    let path = "metadata.annotations[quorate.io/backup-encryption-secret]";
    let mut e = valid();
    let annotate = |e: &mut Etcd, secret: &str| {
        e.metadata.annotations = Some(BTreeMap::from([(
            crate::annotations::BACKUP_ENCRYPTION_SECRET.to_string(),
            secret.to_string(),
        )]));
    };
    annotate(&mut e, "backup-keys");
    accepted(&e);
    annotate(&mut e, "../keys");
    assert!(rejected(&e, path).contains("not a valid Secret name"));
    annotate(&mut e, "backup-keys");
    e.spec.backup.store = None;
    assert!(rejected(&e, path).contains("set spec.backup.store"));
}

/// The migration window is an RFC 3339 time, and only means something with keys configured.
#[test]
fn the_plaintext_window_must_be_a_time_and_needs_encryption_keys() {
    let path = "metadata.annotations[quorate.io/accept-plaintext-before]";
    let mut e = valid();
    let annotate = |e: &mut Etcd, pairs: &[(&str, &str)]| {
        e.metadata.annotations = Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    };
    let keys = crate::annotations::BACKUP_ENCRYPTION_SECRET;
    let window = crate::annotations::ACCEPT_PLAINTEXT_BEFORE;
    annotate(
        &mut e,
        &[(keys, "backup-keys"), (window, "2026-11-20T10:00:00Z")],
    );
    accepted(&e);
    for bad in ["yesterday", "2026-11-20", "2026-11-20T10:00:00"] {
        annotate(&mut e, &[(keys, "backup-keys"), (window, bad)]);
        let message = rejected(&e, path);
        assert!(
            message.contains("not an RFC 3339 time") && message.contains(bad),
            "{bad}: {message}"
        );
    }
    annotate(&mut e, &[(window, "2026-11-20T10:00:00Z")]);
    assert!(rejected(&e, path).contains("quorate.io/backup-encryption-secret is not set"));
}

#[test]
fn names_that_would_leave_their_directory_are_refused() {
    let mut e = valid();
    for key in ["../../etc/passwd", "ca/crt", "..", "."] {
        let mut t = tls("etcd-ca", "etcd-server", Some("etcd-client"));
        t.tls_ca_secret_ref.data_key = Some(key.to_string());
        e.spec.etcd.client_url_tls = Some(t);
        let message = rejected(&e, "spec.etcd.clientUrlTls.tlsCASecretRef.dataKey");
        assert!(message.contains("plain file name"), "{key}: {message}");
    }
    let mut t = tls("etcd-ca", "etcd-server", Some("etcd-client"));
    t.tls_ca_secret_ref.data_key = Some("bundle.pem".to_string());
    e.spec.etcd.client_url_tls = Some(t);
    accepted(&e);

    let mut e = valid();
    e.spec.backup.store = Some(crate::StoreSpec {
        provider: Some("Local".into()),
        container: Some("bucket".into()),
        prefix: "main".into(),
        secret_ref: Some(CoreSecretReference {
            name: Some("../../outside".into()),
            namespace: None,
        }),
        ..Default::default()
    });
    rejected(&e, "spec.backup.store.secretRef.name");
}

#[test]
fn ports_must_be_in_range_and_distinct() {
    let mut e = valid();
    e.spec.etcd.server_port = Some(2379);
    assert_eq!(
        rejected(&e, "spec.etcd.serverPort"),
        "2379 is also the client port (spec.etcd.clientPort); the peer port must differ from it"
    );
    let mut e = valid();
    e.spec.backup.port = Some(9095);
    assert!(rejected(&e, "spec.backup.port").contains("wrapper port"));
    let mut e = valid();
    e.spec.etcd.client_port = Some(70_000);
    assert_eq!(
        rejected(&e, "spec.etcd.clientPort"),
        "70000 is not a port; use 1-65535"
    );
    e.spec.etcd.client_port = Some(0);
    rejected(&e, "spec.etcd.clientPort");
    let mut e = valid();
    e.spec.etcd.client_port = Some(12379);
    e.spec.etcd.server_port = Some(12380);
    accepted(&e);
}

#[test]
fn garbage_collection_period_must_exceed_delta_period() {
    let mut e = valid();
    e.spec.backup.garbage_collection_period = Some("20s".into());
    let msg = rejected(&e, "spec.backup.garbageCollectionPeriod");
    assert!(
        msg.contains("must be greater than spec.backup.deltaSnapshotPeriod (\"20s\")"),
        "{msg}"
    );
    e.spec.backup.garbage_collection_period = Some("21s".into());
    accepted(&e);
    // Only checked when both are set, as druid does.
    e.spec.backup.garbage_collection_period = None;
    e.spec.backup.delta_snapshot_period = Some("5m".into());
    accepted(&e);
}

#[test]
fn enum_fields_list_the_allowed_values() {
    let mut e = valid();
    e.spec.backup.compression = Some(CompressionSpec {
        enabled: Some(true),
        policy: Some("bzip2".into()),
    });
    e.spec.etcd.metrics = Some("full".into());
    e.spec.backup.garbage_collection_policy = Some("limitbased".into());
    e.spec.etcd.backend_bbolt_freelist_type = Some("list".into());
    e.spec.etcd.client_service = Some(ClientService {
        traffic_distribution: Some("Anywhere".into()),
        ..ClientService::default()
    });
    e.spec.shared_config = Some(SharedConfig {
        auto_compaction_mode: Some("hourly".into()),
        auto_compaction_retention: None,
    });
    assert_eq!(
        rejected(&e, "spec.backup.compression.policy"),
        "\"bzip2\" is not allowed; use one of \"gzip\", \"lzw\", \"zlib\""
    );
    assert!(rejected(&e, "spec.etcd.metrics").contains("\"basic\", \"extensive\""));
    assert!(rejected(&e, "spec.backup.garbageCollectionPolicy").contains("\"LimitBased\""));
    rejected(&e, "spec.etcd.backendBboltFreelistType");
    rejected(&e, "spec.etcd.clientService.trafficDistribution");
    assert!(
        rejected(&e, "spec.sharedConfig.autoCompactionMode").contains("\"periodic\", \"revision\"")
    );
}

#[test]
fn auto_compaction_retention_depends_on_the_mode() {
    let mut e = valid();
    let mut set = |mode: Option<&str>, retention: &str| {
        e.spec.shared_config = Some(SharedConfig {
            auto_compaction_mode: mode.map(str::to_string),
            auto_compaction_retention: Some(retention.into()),
        });
        validate(&e)
    };
    assert!(set(None, "30m").is_ok());
    assert!(set(Some("periodic"), "1").is_ok());
    assert!(set(Some("revision"), "1000").is_ok());
    let err = set(Some("revision"), "30m").unwrap_err();
    assert!(err.has_path("spec.sharedConfig.autoCompactionRetention"));
    assert!(err.to_string().contains("whole number of revisions"));
    assert!(set(Some("periodic"), "half an hour").is_err());
}

#[test]
fn numeric_limits() {
    let mut e = valid();
    e.spec.etcd.snapshot_count = Some(0);
    e.spec.backup.max_backups_limit_based_gc = Some(0);
    rejected(&e, "spec.etcd.snapshotCount");
    rejected(&e, "spec.backup.maxBackupsLimitBasedGC");
}

#[test]
fn member_name_prefix_labels_and_names() {
    let mut e = valid();
    e.spec.member_name_prefix = Some("a".repeat(64));
    assert!(rejected(&e, "spec.memberNamePrefix").contains("at most 63"));
    e.spec.member_name_prefix = Some("Seed_A".into());
    rejected(&e, "spec.memberNamePrefix");
    e.spec.member_name_prefix = Some("seed-a".into());
    accepted(&e);
    e.spec.labels.insert("bad key!".into(), "x".into());
    e.spec.labels.insert("role".into(), "not valid!".into());
    rejected(&e, "spec.labels");
    rejected(&e, "spec.labels.role");
    let mut e = valid();
    e.spec.storage_class = Some("Fast SSD".into());
    e.spec.priority_class_name = Some("".into());
    e.spec.volume_claim_template = Some("data_etcd".into());
    e.spec.etcd.image = Some(" ".into());
    rejected(&e, "spec.storageClass");
    rejected(&e, "spec.priorityClassName");
    rejected(&e, "spec.volumeClaimTemplate");
    rejected(&e, "spec.etcd.image");
}

fn peer_urls(member: &str, urls: &[&str]) -> AdditionalPeerUrl {
    AdditionalPeerUrl {
        member_name: member.into(),
        urls: urls.iter().map(|u| u.to_string()).collect(),
    }
}

#[test]
fn additional_advertise_peer_urls_rules() {
    const P: &str = "spec.etcd.additionalAdvertisePeerURLs";
    let mut e = valid();
    e.spec.etcd.additional_advertise_peer_urls = Some(vec![
        peer_urls(
            "etcd-main-0",
            &["http://10.0.0.1:2380", "http://lb-0.example.com:2380"],
        ),
        peer_urls("etcd-main-2", &["http://10.0.0.3:2380"]),
    ]);
    accepted(&e);

    e.spec.etcd.additional_advertise_peer_urls = Some(vec![
        peer_urls("other-0", &["http://10.0.0.1:2380"]),
        peer_urls("etcd-main-3", &["http://10.0.0.1:2380"]),
        peer_urls("etcd-main-01", &["http://10.0.0.1:2380"]),
        peer_urls("etcd-main-1", &["https://10.0.0.1:2380"]),
        peer_urls("etcd-main-1", &[]),
        peer_urls("etcd-main-2", &["http://a:1"; 6]),
    ]);
    assert!(rejected(&e, &format!("{P}[0].memberName")).contains("use \"etcd-main-<ordinal>\""));
    assert!(rejected(&e, &format!("{P}[1].memberName")).contains("spec.replicas is 3"));
    rejected(&e, &format!("{P}[2].memberName"));
    assert!(
        rejected(&e, &format!("{P}[3].urls[0]"))
            .contains("spec.etcd.peerUrlTls is not set; use http://")
    );
    assert!(rejected(&e, &format!("{P}[4].memberName")).contains("listed again (first at [3])"));
    assert!(rejected(&e, &format!("{P}[4].urls")).starts_with("is empty"));
    assert!(rejected(&e, &format!("{P}[5].urls")).contains("at most 5"));

    // With peer TLS the URLs must be https; the prefixed member name is accepted too.
    let mut e = valid();
    e.spec.etcd.peer_url_tls = Some(peer_tls());
    e.spec.member_name_prefix = Some("seed-a".into());
    e.spec.etcd.additional_advertise_peer_urls = Some(vec![peer_urls(
        "seed-a-etcd-main-1",
        &["https://10.0.0.2:2380"],
    )]);
    accepted(&e);
    e.spec.etcd.additional_advertise_peer_urls =
        Some(vec![peer_urls("etcd-main-1", &["http://10.0.0.2:2380"])]);
    assert!(rejected(&e, &format!("{P}[0].urls[0]")).contains("is set; use https://"));

    let mut e = valid();
    e.spec.replicas = 20;
    e.spec.etcd.additional_advertise_peer_urls = Some(
        (0..11)
            .map(|i| peer_urls(&format!("etcd-main-{i}"), &["http://10.0.0.1:2380"]))
            .collect(),
    );
    assert!(rejected(&e, P).contains("at most 10"));
}

fn bootstrap(names: &[&str], peer: &str, client: &str) -> BootstrapWithExistingCluster {
    BootstrapWithExistingCluster {
        members: names
            .iter()
            .map(|n| BootstrapMember {
                name: n.to_string(),
                peer_urls: vec![peer.to_string()],
            })
            .collect(),
        client_endpoints: vec![client.to_string()],
    }
}

#[test]
fn bootstrap_with_existing_cluster_rules() {
    const P: &str = "spec.etcd.bootstrapWithExistingCluster";
    let mut e = valid();
    e.spec.etcd.bootstrap_with_existing_cluster = Some(bootstrap(
        &["etcd-source-0", "etcd-source-1"],
        "http://etcd-source-0.etcd-source-peer.src.svc:2380",
        "http://etcd-source-client.src.svc:2379",
    ));
    accepted(&e);

    e.spec.etcd.bootstrap_with_existing_cluster = Some(bootstrap(
        &["etcd-main-0", "src-0", "src-0", ""],
        "https://src:2380",
        "https://src:2379",
    ));
    assert!(rejected(&e, &format!("{P}.members[0].name")).contains("collides"));
    assert!(rejected(&e, &format!("{P}.members[2].name")).contains("listed twice"));
    assert!(rejected(&e, &format!("{P}.members[3].name")).starts_with("is empty"));
    rejected(&e, &format!("{P}.members[1].peerUrls[0]"));
    assert!(
        rejected(&e, &format!("{P}.clientEndpoints[0]"))
            .contains("spec.etcd.clientUrlTls is not set")
    );

    // With a member name prefix, only "<prefix>-<name>-" collides.
    e.spec.member_name_prefix = Some("main".into());
    e.spec.etcd.bootstrap_with_existing_cluster = Some(bootstrap(
        &["etcd-main-0", "main-etcd-main-1"],
        "http://src:2380",
        "http://src:2379",
    ));
    assert!(rejected(&e, &format!("{P}.members[1].name")).contains("collides"));
    assert!(
        validate(&e)
            .unwrap_err()
            .at(&format!("{P}.members[0].name"))
            .next()
            .is_none()
    );

    e.spec.etcd.bootstrap_with_existing_cluster = Some(BootstrapWithExistingCluster::default());
    rejected(&e, &format!("{P}.members"));
    rejected(&e, &format!("{P}.clientEndpoints"));
}

#[test]
fn all_problems_are_reported_one_per_line() {
    let mut e = valid();
    e.spec.replicas = -2;
    e.spec.etcd.metrics = Some("all".into());
    e.spec.backup.full_snapshot_schedule = Some("hourly".into());
    let errors = validate(&e).unwrap_err();
    assert_eq!(errors.errors.len(), 3);
    let text = errors.to_string();
    let lines: Vec<&str> = text.lines().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "spec.replicas",
            "spec.etcd.metrics",
            "spec.backup.fullSnapshotSchedule"
        ]
    );
}

// ---- updates ----

#[track_caller]
fn update_rejected(old: &Etcd, new: &Etcd, path: &str) -> String {
    let errors = validate_update(old, new).expect_err("expected the update to be rejected");
    let at: Vec<String> = errors.at(path).map(|e| e.message.clone()).collect();
    assert!(!at.is_empty(), "no error at {path}; got:\n{errors}");
    at.join(" | ")
}

#[test]
fn replicas_change_freely_once_the_last_scale_operation_finished() {
    let old = valid();
    let mut new = valid();
    for ok in [0, 1, 2, 3, 5] {
        new.spec.replicas = ok;
        assert!(validate_update(&old, &new).is_ok(), "3 -> {ok}");
    }
    let mut hibernated = valid();
    hibernated.spec.replicas = 0;
    new.spec.replicas = 1;
    assert!(validate_update(&hibernated, &new).is_ok());
}

#[test]
fn replicas_cannot_change_while_a_scale_operation_is_unfinished() {
    let scaling = |status: ConditionStatus| {
        let mut e = valid();
        e.status = Some(EtcdStatus {
            conditions: vec![Condition {
                type_: "ScaleOperationComplete".into(),
                status,
                reason: "ScalingIn".into(),
                message: "e-3 leaves".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::UNIX_EPOCH,
                ),
                last_update_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::UNIX_EPOCH,
                ),
            }],
            ..EtcdStatus::default()
        });
        e
    };
    let mut new = valid();
    new.spec.replicas = 1;
    let message = update_rejected(&scaling(ConditionStatus::False), &new, "spec.replicas");
    assert!(
        message.contains("unfinished") && message.contains("e-3 leaves"),
        "{message}"
    );
    assert!(validate_update(&scaling(ConditionStatus::True), &new).is_ok());
    // A hibernation still waiting for its final snapshot may be cancelled.
    let mut hibernating = scaling(ConditionStatus::False);
    hibernating.spec.replicas = 0;
    new.spec.replicas = 3;
    assert!(validate_update(&hibernating, &new).is_ok());
}

#[test]
fn storage_and_member_naming_fields_are_immutable() {
    let mut old = valid();
    old.spec.storage_class = Some("fast".into());
    let mut new = old.clone();
    new.spec.storage_class = Some("slow".into());
    assert!(
        update_rejected(&old, &new, "spec.storageClass")
            .contains("\"fast\" and cannot become \"slow\"")
    );
    new.spec.storage_class = None;
    assert!(update_rejected(&old, &new, "spec.storageClass").contains("cannot become unset"));

    let old = valid();
    let mut new = valid();
    new.spec.volume_claim_template = Some("etcd-main".into()); // the default, spelled out
    assert!(validate_update(&old, &new).is_ok());
    new.spec.volume_claim_template = Some("data".into());
    update_rejected(&old, &new, "spec.volumeClaimTemplate");

    let mut new = valid();
    new.spec.member_name_prefix = Some("".into()); // same as unset
    assert!(validate_update(&old, &new).is_ok());
    new.spec.member_name_prefix = Some("seed-a".into());
    update_rejected(&old, &new, "spec.memberNamePrefix");
}

#[test]
fn bootstrap_with_existing_cluster_is_create_only() {
    let b = bootstrap(&["src-0"], "http://src-0:2380", "http://src:2379");
    let old = valid();
    let mut new = valid();
    new.spec.etcd.bootstrap_with_existing_cluster = Some(b.clone());
    assert!(
        update_rejected(&old, &new, "spec.etcd.bootstrapWithExistingCluster")
            .contains("only be set when the Etcd is created")
    );

    // druid's rules: removing it is allowed; changing members or clientEndpoints is refused
    // only while the join is in progress (the condition is False).
    let mut old = new.clone();
    new.spec.etcd.bootstrap_with_existing_cluster = None;
    assert!(validate_update(&old, &new).is_ok());
    let mut new = old.clone();
    new.spec.etcd.bootstrap_with_existing_cluster = Some(bootstrap(
        &["src-0", "src-1"],
        "http://src-0:2380",
        "http://src:2379",
    ));
    assert!(validate_update(&old, &new).is_ok(), "no condition yet");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2024-01-01T00:00:00Z".parse().unwrap(),
    );
    let status = |status| {
        Some(EtcdStatus {
            conditions: vec![Condition {
                type_: "BootstrappedWithExistingCluster".into(),
                status,
                last_transition_time: now.clone(),
                last_update_time: now.clone(),
                reason: "Test".into(),
                message: String::new(),
            }],
            ..EtcdStatus::default()
        })
    };
    old.status = status(ConditionStatus::False);
    assert!(
        update_rejected(&old, &new, "spec.etcd.bootstrapWithExistingCluster.members")
            .contains("while the bootstrap is in progress")
    );
    assert!(
        !validate_update(&old, &new)
            .unwrap_err()
            .has_path("spec.etcd.bootstrapWithExistingCluster.clientEndpoints")
    );
    old.status = status(ConditionStatus::True);
    assert!(validate_update(&old, &new).is_ok());
}

#[test]
fn update_also_validates_the_new_object() {
    let old = valid();
    let mut new = valid();
    new.spec.backup.delta_snapshot_period = Some("soon".into());
    update_rejected(&old, &new, "spec.backup.deltaSnapshotPeriod");
}
