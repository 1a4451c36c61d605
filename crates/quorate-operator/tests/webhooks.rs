//! Both validating webhooks against the real kube-apiserver v1.37.2: the webhook server runs in
//! the test process on a free loopback port with a generated certificate, and a
//! ValidatingWebhookConfiguration points the API server at it by URL, scoped to the test's own
//! namespace so tests sharing the server do not meet.
//!
//! The `Etcd` webhook must refuse what local mode refuses, with the lines `quorate up` prints;
//! component protection must refuse an admin's change to a managed ConfigMap and let the
//! operator, the etcd pods' lease renewals and anyone after the disable annotation through.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use quorate_api::annotations::DISABLE_ETCD_COMPONENT_PROTECTION;
use quorate_api::names::default_labels;
use quorate_operator::service_account_username;
use quorate_testkit::KubeApiServer;
use serde_json::json;

mod support;

use support::webhooks::{EXAMPLE, OPERATOR_USER, Webhooks, example, manifest};
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
