//! A manifest with every druid field survives parse -> serialize -> parse unchanged, in YAML
//! and JSON, with nothing unknown and every field landing in its Rust field.

use quorate_api::{Etcd, parse_etcd_manifest, read_etcd_manifests, validate};

const FULL: &str = include_str!("fixtures/druid-full.yaml");

#[test]
fn full_druid_manifest_round_trips_through_yaml_and_json() {
    let first = parse_etcd_manifest(FULL, "druid-full.yaml").unwrap();

    let yaml = serde_saphyr::to_string(&first).unwrap();
    let second = parse_etcd_manifest(&yaml, "serialized.yaml").unwrap();
    assert_eq!(first, second, "YAML round trip changed the object:\n{yaml}");

    let json = serde_json::to_string_pretty(&first).unwrap();
    let third = parse_etcd_manifest(&json, "serialized.json").unwrap();
    assert_eq!(first, third, "JSON round trip changed the object:\n{json}");
}

#[test]
fn every_field_of_the_full_manifest_is_known_and_kept() {
    let manifests = read_etcd_manifests(FULL, "druid-full.yaml").unwrap();
    assert_eq!(manifests.len(), 1);
    assert_eq!(
        manifests[0].unknown_fields,
        vec![],
        "fields the types dropped"
    );

    // Serializing must give back every key of the input (nothing silently dropped).
    let input: serde_json::Value = serde_saphyr::from_str(FULL).unwrap();
    let output = serde_json::to_value(&manifests[0].etcd).unwrap();
    let mut missing = Vec::new();
    collect_missing(&input, &output, String::new(), &mut missing);
    assert_eq!(missing, Vec::<String>::new());
}

fn collect_missing(
    input: &serde_json::Value,
    output: &serde_json::Value,
    path: String,
    out: &mut Vec<String>,
) {
    match (input, output) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => collect_missing(v, w, format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}")),
                }
            }
        }
        (serde_json::Value::Array(a), serde_json::Value::Array(b)) => {
            for (i, v) in a.iter().enumerate() {
                match b.get(i) {
                    Some(w) => collect_missing(v, w, format!("{path}[{i}]"), out),
                    None => out.push(format!("{path}[{i}]")),
                }
            }
        }
        _ => {}
    }
}

#[test]
fn fields_land_in_the_right_rust_fields() {
    let e: Etcd = parse_etcd_manifest(FULL, "druid-full.yaml").unwrap();
    let s = &e.spec;
    assert_eq!(s.replicas, 3);
    assert_eq!(s.member_name_prefix.as_deref(), Some("seed-a"));
    assert_eq!(s.etcd.enable_grpc_gateway, Some(false));
    assert_eq!(s.etcd.snapshot_count, Some(75000));
    let client_tls = s.etcd.client_url_tls.as_ref().unwrap();
    assert_eq!(client_tls.tls_ca_secret_ref.data_key(), "bundle.crt");
    assert_eq!(
        client_tls
            .client_tls_secret_ref
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("etcd-client-tls")
    );
    assert_eq!(
        s.etcd
            .peer_url_tls
            .as_ref()
            .unwrap()
            .skip_client_san_verification,
        Some(true)
    );
    assert_eq!(
        s.etcd
            .additional_advertise_peer_urls
            .as_ref()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        s.etcd
            .bootstrap_with_existing_cluster
            .as_ref()
            .unwrap()
            .client_endpoints,
        ["https://etcd-source-client.src.svc:2379"]
    );
    assert_eq!(s.backup.max_backups_limit_based_gc, Some(7));
    assert_eq!(
        s.backup.delta_snapshot_memory_limit.as_ref().unwrap().0,
        "100Mi"
    );
    assert_eq!(
        s.backup.delta_snapshot_period(),
        std::time::Duration::from_secs(300)
    );
    assert_eq!(
        s.backup.store.as_ref().unwrap().provider.as_deref(),
        Some("aws")
    );
    let status = e.status.as_ref().unwrap();
    assert_eq!(status.observed_generation, Some(4));
    assert_eq!(status.peer_url_tls_enabled, Some(true));
    assert_eq!(
        status.last_operation.as_ref().unwrap().run_id,
        "5d1f4c7e-1b8a-4f4e-9a61-0c2f6a3b7e21"
    );
    // The full manifest is also valid.
    validate(&e).unwrap();
}
