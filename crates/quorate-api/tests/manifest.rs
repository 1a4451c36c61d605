//! Reading manifests: picking the Etcd documents, defaulting the namespace, and errors that
//! name the file, line, column and field.

use quorate_api::{ManifestError, parse_etcd_manifest, parse_etcd_manifests, read_etcd_manifests};

const ETCD: &str = "apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: etcd-main
spec:
  replicas: 3
  labels:
    app: etcd-main
  etcd: {}
  backup: {}
";

const CONFIG_MAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  a: b
";

#[test]
fn reads_a_single_document_and_defaults_the_namespace() {
    let e = parse_etcd_manifest(ETCD, "etcd.yaml").unwrap();
    assert_eq!(e.metadata.name.as_deref(), Some("etcd-main"));
    assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(e.spec.replicas, 3);

    let with_ns = ETCD.replace(
        "  name: etcd-main\n",
        "  name: etcd-main\n  namespace: shoot\n",
    );
    let e = parse_etcd_manifest(&with_ns, "etcd.yaml").unwrap();
    assert_eq!(e.metadata.namespace.as_deref(), Some("shoot"));
}

#[test]
fn reads_json() {
    let json = r#"{
  "apiVersion": "druid.gardener.cloud/v1alpha1",
  "kind": "Etcd",
  "metadata": {"name": "etcd-json"},
  "spec": {"replicas": 1, "labels": {}, "etcd": {"quota": "2Gi"}, "backup": {}}
}"#;
    let e = parse_etcd_manifest(json, "etcd.json").unwrap();
    assert_eq!(e.metadata.name.as_deref(), Some("etcd-json"));
    assert_eq!(e.quota_bytes(), 2 * 1024 * 1024 * 1024);
}

#[test]
fn picks_etcd_documents_out_of_many() {
    let text = format!("# settings first\n{CONFIG_MAP}---\n{ETCD}---\n");
    let all = read_etcd_manifests(&text, "all.yaml").unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].line, 9, "the Etcd document starts on line 9");
    assert_eq!(all[0].etcd.spec.replicas, 3);

    let two = format!("{ETCD}---\n{}", ETCD.replace("etcd-main", "etcd-events"));
    let names: Vec<String> = parse_etcd_manifests(&two, "two.yaml")
        .unwrap()
        .into_iter()
        .map(|e| e.metadata.name.unwrap())
        .collect();
    assert_eq!(names, ["etcd-main", "etcd-events"]);
    let err = parse_etcd_manifest(&two, "two.yaml").unwrap_err();
    assert!(matches!(err, ManifestError::MultipleEtcds { .. }));
    assert_eq!(
        err.to_string(),
        "two.yaml: holds 2 Etcd resources (etcd-main, etcd-events) where one was expected; put each in its own file"
    );
}

#[test]
fn reads_lists_as_kubectl_prints_them() {
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}",
        ETCD.lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
            .replacen("  apiVersion", "- apiVersion", 1)
    );
    let all = parse_etcd_manifests(&list, "list.yaml").unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].metadata.name.as_deref(), Some("etcd-main"));
}

#[test]
fn says_when_there_is_no_etcd() {
    let err = parse_etcd_manifest(CONFIG_MAP, "cm.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "cm.yaml: no Etcd found; the file holds ConfigMap \"settings\" (line 1); an Etcd manifest has \"apiVersion: druid.gardener.cloud/v1alpha1\" and \"kind: Etcd\""
    );
    let err = parse_etcd_manifest("# nothing\n", "empty.yaml").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("empty.yaml: no Etcd found, the file is empty"),
        "{err}"
    );
}

#[test]
fn says_when_the_api_version_is_wrong() {
    let text = format!("{CONFIG_MAP}---\n{}", ETCD.replace("v1alpha1", "v1beta1"));
    let err = parse_etcd_manifest(&text, "etcd.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "etcd.yaml:8: this Etcd has apiVersion \"druid.gardener.cloud/v1beta1\"; quorate reads apiVersion \"druid.gardener.cloud/v1alpha1\" (etcd-druid's Etcd)"
    );
}

