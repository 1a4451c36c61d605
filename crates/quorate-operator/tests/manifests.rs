//! How users install the operator: the plain manifests of `deploy/manifests/` and the Helm
//! chart of `deploy/helm/quorate-operator/`.
//!
//! Against a real kube-apiserver v1.37.2 (a private one per test: the manifests make
//! cluster-scoped objects): every manifest is accepted by `kubectl apply`; the leader-election
//! Role lets the operator's ServiceAccount create and renew its Lease in its own namespace and
//! nowhere else; and the ClusterRole is enough for the real controller, run in-process with a
//! client that impersonates that ServiceAccount, to reconcile and delete an `Etcd`.
//!
//! Without a server: the CRD copies are the committed CRD; the ClusterRole grants everything
//! the Role of the etcd pods grants (RBAC escalation) and nothing broad; the webhook
//! configuration names the operator's paths and protected kinds; the Deployment's arguments
//! parse as `quorate operator` arguments. No `helm` binary is available here, so the chart is
//! checked by rendering its templates with the default values through a small renderer that
//! knows exactly the template constructs the chart uses (and fails on any other), and
//! comparing the result with the plain manifests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Command, FromArgMatches};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use quorate_api::Etcd;
use quorate_operator::{
    COMPONENT_PROTECTION_PATH, DEFAULT_CERT_DIR, DEFAULT_WEBHOOK_PORT, ETCD_VALIDATION_PATH,
    OperatorArgs, PROTECTED_KINDS, TASK_VALIDATION_PATH,
};
use quorate_operator::{Metrics, Scope};
use quorate_testkit::{KubeApiServer, eventually, install_etcd_crd};
use serde_json::Value;

mod support;

use support::operator::{
    OPERATOR_USER, Operator, kubectl_apply, manifest, server_with_operator_rbac,
};

const CLUSTER: &str = include_str!("../../../examples/etcd-cluster.yaml");
const WAIT: Duration = Duration::from_secs(60);
/// Namespace and names the plain manifests use.
const NAMESPACE: &str = "quorate-system";
const OPERATOR: &str = "quorate-operator";
/// The ClusterRole granting Secrets, bound per Etcd namespace.
const SECRETS_ROLE: &str = "quorate-operator-secrets";

// ---- files -------------------------------------------------------------------------------

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn read(path: &str) -> String {
    let file = repo(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The YAML documents of `text` (empty documents left out).
fn documents(text: &str, what: &str) -> Vec<Value> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what} is not YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The files of `deploy/manifests/`, in the order `kubectl apply -f` takes them.
fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("deploy/manifests"))
        .expect("deploy/manifests")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Every object of the plain manifests.
fn plain_objects() -> Vec<Value> {
    manifest_files()
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).expect("manifest file");
            documents(&text, &file.display().to_string())
        })
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn rules_of(object: &Value) -> Vec<PolicyRule> {
    serde_json::from_value(object["rules"].clone()).expect("RBAC rules")
}

fn operator_args(args: &[String]) -> OperatorArgs {
    let command = OperatorArgs::augment_args(Command::new("operator").no_binary_name(true));
    let matches = command
        .try_get_matches_from(args)
        .unwrap_or_else(|e| panic!("{args:?} are not `quorate operator` arguments: {e}"));
    OperatorArgs::from_arg_matches(&matches).expect("operator arguments")
}

fn container_args(deployment: &Value) -> Vec<String> {
    serde_json::from_value(deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone())
        .expect("container args")
}

// ---- checks without a server --------------------------------------------------------------

#[test]
fn the_crd_copies_are_the_committed_crds() {
    for plural in ["etcds", "etcdopstasks", "etcdcopybackupstasks"] {
        let committed = format!("deploy/crds/druid.gardener.cloud_{plural}.yaml");
        let crd = read(&committed);
        for copy in [
            format!("deploy/manifests/01-crd-{plural}.yaml"),
            format!("deploy/helm/quorate-operator/crds/druid.gardener.cloud_{plural}.yaml"),
        ] {
            assert!(
                read(&copy) == crd,
                "{copy} differs from {committed}; copy it again"
            );
        }
    }
}

