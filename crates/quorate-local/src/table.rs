//! The table `kubectl get etcd [-o wide]` prints, from the same printer columns, so local mode
//! and Kubernetes look the same.

use quorate_api::Etcd;
use quorate_api::status::EtcdStatus;

/// Renders `kubectl get etcd` output for `items` at `now`.
pub fn render(items: &[Etcd], wide: bool, now: jiff::Timestamp) -> String {
    let mut header = vec![
        "NAME",
        "READY",
        "QUORATE",
        "ALL MEMBERS READY",
        "BACKUP READY",
        "SCALE",
        "AGE",
    ];
    if wide {
        header.extend(["CLUSTER SIZE", "CURRENT REPLICAS", "READY REPLICAS"]);
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for etcd in items {
        let default = EtcdStatus::default();
        let status = etcd.status.as_ref().unwrap_or(&default);
        let find = |t: &str| status.conditions.iter().find(|c| c.type_ == t);
        let condition = |t: &str| find(t).map_or_else(none, |c| c.status.as_str().to_string());
        let age = etcd.metadata.creation_timestamp.as_ref().map_or_else(
            || "<unknown>".to_string(),
            |t| human_duration(now.duration_since(t.0)),
        );
        let mut row = vec![
            etcd.metadata.name.clone().unwrap_or_default(),
            status.ready.map_or_else(none, |r| r.to_string()),
            condition("Ready"),
            condition("AllMembersReady"),
            condition("BackupReady"),
            find("ScaleOperationComplete").map_or_else(none, |c| c.reason.clone()),
            age,
        ];
        if wide {
            row.extend([
                etcd.spec.replicas.to_string(),
                status.current_replicas.to_string(),
                status.ready_replicas.to_string(),
            ]);
        }
        rows.push(row);
    }
    format_columns(&rows)
}

fn none() -> String {
    "<none>".to_string()
}

/// Left-aligned columns separated by three spaces, as kubectl prints them.
pub fn format_columns(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}   ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// kubectl's short human-readable duration (`45s`, `3m12s`, `2d4h`, ...).
pub fn human_duration(d: jiff::SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    let (m, h, day) = (60, 3600, 86_400);
    match secs {
        s if s < 2 * m => format!("{s}s"),
        s if s < 10 * m => format!("{}m{}s", s / m, s % m),
        s if s < 3 * h => format!("{}m", s / m),
        s if s < 8 * h => format!("{}h{}m", s / h, (s % h) / m),
        s if s < 48 * h => format!("{}h", s / h),
        s if s < 8 * day => format!("{}d{}h", s / day, (s % day) / h),
        s if s < 2 * 365 * day => format!("{}d", s / day),
        s => format!("{}y{}d", s / (365 * day), (s % (365 * day)) / day),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    #[test]
    fn durations_read_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (192, "3m12s"),
            (3000, "50m"),
            (4 * 3600 + 120, "4h2m"),
            (30 * 3600, "30h"),
            (52 * 3600, "2d4h"),
            (30 * 86_400, "30d"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
    }

    #[test]
    fn columns_line_up() {
        let rows = vec![
            vec!["NAME".into(), "READY".into()],
            vec!["etcd-main".into(), "true".into()],
        ];
        assert_eq!(
            format_columns(&rows),
            "NAME        READY\netcd-main   true\n"
        );
    }
}

/// A size as people read it, binary units, one decimal above bytes: `945B`, `12.3KiB`,
/// `1.1GiB` (no space, so a table column stays one word).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

#[cfg(test)]
mod size_tests {
    use super::human_size;

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human_size(945), "945B");
        assert_eq!(human_size(12_595), "12.3KiB");
        assert_eq!(human_size(1_153_433_600), "1.1GiB");
    }
}
