//! `kubectl quorate backups list NAME`: the snapshots in an Etcd's bucket, read with the same
//! store code the agents write it with (`quorate-backup`), the credentials from the Secret
//! `spec.backup.store.secretRef` names (written into a private temporary directory for the
//! store to read, removed when the command ends).

use crate::output::{self, OutputFormat, Printed};
use crate::{Io, KubectlError, Target};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use quorate_api::printer::format_columns;
use quorate_backup::store::{SnapStore, StoreOptions, StoredSnapshot};
use std::path::PathBuf;

/// The store Secret's keys, `(namespace, name, data)`.
pub async fn store_secret(
    target: &Target,
    etcd: &quorate_api::Etcd,
) -> Result<Option<(String, String, std::collections::BTreeMap<String, Vec<u8>>)>, KubectlError> {
    let Some(reference) = etcd
        .spec
        .backup
        .store
        .as_ref()
        .and_then(|s| s.secret_ref.as_ref())
    else {
        return Ok(None);
    };
    let namespace = reference
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| etcd.metadata.namespace.clone())
        .unwrap_or_else(|| target.namespace.clone());
    let name = reference.name.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(target.client.clone(), &namespace);
    let secret = secrets
        .get_opt(&name)
        .await
        .map_err(|source| KubectlError::Api {
            verb: "get",
            what: format!("secret {namespace}/{name} (the store Secret)"),
            source,
        })?
        .ok_or_else(|| {
            KubectlError::Usage(format!(
                "the store Secret {namespace}/{name} that spec.backup.store.secretRef names does \
                 not exist"
            ))
        })?;
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    Ok(Some((namespace, name, data)))
}

/// Writes `data` as one file per key into `dir` (created, mode 0700; files 0600).
pub fn write_secret_files(
    dir: &std::path::Path,
    data: &std::collections::BTreeMap<String, Vec<u8>>,
) -> Result<(), KubectlError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let failed = |path: PathBuf| move |source| KubectlError::File { path, source };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(dir)
            .map_err(failed(dir.to_path_buf()))?;
    }
    for (key, value) in data {
        if key.contains('/') || key.starts_with('.') {
            continue;
        }
        let path = dir.join(key);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(failed(path.clone()))?;
        std::io::Write::write_all(&mut file, value).map_err(failed(path))?;
    }
    Ok(())
}

/// Lists the bucket of Etcd `name`.
pub async fn list(
    target: &Target,
    name: &str,
    local_root: Option<PathBuf>,
    format: Option<&OutputFormat>,
    io: &mut Io<'_>,
) -> Result<(), KubectlError> {
    let etcd = target.etcd(name).await?;
    let where_ = format!("{}/{name}", target.namespace);
    let store_error = |message: String| KubectlError::Store {
        etcd: where_.clone(),
        message,
    };
    let Some(spec) = etcd.spec.backup.store.clone() else {
        return Err(store_error(
            "it has no spec.backup.store: backups are off".into(),
        ));
    };
    let secret = store_secret(target, &etcd).await?;
    let scratch = tempfile::Builder::new()
        .prefix("kubectl-quorate-store-")
        .tempdir()
        .map_err(|source| KubectlError::File {
            path: std::env::temp_dir(),
            source,
        })?;
    let mut secret_dir = None;
    let mut host_path = None;
    if let Some((_, _, data)) = &secret {
        write_secret_files(scratch.path(), data)?;
        secret_dir = Some(scratch.path().to_path_buf());
        host_path = data
            .get("hostPath")
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()));
    }
    let local = spec.provider_kind() == Some(quorate_api::StorageProvider::Local);
    let options = StoreOptions {
        local_root: local_root.or(host_path).unwrap_or_else(|| {
            PathBuf::from(quorate_core::components::paths::DEFAULT_LOCAL_BACKUP_HOST_PATH)
        }),
        secret_dir,
        encryption_keys: None,
    };
    if local && !options.local_root.is_dir() {
        return Err(store_error(format!(
            "its store is Local, on the node's {}, which is not a directory here; run this on \
             the node, or give the directory as seen from here with --local-root",
            options.local_root.display()
        )));
    }
    let store = SnapStore::open(&spec, &options).map_err(|e| store_error(e.to_string()))?;
    let listed = store.list().await.map_err(|e| store_error(e.to_string()))?;
    let items: Vec<serde_json::Value> = listed
        .iter()
        .map(|s| {
            serde_json::json!({
                "kind": s.name.kind.as_str(),
                "final": s.name.is_final,
                "startRevision": s.name.start_revision,
                "lastRevision": s.name.last_revision,
                "size": s.size,
                "created": jiff::Timestamp::from_second(s.name.created_unix).ok(),
                "encrypted": s.name.encrypted,
                "object": s.path,
            })
        })
        .collect();
    let printed = Printed {
        names: listed.iter().map(|s| s.path.clone()).collect(),
        items,
        single: false,
    };
    if output::print(io.out, format, &printed)? {
        return Ok(());
    }
    writeln!(io.err, "{}", store.describe())?;
    let mut rows = vec![StoredSnapshot::TABLE_HEADER.map(String::from).to_vec()];
    rows.extend(listed.iter().map(StoredSnapshot::table_row));
    write!(io.out, "{}", format_columns(&rows))?;
    if listed.is_empty() {
        writeln!(io.err, "(no snapshots)")?;
    }
    Ok(())
}
