//! The debug-info store and the symbolizer that names frames from it.
//!
//! Agents send user frames as (build id, file offset) without names. Files are kept by build id in
//! the layout debuginfod uses, `<root>/<build-id>/executable` for images agents upload and
//! `<root>/<build-id>/debuginfo` for separate debug files, and frames are named from the best one
//! (the debug file when there is one) with blazesym. Names are cached per (build id, offset);
//! a frame no file names keeps its module and offset, and gets the reason.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bimodal_profile::hex;
use bimodal_proto::v1::{self, debuginfo_server::Debuginfo, DebuginfoKind};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// Why a file was not stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("not an ELF file: {0}")]
    NotElf(String),
    #[error("the file carries build id {actual}, not the {declared} it was uploaded for")]
    BuildIdMismatch { declared: String, actual: String },
    #[error("the file carries no build id")]
    NoBuildId,
    #[error("the file has no symbols (.symtab, .debug_info or exported functions) to name frames with")]
    NoSymbols,
    #[error("a build id is 1 to 64 bytes, not {0}")]
    BadBuildId(usize),
    #[error("the upload stated {declared} bytes but carried {received}")]
    Truncated { declared: u64, received: u64 },
    #[error("the file is larger than the {0} bytes this server accepts")]
    TooLarge(u64),
    #[error("storing the file failed: {0}")]
    Io(#[from] std::io::Error),
}

fn kind_file_name(kind: DebuginfoKind) -> &'static str {
    match kind {
        DebuginfoKind::Debuginfo => "debuginfo",
        _ => "executable",
    }
}

/// Files by build id on local disk.
#[derive(Debug)]
pub struct DebuginfoStore {
    root: PathBuf,
    /// Largest file accepted, in bytes.
    pub max_bytes: u64,
}

impl DebuginfoStore {
    pub fn open(root: &Path, max_bytes: u64) -> std::io::Result<DebuginfoStore> {
        std::fs::create_dir_all(root)?;
        Ok(DebuginfoStore {
            root: root.to_owned(),
            max_bytes,
        })
    }

    fn dir(&self, build_id: &[u8]) -> PathBuf {
        self.root.join(hex(build_id))
    }

    /// The kinds stored for a build id.
    pub fn stored(&self, build_id: &[u8]) -> Vec<DebuginfoKind> {
        [DebuginfoKind::Executable, DebuginfoKind::Debuginfo]
            .into_iter()
            .filter(|k| self.dir(build_id).join(kind_file_name(*k)).is_file())
            .collect()
    }

    /// The file to name frames of `build_id` (hex) from: the debug file, else the image.
    pub fn best(&self, build_id_hex: &str) -> Option<PathBuf> {
        let dir = self.root.join(build_id_hex);
        ["debuginfo", "executable"]
            .into_iter()
            .map(|name| dir.join(name))
            .find(|p| p.is_file())
    }

    /// A path in the store's file system for an upload in progress.
    pub fn incoming(&self) -> PathBuf {
        self.root.join(format!(".incoming-{}", uuid::Uuid::new_v4()))
    }

    /// Checks the file at `incoming` and moves it into place; removes it when it is refused.
    pub fn commit(&self, build_id: &[u8], kind: DebuginfoKind, incoming: &Path) -> Result<(), UploadError> {
        let checked = self.check(build_id, incoming);
        if let Err(e) = checked {
            let _ = std::fs::remove_file(incoming);
            return Err(e);
        }
        let dir = self.dir(build_id);
        std::fs::create_dir_all(&dir)?;
        std::fs::rename(incoming, dir.join(kind_file_name(kind)))?;
        Ok(())
    }

    fn check(&self, build_id: &[u8], path: &Path) -> Result<(), UploadError> {
        if build_id.is_empty() || build_id.len() > 64 {
            return Err(UploadError::BadBuildId(build_id.len()));
        }
        let file = bimodal_proto::inspect_debuginfo(&std::fs::read(path)?).map_err(UploadError::NotElf)?;
        let actual = file.build_id.ok_or(UploadError::NoBuildId)?;
        if actual != build_id {
            return Err(UploadError::BuildIdMismatch {
                declared: hex(build_id),
                actual: hex(&actual),
            });
        }
        if !file.has_symbols {
            return Err(UploadError::NoSymbols);
        }
        Ok(())
    }
}

