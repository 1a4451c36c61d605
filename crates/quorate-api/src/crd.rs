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

/// Where the `Etcd` CRD with druid's CEL rules is committed, relative to the workspace root.
pub const CEL_CRD_PATH: &str = "deploy/crds/cel/druid.gardener.cloud_etcds.yaml";

/// The first Kubernetes release whose API server evaluates CRD validation rules (CEL) by
/// default (GA in 1.29); druid installs its CEL CRD from there on, and so does quorate.
pub const FIRST_CEL_RELEASE: (u32, u32) = (1, 29);

/// Whether an API server of this version evaluates CEL rules; `minor` may carry a `+` suffix
/// as servers report it ("29+").
pub fn server_supports_cel(major: &str, minor: &str) -> Option<bool> {
    let major: u32 = major.trim().parse().ok()?;
    let minor: u32 = minor.trim().trim_end_matches('+').parse().ok()?;
    Some((major, minor) >= FIRST_CEL_RELEASE)
}

type Crd =
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The `Etcd` CRD without CEL rules: the generated schema plus druid's list types, item limits
/// and patterns that every supported server understands.
pub fn etcd_crd() -> Crd {
    edit_schema(Etcd::crd(), druid_markers)
}

/// The `Etcd` CRD with druid's CEL rules (`x-kubernetes-validations`, druid's messages), for
/// servers from [`FIRST_CEL_RELEASE`] on. The rule that refuses a scale-in is left out:
/// quorate scales in (docs/reference/etcd-resource.md lists the difference).
pub fn etcd_crd_with_cel() -> Crd {
    edit_schema(etcd_crd(), druid_cel_rules)
}

/// The `Etcd` CRD for a server of this version: with CEL from 1.29, without before (and when
/// the version cannot be read).
pub fn etcd_crd_for_server(major: &str, minor: &str) -> Crd {
    if server_supports_cel(major, minor) == Some(true) {
        etcd_crd_with_cel()
    } else {
        etcd_crd()
    }
}

/// Every CRD quorate needs on a server of this version, as `quorate operator --install-crds`
/// applies them: the `Etcd` CRD of [`etcd_crd_for_server`], then the two task CRDs.
pub fn crds_for_server(major: &str, minor: &str) -> Vec<Crd> {
    vec![
        etcd_crd_for_server(major, minor),
        EtcdOpsTask::crd(),
        EtcdCopyBackupsTask::crd(),
    ]
}

/// A Kubernetes version that is not `MAJOR.MINOR`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a Kubernetes version MAJOR.MINOR such as 1.33")]
pub struct BadKubernetesVersion(pub String);

/// The `Etcd` CRD as YAML for a server of `version` (`1.33`, `v1.28.4`), as `quorate crd
/// --kubernetes-version` prints it.
pub fn crd_yaml_for_version(version: &str) -> Result<String, BadKubernetesVersion> {
    let bad = || BadKubernetesVersion(version.to_string());
    let mut parts = version.trim_start_matches('v').split('.');
    let (major, minor) = (parts.next().ok_or_else(bad)?, parts.next().ok_or_else(bad)?);
    server_supports_cel(major, minor).ok_or_else(bad)?;
    Ok(to_yaml(&etcd_crd_for_server(major, minor)))
}

/// The `Etcd` CRD as YAML, exactly as committed at [`CRD_PATH`] (without CEL rules).
pub fn crd_yaml() -> String {
    to_yaml(&etcd_crd())
}

/// The `Etcd` CRD with CEL rules as YAML, exactly as committed at [`CEL_CRD_PATH`].
pub fn crd_yaml_with_cel() -> String {
    to_yaml(&etcd_crd_with_cel())
}

fn edit_schema(crd: Crd, edit: fn(&mut serde_json::Value)) -> Crd {
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes");
    edit(&mut value["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
    serde_json::from_value(value).expect("the edited CRD is still a CRD")
}

/// The schema node at `path` below `root` (`[]` steps into a list's items).
fn node<'a>(root: &'a mut serde_json::Value, path: &str) -> &'a mut serde_json::Value {
    let mut at = root;
    for step in path.split('.') {
        at = if step == "[]" {
            &mut at["items"]
        } else {
            &mut at["properties"][step]
        };
        assert!(at.is_object(), "the Etcd schema has no {path} (at {step})");
    }
    at
}

/// Merges `extra` into the schema node at `path`.
fn mark(root: &mut serde_json::Value, path: &str, extra: serde_json::Value) {
    let target = node(root, path);
    for (k, v) in extra.as_object().expect("an object of keywords") {
        target[k] = v.clone();
    }
}