#[test]
fn the_manifests_are_ordered_so_that_one_apply_works() {
    let order: Vec<(String, String)> = plain_objects()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let position = |kind: &str| {
        order
            .iter()
            .position(|(k, _)| k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {order:?}"))
    };
    // The namespace before what lives in it, the CRD first of all custom things, the webhook
    // configuration before the Deployment (the operator reads it at start).
    assert_eq!(position("Namespace"), 0, "{order:?}");
    assert!(position("CustomResourceDefinition") < position("ServiceAccount"));
    assert!(position("ServiceAccount") < position("Deployment"));
    assert!(position("ValidatingWebhookConfiguration") < position("Deployment"));
    for object in plain_objects() {
        let kind = object["kind"].as_str().unwrap_or_default();
        let cluster_scoped = [
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingWebhookConfiguration",
        ]
        .contains(&kind);
        // The Secrets grant lives where the Etcd objects are (`default` in the manifests).
        let etcd_namespace_grant =
            kind == "RoleBinding" && object["metadata"]["name"] == SECRETS_ROLE;
        if !cluster_scoped && !etcd_namespace_grant {
            assert_eq!(object["metadata"]["namespace"], NAMESPACE, "{kind}");
        }
    }
}

/// Kubernetes lets a user create a Role only when it holds every permission of it (or has
/// `escalate`), and bind it only likewise (or with `bind`). The operator creates and binds the
/// Role of the etcd pods, so its ClusterRole must cover that Role.
#[test]
fn the_clusterrole_covers_the_role_of_the_etcd_pods_and_nothing_broad() {
    let objects = plain_objects();
    // In an Etcd's namespace the operator holds its ClusterRole and the Secrets grant.
    let cluster_rules: Vec<PolicyRule> = [OPERATOR, SECRETS_ROLE]
        .iter()
        .flat_map(|name| rules_of(find(&objects, "ClusterRole", name)))
        .collect();
    let mut etcd: Etcd = serde_saphyr::from_str(CLUSTER).expect("example");
    etcd.metadata.uid = Some("0b5e0f4e-0000-4000-8000-000000000001".to_string());
    let role =
        quorate_core::components::role::build(&etcd, etcd.spec.replicas).expect("the pods' Role");
    for rule in role.rules.unwrap_or_default() {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    let covered = cluster_rules.iter().any(|c| {
                        c.api_groups.iter().flatten().any(|g| g == group)
                            && c.resources.iter().flatten().any(|r| r == resource)
                            && c.verbs.iter().any(|v| v == verb)
                            && match (&c.resource_names, &rule.resource_names) {
                                (None, _) => true,
                                (Some(names), Some(wanted)) => {
                                    wanted.iter().all(|w| names.contains(w))
                                }
                                (Some(_), None) => false,
                            }
                    });
                    assert!(
                        covered,
                        "the ClusterRole does not grant {verb} on {group}/{resource}, which the \
                         Role of the etcd pods grants: creating that Role would be refused"
                    );
                }
            }
        }
    }
    for rule in &cluster_rules {
        let text = format!("{rule:?}");
        assert!(
            !rule.verbs.iter().any(|v| v == "*"),
            "wildcard verb: {text}"
        );
        assert!(
            !rule.resources.iter().flatten().any(|r| r == "*"),
            "wildcard resource: {text}"
        );
        for broad in ["escalate", "bind", "impersonate", "update"] {
            // `update` of a finalizers subresource is what a blocking owner reference needs.
            let allowed = broad == "update"
                && rule
                    .resources
                    .iter()
                    .flatten()
                    .all(|r| r.ends_with("/finalizers"));
            assert!(
                allowed || !rule.verbs.iter().any(|v| v == broad),
                "{broad} is not needed: {text}"
            );
        }
    }
    assert!(
        !rules_of(find(&objects, "ClusterRole", OPERATOR))
            .iter()
            .any(|r| r.resources.iter().flatten().any(|r| r == "secrets")),
        "Secrets are granted per namespace (09-etcd-namespace-secrets.yaml), never cluster-wide"
    );
    for rule in rules_of(find(&objects, "ClusterRole", SECRETS_ROLE)) {
        assert_eq!(
            rule.verbs,
            ["get", "create"],
            "Secrets are only read one by name, and the agent token made once: never listed, \
             watched or changed"
        );
    }
}

#[test]
fn the_webhook_configuration_names_the_operators_paths_and_protected_kinds() {
    let objects = plain_objects();
    let config: ValidatingWebhookConfiguration =
        serde_json::from_value(find(&objects, "ValidatingWebhookConfiguration", OPERATOR).clone())
            .expect("a ValidatingWebhookConfiguration");
    let webhooks = config.webhooks.expect("webhooks");
    assert_eq!(webhooks.len(), 3);
    for webhook in &webhooks {
        let service = webhook.client_config.service.as_ref().expect("by Service");
        assert_eq!(
            (service.namespace.as_str(), service.name.as_str()),
            (NAMESPACE, "quorate-operator-webhook")
        );
        assert_eq!(service.port, Some(443));
        assert!(
            webhook.client_config.ca_bundle.is_none(),
            "the operator fills the caBundle; a manifest value would be put back by every apply"
        );
        assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(webhook.side_effects, "None");
        assert_eq!(webhook.admission_review_versions, ["v1"]);
        assert_eq!(webhook.timeout_seconds, Some(10));
    }
    let path = |w: &k8s_openapi::api::admissionregistration::v1::ValidatingWebhook| {
        w.client_config
            .service
            .as_ref()
            .and_then(|s| s.path.clone())
    };
    let etcd = &webhooks[0];
    assert_eq!(path(etcd).as_deref(), Some(ETCD_VALIDATION_PATH));
    let etcd_rules = etcd.rules.clone().unwrap_or_default();
    assert_eq!(etcd_rules.len(), 1);
    assert_eq!(
        etcd_rules[0].resources.as_deref(),
        Some(&["etcds".to_string()][..]),
        "etcds only, not etcds/status"
    );
    let mut operations = etcd_rules[0].operations.clone().unwrap_or_default();
    operations.sort();
    assert_eq!(operations, ["CREATE", "UPDATE"]);

    let tasks = &webhooks[1];
    assert_eq!(path(tasks).as_deref(), Some(TASK_VALIDATION_PATH));
    let task_rules = tasks.rules.clone().unwrap_or_default();
    assert_eq!(
        task_rules[0].resources.as_deref(),
        Some(
            &[
                "etcdopstasks".to_string(),
                "etcdcopybackupstasks".to_string()
            ][..]
        ),
    );

    let components = &webhooks[2];
    assert_eq!(path(components).as_deref(), Some(COMPONENT_PROTECTION_PATH));
    let selector = components
        .object_selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    assert_eq!(
        selector,
        BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_string(),
            "etcd-druid".to_string()
        )])
    );
    let plural = |kind: &str| match kind {
        "PodDisruptionBudget" => "poddisruptionbudgets".to_string(),
        kind => format!("{}s", kind.to_lowercase()),
    };
    let expected: BTreeSet<(String, String)> = PROTECTED_KINDS
        .iter()
        .map(|(group, kind)| (group.to_string(), plural(kind)))
        .collect();
    let mut covered = BTreeSet::new();
    for rule in components.rules.iter().flatten() {
        let mut operations = rule.operations.clone().unwrap_or_default();
        operations.sort();
        // Lease renewals by the agents must not depend on the operator being up.
        let leases = rule.resources.iter().flatten().any(|r| r == "leases");
        let wanted: &[&str] = if leases {
            &["DELETE"]
        } else {
            &["DELETE", "UPDATE"]
        };
        assert_eq!(operations, wanted, "{rule:?}");
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                covered.insert((group.clone(), resource.clone()));
            }
        }
    }
    assert_eq!(
        covered, expected,
        "the component webhook's rules must be PROTECTED_KINDS"
    );
}

