//! `KubeCoordination` against the real kube-apiserver, acting as the member pods'
//! ServiceAccount under the Role and RoleBinding the operator renders (impersonated by the
//! admin user), so every call here is also a check that the Role grants what the agent needs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_coord::{CoordError, Coordination, KubeCoordination};
use quorate_core::components::cluster_config::render_for_kubernetes;
use quorate_core::components::config_map::CLUSTER_CONFIG_KEY;
use quorate_core::lease::{
    BACKUP_ERROR_ANNOTATION, HolderIdentity, MemberLease, SnapshotLease, TLS_ENABLED_ANNOTATION,
};
use quorate_core::membership::rollout::CONFIG_HASH_ANNOTATION;
use quorate_testkit::{AgentConfig, KubeApiServer, create_agent_objects};

const NAME: &str = "etcd-main";

fn etcd(namespace: &str, replicas: i32) -> Etcd {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "uid": "0a1b2c3d-0000-4000-8000-000000000001",
        },
        "spec": {
            "replicas": replicas,
            "labels": {"app": NAME},
            "etcd": {},
            "backup": {"store": {"provider": "Local", "container": "bucket", "prefix": NAME}},
        },
    }))
    .expect("a valid Etcd")
}

/// A client that is the member pods' ServiceAccount `etcd-main` in `namespace`.
async fn agent_client(server: &KubeApiServer, namespace: &str) -> Client {
    server
        .client_as(&format!("system:serviceaccount:{namespace}:{NAME}"), &[])
        .await
        .expect("impersonating client")
}

struct Setup {
    admin: Client,
    namespace: String,
    coord: KubeCoordination,
}

async fn setup(test: &str, replicas: i32, with_config: bool) -> Option<Setup> {
    let server = KubeApiServer::shared_or_skip(test).await?;
    let admin = server.client().await.expect("admin client");
    let namespace = server
        .create_namespace(&admin, "coord")
        .await
        .expect("namespace");
    let config = if with_config {
        AgentConfig::Rendered
    } else {
        AgentConfig::None
    };
    create_agent_objects(&admin, &etcd(&namespace, replicas), config).await;
    let coord = KubeCoordination::new(agent_client(server, &namespace).await, &namespace, NAME);
    Some(Setup {
        admin,
        namespace,
        coord,
    })
}

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().expect("timestamp")
}

async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn member_lease_renewals_round_trip_and_keep_the_operators_metadata() {
    let Some(s) = setup("member_lease_renewals_round_trip", 3, true).await else {
        return;
    };
    let leases: Api<Lease> = Api::namespaced(s.admin.clone(), &s.namespace);
    // What others put on the lease: an annotation and a duration the agent must not touch.
    leases
        .patch(
            "etcd-main-0",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {"example.com/keep": "yes"}},
                "spec": {"leaseDurationSeconds": 40},
            })),
        )
        .await
        .expect("annotate lease");
    let before = leases.get("etcd-main-0").await.expect("lease");

    let fresh = s.coord.member_lease("etcd-main-0").await.expect("read");
    let fresh = fresh.expect("the operator's lease exists");
    assert_eq!(fresh.holder_identity, None, "nobody holds it yet");
    assert_eq!(fresh.renew_time, None);

    let holder: HolderIdentity = "8e9e05c52164694d:cdf818194e3a8c32:Leader".parse().unwrap();
    let mut lease = MemberLease::new("etcd-main-0");
    lease.renew(&holder, false, ts("2024-05-06T07:08:09.123456Z"));
    lease
        .annotations
        .insert(CONFIG_HASH_ANNOTATION.into(), "abc".into());
    s.coord.put_member_lease(&lease).await.expect("renew");

    let read = s.coord.member_lease("etcd-main-0").await.unwrap().unwrap();
    assert_eq!(read.holder(), Some(Ok(holder)));
    assert_eq!(read.renew_time, Some(ts("2024-05-06T07:08:09.123456Z")));
    assert_eq!(read.tls_enabled(), Some(false));
    assert_eq!(read.annotations[CONFIG_HASH_ANNOTATION], "abc");

    // A second renewal moves the time and changes the role.
    let member: HolderIdentity = "8e9e05c52164694d:cdf818194e3a8c32:Member".parse().unwrap();
    lease.renew(&member, true, ts("2024-05-06T07:08:19.5Z"));
    s.coord.put_member_lease(&lease).await.expect("renew again");

    let raw = leases.get("etcd-main-0").await.expect("lease");
    let spec = raw.spec.clone().expect("spec");
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some("8e9e05c52164694d:cdf818194e3a8c32:Member")
    );
    assert_eq!(
        spec.renew_time.map(|t| t.0),
        Some(ts("2024-05-06T07:08:19.5Z"))
    );
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let annotations = raw.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations[TLS_ENABLED_ANNOTATION], "true");
    assert_eq!(annotations["example.com/keep"], "yes");
    assert_eq!(raw.metadata.labels, before.metadata.labels);
    assert!(raw.metadata.labels.as_ref().is_some_and(|l| l.len() == 4));
    assert_eq!(
        raw.metadata.owner_references,
        before.metadata.owner_references
    );
    assert_eq!(
        raw.metadata.owner_references.as_ref().map(Vec::len),
        Some(1)
    );

    let all = s.coord.member_leases().await.expect("list");
    let names: Vec<_> = all.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
    assert_eq!(all[0].holder(), Some(Ok(member)));
    assert!(all[1].holder_identity.is_none());
    assert!(s.coord.member_lease("etcd-main-7").await.unwrap().is_none());
}