/// A frame to name: hex build id, file offset and ELF address (0 when unknown). Agents send the
/// address to look up: the leaf's, and for callers the return address minus one, inside the call
/// instruction. The ELF address is preferred: separate debug files do not map file offsets.
pub type FrameRef = (String, u64, u64);

/// Names frames from the store, with a cache. blazesym's symbolizer is bound to one thread, so
/// one thread does all naming and callers wait for its answers.
pub struct Symbolizer {
    store: Arc<DebuginfoStore>,
    requests: std::sync::mpsc::Sender<NamerRequest>,
}

enum NamerRequest {
    Names(Vec<FrameRef>, std::sync::mpsc::Sender<Vec<Result<String, String>>>),
    /// A better file arrived for this build id.
    Invalidate(Vec<u8>),
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer").field("store", &self.store).finish()
    }
}

/// Cached names at most; beyond it the cache starts over (a server restart does the same).
const MAX_CACHED_NAMES: usize = 1 << 20;

/// The naming thread's state.
struct Namer {
    store: Arc<DebuginfoStore>,
    blazesym: blazesym::symbolize::Symbolizer,
    /// Names found, by frame; dropped for a build id whose file changed.
    names: HashMap<FrameRef, String>,
}

impl Namer {
    fn run(mut self, requests: std::sync::mpsc::Receiver<NamerRequest>) {
        while let Ok(request) = requests.recv() {
            match request {
                NamerRequest::Names(frames, reply) => {
                    let _ = reply.send(self.names(&frames));
                }
                NamerRequest::Invalidate(build_id) => {
                    let id = hex(&build_id);
                    self.names.retain(|(b, _, _), _| *b != id);
                    // blazesym caches parsed files by path: a new symbolizer forgets them all.
                    self.blazesym = blazesym::symbolize::Symbolizer::new();
                }
            }
        }
    }

    fn names(&mut self, frames: &[FrameRef]) -> Vec<Result<String, String>> {
        let mut out: Vec<Result<String, String>> = vec![Err(String::new()); frames.len()];
        // Per build id and per kind of address (ELF address or file offset).
        let mut by_build_id: HashMap<(&str, bool), Vec<usize>> = HashMap::new();
        for (i, frame) in frames.iter().enumerate() {
            match self.names.get(frame) {
                Some(name) => out[i] = Ok(name.clone()),
                None => by_build_id.entry((&frame.0, frame.2 != 0)).or_default().push(i),
            }
        }
        if self.names.len() > MAX_CACHED_NAMES {
            self.names.clear();
        }
        for ((build_id, by_elf_address), indices) in by_build_id {
            let Some(path) = self.store.best(build_id) else {
                for &i in &indices {
                    out[i] = Err(format!("no debug info uploaded for build id {build_id}"));
                }
                continue;
            };
            let addresses: Vec<u64> = indices
                .iter()
                .map(|&i| if by_elf_address { frames[i].2 } else { frames[i].1 })
                .collect();
            let input = if by_elf_address {
                Input::VirtOffset(addresses.as_slice())
            } else {
                Input::FileOffset(addresses.as_slice())
            };
            let mut elf = Elf::new(&path);
            elf.debug_syms = true;
            let source = Source::Elf(elf);
            match self.blazesym.symbolize(&source, input) {
                Ok(symbolized) => {
                    for (&i, sym) in indices.iter().zip(symbolized) {
                        out[i] = match sym {
                            Symbolized::Sym(sym) => {
                                let name = sym.name.into_owned();
                                self.names.insert(frames[i].clone(), name.clone());
                                Ok(name)
                            }
                            Symbolized::Unknown(reason) => Err(format!("{reason} in {}", path.display())),
                        };
                    }
                }
                Err(e) => {
                    for &i in &indices {
                        out[i] = Err(format!("{}: {e}", path.display()));
                    }
                }
            }
        }
        out
    }
}

