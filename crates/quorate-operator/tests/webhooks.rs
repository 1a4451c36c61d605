//! Both validating webhooks against the real kube-apiserver v1.20.2: the webhook server runs in
//! the test process on a free loopback port with a generated certificate, and a
//! ValidatingWebhookConfiguration points the API server at it by URL, scoped to the test's own
//! namespace so tests sharing the server do not meet.
//!
//! The `Etcd` webhook must refuse what local mode refuses, with the lines `quorate up` prints;
//! component protection must refuse an admin's change to a managed ConfigMap and let the
//! operator, the etcd pods' lease renewals and anyone after the disable annotation through.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_api::annotations::DISABLE_ETCD_COMPONENT_PROTECTION;
use quorate_api::names::{LABEL_MANAGED_BY, MANAGED_BY_VALUE, default_labels};
use quorate_operator::{
    COMPONENT_PROTECTION_PATH, ETCD_VALIDATION_PATH, TASK_VALIDATION_PATH, WebhookConfig,
    WebhookError, generate_webhook_certs, serve_webhooks_on, service_account_username,
};
use quorate_testkit::KubeApiServer;
use quorate_testkit::etcd_crd::install_etcd_crd;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const EXAMPLE: &str = include_str!("../../../examples/etcd-cluster.yaml");
const OPERATOR_USER: &str = "system:serviceaccount:quorate-system:quorate-operator";
/// Label put on the test's namespace; both webhooks select namespaces by it.
const SCOPE_LABEL: &str = "quorate.test/webhooks";

/// The webhook server of one test, registered for that test's namespace.
struct Webhooks {
    client: Client,
    namespace: String,
    configuration: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), WebhookError>>,
    _cert_dir: tempfile::TempDir,
}