#[test]
fn the_deployment_runs_the_operator_as_the_services_and_webhooks_expect() {
    let objects = plain_objects();
    let deployment = find(&objects, "Deployment", OPERATOR);
    let args = container_args(deployment);
    assert_eq!(args[0], "operator");
    let parsed = operator_args(&args[1..]);
    assert_eq!(
        parsed.webhook_self_signed_service.as_deref(),
        Some("quorate-operator-webhook")
    );
    assert_eq!(parsed.webhook_configuration, OPERATOR);
    assert_eq!(parsed.webhook_cert_dir, Path::new(DEFAULT_CERT_DIR));
    assert_eq!(parsed.leader_election_id, OPERATOR);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "quorate:0.1.0");
    assert_eq!(
        container["image"],
        quorate_operator::Images::default().member.as_str(),
        "the operator's own image is the one it gives the etcd pods"
    );
    assert_eq!(pod["serviceAccountName"], OPERATOR);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let env: BTreeMap<String, Value> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
        .collect();
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("OPERATOR_SERVICE_ACCOUNT", "spec.serviceAccountName"),
    ] {
        assert_eq!(env[name]["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    let ports: BTreeMap<String, i64> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports["webhook"], i64::from(DEFAULT_WEBHOOK_PORT));
    assert_eq!(ports["http"], i64::from(parsed.http_address.port()));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    let mount = &container["volumeMounts"][0];
    assert_eq!(mount["mountPath"], DEFAULT_CERT_DIR);
    assert_eq!(pod["volumes"][0]["name"], mount["name"]);
    assert!(pod["volumes"][0]["emptyDir"].is_object());
    let webhook_service = find(&objects, "Service", "quorate-operator-webhook");
    assert_eq!(webhook_service["spec"]["ports"][0]["port"], 443);
    assert_eq!(webhook_service["spec"]["ports"][0]["targetPort"], "webhook");
    let metrics_service = find(&objects, "Service", "quorate-operator-metrics");
    assert_eq!(metrics_service["spec"]["ports"][0]["port"], 8080);
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    for service in [webhook_service, metrics_service] {
        assert_eq!(&service["spec"]["selector"], selector);
    }
}

// ---- the chart ---------------------------------------------------------------------------

const CHART: &str = "deploy/helm/quorate-operator";

/// The chart's values.yaml.
fn chart_values() -> Value {
    let values: Value = serde_saphyr::from_str(&read(&format!("{CHART}/values.yaml")))
        .expect("the chart's values.yaml parses");
    values
}

fn value_at<'a>(values: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|p| !p.is_empty())
        .try_fold(values, |v, key| v.get(key))
}

/// Go template truthiness.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn template_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo(&format!("{CHART}/templates")))
        .expect("templates")
        .map(|e| e.expect("entry").path())
        // templates/tests/ holds the `helm test` hook, not part of what an install makes;
        // scripts/helm-check.sh lints and renders it with helm itself.
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The text inside each `{{ ... }}` action of `text`.
fn actions(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .unwrap_or_else(|| panic!("unclosed action in {rest:.80}"));
        found.push(after[..end].trim_matches('-').trim().to_string());
        rest = &after[end + 2..];
    }
    found
}

#[test]
fn the_chart_values_parse_and_the_templates_use_only_values_that_exist() {
    let values = chart_values();
    for key in [
        "image.repository",
        "image.tag",
        "namespace",
        "replicas",
        "autoReconcile",
        "workers",
        "extraArgs",
        "resources",
        "webhook.enabled",
        "webhook.certificate.selfSigned",
        "webhook.certificate.secretName",
        "imageVectorOverwrite",
    ] {
        assert!(value_at(&values, key).is_some(), "values.yaml has no {key}");
    }
    assert_eq!(values["replicas"], 1);
    assert_eq!(values["webhook"]["certificate"]["selfSigned"], true);
    let chart: Value =
        serde_saphyr::from_str(&read(&format!("{CHART}/Chart.yaml"))).expect("Chart.yaml");
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    for file in template_files() {
        let text = std::fs::read_to_string(&file).expect("template");
        let name = file.display().to_string();
        // Blocks open and close in pairs.
        let mut depth = 0i32;
        for action in actions(&text) {
            let word = action.split_whitespace().next().unwrap_or_default();
            match word {
                "if" | "range" | "with" | "define" | "block" => depth += 1,
                "end" => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "{name}: `end` without a block");
            // Every .Values path named exists in values.yaml.
            let mut rest = action.as_str();
            while let Some(at) = rest.find(".Values.") {
                let tail = &rest[at + ".Values.".len()..];
                let path: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
                    .collect();
                assert!(
                    value_at(&values, path.trim_end_matches('.')).is_some(),
                    "{name} uses .Values.{path}, which values.yaml does not have"
                );
                rest = &tail[path.len()..];
            }
        }
        assert_eq!(depth, 0, "{name}: a block is not closed");
    }
}

