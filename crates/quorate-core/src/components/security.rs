//! The security settings of every pod quorate makes (member pods, copy Jobs): Kubernetes'
//! "restricted" profile. Containers run as a non-root user (unless `spec.runAsRoot`), with a
//! read-only root filesystem (everything they write is on a volume: data, the TLS emptyDir,
//! the bucket), no privilege escalation, every capability dropped and the runtime's default
//! seccomp profile. The one exception is the container that hands a `Local` bucket directory
//! to the members' user: it runs as root with only `CAP_CHOWN`.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, SeccompProfile, SecurityContext, VolumeMount,
};
use quorate_api::defaults::NON_ROOT_USER_ID;

/// Name of the init container that changes the owner of a `Local` bucket (druid's).
pub const CHANGE_BACKUP_BUCKET_PERMISSIONS: &str = "change-backup-bucket-permissions";

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_string(),
        localhost_profile: None,
    }
}

/// The pod's settings: uid/gid 65532 (or root with `run_as_root`), files of mounted volumes
/// group-owned by it (changed only when the volume root does not match already, so large data
/// volumes do not delay every start), the runtime's default seccomp profile.
pub fn pod(run_as_root: bool) -> PodSecurityContext {
    let id = if run_as_root { 0 } else { NON_ROOT_USER_ID };
    PodSecurityContext {
        run_as_user: Some(id),
        run_as_group: Some(id),
        run_as_non_root: Some(!run_as_root),
        fs_group: Some(id),
        fs_group_change_policy: Some("OnRootMismatch".to_string()),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..PodSecurityContext::default()
    }
}

/// A container's settings: read-only root filesystem, no escalation, no capabilities.
pub fn container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..SecurityContext::default()
    }
}

/// The init container that gives the bucket directory `path` (mounted by `mount`, created by
/// the kubelet as root) to the members' user: root, with `CAP_CHOWN` only.
pub fn chown_bucket_container(init_image: &str, path: &str, mount: VolumeMount) -> Container {
    Container {
        name: CHANGE_BACKUP_BUCKET_PERMISSIONS.to_string(),
        image: Some(init_image.to_string()),
        image_pull_policy: Some("IfNotPresent".to_string()),
        command: Some(vec!["sh".into(), "-c".into(), "--".into()]),
        args: Some(vec![format!(
            "chown -R {NON_ROOT_USER_ID}:{NON_ROOT_USER_ID} {path}"
        )]),
        volume_mounts: Some(vec![mount]),
        security_context: Some(SecurityContext {
            run_as_group: Some(0),
            run_as_non_root: Some(false),
            run_as_user: Some(0),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                add: Some(vec!["CHOWN".to_string()]),
            }),
            ..container()
        }),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_restricted_and_the_chown_container_keeps_only_chown() {
        let c = container();
        assert_eq!(c.read_only_root_filesystem, Some(true));
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(c.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        let chown = chown_bucket_container("alpine", "/b", VolumeMount::default());
        let s = chown.security_context.unwrap();
        assert_eq!(s.run_as_user, Some(0));
        assert_eq!(s.read_only_root_filesystem, Some(true));
        assert_eq!(s.capabilities.unwrap().add.unwrap(), ["CHOWN"]);
        let p = pod(false);
        assert_eq!(p.run_as_non_root, Some(true));
        assert_eq!(p.seccomp_profile.unwrap().type_, "RuntimeDefault");
    }
}
