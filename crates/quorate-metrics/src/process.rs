//! The process metrics every Prometheus client exposes (`process_*`, as the Go and Python
//! clients name them, so the usual "restarts", "memory" and "file descriptors" panels work),
//! read from `/proc` on each scrape; the agent and the operator serve them alike. Also the
//! bytes of the process's network interfaces (etcd-backup-restore exports them under its own
//! names; the agent does).
//!
//! A value `/proc` does not give (another OS, a hardened mount) is left out rather than
//! reported as zero.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads `/proc/self` on each scrape: `process_cpu_seconds_total`, `process_start_time_seconds`,
/// `process_{resident,virtual}_memory_bytes`, `process_{open,max}_fds`.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What `/proc/self` says about this process.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessSample {
    /// User + system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// When the process started, Unix seconds.
    pub start_time_seconds: Option<f64>,
    /// Resident memory, bytes.
    pub resident_memory_bytes: Option<f64>,
    /// Virtual memory, bytes.
    pub virtual_memory_bytes: Option<f64>,
    /// Open file descriptors.
    pub open_fds: Option<f64>,
    /// The soft limit of open file descriptors.
    pub max_fds: Option<f64>,
    /// Bytes received and transmitted over every interface of the process's network namespace.
    pub network: Option<(f64, f64)>,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// User + system time (fields 14 and 15, clock ticks) and the start time after boot (field 22)
/// from `/proc/self/stat`; the command name (field 2) may hold spaces, so fields are counted
/// after its closing parenthesis.
pub fn parse_stat(stat: &str, ticks_per_second: f64) -> Option<(f64, f64)> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // after_comm starts at field 3.
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let cpu = (field(14)? + field(15)?) / ticks_per_second;
    let started_after_boot = field(22)? / ticks_per_second;
    Some((cpu, started_after_boot))
}

/// A `kB` line of `/proc/self/status` (`VmRSS:   1234 kB`), in bytes.
pub fn status_bytes(status: &str, key: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: f64 = line[key.len()..]
        .trim_start_matches(':')
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
pub fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Received and transmitted bytes summed over the interfaces of `/proc/self/net/dev`.
pub fn network_bytes(dev: &str) -> Option<(f64, f64)> {
    let mut rx = 0.0;
    let mut tx = 0.0;
    let mut any = false;
    for line in dev.lines() {
        let Some((_, counters)) = line.split_once(':') else {
            continue;
        };
        let fields: Vec<&str> = counters.split_whitespace().collect();
        let (Some(r), Some(t)) = (fields.first(), fields.get(8)) else {
            continue;
        };
        rx += r.parse::<f64>().ok()?;
        tx += t.parse::<f64>().ok()?;
        any = true;
    }
    any.then_some((rx, tx))
}

/// Received and transmitted bytes of this process's network namespace now.
pub fn network_now() -> Option<(f64, f64)> {
    read("/proc/self/net/dev").and_then(|d| network_bytes(&d))
}

impl ProcessSample {
    /// This process now.
    pub fn now() -> ProcessSample {
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .map_or(100.0, |t| t as f64);
        let boot_time = read("/proc/stat").and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        let stat = read("/proc/self/stat").and_then(|s| parse_stat(&s, ticks));
        let status = read("/proc/self/status").unwrap_or_default();
        ProcessSample {
            cpu_seconds: stat.map(|(cpu, _)| cpu),
            start_time_seconds: stat.zip(boot_time).map(|((_, after), boot)| boot + after),
            resident_memory_bytes: status_bytes(&status, "VmRSS"),
            virtual_memory_bytes: status_bytes(&status, "VmSize"),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as f64),
            max_fds: read("/proc/self/limits").and_then(|l| max_open_files(&l)),
            network: network_now(),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = ProcessSample::now();
        if let Some(v) = s.cpu_seconds {
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?)?;
        }
        for (name, help, v) in [
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_memory_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds,
            ),
        ] {
            if let Some(v) = v {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse_as_the_kernel_writes_them() {
        let stat = "4242 (quorate agent) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 9 0 12345 \
                    1000 200 18446744073709551615";
        assert_eq!(parse_stat(stat, 100.0), Some((4.0, 123.45)));
        assert_eq!(
            status_bytes("Name:\tx\nVmSize:\t  2048 kB\nVmRSS:\t    10 kB\n", "VmRSS"),
            Some(10240.0)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
        let dev = "Inter-|   Receive                                                |  Transmit\n \
                   face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                   lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n  \
                   eth0:     50       1    0    0    0     0          0         0       70       1    0    0    0     0       0          0\n";
        assert_eq!(network_bytes(dev), Some((150.0, 170.0)));
    }

    #[test]
    fn this_process_is_sampled() {
        let s = ProcessSample::now();
        assert!(s.cpu_seconds.is_some_and(|c| c >= 0.0), "{s:?}");
        assert!(s.resident_memory_bytes.is_some_and(|b| b > 0.0), "{s:?}");
        assert!(s.open_fds.is_some_and(|n| n >= 1.0), "{s:?}");
        assert!(s.max_fds.is_some(), "{s:?}");
        let started = s.start_time_seconds.expect("start time");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0 * 365.0,
            "{started}"
        );
    }
}
