//! Test helpers shared by quorate's crates: real etcd members and clusters, a real
//! kube-apiserver, free ports, kill-on-drop process guards and throwaway TLS certificates. Tests
//! use the real binaries, never mocks; everything started here dies when its guard drops, even
//! when a test panics.

pub mod agent_objects;
pub mod binaries;
pub mod child;
pub mod cluster;
pub mod etcd;
pub mod etcd_crd;
pub mod kube_apiserver;
pub mod moto;
pub mod ports;
pub mod swift;
pub mod tls;
pub mod wait;

pub use agent_objects::{AgentConfig, create_agent_objects};
pub use binaries::{
    REQUIRE_ETCD_ENV, etcd_binary, etcd_of_version_or_skip, etcd_version_required, etcdctl_binary,
};
pub use child::ChildGuard;
pub use cluster::{CLUSTER_READY_TIMEOUT, EtcdTestCluster};
pub use etcd::{
    ClusterState, EtcdMemberConfig, EtcdProcess, NotReady, RaftTiming, ServerTlsFiles,
    format_initial_cluster,
};
pub use etcd_crd::{
    etcd_test_namespace, install_etcd_crd, install_etcd_crd_for_server, install_task_crds,
};
pub use kube_apiserver::{KubeApiServer, KubeApiServerError, k8s_bin_dir, kubectl_binary};
pub use moto::{MotoServer, moto_binary};
pub use nix::sys::signal::Signal;
pub use ports::{PortBlock, free_port};
pub use swift::{
    ApplicationCredential, KEYSTONE_PASSWORD, KEYSTONE_PROJECT, KEYSTONE_REGION, KEYSTONE_USER,
    SWIFT_ACCOUNT, SWIFT_KEY, SWIFT_USER, SwiftServer, swift_bin_dir,
};
pub use tempfile::TempDir;
pub use tls::TestCerts;
pub use wait::eventually;
