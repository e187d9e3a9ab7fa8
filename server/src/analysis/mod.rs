//! What the server concludes from stored samples, on plain data: no database in here. Storage
//! reads feed it; the API and the `bimodal` CLI present it.
//!
//! - [`bands`]: bands of nodes in one metric, or a reasoned "no bands";
//! - [`modes`]: whether a fleet's values have more than one mode, against its own shape;
//! - [`rank`]: tests between two groups of nodes that count each node once;
//! - [`compare`]: the strongest bands over every metric, and the labels and functions that
//!   differ between them;
//! - [`held_out`]: the band metric's own functions tested on the half of the window that did
//!   not cut the bands;
//! - [`chains`]: which nodes' stacks may stop short beside the others', and stay out of
//!   stack-derived comparisons.

pub mod bands;
pub mod chains;
pub mod compare;
pub mod held_out;
pub mod modes;
pub mod rank;

/// Nodes by index into a comparison's nodes, as a set whose membership costs one lookup. Index
/// lists are tested against every node of a fleet: a list's own `contains` there made compare
/// quadratic in the fleet's size (18 s of its 30 s at 100,000 nodes in two hardware classes).
#[derive(Clone, Debug, Default)]
pub struct NodeSet(Vec<bool>);

impl NodeSet {
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a usize>) -> NodeSet {
        let mut set = Vec::new();
        for &i in nodes {
            if i >= set.len() {
                set.resize(i + 1, false);
            }
            set[i] = true;
        }
        NodeSet(set)
    }

    pub fn contains(&self, i: usize) -> bool {
        self.0.get(i).copied().unwrap_or(false)
    }
}

/// A value as a sentence shows it: whole from 100, to three decimals below.
pub fn figure(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{}", (v * 1e3).round() / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_set_holds_its_nodes_and_no_other() {
        let set = NodeSet::of(&[7, 2, 2, 40]);
        let held: Vec<usize> = (0..100).filter(|&i| set.contains(i)).collect();
        assert_eq!(held, vec![2, 7, 40]);
        assert!(!NodeSet::of(&[]).contains(0));
    }
}
