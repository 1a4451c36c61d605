//! Scenario 3: one member loses its pod, then another its pod and its volume.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use quorate_e2e::members::{
    ListedMember, delete_pods_and_claims, local_value, member_list, uid_of, wait_for_voters,
    wait_fully_ready,
};
use quorate_e2e::{E2eEnv, Scenario, wait_for};

use crate::READY_TIMEOUT;

/// The ID of member `name` in `list`.
fn id_of(list: &[ListedMember], name: &str) -> u64 {
    list.iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the member list: {list:?}"))
        .id
}

/// Deleting a member's pod: it comes back with its data (same member ID, the key written
/// before is there). Deleting a member's pod and its PVC: the agent removes the stale member and
/// adds it back as a learner that gets its data from the leader (a new member ID, the key is
/// there, and its log shows no restore from the bucket).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_member_loses_its_pod_then_its_volume() {
    let Some(env) = E2eEnv::from_env_or_skip("s3_a_member_loses_its_pod_then_its_volume") else {
        return;
    };
    let mut s = Scenario::start(&env, "s3-member-loss").await;
    let ns = s.namespace.clone();
    let name = "etcd-loss";
    s.create_ready_etcd(name, 3, true).await;
    let (key, value) = ("e2e/s3", "written-before-the-losses");
    let pod0 = format!("{name}-0");
    quorate_e2e::members::etcdctl(&s.cluster, &ns, &pod0, &["put", key, value])
        .await
        .ok();
    let before = member_list(&s.cluster, &ns, &pod0)
        .await
        .expect("member list");
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);

    // 1. A pod is deleted: it returns with its data.
    let pod1 = format!("{name}-1");
    let old_pod = uid_of(&pods, &pod1).await;
    let t = Instant::now();
    s.cluster
        .kubectl(&["-n", &ns, "delete", "pod", &pod1, "--wait=false"])
        .await
        .ok();
    wait_for(
        &format!("a new {pod1}"),
        READY_TIMEOUT,
        std::time::Duration::from_millis(500),
        || async {
            match uid_of(&pods, &pod1).await {
                Some(u) if Some(&u) != old_pod.as_ref() => Ok(()),
                other => Err(format!("uid {other:?}")),
            }
        },
    )
    .await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    let pod_loss = t.elapsed().as_secs_f64();
    s.measure("pod deleted→Ready", format!("{pod_loss:.1} s"));
    s.record_number("pod_loss_seconds", format!("{pod_loss:.1}"));
    let after_pod = member_list(&s.cluster, &ns, &pod0)
        .await
        .expect("member list");
    assert_eq!(
        id_of(&after_pod, &pod1),
        id_of(&before, &pod1),
        "{pod1} came back as the same member"
    );
    assert_eq!(local_value(&s.cluster, &ns, &pod1, key).await, value);

    // 2. A pod and its volume are deleted: the member is replaced through a learner.
    let pod2 = format!("{name}-2");
    let t = Instant::now();
    delete_pods_and_claims(
        &s.cluster,
        &ns,
        &[(pod2.clone(), format!("{name}-{name}-2"))],
        READY_TIMEOUT,
    )
    .await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    let after_volume = wait_for_voters(&s.cluster, &ns, &pod0, 3, READY_TIMEOUT).await;
    let volume_loss = t.elapsed().as_secs_f64();
    s.measure("pod+PVC deleted→3 voters", format!("{volume_loss:.1} s"));
    s.record_number("volume_loss_seconds", format!("{volume_loss:.1}"));
    assert_ne!(
        id_of(&after_volume, &pod2),
        id_of(&before, &pod2),
        "{pod2} lost its data, so it must have been removed and added again"
    );
    assert_eq!(
        local_value(&s.cluster, &ns, &pod2, key).await,
        value,
        "the replaced member got the data from the leader"
    );
    let log = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &pod2, "-c", "etcd"])
        .await
        .ok();
    assert!(
        log.contains("added as a learner"),
        "{pod2} did not rejoin as a learner:\n{log}"
    );
    assert!(
        !log.contains("restoring from the bucket"),
        "{pod2} restored from the bucket although the cluster was healthy:\n{log}"
    );
    s.pass().await;
}
