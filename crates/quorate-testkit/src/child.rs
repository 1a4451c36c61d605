//! Kill-on-drop guard for child processes, so no test leaves a process behind, even on panic.
//!
//! Children are spawned as leaders of their own process group; the guard signals the whole
//! group, so grandchildren (e.g. the etcd an agent started) die with them.
//!
//! Because they have their own group, a Ctrl-C on `cargo test` does not reach them, and a
//! killed test process runs no destructors. So children also get a parent-death signal
//! (SIGKILL): if the thread that spawned them dies, they die. Spawn from a thread that lives as
//! long as the child (the test thread or a runtime worker), not from `spawn_blocking` or a
//! short-lived helper thread.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

enum Inner {
    Std(std::process::Child),
    Tokio(tokio::process::Child),
}

/// Owns a child process; on drop, SIGKILLs its process group and reaps it.
pub struct ChildGuard {
    inner: Inner,
    pid: u32,
    status: Option<ExitStatus>,
}

impl std::fmt::Debug for ChildGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildGuard")
            .field("pid", &self.pid)
            .field("status", &self.status)
            .finish()
    }
}

impl ChildGuard {
    /// Spawns `cmd` as the leader of a new process group and guards it.
    pub fn spawn(cmd: &mut std::process::Command) -> io::Result<ChildGuard> {
        cmd.process_group(0);
        let parent = std::process::id();
        // SAFETY: the hook only makes async-signal-safe system calls and allocates nothing.
        unsafe {
            cmd.pre_exec(move || die_with_parent(parent));
        }
        Ok(Self::from_std(cmd.spawn()?))
    }

    /// Spawns a tokio `cmd` (for async stdout/stderr handling) as a new process group leader.
    pub fn spawn_tokio(cmd: &mut tokio::process::Command) -> io::Result<ChildGuard> {
        cmd.process_group(0);
        let parent = std::process::id();
        // SAFETY: as in `spawn`.
        unsafe {
            cmd.pre_exec(move || die_with_parent(parent));
        }
        Ok(Self::from_tokio(cmd.spawn()?))
    }

    /// Guards an already spawned child. If it is not a process group leader, only the child
    /// itself is killed on drop.
    pub fn from_std(child: std::process::Child) -> ChildGuard {
        let pid = child.id();
        ChildGuard {
            inner: Inner::Std(child),
            pid,
            status: None,
        }
    }

    /// Guards an already spawned tokio child (see [`ChildGuard::from_std`]).
    ///
    /// Panics if the child was already polled to completion (it then has no pid).
    pub fn from_tokio(child: tokio::process::Child) -> ChildGuard {
        let pid = child
            .id()
            .expect("tokio child already reaped before it was guarded");
        ChildGuard {
            inner: Inner::Tokio(child),
            pid,
            status: None,
        }
    }

    /// The child's process id (also its process group id when spawned through this guard).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Access to the std child (for taking stdin/stdout handles); `None` for tokio children.
    pub fn std_child(&mut self) -> Option<&mut std::process::Child> {
        match &mut self.inner {
            Inner::Std(c) => Some(c),
            Inner::Tokio(_) => None,
        }
    }

    /// Access to the tokio child (for taking async stdout/stderr handles); `None` for std children.
    pub fn tokio_child(&mut self) -> Option<&mut tokio::process::Child> {
        match &mut self.inner {
            Inner::Tokio(c) => Some(c),
            Inner::Std(_) => None,
        }
    }

    /// Sends `signal` to the child's process group (falls back to the child alone when it leads
    /// no group). Use for fault injection: SIGSTOP/SIGCONT, SIGTERM. No-op once reaped, so a
    /// recycled pid is never hit.
    pub fn signal(&self, signal: Signal) -> nix::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        signal_group(self.pid, signal)
    }

    /// SIGSTOPs the process group and waits until the child is really stopped, so the next
    /// request meets a frozen process (connections are still accepted by the kernel, nothing
    /// answers: a black hole).
    pub fn freeze(&self, timeout: Duration) -> io::Result<()> {
        self.signal(Signal::SIGSTOP).map_err(io::Error::from)?;
        self.wait_state(timeout, |state| state == 'T', "stopped")
    }

    /// SIGCONTs a frozen process group and waits until the child runs again.
    pub fn thaw(&self, timeout: Duration) -> io::Result<()> {
        self.signal(Signal::SIGCONT).map_err(io::Error::from)?;
        self.wait_state(timeout, |state| state != 'T', "running")
    }

    fn wait_state(
        &self,
        timeout: Duration,
        wanted: impl Fn(char) -> bool,
        label: &str,
    ) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if wanted(process_state(self.pid)?) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("process {} not {label} after {timeout:?}", self.pid),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The exit status if the child has exited, without blocking.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let status = match &mut self.inner {
            Inner::Std(c) => c.try_wait()?,
            Inner::Tokio(c) => c.try_wait()?,
        };
        if let Some(status) = status {
            self.record_exit(status);
        }
        Ok(status)
    }

    /// True while the child has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Waits (blocking, polling) up to `timeout` for the child to exit by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILLs the process group and reaps the child; returns its exit status.
    /// Idempotent: a second call returns the recorded status.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        // The child is not reaped yet, so its pid (and group id) cannot have been recycled.
        let _ = signal_group(self.pid, Signal::SIGKILL);
        let status = match &mut self.inner {
            Inner::Std(c) => c.wait()?,
            Inner::Tokio(c) => loop {
                // Blocking poll: Drop cannot await, and SIGKILL makes the exit prompt.
                if let Some(status) = c.try_wait()? {
                    break status;
                }
                std::thread::sleep(Duration::from_millis(5));
            },
        };
        self.record_exit(status);
        Ok(status)
    }

    fn record_exit(&mut self, status: ExitStatus) {
        self.status = Some(status);
        // Sweep grandchildren left in the group. This runs right after the reap, long before
        // the kernel could hand the id to another process group.
        let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
    }
}