impl Webhooks {
    /// Starts the server, registers both webhooks for a fresh namespace and waits until the API
    /// server calls them.
    async fn start(server: &KubeApiServer, prefix: &str) -> Webhooks {
        let client = server.client().await.expect("kube client");
        install_etcd_crd(&client).await;
        quorate_testkit::install_task_crds(&client).await;
        let namespace = server
            .create_namespace(&client, prefix)
            .await
            .expect("create namespace");
        // v1.20 does not label namespaces with their name yet; do it for the selector.
        Api::<Namespace>::all(client.clone())
            .patch(
                &namespace,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": { SCOPE_LABEL: &namespace } } })),
            )
            .await
            .expect("label the namespace");

        let certs = generate_webhook_certs(&["127.0.0.1".to_string()], jiff::Timestamp::now())
            .expect("certificates");
        let cert_dir = tempfile::tempdir().expect("tempdir");
        certs.write_to(cert_dir.path()).expect("write certificates");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        let config = WebhookConfig::new(OPERATOR_USER);
        let (stop, stopped) = oneshot::channel::<()>();
        let dir = cert_dir.path().to_path_buf();
        let lookup_client = client.clone();
        let task = tokio::spawn(async move {
            serve_webhooks_on(listener, &dir, config, lookup_client, async {
                let _ = stopped.await;
            })
            .await
        });

        let configuration = format!("quorate-test-{namespace}");
        let webhook = |name: &str, path: &str, rules: Vec<RuleWithOperations>| ValidatingWebhook {
            name: name.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config: WebhookClientConfig {
                url: Some(format!("https://127.0.0.1:{port}{path}")),
                ca_bundle: Some(ByteString(certs.ca_pem.clone().into_bytes())),
                service: None,
            },
            failure_policy: Some("Fail".to_string()),
            side_effects: "None".to_string(),
            timeout_seconds: Some(10),
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    SCOPE_LABEL.to_string(),
                    namespace.clone(),
                )])),
                match_expressions: None,
            }),
            rules: Some(rules),
            ..ValidatingWebhook::default()
        };
        let rule = |groups: &[&str], ops: &[&str], resources: &[&str]| RuleWithOperations {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            api_versions: Some(vec!["*".to_string()]),
            operations: Some(ops.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            scope: Some("Namespaced".to_string()),
        };
        let updates = ["UPDATE", "DELETE"];
        let mut components = webhook(
            "components.validate.quorate.io",
            COMPONENT_PROTECTION_PATH,
            vec![
                rule(
                    &[""],
                    &updates,
                    &["serviceaccounts", "services", "configmaps"],
                ),
                rule(
                    &["rbac.authorization.k8s.io"],
                    &updates,
                    &["roles", "rolebindings"],
                ),
                rule(&["coordination.k8s.io"], &updates, &["leases"]),
                rule(&["policy"], &updates, &["poddisruptionbudgets"]),
                rule(&["apps"], &updates, &["statefulsets"]),
            ],
        );
        components.object_selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                LABEL_MANAGED_BY.to_string(),
                MANAGED_BY_VALUE.to_string(),
            )])),
            match_expressions: None,
        });
        let registration = ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(configuration.clone()),
                ..ObjectMeta::default()
            },
            webhooks: Some(vec![
                webhook(
                    "etcds.validate.quorate.io",
                    ETCD_VALIDATION_PATH,
                    vec![rule(
                        &["druid.gardener.cloud"],
                        &["CREATE", "UPDATE"],
                        &["etcds"],
                    )],
                ),
                webhook(
                    "tasks.validate.quorate.io",
                    TASK_VALIDATION_PATH,
                    vec![rule(
                        &["druid.gardener.cloud"],
                        &["CREATE", "UPDATE"],
                        &["etcdopstasks", "etcdcopybackupstasks"],
                    )],
                ),
                components,
            ]),
        };
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &registration)
            .await
            .expect("register the webhooks");

        let webhooks = Webhooks {
            client,
            namespace,
            configuration,
            stop: Some(stop),
            task,
            _cert_dir: cert_dir,
        };
        webhooks.wait_until_called().await;
        webhooks
    }

    /// The API server picks up webhook configurations from an informer; dry-run an invalid
    /// `Etcd` until the webhook refuses it.
    async fn wait_until_called(&self) {
        let mut invalid = example(&self.namespace);
        invalid.spec.backup.garbage_collection_period = Some("1s".to_string());
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = self.etcds().create(&dry_run, &invalid).await;
            match answer {
                Err(kube::Error::Api(s)) if s.message.contains("denied the request") => return,
                other => assert!(
                    Instant::now() < deadline,
                    "the webhook is not called after 30s: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn etcds(&self) -> Api<Etcd> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Unregisters the webhooks and stops the server.
    async fn stop(mut self) {
        Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .delete(&self.configuration, &DeleteParams::default())
            .await
            .expect("unregister the webhooks");
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = tokio::time::timeout(Duration::from_secs(20), &mut self.task)
            .await
            .expect("the server stops")
            .expect("the server task did not panic");
        served.expect("the server ran without error");
    }
}

/// `examples/etcd-cluster.yaml`, read the way `quorate up -f` reads it, in `namespace`.
fn example(namespace: &str) -> Etcd {
    manifest(EXAMPLE, namespace)
}

fn manifest(text: &str, namespace: &str) -> Etcd {
    let mut etcd = quorate_api::parse_etcd_manifest(text, "etcd.yaml").expect("manifest parses");
    etcd.metadata.namespace = Some(namespace.to_string());
    etcd
}

/// The API server's message for a refused request.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected the API server to refuse, got {other:?}"),
    }
}

