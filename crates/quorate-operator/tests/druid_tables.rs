//! etcd-druid's own `Etcd` validation tables (`test/it/crdvalidation/etcd`, translated case by
//! case into `fixtures/druid-crdvalidation-etcd.yaml`) run through quorate's two judges: the
//! local validator (`quorate up` reads the manifest as YAML, then `validate`/`validate_update`)
//! and the `Etcd` webhook's decision function. Each must give druid's verdict, except where the
//! case names a deliberate, documented difference.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::admission::Operation;
use kube::core::{ApiResource, GroupVersionKind};
use quorate_api::manifest::read_single_etcd_manifest;
use quorate_api::validate::{validate, validate_update};
use quorate_operator::{EtcdVerdict, judge_etcd};
use quorate_testkit::{KubeApiServer, install_etcd_crd_for_server};
use serde::Deserialize;
use serde_json::{Value, json};

mod support;

use support::webhooks::Webhooks;

const TABLE: &str = include_str!("fixtures/druid-crdvalidation-etcd.yaml");
const DIFFERENCES: &str = include_str!("../../../docs/reference/etcd-resource.md");

#[derive(Debug, Deserialize)]
struct Table {
    cases: Vec<Case>,
}

/// One row of druid's tables; see the fixture's header for the encoding.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    source: String,
    test: String,
    case: String,
    name: String,
    #[serde(default)]
    replicas: Option<i64>,
    #[serde(default)]
    cel: bool,
    #[serde(default)]
    peer_tls: bool,
    #[serde(default)]
    spec: Value,
    #[serde(default)]
    update: Option<Update>,
    expect: Verdict,
    #[serde(default)]
    quorate: Option<Verdict>,
    #[serde(default)]
    difference: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Update {
    /// Status of the `BootstrappedWithExistingCluster` condition written before the update.
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    spec: Value,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Accept,
    Reject,
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    if patch.is_null() {
        return;
    }
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let map = target.as_object_mut().expect("object");
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

impl Case {
    fn label(&self) -> String {
        format!("{} {} / {:?}", self.source, self.test, self.case)
    }

    /// druid's `EtcdBuilderWithoutDefaults(name).WithReplicas(n)` plus the case's change.
    fn created(&self, namespace: &str) -> Value {
        let mut etcd = json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "Etcd",
            "metadata": { "name": self.name, "namespace": namespace },
            "spec": {
                "labels": { "app": "etcd-statefulset", "instance": self.name, "name": "etcd" },
                "replicas": self.replicas.unwrap_or(3),
                "backup": {},
                "etcd": {},
                "sharedConfig": {}
            }
        });
        if self.peer_tls {
            etcd["spec"]["etcd"]["peerUrlTls"] = json!({
                "tlsCASecretRef": { "name": "peer-tls-ca", "dataKey": "ca.crt" },
                "serverTLSSecretRef": { "name": "peer-tls-server" }
            });
        }
        merge(&mut etcd["spec"], &self.spec);
        etcd
    }

    /// The stored object (with the condition written) and the object of the update, if any.
    fn updated(&self, namespace: &str) -> Option<(Value, Value)> {
        let update = self.update.as_ref()?;
        let mut old = self.created(namespace);
        if let Some(status) = &update.condition {
            old["status"] = json!({ "conditions": [{
                "type": "BootstrappedWithExistingCluster",
                "status": status,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "lastUpdateTime": "2026-01-01T00:00:00Z",
                "reason": "TestReason",
                "message": "test message"
            }]});
        }
        let mut new = old.clone();
        merge(&mut new["spec"], &update.spec);
        Some((old, new))
    }

    /// What quorate must answer: druid's verdict unless a documented difference says otherwise.
    fn quorate_verdict(&self) -> Verdict {
        self.quorate.unwrap_or(self.expect)
    }
}

fn table() -> Vec<Case> {
    let table: Table = serde_saphyr::from_str(TABLE).expect("the druid table parses");
    table.cases
}

