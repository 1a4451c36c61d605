//! A one-shot command whose reader goes away (`quorate crd | head -5`) ends as Unix tools do:
//! killed by SIGPIPE, silently, not with a panic message about "failed printing to stdout".

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn a_closed_pipe_ends_a_printing_command_silently() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .arg("crd")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start quorate crd");
    // Close the read end before the child writes: its first write meets a closed pipe.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    let status = child.wait().expect("wait for quorate crd");
    assert_eq!(
        status.signal(),
        Some(nix::libc::SIGPIPE),
        "expected death by SIGPIPE, got {status:?}; stderr: {stderr}"
    );
    assert!(
        stderr.is_empty(),
        "nothing on stderr expected, got: {stderr}"
    );
}
