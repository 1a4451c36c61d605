//! Object-store providers: the names `spec.backup.store.provider` accepts (infrastructure
//! names like `aws` and store names like `S3`, exactly as etcd-druid maps them) and the one
//! store each name means.

use std::fmt;

/// The kind of object store that holds the backups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorageProvider {
    /// AWS S3 and S3-compatible stores (`aws`, `S3`, `stackit`).
    S3,
    /// Azure Blob Storage (`azure`, `ABS`).
    Abs,
    /// Google Cloud Storage (`gcp`, `GCS`).
    Gcs,
    /// OpenStack Swift (`openstack`, `Swift`).
    Swift,
    /// Alibaba Cloud OSS (`alicloud`, `OSS`).
    Oss,
    /// Dell ECS, S3-compatible (`dell`, `ECS`).
    Ecs,
    /// OpenShift Container Storage, S3-compatible (`openshift`, `OCS`).
    Ocs,
    /// A directory on the local file system (`Local`, `local`).
    Local,
}

/// Every spelling druid accepts, with the store it means.
const NAMES: &[(&str, StorageProvider)] = &[
    ("aws", StorageProvider::S3),
    ("S3", StorageProvider::S3),
    ("stackit", StorageProvider::S3),
    ("azure", StorageProvider::Abs),
    ("ABS", StorageProvider::Abs),
    ("gcp", StorageProvider::Gcs),
    ("GCS", StorageProvider::Gcs),
    ("openstack", StorageProvider::Swift),
    ("Swift", StorageProvider::Swift),
    ("alicloud", StorageProvider::Oss),
    ("OSS", StorageProvider::Oss),
    ("dell", StorageProvider::Ecs),
    ("ECS", StorageProvider::Ecs),
    ("openshift", StorageProvider::Ocs),
    ("OCS", StorageProvider::Ocs),
    ("Local", StorageProvider::Local),
    ("local", StorageProvider::Local),
];

impl StorageProvider {
    /// Maps a `provider` value to its store; `None` for names druid does not accept
    /// (matching is case-sensitive, as in druid).
    pub fn from_spec(name: &str) -> Option<StorageProvider> {
        NAMES.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }

    /// The store name etcd-backup-restore uses (`S3`, `ABS`, `GCS`, `Swift`, `OSS`, `ECS`,
    /// `OCS`, `Local`).
    pub fn as_str(self) -> &'static str {
        match self {
            StorageProvider::S3 => "S3",
            StorageProvider::Abs => "ABS",
            StorageProvider::Gcs => "GCS",
            StorageProvider::Swift => "Swift",
            StorageProvider::Oss => "OSS",
            StorageProvider::Ecs => "ECS",
            StorageProvider::Ocs => "OCS",
            StorageProvider::Local => "Local",
        }
    }

    /// All accepted spellings, for error messages.
    pub fn accepted_names() -> Vec<&'static str> {
        NAMES.iter().map(|(n, _)| *n).collect()
    }
}

impl fmt::Display for StorageProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_infra_and_store_names() {
        assert_eq!(StorageProvider::from_spec("aws"), Some(StorageProvider::S3));
        assert_eq!(
            StorageProvider::from_spec("stackit"),
            Some(StorageProvider::S3)
        );
        assert_eq!(
            StorageProvider::from_spec("azure"),
            Some(StorageProvider::Abs)
        );
        assert_eq!(
            StorageProvider::from_spec("GCS"),
            Some(StorageProvider::Gcs)
        );
        assert_eq!(
            StorageProvider::from_spec("openstack"),
            Some(StorageProvider::Swift)
        );
        assert_eq!(
            StorageProvider::from_spec("alicloud"),
            Some(StorageProvider::Oss)
        );
        assert_eq!(
            StorageProvider::from_spec("dell"),
            Some(StorageProvider::Ecs)
        );
        assert_eq!(
            StorageProvider::from_spec("openshift"),
            Some(StorageProvider::Ocs)
        );
        assert_eq!(
            StorageProvider::from_spec("local"),
            Some(StorageProvider::Local)
        );
        assert_eq!(StorageProvider::Abs.as_str(), "ABS");
    }

    #[test]
    fn rejects_other_spellings() {
        for bad in ["s3", "AWS", "gcs", "LOCAL", "minio", ""] {
            assert_eq!(StorageProvider::from_spec(bad), None, "{bad}");
        }
    }
}
