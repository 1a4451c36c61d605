//! The fault-injection suite: clients record what they did and saw against a local quorate
//! cluster while real faults are injected, and the checker proves the history linearizable with
//! nothing acknowledged lost.

pub mod checker;
pub mod cluster;
pub mod faults;
pub mod history;
pub mod leases;
pub mod report;
pub mod run;
pub mod second_checker;
mod steps;
pub mod watch;
pub mod workload;
