//! A cluster's agents and etcd processes that run without their supervisor. Both outlive
//! quorate's supervisor (a `kill -9` of it, or of an agent, is never etcd's outage), so after
//! such a crash a member's agent and etcd may still run: the next `quorate up` leaves their
//! ports to them (the new supervisor adopts the agent, a restarted agent adopts etcd, by
//! evidence), and `quorate down` stops them.

use crate::LocalError;
use crate::state_dir::ClusterDir;
use std::time::Duration;

/// PIDs of the etcd processes running on `member`'s data directory (found by the
/// `--data-dir=` argument the agent gives every etcd it starts).
pub fn running_etcd(dir: &ClusterDir, member: &str) -> Vec<u32> {
    let flag = format!("--data-dir={}", dir.member_data(member).display());
    quorate_proc::pids_with_arg(&flag)
}

/// Members with a directory in the cluster's state directory.
fn members(dir: &ClusterDir) -> Vec<String> {
    std::fs::read_dir(dir.root().join("members"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect()
}

/// Whether `member`'s agent or etcd still runs (its ports are theirs).
pub fn member_runs(dir: &ClusterDir, member: &str) -> bool {
    !running_etcd(dir, member).is_empty()
        || !crate::agents::recorded_running(dir, &[member.to_string()]).is_empty()
}

/// Stops every agent and etcd of the cluster that runs without a supervisor: the agents by
/// SIGTERM (each stops its etcd cleanly), then any etcd left by SIGTERM; SIGKILL for what is
/// still there after `timeout`.
pub async fn stop_all(dir: &ClusterDir, timeout: Duration) -> Result<(), LocalError> {
    let agents = crate::agents::recorded_running(dir, &members(dir));
    if !agents.is_empty() {
        tracing::info!(?agents, "stopping agents that ran without their supervisor");
        for pid in &agents {
            let pid = nix::unistd::Pid::from_raw(*pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        while !crate::agents::recorded_running(dir, &members(dir)).is_empty()
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let pids: Vec<u32> = members(dir)
        .iter()
        .flat_map(|m| running_etcd(dir, m))
        .collect();
    if pids.is_empty() {
        return Ok(());
    }
    tracing::info!(
        ?pids,
        "stopping etcd processes that ran without their supervisor"
    );
    let signal = |pid: u32, signal| {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
    };
    for pid in &pids {
        signal(*pid, nix::sys::signal::Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left: Vec<u32> = members(dir)
            .iter()
            .flat_map(|m| running_etcd(dir, m))
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            for pid in &left {
                signal(*pid, nix::sys::signal::Signal::SIGKILL);
            }
            return Err(LocalError::Timeout {
                what: format!("etcd processes {left:?} stopping"),
                seconds: timeout.as_secs(),
                hint: "they were killed; `quorate up` starts the members again on their data"
                    .into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
