//! A static hostPath provisioner for clusters that have none (the node kit): every claim of
//! the scenario's namespace that has no volume and no storage class gets a PersistentVolume of
//! its own, pre-bound to it, on a fresh directory under `QUORATE_E2E_HOSTPATH_DIR`; a volume
//! whose claim is gone (Released) is deleted with its directory. The directories are mode 0777,
//! as the usual local-path provisioners make them, since a hostPath volume does not get the
//! pod's `fsGroup`. It acts on every change of the namespace's claims as it is watched (a
//! StatefulSet's pod waits in the scheduler until its claim is bound), and once a second
//! besides.
//!
//! Claims of the StorageClass [`NODE_LOCAL_CLASS`] get node-bound volumes instead, as local disks
//! are on a real cluster: the class binds at the first consumer, and each node keeps a small pool
//! of `local` volumes whose node affinity names it, so the scheduler places a pod on a node with a
//! free volume and the pod stays with that node (a drained node's member waits for the node).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, LocalVolumeSource, Node, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use tokio::task::JoinHandle;

/// Label on the volumes made for a namespace.
pub const NAMESPACE_LABEL: &str = "e2e.quorate.io/namespace";

/// The StorageClass of node-bound volumes (`spec.storageClass` of an `Etcd` that wants them).
pub const NODE_LOCAL_CLASS: &str = "quorate-e2e-node-local";

/// Label on a node-bound volume: the node it lives on.
const NODE_LABEL: &str = "e2e.quorate.io/node";

/// Free node-bound volumes kept per node and namespace.
const POOL_PER_NODE: usize = 2;

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
    let mut claim_changes = kube::runtime::watcher(claims.clone(), Default::default())
        .default_backoff()
        .boxed();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let mine = ListParams::default().labels(&format!("{NAMESPACE_LABEL}={namespace}"));
    let nodes: Api<Node> = Api::all(client.clone());
    let classes: Api<StorageClass> = Api::all(client);
    let mut class_made = false;
    loop {
        if !class_made {
            class_made = ensure_node_local_class(&classes).await;
        }
        if let Ok(list) = nodes.list(&ListParams::default()).await {
            let names: Vec<String> = list.into_iter().filter_map(|n| n.metadata.name).collect();
            fill_node_pools(&pvs, &mine, &names, &namespace, &dir).await;
        }
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
                    let path = pv.spec.as_ref().and_then(|s| {
                        s.host_path
                            .as_ref()
                            .map(|h| h.path.clone())
                            .or_else(|| s.local.as_ref().map(|l| l.path.clone()))
                    });
                    if pvs.delete(&name, &DeleteParams::default()).await.is_ok() {
                        if let Some(path) = path {
                            let _ = std::fs::remove_dir_all(&path);
                        }
                        println!("  [provisioner] released PersistentVolume {name} deleted");
                    }
                }
            }
        }
        // The next claim change, or a second.
        let _ = tokio::time::timeout(Duration::from_secs(1), claim_changes.next()).await;
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

/// Creates the [`NODE_LOCAL_CLASS`] StorageClass unless it exists; true once it does.
async fn ensure_node_local_class(classes: &Api<StorageClass>) -> bool {
    if classes
        .get_opt(NODE_LOCAL_CLASS)
        .await
        .ok()
        .flatten()
        .is_some()
    {
        return true;
    }
    let class = StorageClass {
        metadata: ObjectMeta {
            name: Some(NODE_LOCAL_CLASS.into()),
            ..ObjectMeta::default()
        },
        provisioner: "kubernetes.io/no-provisioner".into(),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        reclaim_policy: Some("Retain".into()),
        ..StorageClass::default()
    };
    match classes.create(&PostParams::default(), &class).await {
        Ok(_) => true,
        Err(e) => {
            println!("  [provisioner] creating StorageClass {NODE_LOCAL_CLASS}: {e}");
            false
        }
    }
}

/// Tops up every node's pool of free node-bound volumes for `namespace` to [`POOL_PER_NODE`].
async fn fill_node_pools(
    pvs: &Api<PersistentVolume>,
    mine: &ListParams,
    nodes: &[String],
    namespace: &str,
    dir: &Path,
) {
    let Ok(list) = pvs.list(mine).await else {
        return;
    };
    for node in nodes {
        let free = list
            .iter()
            .filter(|pv| {
                pv.metadata.labels.as_ref().and_then(|l| l.get(NODE_LABEL)) == Some(node)
                    && pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_none())
            })
            .count();
        for _ in free..POOL_PER_NODE {
            let pv = node_volume(node, namespace, dir);
            let path = PathBuf::from(
                &pv.spec
                    .as_ref()
                    .and_then(|s| s.local.as_ref())
                    .expect("a local volume")
                    .path,
            );
            if let Err(e) = make_dir(&path) {
                println!("  [provisioner] cannot make {}: {e}", path.display());
                return;
            }
            let name = pv.metadata.name.clone().unwrap_or_default();
            match pvs.create(&PostParams::default(), &pv).await {
                Ok(_) => println!("  [provisioner] PersistentVolume {name} on node {node}"),
                Err(e) => println!("  [provisioner] creating {name}: {e}"),
            }
        }
    }
}

/// A free `local` volume on `node` (node affinity to it) of [`NODE_LOCAL_CLASS`], 1 GiB.
fn node_volume(node: &str, namespace: &str, dir: &Path) -> PersistentVolume {
    static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("e2e-{namespace}-{node}-{}-{n}", std::process::id());
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([
                (NAMESPACE_LABEL.to_string(), namespace.to_string()),
                (NODE_LABEL.to_string(), node.to_string()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([(
                "storage".to_string(),
                Quantity("1Gi".into()),
            )])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            persistent_volume_reclaim_policy: Some("Retain".into()),
            storage_class_name: Some(NODE_LOCAL_CLASS.into()),
            local: Some(LocalVolumeSource {
                path: dir.join(node).join(&name).display().to_string(),
                fs_type: None,
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![node.to_string()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
}
