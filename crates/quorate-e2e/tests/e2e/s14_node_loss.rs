//! Scenario 14: a node is lost (network, kubelet, containers and runtime gone at once) and comes
//! back, under the canary.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use quorate_api::Etcd;
use quorate_api::status::EtcdMemberConditionStatus;
use quorate_e2e::cluster::Cluster;
use quorate_e2e::members::{
    canary_totals, count_prefix, etcdctl, member_list, names_and_ids, uid_of, wait_fully_ready,
};
use quorate_e2e::nodes::{node_control, node_of, node_power, node_ready, schedulable_nodes};
use quorate_e2e::{E2eEnv, Scenario, condition_status, status_summary, wait_for};

use crate::READY_TIMEOUT;

/// How long the node stays lost after the status has said so (by then it has been gone for over
/// a minute, every agent's quorum check has run many times): a few more status passes, well short
/// of the 5 minutes after which Kubernetes evicts the pods of an unreachable node.
const LOST_FOR: Duration = Duration::from_secs(10);

/// Three members, one per node on node-bound volumes, with backups; a canary writes to every
/// member as an etcd client given all endpoints does (through the client Service, a connection
/// to the lost node's member would hang until the node controller marks the pod NotReady: a
/// property of Services, not of the cluster). The node of one member (not the canary's, not the
/// operator's), made the leader first, is lost.
/// The cluster keeps serving on the other two: the canary sees zero failed writes. The Node goes
/// NotReady and the `Etcd`'s status says the lost member is not ready (druid's lease rules)
/// while `Ready` stays True; quorate removes and replaces nothing (no evidence says the data is
/// gone: the member list keeps the same three members). When the node returns, its member
/// starts on its volume as the same member and catches up; every acknowledged write is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_a_lost_node_returns_without_failed_writes_or_replacements() {
    let test = "s14_a_lost_node_returns_without_failed_writes_or_replacements";
    let Some(env) = E2eEnv::from_env_or_skip(test) else {
        return;
    };
    let Some(control) = node_control() else {
        eprintln!(
            "SKIPPED s14 (node loss): QUORATE_E2E_NODE_CONTROL is not set; only the node kit \
             (scripts/e2e.sh) can lose a node"
        );
        return;
    };
    let cluster = Cluster::connect(&env).await;
    let nodes = schedulable_nodes(&cluster).await;
    assert!(
        nodes.len() >= 3,
        "the node kit has three nodes, found {nodes:?}"
    );
    let mut s = Scenario::start(&env, "s14-node-loss").await;
    let ns = s.namespace.clone();
    let name = "etcd-lost-node";
    let canary = s.create_one_per_node_under_a_canary(name).await;

    // The node to lose: one of a member, neither the canary's nor the operator's.
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let all_pods: Api<Pod> = Api::all(s.cluster.client.clone());
    let mut busy = vec![node_of(&pods, &canary).await];
    let operators = all_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=quorate-operator"))
        .await
        .expect("listing the operator's pods");
    busy.extend(
        operators
            .into_iter()
            .map(|p| p.spec.and_then(|s| s.node_name)),
    );
    let members: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    let mut lost = None;
    for m in &members {
        let node = node_of(&pods, m).await;
        if !busy.contains(&node) {
            lost = node.map(|n| (n, m.clone()));
            break;
        }
    }
    let (node, member) = lost.unwrap_or_else(|| {
        panic!("no member runs on a node without the canary and the operator: busy {busy:?}")
    });
    let pod_before = uid_of(&pods, &member).await;
    let ids_before = member_list(&s.cluster, &ns, &members[0])
        .await
        .expect("member list");
    // The lost member leads (the harder case: an election under the canary, whose followers
    // hold the writes they forwarded to it; a CI run failed a write so).
    let id = ids_before
        .iter()
        .find(|m| m.name == member)
        .map(|m| format!("{:x}", m.id))
        .expect("the lost member is listed");
    make_leader(&s.cluster, &ns, &members, &id).await;
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);

    let t = Instant::now();
    node_power(&control, "lose", &node).await;
    println!("  node {node} (member {member}, the leader) lost");
    wait_for(
        &format!("the status to say {member} is not ready"),
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let etcd = etcds.get(name).await.map_err(|e| e.to_string())?;
            let st = etcd.status.as_ref();
            let away = st
                .map(|st| st.members.iter())
                .into_iter()
                .flatten()
                .any(|m| m.name == member && m.status != EtcdMemberConditionStatus::Ready);
            if away && condition_status(st, "AllMembersReady") == "False" {
                Ok(())
            } else {
                Err(status_summary(&etcd))
            }
        },
    )
    .await;
    let reported = t.elapsed().as_secs_f64();
    let etcd = etcds.get(name).await.expect("the Etcd");
    println!("  status after the loss: {}", status_summary(&etcd));
    s.measure("node lost → status says so", format!("{reported:.1} s"));
    // The member's lease expiring and the node controller's grace period (50 s since
    // Kubernetes 1.32) are independent clocks: either may come first.
    wait_for(
        &format!("the API server to report {node} not Ready"),
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            if node_ready(&s.cluster, &node).await {
                Err("Ready".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    // Quorum holds on two members; nothing is decided on silence.
    assert_eq!(
        condition_status(etcd.status.as_ref(), "Ready"),
        "True",
        "Ready while two of three members serve: {}",
        status_summary(&etcd)
    );
    tokio::time::sleep(LOST_FOR).await;
    let survivor = members
        .iter()
        .find(|m| **m != member)
        .expect("a member on another node");
    let during = member_list(&s.cluster, &ns, survivor)
        .await
        .expect("member list while the node is lost");
    assert_eq!(
        during.len(),
        3,
        "a member was removed while its node was lost: {during:?}"
    );

    let back = Instant::now();
    node_power(&control, "return", &node).await;
    wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
    s.measure(
        "node back → Ready",
        format!("{:.1} s", back.elapsed().as_secs_f64()),
    );
    assert_eq!(
        uid_of(&pods, &member).await,
        pod_before,
        "{member}'s pod object is the same one (the node restarted it)"
    );
    let ids_after = member_list(&s.cluster, &ns, &members[0])
        .await
        .expect("member list");
    assert_eq!(
        names_and_ids(&ids_after),
        names_and_ids(&ids_before),
        "the same three members"
    );

    let totals = canary_totals(&s.cluster, &ns, &canary)
        .await
        .expect("canary totals");
    s.writer_held(&totals, 5000);
    let through = totals["acknowledged_through"].as_u64().unwrap_or(0);
    let stored = count_prefix(&s.cluster, &ns, &member, "canary/").await;
    assert!(
        stored >= through,
        "{through} writes were acknowledged but {member} holds {stored} after its return"
    );
    s.pass().await;
}

/// Moves leadership to the member with hex ID `id`: `etcdctl move-leader` succeeds only in the
/// leader's pod (or the target's, when it leads already).
async fn make_leader(cluster: &Cluster, ns: &str, members: &[String], id: &str) {
    let mut refused = Vec::new();
    for pod in members {
        let out = etcdctl(cluster, ns, pod, &["move-leader", id]).await;
        if out.success {
            return;
        }
        refused.push(format!("{pod}: {}", out.stderr.trim()));
    }
    panic!("no member moved leadership to {id}: {refused:?}");
}