/// druid's kubebuilder markers on `api/core/v1alpha1` that are plain OpenAPI.
fn druid_markers(root: &mut serde_json::Value) {
    use serde_json::json;
    const MEMBER_NAME: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?-[0-9]+$";
    const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
    for field in [
        crate::spec_etcd::ADDITIONAL_PEER_URLS_FIELD,
        crate::spec_etcd::LEGACY_ADDITIONAL_PEER_URLS_FIELD,
    ] {
        let list = format!("spec.etcd.{field}");
        mark(root, &list, json!({ "maxItems": 10 }));
        mark(
            root,
            &format!("{list}.[].memberName"),
            json!({ "maxLength": 253, "pattern": MEMBER_NAME }),
        );
        mark(
            root,
            &format!("{list}.[].urls"),
            json!({ "minItems": 1, "maxItems": 5, "x-kubernetes-list-type": "set" }),
        );
        mark(
            root,
            &format!("{list}.[].urls.[]"),
            json!({ "maxLength": 2048 }),
        );
    }
    let bootstrap = "spec.etcd.bootstrapWithExistingCluster";
    mark(
        root,
        &format!("{bootstrap}.members"),
        json!({ "minItems": 1, "maxItems": 10, "x-kubernetes-list-type": "atomic" }),
    );
    mark(
        root,
        &format!("{bootstrap}.members.[].name"),
        json!({ "minLength": 1, "maxLength": 253, "pattern": DNS_LABEL }),
    );
    mark(
        root,
        &format!("{bootstrap}.members.[].peerUrls"),
        json!({ "minItems": 1, "maxItems": 5, "x-kubernetes-list-type": "set" }),
    );
    mark(
        root,
        &format!("{bootstrap}.members.[].peerUrls.[]"),
        json!({ "maxLength": 2048 }),
    );
    mark(
        root,
        &format!("{bootstrap}.clientEndpoints"),
        json!({ "minItems": 1, "maxItems": 10, "x-kubernetes-list-type": "set" }),
    );
    mark(
        root,
        &format!("{bootstrap}.clientEndpoints.[]"),
        json!({ "maxLength": 2048 }),
    );
    mark(
        root,
        "spec.backup.store.container",
        json!({ "maxLength": 63, "pattern": "^[a-zA-Z0-9][a-zA-Z0-9._-]{1,61}[a-zA-Z0-9]$" }),
    );
    mark(
        root,
        "spec.memberNamePrefix",
        json!({ "maxLength": 63, "pattern": DNS_LABEL }),
    );
}

/// One CEL rule with druid's message.
fn rule(rule: &str, message: &str) -> serde_json::Value {
    serde_json::json!({ "rule": rule, "message": message })
}

