//! Folded stacks (`comm;root;…;leaf 42`), the format of Brendan Gregg's stackcollapse scripts:
//! the human exchange format for debugging and golden files.

use std::collections::BTreeMap;

use crate::{FrameKind, Profile};

/// Kernel and JIT frames carry the `_[k]` and `_[j]` suffixes, as stackcollapse-perf.pl
/// --kernel --jit writes them.
const KERNEL_SUFFIX: &str = "_[k]";
const JIT_SUFFIX: &str = "_[j]";

pub(crate) fn write(p: &Profile) -> String {
    let mut out = String::new();
    for (line, value) in lines(p) {
        out.push_str(&line);
        out.push(' ');
        out.push_str(&value.to_string());
        out.push('\n');
    }
    out
}

/// Each distinct stack's folded text and summed value, sorted.
pub(crate) fn lines(p: &Profile) -> BTreeMap<String, u64> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for s in &p.samples {
        let mut line = sanitize(&s.comm);
        for &i in s.stack.iter().rev() {
            let f = &p.frames[i as usize];
            line.push(';');
            line.push_str(&sanitize(&f.display_name()));
            match f.kind {
                FrameKind::Kernel => line.push_str(KERNEL_SUFFIX),
                FrameKind::Jit => line.push_str(JIT_SUFFIX),
                _ => {}
            }
        }
        *lines.entry(line).or_default() += s.value;
    }
    lines
}

/// `;` separates frames and the last space separates the count, so neither may appear
/// inside a name; C++ and Rust names contain spaces (`operator new`, `<T as Trait>`).
fn sanitize(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use crate::{Frame, FrameKind, Profile, Sample};

    fn frame(kind: FrameKind, function: &str) -> Frame {
        Frame {
            kind,
            function: function.into(),
            module: String::new(),
            build_id: String::new(),
            address: 0,
            file_offset: 0,
            elf_address: 0,
        }
    }

    /// Stacks are written root first, kernel frames marked, equal stacks merged.
    #[test]
    fn folded_is_root_first_and_merged() {
        let mut p = Profile::new("cpu", "nanoseconds");
        let leaf = p.intern(frame(FrameKind::Kernel, "clear_page"));
        let mid = p.intern(frame(FrameKind::User, "touch;pages"));
        let root = p.intern(frame(FrameKind::User, "main"));
        for _ in 0..2 {
            p.samples.push(Sample {
                comm: "fixture".into(),
                stack: vec![leaf, mid, root],
                count: 1,
                value: 10,
            });
        }
        assert_eq!(p.to_folded(), "fixture;main;touch:pages;clear_page_[k] 20\n");
    }
}
