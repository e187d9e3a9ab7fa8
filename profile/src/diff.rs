//! Two profiles of one event side by side: a tree with both values per frame path (the
//! differential flame graph), and folded pairs `stack a b` (the input of Brendan Gregg's
//! difffolded.pl and flamegraph.pl's differential mode).
//!
//! Each side's values are divided by its own scale on the way out: callers that weight samples
//! in fixed point (the server's per-CPU-second normalization) or show shares of each side's
//! total say by how much.

use crate::tree::{TreeKind, TreeNode};
use crate::Profile;

/// One frame path of two profiles.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DiffNode {
    pub name: String,
    pub kind: TreeKind,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub module: String,
    /// Inclusive value in the first profile (the baseline) and in the second.
    pub a: f64,
    pub b: f64,
    pub children: Vec<DiffNode>,
}

/// The merged tree of `a` and `b`: every path of either, with both values (0 where a profile
/// lacks the path).
pub fn tree(a: &Profile, b: &Profile, scale_a: f64, scale_b: f64) -> DiffNode {
    merge(Some(a.to_tree()), Some(b.to_tree()), (scale_a, scale_b))
}

fn merge(a: Option<TreeNode>, b: Option<TreeNode>, scale: (f64, f64)) -> DiffNode {
    let first = a.as_ref().or(b.as_ref()).expect("one side present");
    let mut node = DiffNode {
        name: first.name.clone(),
        kind: first.kind,
        module: first.module.clone(),
        a: a.as_ref().map_or(0.0, |n| n.value as f64 / scale.0),
        b: b.as_ref().map_or(0.0, |n| n.value as f64 / scale.1),
        children: Vec::new(),
    };
    // Children are sorted by name on both sides: a merge join.
    let mut left = a.map(|n| n.children).unwrap_or_default().into_iter().peekable();
    let mut right = b.map(|n| n.children).unwrap_or_default().into_iter().peekable();
    loop {
        let order = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(l), Some(r)) => l.name.cmp(&r.name),
        };
        node.children.push(match order {
            std::cmp::Ordering::Less => merge(left.next(), None, scale),
            std::cmp::Ordering::Greater => merge(None, right.next(), scale),
            std::cmp::Ordering::Equal => merge(left.next(), right.next(), scale),
        });
    }
    node
}

/// `stack a b` lines of every stack of either profile, sorted, each side's values divided by
/// its scale and written with at most three decimals.
pub fn folded(a: &Profile, b: &Profile, scale_a: f64, scale_b: f64) -> String {
    let (la, lb) = (crate::folded::lines(a), crate::folded::lines(b));
    let mut stacks: Vec<&String> = la.keys().chain(lb.keys()).collect();
    stacks.sort();
    stacks.dedup();
    let number = |v: u64, scale: f64| {
        let text = format!("{:.3}", v as f64 / scale);
        let text = text.trim_end_matches('0').trim_end_matches('.');
        text.to_owned()
    };
    let mut out = String::new();
    for stack in stacks {
        let (va, vb) = (la.get(stack).copied().unwrap_or(0), lb.get(stack).copied().unwrap_or(0));
        out.push_str(&format!("{stack} {} {}\n", number(va, scale_a), number(vb, scale_b)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Frame, FrameKind, Sample};

    fn profile(stacks: &[(&[&str], u64)]) -> Profile {
        let mut p = Profile::new("page_fault", "faults");
        for (names, value) in stacks {
            // Leaf first, as samples hold them.
            let stack = names
                .iter()
                .rev()
                .map(|n| {
                    p.intern(Frame {
                        kind: FrameKind::User,
                        function: (*n).into(),
                        module: "app".into(),
                        build_id: String::new(),
                        address: n.len() as u64,
                        file_offset: 0,
                        elf_address: 0,
                    })
                })
                .collect();
            p.samples.push(Sample {
                comm: "app".into(),
                stack,
                count: 1,
                value: *value,
            });
        }
        p
    }

    /// Paths of either side appear with both values; shared paths merge.
    #[test]
    fn both_sides_per_path() {
        let a = profile(&[(&["main", "work"], 3000), (&["main", "idle"], 1000)]);
        let b = profile(&[(&["main", "work"], 9000), (&["main", "fault"], 500)]);
        let t = tree(&a, &b, 1000.0, 1000.0);
        assert_eq!((t.a, t.b), (4.0, 9.5));
        let main = &t.children[0].children[0];
        assert_eq!(main.name, "main");
        let kids: Vec<(&str, f64, f64)> = main.children.iter().map(|c| (c.name.as_str(), c.a, c.b)).collect();
        assert_eq!(kids, [("fault", 0.0, 0.5), ("idle", 1.0, 0.0), ("work", 3.0, 9.0)]);
        assert_eq!(
            folded(&a, &b, 1000.0, 1000.0),
            "app;main;fault 0 0.5\napp;main;idle 1 0\napp;main;work 3 9\n"
        );
        // Shares of each side's total.
        let shares = tree(&a, &b, 4000.0, 9500.0);
        assert_eq!((shares.a, shares.b), (1.0, 1.0));
    }
}
