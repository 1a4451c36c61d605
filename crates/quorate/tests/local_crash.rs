//! quorate's own crash is never etcd's outage: under a writing client (`quorate canary`, 5 s
//! write timeout), `kill -9` of a local cluster's supervisor, of one agent, and of every agent
//! at once; etcd keeps serving (no write fails), the restarted processes adopt the running
//! ones (every etcd keeps its PID; agents outlive the supervisor and the next one adopts them),
//! and the cluster is healthy again. `Local` kills every
//! process of the state directory when dropped, also when a test panics.

mod support;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::time::Duration;
use support::canary::Canary;
use support::{Local, eventually, http_get, manifest, path_str, runtime};

const MEMBERS: usize = 3;

fn members(name: &str) -> Vec<String> {
    (0..MEMBERS).map(|i| format!("{name}-{i}")).collect()
}

/// Every member's etcd PID.
fn etcd_pids(local: &Local, name: &str) -> BTreeMap<String, i32> {
    members(name)
        .into_iter()
        .map(|m| {
            let pid = local
                .etcd_pid(name, &m)
                .unwrap_or_else(|| panic!("etcd of {m} runs\n{}", local.log_tails()));
            (m, pid)
        })
        .collect()
}

fn agent_pids(local: &Local, name: &str) -> BTreeMap<String, i32> {
    members(name)
        .into_iter()
        .map(|m| {
            let pid = local.agent_pid(name, &m).expect("agent runs");
            (m, pid)
        })
        .collect()
}

/// Whether `member`'s agent answers `/healthz` with 200 (it runs and its etcd serves).
fn agent_healthy(local: &Local, name: &str, i: usize) -> bool {
    let port = local.agent_port(name, i);
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && http_get(port, "/healthz").0 == 200
}

/// Waits until every member has an agent other than the one in `old` that reports healthy.
fn new_agents_healthy(local: &Local, name: &str, old: &BTreeMap<String, i32>) {
    for (i, member) in members(name).iter().enumerate() {
        eventually(
            &format!("a new, healthy agent of {member}"),
            Duration::from_secs(60),
            || {
                let pid = local.agent_pid(name, member)?;
                (pid != old[member] && agent_healthy(local, name, i)).then_some(())
            },
        );
    }
}

fn up(local: &Local, name: &str) -> std::path::PathBuf {
    let path = local.manifest(&format!("{name}.yaml"), &manifest(name, MEMBERS as u32, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    path
}

/// The cluster's revision, read through `endpoints`.
fn revision(endpoints: &[String]) -> i64 {
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None)
            .await
            .expect("connect");
        let status = client.get("c/", None).await.expect("get");
        status.header().expect("header").revision()
    })
}

/// Waits until the canary's writes moved the revision 100 past where it is now: the canary
/// kept writing after the crash and the recovery (its finish checks none failed).
fn canary_writes_on(endpoints: &[String]) {
    let from = revision(endpoints);
    eventually("100 more canary writes", Duration::from_secs(60), || {
        (revision(endpoints) >= from + 100).then_some(())
    });
}

fn sigkill(pid: i32) {
    kill(Pid::from_raw(pid), Signal::SIGKILL).expect("kill -9");
}

#[test]
fn supervisor_kill_leaves_etcd_serving_and_a_new_up_adopts_it() {
    let local = Local::new();
    let name = "sup";
    let path = up(&local, name);
    let endpoints = local.endpoints(name);
    let canary = Canary::start(&endpoints);
    let etcds = etcd_pids(&local, name);
    let agents = agent_pids(&local, name);
    let lock = local.cluster_dir(name).join("supervisor.lock");
    let supervisor: i32 = std::fs::read_to_string(&lock)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    sigkill(supervisor);
    eventually("the supervisor to go", Duration::from_secs(15), || {
        let state = local.state.path().display().to_string();
        local
            .find_pid(&[&state, "supervise", name])
            .is_none()
            .then_some(())
    });
    canary_writes_on(&endpoints);
    // Neither an agent nor an etcd died with it.
    assert_eq!(
        agent_pids(&local, name),
        agents,
        "every agent outlived the supervisor"
    );
    assert_eq!(
        etcd_pids(&local, name),
        etcds,
        "every etcd outlived the supervisor"
    );

    // A new supervisor adopts the running agents, which keep their etcd.
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    for i in 0..MEMBERS {
        eventually("every agent healthy", Duration::from_secs(60), || {
            agent_healthy(&local, name, i).then_some(())
        });
    }
    assert_eq!(
        agent_pids(&local, name),
        agents,
        "the new supervisor adopted every agent"
    );
    assert_eq!(etcd_pids(&local, name), etcds, "every etcd kept running");
    canary_writes_on(&endpoints);
    canary.finish_unhurt();

    // `down` still stops everything.
    local.ok(&["down", name]);
    for m in members(name) {
        assert_eq!(local.etcd_pid(name, &m), None, "down stopped {m}'s etcd");
        assert_eq!(local.agent_pid(name, &m), None, "down stopped {m}'s agent");
    }
}

#[test]
fn agent_kills_one_and_all_at_once_are_adopted_without_an_etcd_restart() {
    let local = Local::new();
    let name = "agk";
    up(&local, name);
    let endpoints = local.endpoints(name);
    let canary = Canary::start(&endpoints);
    let etcds = etcd_pids(&local, name);

    // One agent.
    let agents = agent_pids(&local, name);
    let one = format!("{name}-1");
    sigkill(agents[&one]);
    eventually(
        &format!("a new, healthy agent of {one}"),
        Duration::from_secs(60),
        || {
            let pid = local.agent_pid(name, &one)?;
            (pid != agents[&one] && agent_healthy(&local, name, 1)).then_some(())
        },
    );
    assert_eq!(
        etcd_pids(&local, name),
        etcds,
        "the agent's etcd kept running"
    );

    // Every agent at once.
    let agents = agent_pids(&local, name);
    for pid in agents.values() {
        sigkill(*pid);
    }
    new_agents_healthy(&local, name, &agents);
    assert_eq!(etcd_pids(&local, name), etcds, "every etcd kept running");
    canary_writes_on(&endpoints);
    canary.finish_unhurt();
    local.ok(&["down", name]);
    for m in members(name) {
        assert_eq!(local.etcd_pid(name, &m), None, "down stopped {m}'s etcd");
    }
}
