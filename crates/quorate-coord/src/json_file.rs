//! JSON files written atomically (temp file + rename), so a reader never sees half a document
//! even when the writer is killed mid-write.

use crate::CoordError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Writes `value` as pretty JSON to `path`, replacing it atomically. The file is created 0600
/// and a missing directory 0700: coordination state (members, tokens, ports) is its owner's.
pub fn write_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), CoordError> {
    let io = |action, source| CoordError::Io {
        action,
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io("create directory for", e))?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let body = serde_json::to_vec_pretty(value).expect("coordination types always serialize");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io("create", e))?;
    file.write_all(&body).map_err(|e| io("write", e))?;
    file.sync_all().map_err(|e| io("sync", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("replace", e))
}

/// Reads `path` as JSON; `Ok(None)` when the file does not exist.
pub fn read<T: DeserializeOwned>(path: &Path, what: &'static str) -> Result<Option<T>, CoordError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CoordError::Corrupt {
                path: path.display().to_string(),
                what,
                message: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CoordError::Io {
            action: "read",
            path: path.display().to_string(),
            source: e,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reports_missing_and_corrupt_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b.json");
        assert_eq!(read::<Vec<u32>>(&path, "numbers").unwrap(), None);
        write_atomic(&path, &vec![1u32, 2, 3]).unwrap();
        assert_eq!(
            read::<Vec<u32>>(&path, "numbers").unwrap(),
            Some(vec![1, 2, 3])
        );
        std::fs::write(&path, "{not json").unwrap();
        let err = read::<Vec<u32>>(&path, "numbers").unwrap_err().to_string();
        assert!(err.contains("b.json is not valid numbers"), "{err}");
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp files are left behind");
    }
}
