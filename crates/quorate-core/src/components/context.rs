//! What the builders need that is not in the `Etcd`: the operator's images and settings, and
//! the few facts the controller has observed (kept out of the builders so they stay pure).

use crate::scale_plan::RunningMembers;

/// Inputs to the component builders besides the `Etcd` itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentContext {
    /// Image of the member container; holds both the `quorate` and the `etcd` binaries.
    /// `spec.etcd.image` and `spec.backup.image` name druid's etcd-wrapper and
    /// backup-restore images, which cannot run the agent, so they are not used.
    pub image: String,
    /// Image of the init container that hands a `Local` bucket directory to the non-root
    /// user (druid uses alpine from its image vector); it needs `chown`.
    pub init_image: String,
    /// The operator's `--disable-etcd-serviceaccount-automount`: the ServiceAccount then
    /// has `automountServiceAccountToken: false` (the agent needs a token from elsewhere).
    pub disable_service_account_automount: bool,
    /// Members that bootstrapped the cluster, as recorded when it first ran members; `None`
    /// for a cluster that never ran, whose desired members will all bootstrap it. An empty
    /// list (a cluster adopted from druid, whose bootstrap set is unknown) makes every member
    /// start from its data or join, never bootstrap.
    pub bootstrap_members: Option<Vec<String>>,
    /// Host directory holding `Local` buckets: the `hostPath` key of the store Secret, read by
    /// the controller; `None` means [`super::paths::DEFAULT_LOCAL_BACKUP_HOST_PATH`].
    pub local_backup_host_path: Option<String>,
    /// The member pods that run, when they are not exactly `spec.replicas` (members leaving in
    /// a scale-in, a hibernation waiting for its final snapshot): decided by the controller
    /// from the evidence (`crate::scale_plan`). `None`: the desired members.
    pub running: Option<RunningMembers>,
    /// The etcd version the members run, decided by the controller from the `Etcd`'s request
    /// and the version the cluster runs (`crate::etcd_version::decide`).
    pub etcd_version: quorate_api::EtcdVersion,
}

impl ComponentContext {
    /// A context with the given member image and druid's defaults for everything else.
    pub fn new(image: impl Into<String>, init_image: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            init_image: init_image.into(),
            disable_service_account_automount: false,
            bootstrap_members: None,
            local_backup_host_path: None,
            running: None,
            etcd_version: quorate_api::EtcdVersion::DEFAULT,
        }
    }

    /// How many member pods run.
    pub fn run_replicas(&self, etcd: &quorate_api::Etcd) -> i32 {
        self.running
            .as_ref()
            .map_or(etcd.spec.replicas, |r| r.replicas)
    }

    /// The running members that are leaving.
    pub fn leaving(&self) -> &[String] {
        self.running.as_ref().map_or(&[], |r| r.leaving.as_slice())
    }

    /// The host directory of `Local` buckets.
    pub fn local_backup_host_path(&self) -> &str {
        self.local_backup_host_path
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or(super::paths::DEFAULT_LOCAL_BACKUP_HOST_PATH)
    }
}
