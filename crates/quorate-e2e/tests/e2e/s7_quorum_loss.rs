//! Scenario 7 (issue 12): a majority of members loses its pods and volumes at once. The
//! survivor still holds the data; the lost members' agents report empty data directories, so
//! quorate recovers by itself: the survivor becomes a one-member cluster and the others rejoin
//! as learners. Nothing acknowledged before the loss is lost, and no restore from the bucket.

use std::time::Instant;

use quorate_e2e::members::{
    delete_pods_and_claims, local_value, member_list, wait_for_voters, wait_fully_ready,
};
use quorate_e2e::{E2eEnv, Scenario};

use crate::READY_TIMEOUT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_a_majority_loses_its_volumes_and_quorum_is_recovered_from_the_survivor() {
    let Some(env) = E2eEnv::from_env_or_skip(
        "s7_a_majority_loses_its_volumes_and_quorum_is_recovered_from_the_survivor",
    ) else {
        return;
    };
    let mut s = Scenario::start(&env, "s7-quorum-loss").await;
    let ns = s.namespace.clone();
    let name = "etcd-qloss";
    s.create_ready_etcd(name, 3, false).await;
    let pod0 = format!("{name}-0");
    let (key, value) = ("e2e/s7", "acknowledged-before-the-loss");
    quorate_e2e::members::etcdctl(&s.cluster, &ns, &pod0, &["put", key, value])
        .await
        .ok();
    let before = member_list(&s.cluster, &ns, &pod0)
        .await
        .expect("member list");

    let t = Instant::now();
    let lost: Vec<(String, String)> = (1..3)
        .map(|i| (format!("{name}-{i}"), format!("{name}-{name}-{i}")))
        .collect();
    delete_pods_and_claims(&s.cluster, &ns, &lost, READY_TIMEOUT).await;
    let after = wait_for_voters(&s.cluster, &ns, &pod0, 3, READY_TIMEOUT).await;
    wait_fully_ready(&s.cluster, &ns, name, 3, false, READY_TIMEOUT).await;
    let quorum_loss = t.elapsed().as_secs_f64();
    s.measure(
        "2 of 3 pods+PVCs deleted→3 voters",
        format!("{quorum_loss:.1} s"),
    );
    s.record_number("quorum_loss_seconds", format!("{quorum_loss:.1}"));
    let survivor = |list: &[quorate_e2e::members::ListedMember]| {
        list.iter()
            .find(|m| m.name == pod0)
            .map(|m| m.id)
            .expect("the survivor is listed")
    };
    assert_eq!(
        survivor(&after),
        survivor(&before),
        "the survivor kept its identity and data"
    );
    for (pod, _) in &lost {
        assert_eq!(
            local_value(&s.cluster, &ns, pod, key).await,
            value,
            "{pod} has every write acknowledged before the loss"
        );
    }
    let log = s
        .cluster
        .kubectl(&["-n", &ns, "logs", &pod0, "-c", "etcd"])
        .await
        .ok();
    assert!(
        log.contains("recovering from quorum loss"),
        "{pod0} recorded the recovery in its log:\n{log}"
    );
    let lease = s
        .cluster
        .kubectl(&["-n", &ns, "get", "lease", &pod0, "-o", "json"])
        .await
        .ok();
    assert!(
        lease.contains("quorate.io/recovery"),
        "the recovery is recorded on {pod0}'s lease:\n{lease}"
    );
    s.pass().await;
}
