//! The volumes of a member pod and where the member container mounts them: the data PVC,
//! the directory the agent writes the TLS Secrets into, and the backup store (its credentials Secret, or the
//! host directory of a `Local` bucket with an init container that hands it to the non-root
//! user, as druid does).

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, HostPathVolumeSource, SecretVolumeSource, Volume, VolumeMount,
};
use quorate_api::Etcd;
use quorate_api::names::volume_claim_template_name;
use quorate_api::provider::StorageProvider;

use super::cluster_config::mounts_store_secret;
use super::context::ComponentContext;
use super::paths::{BACKUP_SECRET_MOUNT, DATA_MOUNT, local_backup_mount, volume};
use super::tls_secrets::TLS_DIR;

/// File mode of mounted Secrets: owner read-write, group read (druid's `0640`); the pod's
/// `fsGroup` makes the group the container's.
pub const SECRET_FILE_MODE: i32 = 0o640;

/// Volumes of the pod and the member container's mounts of them (the data volume is the
/// PVC template and has a mount but no pod volume).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodVolumes {
    /// `spec.template.spec.volumes`.
    pub volumes: Vec<Volume>,
    /// The member container's `volumeMounts`.
    pub mounts: Vec<VolumeMount>,
}

impl PodVolumes {
    fn add(&mut self, volume: Volume, mount_path: &str) {
        self.mounts.push(mount(&volume.name, mount_path));
        self.volumes.push(volume);
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        ..VolumeMount::default()
    }
}

