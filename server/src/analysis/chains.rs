//! Which nodes' stacks compare with the others'. A node whose agent walks frame pointers (its
//! kernel refused the unwinder, or it was told to) loses the callers of code built without
//! them, where nodes unwinding from tables keep them: its stack-derived values (a function's
//! total, a flame graph's frames) are then lower for reasons that are not its workload's, and
//! would put it in a band, or a band's difference, that is not there. Its samples' counts are
//! not affected (a sample is counted whatever its chain).

use bimodal_proto::v1::{EventKind, NodeFacts};

/// Indexes of the nodes (their facts in order, `None` where unknown) whose `event` stacks may
/// stop short where other nodes' reach their root: frame-pointer chains beside whole ones.
/// Nodes whose agents do not say (agents before the fact was sent, which unwound from tables)
/// count as whole; when no node has whole chains, all compare alike and none is left out.
pub fn short_chains<'a>(facts: impl IntoIterator<Item = Option<&'a NodeFacts>>, event: EventKind) -> Vec<usize> {
    let whole: Vec<bool> = facts
        .into_iter()
        .map(|f| f.and_then(|f| f.unwinding(event)).is_none_or(|m| m.whole_chains()))
        .collect();
    if !whole.contains(&true) {
        return Vec::new();
    }
    whole.iter().enumerate().filter(|(_, &w)| !w).map(|(i, _)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bimodal_proto::v1::EventSourceReport;
    use bimodal_proto::UnwindMethod;

    fn node(cpu: Option<UnwindMethod>) -> NodeFacts {
        NodeFacts {
            event_sources: vec![
                EventSourceReport {
                    event: EventKind::Cpu as i32,
                    unwinding: cpu.map_or("", |m| m.name()).into(),
                    ..Default::default()
                },
                EventSourceReport {
                    event: EventKind::PageFault as i32,
                    unwinding: UnwindMethod::KernelTables.name().into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    /// Frame pointers beside tables or stack copies are short; an agent that does not say, and
    /// another event kind of the same node, are not.
    #[test]
    fn frame_pointers_beside_whole_chains_are_short() {
        let nodes = [
            Some(node(Some(UnwindMethod::KernelTables))),
            Some(node(Some(UnwindMethod::FramePointers))),
            Some(node(None)),
            None,
            Some(node(Some(UnwindMethod::StackCopies))),
            Some(node(Some(UnwindMethod::FramePointers))),
        ];
        assert_eq!(short_chains(nodes.iter().map(Option::as_ref), EventKind::Cpu), [1, 5]);
        assert!(short_chains(nodes.iter().map(Option::as_ref), EventKind::PageFault).is_empty());
    }

    /// A fleet that walks frame pointers everywhere compares alike: nobody is left out.
    #[test]
    fn frame_pointers_everywhere_compare_alike() {
        let nodes = [
            node(Some(UnwindMethod::FramePointers)),
            node(Some(UnwindMethod::FramePointers)),
        ];
        assert!(short_chains(nodes.iter().map(Some), EventKind::Cpu).is_empty());
    }
}
