//! The one rule for memory held remote from its threads (the ScyllaDB `.bss` case): which
//! mappings are judged, and when one is a finding. The agent's `placement` command and node facts
//! and the server's node page and compare all apply it, so a mapping is remote in one place iff
//! it is in the others.

use std::collections::BTreeMap;

/// Mapping classes whose placement is judged: the program's data and the memory it allocates.
/// Text and mapped files are shared and read-mostly; stacks follow their threads.
pub const JUDGED_CLASSES: [&str; 4] = ["data", "bss", "heap", "anon"];

/// A mapping with fewer resident bytes than this is never a finding: moving it would not matter.
pub const REMOTE_MIN_BYTES: u64 = 1 << 20;

/// The share of a mapping's resident pages, in percent, that must be on NUMA nodes none of the
/// process's threads ran on for the mapping to be a finding.
pub const REMOTE_MIN_PERCENT: u64 = 80;

/// Whether mappings of `class` (as the agent names classes) are judged.
pub fn is_judged(class: &str) -> bool {
    JUDGED_CLASSES.contains(&class)
}

/// How much of one mapping is remote from its process's threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// The remote node holding most of its pages (the lowest id on a tie, so findings are stable).
    pub node: u32,
    /// Pages on nodes none of the threads ran on.
    pub remote_pages: u64,
    /// All its resident pages.
    pub total_pages: u64,
}

/// Pages on nodes not in `thread_nodes`, and all pages; (0, 0) when no thread's node is known.
pub fn remote_pages(pages_per_node: &BTreeMap<u32, u64>, thread_nodes: &[u32]) -> (u64, u64) {
    if thread_nodes.is_empty() {
        return (0, 0);
    }
    pages_per_node.iter().fold((0, 0), |(remote, total), (node, &pages)| {
        let far = !thread_nodes.contains(node);
        (remote + if far { pages } else { 0 }, total + pages)
    })
}

/// The rule: a mapping with `pages_per_node` resident pages of `page_size` bytes (0: unknown, 4 KiB
/// assumed) is remote when at least [`REMOTE_MIN_BYTES`] are resident and at least
/// [`REMOTE_MIN_PERCENT`]% of its pages are on nodes none of `thread_nodes` is. `None` otherwise,
/// and when no thread's node is known.
pub fn remote(pages_per_node: &BTreeMap<u32, u64>, thread_nodes: &[u32], page_size: u64) -> Option<Remote> {
    let page_size = if page_size == 0 { 4096 } else { page_size };
    let (remote_pages, total_pages) = remote_pages(pages_per_node, thread_nodes);
    if total_pages.saturating_mul(page_size) < REMOTE_MIN_BYTES
        || remote_pages.saturating_mul(100) < total_pages.saturating_mul(REMOTE_MIN_PERCENT)
    {
        return None;
    }
    let node = pages_per_node
        .iter()
        .filter(|(node, _)| !thread_nodes.contains(node))
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(&node, _)| node)?;
    Some(Remote {
        node,
        remote_pages,
        total_pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(of: &[(u32, u64)]) -> BTreeMap<u32, u64> {
        of.iter().copied().collect()
    }

    #[test]
    fn a_mapping_mostly_on_a_node_without_threads_is_remote() {
        // 1 MiB of 4 KiB pages, all on node 1; threads on node 0
        let found = remote(&pages(&[(1, 256)]), &[0], 4096);
        assert_eq!(
            found,
            Some(Remote {
                node: 1,
                remote_pages: 256,
                total_pages: 256
            })
        );
        // 80% is enough, 79% is not
        assert!(remote(&pages(&[(0, 60), (1, 240)]), &[0], 4096).is_some());
        assert!(remote(&pages(&[(0, 64), (1, 236)]), &[0], 4096).is_none());
    }

    #[test]
    fn size_is_measured_in_bytes_whatever_the_page_size() {
        // 255 pages of 4 KiB are under 1 MiB; one 2 MiB huge page is over it
        assert!(remote(&pages(&[(1, 255)]), &[0], 4096).is_none());
        assert!(remote(&pages(&[(1, 1)]), &[0], 2 << 20).is_some());
        assert!(remote(&pages(&[(1, 256)]), &[0], 0).is_some(), "unknown: 4 KiB pages");
    }

    #[test]
    fn nothing_is_remote_when_no_thread_node_is_known() {
        assert_eq!(remote(&pages(&[(1, 1000)]), &[], 4096), None);
        assert_eq!(remote_pages(&pages(&[(1, 1000)]), &[]), (0, 0));
    }

    #[test]
    fn the_remote_node_with_most_pages_is_named_and_ties_go_to_the_lowest() {
        let four = pages(&[(0, 10), (1, 300), (2, 500), (3, 500)]);
        assert_eq!(remote(&four, &[0], 4096).map(|r| r.node), Some(2));
        assert_eq!(remote_pages(&four, &[0]), (1300, 1310));
    }

    #[test]
    fn judged_classes_are_data_and_allocated_memory() {
        for class in ["data", "bss", "heap", "anon"] {
            assert!(is_judged(class));
        }
        for class in ["text", "rodata", "stack", "file", "shm", "vdso"] {
            assert!(!is_judged(class));
        }
    }
}