impl Symbolizer {
    /// Starts the naming thread.
    pub fn new(store: Arc<DebuginfoStore>) -> Symbolizer {
        let (requests, incoming) = std::sync::mpsc::channel();
        let thread_store = store.clone();
        std::thread::Builder::new()
            .name("bimodal-symbolize".into())
            .spawn(move || {
                let namer = Namer {
                    store: thread_store,
                    blazesym: blazesym::symbolize::Symbolizer::new(),
                    names: HashMap::new(),
                };
                namer.run(incoming)
            })
            .expect("spawning a thread");
        Symbolizer { store, requests }
    }

    pub fn store(&self) -> &Arc<DebuginfoStore> {
        &self.store
    }

    /// Forgets what was named from `build_id`'s files (a better file arrived).
    pub fn invalidate(&self, build_id: &[u8]) {
        let _ = self.requests.send(NamerRequest::Invalidate(build_id.to_vec()));
    }

    /// Names for `frames`, in order: the function, or why there is none. Blocks until the naming
    /// thread answers: call it from blocking code.
    pub fn names(&self, frames: &[FrameRef]) -> Vec<Result<String, String>> {
        if frames.is_empty() {
            return Vec::new();
        }
        let (reply, answer) = std::sync::mpsc::channel();
        let gone = || vec![Err("the naming thread is gone".to_owned()); frames.len()];
        if self.requests.send(NamerRequest::Names(frames.to_vec(), reply)).is_err() {
            return gone();
        }
        answer.recv().unwrap_or_else(|_| gone())
    }

    /// Names the unnamed user frames of a wire batch that carry a build id; the others keep
    /// their reason.
    pub fn name_wire_frames(&self, frames: &mut [v1::Frame]) {
        let wanted: Vec<usize> = (0..frames.len())
            .filter(|&i| frames[i].function.is_empty() && !frames[i].build_id.is_empty())
            .collect();
        let refs: Vec<FrameRef> = wanted.iter().map(|&i| frame_ref(&frames[i])).collect();
        for (i, name) in wanted.into_iter().zip(self.names(&refs)) {
            match name {
                Ok(name) => {
                    frames[i].function = name;
                    frames[i].unsymbolized_reason.clear();
                }
                Err(reason) => frames[i].unsymbolized_reason = reason,
            }
        }
    }

    /// Names the unnamed frames of a profile read from storage (uploads may have come since
    /// the frames were stored).
    pub fn name_profile_frames(&self, frames: &mut [bimodal_profile::Frame]) {
        let wanted: Vec<usize> = (0..frames.len())
            .filter(|&i| frames[i].function.is_empty() && !frames[i].build_id.is_empty())
            .collect();
        let refs: Vec<FrameRef> = wanted
            .iter()
            .map(|&i| (frames[i].build_id.clone(), frames[i].file_offset, frames[i].elf_address))
            .collect();
        for (i, name) in wanted.into_iter().zip(self.names(&refs)) {
            if let Ok(name) = name {
                frames[i].function = name;
            }
        }
    }
}

fn frame_ref(frame: &v1::Frame) -> FrameRef {
    (hex(&frame.build_id), frame.file_offset, frame.elf_address)
}

/// Serves `bimodal.v1.Debuginfo` from a [`Symbolizer`]'s store.
#[derive(Debug, Clone)]
pub struct DebuginfoService {
    symbolizer: Arc<Symbolizer>,
}

impl DebuginfoService {
    pub fn new(symbolizer: Arc<Symbolizer>) -> Self {
        DebuginfoService { symbolizer }
    }
}

fn status(store: &DebuginfoStore, build_id: Vec<u8>) -> v1::DebuginfoStatus {
    let stored = store.stored(&build_id);
    v1::DebuginfoStatus {
        build_id,
        wanted: stored.is_empty(),
        stored: stored.into_iter().map(|k| k as i32).collect(),
    }
}

