//! The applied `Etcd` object of a local cluster (its manifest with the metadata an API server
//! would add: uid, creation time, generation) and the cluster record beside it.

use crate::LocalError;
use crate::record::ClusterRecord;
use crate::state_dir::ClusterDir;
use quorate_api::Etcd;
use quorate_coord::json_file;

/// The stored object.
pub fn load_object(dir: &ClusterDir) -> Result<Etcd, LocalError> {
    let path = dir.manifest();
    let text = std::fs::read_to_string(&path).map_err(|source| LocalError::Io {
        action: "read",
        path: path.display().to_string(),
        source,
    })?;
    Ok(quorate_api::manifest::parse_etcd_manifest(
        &text,
        &path.display().to_string(),
    )?)
}

/// Writes the object, in the cluster's directory made private first
/// ([`crate::state_dir::make_private`]).
pub fn store_object(dir: &ClusterDir, etcd: &Etcd) -> Result<(), LocalError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.manifest();
    let text = serde_saphyr::to_string(etcd).expect("Etcd always serializes");
    crate::state_dir::make_private(dir.root())
        .and_then(|()| {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path.with_extension("yaml.tmp"))?;
            std::io::Write::write_all(&mut file, text.as_bytes())
        })
        .and_then(|()| std::fs::rename(path.with_extension("yaml.tmp"), &path))
        .map_err(|source| LocalError::Io {
            action: "write",
            path: path.display().to_string(),
            source,
        })
}

/// Makes the agents' token file (32 random bytes, hex; the directory 0700, the file 0600)
/// unless it exists. Deleting it rotates the token at the next `up`/`apply`.
pub fn ensure_agent_token(dir: &ClusterDir) -> Result<(), LocalError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = dir.agent_token();
    if path.is_file() {
        return Ok(());
    }
    let io = |source| LocalError::Io {
        action: "write the agent token",
        path: path.display().to_string(),
        source,
    };
    let parent = path.parent().expect("the token file has a directory");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(io)?;
    let token: String = rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    std::io::Write::write_all(&mut file, token.as_bytes()).map_err(io)
}

/// The cluster record; an error if the cluster was never created.
pub fn load_record(dir: &ClusterDir) -> Result<ClusterRecord, LocalError> {
    json_file::read(&dir.record(), "cluster record")?.ok_or_else(|| LocalError::NotFound {
        name: dir_name(dir),
    })
}

/// Writes the cluster record.
pub fn save_record(dir: &ClusterDir, record: &ClusterRecord) -> Result<(), LocalError> {
    Ok(json_file::write_atomic(&dir.record(), record)?)
}

fn dir_name(dir: &ClusterDir) -> String {
    dir.root()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What applying a manifest did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The cluster was created by this apply.
    pub created: bool,
    /// The spec changed (and the generation went up).
    pub changed: bool,
    /// Generation after the apply.
    pub generation: i64,
    /// Ports the manifest asks for that members keep others for, to say so.
    pub kept_ports: Vec<crate::ports::MovedPort>,
}

/// Asks the agents of the cluster in `dir` for something once: puts annotation `key` with a
/// fresh request ID (`<what>-<unix milliseconds>`) on the stored `Etcd`, which reaches them
/// through the cluster configuration. Returns the ID.
pub fn request(dir: &ClusterDir, key: &str, what: &str) -> Result<String, LocalError> {
    let mut etcd = load_object(dir)?;
    let now = jiff::Timestamp::now();
    let id = format!("{what}-{}", now.as_millisecond());
    etcd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_string(), id.clone());
    apply(dir, etcd, now, rand::random())?;
    Ok(id)
}

/// Stores `desired` as the cluster's object, as an API server would: validated (including the
/// rules for updates), with uid and creation time kept and the generation bumped when the spec
/// changes. Nothing is written when validation fails.
pub fn apply(
    dir: &ClusterDir,
    mut desired: Etcd,
    now: jiff::Timestamp,
    random: u128,
) -> Result<Applied, LocalError> {
    quorate_api::validate::validate(&desired)?;
    let existing = if dir.exists() {
        let mut old = load_object(dir)?;
        // The update rules read the status too (an unfinished scale operation), as an API
        // server's object carries it.
        old.status = json_file::read(&dir.status(), "cluster status")
            .ok()
            .flatten();
        Some(old)
    } else {
        None
    };
    let mut record = match load_record(dir) {
        Ok(record) => record,
        Err(LocalError::NotFound { .. }) => ClusterRecord::new(now, random),
        Err(e) => return Err(e),
    };
    let (created, changed, generation) = match &existing {
        Some(old) => {
            quorate_api::validate::validate_update(old, &desired)?;
            let changed = old.spec != desired.spec;
            let generation = old.metadata.generation.unwrap_or(1) + i64::from(changed);
            (false, changed, generation)
        }
        None => (true, true, 1),
    };
    // The version the members run stays what it was; the supervisor moves it towards the
    // requested one step by step (core `etcd_version::decide`).
    if record.etcd_version.is_none() {
        record.etcd_version = Some(match &existing {
            Some(old) => quorate_api::etcd_version::requested(old)
                .ok()
                .flatten()
                .unwrap_or(quorate_api::EtcdVersion::UNRECORDED),
            None => quorate_api::etcd_version::requested(&desired)
                .ok()
                .flatten()
                .unwrap_or(quorate_api::EtcdVersion::DEFAULT),
        });
    }
    desired.metadata.uid = Some(record.uid.clone());
    desired.metadata.creation_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(record.created),
    );
    desired.metadata.generation = Some(generation);
    desired.status = None;
    save_record(dir, &record)?;
    store_object(dir, &desired)?;
    Ok(Applied {
        created,
        changed,
        generation,
        kept_ports: Vec::new(),
    })
}
