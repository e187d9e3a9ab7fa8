//! Generated wire types: `bimodal.v1` (the agent → server ingest service) and
//! `perftools.profiles` (pprof).

/// The agent → server protocol, version 1.
pub mod v1 {
    #![allow(missing_docs, clippy::all, missing_debug_implementations)]
    tonic::include_proto!("bimodal.v1");
}

/// The pprof profile format.
pub mod pprof {
    #![allow(missing_docs, clippy::all, missing_debug_implementations)]
    tonic::include_proto!("perftools.profiles");
}

impl v1::EventKind {
    /// Every event kind a sample can have, in wire order.
    pub const ALL: [v1::EventKind; 6] = [
        v1::EventKind::Cpu,
        v1::EventKind::PageFault,
        v1::EventKind::CacheMiss,
        v1::EventKind::RemoteAccess,
        v1::EventKind::NumaHintFault,
        v1::EventKind::PageMigration,
    ];

    /// The one name of this event kind, shared by BPF, SQL, the API and the UI.
    pub fn name(self) -> &'static str {
        match self {
            v1::EventKind::Unspecified => "unspecified",
            v1::EventKind::Cpu => "cpu",
            v1::EventKind::PageFault => "page_fault",
            v1::EventKind::CacheMiss => "cache_miss",
            v1::EventKind::RemoteAccess => "remote_access",
            v1::EventKind::NumaHintFault => "numa_hint_fault",
            v1::EventKind::PageMigration => "page_migration",
        }
    }

    /// Parses a name produced by [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The unit of a sample's `value` for this event kind.
    pub fn unit(self) -> &'static str {
        match self {
            v1::EventKind::Cpu => "nanoseconds",
            v1::EventKind::PageMigration => "pages",
            _ => "count",
        }
    }
}
