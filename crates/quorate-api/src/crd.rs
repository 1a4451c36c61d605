//! The CustomResourceDefinitions quorate serves (`etcds`, `etcdopstasks`,
//! `etcdcopybackupstasks` of `druid.gardener.cloud`), generated from the Rust types and
//! committed under `deploy/crds/`; a test fails when a committed file drifts.

use kube::CustomResourceExt;

use crate::etcd::Etcd;
use crate::tasks::{EtcdCopyBackupsTask, EtcdOpsTask};

/// Where the generated `Etcd` CRD is committed, relative to the workspace root.
pub const CRD_PATH: &str = "deploy/crds/druid.gardener.cloud_etcds.yaml";

/// The command that regenerates every committed CRD (run from the workspace root).
pub const REGENERATE_COMMAND: &str = "QUORATE_UPDATE_CRD=1 cargo test -p quorate-api crd";

/// One CRD: the resource's plural (what `quorate crd` takes), where it is committed, and its
/// YAML.
pub struct CrdFile {
    /// `etcds`, `etcdopstasks` or `etcdcopybackupstasks`.
    pub plural: &'static str,
    /// Path relative to the workspace root.
    pub path: &'static str,
    /// The CRD as YAML, exactly as committed.
    pub yaml: String,
}

fn to_yaml(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> String {
    serde_saphyr::to_string(crd).expect("a CustomResourceDefinition always serializes to YAML")
}

/// The `Etcd` CRD as YAML, exactly as committed at [`CRD_PATH`].
pub fn crd_yaml() -> String {
    to_yaml(&Etcd::crd())
}

/// The `Etcd` CRD's `additionalPrinterColumns`, in order: what `kubectl get etcd` prints, and
/// what local mode's `quorate get etcd` renders the same way.
pub fn etcd_printer_columns() -> Vec<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition,
>{
    Etcd::crd()
        .spec
        .versions
        .into_iter()
        .next()
        .and_then(|v| v.additional_printer_columns)
        .unwrap_or_default()
}

/// Every CRD quorate serves, `Etcd` first.
pub fn all_crds() -> Vec<CrdFile> {
    vec![
        CrdFile {
            plural: "etcds",
            path: CRD_PATH,
            yaml: crd_yaml(),
        },
        CrdFile {
            plural: "etcdopstasks",
            path: "deploy/crds/druid.gardener.cloud_etcdopstasks.yaml",
            yaml: to_yaml(&EtcdOpsTask::crd()),
        },
        CrdFile {
            plural: "etcdcopybackupstasks",
            path: "deploy/crds/druid.gardener.cloud_etcdcopybackupstasks.yaml",
            yaml: to_yaml(&EtcdCopyBackupsTask::crd()),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn committed_path(path: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path)
    }

    /// Fails when a committed CRD differs from the types. With `QUORATE_UPDATE_CRD=1` the
    /// files are rewritten instead.
    #[test]
    fn committed_crds_match_the_types() {
        for crd in all_crds() {
            let path = committed_path(crd.path);
            if std::env::var_os("QUORATE_UPDATE_CRD").is_some_and(|v| v == "1") {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &crd.yaml).unwrap();
                continue;
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == crd.yaml,
                "{} is out of date with the types.\n\
                 Regenerate the CRDs from the workspace root with\n    {REGENERATE_COMMAND}\n\
                 and commit the result.",
                crd.path
            );
        }
    }

    #[test]
    fn task_crds_have_druids_names_columns_and_defaults() {
        let ops = EtcdOpsTask::crd();
        assert_eq!(
            ops.metadata.name.as_deref(),
            Some("etcdopstasks.druid.gardener.cloud")
        );
        assert_eq!(ops.spec.names.short_names, Some(vec!["eot".to_string()]));
        let columns: Vec<(String, i32)> = ops.spec.versions[0]
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.name.clone(), c.priority.unwrap_or(0)))
            .collect();
        let expected = [
            ("State", 0),
            ("Etcd", 0),
            ("Age", 0),
            ("Phase", 1),
            ("TTL", 1),
        ];
        assert_eq!(columns, expected.map(|(n, p)| (n.to_string(), p)));
        assert!(
            ops.spec.versions[0]
                .subresources
                .as_ref()
                .unwrap()
                .status
                .is_some()
        );
        let yaml = serde_json::to_value(&ops).unwrap();
        let spec = &yaml["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec["properties"]["ttlSecondsAfterFinished"]["default"],
            3600
        );
        let snap = &spec["properties"]["config"]["properties"]["onDemandSnapshot"]["properties"];
        assert_eq!(snap["timeoutSecondsFull"]["default"], 900);
        assert_eq!(snap["timeoutSecondsFull"]["minimum"], 120.0);
        assert_eq!(snap["type"]["enum"], serde_json::json!(["full", "delta"]));
        let copy = EtcdCopyBackupsTask::crd();
        assert_eq!(
            copy.metadata.name.as_deref(),
            Some("etcdcopybackupstasks.druid.gardener.cloud")
        );
    }

    #[test]
    fn crd_has_druids_identity_subresources_and_columns() {
        let crd = Etcd::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("etcds.druid.gardener.cloud")
        );
        assert_eq!(crd.spec.group, "druid.gardener.cloud");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, "Etcd");
        assert_eq!(crd.spec.names.plural, "etcds");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        let sub = version.subresources.as_ref().unwrap();
        assert!(sub.status.is_some());
        let scale = sub.scale.as_ref().unwrap();
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );

        let columns: Vec<(String, String, i32)> = version
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.name.clone(), c.json_path.clone(), c.priority.unwrap_or(0)))
            .collect();
        let expected = [
            ("Ready", ".status.ready", 0),
            (
                "Quorate",
                ".status.conditions[?(@.type==\"Ready\")].status",
                0,
            ),
            (
                "All Members Ready",
                ".status.conditions[?(@.type==\"AllMembersReady\")].status",
                0,
            ),
            (
                "Backup Ready",
                ".status.conditions[?(@.type==\"BackupReady\")].status",
                0,
            ),
            (
                "Scale",
                ".status.conditions[?(@.type==\"ScaleOperationComplete\")].reason",
                0,
            ),
            ("Age", ".metadata.creationTimestamp", 0),
            ("Cluster Size", ".spec.replicas", 1),
            ("Current Replicas", ".status.currentReplicas", 1),
            ("Ready Replicas", ".status.readyReplicas", 1),
        ];
        let expected: Vec<(String, String, i32)> = expected
            .iter()
            .map(|(n, p, prio)| (n.to_string(), p.to_string(), *prio))
            .collect();
        assert_eq!(columns, expected);
    }

    #[test]
    fn schema_carries_druids_required_fields_enums_and_patterns() {
        let yaml = crd_yaml();
        let value: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        let spec = &value["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let mut required: Vec<&str> = spec["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        required.sort();
        assert_eq!(required, ["backup", "etcd", "labels", "replicas"]);
        let backup = &spec["properties"]["backup"]["properties"];
        assert_eq!(
            backup["deltaSnapshotPeriod"]["pattern"],
            crate::duration::GO_DURATION_PATTERN
        );
        assert_eq!(
            backup["compression"]["properties"]["policy"]["enum"],
            serde_json::json!(["gzip", "lzw", "zlib"])
        );
        assert!(backup["maxBackupsLimitBasedGC"].is_object());
        let etcd = &spec["properties"]["etcd"]["properties"];
        for key in [
            "clientUrlTls",
            "peerUrlTls",
            "etcdDefragTimeout",
            "enableGRPCGateway",
            "additionalAdvertisePeerUrls",
            "bootstrapWithExistingCluster",
        ] {
            assert!(
                etcd[key].is_object(),
                "spec.etcd.{key} missing from the schema"
            );
        }
        let tls = &etcd["clientUrlTls"]["properties"];
        for key in ["tlsCASecretRef", "serverTLSSecretRef", "clientTLSSecretRef"] {
            assert!(tls[key].is_object(), "clientUrlTls.{key} missing");
        }
        assert!(etcd["peerUrlTls"]["properties"]["skipClientSANVerification"].is_object());
        assert!(
            !yaml.contains("x-kubernetes-validations"),
            "CEL rules break server-side apply on kube-apiserver 1.20"
        );
    }

    /// kube-apiserver rejects CRDs whose schema is not structural: every node needs a
    /// `type` unless it is int-or-string or preserves unknown fields.
    #[test]
    fn schema_is_structural() {
        fn walk(node: &serde_json::Value, path: &str, bad: &mut Vec<String>) {
            let Some(map) = node.as_object() else { return };
            let typed = map.contains_key("type")
                || map.get("x-kubernetes-int-or-string") == Some(&serde_json::json!(true))
                || map.get("x-kubernetes-preserve-unknown-fields")
                    == Some(&serde_json::json!(true));
            if !typed {
                bad.push(path.to_string());
            }
            for key in ["anyOf", "oneOf", "allOf"] {
                if map.contains_key(key) && !map.contains_key("x-kubernetes-int-or-string") {
                    bad.push(format!("{path} ({key})"));
                }
            }
            if let Some(props) = map.get("properties").and_then(|p| p.as_object()) {
                for (k, v) in props {
                    walk(v, &format!("{path}.{k}"), bad);
                }
            }
            if let Some(items) = map.get("items") {
                walk(items, &format!("{path}[]"), bad);
            }
            if let Some(extra) = map.get("additionalProperties").filter(|v| v.is_object()) {
                walk(extra, &format!("{path}{{}}"), bad);
            }
        }
        for crd in all_crds() {
            let value: serde_json::Value = serde_saphyr::from_str(&crd.yaml).unwrap();
            let root = &value["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            let mut bad = Vec::new();
            walk(root, "", &mut bad);
            assert_eq!(
                bad,
                Vec::<String>::new(),
                "{}: schema nodes without a type",
                crd.plural
            );
            assert!(
                !crd.yaml.contains("x-kubernetes-validations"),
                "{}: CEL rules break kube-apiserver 1.20",
                crd.plural
            );
        }
    }
}
