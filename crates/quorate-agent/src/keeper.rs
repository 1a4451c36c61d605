//! The keeper of a member pod's agent: the container's main process when `quorate agent
//! --kubernetes` runs, so that the agent's crash is not etcd's. In a pod the container lives
//! as long as its main process; were that the agent, its crash would end the container and
//! etcd with it. The keeper instead runs the agent as a worker (the same command, with
//! [`WORKER_ENV`] set), restarts a crashed worker with backoff, and is the child subreaper of
//! the pod: an etcd whose agent died is reparented to it (and reaped by it when it exits), so
//! it keeps serving until the next worker adopts it. SIGTERM is forwarded to the worker, whose
//! stop is the graceful one (last delta, then etcd); if no worker runs at that moment the keeper
//! stops the etcd it holds itself. A worker that ends on purpose (stopped, or its member was
//! removed) ends the keeper with the same exit code.

use quorate_core::agent_exit::{AGENT_EXIT_REMOVED, ETCD_STOP_SECONDS};
use std::ffi::OsString;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Set in the worker's environment: this process is the agent itself, not its keeper.
pub const WORKER_ENV: &str = "QUORATE_AGENT_WORKER";

/// Whether this process is a keeper's worker.
pub fn is_worker() -> bool {
    std::env::var_os(WORKER_ENV).is_some()
}

/// A worker that ran this long before crashing restarts without the backoff of a crash loop.
const STABLE: Duration = Duration::from_secs(60);

/// Runs workers (`quorate` at `exe` with `args`) until `shutdown` or a worker's deliberate end;
/// returns the exit code for the container.
pub async fn keep(exe: OsString, args: Vec<OsString>, mut shutdown: watch::Receiver<bool>) -> u8 {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become the child subreaper; an etcd whose agent crashed is reparented to init instead");
    }
    let mut crashes: u32 = 0;
    loop {
        if *shutdown.borrow() {
            stop_orphans().await;
            return 0;
        }
        let mut worker = match tokio::process::Command::new(&exe)
            .args(&args)
            .env(WORKER_ENV, "1")
            .stdin(std::process::Stdio::null())
            .spawn()
        {
            Ok(worker) => worker,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the agent worker");
                return 1;
            }
        };
        let started = Instant::now();
        tracing::info!(pid = ?worker.id(), "agent worker started");
        let mut forwarded = false;
        let status = loop {
            tokio::select! {
                status = worker.wait() => break status,
                _ = shutdown.wait_for(|stop| *stop), if !forwarded => {
                    forwarded = true;
                    if let Some(pid) = worker.id() {
                        let pid = nix::unistd::Pid::from_raw(pid as i32);
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                    }
                }
                _ = tokio::time::sleep(Duration::from_secs(1)) => reap_orphans(worker.id()),
            }
        };
        let stopping = *shutdown.borrow();
        match status {
            Ok(s)
                if stopping
                    || s.code() == Some(0)
                    || s.code() == Some(AGENT_EXIT_REMOVED.into()) =>
            {
                stop_orphans().await;
                return s.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1);
            }
            Ok(s) => {
                tracing::warn!(status = %s, "agent worker crashed; its etcd keeps serving and the next worker adopts it")
            }
            Err(e) => tracing::warn!(error = %e, "waiting for the agent worker failed"),
        }
        crashes = if started.elapsed() >= STABLE {
            1
        } else {
            crashes + 1
        };
        let backoff = Duration::from_millis(500) * 2u32.saturating_pow(crashes.min(6));
        tracing::info!(?backoff, "restarting the agent worker");
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
        reap_orphans(None);
    }
}

/// This process's children other than `worker`: etcd processes reparented to the keeper.
fn orphans(worker: Option<u32>) -> Vec<(u32, char)> {
    quorate_proc::children_of(std::process::id())
        .into_iter()
        .filter(|(pid, _)| Some(*pid) != worker)
        .map(|(pid, st)| (pid, st.state))
        .collect()
}

/// Reaps reparented processes that exited (zombies), so none lingers in the pod.
fn reap_orphans(worker: Option<u32>) {
    for (pid, state) in orphans(worker) {
        if state == 'Z' {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        }
    }
}

/// Stops the reparented processes (an etcd whose worker is gone): SIGTERM, SIGKILL after
/// etcd's stop time, and reaps them.
async fn stop_orphans() {
    let left = orphans(None);
    if left.is_empty() {
        return;
    }
    tracing::info!(pids = ?left.iter().map(|(p, _)| p).collect::<Vec<_>>(), "stopping the etcd no worker runs");
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(ETCD_STOP_SECONDS);
    loop {
        reap_orphans(None);
        let still = orphans(None);
        if still.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            for (pid, _) in still {
                let pid = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
