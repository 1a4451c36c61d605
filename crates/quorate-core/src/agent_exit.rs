//! The exit codes of `quorate agent`: the contract between the agent process and whoever
//! supervises it. Local mode's supervisor restarts an agent that crashed but not one whose
//! member was removed on purpose, and tells the two apart by this code. It lives in core, below
//! both programs, because neither program crate may depend on the other; the agent maps its
//! own end (`AgentExit::code`) onto it and the local runtime reads it.

/// Exit code of `quorate agent` when its member was removed from the cluster.
pub const AGENT_EXIT_REMOVED: u8 = 3;
