//! The table `kubectl get etcd [-o wide]` prints, from the CRD's own printer columns, so local
//! mode, the kubectl plugin and Kubernetes look the same; and kubectl's column layout and ages.

use crate::Etcd;
use crate::status::EtcdStatus;

/// Renders `kubectl get etcd` output for `items` at `now`: the CRD's own printer columns
/// (priority 0, and with `wide` also priority 1), each cell its JSONPath's first match as
/// kubectl shows it (`<none>` when nothing matches; a date as an age).
pub fn render(items: &[Etcd], wide: bool, now: jiff::Timestamp) -> String {
    format_columns(&rows(items, wide, now))
}

/// The header and one row per object of [`render`], unformatted, for a caller that adds
/// columns (the kubectl plugin's NAMESPACE with `-A`).
pub fn rows(items: &[Etcd], wide: bool, now: jiff::Timestamp) -> Vec<Vec<String>> {
    let columns: Vec<_> = crate::crd::etcd_printer_columns()
        .into_iter()
        .filter(|c| wide || c.priority.unwrap_or(0) == 0)
        .collect();
    let mut rows: Vec<Vec<String>> = vec![
        std::iter::once("NAME".to_string())
            .chain(columns.iter().map(|c| c.name.to_uppercase()))
            .collect(),
    ];
    for etcd in items {
        let mut value = serde_json::to_value(etcd).unwrap_or_default();
        if etcd.status.is_none() {
            // As an object without status shows its zero counts.
            value["status"] = serde_json::to_value(EtcdStatus::default()).unwrap_or_default();
        }
        let mut row = vec![etcd.metadata.name.clone().unwrap_or_default()];
        row.extend(
            columns
                .iter()
                .map(|c| cell(&value, &c.json_path, &c.type_, now)),
        );
        rows.push(row);
    }
    rows
}

/// One cell: the first value `json_path` finds in `object`.
fn cell(object: &serde_json::Value, json_path: &str, type_: &str, now: jiff::Timestamp) -> String {
    use jsonpath_rust::JsonPath;
    let found = object
        .query(&format!("${json_path}"))
        .ok()
        .and_then(|values| values.into_iter().find(|v| !v.is_null()).cloned());
    match (type_, found) {
        ("date", found) => found
            .as_ref()
            .and_then(|v| v.as_str())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map_or_else(
                || "<unknown>".to_string(),
                |t| human_duration(now.duration_since(t)),
            ),
        (_, None) => none(),
        (_, Some(serde_json::Value::String(text))) => text,
        (_, Some(other)) => other.to_string(),
    }
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
    fn the_crds_printer_columns_are_rendered_as_kubectl_shows_them() {
        use crate::status::{Condition, ConditionStatus};
        let now: jiff::Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let time =
            |t: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.parse().unwrap());
        let condition = |type_: &str, status, reason: &str| Condition {
            type_: type_.to_string(),
            status,
            last_transition_time: time("2026-01-01T00:00:00Z"),
            last_update_time: time("2026-01-01T00:00:00Z"),
            reason: reason.to_string(),
            message: String::new(),
        };
        let mut main = Etcd::new("etcd-main", Default::default());
        main.spec.replicas = 3;
        main.metadata.creation_timestamp = Some(time("2026-01-01T22:00:00Z"));
        main.status = Some(EtcdStatus {
            ready: Some(true),
            current_replicas: 3,
            ready_replicas: 2,
            conditions: vec![
                condition("Ready", ConditionStatus::True, "Quorate"),
                condition("AllMembersReady", ConditionStatus::False, "NotAllReady"),
                condition("ScaleOperationComplete", ConditionStatus::True, "Scaled"),
            ],
            ..EtcdStatus::default()
        });
        // No status and no creation time.
        let new = Etcd::new("b", Default::default());
        let items = [main, new];
        assert_eq!(
            render(&items, false, now),
            "NAME        READY    QUORATE   ALL MEMBERS READY   BACKUP READY   SCALE    AGE\n\
             etcd-main   true     True      False               <none>         Scaled   120m\n\
             b           <none>   <none>    <none>              <none>         <none>   <unknown>\n"
        );
        let wide = render(&items, true, now);
        let lines: Vec<&str> = wide.lines().collect();
        assert!(
            lines[0].ends_with("AGE         CLUSTER SIZE   CURRENT REPLICAS   READY REPLICAS"),
            "{wide}"
        );
        assert!(
            lines[1].ends_with("3              3                  2"),
            "{wide}"
        );
        assert!(
            lines[2].ends_with("0              0                  0"),
            "{wide}"
        );
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