#[tokio::test]
async fn etcd_webhook_refuses_what_local_mode_refuses_with_the_same_lines() {
    let Some(server) =
        KubeApiServer::shared_or_skip("etcd_webhook_refuses_what_local_mode_refuses").await
    else {
        return;
    };
    let webhooks = Webhooks::start(server, "etcd-webhook").await;
    let etcds = webhooks.etcds();

    // Two problems the CRD schema lets through (the cron and the period ordering are only
    // checked by quorate_api::validate), as a person would write them into the manifest.
    let text = EXAMPLE
        .replace(
            "garbageCollectionPeriod: 1m",
            "garbageCollectionPeriod: 10s",
        )
        .replace(
            "fullSnapshotSchedule: \"0 */1 * * *\"",
            "fullSnapshotSchedule: \"every hour\"",
        );
    let invalid = manifest(&text, &webhooks.namespace);
    // What `quorate up -f` prints under "the Etcd manifest is invalid; nothing was changed:".
    let local = quorate_api::validate(&invalid)
        .expect_err("local mode refuses it")
        .to_string();
    assert_eq!(local.lines().count(), 2, "{local}");
    let status = refusal(etcds.create(&PostParams::default(), &invalid).await);
    eprintln!("refused create: {}", status.message);
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains(&format!(
            "Etcd {}/etcd-main is invalid:\n{local}",
            webhooks.namespace
        )),
        "the API server's message does not carry local mode's lines:\n{}\n---\n{local}",
        status.message
    );

    // The example itself is admitted.
    let valid = example(&webhooks.namespace);
    etcds
        .create(&PostParams::default(), &valid)
        .await
        .expect("a valid Etcd is admitted");

    // While a scale operation is unfinished, a replicas change is refused as `quorate apply`
    // refuses it; once it finished, shrinking, growing and 0 are all let through.
    let scaling = json!({ "status": { "conditions": [{
        "type": "ScaleOperationComplete", "status": "False", "reason": "ScalingOut",
        "message": "etcd-main-2 joins", "lastTransitionTime": "2026-01-01T00:00:00Z",
        "lastUpdateTime": "2026-01-01T00:00:00Z",
    }]}});
    let patched = etcds
        .patch_status(
            "etcd-main",
            &PatchParams::default(),
            &Patch::Merge(&scaling),
        )
        .await
        .expect("set the status");
    let mut fewer = patched.clone();
    fewer.spec.replicas = 1;
    let local = quorate_api::validate_update(&patched, &fewer)
        .expect_err("local mode refuses it")
        .to_string();
    let status = refusal(
        etcds
            .patch(
                "etcd-main",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 1 } })),
            )
            .await,
    );
    eprintln!("refused update: {}", status.message);
    assert!(
        status.message.contains(&local),
        "{}\n---\n{local}",
        status.message
    );
    assert!(
        local.starts_with("spec.replicas: cannot go from 3 to 1 while the scale operation"),
        "{local}"
    );
    let done = json!({ "status": { "conditions": [{
        "type": "ScaleOperationComplete", "status": "True", "reason": "Complete",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
        "lastUpdateTime": "2026-01-01T00:00:00Z",
    }]}});
    etcds
        .patch_status("etcd-main", &PatchParams::default(), &Patch::Merge(&done))
        .await
        .expect("set the status");
    for replicas in [1, 5, 0] {
        etcds
            .patch(
                "etcd-main",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
            )
            .await
            .unwrap_or_else(|e| panic!("replicas {replicas} is refused: {e}"));
    }
    webhooks.stop().await;
}

#[tokio::test]
async fn task_webhook_refuses_druids_cel_rules_and_spec_changes_naming_the_field() {
    let Some(server) = KubeApiServer::shared_or_skip("task_webhook").await else {
        return;
    };
    let hooks = Webhooks::start(server, "task-webhook").await;
    let ns = hooks.namespace.clone();
    let tasks: Api<quorate_api::EtcdOpsTask> = Api::namespaced(hooks.client.clone(), &ns);
    let task = |type_: &str, is_final: bool| -> quorate_api::EtcdOpsTask {
        serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "EtcdOpsTask",
            "metadata": {"name": "snap", "namespace": ns},
            "spec": {"etcdName": "main", "config": {"onDemandSnapshot": {"type": type_, "isFinal": is_final}}},
        }))
        .unwrap()
    };
    let refused = refusal(
        tasks
            .create(&PostParams::default(), &task("delta", true))
            .await,
    );
    assert!(
        refused
            .message
            .contains("spec.config.onDemandSnapshot.isFinal"),
        "{}",
        refused.message
    );
    tasks
        .create(&PostParams::default(), &task("full", false))
        .await
        .expect("a valid task is admitted");
    // The API server filled druid's defaults from the schema.
    let stored = tasks.get("snap").await.unwrap();
    assert_eq!(stored.spec.ttl_seconds_after_finished, Some(3600));
    let snapshot = stored.spec.config.on_demand_snapshot.clone().unwrap();
    assert_eq!(snapshot.timeout_seconds_full, Some(900));
    let change = tasks
        .patch(
            "snap",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"onDemandSnapshot": {"type": "delta"}}}})),
        )
        .await;
    assert!(refusal(change).message.contains("config is immutable"));
    tasks
        .patch(
            "snap",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["druid.gardener.cloud/etcd-ops-task"]}}),
            ),
        )
        .await
        .expect("a finalizer change is not a spec change");

    let copies: Api<quorate_api::EtcdCopyBackupsTask> = Api::namespaced(hooks.client.clone(), &ns);
    let onto_itself: quorate_api::EtcdCopyBackupsTask = serde_json::from_value(json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "EtcdCopyBackupsTask",
        "metadata": {"name": "copy", "namespace": ns},
        "spec": {
            "sourceStore": {"provider": "aws", "container": "b", "prefix": "p"},
            "targetStore": {"provider": "aws", "container": "b", "prefix": "p"},
        },
    }))
    .unwrap();
    let refused = refusal(copies.create(&PostParams::default(), &onto_itself).await);
    assert!(
        refused.message.contains("spec.targetStore"),
        "{}",
        refused.message
    );
    tasks
        .patch(
            "snap",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    hooks.stop().await;
}