/// Renders one chart template with the default values, release `quorate-operator` in
/// namespace `quorate-system`. Only the constructs the chart uses are known: whole-line
/// `if`/`with`/`range`/`else`/`end` (conditions on values or listed below), variable
/// assignments, `fail`, `include ... | nindent`, `toYaml .Values.x | nindent`,
/// `.Files.Get`, and the inline expressions listed below. Anything else fails the test, so a
/// new construct is added here knowingly.
fn render(template: &str, values: &Value) -> String {
    let app_version = {
        let chart: Value =
            serde_saphyr::from_str(&read(&format!("{CHART}/Chart.yaml"))).expect("Chart.yaml");
        chart["appVersion"]
            .as_str()
            .expect("appVersion")
            .to_string()
    };
    let chart_label = format!("quorate-operator-{app_version}");
    let text = expand_ranges(&read(&format!("{CHART}/templates/{template}")), values);
    let scalar = |path: &str| match value_at(values, path) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => panic!("no value {path}"),
    };
    let tag = Some(scalar("image.tag"))
        .filter(|t| !t.is_empty())
        .unwrap_or(app_version.clone());
    let inline: Vec<(&str, String)> = vec![
        (
            r#"{{ include "quorate-operator.fullname" . }}"#,
            OPERATOR.into(),
        ),
        (
            r#"{{ include "quorate-operator.namespace" . }}"#,
            NAMESPACE.into(),
        ),
        (
            r#"{{ include "quorate-operator.webhookService" . }}"#,
            "quorate-operator-webhook".into(),
        ),
        ("{{ $namespace }}", NAMESPACE.into()),
        ("{{ $service }}", "quorate-operator-webhook".into()),
        ("{{ .Values.image.repository }}", scalar("image.repository")),
        ("{{ .Values.image.tag | default .Chart.AppVersion }}", tag),
        ("{{ .Values.image.pullPolicy }}", scalar("image.pullPolicy")),
        ("{{ .Values.replicas }}", scalar("replicas")),
        ("{{ .Values.workers }}", scalar("workers")),
        (
            "{{ .Values.webhook.timeoutSeconds }}",
            scalar("webhook.timeoutSeconds"),
        ),
        (
            "{{ .Values.webhook.certificate.secretName }}",
            scalar("webhook.certificate.secretName"),
        ),
        (
            "{{ .Values.webhook.certificate.caBundle }}",
            scalar("webhook.certificate.caBundle"),
        ),
    ];
    let included = |name: &str| -> String {
        match name {
            "quorate-operator.labels" => format!(
                "app.kubernetes.io/name: {OPERATOR}\napp.kubernetes.io/part-of: quorate\n\
                 app.kubernetes.io/instance: {OPERATOR}\napp.kubernetes.io/version: \"{app_version}\"\n\
                 helm.sh/chart: {chart_label}"
            ),
            "quorate-operator.selectorLabels" => format!("app.kubernetes.io/name: {OPERATOR}"),
            other => panic!("{template}: the renderer does not know include {other:?}"),
        }
    };
    let self_signed = truthy(&values["webhook"]["enabled"])
        && truthy(&values["webhook"]["certificate"]["selfSigned"]);
    let condition = |cond: &str| -> bool {
        match cond {
            r#"include "quorate-operator.selfSigned" ."# => self_signed,
            "and (not $selfSigned) .Values.webhook.certificate.caBundle" => {
                !self_signed && truthy(&values["webhook"]["certificate"]["caBundle"])
            }
            r#"and (include "quorate-operator.selfSigned" .) (gt (int .Values.replicas) 1)"# => {
                self_signed && values["replicas"].as_i64().unwrap_or(1) > 1
            }
            "and .Values.webhook.enabled (not .Values.webhook.certificate.selfSigned) (not .Values.webhook.certificate.secretName)" => {
                truthy(&values["webhook"]["enabled"])
                    && !truthy(&values["webhook"]["certificate"]["selfSigned"])
                    && !truthy(&values["webhook"]["certificate"]["secretName"])
            }
            _ => {
                if let Some(path) = cond.strip_prefix("not .Values.") {
                    !truthy(value_at(values, path).expect("value"))
                } else if let Some(path) = cond.strip_prefix(".Values.") {
                    truthy(value_at(values, path).expect("value"))
                } else {
                    panic!("{template}: the renderer does not know the condition {cond:?}")
                }
            }
        }
    };
    let indented = |text: &str, indent: usize| -> String {
        text.lines()
            .map(|l| format!("{}{l}", " ".repeat(indent)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // Each open block: is it taking its branch, and was its parent active.
    let mut blocks: Vec<(bool, bool)> = Vec::new();
    let active = |blocks: &[(bool, bool)]| blocks.iter().all(|(taken, _)| *taken);
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        let whole_action = trimmed.starts_with("{{")
            && trimmed.ends_with("}}")
            && trimmed.matches("{{").count() == 1;
        if !whole_action {
            if !active(&blocks) {
                continue;
            }
            let mut rendered = line.to_string();
            for (expression, value) in &inline {
                rendered = rendered.replace(expression, value);
            }
            assert!(
                !rendered.contains("{{"),
                "{template}: the renderer does not know the expression in {line:?}"
            );
            out.push(rendered);
            continue;
        }
        let action = actions(trimmed).remove(0);
        let (word, rest) = action.split_once(' ').unwrap_or((action.as_str(), ""));
        match word {
            "if" | "with" | "range" => {
                let parent = active(&blocks);
                blocks.push((parent && condition(rest.trim()), parent));
            }
            "else" => {
                let (taken, parent) = blocks.pop().expect("else without if");
                blocks.push((parent && !taken, parent));
            }
            "end" => {
                blocks.pop().expect("end without block");
            }
            "fail" => assert!(!active(&blocks), "{template}: {action}"),
            _ if !active(&blocks) => {}
            _ if word.starts_with('$') && rest.starts_with(":=") => {}
            "include" => {
                let (name, indent) = rest
                    .split_once(" . | nindent ")
                    .unwrap_or_else(|| panic!("{template}: unknown include form {action:?}"));
                let indent: usize = indent.parse().expect("nindent width");
                out.push(indented(&included(name.trim_matches('"')), indent));
            }
            "toYaml" => {
                let (path, indent) = rest
                    .split_once(" | nindent ")
                    .unwrap_or_else(|| panic!("{template}: unknown toYaml form {action:?}"));
                let path = path
                    .strip_prefix(".Values.")
                    .unwrap_or_else(|| panic!("{template}: toYaml of {path}"));
                let value = value_at(values, path).expect("value");
                let yaml = serde_saphyr::to_string(value).expect("YAML");
                out.push(indented(yaml.trim_end(), indent.parse().expect("width")));
            }
            ".Files.Get" => {
                let file = rest.trim().trim_matches('"');
                out.push(read(&format!("{CHART}/{file}")).trim_end().to_string());
            }
            _ => panic!("{template}: the renderer does not know {action:?}"),
        }
    }
    assert!(blocks.is_empty(), "{template}: a block is not closed");
    out.join("\n")
}

/// Unrolls each whole-line `range $item := .Values.list` block (not nested) into one copy of
/// its body per element, with `{{ $item }}` replaced by the element and the root context `$`
/// of its includes written `.` again.
fn expand_ranges(text: &str, values: &Value) -> String {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let action = line
            .trim()
            .strip_prefix("{{")
            .and_then(|a| a.strip_suffix("}}"))
            .map(|a| a.trim_matches('-').trim());
        let Some((var, path)) = action
            .and_then(|a| a.strip_prefix("range "))
            .and_then(|a| a.split_once(" := .Values."))
        else {
            out.push(line.to_string());
            continue;
        };
        let mut body = Vec::new();
        let mut depth = 0;
        for line in lines.by_ref() {
            let word = actions(line).first().cloned().unwrap_or_default();
            let word = word.split_whitespace().next().unwrap_or_default();
            match word {
                "if" | "with" | "range" => depth += 1,
                "end" if depth == 0 => break,
                "end" => depth -= 1,
                _ => {}
            }
            body.push(line);
        }
        let items = value_at(values, path.trim())
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("range over {path}, which is not a list"));
        for item in items {
            let item = item.as_str().expect("a list of strings");
            for line in &body {
                out.push(
                    line.replace(&format!("{{{{ {var} }}}}"), item)
                        .replace("\" $ ", "\" . "),
                );
            }
        }
    }
    out.join("\n")
}