/// Runs in the forked child before exec: SIGKILL it when the spawning thread dies, and refuse
/// to start if the parent is already gone (the signal would never come).
fn die_with_parent(parent: u32) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if nix::unistd::getppid().as_raw() as u32 != parent {
        return Err(io::Error::from(Errno::ESRCH));
    }
    Ok(())
}

/// The one-letter state from `/proc/<pid>/stat` (R, S, D, T, Z, ...).
fn process_state(pid: u32) -> io::Result<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name is in parentheses and may contain spaces; the state follows it.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("bad stat: {stat}")))
}

fn signal_group(pid: u32, signal: Signal) -> nix::Result<()> {
    let pid = Pid::from_raw(pid as i32);
    match killpg(pid, signal) {
        Err(Errno::ESRCH) => kill(pid, signal),
        other => other,
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Err(e) = self.kill() {
            eprintln!(
                "quorate-testkit: failed to kill/reap child {}: {e}",
                self.pid
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn alive(pid: i32) -> bool {
        // Signal 0 probes existence; a zombie still counts, so also check /proc state.
        if kill(Pid::from_raw(pid), None).is_err() {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    fn wait_dead(pid: i32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !alive(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn drop_kills_child_and_grandchild() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
        let guard = ChildGuard::spawn(Command::new("sh").arg("-c").arg(&script)).unwrap();
        let child_pid = guard.pid() as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        let grandchild: i32 = loop {
            if let Ok(text) = std::fs::read_to_string(&pidfile)
                && let Ok(pid) = text.trim().parse()
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "grandchild never started");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(alive(grandchild));
        drop(guard);
        assert!(!alive(child_pid), "child survived the guard");
        assert!(wait_dead(grandchild), "grandchild survived the guard");
    }

    #[test]
    fn drop_during_panic_still_kills() {
        let mut pid = 0;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let guard = ChildGuard::spawn(Command::new("sleep").arg("300")).unwrap();
            pid = guard.pid() as i32;
            panic!("test body failed");
        }));
        assert!(result.is_err());
        assert!(pid > 0);
        assert!(!alive(pid), "child survived a panicking test");
    }

    #[test]
    fn kill_is_idempotent_and_reports_signal() {
        use std::os::unix::process::ExitStatusExt;
        let mut guard = ChildGuard::spawn(Command::new("sleep").arg("300")).unwrap();
        assert!(guard.is_running());
        let status = guard.kill().unwrap();
        assert_eq!(status.signal(), Some(libc_sigkill()));
        assert_eq!(guard.kill().unwrap(), status);
        assert!(!guard.is_running());
    }

    fn libc_sigkill() -> i32 {
        Signal::SIGKILL as i32
    }

    #[test]
    fn freeze_and_thaw_stop_and_resume_the_child() {
        let mut guard = ChildGuard::spawn(
            Command::new("sleep")
                .arg("300")
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .unwrap();
        guard.freeze(Duration::from_secs(5)).unwrap();
        assert_eq!(process_state(guard.pid()).unwrap(), 'T');
        guard.thaw(Duration::from_secs(5)).unwrap();
        assert_ne!(process_state(guard.pid()).unwrap(), 'T');
        guard.kill().unwrap();
    }

    #[tokio::test]
    async fn tokio_children_are_killed_on_drop() {
        let guard =
            ChildGuard::spawn_tokio(tokio::process::Command::new("sleep").arg("300")).unwrap();
        let pid = guard.pid() as i32;
        assert!(alive(pid));
        drop(guard);
        assert!(!alive(pid));
    }

    #[test]
    fn child_dies_with_the_thread_that_spawned_it() {
        // Stands in for a test process killed without running destructors.
        let pid = std::thread::spawn(|| {
            let guard = ChildGuard::spawn(Command::new("sleep").arg("300")).unwrap();
            let pid = guard.pid() as i32;
            std::mem::forget(guard);
            pid
        })
        .join()
        .unwrap();
        assert!(wait_dead(pid), "orphaned child survived its parent thread");
        // Reap the zombie left by the forgotten guard.
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
    }

    #[test]
    fn wait_timeout_sees_a_natural_exit() {
        let mut guard = ChildGuard::spawn(&mut Command::new("true")).unwrap();
        let status = guard.wait_timeout(Duration::from_secs(5)).unwrap();
        assert!(status.expect("`true` exits").success());
    }
}
