//! Whether a starting agent adopts the etcd an earlier agent of the same member started: etcd
//! outlives the agent (a crash of quorate's own process must never be an outage of etcd), so a
//! restarted agent first looks for it, and knows it only by evidence — the recorded process is
//! still the same process (PID and start time), it runs on this member's data directory, it
//! holds that directory's lock, and it answers on the client URL as the member the data belongs
//! to. Incomplete evidence of a running etcd is a reason to wait, never to start a second etcd
//! on the same data directory.

/// What `/proc` shows of the process the record names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessSeen {
    /// No such process, or only a zombie of it: it has exited.
    Gone,
    /// The PID belongs to a process with another start time: the recorded one exited and its
    /// PID was reused.
    Reused,
    /// The same process, but its command line does not name this member (an etcd: its data
    /// directory; an agent: its cluster directory and member).
    OtherDataDir,
    /// The recorded process, on this member's data directory.
    Same,
}

/// What the recorded process answered on this member's client URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// etcd's status: the cluster and member it serves.
    Ids {
        /// The cluster ID.
        cluster_id: u64,
        /// The member ID.
        member_id: u64,
    },
    /// No answer (yet), and why.
    Silent(String),
}

/// Everything the adoption decision rests on, gathered once by the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdoptEvidence {
    /// The recorded PID, `None` when no etcd was recorded for this member.
    pub recorded_pid: Option<u32>,
    /// The recorded process as `/proc` shows it.
    pub process: ProcessSeen,
    /// Whether the process holds the data directory's lock (its WAL file lock).
    pub holds_lock: bool,
    /// Its answer on the client URL.
    pub answer: Answer,
    /// The (cluster ID, member ID) this data directory was last known to hold, when known.
    pub expected: Option<(u64, u64)>,
}

/// What the starting agent does about a recorded etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// The recorded etcd is this member's and serves: run the member loop with it, without
    /// restarting or re-initialising anything.
    Adopt,
    /// No etcd of this member runs: start one as usual; the reason is for the log.
    Start(String),
    /// An etcd runs on this member's data directory but the evidence is incomplete: wait and
    /// look again; starting a second etcd on the same data could only fail or do harm.
    Wait(String),
}

/// The adoption decision; see the module documentation.
pub fn decide_adoption(e: &AdoptEvidence, data_dir: &str) -> Adoption {
    let Some(pid) = e.recorded_pid else {
        return Adoption::Start("no etcd process was recorded for this member".into());
    };
    match e.process {
        ProcessSeen::Gone => {
            return Adoption::Start(format!("the recorded etcd (PID {pid}) has exited"));
        }
        ProcessSeen::Reused => {
            return Adoption::Start(format!(
                "PID {pid} of the recorded etcd now belongs to another process (its start time \
                 differs)"
            ));
        }
        ProcessSeen::OtherDataDir => {
            return Adoption::Start(format!(
                "the recorded process {pid} does not run on {data_dir}"
            ));
        }
        ProcessSeen::Same => {}
    }
    if !e.holds_lock {
        return Adoption::Wait(format!(
            "etcd (PID {pid}) runs on {data_dir} but does not hold its lock (starting or \
             stopping); waiting for it before deciding, not starting a second etcd on the same data"
        ));
    }
    let (cluster_id, member_id) = match &e.answer {
        Answer::Silent(why) => {
            return Adoption::Wait(format!(
                "etcd (PID {pid}) holds {data_dir} but does not answer on its client URL yet \
                 ({why}); waiting for it, not starting a second etcd on the same data"
            ));
        }
        Answer::Ids {
            cluster_id,
            member_id,
        } => (*cluster_id, *member_id),
    };
    match e.expected {
        Some((c, m)) if (c, m) != (cluster_id, member_id) => Adoption::Wait(format!(
            "etcd (PID {pid}) on {data_dir} answers as member {member_id:x} of cluster \
             {cluster_id:x}, but the data was recorded as member {m:x} of cluster {c:x}; not \
             adopting it and not starting a second etcd on its data: stop process {pid} by hand \
             if it should go"
        )),
        _ => Adoption::Adopt,
    }
}

