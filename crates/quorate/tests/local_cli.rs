//! The everyday commands around a running local cluster: `get etcd -w`, `logs [-f]`, shell
//! completions and the manual page.

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use quorate_testkit::ChildGuard;
use support::{Local, eventually, manifest, path_str};

/// Starts `quorate ARGS` with its stdout read line by line into a channel.
fn streaming(local: &Local, args: &[&str]) -> (ChildGuard, mpsc::Receiver<String>) {
    let mut command = local.command(args);
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = ChildGuard::spawn(&mut command).expect("start quorate");
    let stdout = child
        .std_child()
        .and_then(|c| c.stdout.take())
        .expect("piped stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (child, received)
}

/// Waits for a line containing `needle`; the lines before it are returned too.
fn line_with(lines: &mpsc::Receiver<String>, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(e) => panic!("no line with {needle:?} ({e}); saw {seen:#?}"),
        }
    }
}

fn stop(mut child: ChildGuard) {
    child
        .signal(nix::sys::signal::Signal::SIGTERM)
        .expect("signal");
    let status = child
        .wait_timeout(Duration::from_secs(10))
        .expect("wait")
        .expect("it stops on SIGTERM");
    assert!(status.success(), "{status}");
}

#[test]
fn watch_logs_completion_and_manual() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("tool", 1, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);

    // get -w: the header and the row, then the row again when the object changes.
    let (watcher, lines) = streaming(&local, &["get", "etcd", "tool", "-w"]);
    let first = line_with(&lines, "tool");
    assert!(first[0].starts_with("NAME"), "{first:?}");
    let changed = manifest("tool", 1, "").replace(
        "    heartbeatDuration: 1s\n",
        "    heartbeatDuration: 1s\n    quota: 1Gi\n",
    );
    local.manifest("c.yaml", &changed);
    local.ok(&["apply", "-f", path_str(&path)]);
    let again = line_with(&lines, "tool");
    assert!(
        again.iter().all(|l| !l.starts_with("NAME")),
        "the header once: {again:?}"
    );
    stop(watcher);

    // logs: the supervisor's, a member's etcd log, an unknown member named.
    let supervisor = local.ok(&["logs", "tool"]);
    let file = local.cluster_dir("tool").join("supervisor.log");
    assert_eq!(
        supervisor.lines().collect::<Vec<_>>(),
        std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .collect::<Vec<_>>()
    );
    let etcd = local.ok(&["logs", "tool", "tool-0", "--tail", "5"]);
    assert!(etcd.lines().count() <= 5, "{etcd}");
    assert!(etcd.contains("\"level\""), "etcd's JSON log lines: {etcd}");
    let unknown = local.quorate(&["logs", "tool", "tool-7"]);
    assert!(!unknown.status.success());
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        said.contains("no member \"tool-7\"") && said.contains("tool-0"),
        "{said}"
    );

    // logs -f: what is appended afterwards comes through.
    let agent_log = local.cluster_dir("tool").join("members/tool-0/agent.log");
    let (follower, lines) = streaming(&local, &["logs", "tool", "tool-0", "--agent", "-f"]);
    let marker = "a line appended while following";
    eventually(
        "the follower to print the appended line",
        Duration::from_secs(30),
        || {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&agent_log)
                .unwrap();
            writeln!(file, "{marker}").unwrap();
            lines
                .recv_timeout(Duration::from_millis(500))
                .ok()
                .into_iter()
                .chain(lines.try_iter())
                .any(|l| l.contains(marker))
                .then_some(())
        },
    );
    stop(follower);

    // Completions and the manual page come from the command definitions.
    let bash = local.ok(&["completion", "bash"]);
    assert!(
        bash.contains("_quorate()") && bash.contains("restore"),
        "{bash:.300}"
    );
    let zsh = local.ok(&["completion", "zsh"]);
    assert!(zsh.contains("#compdef quorate"), "{zsh:.300}");
    let man = local.ok(&["man"]);
    assert!(man.contains(".TH quorate"), "{man:.300}");
    assert!(
        man.contains("completion") && man.contains("logs"),
        "{man:.300}"
    );
}
