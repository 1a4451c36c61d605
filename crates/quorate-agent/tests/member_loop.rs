//! The agent's member loop and its membership executor against real etcd: agents run in this
//! test process with file coordination in a temp dir, as local mode runs them.

use quorate_agent::executor::Executor;
use quorate_agent::{AgentExit, AgentOptions, SharedState, run_agent};
use quorate_coord::{Coordination, FileCoordination};
use quorate_core::cluster_config::{ClusterConfig, EtcdSettings, MemberEndpoints};
use quorate_core::lease::MemberLease;
use quorate_core::membership::data_state::{DATA_STATE_ANNOTATION, DataState};
use quorate_core::membership::planner::{RemoveReason, Step};
use quorate_testkit::{etcd_binary, free_port};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A cluster of `n` desired members on free loopback ports, all bootstrap members.
fn config(n: usize) -> ClusterConfig {
    let members: Vec<MemberEndpoints> = (0..n)
        .map(|i| {
            let (client, peer, agent) = (free_port(), free_port(), free_port());
            MemberEndpoints {
                name: format!("m-{i}"),
                lease_name: format!("m-{i}"),
                peer_url: format!("http://127.0.0.1:{peer}"),
                client_url: format!("http://127.0.0.1:{client}"),
                peer_port: peer,
                client_port: client,
                agent_url: format!("http://127.0.0.1:{agent}"),
                agent_port: agent,
                metrics_port: None,
            }
        })
        .collect();
    ClusterConfig {
        cluster_name: "m".into(),
        namespace: "default".into(),
        cluster_token: format!("m-{}", free_port()),
        leaving: Vec::new(),
        bootstrap_members: members.iter().map(|m| m.name.clone()).collect(),
        members,
        listen_host: "127.0.0.1".into(),
        etcd_version: quorate_api::EtcdVersion::V3_4,
        etcd_version_target: None,
        etcd: EtcdSettings {
            quota_backend_bytes: 1 << 30,
            snapshot_count: 10_000,
            auto_compaction_mode: "periodic".into(),
            auto_compaction_retention: "30m".into(),
            enable_grpc_gateway: false,
            metrics: "basic".into(),
            raft_heartbeat_millis: 100,
            election_timeout_millis: 1000,
        },
        client_tls: None,
        peer_tls: None,
        agent_tls: None,
        secret_files: Vec::new(),
        heartbeat_millis: 500,
        backup: None,
        recovery_request: None,
        maintenance: Default::default(),
        agent_token_secret: None,
        hibernation_request: None,
    }
}

/// One agent running in this process; stopped (and its etcd with it) when dropped.
struct Agent {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<AgentExit>>,
    state: SharedState,
}

impl Agent {
    fn start(dir: &Path, member: &str) -> Agent {
        let (stop, shutdown) = watch::channel(false);
        let state = SharedState::default();
        let opts = AgentOptions {
            member: member.into(),
            data_dir: dir.join(member).join("data"),
            etcd_log: dir.join(format!("{member}.etcd.log")),
            etcd_binaries: quorate_etcd::binaries::EtcdBinaries::with_pinned(Some(etcd_binary())),
            poll_interval: Duration::from_millis(500),
            retry_interval: Duration::from_millis(200),
        };
        std::fs::create_dir_all(dir.join(member)).unwrap();
        let coord = FileCoordination::new(dir);
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                run_agent(coord, opts, state, shutdown)
                    .await
                    .expect("agent")
            }
        });
        Agent {
            stop,
            task: Some(task),
            state,
        }
    }

    async fn stop(mut self) -> AgentExit {
        let _ = self.stop.send(true);
        self.task.take().unwrap().await.unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn until<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// File coordination in `dir` holding `cluster`'s configuration, as local mode writes it.
fn coordination(dir: &Path, cluster: &ClusterConfig) -> FileCoordination {
    let coord = FileCoordination::new(dir);
    coord.write_cluster_config(cluster).unwrap();
    coord
}

/// A cluster of two desired members of which only `m-0` bootstraps, with its agent serving.
async fn one_of_two_serving(dir: &Path) -> (ClusterConfig, Agent) {
    let mut cluster = config(2);
    cluster.bootstrap_members.truncate(1);
    coordination(dir, &cluster);
    let first = Agent::start(dir, "m-0");
    until("m-0 to serve", Duration::from_secs(30), async || {
        first.state.get().healthy.then_some(())
    })
    .await;
    (cluster, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_bootstraps_publishes_its_data_and_restarts_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = config(1);
    let coord = coordination(dir.path(), &cluster);

    let agent = Agent::start(dir.path(), "m-0");
    let lease = until("a renewed lease", Duration::from_secs(30), async || {
        coord
            .member_lease("m-0")
            .await
            .ok()?
            .filter(|l| l.renew_time.is_some())
    })
    .await;
    let holder = lease.holder().unwrap().unwrap();
    let Some(DataState::Present {
        cluster_id,
        member_id,
        ..
    }) = DataState::of_lease(&lease)
    else {
        panic!("the lease carries the data state: {lease:?}");
    };
    assert_eq!(member_id, Some(holder.member_id));
    assert_eq!(cluster_id, holder.cluster_id);
    assert!(agent.state.get().healthy);
    assert_eq!(agent.stop().await, AgentExit::Shutdown);

    // Restarted on its data: the same member, not a new cluster.
    let again = Agent::start(dir.path(), "m-0");
    until("etcd to serve again", Duration::from_secs(30), async || {
        let s = again.state.get();
        (s.healthy && s.member_id.is_some()).then_some(())
    })
    .await;
    assert_eq!(again.state.get().member_id, Some(holder.member_id));
    assert!(
        again
            .state
            .get()
            .etcd_args
            .iter()
            .all(|a| a != "--initial-cluster-state=new"),
        "{:?}",
        again.state.get().etcd_args
    );
    again.stop().await;
}

/// A member whose etcd lost its leader renews its lease as soon as etcd has one again, not at
/// the next heartbeat (a minute here): the status reads members as serving from their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_renews_its_lease_as_soon_as_etcd_has_a_leader_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = config(3);
    cluster.heartbeat_millis = 60_000;
    let coord = coordination(dir.path(), &cluster);
    let [first, second, third] = ["m-0", "m-1", "m-2"].map(|m| Agent::start(dir.path(), m));
    let renewed = async || {
        coord
            .member_lease("m-0")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.renew_time)
    };
    let before = until("m-0's renewed lease", Duration::from_secs(30), renewed).await;

    // Two of three stop: m-0's etcd has no leader.
    second.stop().await;
    third.stop().await;
    until(
        "m-0 without a leader",
        Duration::from_secs(30),
        async || (!first.state.get().healthy).then_some(()),
    )
    .await;
    let _back = ["m-1", "m-2"].map(|m| Agent::start(dir.path(), m));
    until(
        "m-0's lease renewed again",
        Duration::from_secs(30),
        async || renewed().await.filter(|t| *t > before),
    )
    .await;
}