/// Whether a starting local supervisor adopts the agent a crashed supervisor started, on the
/// same kind of evidence: the recorded process is the same process (PID and start time), its
/// command line names this cluster and member, and it answers on the member's agent port. A
/// live agent that does not answer yet is waited for, never doubled (a second agent would
/// find its port taken and its etcd already adopted).
pub fn decide_agent_adoption(
    recorded_pid: Option<u32>,
    process: &ProcessSeen,
    answers: bool,
) -> Adoption {
    let Some(pid) = recorded_pid else {
        return Adoption::Start("no agent process was recorded for this member".into());
    };
    match process {
        ProcessSeen::Gone => Adoption::Start(format!("the recorded agent (PID {pid}) has exited")),
        ProcessSeen::Reused => Adoption::Start(format!(
            "PID {pid} of the recorded agent now belongs to another process"
        )),
        ProcessSeen::OtherDataDir => Adoption::Start(format!(
            "the recorded process {pid} is not this member's agent"
        )),
        ProcessSeen::Same if answers => Adoption::Adopt,
        ProcessSeen::Same => Adoption::Wait(format!(
            "the agent (PID {pid}) runs but does not answer on its port yet; waiting for it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving() -> AdoptEvidence {
        AdoptEvidence {
            recorded_pid: Some(42),
            process: ProcessSeen::Same,
            holds_lock: true,
            answer: Answer::Ids {
                cluster_id: 7,
                member_id: 9,
            },
            expected: Some((7, 9)),
        }
    }

    fn decide(e: &AdoptEvidence) -> Adoption {
        decide_adoption(e, "/d")
    }

    #[test]
    fn the_recorded_etcd_that_serves_as_this_member_is_adopted() {
        assert_eq!(decide(&serving()), Adoption::Adopt);
        // Never recorded IDs (it died before its first answer): identity and lock suffice.
        let e = AdoptEvidence {
            expected: None,
            ..serving()
        };
        assert_eq!(decide(&e), Adoption::Adopt);
    }

    #[test]
    fn without_a_live_recorded_process_etcd_is_started() {
        let none = AdoptEvidence {
            recorded_pid: None,
            ..serving()
        };
        assert!(matches!(decide(&none), Adoption::Start(_)));
        for process in [
            ProcessSeen::Gone,
            ProcessSeen::Reused,
            ProcessSeen::OtherDataDir,
        ] {
            let e = AdoptEvidence {
                process: process.clone(),
                holds_lock: false,
                answer: Answer::Silent("refused".into()),
                ..serving()
            };
            assert!(matches!(decide(&e), Adoption::Start(_)), "{process:?}");
        }
    }

    #[test]
    fn a_running_etcd_with_incomplete_evidence_is_waited_for_never_doubled() {
        let no_lock = AdoptEvidence {
            holds_lock: false,
            ..serving()
        };
        let Adoption::Wait(why) = decide(&no_lock) else {
            panic!("no lock must wait");
        };
        assert!(why.contains("lock") && why.contains("42"), "{why}");
        let silent = AdoptEvidence {
            answer: Answer::Silent("connection refused".into()),
            ..serving()
        };
        let Adoption::Wait(why) = decide(&silent) else {
            panic!("silence must wait");
        };
        assert!(why.contains("connection refused"), "{why}");
        let stranger = AdoptEvidence {
            answer: Answer::Ids {
                cluster_id: 7,
                member_id: 10,
            },
            ..serving()
        };
        let Adoption::Wait(why) = decide(&stranger) else {
            panic!("another member's answer must wait");
        };
        assert!(why.contains("by hand"), "{why}");
    }

    #[test]
    fn a_running_agent_that_answers_is_adopted_a_silent_one_waited_for() {
        assert_eq!(
            decide_agent_adoption(Some(5), &ProcessSeen::Same, true),
            Adoption::Adopt
        );
        assert!(matches!(
            decide_agent_adoption(Some(5), &ProcessSeen::Same, false),
            Adoption::Wait(_)
        ));
        for process in [
            ProcessSeen::Gone,
            ProcessSeen::Reused,
            ProcessSeen::OtherDataDir,
        ] {
            assert!(matches!(
                decide_agent_adoption(Some(5), &process, true),
                Adoption::Start(_)
            ));
        }
        assert!(matches!(
            decide_agent_adoption(None, &ProcessSeen::Same, true),
            Adoption::Start(_)
        ));
    }
}
