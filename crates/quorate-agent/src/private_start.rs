//! A lone member's data, looked at before any client can reach it: etcd is started on its data
//! with its client listener on a private loopback port, asked for its cluster ID and revision,
//! and stopped again. Only then is it compared with the bucket (and maybe replaced), so no write
//! is ever acknowledged on data that is about to be moved aside (etcd-backup-restore validates
//! with an embedded etcd for the same reason).

use crate::etcd_process::{EtcdProcess, Lifetime};
use crate::options::AgentOptions;
use crate::wait::Wait;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::member_etcd_config::{StartMode, member_etcd_config};
use quorate_etcd::{EtcdTls, MemberClient};
use std::time::Duration;

/// How long etcd may take to open its data (WAL replay included) on the private port.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);

/// What etcd reports about this member's data: (cluster ID, revision).
pub async fn data_facts(cluster: &ClusterConfig, opts: &AgentOptions) -> Result<(u64, i64), Wait> {
    let me = &opts.member;
    let data_dir = opts.data_dir.display().to_string();
    let mut config = member_etcd_config(cluster, me, &data_dir, &StartMode::Restart)
        .map_err(|e| Wait::new(e.to_string()))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Wait::new(format!("no free loopback port to check the data on: {e}")))?
        .port();
    let scheme = if cluster.client_tls.is_some() {
        "https"
    } else {
        "http"
    };
    let private = format!("{scheme}://127.0.0.1:{port}");
    config.runtime.listen_client_urls = private.clone();
    config.runtime.advertise_client_urls = private.clone();
    let binary = opts
        .etcd_binaries
        .etcd(cluster.etcd_version)
        .map_err(|missing| Wait::new(missing.to_string()))?;
    let mut process = EtcdProcess::spawn(
        &binary,
        &config.to_args(),
        &opts.etcd_log,
        Lifetime::DiesWithAgent,
    )
    .map_err(|e| Wait::new(e.to_string()))?;
    // The server certificate names the member's real address, not the private one.
    let tls = quorate_etcd::client_tls(cluster).map(|tls| EtcdTls {
        domain_name: cluster
            .member(me)
            .and_then(|m| host_of(&m.client_url))
            .map(String::from),
        ..tls
    });
    let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
    let answer = loop {
        if let Ok(client) =
            MemberClient::connect(&private, tls.as_ref(), crate::executor::timeouts()).await
            && let Ok(status) = client.status().await
        {
            break Ok((status.cluster_id, status.revision));
        }
        if tokio::time::Instant::now() > deadline {
            break Err(Wait::new(format!(
                "etcd did not open {data_dir} on a private port within {}s to check it against \
                 the backups; see {}",
                OPEN_TIMEOUT.as_secs(),
                opts.etcd_log.display()
            )));
        }
        tokio::select! {
            status = process.wait() => {
                let why = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                break Err(Wait::new(format!("etcd exited ({why}) while opening {data_dir} to check it")));
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    };
    process.stop(Duration::from_secs(10)).await;
    answer
}

fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    Some(authority.rsplit_once(':').map_or(authority, |(h, _)| h))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_of_a_client_url() {
        assert_eq!(
            super::host_of("https://etcd-main-0.etcd-main-peer.ns.svc:2379"),
            Some("etcd-main-0.etcd-main-peer.ns.svc")
        );
        assert_eq!(super::host_of("http://127.0.0.1:2379"), Some("127.0.0.1"));
    }
}