#[tonic::async_trait]
impl Debuginfo for DebuginfoService {
    async fn check(&self, request: Request<v1::DebuginfoCheck>) -> Result<Response<v1::DebuginfoStatus>, Status> {
        let build_id = request.into_inner().build_id;
        if build_id.is_empty() || build_id.len() > 64 {
            return Err(Status::invalid_argument(
                UploadError::BadBuildId(build_id.len()).to_string(),
            ));
        }
        Ok(Response::new(status(self.symbolizer.store(), build_id)))
    }

    async fn upload(
        &self,
        request: Request<Streaming<v1::DebuginfoChunk>>,
    ) -> Result<Response<v1::DebuginfoStatus>, Status> {
        let store = self.symbolizer.store().clone();
        let mut chunks = request.into_inner();
        let first = chunks
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("an upload needs at least one message"))??;
        let kind = DebuginfoKind::try_from(first.kind).unwrap_or(DebuginfoKind::Unspecified);
        if kind == DebuginfoKind::Unspecified {
            return Err(Status::invalid_argument("the first message must give the kind"));
        }
        if first.size > store.max_bytes {
            return Err(Status::invalid_argument(
                UploadError::TooLarge(store.max_bytes).to_string(),
            ));
        }
        let build_id = first.build_id.clone();
        let incoming = store.incoming();
        let mut file = std::fs::File::create(&incoming).map_err(|e| Status::internal(e.to_string()))?;
        let mut received = 0u64;
        let mut write = |data: &[u8], received: &mut u64| -> Result<(), Status> {
            *received += data.len() as u64;
            if *received > first.size {
                return Err(Status::invalid_argument(format!(
                    "the upload carried more than the {} bytes it stated",
                    first.size
                )));
            }
            file.write_all(data).map_err(|e| Status::internal(e.to_string()))
        };
        let mut result = write(&first.data, &mut received);
        while result.is_ok() {
            match chunks.next().await {
                Some(Ok(chunk)) => result = write(&chunk.data, &mut received),
                Some(Err(status)) => result = Err(status),
                None => break,
            }
        }
        if result.is_ok() && received != first.size {
            result = Err(Status::invalid_argument(
                UploadError::Truncated {
                    declared: first.size,
                    received,
                }
                .to_string(),
            ));
        }
        if let Err(status) = result {
            let _ = std::fs::remove_file(&incoming);
            return Err(status);
        }
        let (symbolizer, id) = (self.symbolizer.clone(), build_id.clone());
        let committed = tokio::task::spawn_blocking(move || {
            store.commit(&id, kind, &incoming)?;
            symbolizer.invalidate(&id);
            Ok::<_, UploadError>(())
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        committed.map_err(|e| Status::invalid_argument(e.to_string()))?;
        tracing::info!(build_id = %hex(&build_id), kind = kind_file_name(kind), file = %first.file_name, bytes = received, "debug info stored");
        Ok(Response::new(status(self.symbolizer.store(), build_id)))
    }
}

/// Uploads `path` to the server at `server_url` (`bimodal-server debuginfo upload`); returns
/// what the server stores for its build id afterwards, in words.
pub async fn upload_file(path: &Path, server_url: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file = bimodal_proto::inspect_debuginfo(&data)
        .map_err(|e| anyhow::anyhow!("{} is not an ELF file: {e}", path.display()))?;
    let kind = file.kind;
    let build_id = file
        .build_id
        .with_context(|| format!("{} has no build id (link with --build-id)", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let chunks = bimodal_proto::debuginfo_chunks(&build_id, kind, &name, &data);
    let mut client = v1::debuginfo_client::DebuginfoClient::connect(server_url.to_owned())
        .await
        .with_context(|| format!("cannot reach the server at {server_url}"))?;
    let status = client
        .upload(tokio_stream::iter(chunks))
        .await
        .map_err(|s| anyhow::anyhow!("the server refused {}: {}", path.display(), s.message()))?
        .into_inner();
    Ok(format!(
        "stored {} ({} bytes) as {} for build id {}",
        path.display(),
        data.len(),
        kind_file_name(kind),
        hex(&status.build_id)
    ))
}
