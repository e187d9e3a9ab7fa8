//! The flame-graph tree the web UI renders: inclusive values, children sorted by name.

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use crate::{FrameKind, Profile};

/// One node of the flame graph.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TreeNode {
    pub name: String,
    pub kind: TreeKind,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub module: String,
    /// Hex build id of the module; [`SEVERAL_BUILDS`] when the node merges frames of different
    /// builds (the same function in two versions of a binary); empty when unknown.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub build_id: String,
    /// Inclusive value.
    pub value: u64,
    pub children: Vec<TreeNode>,
}

/// The build id of a node whose frames come from more than one build of its module.
pub const SEVERAL_BUILDS: &str = "several";

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

/// A tree under construction: nodes in an arena, each child found by (parent, name) in one map,
/// names interned once per distinct frame rather than once per sample.
struct Building<'a> {
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    nodes: Vec<Built<'a>>,
    children: HashMap<(u32, u32), u32>,
}

struct Built<'a> {
    name: u32,
    kind: TreeKind,
    module: &'a str,
    build_id: &'a str,
    value: u64,
}

impl<'a> Building<'a> {
    fn name(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.name_ids.insert(name.to_owned(), id);
        id
    }

    fn child(&mut self, parent: u32, name: u32, kind: TreeKind, module: &'a str, build_id: &'a str) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.children.entry((parent, name)).or_insert(next);
        if id == next {
            self.nodes.push(Built {
                name,
                kind,
                module,
                build_id,
                value: 0,
            });
        } else {
            let n = &mut self.nodes[id as usize];
            if n.build_id != build_id {
                n.build_id = SEVERAL_BUILDS;
            }
        }
        id
    }

    fn finish(self) -> TreeNode {
        let mut kids: Vec<Vec<u32>> = vec![Vec::new(); self.nodes.len()];
        for (&(parent, _), &child) in &self.children {
            kids[parent as usize].push(child);
        }
        for k in &mut kids {
            k.sort_unstable_by(|a, b| {
                self.names[self.nodes[*a as usize].name as usize]
                    .cmp(&self.names[self.nodes[*b as usize].name as usize])
            });
        }
        self.node(0, &kids)
    }

    fn node(&self, id: u32, kids: &[Vec<u32>]) -> TreeNode {
        let n = &self.nodes[id as usize];
        TreeNode {
            name: self.names[n.name as usize].clone(),
            kind: n.kind,
            module: n.module.to_owned(),
            build_id: n.build_id.to_owned(),
            value: n.value,
            children: kids[id as usize].iter().map(|&c| self.node(c, kids)).collect(),
        }
    }
}

pub(crate) fn build(p: &Profile) -> TreeNode {
    let mut b = Building {
        names: Vec::new(),
        name_ids: HashMap::default(),
        nodes: Vec::new(),
        children: HashMap::default(),
    };
    let all = b.name("all");
    b.nodes.push(Built {
        name: all,
        kind: TreeKind::Root,
        module: "",
        build_id: "",
        value: 0,
    });
    let frame_names: Vec<u32> = p.frames.iter().map(|f| b.name(&f.display_name())).collect();
    for s in &p.samples {
        b.nodes[0].value += s.value;
        let comm = b.name(&s.comm);
        let mut node = b.child(0, comm, TreeKind::Process, "", "");
        b.nodes[node as usize].value += s.value;
        for &i in s.stack.iter().rev() {
            let f = &p.frames[i as usize];
            node = b.child(node, frame_names[i as usize], f.kind.into(), &f.module, &f.build_id);
            b.nodes[node as usize].value += s.value;
        }
    }
    b.finish()
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

    /// A node keeps its frames' build id, or says that they came from several builds.
    #[test]
    fn nodes_carry_their_build_id() {
        let mut p = Profile::new("cpu", "nanoseconds");
        let frame = |function: &str, build_id: &str, address| Frame {
            kind: FrameKind::User,
            function: function.into(),
            module: "/bin/x".into(),
            build_id: build_id.into(),
            address,
            file_offset: address,
            elf_address: 0,
        };
        let main_v1 = p.intern(frame("main", "aa11", 1));
        let main_v2 = p.intern(frame("main", "bb22", 2));
        let spin = p.intern(frame("spin", "aa11", 3));
        for stack in [vec![spin, main_v1], vec![main_v2]] {
            p.samples.push(Sample {
                comm: "x".into(),
                stack,
                count: 1,
                value: 1,
            });
        }
        let t = p.to_tree();
        let main = &t.children[0].children[0];
        assert_eq!(main.build_id, super::SEVERAL_BUILDS);
        assert_eq!(main.children[0].build_id, "aa11");
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["children"][0]["children"][0]["children"][0]["build_id"], "aa11");
        assert!(
            json["children"][0].get("build_id").is_none(),
            "a process has no build id"
        );
    }
}