#[tokio::test]
async fn snapshot_leases_record_revisions_and_drop_the_backup_error() {
    let Some(s) = setup("snapshot_leases_record_revisions", 1, true).await else {
        return;
    };
    let mut lease = s
        .coord
        .snapshot_lease("etcd-main-full-snap")
        .await
        .unwrap()
        .expect("the operator's snapshot lease");
    assert!(lease.revision().is_none());
    lease.record(42, ts("2024-01-01T00:00:00Z"));
    lease
        .annotations
        .insert(BACKUP_ERROR_ANNOTATION.into(), "store unreachable".into());
    s.coord.put_snapshot_lease(&lease).await.expect("record");
    let read = s
        .coord
        .snapshot_lease("etcd-main-full-snap")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.revision(), Some(Ok(42)));
    assert_eq!(
        read.annotations[BACKUP_ERROR_ANNOTATION],
        "store unreachable"
    );

    let mut healed = read.clone();
    healed.annotations.remove(BACKUP_ERROR_ANNOTATION);
    healed.record(57, ts("2024-01-01T00:01:00Z"));
    s.coord.put_snapshot_lease(&healed).await.expect("record");
    let raw = Api::<Lease>::namespaced(s.admin.clone(), &s.namespace)
        .get("etcd-main-full-snap")
        .await
        .unwrap();
    assert_eq!(
        raw.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("57")
    );
    let annotations = raw.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(BACKUP_ERROR_ANNOTATION));
    assert_eq!(
        raw.metadata.labels.unwrap()["app.kubernetes.io/component"],
        "etcd-snapshot-lease"
    );
    // The delta lease is its own object.
    let delta = s
        .coord
        .snapshot_lease("etcd-main-delta-snap")
        .await
        .unwrap();
    assert_eq!(delta, Some(SnapshotLease::new("etcd-main-delta-snap")));
}

#[tokio::test]
async fn cluster_config_comes_from_the_config_map_and_follows_changes() {
    let Some(s) = setup("cluster_config_comes_from_the_config_map", 3, true).await else {
        return;
    };
    let ctx = quorate_core::components::ComponentContext::new("quorate:test", "alpine:test");
    let expected = render_for_kubernetes(&etcd(&s.namespace, 3), &ctx).unwrap();
    assert_eq!(s.coord.cluster_config().await.expect("config"), expected);

    let mut changed = expected.clone();
    changed.heartbeat_millis = 1234;
    set_cluster_json(&s, &serde_json::to_string(&changed).unwrap()).await;
    eventually("the changed configuration", || async {
        let c = s.coord.cluster_config().await.ok()?;
        (c.heartbeat_millis == 1234).then_some(())
    })
    .await;
}

async fn set_cluster_json(s: &Setup, text: &str) {
    Api::<ConfigMap>::namespaced(s.admin.clone(), &s.namespace)
        .patch(
            "etcd-main-config",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {CLUSTER_CONFIG_KEY: text}})),
        )
        .await
        .expect("patch ConfigMap");
}