/// A bootstrap member does not ask a peer that published it is starting (data about to be
/// there, no cluster yet) for the member list: that peer's etcd accepts connections but answers
/// nothing before its cluster forms, and asking it cost the whole client bound (4 s on the node
/// kit, before etcd started). Here the peer's port accepts and never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_does_not_wait_on_a_peer_that_is_starting() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = config(2);
    let coord = coordination(dir.path(), &cluster);
    let _silent = std::net::TcpListener::bind(("127.0.0.1", cluster.members[0].client_port))
        .expect("hold m-0's client port");
    let mut starting = MemberLease::new("m-0");
    starting.annotations.insert(
        DATA_STATE_ANNOTATION.into(),
        DataState::Present {
            cluster_id: None,
            member_id: None,
            revision: None,
        }
        .to_annotation(),
    );
    coord.put_member_lease(&starting).await.unwrap();

    let started = Instant::now();
    let agent = Agent::start(dir.path(), "m-1");
    until("m-1's etcd to start", Duration::from_secs(30), async || {
        (!agent.state.get().etcd_args.is_empty()).then_some(())
    })
    .await;
    let bound = quorate_agent::executor::timeouts();
    assert!(
        started.elapsed() < bound.connect + bound.request,
        "m-1 waited on m-0: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_member_joins_as_a_learner_through_the_planner_and_is_promoted() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, first) = one_of_two_serving(dir.path()).await;
    let second = Agent::start(dir.path(), "m-1");
    until(
        "m-1 to be a voting member",
        Duration::from_secs(60),
        async || {
            let s = second.state.get();
            (s.healthy && s.member_id.is_some() && !s.is_learner).then_some(())
        },
    )
    .await;
    let executor = Executor::new(&cluster, "m-0");
    let list = executor.peers_member_list().await.expect("m-1 answers");
    assert_eq!(list.members.len(), 2);
    assert!(list.members.iter().all(|m| m.is_started() && !m.is_learner));
    assert_eq!(
        second.state.get().cluster_id,
        first.state.get().cluster_id,
        "one cluster"
    );
    second.stop().await;
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_observes_health_and_carries_out_planner_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, first) = one_of_two_serving(dir.path()).await;

    // From m-1's point of view (it does not run): m-0 is the one healthy leader.
    let executor = Executor::new(&cluster, "m-1");
    let list = executor.peers_member_list().await.expect("m-0 answers");
    let observed = executor.observe(&list).await;
    assert_eq!(observed.len(), 1);
    assert!(observed[0].healthy && observed[0].is_leader);

    let peer_url = cluster.members[1].peer_url.clone();
    let after = executor
        .apply(&Step::AddLearner {
            name: "m-1".into(),
            peer_urls: vec![peer_url.clone()],
        })
        .await
        .expect("learner added");
    let learner = after
        .iter()
        .find(|m| m.peer_urls == vec![peer_url.clone()])
        .expect("listed");
    assert!(learner.is_learner && !learner.is_started());
    let observed = executor
        .observe(&executor.peers_member_list().await.unwrap())
        .await;
    assert!(
        !observed
            .iter()
            .find(|m| m.id == learner.id)
            .unwrap()
            .healthy,
        "a learner that never started is not healthy"
    );
    let err = executor
        .apply(&Step::Promote {
            id: learner.id,
            name: "m-1".into(),
        })
        .await
        .expect_err("etcd refuses to promote a learner that is not in sync");
    assert!(err.reason().contains("promote"), "{err}");
    let after = executor
        .apply(&Step::Remove {
            id: learner.id,
            name: String::new(),
            reason: RemoveReason::UnwantedLearner,
        })
        .await
        .expect("removed");
    assert_eq!(after.len(), 1);
    first.stop().await;
}
