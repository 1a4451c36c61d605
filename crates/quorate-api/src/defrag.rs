//! quorate's own defragmentation settings on an `Etcd` (annotations, since druid has no field
//! for them): the thresholds that start a defragmentation between schedules, and the
//! on-demand request. `spec.etcd.defragmentationSchedule` and `etcdDefragTimeout` are druid's.

use serde::{Deserialize, Serialize};

use crate::Etcd;
use crate::quantity::quantity_to_bytes;

/// Asks for one defragmentation of every member now (the value names the request; each new
/// value is carried out once). `quorate defrag NAME` is the local equivalent.
pub const DEFRAGMENT: &str = "quorate.io/defragment";
/// Free pages (`dbSize - dbSizeInUse`) as a percentage of `dbSize` from which a member is
/// defragmented between schedules (together with [`DEFRAG_FREE_BYTES`]); default 45.
pub const DEFRAG_FREE_PERCENT: &str = "quorate.io/defrag-free-percent";
/// Free pages, as a quantity (`100Mi`), from which a member is defragmented between schedules
/// (together with [`DEFRAG_FREE_PERCENT`]); default `100Mi`.
pub const DEFRAG_FREE_BYTES: &str = "quorate.io/defrag-free-bytes";
/// A member whose database is within this percentage of `spec.etcd.quota` is defragmented
/// between schedules (when it has free pages to reclaim); default 20, `0` turns it off.
pub const DEFRAG_NEAR_QUOTA_PERCENT: &str = "quorate.io/defrag-near-quota-percent";

/// When a member's database needs defragmenting between schedules: both free-page thresholds,
/// or nearness to the quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefragThresholds {
    /// Free pages at least this percentage of the database ...
    pub free_percent: u8,
    /// ... and at least this many bytes.
    pub free_bytes: u64,
    /// Or the database within this percentage of the quota (0: off).
    pub near_quota_percent: u8,
}

impl Default for DefragThresholds {
    fn default() -> Self {
        DefragThresholds {
            free_percent: 45,
            free_bytes: 100 * 1024 * 1024,
            near_quota_percent: 20,
        }
    }
}

impl DefragThresholds {
    /// The thresholds `etcd`'s annotations set, defaults for the rest; `Err` names the
    /// annotation whose value is not valid and says what is.
    pub fn of(etcd: &Etcd) -> Result<DefragThresholds, (&'static str, String)> {
        let annotations = etcd.metadata.annotations.as_ref();
        let get = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        let mut t = DefragThresholds::default();
        if let Some(v) = get(DEFRAG_FREE_PERCENT) {
            t.free_percent = percent(v).map_err(|m| (DEFRAG_FREE_PERCENT, m))?;
        }
        if let Some(v) = get(DEFRAG_FREE_BYTES) {
            t.free_bytes = quantity_to_bytes(v).map_err(|e| {
                (
                    DEFRAG_FREE_BYTES,
                    format!("{e}; use a size such as \"100Mi\""),
                )
            })?;
        }
        if let Some(v) = get(DEFRAG_NEAR_QUOTA_PERCENT) {
            t.near_quota_percent = percent(v).map_err(|m| (DEFRAG_NEAR_QUOTA_PERCENT, m))?;
        }
        Ok(t)
    }
}

fn percent(v: &str) -> Result<u8, String> {
    v.parse::<u8>()
        .ok()
        .filter(|p| *p <= 100)
        .ok_or_else(|| format!("{v:?} is not a percentage; use a whole number from 0 to 100"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(key: &str, value: &str) -> Etcd {
        let mut etcd = Etcd::new("etcd-main", Default::default());
        etcd.metadata.annotations = Some([(key.to_string(), value.to_string())].into());
        etcd
    }

    #[test]
    fn annotations_set_thresholds_and_bad_values_name_the_annotation() {
        assert_eq!(
            DefragThresholds::of(&with(DEFRAG_FREE_BYTES, "1Gi")).map(|t| t.free_bytes),
            Ok(1024 * 1024 * 1024)
        );
        assert_eq!(
            DefragThresholds::of(&with(DEFRAG_NEAR_QUOTA_PERCENT, "0"))
                .map(|t| t.near_quota_percent),
            Ok(0)
        );
        let (key, message) = DefragThresholds::of(&with(DEFRAG_FREE_PERCENT, "145")).unwrap_err();
        assert_eq!(key, DEFRAG_FREE_PERCENT);
        assert!(message.contains("0 to 100"), "{message}");
        let (key, _) = DefragThresholds::of(&with(DEFRAG_FREE_BYTES, "lots")).unwrap_err();
        assert_eq!(key, DEFRAG_FREE_BYTES);
    }
}
