//! Keeping a long-running cluster's database small without stalling anyone:
//! defragmentation rounds (`defrag`).

pub mod defrag;