/// `quorate up`'s reading: the object as a YAML manifest, then the local validator.
fn local_verdict(object: &Value, old: Option<&Value>) -> (Verdict, String) {
    let read = |v: &Value| {
        let yaml = serde_saphyr::to_string(v).expect("yaml");
        read_single_etcd_manifest(&yaml, "case.yaml")
    };
    let new = match read(object) {
        Ok(m) => m.etcd,
        Err(e) => return (Verdict::Reject, e.to_string()),
    };
    let result = match old {
        Some(old) => validate_update(&read(old).expect("the stored object reads").etcd, &new),
        None => validate(&new),
    };
    match result {
        Ok(()) => (Verdict::Accept, String::new()),
        Err(e) => (Verdict::Reject, e.to_string()),
    }
}

fn webhook_verdict(object: &Value, old: Option<&Value>) -> (Verdict, String) {
    let operation = if old.is_some() {
        Operation::Update
    } else {
        Operation::Create
    };
    match judge_etcd(&operation, Some(object), old) {
        EtcdVerdict::Allowed => (Verdict::Accept, String::new()),
        other => (Verdict::Reject, other.to_string()),
    }
}

#[test]
fn every_druid_table_case_gets_druids_verdict_from_the_local_validator_and_the_webhook() {
    let cases = table();
    assert!(cases.len() >= 100, "the table lost cases: {}", cases.len());
    let mut wrong = Vec::new();
    for case in &cases {
        let (object, old) = match case.updated("druid-tables") {
            Some((old, new)) => (new, Some(old)),
            None => (case.created("druid-tables"), None),
        };
        let want = case.quorate_verdict();
        for (judge, (got, why)) in [
            ("local", local_verdict(&object, old.as_ref())),
            ("webhook", webhook_verdict(&object, old.as_ref())),
        ] {
            if got != want {
                wrong.push(format!(
                    "{}: {judge} says {got:?}, druid {:?}{} {why}",
                    case.label(),
                    case.expect,
                    if want != case.expect {
                        " (quorate differs on purpose)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} verdicts differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// A case quorate judges differently must name the difference, and the reference page must
/// list it: no silent disagreement with druid.
#[test]
fn every_deliberate_difference_is_documented() {
    for case in table() {
        match (&case.quorate, &case.difference) {
            (None, None) => {}
            (Some(q), Some(d)) => {
                assert_ne!(
                    *q,
                    case.expect,
                    "{}: `quorate` equals druid's verdict",
                    case.label()
                );
                assert!(
                    DIFFERENCES.contains(&format!("`{d}`")),
                    "{}: difference `{d}` is not in docs/reference/etcd-resource.md",
                    case.label()
                );
            }
            _ => panic!("{}: `quorate` and `difference` go together", case.label()),
        }
    }
}

/// quorate's earlier spelling is still read, with a warning naming druid's.
#[test]
fn the_earlier_spelling_is_read_with_a_deprecation_warning() {
    let case = Case {
        source: String::new(),
        test: String::new(),
        case: String::new(),
        name: "etcd-alias".into(),
        replicas: None,
        cel: false,
        peer_tls: false,
        spec: json!({ "etcd": { "additionalAdvertisePeerUrls": [
            { "memberName": "etcd-alias-1", "urls": ["http://10.0.0.2:2380"] }
        ]}}),
        update: None,
        expect: Verdict::Accept,
        quorate: None,
        difference: None,
    };
    let yaml = serde_saphyr::to_string(&case.created("default")).expect("yaml");
    let manifest = read_single_etcd_manifest(&yaml, "alias.yaml").expect("reads");
    let warnings: Vec<String> = manifest
        .unknown_fields
        .iter()
        .map(|u| u.to_string())
        .collect();
    assert_eq!(
        warnings,
        [
            "spec.etcd.additionalAdvertisePeerUrls: deprecated spelling, read as \"additionalAdvertisePeerURLs\"; rename it to \"additionalAdvertisePeerURLs\""
        ]
    );
    assert_eq!(
        manifest
            .etcd
            .spec
            .etcd
            .additional_peer_urls_of("etcd-alias-1"),
        ["http://10.0.0.2:2380".to_string()]
    );
    validate(&manifest.etcd).expect("valid");
}

/// The table against a real kube-apiserver with quorate's CRD for that server (CEL rules from
/// 1.29 on) and the `Etcd` webhook served from this process: every case gets quorate's verdict
/// (druid's, except the documented differences). Below 1.29 the cases druid itself skips there
/// (`cel: true`) are NOT run; the test prints how many and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_druid_table_case_gets_druids_verdict_from_a_real_api_server() {
    let Some(server) = KubeApiServer::start_or_skip("druid_tables_live").await else {
        return;
    };
    let client = server.client().await.expect("client");
    let (version, cel) = install_etcd_crd_for_server(&client).await;
    // The harness installs the CEL-free CRD only where none is: the one for this server stays.
    let webhooks = Webhooks::start(&server, "druid-tables").await;
    let namespace = webhooks.namespace.clone();

    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
        "etcds",
    );
    let etcds: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let mut wrong = Vec::new();
    let mut not_run = 0;
    let cases = table();
    for case in &cases {
        if case.cel && !cel {
            not_run += 1;
            continue;
        }
        let got = live_verdict(&etcds, case, &namespace).await;
        if got.0 != case.quorate_verdict() {
            wrong.push(format!(
                "{}: API server says {:?} {}",
                case.label(),
                got.0,
                got.1
            ));
        }
    }
    webhooks.stop().await;
    eprintln!(
        "kube-apiserver {version} (CEL rules: {cel}): {} of {} druid cases run live, {} with \
         quorate's verdict",
        cases.len() - not_run,
        cases.len(),
        cases.len() - not_run - wrong.len()
    );
    if not_run > 0 {
        eprintln!(
            "NOT RUN: {not_run} of {} druid cases: kube-apiserver {version} is older than 1.29, so \
             quorate installs the CRD without CEL rules (as druid does) and druid skips these \
             cases too; run this test on Kubernetes >= 1.29 for them",
            cases.len()
        );
    }
    assert!(
        wrong.is_empty(),
        "{} verdicts differ on {version}:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Creates the case's object (then, for an update, writes the condition through the status
/// subresource and merge-patches the spec); the verdict of the last request. The object is
/// deleted afterwards: druid's tables reuse names.
async fn live_verdict(
    etcds: &Api<DynamicObject>,
    case: &Case,
    namespace: &str,
) -> (Verdict, String) {
    let created: DynamicObject = serde_json::from_value(case.created(namespace)).expect("object");
    let result = etcds.create(&PostParams::default(), &created).await;
    let verdict = match (&case.update, result) {
        (None, Ok(_)) => (Verdict::Accept, String::new()),
        (None, Err(e)) => (Verdict::Reject, e.to_string()),
        // The stored object of druid's case is itself one quorate refuses (e.g. druid's
        // "Unset set volumeClaimTemplate" stores `Inital-vc`, not a valid claim name): the
        // update can never happen, so the sequence is refused, as druid refuses the update. Only
        // where quorate's local validator refuses that object too; anything else is a bug here.
        (Some(_), Err(e)) => match local_verdict(&case.created(namespace), None) {
            (Verdict::Reject, why) => (
                Verdict::Reject,
                format!("the stored object is already refused on create: {e} (local: {why})"),
            ),
            (Verdict::Accept, _) => {
                panic!("{}: creating the stored object failed: {e}", case.label())
            }
        },
        (Some(update), Ok(_)) => {
            if let Some(status) = &update.condition {
                let (old, _) = case.updated(namespace).expect("update");
                etcds
                    .patch_status(
                        &case.name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": old["status"] })),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{}: status {status}: {e}", case.label()));
            }
            match etcds
                .patch(
                    &case.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": if update.spec.is_null() { json!({}) } else { update.spec.clone() } })),
                )
                .await
            {
                Ok(_) => (Verdict::Accept, String::new()),
                Err(e) => (Verdict::Reject, e.to_string()),
            }
        }
    };
    match etcds.delete(&case.name, &DeleteParams::default()).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => panic!("{}: deleting: {e}", case.label()),
    }
    // Deletion of an object without finalizers is immediate, but wait until the name is free.
    let deadline = Instant::now() + Duration::from_secs(10);
    while etcds.get_opt(&case.name).await.expect("get").is_some() {
        assert!(Instant::now() < deadline, "{} is not deleted", case.name);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    verdict
}
