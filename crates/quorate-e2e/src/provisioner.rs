//! A static hostPath provisioner for clusters that have none (the node kit): every claim of
//! the scenario's namespace that has no volume and no storage class gets a PersistentVolume of
//! its own, pre-bound to it, on a fresh directory under `QUORATE_E2E_HOSTPATH_DIR`; a volume
//! whose claim is gone (Released) is deleted with its directory. The directories are mode 0777,
//! as the usual local-path provisioners make them, since a hostPath volume does not get the
//! pod's `fsGroup`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tokio::task::JoinHandle;

/// Label on the volumes made for a namespace.
pub const NAMESPACE_LABEL: &str = "e2e.quorate.io/namespace";

/// The running provisioner of one namespace; stopped on drop.
pub struct HostPathProvisioner {
    task: JoinHandle<()>,
    client: Client,
    namespace: String,
    dir: PathBuf,
}

impl HostPathProvisioner {
    /// Starts provisioning the claims of `namespace` under `root/<namespace>/`.
    pub fn start(client: Client, namespace: &str, root: &Path) -> HostPathProvisioner {
        let dir = root.join(namespace);
        let task = tokio::spawn(run(client.clone(), namespace.to_string(), dir.clone()));
        HostPathProvisioner {
            task,
            client,
            namespace: namespace.to_string(),
            dir,
        }
    }

    /// Stops, deletes every volume made for the namespace, and removes their directories.
    pub async fn cleanup(self) {
        self.task.abort();
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let list = pvs
            .list(&ListParams::default().labels(&format!("{NAMESPACE_LABEL}={}", self.namespace)))
            .await
            .expect("listing PersistentVolumes");
        for pv in list {
            let name = pv.metadata.name.clone().unwrap_or_default();
            let _ = pvs.delete(&name, &DeleteParams::default()).await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for HostPathProvisioner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(client: Client, namespace: String, dir: PathBuf) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let pvs: Api<PersistentVolume> = Api::all(client);
    let mine = ListParams::default().labels(&format!("{NAMESPACE_LABEL}={namespace}"));
    loop {
        if let Ok(list) = claims.list(&ListParams::default()).await {
            for claim in list {
                if let Some(pv) = volume_for(&claim, &namespace, &dir) {
                    let name = pv.metadata.name.clone().unwrap_or_default();
                    let path = pv
                        .spec
                        .as_ref()
                        .and_then(|s| s.host_path.as_ref())
                        .map(|h| PathBuf::from(&h.path))
                        .expect("a hostPath volume");
                    if pvs.get_opt(&name).await.ok().flatten().is_some() {
                        continue;
                    }
                    if let Err(e) = make_dir(&path) {
                        println!("  [provisioner] cannot make {}: {e}", path.display());
                        continue;
                    }
                    match pvs.create(&PostParams::default(), &pv).await {
                        Ok(_) => println!(
                            "  [provisioner] PersistentVolume {name} ({}) for claim {}",
                            path.display(),
                            claim.metadata.name.as_deref().unwrap_or("?")
                        ),
                        Err(e) => println!("  [provisioner] creating {name}: {e}"),
                    }
                }
            }
        }
        // Released: the claim was deleted (e.g. a member's PVC on purpose). Recycle.
        if let Ok(list) = pvs.list(&mine).await {
            for pv in list {
                let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
                if phase == Some("Released") {
                    let name = pv.metadata.name.clone().unwrap_or_default();
                    let path = pv
                        .spec
                        .as_ref()
                        .and_then(|s| s.host_path.as_ref())
                        .map(|h| h.path.clone());
                    if pvs.delete(&name, &DeleteParams::default()).await.is_ok() {
                        if let Some(path) = path {
                            let _ = std::fs::remove_dir_all(&path);
                        }
                        println!("  [provisioner] released PersistentVolume {name} deleted");
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The volume for `claim` when it needs one from us: no volume yet, no storage class, pending.
fn volume_for(
    claim: &PersistentVolumeClaim,
    namespace: &str,
    dir: &Path,
) -> Option<PersistentVolume> {
    let spec = claim.spec.as_ref()?;
    if spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) {
        return None;
    }
    if spec
        .storage_class_name
        .as_deref()
        .is_some_and(|c| !c.is_empty())
    {
        return None;
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let name = claim.metadata.name.clone()?;
    let uid = claim.metadata.uid.clone()?;
    let short = &uid[..8.min(uid.len())];
    let capacity = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage").cloned())
        .unwrap_or_else(|| Quantity("1Gi".into()));
    Some(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(format!("e2e-{uid}")),
            labels: Some(BTreeMap::from([(
                NAMESPACE_LABEL.to_string(),
                namespace.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), capacity)])),
            access_modes: spec.access_modes.clone(),
            persistent_volume_reclaim_policy: Some("Retain".into()),
            host_path: Some(HostPathVolumeSource {
                path: dir.join(format!("{name}-{short}")).display().to_string(),
                type_: Some("Directory".into()),
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(namespace.to_string()),
                name: Some(name),
                uid: Some(uid),
                ..ObjectReference::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    })
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
}