/// An object without what the chart adds on purpose (its labels).
fn without_labels(mut object: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                    meta.remove("labels");
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut object);
    object
}

#[test]
fn the_chart_with_default_values_makes_the_plain_manifests() {
    let values = chart_values();
    let plain = plain_objects();
    let mut rendered = Vec::new();
    for file in template_files() {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        if !name.ends_with(".yaml") {
            continue;
        }
        let text = render(&name, &values);
        rendered.extend(documents(&text, &format!("rendered {name}")));
    }
    let key = |o: &Value| {
        format!(
            "{} {}",
            o["kind"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let rendered_keys: BTreeSet<String> = rendered.iter().map(key).collect();
    let plain_keys: BTreeSet<String> = plain
        .iter()
        .filter(|o| {
            !["Namespace", "CustomResourceDefinition"].contains(&o["kind"].as_str().unwrap())
        })
        .map(key)
        .collect();
    assert_eq!(
        rendered_keys, plain_keys,
        "the chart and the plain manifests make different objects"
    );
    for object in &rendered {
        let k = key(object);
        let twin = plain.iter().find(|o| key(o) == k).expect("twin");
        assert_eq!(
            without_labels(object.clone()),
            without_labels(twin.clone()),
            "{k}: the chart (default values) and deploy/manifests differ"
        );
    }
    // The labels the chart adds keep the ones the plain manifests select by.
    let deployment = rendered.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let selector = deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (label, value) in selector {
        assert_eq!(pod_labels.get(label), Some(value));
    }
    // The ClusterRole rules come verbatim from files/clusterrole-rules.yaml, which holds the
    // lines between the RULES markers of the plain ClusterRole.
    let plain_role = read("deploy/manifests/03-clusterrole.yaml");
    let marked: Vec<&str> = plain_role
        .lines()
        .skip_while(|l| !l.contains("-- RULES BEGIN"))
        .skip(1)
        .take_while(|l| !l.contains("-- RULES END"))
        .collect();
    let file = read(&format!("{CHART}/files/clusterrole-rules.yaml"));
    let file_rules: Vec<&str> = file.lines().skip_while(|l| l.starts_with('#')).collect();
    assert!(!marked.is_empty());
    assert_eq!(
        file_rules, marked,
        "files/clusterrole-rules.yaml must be the lines between the RULES markers of \
         deploy/manifests/03-clusterrole.yaml"
    );
    assert!(
        read(&format!("{CHART}/templates/clusterrole.yaml"))
            .contains(r#"{{ .Files.Get "files/clusterrole-rules.yaml" }}"#)
    );
}

#[test]
fn the_chart_without_self_signed_certificates_mounts_the_secret_and_drops_the_patch_right() {
    let mut values = chart_values();
    values["webhook"]["certificate"]["selfSigned"] = Value::Bool(false);
    values["webhook"]["certificate"]["secretName"] = Value::from("quorate-webhook-tls");
    values["webhook"]["certificate"]["caBundle"] = Value::from("Q0EK");
    values["replicas"] = Value::from(2);
    let role = documents(&render("clusterrole.yaml", &values), "ClusterRole");
    assert!(
        !rules_of(&role[0]).iter().any(|r| r
            .resources
            .iter()
            .flatten()
            .any(|r| r.contains("webhook"))),
        "no right on webhook configurations without the self-signed mode"
    );
    let deployment = documents(&render("deployment.yaml", &values), "Deployment").remove(0);
    let args = container_args(&deployment);
    let parsed = operator_args(&args[1..]);
    assert_eq!(parsed.webhook_self_signed_service, None);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let volume = &deployment["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(volume["secret"]["secretName"], "quorate-webhook-tls");
    let config = documents(
        &render("validatingwebhookconfiguration.yaml", &values),
        "webhooks",
    )
    .remove(0);
    for webhook in config["webhooks"].as_array().unwrap() {
        assert_eq!(webhook["clientConfig"]["caBundle"], "Q0EK");
    }
    let mut values = chart_values();
    values["webhook"]["enabled"] = Value::Bool(false);
    values["autoReconcile"] = Value::Bool(true);
    values["extraArgs"] = serde_json::json!([]);
    let deployment = documents(&render("deployment.yaml", &values), "Deployment").remove(0);
    let args = container_args(&deployment);
    let parsed = operator_args(&args[1..]);
    assert!(parsed.disable_webhooks && parsed.enable_etcd_spec_auto_reconcile);
    assert!(
        render("validatingwebhookconfiguration.yaml", &values)
            .trim()
            .is_empty()
    );
}

// ---- against the API server ----------------------------------------------------------------

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Lease::default()
    }
}

fn renew_patch() -> Patch<Value> {
    Patch::Merge(serde_json::json!({"spec": {"holderIdentity": "quorate-operator-0"}}))
}

fn is_forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == 403)
}

#[tokio::test]
async fn every_manifest_applies_and_the_leader_lease_is_allowed_only_at_home() {
    let Some(server) = KubeApiServer::start_or_skip(
        "every_manifest_applies_and_the_leader_lease_is_allowed_only_at_home",
    )
    .await
    else {
        return;
    };
    let admin = server.client().await.expect("admin client");
    let operator = server
        .client_as(OPERATOR_USER, &[])
        .await
        .expect("impersonating client");
    // The leader-election Role alone: the operator's own Lease at home, nothing elsewhere.
    kubectl_apply(
        &server,
        &[
            manifest("00-namespace.yaml"),
            manifest("02-serviceaccount.yaml"),
            manifest("05-leader-election-rbac.yaml"),
        ],
    );
    let elsewhere = server
        .create_namespace(&admin, "elsewhere")
        .await
        .expect("namespace");
    let home: Api<Lease> = Api::namespaced(operator.clone(), NAMESPACE);
    home.create(&PostParams::default(), &lease(OPERATOR))
        .await
        .expect("the operator creates its leader lease at home");
    home.get(OPERATOR).await.expect("and reads it");
    home.patch(OPERATOR, &PatchParams::default(), &renew_patch())
        .await
        .expect("and renews it");
    Api::<Lease>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &lease("someone-else"))
        .await
        .expect("admin creates another lease");
    assert!(
        is_forbidden(
            home.patch("someone-else", &PatchParams::default(), &renew_patch())
                .await
        ),
        "only its own lease may be renewed"
    );
    let away: Api<Lease> = Api::namespaced(operator.clone(), &elsewhere);
    assert!(
        is_forbidden(away.create(&PostParams::default(), &lease(OPERATOR)).await),
        "creating a lease in another namespace must be refused"
    );
    Api::<Lease>::namespaced(admin.clone(), &elsewhere)
        .create(&PostParams::default(), &lease(OPERATOR))
        .await
        .expect("admin creates a lease elsewhere");
    assert!(
        is_forbidden(
            away.patch(OPERATOR, &PatchParams::default(), &renew_patch())
                .await
        ),
        "updating a lease in another namespace must be refused"
    );

    // Every manifest, in order, as a user runs it; twice, as upgrades do.
    let dir = [repo("deploy/manifests")];
    let first = kubectl_apply(&server, &dir);
    let second = kubectl_apply(&server, &dir);
    let objects = plain_objects();
    assert_eq!(
        first.lines().count(),
        objects.len(),
        "one line per object:\n{first}"
    );
    assert_eq!(second.lines().count(), objects.len(), "{second}");
    let output = server
        .kubectl()
        .args(["get", "-o", "name", "-f"])
        .arg(&dir[0])
        .output()
        .expect("kubectl get");
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{listed}");
    assert_eq!(listed.lines().count(), objects.len(), "{listed}");

    // The self-signed mode: the operator may put its CA into its webhook configuration, and
    // into no other.
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(operator.clone());
    let current = configs.get(OPERATOR).await.expect("read the configuration");
    let mut webhooks = current.webhooks.unwrap_or_default();
    for webhook in &mut webhooks {
        assert!(webhook.client_config.ca_bundle.is_none());
        webhook.client_config.ca_bundle = Some(k8s_openapi::ByteString(b"CA".to_vec()));
    }
    configs
        .patch(
            OPERATOR,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "webhooks": webhooks })),
        )
        .await
        .expect("publish the CA");
    // A later apply keeps the CA the operator published.
    kubectl_apply(
        &server,
        &[manifest("07-validatingwebhookconfiguration.yaml")],
    );
    let kept = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .get(OPERATOR)
        .await
        .expect("configuration");
    for webhook in kept.webhooks.unwrap_or_default() {
        assert_eq!(
            webhook.client_config.ca_bundle,
            Some(k8s_openapi::ByteString(b"CA".to_vec())),
            "kubectl apply must leave the caBundle alone"
        );
    }
    let mut other = ValidatingWebhookConfiguration::default();
    other.metadata.name = Some("someone-elses".to_string());
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &other)
        .await
        .expect("admin creates another configuration");
    assert!(is_forbidden(configs.get("someone-elses").await));
}