#[tokio::test]
async fn missing_config_map_key_json_and_lease_are_reported_clearly() {
    let Some(s) = setup("missing_config_map_key_json_and_lease", 1, false).await else {
        return;
    };
    match s.coord.cluster_config().await {
        Err(e @ CoordError::NoConfig { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&format!("ConfigMap {}/etcd-main-config", s.namespace)),
                "{text}"
            );
            assert!(text.contains("the operator creates it"), "{text}");
        }
        other => panic!("expected NoConfig, got {other:?}"),
    }

    let without_key = ConfigMap {
        metadata: ObjectMeta {
            name: Some("etcd-main-config".into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "etcd.conf.yaml".to_string(),
            "name: etcd-config".to_string(),
        )])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(s.admin.clone(), &s.namespace)
        .create(&PostParams::default(), &without_key)
        .await
        .expect("create ConfigMap");
    let text = eventually("the missing key to be reported", || async {
        match s.coord.cluster_config().await {
            Err(e @ CoordError::MissingConfigKey { .. }) => Some(e.to_string()),
            _ => None,
        }
    })
    .await;
    assert!(text.contains("has no key cluster.json"), "{text}");
    assert!(text.contains("etcd-main-config"), "{text}");

    set_cluster_json(&s, "{\"clusterName\": ").await;
    let text = eventually("the invalid JSON to be reported", || async {
        match s.coord.cluster_config().await {
            Err(e @ CoordError::InvalidConfig { .. }) => Some(e.to_string()),
            _ => None,
        }
    })
    .await;
    assert!(
        text.contains("key cluster.json of ConfigMap") && text.contains("not a valid cluster"),
        "{text}"
    );

    // A member lease the Role names but that is gone (the operator deleted it).
    Api::<Lease>::namespaced(s.admin.clone(), &s.namespace)
        .delete("etcd-main-0", &Default::default())
        .await
        .expect("delete the member lease");
    let mut lease = MemberLease::new("etcd-main-0");
    lease.renew(
        &"1:2:Member".parse().unwrap(),
        false,
        jiff::Timestamp::now(),
    );
    match s.coord.put_member_lease(&lease).await {
        Err(e @ CoordError::MissingLease { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&format!(
                    "member lease {}/etcd-main-0 does not exist",
                    s.namespace
                )),
                "{text}"
            );
            assert!(text.contains("the operator creates it"), "{text}");
        }
        other => panic!("expected MissingLease, got {other:?}"),
    }
    // Nothing was created behind the operator's back.
    let created = Api::<Lease>::namespaced(s.admin.clone(), &s.namespace)
        .get_opt("etcd-main-0")
        .await
        .unwrap();
    assert!(created.is_none());
}

#[tokio::test]
async fn forbidden_calls_name_the_verb_the_resource_and_the_role() {
    let Some(s) = setup("forbidden_calls_name_the_verb", 1, true).await else {
        return;
    };
    // The Role loses patch/update on leases and everything on ConfigMaps.
    let roles: Api<Role> = Api::namespaced(s.admin.clone(), &s.namespace);
    let mut narrowed = roles
        .get("druid.gardener.cloud:etcd:etcd-main")
        .await
        .unwrap();
    narrowed.rules = Some(vec![PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: vec!["get".into(), "list".into(), "watch".into()],
        ..PolicyRule::default()
    }]);
    roles
        .replace(
            "druid.gardener.cloud:etcd:etcd-main",
            &PostParams::default(),
            &narrowed,
        )
        .await
        .expect("narrow the Role");

    let lease = eventually("the narrowed Role to apply", || async {
        s.coord.member_lease("etcd-main-0").await.ok().flatten()
    })
    .await;
    let err = s
        .coord
        .put_member_lease(&lease)
        .await
        .expect_err("patch is not allowed");
    let CoordError::Api(failure) = &err else {
        panic!("expected an API failure, got {err:?}");
    };
    assert_eq!(failure.status, Some(403));
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("patch leases {}/etcd-main-0 failed", s.namespace)),
        "{text}"
    );
    assert!(text.contains("lacks `patch` on leases"), "{text}");
    assert!(
        text.contains("Role `druid.gardener.cloud:etcd:etcd-main`"),
        "{text}"
    );

    let err = s
        .coord
        .cluster_config()
        .await
        .expect_err("no ConfigMap access");
    let text = err.to_string();
    assert!(
        text.contains("list configmaps") && text.contains("lacks `list` on configmaps"),
        "{text}"
    );
}

/// The pods of one `Etcd` may patch their own member and snapshot leases only: another
/// cluster's lease in the same namespace (which drives that cluster's decisions) is refused.
#[tokio::test]
async fn the_role_refuses_another_clusters_lease() {
    let Some(s) = setup("the_role_refuses_another_clusters_lease", 1, true).await else {
        return;
    };
    let other = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("etcd-other-0".to_string()),
            ..Default::default()
        },
        spec: None,
    };
    Api::<Lease>::namespaced(s.admin.clone(), &s.namespace)
        .create(&PostParams::default(), &other)
        .await
        .expect("create another cluster's lease");
    let own = eventually("the member lease", || async {
        s.coord.member_lease("etcd-main-0").await.ok().flatten()
    })
    .await;
    s.coord
        .put_member_lease(&own)
        .await
        .expect("its own lease is patched");
    let foreign = MemberLease {
        name: "etcd-other-0".to_string(),
        ..own.clone()
    };
    let err = s
        .coord
        .put_member_lease(&foreign)
        .await
        .expect_err("another cluster's lease is refused");
    let CoordError::Api(failure) = &err else {
        panic!("expected an API failure, got {err:?}");
    };
    assert_eq!(failure.status, Some(403), "{err}");
    // Reading it stays allowed (the agent lists member leases by label).
    assert!(s.coord.member_lease("etcd-other-0").await.is_ok());
}
