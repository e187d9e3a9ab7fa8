//! A profile as bimodal holds it between sampling and display: interned frames, stacks of them,
//! and samples weighted by count and value. The agent's `record` and the server's API both
//! build one and export it as folded text, pprof or a flame-graph tree, so the three formats
//! are written once.

pub mod diff;
mod folded;
mod pprof;
mod tree;

use std::collections::HashMap;

use bimodal_proto::v1;

pub use tree::{TreeKind, TreeNode};

/// What a frame is: where its address lives decides how it is shown and symbolized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    /// The synthetic frame naming the process (its comm), at the root of each stack.
    Process,
    User,
    Kernel,
    Jit,
    /// The data object a sample's address touched (`[bss] table`), as the leaf of a data profile.
    Data,
    Unknown,
}

impl From<v1::FrameKind> for FrameKind {
    fn from(k: v1::FrameKind) -> Self {
        match k {
            v1::FrameKind::User => FrameKind::User,
            v1::FrameKind::Kernel => FrameKind::Kernel,
            v1::FrameKind::Jit => FrameKind::Jit,
            v1::FrameKind::Unspecified => FrameKind::Unknown,
        }
    }
}

/// One frame of a stack, symbolized or not.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub kind: FrameKind,
    /// Function name; empty when the frame could not be symbolized.
    pub function: String,
    /// File (user) or kernel module the address belongs to; may be empty.
    pub module: String,
    /// Hex build id of the module; empty when unknown.
    pub build_id: String,
    /// Address in the process or kernel.
    pub address: u64,
    /// Offset of the address in `module`; 0 when unknown.
    pub file_offset: u64,
    /// The address as `module`'s ELF headers state it; 0 when unknown.
    pub elf_address: u64,
}

impl Frame {
    /// The name a person reads: the function, else `[module+0xoffset]`, else `[unknown]`.
    pub fn display_name(&self) -> String {
        if !self.function.is_empty() {
            return self.function.clone();
        }
        let module = self.module.rsplit('/').next().unwrap_or_default();
        match (module.is_empty(), self.file_offset) {
            (false, 0) => format!("[{module}+{:#x}]", self.address),
            (false, off) => format!("[{module}+{off:#x}]"),
            (true, _) => "[unknown]".to_owned(),
        }
    }

    fn from_proto(f: &v1::Frame) -> Self {
        Frame {
            kind: v1::FrameKind::try_from(f.kind)
                .unwrap_or(v1::FrameKind::Unspecified)
                .into(),
            function: f.function.clone(),
            module: f.module.clone(),
            build_id: hex(&f.build_id),
            address: f.address,
            file_offset: f.file_offset,
            elf_address: f.elf_address,
        }
    }
}

// Build ids and batch ids as text: one definition, in the wire crate.
pub use bimodal_proto::{hex, unhex};

/// A sample: a process name, a stack (leaf first, indices into `Profile::frames`) and weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub comm: String,
    pub stack: Vec<u32>,
    /// Samples taken.
    pub count: u64,
    /// Events they stand for (count × period), in `Profile::unit`.
    pub value: u64,
}

/// Samples of one event kind over one time range.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Event kind name (`cpu`, `page_fault`, …).
    pub event: String,
    /// Unit of `Sample::value`.
    pub unit: String,
    /// Sample period in `unit` (0 when mixed or unknown).
    pub period: u64,
    pub start_unix_nanos: i64,
    pub duration_nanos: i64,
    pub frames: Vec<Frame>,
    pub samples: Vec<Sample>,
    frame_index: HashMap<Frame, u32>,
}

impl Profile {
    pub fn new(event: &str, unit: &str) -> Self {
        Profile {
            event: event.to_owned(),
            unit: unit.to_owned(),
            ..Default::default()
        }
    }

    /// Interns a frame and returns its index.
    pub fn intern(&mut self, frame: Frame) -> u32 {
        if let Some(&i) = self.frame_index.get(&frame) {
            return i;
        }
        let i = u32::try_from(self.frames.len()).expect("fewer than 2^32 distinct frames");
        self.frames.push(frame.clone());
        self.frame_index.insert(frame, i);
        i
    }

    /// Adds the samples of `event` from a wire batch. Samples whose stack or frame indices
    /// point outside the batch are skipped and counted in the return value.
    pub fn add_batch(&mut self, batch: &v1::Batch, event: v1::EventKind) -> usize {
        let mut skipped = 0;
        for s in batch.samples.iter().filter(|s| s.event == event as i32) {
            match self.stack_of(batch, s.stack_index) {
                Some(stack) => self.samples.push(Sample {
                    comm: s.comm.clone(),
                    stack,
                    count: s.count,
                    value: s.value,
                }),
                None => skipped += 1,
            }
        }
        skipped
    }

    /// Adds the data samples of `event` from a wire batch, each stack topped by a frame naming
    /// the data object (`[bss] table`, `[heap]`); returns how many were skipped as malformed.
    pub fn add_data_samples(&mut self, batch: &v1::Batch, event: v1::EventKind) -> usize {
        let mut skipped = 0;
        for d in batch.data_samples.iter().filter(|d| d.event == event as i32) {
            let Some(code) = self.stack_of(batch, d.stack_index) else {
                skipped += 1;
                continue;
            };
            let name = match (d.symbol.as_str(), d.mapping_kind.as_str()) {
                ("", kind) => format!("[{kind}] {}", d.mapping_path.rsplit('/').next().unwrap_or_default()),
                (symbol, kind) => format!("[{kind}] {symbol}"),
            };
            let data = self.intern(Frame {
                kind: FrameKind::Data,
                function: name.trim_end().to_owned(),
                module: d.mapping_path.clone(),
                build_id: String::new(),
                address: d.cache_line,
                file_offset: 0,
                elf_address: 0,
            });
            self.samples.push(Sample {
                comm: d.comm.clone(),
                stack: std::iter::once(data).chain(code).collect(),
                count: d.count,
                value: d.value,
            });
        }
        skipped
    }

    /// The interned frames of a batch's stack, leaf first; `None` when an index is out of range.
    fn stack_of(&mut self, batch: &v1::Batch, stack_index: u32) -> Option<Vec<u32>> {
        let stack = batch.stacks.get(stack_index as usize)?;
        stack
            .frame_indices
            .iter()
            .map(|&fi| batch.frames.get(fi as usize).map(|f| self.intern(Frame::from_proto(f))))
            .collect()
    }

    /// Total value of all samples.
    pub fn total(&self) -> u64 {
        self.samples.iter().map(|s| s.value).sum()
    }

    /// Folded stacks, one line per distinct stack: `comm;root;…;leaf value`, sorted.
    pub fn to_folded(&self) -> String {
        folded::write(self)
    }

    /// The gzip-compressed pprof encoding.
    pub fn to_pprof(&self) -> Vec<u8> {
        pprof::write(self)
    }

    /// The flame-graph tree: root "all", then process, then frames root to leaf.
    pub fn to_tree(&self) -> TreeNode {
        tree::build(self)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_text_round_trips_and_bad_text_is_none() {
        let bytes = [0u8, 0x7f, 0xab, 0xff];
        assert_eq!(super::unhex(&super::hex(&bytes)), Some(bytes.to_vec()));
        assert_eq!(super::unhex("ABcd"), Some(vec![0xab, 0xcd]));
        assert_eq!(super::unhex("abc"), None);
        assert_eq!(super::unhex("zz"), None);
        // A multi-byte character is not a digit (and no slice panics on it).
        assert_eq!(super::unhex("éa"), None);
    }
}