/// `--install-crds` as the operator's ServiceAccount on a server without the CRDs: the Etcd CRD
/// carries druid's CEL rules exactly when the server evaluates them (1.29+), applying twice is
/// harmless, and an `Etcd` can be created as soon as it returns (Established).
#[tokio::test]
async fn the_operator_installs_the_crds_that_fit_its_server() {
    let test = "the_operator_installs_the_crds_that_fit_its_server";
    let Some((server, admin, operator)) = server_with_operator_rbac(test, &[]).await else {
        return;
    };
    let version = admin.apiserver_version().await.expect("server version");
    let expects_cel = quorate_api::crd::server_supports_cel(&version.major, &version.minor)
        .expect("the server reports MAJOR.MINOR");
    for _ in 0..2 {
        quorate_operator::install_crds(&operator)
            .await
            .expect("the operator's ClusterRole lets it install the CRDs");
    }
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let etcd_crd = crds
        .get("etcds.druid.gardener.cloud")
        .await
        .expect("Etcd CRD");
    let schema = serde_json::to_string(&etcd_crd.spec).expect("serializes");
    assert_eq!(
        schema.contains("x-kubernetes-validations"),
        expects_cel,
        "CEL rules on a {}.{} server",
        version.major,
        version.minor
    );
    for name in [
        "etcdopstasks.druid.gardener.cloud",
        "etcdcopybackupstasks.druid.gardener.cloud",
    ] {
        crds.get(name).await.expect(name);
    }
    let namespace = server
        .create_namespace(&admin, "crds")
        .await
        .expect("namespace");
    let mut etcd: Etcd = serde_saphyr::from_str(CLUSTER).expect("example");
    etcd.metadata.namespace = Some(namespace.clone());
    Api::<Etcd>::namespaced(admin, &namespace)
        .create(&PostParams::default(), &etcd)
        .await
        .expect("an Etcd is served right after install_crds returns");
}