#[tokio::test]
async fn component_protection_refuses_hand_edits_until_the_etcd_allows_them() {
    let Some(server) =
        KubeApiServer::shared_or_skip("component_protection_refuses_hand_edits").await
    else {
        return;
    };
    let webhooks = Webhooks::start(server, "protection").await;
    let ns = webhooks.namespace.clone();
    let admin = webhooks.client.clone();
    webhooks
        .etcds()
        .create(&PostParams::default(), &example(&ns))
        .await
        .expect("create the Etcd");

    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some("etcd-main-config".to_string()),
            labels: Some(default_labels("etcd-main")),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..ConfigMap::default()
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    config_maps
        .create(&PostParams::default(), &config_map)
        .await
        .expect("CREATE is not guarded");
    let edit = |value: &str| Patch::Merge(json!({ "data": { "k": value } }));

    // The admin may neither change nor delete it.
    let status = refusal(
        config_maps
            .patch(
                "etcd-main-config",
                &PatchParams::default(),
                &edit("by hand"),
            )
            .await,
    );
    eprintln!("refused edit: {}", status.message);
    assert_eq!(status.code, 403, "{status:?}");
    for needle in [
        format!("ConfigMap {ns}/etcd-main-config"),
        format!("Etcd {ns}/etcd-main"),
        format!("user \"{}\"", quorate_testkit::kube_apiserver::ADMIN_USER),
        DISABLE_ETCD_COMPONENT_PROTECTION.to_string(),
    ] {
        assert!(
            status.message.contains(&needle),
            "{needle} missing: {}",
            status.message
        );
    }
    let status = refusal(
        config_maps
            .delete("etcd-main-config", &DeleteParams::default())
            .await,
    );
    assert!(
        status.message.contains("may not delete it"),
        "{}",
        status.message
    );
    // Dropping the labels in the same request does not get around it.
    refusal(
        config_maps
            .patch(
                "etcd-main-config",
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": null } })),
            )
            .await,
    );

    // The operator may.
    let operator: Api<ConfigMap> =
        Api::namespaced(client_as_masters(server, OPERATOR_USER).await, &ns);
    operator
        .patch(
            "etcd-main-config",
            &PatchParams::default(),
            &edit("by the operator"),
        )
        .await
        .expect("the operator changes its ConfigMap");

    // The etcd pods may renew their member lease, but not delete it.
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("etcd-main-0".to_string()),
            labels: Some(default_labels("etcd-main")),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the member lease");
    let etcd_pods: Api<Lease> = Api::namespaced(
        client_as_masters(server, &service_account_username(&ns, "etcd-main")).await,
        &ns,
    );
    etcd_pods
        .patch(
            "etcd-main-0",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "holderIdentity": "8e9e05c52164694d:cdf3d6ad6fa3e3f9:Leader" } }),
            ),
        )
        .await
        .expect("the etcd pods renew their lease");
    refusal(
        etcd_pods
            .delete("etcd-main-0", &DeleteParams::default())
            .await,
    );

    // A ConfigMap labelled for an Etcd that does not exist is not protected.
    let mut orphan = config_map.clone();
    orphan.metadata.name = Some("etcd-gone-config".to_string());
    orphan.metadata.labels = Some(default_labels("etcd-gone"));
    config_maps
        .create(&PostParams::default(), &orphan)
        .await
        .expect("create the orphan");
    config_maps
        .patch(
            "etcd-gone-config",
            &PatchParams::default(),
            &edit("by hand"),
        )
        .await
        .expect("nothing protects a component of a missing Etcd");

    // Once the Etcd says so, the admin may change and delete it (the annotation is a
    // metadata-only change, which the Etcd webhook lets through).
    webhooks
        .etcds()
        .patch(
            "etcd-main",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                DISABLE_ETCD_COMPONENT_PROTECTION: "true"
            } } })),
        )
        .await
        .expect("annotate the Etcd");
    config_maps
        .patch(
            "etcd-main-config",
            &PatchParams::default(),
            &edit("by hand"),
        )
        .await
        .expect("the admin changes it once protection is off");
    config_maps
        .delete("etcd-main-config", &DeleteParams::default())
        .await
        .expect("the admin deletes it once protection is off");
    webhooks.stop().await;
}

/// `user`, impersonated with the `system:masters` group, as the tests' admin token allows.
async fn client_as_masters(server: &KubeApiServer, user: &str) -> Client {
    server
        .client_as(user, &["system:masters"])
        .await
        .expect("impersonating client")
}
