//! What storage writes for one batch: its rows, aggregated by ingest (`ingest::rows::build`)
//! from a checked wire batch, and who sent it. Defined here, below ingest, so that the writer
//! takes them without knowing where they came from.

use std::sync::Arc;

use bimodal_proto::v1;

use super::rows::{PlacementRow, ProcessRow};

/// Who sent a batch: the stream's Hello, checked.
#[derive(Clone, Debug)]
pub struct Sender {
    pub node: Arc<str>,
    /// The operator's labels, sorted, with names that clash with facts renamed `exported_…`.
    pub labels: Vec<(String, String)>,
    pub agent_version: Arc<str>,
    pub facts: Option<v1::NodeFacts>,
}

/// One aggregated row of `samples_input`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleAgg {
    /// 0: a stack's samples; 1: a function's.
    pub kind: u8,
    pub event: &'static str,
    pub source: Arc<str>,
    pub process_id: u64,
    pub stack_id: u64,
    pub function_id: u64,
    pub count: u64,
    pub value: u64,
    pub self_count: u64,
    pub self_value: u64,
}

/// A data sample by the object and cache line it touched.
#[derive(Clone, Debug)]
pub struct DataAgg {
    pub event: &'static str,
    pub source: Arc<str>,
    pub process_id: u64,
    pub stack_id: u64,
    pub mapping_kind: String,
    pub mapping_path: String,
    pub symbol: String,
    pub cache_line: u64,
    pub count: u64,
    pub value: u64,
}

/// A frame as stored in `frames`.
#[derive(Clone, Debug)]
pub struct FrameDim {
    pub id: u64,
    pub kind: u8,
    pub module: String,
    pub build_id: Arc<str>,
    pub file_offset: u64,
    pub elf_address: u64,
    pub address: u64,
    /// The name the agent sent (empty for frames it left to the server).
    pub function: String,
}

/// A function: the name a person reads and the file name of its module.
#[derive(Clone, Debug)]
pub struct FunctionDim {
    pub id: u64,
    pub name: String,
    pub module: String,
}

/// A source of one event kind in this batch.
#[derive(Clone, Debug)]
pub struct SourceDim {
    pub event: &'static str,
    pub name: Arc<str>,
    pub unit: String,
    pub description: String,
    pub dropped: u64,
}

/// Everything storage writes for one batch.
#[derive(Clone, Debug)]
pub struct BatchRows {
    pub batch_id: [u8; 16],
    pub resend: bool,
    pub node: Arc<str>,
    pub agent_version: Arc<str>,
    /// Unix seconds.
    pub start_time: u32,
    pub end_time: u32,
    pub samples: Vec<SampleAgg>,
    pub data_samples: Vec<DataAgg>,
    pub counters: Vec<(String, u64)>,
    pub placements: Vec<PlacementRow>,
    pub stacks: Vec<(u64, Arc<[u64]>)>,
    pub frames: Vec<FrameDim>,
    pub processes: Vec<ProcessRow>,
    pub functions: Vec<FunctionDim>,
    /// (frame, function) of frames named here, remembered once the functions are written.
    pub frame_functions: Vec<(u64, u64)>,
    pub sources: Vec<SourceDim>,
    /// Samples taken, all events.
    pub sample_count: u64,
}

impl BatchRows {
    /// Rows this batch adds to the write buffer (its weight for backpressure).
    pub fn weight(&self) -> usize {
        self.samples.len() + self.data_samples.len() + self.counters.len() + self.placements.len() + self.frames.len()
    }
}

/// What storage wrote already (today): dimension rows not worth building again, and the
/// function of frames named before. Only ids whose rows are written are known.
pub trait Known {
    fn frame(&self, id: u64) -> bool;
    fn stack(&self, id: u64) -> bool;
    fn process(&self, id: u64) -> bool;
    /// The function of a frame, when its row is written.
    fn function_of(&self, frame_id: u64) -> Option<u64>;
}

/// Nothing written yet (tests).
#[derive(Debug, Default)]
pub struct NothingKnown;

impl Known for NothingKnown {
    fn frame(&self, _: u64) -> bool {
        false
    }
    fn stack(&self, _: u64) -> bool {
        false
    }
    fn process(&self, _: u64) -> bool {
        false
    }
    fn function_of(&self, _: u64) -> Option<u64> {
        None
    }
}
