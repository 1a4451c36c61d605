//! A bootstrapped n-member etcd cluster in one temp dir, for tests that need a real cluster.

use std::path::Path;
use std::time::Duration;

use tempfile::TempDir;

use crate::etcd::{ClusterState, EtcdMemberConfig, EtcdProcess, NotReady};

/// How long a fresh cluster may take to elect a leader and serve reads on a loaded machine.
pub const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);

const START_ATTEMPTS: usize = 3;

/// Real etcd members sharing one temp dir; all are killed before the dir is removed.
#[derive(Debug)]
pub struct EtcdTestCluster {
    // Field order matters: members drop (and die) before the directory is deleted.
    members: Vec<EtcdProcess>,
    token: String,
    dir: TempDir,
}

impl EtcdTestCluster {
    /// Bootstraps `n` members (`m0`, `m1`, …) with test timing and waits until all are ready.
    /// Panics with the members' log tails if the cluster does not come up.
    pub async fn start(n: usize) -> EtcdTestCluster {
        Self::start_with(n, |_| {}).await
    }

    /// Like [`EtcdTestCluster::start`], letting `customize` edit each member's config (TLS,
    /// timing, extra flags) before launch. Ports, names and `initial-cluster` are already set.
    pub async fn start_with(n: usize, customize: impl Fn(&mut EtcdMemberConfig)) -> Self {
        assert!(n > 0, "a cluster needs at least one member");
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(n, &customize).await {
                Ok(cluster) => return cluster,
                // Another process grabbed one of our ports between probe and bind: new ports.
                Err(e) if e.is_port_clash() => last_error = Some(e),
                Err(e) => panic!("etcd test cluster of {n} did not start: {e}"),
            }
        }
        panic!(
            "etcd test cluster of {n} did not start after {START_ATTEMPTS} attempts: {}",
            last_error.expect("at least one attempt failed")
        );
    }

    async fn try_start(
        n: usize,
        customize: &impl Fn(&mut EtcdMemberConfig),
    ) -> Result<EtcdTestCluster, NotReady> {
        let dir = tempfile::Builder::new()
            .prefix("quorate-etcd-")
            .tempdir()
            .expect("create temp dir for etcd test cluster");
        let token = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "quorate-etcd".to_string());
        let mut configs: Vec<EtcdMemberConfig> = (0..n)
            .map(|i| EtcdMemberConfig::new(&format!("m{i}"), dir.path()))
            .collect();
        for config in &mut configs {
            config.initial_cluster_token = token.clone();
            customize(config);
        }
        // URLs may depend on the customization (TLS switches the scheme), so compute last.
        let initial: Vec<(String, String)> = configs
            .iter()
            .map(|c| (c.name.clone(), c.peer_url()))
            .collect();
        let mut members = Vec::with_capacity(n);
        for mut config in configs {
            config.initial_cluster = initial.clone();
            config.initial_cluster_state = ClusterState::New;
            let process = EtcdProcess::start(config.clone())
                .map_err(|e| NotReady::spawn_failed(&config, e))?;
            members.push(process);
        }
        let mut cluster = EtcdTestCluster {
            members,
            token,
            dir,
        };
        for member in &mut cluster.members {
            member.wait_ready(CLUSTER_READY_TIMEOUT).await?;
        }
        Ok(cluster)
    }

    /// The directory holding all data dirs and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The members, in start order (including ones added later with [`EtcdTestCluster::add`]).
    pub fn members(&self) -> &[EtcdProcess] {
        &self.members
    }

    /// Member `i`.
    pub fn member(&self, i: usize) -> &EtcdProcess {
        &self.members[i]
    }

    /// Member `i`, mutable (to kill or restart it).
    pub fn member_mut(&mut self, i: usize) -> &mut EtcdProcess {
        &mut self.members[i]
    }

    /// Client URLs of all members.
    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url()).collect()
    }

    /// `(name, peer URL)` of every member process this cluster owns.
    pub fn initial_cluster_entries(&self) -> Vec<(String, String)> {
        self.members
            .iter()
            .map(|m| (m.name().to_string(), m.peer_url()))
            .collect()
    }

    /// A config for a member that will join this cluster (`initial-cluster-state=existing`),
    /// with fresh ports, its dirs inside the cluster dir, and member 0's timing and TLS.
    /// The caller adds it through the membership API and fills in `initial_cluster` from the
    /// member list that call returns.
    pub fn new_member_config(&self, name: &str) -> EtcdMemberConfig {
        let template = self.members[0].config();
        let mut config = EtcdMemberConfig::new(name, self.dir.path());
        config.initial_cluster_state = ClusterState::Existing;
        config.initial_cluster_token = self.token.clone();
        config.timing = template.timing;
        config.client_tls = template.client_tls.clone();
        config.peer_tls = template.peer_tls.clone();
        config.extra_args = template.extra_args.clone();
        config.initial_cluster = Vec::new();
        config
    }

    /// Takes ownership of a member process started outside (e.g. a joining learner), so it is
    /// killed with the cluster. Returns its index.
    pub fn add(&mut self, process: EtcdProcess) -> usize {
        self.members.push(process);
        self.members.len() - 1
    }
}
