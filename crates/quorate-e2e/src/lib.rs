//! The end-to-end harness: quorate's operator and agents on a real Kubernetes cluster, checked
//! the way a user checks them (`kubectl get etcd -o wide`, a client pod writing through the
//! `<name>-client` Service, the backup bucket).
//!
//! The suite (`tests/e2e.rs`) runs against any cluster whose kubeconfig is in
//! `QUORATE_E2E_KUBECONFIG`, with the operator already installed there; `scripts/e2e.sh` builds
//! the image, brings up the node kit (or loads the image into the given cluster), installs the
//! operator and runs it. Without `QUORATE_E2E_KUBECONFIG` every test prints `SKIPPED` and
//! passes, unless `CI` and `QUORATE_E2E=1` are both set: then it fails.
//!
//! Each scenario gets its own namespace ([`Scenario`]), deleted again when it passes and left for
//! inspection when it fails. Where the cluster has no storage provisioner
//! (`QUORATE_E2E_HOSTPATH_DIR`), [`provisioner`] binds each claim of the scenario to a hostPath
//! PersistentVolume of its own and removes it once released. Timings go to the file named by
//! `QUORATE_E2E_RESULTS`, from which `scripts/e2e.sh` writes `docs/e2e/results.md`.

pub mod cluster;
pub mod env;
pub mod etcd;
pub mod manifests;
pub mod members;
pub mod nodes;
pub mod observe;
pub mod provisioner;
pub mod scenario;
pub mod tls;
pub mod wait;

pub use cluster::{Cluster, KubectlOutput};
pub use env::E2eEnv;
pub use etcd::{condition_status, status_summary};
pub use observe::namespace_state;
pub use scenario::Scenario;
pub use wait::wait_for;