#[tokio::test]
async fn the_clusterrole_is_enough_for_the_controller() {
    let test = "the_clusterrole_is_enough_for_the_controller";
    let more = ["09-etcd-namespace-secrets.yaml"];
    let Some((server, admin, operator)) = server_with_operator_rbac(test, &more).await else {
        return;
    };
    install_etcd_crd(&admin).await;
    let namespace = server
        .create_namespace(&admin, "etcd")
        .await
        .expect("namespace");
    // The controller as `quorate operator` runs it: all namespaces, as the ServiceAccount.
    let scope = Scope {
        namespace: None,
        identity: "quorate-operator-0".to_string(),
        shard: quorate_core::shard::Shard::ALL,
    };
    let period = Duration::from_millis(500);
    let controller = Operator::run(&operator, scope, false, period, Metrics::default());
    let mut etcd: Etcd = serde_saphyr::from_str(CLUSTER).expect("example");
    etcd.metadata.namespace = Some(namespace.clone());
    let name = etcd.metadata.name.clone().expect("name");
    let etcds: Api<Etcd> = Api::namespaced(admin.clone(), &namespace);
    etcds
        .create(&PostParams::default(), &etcd)
        .await
        .expect("create the Etcd");
    // No Secrets grant in this namespace yet: the Etcd is refused with a status that says
    // which binding to make, and nothing is created.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(operator.clone(), &namespace);
    assert!(is_forbidden(secrets.get("anything").await));
    let refusal = eventually("the missing grant reported", WAIT, || async {
        let status = etcds.get(&name).await.ok()?.status?;
        status
            .last_errors
            .iter()
            .find(|e| {
                e.description
                    .contains("--clusterrole=quorate-operator-secrets")
            })
            .map(|e| e.description.clone())
    })
    .await;
    assert!(
        refusal.contains(&format!(
            "rolebinding quorate-operator-secrets -n {namespace}"
        )),
        "{refusal}"
    );
    assert!(
        Api::<StatefulSet>::namespaced(admin.clone(), &namespace)
            .get_opt(&name)
            .await
            .expect("read")
            .is_none(),
        "nothing is built in a namespace without the grant"
    );
    // The grant as the manifest's comment tells an admin to make it.
    let mut grant: RoleBinding =
        serde_json::from_value(find(&plain_objects(), "RoleBinding", SECRETS_ROLE).clone())
            .expect("RoleBinding");
    grant.metadata.namespace = Some(namespace.clone());
    Api::<RoleBinding>::namespaced(admin.clone(), &namespace)
        .create(&PostParams::default(), &grant)
        .await
        .expect("grant Secrets in the namespace");
    // On a timeout, the last status says what was refused (lastErrors name verb and object).
    let mut last_status = None;
    let deadline = Instant::now() + WAIT;
    let reconciled = loop {
        if let Ok(etcd) = etcds.get(&name).await {
            if etcd.status.as_ref().and_then(|s| s.observed_generation) == Some(1) {
                break etcd;
            }
            last_status = etcd.status.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the Etcd was not reconciled (observedGeneration 1) by the operator's \
             ServiceAccount; last status: {:#?}",
            last_status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status = reconciled.status.expect("status");
    assert!(status.last_errors.is_empty(), "{:?}", status.last_errors);
    assert!(
        reconciled
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == quorate_api::annotations::ETCD_FINALIZER)
    );
    let role_name = format!("druid.gardener.cloud:etcd:{name}");
    Api::<StatefulSet>::namespaced(admin.clone(), &namespace)
        .get(&name)
        .await
        .expect("the StatefulSet exists");
    Api::<Role>::namespaced(admin.clone(), &namespace)
        .get(&role_name)
        .await
        .expect("the Role exists (no RBAC escalation refused it)");
    Api::<RoleBinding>::namespaced(admin.clone(), &namespace)
        .get(&role_name)
        .await
        .expect("the RoleBinding exists");
    secrets
        .get(&quorate_api::names::agent_token_secret_name(&name))
        .await
        .expect("with the grant, the operator reads the Secrets of this namespace");
    assert!(
        is_forbidden(
            Api::<k8s_openapi::api::core::v1::Secret>::namespaced(operator.clone(), "kube-system")
                .get("anything")
                .await
        ),
        "and still none elsewhere"
    );

    etcds
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the Etcd");
    eventually("the finalizer removed and the Etcd gone", WAIT, || async {
        match etcds.get_opt(&name).await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(
        Api::<StatefulSet>::namespaced(admin.clone(), &namespace)
            .get_opt(&name)
            .await
            .expect("read")
            .is_none(),
        "the StatefulSet was deleted with the Etcd"
    );
    drop(controller);
}

/// The opt-in cluster-wide Secrets variant binds the same ClusterRole as the namespaced
/// default (get and create on Secrets, nothing more) to the operator's ServiceAccount, with a
/// ClusterRoleBinding; the chart's `clusterWideSecrets` is off by default.
#[test]
fn the_cluster_wide_secrets_variant_grants_only_the_namespaced_verbs_everywhere() {
    let plain = plain_objects();
    let role = find(&plain, "ClusterRole", "quorate-operator-secrets");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]}])
    );
    let account = find(&plain, "ServiceAccount", "quorate-operator");
    let variant = documents(
        &read("deploy/manifests-variants/cluster-wide-secrets.yaml"),
        "the cluster-wide Secrets variant",
    );
    assert_eq!(variant.len(), 1);
    let binding = &variant[0];
    assert_eq!(binding["kind"], "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }])
    );
    assert_eq!(chart_values()["clusterWideSecrets"], false);
}

