//! The webhook server of one test against a real kube-apiserver: it runs in the test process
//! on a free loopback port with a generated certificate, and a ValidatingWebhookConfiguration
//! points the API server at it by URL, scoped to the test's own namespace so tests sharing the
//! server do not meet.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_api::names::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use quorate_operator::{
    COMPONENT_PROTECTION_PATH, ETCD_VALIDATION_PATH, TASK_VALIDATION_PATH, WebhookConfig,
    WebhookError, generate_webhook_certs, serve_webhooks_on,
};
use quorate_testkit::KubeApiServer;
use quorate_testkit::etcd_crd::install_etcd_crd;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const EXAMPLE: &str = include_str!("../../../../examples/etcd-cluster.yaml");
/// The operator's ServiceAccount user, which component protection lets through.
pub use super::operator::OPERATOR_USER;
/// Label put on the test's namespace; both webhooks select namespaces by it.
pub const SCOPE_LABEL: &str = "quorate.test/webhooks";

/// The webhook server of one test, registered for that test's namespace.
pub struct Webhooks {
    pub client: Client,
    pub namespace: String,
    configuration: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), WebhookError>>,
    _cert_dir: tempfile::TempDir,
}

impl Webhooks {
    /// Starts the server, registers both webhooks for a fresh namespace and waits until the API
    /// server calls them.
    pub async fn start(server: &KubeApiServer, prefix: &str) -> Webhooks {
        let client = server.client().await.expect("kube client");
        install_etcd_crd(&client).await;
        quorate_testkit::install_task_crds(&client).await;
        let namespace = server
            .create_namespace(&client, prefix)
            .await
            .expect("create namespace");
        // The webhooks' namespace selector matches this label: only this test's namespace
        // reaches this test's webhook server.
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

    /// The API server picks up webhook configurations from an informer; dry-run an `Etcd` only
    /// the webhook refuses (a store without a provider: the CRD, with or without CEL rules,
    /// allows it, as druid's does) until it is refused.
    async fn wait_until_called(&self) {
        let mut invalid = example(&self.namespace);
        if let Some(store) = invalid.spec.backup.store.as_mut() {
            store.provider = None;
        }
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

    pub fn etcds(&self) -> Api<Etcd> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Unregisters the webhooks and stops the server.
    pub async fn stop(mut self) {
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
pub fn example(namespace: &str) -> Etcd {
    manifest(EXAMPLE, namespace)
}

pub fn manifest(text: &str, namespace: &str) -> Etcd {
    let mut etcd = quorate_api::parse_etcd_manifest(text, "etcd.yaml").expect("manifest parses");
    etcd.metadata.namespace = Some(namespace.to_string());
    etcd
}