#[test]
fn type_errors_name_line_column_and_field() {
    // The Etcd is the second document, so the line must count the first one too.
    let text = format!(
        "{CONFIG_MAP}---\n{}",
        ETCD.replace("replicas: 3", "replicas: three")
    );
    let err = parse_etcd_manifest(&text, "etcd.yaml").unwrap_err();
    let ManifestError::Parse(p) = &err else {
        panic!("{err:?}")
    };
    assert_eq!((p.line, p.column), (Some(13), Some(13)));
    assert_eq!(p.path.as_deref(), Some("spec.replicas"));
    let text = err.to_string();
    assert!(
        text.starts_with("etcd.yaml:13:13: spec.replicas: invalid i32: expected a whole number"),
        "{text}"
    );
    assert!(
        text.contains("replicas: three"),
        "the snippet shows the line:\n{text}"
    );
}

#[test]
fn missing_required_fields_are_named() {
    let text = ETCD.replace("  backup: {}\n", "");
    let err = parse_etcd_manifest(&text, "etcd.yaml").unwrap_err();
    let first = err.to_string().lines().next().unwrap().to_string();
    assert!(first.starts_with("etcd.yaml:"), "{first}");
    assert!(first.ends_with("spec: missing field `backup`"), "{first}");
}

#[test]
fn yaml_syntax_errors_have_a_location() {
    let text = ETCD.replace("  etcd: {}", "  etcd: {quota: 8Gi");
    let err = parse_etcd_manifest(&text, "broken.yaml").unwrap_err();
    let ManifestError::Parse(p) = &err else {
        panic!("{err:?}")
    };
    assert!(p.line.is_some() && p.column.is_some(), "{err}");
    assert!(err.to_string().starts_with("broken.yaml:"), "{err}");
}

#[test]
fn json_type_errors_have_a_location_and_field() {
    let json = "{\n  \"apiVersion\": \"druid.gardener.cloud/v1alpha1\",\n  \"kind\": \"Etcd\",\n  \"metadata\": {\"name\": \"x\"},\n  \"spec\": {\"replicas\": \"3\", \"labels\": {}, \"etcd\": {}, \"backup\": {}}\n}";
    let err = parse_etcd_manifest(json, "etcd.json").unwrap_err();
    let ManifestError::Parse(p) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(p.line, Some(5));
    assert_eq!(p.path.as_deref(), Some("spec.replicas"));
}

#[test]
fn unknown_fields_are_accepted_and_reported() {
    let text = ETCD.replace("  backup: {}", "  backup:\n    deltaSnapshotPeriode: 20s");
    let all = read_etcd_manifests(&text, "etcd.yaml").unwrap();
    let unknown: Vec<String> = all[0]
        .unknown_fields
        .iter()
        .map(|u| u.to_string())
        .collect();
    assert_eq!(
        unknown,
        [
            "spec.backup.deltaSnapshotPeriode: unknown field, ignored (did you mean \"deltaSnapshotPeriod\"?)"
        ]
    );
}

/// The CRD types durations as strings, so kube-apiserver refuses `heartbeatDuration: 20`
/// ("must be of type string") and druid never sees it; local mode refuses it too, naming the
/// field, instead of reading the number as text (the API server decodes the JSON, where a
/// number is not a string).
#[test]
fn durations_written_as_numbers_are_refused_as_the_api_server_refuses_them() {
    let text = ETCD.replace("  etcd: {}", "  etcd:\n    heartbeatDuration: 20");
    let err = parse_etcd_manifest(&text, "etcd.yaml").unwrap_err();
    let ManifestError::Parse(p) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(p.path.as_deref(), Some("spec.etcd.heartbeatDuration"));
    assert!(err.to_string().contains("expected a string"), "{err}");
    let quoted = ETCD.replace("  etcd: {}", "  etcd:\n    heartbeatDuration: \"20\"");
    let e = parse_etcd_manifest(&quoted, "etcd.yaml").unwrap();
    let errors = quorate_api::validate(&e).unwrap_err();
    assert!(errors.has_path("spec.etcd.heartbeatDuration"), "{errors}");
}