/// The chart's `values.schema.json` (what `helm lint`/`install` check values against) describes
/// exactly the keys of `values.yaml`, with the same JSON types, so a documented value is never
/// refused and a misspelt one is.
#[test]
fn the_values_schema_describes_exactly_the_default_values() {
    fn walk(value: &Value, schema: &Value, path: &str, problems: &mut Vec<String>) {
        let type_ok = match (schema["type"].as_str(), value) {
            (Some("object"), Value::Object(_))
            | (Some("array"), Value::Array(_))
            | (Some("string"), Value::String(_))
            | (Some("boolean"), Value::Bool(_)) => true,
            (Some("integer"), Value::Number(n)) => n.is_i64(),
            (None, _) => true,
            _ => false,
        };
        if !type_ok {
            problems.push(format!("{path}: {value} is not of type {}", schema["type"]));
        }
        if let Some(enumeration) = schema["enum"].as_array()
            && !enumeration.contains(value)
        {
            problems.push(format!("{path}: {value} is not one of {enumeration:?}"));
        }
        let (Value::Object(map), Some(properties)) = (value, schema["properties"].as_object())
        else {
            return;
        };
        for (key, v) in map {
            match properties.get(key) {
                Some(s) => walk(v, s, &format!("{path}.{key}"), problems),
                None => problems.push(format!("{path}.{key}: not in the schema")),
            }
        }
        for key in properties.keys() {
            if !map.contains_key(key) {
                problems.push(format!(
                    "{path}.{key}: in the schema but not in values.yaml"
                ));
            }
        }
    }
    let values: Value =
        serde_saphyr::from_str(&read(&format!("{CHART}/values.yaml"))).expect("values");
    let schema: Value =
        serde_json::from_str(&read(&format!("{CHART}/values.schema.json"))).expect("schema");
    assert_eq!(schema["additionalProperties"], false);
    let mut problems = Vec::new();
    walk(&values, &schema, "", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}
