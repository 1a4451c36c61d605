//! `quorate agent`: one per etcd member. It replaces etcd-druid's etcd-wrapper and
//! backup-restore sidecars with one process that owns the member's lifecycle: it decides how the
//! member starts, runs etcd as a child, restarts it when its configuration changes, promotes it
//! from learner, renews its member lease and serves `/healthz`.

pub mod adopt;
pub mod backup;
mod backup_hash;
mod certificates;
pub mod clock;
mod duties;
pub mod etcd_process;
pub mod etcd_version;
pub mod executor;
mod facts;
pub mod http;
pub mod keeper;
mod listener;
pub mod member;
pub mod metrics;
pub mod options;
mod private_start;
pub mod publish;
pub mod restore;
pub mod secret_files;
pub mod start;
pub mod state;
pub mod wait;

pub use member::{AgentError, AgentExit, run_agent};
pub use options::AgentOptions;
pub use state::SharedState;

use quorate_coord::Coordination;
use quorate_core::agent_exit::{AGENT_EXIT_REMOVED, LAST_DELTA_SECONDS};
use std::net::SocketAddr;
use tokio::sync::watch;

/// Runs the agent: its HTTP server on `listen` and the member loop, until `shutdown` turns true
/// or the member is removed.
pub async fn serve<C: Coordination + Clone>(
    coord: C,
    opts: AgentOptions,
    listen: SocketAddr,
    shutdown: watch::Receiver<bool>,
) -> Result<AgentExit, ServeError> {
    // Every series names the cluster and the member (the configuration was read before).
    let cluster = coord
        .cluster_config()
        .await
        .map(|c| c.cluster_name)
        .unwrap_or_default();
    let state = SharedState::with_metrics(metrics::AgentMetrics::new(&cluster, &opts.member));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: listen,
            source,
        })?;
    let (backups, requests) = tokio::sync::mpsc::channel(4);
    let app = http::router(http::Http {
        state: state.clone(),
        backups,
        coord: coord.clone(),
        guard: http::Guard::default(),
    });
    let backup_loop = tokio::spawn(backup::run_backups(
        coord.clone(),
        opts.member.clone(),
        state.clone(),
        requests,
        shutdown.clone(),
    ));
    let backups = backup_loop.abort_handle();
    let server = tokio::spawn(listener::serve(
        listener,
        app,
        state.clone(),
        shutdown.clone(),
    ));
    let etcd_stop = stop_etcd_after_last_delta(shutdown, backup_loop, opts.member.clone());
    let result = run_agent(coord, opts, state, etcd_stop).await;
    server.abort();
    backups.abort();
    Ok(result?)
}

/// The member loop's stop signal: on `shutdown`, the backup loop first takes its last delta
/// (it stops its capture, which catches up with etcd once more and uploads what it holds)
/// within [`LAST_DELTA_SECONDS`]; only then is etcd stopped. A member that does not lead
/// backs nothing up, so its loop ends at once and etcd stops without delay.
fn stop_etcd_after_last_delta(
    mut shutdown: watch::Receiver<bool>,
    backup_loop: tokio::task::JoinHandle<()>,
    member: String,
) -> watch::Receiver<bool> {
    let (stop, stopping) = watch::channel(false);
    tokio::spawn(async move {
        // A closed channel stops too, as it always did.
        let _ = shutdown.wait_for(|stop| *stop).await;
        let started = std::time::Instant::now();
        let backups = backup_loop.abort_handle();
        let bound = std::time::Duration::from_secs(LAST_DELTA_SECONDS);
        match tokio::time::timeout(bound, backup_loop).await {
            Ok(_) => tracing::info!(
                %member,
                took_ms = started.elapsed().as_millis() as u64,
                "stopping: backups ended; stopping etcd"
            ),
            Err(_) => {
                backups.abort();
                tracing::warn!(
                    %member,
                    bound_s = LAST_DELTA_SECONDS,
                    "stopping: the last delta did not finish in time; stopping etcd anyway"
                );
            }
        }
        // Sent, then dropped, as the signal handler does: every wait on it ends at once.
        let _ = stop.send(true);
    });
    stopping
}

impl AgentExit {
    /// The process exit code that tells the agent's supervisor how it ended: 0 for a requested
    /// stop, [`AGENT_EXIT_REMOVED`] for a removed member (which must not be restarted).
    pub fn code(self) -> u8 {
        match self {
            AgentExit::Shutdown => 0,
            AgentExit::Removed => AGENT_EXIT_REMOVED,
        }
    }
}

/// A failure that ends the agent.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The HTTP port is taken.
    #[error("agent cannot listen on {addr}: {source}; another process uses this port")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The member loop failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
}
