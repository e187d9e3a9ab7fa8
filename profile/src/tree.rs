//! The flame-graph tree the web UI renders: inclusive values, children sorted by name.

use std::collections::BTreeMap;

use crate::{FrameKind, Profile};

/// One node of the flame graph.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TreeNode {
    pub name: String,
    pub kind: TreeKind,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub module: String,
    /// Inclusive value.
    pub value: u64,
    pub children: Vec<TreeNode>,
}

/// [`FrameKind`] plus the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TreeKind {
    Root,
    Process,
    User,
    Kernel,
    Jit,
    Data,
    Unknown,
}

impl From<FrameKind> for TreeKind {
    fn from(k: FrameKind) -> Self {
        match k {
            FrameKind::Process => TreeKind::Process,
            FrameKind::User => TreeKind::User,
            FrameKind::Kernel => TreeKind::Kernel,
            FrameKind::Jit => TreeKind::Jit,
            FrameKind::Data => TreeKind::Data,
            FrameKind::Unknown => TreeKind::Unknown,
        }
    }
}

#[derive(Default)]
struct Building {
    kind: Option<TreeKind>,
    module: String,
    value: u64,
    children: BTreeMap<String, Building>,
}

impl Building {
    fn child(&mut self, name: String, kind: TreeKind, module: &str) -> &mut Building {
        let c = self.children.entry(name).or_default();
        if c.kind.is_none() {
            c.kind = Some(kind);
            c.module = module.to_owned();
        }
        c
    }

    fn finish(self, name: String) -> TreeNode {
        TreeNode {
            name,
            kind: self.kind.unwrap_or(TreeKind::Root),
            module: self.module,
            value: self.value,
            children: self.children.into_iter().map(|(n, c)| c.finish(n)).collect(),
        }
    }
}

pub(crate) fn build(p: &Profile) -> TreeNode {
    let mut root = Building::default();
    for s in &p.samples {
        root.value += s.value;
        let mut node = root.child(s.comm.clone(), TreeKind::Process, "");
        node.value += s.value;
        for &i in s.stack.iter().rev() {
            let f = &p.frames[i as usize];
            node = node.child(f.display_name(), f.kind.into(), &f.module);
            node.value += s.value;
        }
    }
    root.finish("all".to_owned())
}

#[cfg(test)]
mod tests {
    use crate::{Frame, FrameKind, Profile, Sample};

    /// Values are inclusive and shared prefixes merge into one path.
    #[test]
    fn tree_values_are_inclusive() {
        let mut p = Profile::new("cpu", "nanoseconds");
        let main = p.intern(Frame {
            kind: FrameKind::User,
            function: "main".into(),
            module: "/bin/x".into(),
            build_id: String::new(),
            address: 1,
            file_offset: 1,
            elf_address: 0,
        });
        let spin = p.intern(Frame {
            function: "spin".into(),
            address: 2,
            ..p.frames[main as usize].clone()
        });
        for (stack, value) in [(vec![spin, main], 30), (vec![main], 10)] {
            p.samples.push(Sample {
                comm: "x".into(),
                stack,
                count: 1,
                value,
            });
        }
        let t = p.to_tree();
        assert_eq!(t.value, 40);
        let proc = &t.children[0];
        assert_eq!((proc.name.as_str(), proc.value), ("x", 40));
        let m = &proc.children[0];
        assert_eq!((m.name.as_str(), m.value), ("main", 40));
        assert_eq!(m.children[0].name, "spin");
        assert_eq!(m.children[0].value, 30);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["children"][0]["kind"], "process");
    }
}
