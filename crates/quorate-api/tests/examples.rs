//! The shipped examples parse, validate and mean what their comments say.

use std::path::PathBuf;

use quorate_api::{StorageProvider, parse_etcd_manifest, validate};

fn example(name: &str) -> quorate_api::Etcd {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let etcd = parse_etcd_manifest(&text, name).unwrap_or_else(|e| panic!("{e}"));
    validate(&etcd).unwrap_or_else(|e| panic!("{name}:\n{e}"));
    let unknown = quorate_api::read_etcd_manifests(&text, name).unwrap()[0]
        .unknown_fields
        .clone();
    assert!(unknown.is_empty(), "{name}: {unknown:?}");
    etcd
}

#[test]
fn every_example_file_is_tested() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    for name in &names {
        example(name);
    }
    assert!(names.len() >= 3, "{names:?}");
}

#[test]
fn single_member_without_backups() {
    let e = example("etcd-single.yaml");
    assert_eq!(e.spec.replicas, 1);
    assert!(!e.backup_enabled());
    assert!(!e.spec.labels.is_empty());
}

#[test]
fn three_members_with_local_backups() {
    let e = example("etcd-cluster.yaml");
    assert_eq!(e.spec.replicas, 3);
    let store = e.spec.backup.store.as_ref().unwrap();
    assert_eq!(store.provider_kind(), Some(StorageProvider::Local));
    assert_eq!(store.container.as_deref(), Some("quorate-backups"));
    assert_eq!(store.prefix, "etcd-main");
    assert_eq!(
        e.spec.backup.delta_snapshot_period(),
        std::time::Duration::from_secs(20)
    );
    assert_eq!(e.spec.backup.full_snapshot_schedule(), "0 */1 * * *");
}

#[test]
fn three_members_with_client_and_peer_tls() {
    let e = example("etcd-tls.yaml");
    assert_eq!(e.spec.replicas, 3);
    let client = e.spec.etcd.client_url_tls.as_ref().unwrap();
    let name = |s: &Option<String>| s.clone().unwrap();
    assert_eq!(name(&client.tls_ca_secret_ref.name), "etcd-ca");
    assert_eq!(name(&client.server_tls_secret_ref.name), "etcd-server");
    assert_eq!(
        name(&client.client_tls_secret_ref.as_ref().unwrap().name),
        "etcd-client"
    );
    let peer = e.spec.etcd.peer_url_tls.as_ref().unwrap();
    assert_eq!(name(&peer.tls_ca_secret_ref.name), "etcd-peer-ca");
    assert_eq!(name(&peer.server_tls_secret_ref.name), "etcd-peer-server");
}
