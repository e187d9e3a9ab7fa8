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

/// Where each of a comparison's nodes keeps its value in a [`NodeValues`]: every node, or only
/// the nodes read (a sample of a few hundred). Shared by the rows of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct Columns {
    /// Per node, its column, or [`Columns::NOT_READ`].
    at: std::sync::Arc<[u32]>,
    count: usize,
}

impl Columns {
    const NOT_READ: u32 = u32::MAX;

    /// A column for every one of `nodes` nodes.
    pub fn every(nodes: usize) -> Columns {
        Columns::of(nodes, 0..nodes)
    }

    /// Columns for the nodes `read` (indices below `nodes`), in their order; the others have
    /// no value.
    pub fn of(nodes: usize, read: impl IntoIterator<Item = usize>) -> Columns {
        let mut at = vec![Columns::NOT_READ; nodes];
        let mut count = 0;
        for i in read {
            if at[i] == Columns::NOT_READ {
                at[i] = count as u32;
                count += 1;
            }
        }
        Columns { at: at.into(), count }
    }

    /// Columns kept: the nodes read.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Node `i`'s column, if it has one.
    pub fn column(&self, i: usize) -> Option<usize> {
        self.at.get(i).filter(|&&c| c != Columns::NOT_READ).map(|&c| c as usize)
    }
}

/// A value or none per node of a comparison, kept for the nodes read only ([`Columns`]): a
/// function's values over a sample of 400 of 100,000 nodes, kept for all of them, made a
/// compare of two groups hold 2.9 GB. Indexed by node, as a `Vec<Option<f64>>` would be.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeValues {
    columns: Columns,
    values: Vec<Option<f64>>,
}

impl NodeValues {
    /// `values`, one per column of `columns`.
    pub fn new(columns: Columns, values: Vec<Option<f64>>) -> NodeValues {
        assert_eq!(values.len(), columns.count(), "one value per column");
        NodeValues { columns, values }
    }

    /// Nodes of the comparison (read or not).
    pub fn len(&self) -> usize {
        self.columns.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Node `i`'s value; none for a node not read.
    pub fn get(&self, i: usize) -> Option<f64> {
        self.columns.column(i).and_then(|c| self.values[c])
    }

    /// Node `i` has no value (a node read, its value not comparable).
    pub fn clear(&mut self, i: usize) {
        if let Some(c) = self.columns.column(i) {
            self.values[c] = None;
        }
    }

    /// The values of the nodes read, and of `other` for the same nodes, in pairs (both of one
    /// table's columns).
    pub fn pairs<'a>(&'a self, other: &'a NodeValues) -> impl Iterator<Item = (Option<f64>, Option<f64>)> + 'a {
        debug_assert!(
            std::sync::Arc::ptr_eq(&self.columns.at, &other.columns.at) || self.columns == other.columns,
            "values of one table"
        );
        self.values.iter().copied().zip(other.values.iter().copied())
    }
}

impl std::ops::Index<usize> for NodeValues {
    type Output = Option<f64>;

    fn index(&self, i: usize) -> &Option<f64> {
        match self.columns.column(i) {
            Some(c) => &self.values[c],
            None => &None,
        }
    }
}

/// Every node's value.
impl From<Vec<Option<f64>>> for NodeValues {
    fn from(values: Vec<Option<f64>>) -> NodeValues {
        NodeValues {
            columns: Columns::every(values.len()),
            values,
        }
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

    /// Values kept for a sample of the nodes read as a value per node, none for the rest; a
    /// node's value cleared is none.
    #[test]
    fn values_of_the_nodes_read_are_indexed_by_node() {
        let columns = Columns::of(6, [4, 1]);
        assert_eq!(columns.count(), 2);
        let mut values = NodeValues::new(columns, vec![Some(1.5), Some(4.0)]);
        let by_node: Vec<Option<f64>> = (0..values.len()).map(|i| values[i]).collect();
        // Columns in the order the nodes were given: node 4's first.
        assert_eq!(by_node, vec![None, Some(4.0), None, None, Some(1.5), None]);
        assert_eq!(values.get(9), None);
        values.clear(4);
        values.clear(2);
        assert_eq!(values.get(4), None);
        assert_eq!(values.get(1), Some(4.0));
        let every = NodeValues::from(vec![Some(1.0), None]);
        assert_eq!((every.len(), every[0], every[1]), (2, Some(1.0), None));
    }
}
