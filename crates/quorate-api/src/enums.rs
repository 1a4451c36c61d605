//! Typed forms of the enum-like string fields (`metrics`, `garbageCollectionPolicy`,
//! `compression.policy`, `autoCompactionMode`, `backendBboltFreelistType`). The spec keeps the
//! raw strings so validation can name a bad value; code after validation uses these.

use std::fmt;

macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every accepted value, in the spelling the API uses.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling used in the API.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// Parses the exact API spelling (case-sensitive, as druid's CRD enum is).
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The accepted spellings joined for error messages, e.g. `"a", "b"`.
            pub fn allowed() -> String {
                $name::ALL
                    .iter()
                    .map(|v| format!("{:?}", v.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// Level of detail of etcd's metrics.
    MetricsLevel {
        /// Default metrics.
        Basic => "basic",
        /// Adds histograms.
        Extensive => "extensive",
    }
}

string_enum! {
    /// Which full snapshots garbage collection keeps.
    GarbageCollectionPolicy {
        /// Hourly for a day, daily for a week, weekly for four weeks.
        Exponential => "Exponential",
        /// The newest `maxBackupsLimitBasedGC` full snapshots.
        LimitBased => "LimitBased",
    }
}

string_enum! {
    /// Compression algorithm of snapshots.
    CompressionPolicy {
        /// gzip, files end in `.gz`.
        Gzip => "gzip",
        /// LZW, files end in `.Z`.
        Lzw => "lzw",
        /// zlib, files end in `.zlib`.
        Zlib => "zlib",
    }
}

impl CompressionPolicy {
    /// File-name suffix etcd-backup-restore uses for snapshots compressed this way.
    pub fn file_suffix(self) -> &'static str {
        match self {
            CompressionPolicy::Gzip => ".gz",
            CompressionPolicy::Lzw => ".Z",
            CompressionPolicy::Zlib => ".zlib",
        }
    }
}

string_enum! {
    /// etcd's auto-compaction mode.
    CompactionMode {
        /// Retention is a duration.
        Periodic => "periodic",
        /// Retention is a number of revisions.
        Revision => "revision",
    }
}

string_enum! {
    /// bbolt freelist type of the etcd backend.
    FreelistType {
        /// Array freelist (druid's default, keeps the DB small).
        Array => "array",
        /// Map freelist (etcd 3.5's default).
        Map => "map",
    }
}

string_enum! {
    /// Traffic distribution preference of the client Service.
    TrafficDistribution {
        /// Prefer endpoints close to the client.
        PreferClose => "PreferClose",
        /// Prefer endpoints in the client's zone.
        PreferSameZone => "PreferSameZone",
        /// Prefer endpoints on the client's node.
        PreferSameNode => "PreferSameNode",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_is_exact_and_round_trips() {
        for p in CompressionPolicy::ALL {
            assert_eq!(CompressionPolicy::parse(p.as_str()), Some(*p));
        }
        assert_eq!(CompressionPolicy::parse("GZIP"), None);
        assert_eq!(
            GarbageCollectionPolicy::parse("LimitBased"),
            Some(GarbageCollectionPolicy::LimitBased)
        );
        assert_eq!(GarbageCollectionPolicy::parse("limitbased"), None);
        assert_eq!(MetricsLevel::allowed(), "\"basic\", \"extensive\"");
        assert_eq!(CompressionPolicy::Lzw.file_suffix(), ".Z");
    }
}
