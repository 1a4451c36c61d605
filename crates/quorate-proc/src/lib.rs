//! What `/proc` says about other processes, for adopting them by evidence: a PID alone names
//! no process (PIDs are reused), a PID with its start time does. Shared by the agent (which
//! adopts the etcd it started, and as a pod's keeper reaps what is reparented to it) and the
//! local runtime (which adopts the agents a crashed supervisor left running).

/// The fields of `/proc/PID/stat` adoption needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `R`, `S`, `D`, `Z` (exited, not yet reaped), ...
    pub state: char,
    /// Field 4: the parent's PID.
    pub ppid: u32,
    /// Field 22: clock ticks after boot; with the PID it names one process.
    pub start_time: u64,
}

impl Stat {
    /// Whether this is still the process that started at `start_time`, and has not exited.
    pub fn is_running_since(&self, start_time: u64) -> bool {
        self.start_time == start_time && self.state != 'Z'
    }
}

/// Parses a `/proc/PID/stat` line. The command name (field 2) is in parentheses and may hold
/// anything, spaces and parentheses included, so fields are counted after its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    // fields[0] is field 3.
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// `pid`'s stat, or `None` when no such process exists (or `/proc` cannot be read).
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether one of `pid`'s command-line arguments is exactly `arg`.
pub fn has_arg(pid: u32, arg: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
}

/// Every PID `/proc` lists now.
pub fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// The processes one of whose arguments is exactly `arg`.
pub fn pids_with_arg(arg: &str) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|pid| has_arg(*pid, arg))
        .collect()
}

/// The processes whose command line, its arguments joined by spaces, contains every one of
/// `needles` (for finding what a test or benchmark started when only a path or name is known).
pub fn pids_naming(needles: &[&str]) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                needles.iter().all(|n| cmdline.contains(n))
            })
        })
        .collect()
}

/// The children of `parent` now, with their stat.
pub fn children_of(parent: u32) -> Vec<(u32, Stat)> {
    pids()
        .into_iter()
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .filter(|(_, st)| st.ppid == parent)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_last_parenthesis_of_the_name() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 987654 \
                    1234 56 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                ppid: 17,
                start_time: 987654
            })
        );
        assert_eq!(parse_stat("4242 (cut short) S 17"), None);
    }

    #[test]
    fn this_process_is_running_since_its_start_time_and_its_arguments_are_seen() {
        let me = std::process::id();
        let st = stat(me).expect("own stat");
        assert!(st.is_running_since(st.start_time));
        assert!(!st.is_running_since(st.start_time + 1));
        assert_eq!(st.ppid, stat(me).unwrap().ppid);
        let arg0 = std::env::args().next().expect("argv[0]");
        assert!(has_arg(me, &arg0));
        assert!(pids_with_arg(&arg0).contains(&me));
        assert!(!has_arg(me, "--no-such-argument-here"));
        assert!(pids_naming(&[&arg0]).contains(&me));
        assert!(!pids_naming(&[&arg0, "--no-such-argument-here"]).contains(&me));
        assert!(pids().contains(&me));
    }
}