fn secret_volume(name: &str, secret: Option<&String>) -> Volume {
    Volume {
        name: name.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: secret.cloned(),
            default_mode: Some(SECRET_FILE_MODE),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Everything the member container mounts: data, the TLS directory the agent fills, the
/// backup store.
pub fn pod_volumes(etcd: &Etcd, ctx: &ComponentContext) -> PodVolumes {
    let mut v = PodVolumes::default();
    v.mounts
        .push(mount(&volume_claim_template_name(etcd), DATA_MOUNT));
    // Always there, TLS or not, so enabling TLS does not change the pod template: the agent
    // writes the TLS Secrets' files into it (`super::tls_secrets`).
    v.add(
        Volume {
            name: volume::TLS.to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
        TLS_DIR,
    );
    if let Some(store) = &etcd.spec.backup.store {
        if mounts_store_secret(etcd) {
            let secret = store.secret_ref.as_ref().and_then(|r| r.name.as_ref());
            v.add(
                secret_volume(volume::BACKUP_SECRET, secret),
                BACKUP_SECRET_MOUNT,
            );
        }
        if let Some(container) = local_container(etcd) {
            v.add(
                Volume {
                    name: volume::LOCAL_BACKUP.to_string(),
                    host_path: Some(HostPathVolumeSource {
                        path: format!("{}/{container}", ctx.local_backup_host_path()),
                        type_: Some("DirectoryOrCreate".to_string()),
                    }),
                    ..Volume::default()
                },
                &local_backup_mount(container),
            );
        }
    }
    v
}

/// The container of a `Local` store, when it has one (only then is a bucket mounted).
fn local_container(etcd: &Etcd) -> Option<&str> {
    let store = etcd.spec.backup.store.as_ref()?;
    if store.provider_kind() != Some(StorageProvider::Local) {
        return None;
    }
    store.container.as_deref().filter(|c| !c.is_empty())
}

/// Init containers of the pod: with a `Local` bucket and non-root members, one that gives the
/// bucket directory (created by the kubelet as root) to the member's user.
pub fn init_containers(etcd: &Etcd, ctx: &ComponentContext) -> Vec<Container> {
    let Some(container) = local_container(etcd) else {
        return Vec::new();
    };
    if etcd.spec.run_as_root() {
        return Vec::new();
    }
    let path = local_backup_mount(container);
    vec![super::security::chown_bucket_container(
        &ctx.init_image,
        &path,
        mount(volume::LOCAL_BACKUP, &path),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use k8s_openapi::api::core::v1::SecretReference as CoreSecretReference;
    use quorate_api::{PeerTlsConfig, SecretReference, StoreSpec, TlsConfig};

    fn ctx() -> ComponentContext {
        ComponentContext::new("quorate:test", "alpine:test")
    }

    fn secret(name: &str) -> CoreSecretReference {
        CoreSecretReference {
            name: Some(name.into()),
            namespace: None,
        }
    }

    fn mount_paths(v: &PodVolumes) -> Vec<&str> {
        v.mounts.iter().map(|m| m.mount_path.as_str()).collect()
    }

    #[test]
    fn without_backups_the_data_and_the_tls_directory_are_mounted() {
        let v = pod_volumes(&etcd("etcd-main", 3), &ctx());
        assert_eq!(mount_paths(&v), ["/var/etcd/data", "/var/etcd/ssl"]);
        assert_eq!(v.mounts[0].name, "etcd-main");
        assert!(v.volumes[0].empty_dir.is_some());
        assert!(init_containers(&etcd("etcd-main", 3), &ctx()).is_empty());
    }

    /// TLS Secrets are not mounted (the agent writes their files): enabling TLS leaves the
    /// pod's volumes as they are, so no pod is replaced for it.
    #[test]
    fn tls_changes_no_volume() {
        let mut e = etcd("etcd-main", 3);
        let before = pod_volumes(&e, &ctx());
        e.spec.etcd.peer_url_tls = Some(PeerTlsConfig {
            tls_ca_secret_ref: SecretReference {
                name: Some("peer-ca".into()),
                ..SecretReference::default()
            },
            server_tls_secret_ref: secret("peer-server"),
            ..PeerTlsConfig::default()
        });
        e.spec.etcd.client_url_tls = Some(TlsConfig {
            server_tls_secret_ref: secret("server"),
            client_tls_secret_ref: Some(secret("client")),
            ..TlsConfig::default()
        });
        assert_eq!(pod_volumes(&e, &ctx()), before);
        let files: Vec<(String, String)> = crate::components::tls_secrets::tls_secret_files(&e)
            .into_iter()
            .map(|f| (f.secret, f.dir))
            .collect();
        let expect = |s: &str, d: &str| (s.to_string(), d.to_string());
        // The client CA Secret has no name here: left out.
        assert_eq!(
            files,
            [
                expect("server", "/var/etcd/ssl/server"),
                expect("client", "/var/etcd/ssl/client"),
                expect("peer-ca", "/var/etcd/ssl/peer/ca"),
                expect("peer-server", "/var/etcd/ssl/peer/server"),
            ]
        );
    }

    #[test]
    fn store_secret_is_mounted_for_cloud_providers() {
        let mut e = etcd("etcd-main", 3);
        e.spec.backup.store = Some(StoreSpec {
            provider: Some("gcp".into()),
            container: Some("bucket".into()),
            prefix: "p".into(),
            secret_ref: Some(secret("creds")),
            ..StoreSpec::default()
        });
        let v = pod_volumes(&e, &ctx());
        assert_eq!(
            mount_paths(&v),
            ["/var/etcd/data", "/var/etcd/ssl", "/var/etcd-backup"]
        );
        assert!(init_containers(&e, &ctx()).is_empty());
        // Without a secretRef the provider's default credentials are used; nothing to mount.
        if let Some(s) = e.spec.backup.store.as_mut() {
            s.secret_ref = None;
        }
        assert_eq!(
            mount_paths(&pod_volumes(&e, &ctx())),
            ["/var/etcd/data", "/var/etcd/ssl"]
        );
    }

    #[test]
    fn local_bucket_is_a_host_path_chowned_for_non_root() {
        let mut e = etcd("etcd-main", 3);
        e.spec.backup.store = Some(StoreSpec {
            provider: Some("Local".into()),
            container: Some("bucket".into()),
            prefix: "p".into(),
            secret_ref: Some(secret("local")),
            ..StoreSpec::default()
        });
        let mut c = ctx();
        let v = pod_volumes(&e, &c);
        assert_eq!(
            mount_paths(&v),
            [
                "/var/etcd/data",
                "/var/etcd/ssl",
                "/var/etcd/backups/bucket"
            ]
        );
        let host = v.volumes[1].host_path.clone().unwrap();
        assert_eq!(host.path, "/etc/gardener/local-backupbuckets/bucket");
        assert_eq!(host.type_.as_deref(), Some("DirectoryOrCreate"));
        c.local_backup_host_path = Some("/srv/buckets".into());
        let v = pod_volumes(&e, &c);
        assert_eq!(
            v.volumes[1].host_path.as_ref().unwrap().path,
            "/srv/buckets/bucket"
        );
        let init = init_containers(&e, &c);
        assert_eq!(init.len(), 1);
        assert_eq!(init[0].image.as_deref(), Some("alpine:test"));
        assert_eq!(
            init[0].args.as_ref().unwrap()[0],
            "chown -R 65532:65532 /var/etcd/backups/bucket"
        );
        e.spec.run_as_root = Some(true);
        assert!(init_containers(&e, &c).is_empty());
    }
}
