//! Scenario 5: the reconcile controls a user of etcd-druid relies on, with the operator and its
//! webhooks running in the cluster (druid's default: no spec auto-reconcile).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{Api, ListParams};
use quorate_api::Etcd;
use quorate_api::annotations::{
    DISABLE_ETCD_COMPONENT_PROTECTION, GARDENER_OPERATION, SUSPEND_ETCD_SPEC_RECONCILE,
};
use quorate_e2e::members::{uid_of, wait_fully_ready};
use quorate_e2e::{E2eEnv, Scenario, wait_for};

use crate::READY_TIMEOUT;

/// How long the test watches for a change that must not happen.
const NOTHING_HAPPENS_FOR: Duration = Duration::from_secs(15);

/// The CPU request of the StatefulSet's etcd container.
async fn cpu_request(statefulsets: &Api<StatefulSet>, name: &str) -> String {
    let sts = statefulsets.get(name).await.expect("the StatefulSet");
    sts.spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.into_iter().find(|c| c.name == "etcd"))
        .and_then(|c| c.resources)
        .and_then(|r| r.requests)
        .and_then(|r| r.get("cpu").map(|q| q.0.clone()))
        .unwrap_or_default()
}

/// Without auto-reconcile a spec change waits for the reconcile annotation; the suspend
/// annotation holds it back even then (with a Warning event) and the annotation is removed once
/// the change is applied; a managed Service cannot be deleted until component protection is
/// turned off on the `Etcd`, and the next reconcile brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_reconcile_annotation_suspend_and_component_protection() {
    let Some(env) =
        E2eEnv::from_env_or_skip("s5_reconcile_annotation_suspend_and_component_protection")
    else {
        return;
    };
    let mut s = Scenario::start(&env, "s5-controls").await;
    let ns = s.namespace.clone();
    let name = "etcd-ctl";
    s.create_ready_etcd(name, 1, false).await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(s.cluster.client.clone(), &ns);
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    assert_eq!(cpu_request(&statefulsets, name).await, "50m");
    let cluster = s.cluster.clone();
    let kubectl = |args: Vec<String>| {
        let cluster = cluster.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cluster.kubectl(&args).await
        }
    };
    let etcd_ref = |rest: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["-n".into(), ns.clone()];
        v.extend(rest.iter().map(|r| r.to_string()));
        v
    };

    // 1. A spec change alone is not applied.
    kubectl(etcd_ref(&[
        "patch",
        "etcd",
        name,
        "--type=merge",
        "-p",
        r#"{"spec":{"etcd":{"resources":{"requests":{"cpu":"60m"}}}}}"#,
    ]))
    .await
    .ok();
    tokio::time::sleep(NOTHING_HAPPENS_FOR).await;
    assert_eq!(
        cpu_request(&statefulsets, name).await,
        "50m",
        "a spec change was applied without the reconcile annotation"
    );

    // 2. Suspended: even the reconcile annotation does not apply it; a Warning says why.
    let suspend = format!("{SUSPEND_ETCD_SPEC_RECONCILE}=true");
    let reconcile = format!("{GARDENER_OPERATION}=reconcile");
    kubectl(etcd_ref(&[
        "annotate",
        "etcd",
        name,
        &suspend,
        &reconcile,
        "--overwrite",
    ]))
    .await
    .ok();
    let events: Api<Event> = Api::namespaced(s.cluster.client.clone(), &ns);
    wait_for(
        "a Warning event about the suspended spec",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            let list = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("SpecReconcileSuspended")
                })
                .map(|e| println!("  event: {}", e.message.clone().unwrap_or_default()))
                .ok_or_else(|| format!("{} events, none about the suspension", list.items.len()))
        },
    )
    .await;
    tokio::time::sleep(NOTHING_HAPPENS_FOR).await;
    assert_eq!(
        cpu_request(&statefulsets, name).await,
        "50m",
        "a suspended spec was applied"
    );

    // 3. Suspension lifted: the annotated change is applied and the annotation removed.
    let t = Instant::now();
    kubectl(etcd_ref(&[
        "annotate",
        "etcd",
        name,
        &format!("{SUSPEND_ETCD_SPEC_RECONCILE}-"),
    ]))
    .await
    .ok();
    wait_for(
        "the change applied and the reconcile annotation removed",
        READY_TIMEOUT,
        Duration::from_secs(1),
        || async {
            let cpu = cpu_request(&statefulsets, name).await;
            let annotated = etcds
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key(GARDENER_OPERATION));
            if cpu == "60m" && !annotated {
                Ok(())
            } else {
                Err(format!("cpu {cpu}, annotation still there: {annotated}"))
            }
        },
    )
    .await;
    wait_fully_ready(&s.cluster, &ns, name, 1, false, READY_TIMEOUT).await;
    s.measure(
        "suspension lifted→change rolled out",
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    );

    // 4. Component protection, enforced by the webhook served in the cluster.
    let service = format!("{name}-client");
    let refused = kubectl(etcd_ref(&["delete", "service", &service])).await;
    assert!(!refused.success, "deleting a protected Service was allowed");
    assert!(
        refused.stderr.contains("protected")
            && refused.stderr.contains(DISABLE_ETCD_COMPONENT_PROTECTION),
        "the refusal says why and what to do: {}",
        refused.stderr
    );
    let services: Api<Service> = Api::namespaced(s.cluster.client.clone(), &ns);
    let old = uid_of(&services, &service).await;
    assert!(old.is_some(), "the Service survived");
    kubectl(etcd_ref(&[
        "annotate",
        "etcd",
        name,
        &format!("{DISABLE_ETCD_COMPONENT_PROTECTION}=true"),
    ]))
    .await
    .ok();
    kubectl(etcd_ref(&["delete", "service", &service]))
        .await
        .ok();
    kubectl(etcd_ref(&[
        "annotate",
        "etcd",
        name,
        &format!("{DISABLE_ETCD_COMPONENT_PROTECTION}-"),
        &reconcile,
        "--overwrite",
    ]))
    .await
    .ok();
    wait_for(
        "the Service recreated by the next reconcile",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            match uid_of(&services, &service).await {
                Some(u) if Some(&u) != old.as_ref() => Ok(()),
                other => Err(format!("uid {other:?}")),
            }
        },
    )
    .await;
    s.pass().await;
}
