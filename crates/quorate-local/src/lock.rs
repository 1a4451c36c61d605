//! One supervisor per cluster: the supervisor holds an exclusive lock on `supervisor.lock`
//! (released by the kernel when it dies, however it dies) and writes its PID into it.

use crate::LocalError;
use crate::state_dir::ClusterDir;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};

/// The held lock; dropping it releases the cluster.
#[derive(Debug)]
pub struct SupervisorLock {
    _file: File,
}

fn open(dir: &ClusterDir) -> Result<File, LocalError> {
    let path = dir.supervisor_lock();
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| LocalError::Io {
            action: "open",
            path: path.display().to_string(),
            source,
        })
}

/// Takes the lock for this process, or says which process holds it.
pub fn acquire(dir: &ClusterDir, name: &str) -> Result<SupervisorLock, LocalError> {
    let mut file = open(dir)?;
    match file.try_lock() {
        Ok(()) => {
            let _ = file.set_len(0);
            let _ = file.rewind();
            let _ = write!(file, "{}", std::process::id());
            let _ = file.flush();
            Ok(SupervisorLock { _file: file })
        }
        Err(TryLockError::WouldBlock) => Err(LocalError::AlreadyRunning {
            name: name.to_string(),
            pid: read_pid(&mut file).unwrap_or(0),
        }),
        Err(TryLockError::Error(source)) => Err(LocalError::Io {
            action: "lock",
            path: dir.supervisor_lock().display().to_string(),
            source,
        }),
    }
}

/// The PID of the running supervisor, `None` if none runs.
pub fn running_supervisor(dir: &ClusterDir) -> Option<u32> {
    if !dir.supervisor_lock().exists() {
        return None;
    }
    let mut file = open(dir).ok()?;
    match file.try_lock() {
        Ok(()) => None,
        Err(_) => read_pid(&mut file),
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}
