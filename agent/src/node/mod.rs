//! The node's state that goes with its samples: what the machine looks like (`topology`), how
//! its NUMA and fault counters move (`counters`), where a process's memory and threads are
//! (`placement`), who the node and its processes are (`identity`, `kubernetes`), the facts the
//! server splits bands by (`facts`) and units of work (`work`); `collect` reads them every
//! interval.

pub mod collect;
pub mod counters;
pub mod facts;
pub mod identity;
pub mod kubernetes;
pub mod placement;
pub mod topology;
pub mod work;