/// druid's `+kubebuilder:validation:XValidation` rules, copied with their messages, except the
/// scale-in rule on `spec.replicas`.
fn druid_cel_rules(root: &mut serde_json::Value) {
    use serde_json::json;
    const PEER_URL: &str = "must be a valid http:// or https:// URL (e.g., https://10.0.0.1:2380)";
    const URL_RULE: &str =
        "(self.startsWith('http://') || self.startsWith('https://')) && isURL(self)";
    root["x-kubernetes-validations"] = json!([
        rule(
            "!has(self.spec.etcd.additionalAdvertisePeerURLs) || self.spec.etcd.additionalAdvertisePeerURLs.all(m, has(self.spec.memberNamePrefix) ? m.memberName.startsWith(self.spec.memberNamePrefix + '-' + self.metadata.name + '-') : m.memberName.startsWith(self.metadata.name + '-'))",
            "additionalAdvertisePeerURLs member names must start with the Etcd resource name followed by a dash"
        ),
        rule(
            "!has(self.spec.etcd.additionalAdvertisePeerURLs) || self.spec.etcd.additionalAdvertisePeerURLs.all(m, int(m.memberName.substring(m.memberName.lastIndexOf('-')+1)) < self.spec.replicas)",
            "additionalAdvertisePeerURLs member name index must be less than replicas"
        ),
        rule(
            "!has(self.spec.etcd.bootstrapWithExistingCluster) || !has(oldSelf.spec.etcd.bootstrapWithExistingCluster) || !has(self.status) || !has(self.status.conditions) || !self.status.conditions.exists(c, c.type == 'BootstrappedWithExistingCluster' && c.status == 'False') || self.spec.etcd.bootstrapWithExistingCluster.members == oldSelf.spec.etcd.bootstrapWithExistingCluster.members",
            "etcd.spec.etcd.bootstrapWithExistingCluster.members cannot be modified while the bootstrap is in progress"
        ),
        rule(
            "!has(self.spec.etcd.bootstrapWithExistingCluster) || !has(oldSelf.spec.etcd.bootstrapWithExistingCluster) || !has(self.status) || !has(self.status.conditions) || !self.status.conditions.exists(c, c.type == 'BootstrappedWithExistingCluster' && c.status == 'False') || self.spec.etcd.bootstrapWithExistingCluster.clientEndpoints == oldSelf.spec.etcd.bootstrapWithExistingCluster.clientEndpoints",
            "etcd.spec.etcd.bootstrapWithExistingCluster.clientEndpoints cannot be modified while the bootstrap is in progress"
        ),
        rule(
            "!has(self.spec.etcd.bootstrapWithExistingCluster) || self.spec.etcd.bootstrapWithExistingCluster.members.all(m1, self.spec.etcd.bootstrapWithExistingCluster.members.filter(m2, m1.name == m2.name).size() == 1)",
            "bootstrapWithExistingCluster.members[*].name must be unique"
        ),
        rule(
            "!has(self.spec.etcd.bootstrapWithExistingCluster) || self.spec.etcd.bootstrapWithExistingCluster.members.all(m, has(self.spec.memberNamePrefix) ? !m.name.startsWith(self.spec.memberNamePrefix + '-' + self.metadata.name + '-') : !m.name.startsWith(self.metadata.name + '-'))",
            "bootstrapWithExistingCluster.members[*].name must not collide with a target member (must not start with the target Etcd's member-name prefix)"
        ),
    ]);
    mark(
        root,
        "spec",
        json!({ "x-kubernetes-validations": [
            rule("has(oldSelf.storageClass) ==  has(self.storageClass)", "etcd.spec.storageClass is an immutable field."),
            rule("has(oldSelf.volumeClaimTemplate) == has(self.volumeClaimTemplate)", "etcd.spec.volumeClaimTemplate is an immutable field."),
            rule("has(oldSelf.memberNamePrefix) == has(self.memberNamePrefix)", "etcd.spec.memberNamePrefix is an immutable field."),
        ]}),
    );
    for (field, message) in [
        (
            "spec.storageClass",
            "etcd.spec.storageClass is an immutable field",
        ),
        (
            "spec.volumeClaimTemplate",
            "etcd.spec.VolumeClaimTemplate is an immutable field",
        ),
        (
            "spec.memberNamePrefix",
            "etcd.spec.memberNamePrefix is an immutable field",
        ),
    ] {
        mark(
            root,
            field,
            json!({ "x-kubernetes-validations": [rule("self == oldSelf", message)] }),
        );
    }
    mark(
        root,
        "spec.backup",
        json!({ "x-kubernetes-validations": [
            rule("!(has(self.deltaSnapshotPeriod) && has(self.garbageCollectionPeriod)) || duration(self.deltaSnapshotPeriod).getSeconds() < duration(self.garbageCollectionPeriod).getSeconds()", "etcd.spec.backup.garbageCollectionPeriod must be greater than etcd.spec.backup.deltaSnapshotPeriod"),
        ]}),
    );
    mark(
        root,
        "spec.backup.store.endpointOverride",
        json!({ "x-kubernetes-validations": [
            rule("isURL(self)", "endpoint override must be a valid URL."),
        ]}),
    );
    mark(
        root,
        "spec.etcd",
        json!({ "x-kubernetes-validations": [
            rule("!has(self.additionalAdvertisePeerURLs) || !has(self.peerUrlTls) || self.additionalAdvertisePeerURLs.all(m, m.urls.all(u, u.startsWith('https://')))", "when peerUrlTls is enabled, all additional advertise peer URLs must use https://"),
            rule("!has(self.additionalAdvertisePeerURLs) || has(self.peerUrlTls) || self.additionalAdvertisePeerURLs.all(m, m.urls.all(u, u.startsWith('http://')))", "when peerUrlTls is not enabled, all additional advertise peer URLs must use http://"),
            rule("!has(self.bootstrapWithExistingCluster) || !has(self.peerUrlTls) || self.bootstrapWithExistingCluster.members.all(m, m.peerUrls.all(u, u.startsWith('https://')))", "when peerUrlTls is enabled, all bootstrapWithExistingCluster member peer URLs must use https://"),
            rule("!has(self.bootstrapWithExistingCluster) || has(self.peerUrlTls) || self.bootstrapWithExistingCluster.members.all(m, m.peerUrls.all(u, u.startsWith('http://')))", "when peerUrlTls is not enabled, all bootstrapWithExistingCluster member peer URLs must use http://"),
            rule("!has(self.bootstrapWithExistingCluster) || !has(self.clientUrlTls) || self.bootstrapWithExistingCluster.clientEndpoints.all(u, u.startsWith('https://'))", "when clientUrlTls is enabled, all bootstrapWithExistingCluster clientEndpoints must use https://"),
            rule("!has(self.bootstrapWithExistingCluster) || has(self.clientUrlTls) || self.bootstrapWithExistingCluster.clientEndpoints.all(u, u.startsWith('http://'))", "when clientUrlTls is not enabled, all bootstrapWithExistingCluster clientEndpoints must use http://"),
            rule("!has(self.bootstrapWithExistingCluster) || has(oldSelf.bootstrapWithExistingCluster)", "etcd.spec.etcd.bootstrapWithExistingCluster cannot be added after the Etcd resource has been created"),
        ]}),
    );
    let peer = crate::spec_etcd::ADDITIONAL_PEER_URLS_FIELD;
    mark(
        root,
        &format!("spec.etcd.{peer}.[].urls.[]"),
        json!({ "x-kubernetes-validations": [rule(URL_RULE, PEER_URL)] }),
    );
    mark(
        root,
        "spec.etcd.bootstrapWithExistingCluster.members.[].peerUrls.[]",
        json!({ "x-kubernetes-validations": [rule(URL_RULE, PEER_URL)] }),
    );
    mark(
        root,
        "spec.etcd.bootstrapWithExistingCluster.clientEndpoints.[]",
        json!({ "x-kubernetes-validations": [rule(URL_RULE, "must be a valid http:// or https:// URL (e.g., https://etcd-source-client.source-ns.svc:2379)")] }),
    );
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

/// Every CRD quorate serves, `Etcd` first (without, then with CEL rules).
pub fn all_crds() -> Vec<CrdFile> {
    vec![
        CrdFile {
            plural: "etcds",
            path: CRD_PATH,
            yaml: crd_yaml(),
        },
        CrdFile {
            plural: "etcds-with-cel",
            path: CEL_CRD_PATH,
            yaml: crd_yaml_with_cel(),
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
            "additionalAdvertisePeerURLs",
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
            "the CEL-free CRD is for servers before 1.29"
        );
        let urls = &etcd["additionalAdvertisePeerURLs"]["items"]["properties"]["urls"];
        assert_eq!(urls["x-kubernetes-list-type"], "set");
        assert_eq!(urls["maxItems"], 5);
    }

    /// The CEL CRD carries every druid rule but the scale-in one, with druid's messages; the
    /// operator picks it from 1.29 on.
    #[test]
    fn cel_crd_has_druids_rules_and_is_chosen_from_1_29() {
        let value = serde_json::to_value(etcd_crd_with_cel()).unwrap();
        let root = &value["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut count = 0;
        fn walk(n: &serde_json::Value, count: &mut usize, messages: &mut Vec<String>) {
            if let Some(rules) = n["x-kubernetes-validations"].as_array() {
                *count += rules.len();
                messages.extend(
                    rules
                        .iter()
                        .map(|r| r["message"].as_str().unwrap().to_string()),
                );
            }
            if let Some(props) = n["properties"].as_object() {
                props.values().for_each(|p| walk(p, count, messages));
            }
            if n["items"].is_object() {
                walk(&n["items"], count, messages);
            }
        }
        let mut messages = Vec::new();
        walk(root, &mut count, &mut messages);
        // druid has 25 rules; the scale-in one is left out on purpose.
        assert_eq!(count, 24, "{messages:#?}");
        assert!(
            !messages
                .iter()
                .any(|m| m.starts_with("Replicas can either"))
        );
        assert!(messages.contains(&"endpoint override must be a valid URL.".to_string()));
        assert_eq!(server_supports_cel("1", "29"), Some(true));
        assert_eq!(server_supports_cel("1", "37+"), Some(true));
        assert_eq!(server_supports_cel("1", "20"), Some(false));
        assert_eq!(server_supports_cel("1", "x"), None);
        let without = serde_json::to_value(etcd_crd_for_server("1", "20")).unwrap();
        assert!(!without.to_string().contains("x-kubernetes-validations"));
        let with = serde_json::to_value(etcd_crd_for_server("1", "33")).unwrap();
        assert_eq!(with, value);
        assert_eq!(
            crd_yaml_for_version("v1.29.0").unwrap(),
            crd_yaml_with_cel()
        );
        assert_eq!(crd_yaml_for_version("1.28").unwrap(), crd_yaml());
        assert!(crd_yaml_for_version("1").is_err());
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
            assert_eq!(
                crd.yaml.contains("x-kubernetes-validations"),
                crd.path == CEL_CRD_PATH,
                "{}: CEL rules only in {CEL_CRD_PATH} (the other CRDs are for servers before 1.29)",
                crd.plural
            );
        }
    }
}
