//! `bimodal.v1.Debuginfo`: agents ask whether the server has symbols for a build id and upload
//! the image when it has none; operators upload separate debug files. An upload is streamed to a
//! temporary file (bounded in size, never held in memory), checked (ELF, the build id it claims,
//! symbols), read into a function table and stored in ClickHouse for every server. A build id's
//! stored file is never replaced by different content: the same file again is accepted, another
//! one is refused, also when both arrive at once at two servers (the decision is taken under the
//! build id's [lease](crate::storage::lease)). A separate debug file names frames in place of
//! its executable's table, so it must name every function the stored executable names alike; it
//! needs a token with the `symbols` scope, and is accepted only for an image the store knows (its
//! executable stored, or frames of it sent by an agent): nobody can name a build id's frames
//! before they exist (issue 49).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bimodal_profile::hex;
use bimodal_proto::v1::{self, debuginfo_server::Debuginfo, DebuginfoKind};
use sha2::Digest;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::names::Names;
use super::symtab;
use crate::metrics::{label, metrics};
use crate::serve::Peer;
use crate::storage::debuginfo::StoredFile;
use crate::storage::{StorageError, Store};
use crate::validate;

/// Why a file was not stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("not an ELF file: {0}")]
    NotElf(String),
    #[error("the file carries build id {actual}, not the {declared} it was uploaded for")]
    BuildIdMismatch { declared: String, actual: String },
    #[error("the file carries no build id")]
    NoBuildId,
    #[error("the file has no symbols (.symtab or exported functions) to name frames with")]
    NoSymbols,
    #[error("a build id is 1 to 64 bytes, not {0}")]
    BadBuildId(usize),
    #[error("the upload stated {declared} bytes but carried {received}")]
    Truncated { declared: u64, received: u64 },
    #[error("the file is larger than the {0} bytes this server accepts")]
    TooLarge(u64),
    #[error("the file name: {0}")]
    FileName(crate::validate::Invalid),
    #[error("build id {build_id} already has a different {kind} stored; the symbols of a build id are never replaced")]
    Conflict { build_id: String, kind: &'static str },
    #[error("build id {build_id}: the debug file contradicts the executable stored for it: {found}")]
    Disagrees {
        build_id: String,
        found: symtab::Disagreement,
    },
    #[error("reading the file's symbols failed: {0}")]
    Symbols(#[from] symtab::SymtabError),
    #[error("storing the file failed: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("another upload of build id {0} is being stored, and was for over {LEASE_WAIT:?}; retry later")]
    Busy(String),
    #[error("build id {0} is not known here: no executable is stored for it and no agent has sent frames of it; upload the executable first (a debug file is accepted only for an image the store knows)")]
    UnknownImage(String),
}

impl UploadError {
    /// The `reason` label of `bimodal_debuginfo_rejected_uploads_total`, None for the server's
    /// own failures (ClickHouse's are counted in `bimodal_clickhouse_errors_total`).
    fn reason(&self) -> Option<&'static str> {
        Some(match self {
            UploadError::Io(_) | UploadError::Storage(_) => return None,
            UploadError::Busy(_) => "busy",
            UploadError::NotElf(_) => "not_elf",
            UploadError::BuildIdMismatch { .. } => "build_id_mismatch",
            UploadError::NoBuildId => "no_build_id",
            UploadError::NoSymbols => "no_symbols",
            UploadError::BadBuildId(_) => "bad_build_id",
            UploadError::Truncated { .. } => "size_mismatch",
            UploadError::TooLarge(_) => "too_large",
            UploadError::FileName(_) => "bad_file_name",
            UploadError::Conflict { .. } => "conflict",
            UploadError::Disagrees { .. } => "disagrees_with_executable",
            UploadError::Symbols(_) => "unreadable_symbols",
            UploadError::UnknownImage(_) => "unknown_image",
        })
    }
}

/// Counts a refusal of a check or an upload under `reason`.
fn refused(reason: &'static str, status: Status) -> Status {
    metrics()
        .debuginfo_rejected
        .get_or_create(&label("reason", reason))
        .inc();
    status
}

impl From<UploadError> for Status {
    fn from(e: UploadError) -> Status {
        let status = match e {
            UploadError::Conflict { .. } => Status::already_exists(e.to_string()),
            UploadError::Storage(_) | UploadError::Busy(_) => Status::unavailable(e.to_string()),
            // Accepted later, once an agent sent frames of the image or its executable came.
            UploadError::UnknownImage(_) => Status::failed_precondition(e.to_string()),
            UploadError::Io(_) => Status::internal(e.to_string()),
            _ => Status::invalid_argument(e.to_string()),
        };
        match e.reason() {
            Some(reason) => refused(reason, status),
            None => {
                tracing::warn!(error = %e, "an upload failed on the server's side");
                status
            }
        }
    }
}

fn kind_name(kind: DebuginfoKind) -> &'static str {
    match kind {
        DebuginfoKind::Debuginfo => "debug file",
        _ => "executable",
    }
}

/// Serves `bimodal.v1.Debuginfo` into the shared store.
#[derive(Debug, Clone)]
pub struct DebuginfoService {
    store: Arc<Store>,
    names: Arc<Names>,
    /// Where uploads are written while they arrive.
    incoming: PathBuf,
    /// Largest file accepted, in bytes.
    max_bytes: u64,
    /// Checking and uploading need a token with the `write` scope.
    auth: crate::auth::Auth,
    /// Uploads received at once: each holds a file of up to `max_bytes` on disk while it arrives.
    uploads: Arc<tokio::sync::Semaphore>,
    /// Checks and uploads per client address.
    calls: Arc<crate::rate::Buckets>,
    /// Disputes recorded lately, by (build id, reporter, the stored file's digests): an agent
    /// checks a build id once per run, but a client checking in a loop would otherwise write a
    /// row a check.
    disputed: Arc<quick_cache::sync::Cache<(String, String, bimodal_proto::NamingDigests), ()>>,
}

/// Disputes remembered as recorded, to write each (build id, reporter, stored file) once.
const DISPUTES_REMEMBERED: usize = 16_384;

/// Uploads a server receives at once; more are told to retry later (agents try again in minutes).
pub const MAX_UPLOADS_AT_ONCE: usize = 4;
/// How long an upload waits for the build id's lease (another upload of it being stored, here
/// or at another server) before it is told to retry: storing the largest tables takes seconds,
/// and a wait without end would hold one of the [`MAX_UPLOADS_AT_ONCE`] places.
const LEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl DebuginfoService {
    pub fn new(
        store: Arc<Store>,
        names: Arc<Names>,
        incoming: PathBuf,
        max_bytes: u64,
        auth: crate::auth::Auth,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(&incoming)?;
        remove_stale_uploads(&incoming);
        Ok(DebuginfoService {
            store,
            names,
            incoming,
            max_bytes,
            auth,
            uploads: Arc::new(tokio::sync::Semaphore::new(MAX_UPLOADS_AT_ONCE)),
            calls: Arc::new(crate::rate::Buckets::new(crate::rate::Rate::DEBUGINFO_CALLS)),
            disputed: Arc::new(quick_cache::sync::Cache::new(DISPUTES_REMEMBERED)),
        })
    }

    /// Checks and uploads per client address beyond `rate` are refused
    /// ([`crate::rate::Rate::DEBUGINFO_CALLS`] by default).
    pub fn with_call_rate(self, rate: crate::rate::Rate) -> Self {
        DebuginfoService {
            calls: Arc::new(crate::rate::Buckets::new(rate)),
            ..self
        }
    }

    /// Checks and uploads are writes: a token with the `write` scope, and a client certificate
    /// where the server asks for them.
    /// Then within the client address's rate ([`crate::rate::Rate::DEBUGINFO_CALLS`]):
    /// `RESOURCE_EXHAUSTED` beyond it (an agent tries the build id again in minutes).
    /// Returns who asks, for the disputes they report: "address (token name)".
    #[allow(clippy::result_large_err)]
    fn allow_write<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let peer = request.extensions().get::<Peer>();
        let token = self
            .auth
            .allow_grpc(request.metadata(), peer, crate::auth::Scope::Write, None)?;
        let reporter = format!(
            "{} ({})",
            peer.map_or_else(|| "unknown address".to_owned(), |p| p.addr.ip().to_string()),
            token.as_deref().unwrap_or("no token")
        );
        let key = peer.map_or_else(
            || "address:unknown".to_owned(),
            |p| crate::rate::address_key(p.addr.ip()),
        );
        if let Err(wait) = self.calls.take(&key, std::time::Instant::now()) {
            let rate = self.calls.rate();
            return Err(refused(
                "rate",
                Status::resource_exhausted(format!(
                    "more than {} debug-info checks and uploads a second ({} at once) from {key}; retry in {} ms",
                    rate.per_second,
                    rate.burst,
                    wait.as_millis()
                )),
            ));
        }
        Ok(reporter)
    }

    /// Disputes and resolutions need a token with the `symbols` scope, as debug files do.
    #[allow(clippy::result_large_err)]
    fn allow_symbols<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let peer = request.extensions().get::<Peer>();
        self.auth
            .allow_grpc(request.metadata(), peer, crate::auth::Scope::Symbols, None)
            .map(drop)
    }

    async fn status(&self, build_id: Vec<u8>) -> Result<v1::DebuginfoStatus, Status> {
        let id = hex(&build_id);
        let files = self
            .store
            .debuginfo_files(std::slice::from_ref(&id))
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let stored: Vec<i32> = files
            .get(&id)
            .map(|f| f.iter().map(|f| i32::from(f.kind)).collect())
            .unwrap_or_default();
        let disputed = !stored.is_empty()
            && self
                .store
                .disputed(std::slice::from_ref(&id))
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?
                .contains(&id);
        Ok(v1::DebuginfoStatus {
            build_id,
            wanted: stored.is_empty(),
            stored,
            disputed,
        })
    }

    /// Compares an agent's copy of `id` with the executable stored for it, and records a
    /// dispute when they would name frames otherwise (unless an operator kept the stored one):
    /// its names are withheld from then on, on this server at once and on others when they next
    /// look the build id up.
    async fn compare_copy(&self, id: &str, copy: &bimodal_proto::NamingDigests, reporter: &str) -> Result<(), Status> {
        let unavailable = |e: StorageError| Status::unavailable(e.to_string());
        let Some(stored) = self.store.debuginfo_digests(id).await.map_err(unavailable)? else {
            return Ok(());
        };
        let Some(reason) = contradiction(&stored.digests, copy) else {
            return Ok(());
        };
        if stored.kept {
            tracing::debug!(build_id = %id, %reporter, reason, "a copy differs from an executable an operator kept");
            return Ok(());
        }
        let key = (id.to_owned(), reporter.to_owned(), stored.digests);
        if self.disputed.get(&key).is_some() {
            return Ok(());
        }
        self.store
            .record_dispute(id, reporter, reason)
            .await
            .map_err(unavailable)?;
        self.disputed.insert(key, ());
        self.names.invalidate(id);
        metrics().debuginfo_disputes.inc();
        tracing::warn!(build_id = %id, %reporter, reason, "an agent's copy contradicts the executable stored for its build id: its names are withheld until an operator resolves it (bimodal-server debuginfo disputes)");
        Ok(())
    }

    /// Checks an uploaded file and stores its function table.
    async fn commit(
        &self,
        build_id: &[u8],
        kind: DebuginfoKind,
        path: &Path,
        file_name: &str,
    ) -> Result<(), UploadError> {
        if build_id.is_empty() || build_id.len() > 64 {
            return Err(UploadError::BadBuildId(build_id.len()));
        }
        let (sha256, size, table, digests) = {
            let path = path.to_owned();
            let declared = build_id.to_vec();
            tokio::task::spawn_blocking(move || read_checked(&path, &declared))
                .await
                .map_err(|e| UploadError::Io(std::io::Error::other(e.to_string())))??
        };
        let id = hex(build_id);
        let kind_code = kind as u8;
        // Most uploads settle here: the same file again, or another one refused.
        if self.stored_already(&id, kind, sha256).await?.0 {
            return Ok(());
        }
        // Deciding and storing under the build id's lease, so that of two uploads racing, the
        // second sees what the first stored. (Dropped unreleased, by a client that went away,
        // the lease is released in the background.)
        let lease = tokio::time::timeout(LEASE_WAIT, self.store.debuginfo_lease(&id))
            .await
            .map_err(|_| UploadError::Busy(id.clone()))??;
        let stored = async {
            let (already, stored) = self.stored_already(&id, kind, sha256).await?;
            if already {
                return Ok(false);
            }
            if kind == DebuginfoKind::Debuginfo {
                self.check_known(&id, &stored).await?;
                self.check_against_executable(&id, &stored, path).await?;
            }
            self.store.clear_orphan_symbols(&id, kind_code).await?;
            self.store
                .store_debuginfo(&id, kind_code, sha256, size, file_name, &table, &digests)
                .await?;
            Ok::<bool, UploadError>(true)
        }
        .await;
        lease.release().await;
        if !stored? {
            return Ok(());
        }
        self.names.invalidate(&id);
        tracing::info!(build_id = %id, kind = kind_name(kind), file = %file_name, bytes = size, functions = table.functions.len(), "debug info stored");
        Ok(())
    }
}

impl DebuginfoService {
    /// Whether this very file is stored for `id` already (an error if another one of its kind
    /// is), and the files stored for `id`.
    async fn stored_already(
        &self,
        id: &str,
        kind: DebuginfoKind,
        sha256: [u8; 32],
    ) -> Result<(bool, Vec<StoredFile>), UploadError> {
        let stored = self
            .store
            .debuginfo_files(&[id.to_owned()])
            .await?
            .remove(id)
            .unwrap_or_default();
        match stored.iter().find(|f| f.kind == kind as u8) {
            None => Ok((false, stored)),
            Some(existing) if existing.sha256 == sha256 => Ok((true, stored)),
            Some(_) => Err(UploadError::Conflict {
                build_id: id.to_owned(),
                kind: kind_name(kind),
            }),
        }
    }

    /// A debug file is accepted for an image the store knows: its executable is stored, or an
    /// agent sent frames of it. (`stored`: the files stored for `id`.)
    async fn check_known(&self, id: &str, stored: &[StoredFile]) -> Result<(), UploadError> {
        let executable = DebuginfoKind::Executable as u8;
        if stored.iter().any(|f| f.kind == executable) || self.store.frames_seen_of(id).await? {
            return Ok(());
        }
        Err(UploadError::UnknownImage(id.to_owned()))
    }

    /// A debug file takes over naming from the executable stored for its build id (if any), so
    /// it must name everything the executable names the same way: otherwise anyone allowed to
    /// upload could rename the frames of a library every node runs.
    /// (`stored`: the files stored for `id`.)
    async fn check_against_executable(&self, id: &str, stored: &[StoredFile], path: &Path) -> Result<(), UploadError> {
        let executable = DebuginfoKind::Executable as u8;
        if !stored.iter().any(|f| f.kind == executable) {
            return Ok(());
        }
        let table = self.store.debuginfo_table(id, executable).await?;
        let path = path.to_owned();
        let found = tokio::task::spawn_blocking(move || symtab::disagreement(&path, &table))
            .await
            .map_err(|e| UploadError::Io(std::io::Error::other(e.to_string())))??;
        match found {
            None => Ok(()),
            Some(found) => Err(UploadError::Disagrees {
                build_id: id.to_owned(),
                found,
            }),
        }
    }
}

/// Uploads left half-received by a server that crashed (a running server removes its own
/// however they end): those not written to for a day, so that a server sharing the directory
/// keeps the ones it is receiving.
fn remove_stale_uploads(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let day = std::time::Duration::from_secs(24 * 3600);
    for entry in entries.flatten() {
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > day));
        if stale && entry.file_name().to_string_lossy().starts_with(".incoming-") {
            if let Err(e) = std::fs::remove_file(entry.path()) {
                tracing::warn!(file = %entry.path().display(), error = %e, "cannot remove a stale upload");
            }
        }
    }
}

/// The first bytes of every ELF file.
const ELF_MAGIC: &[u8] = b"\x7fELF";

/// What differs between a stored executable's naming digests and an agent's copy's, in words;
/// `None` when the copy names frames as the stored file does. A copy without `.symtab` (a
/// stripped one) cannot confirm the stored file's local names: that is a difference too, or a
/// hostile token could upload a forged image of a library every node runs stripped (libc) with
/// a `.symtab` of its choosing. A stored file without one names what any copy names alike.
pub fn contradiction(
    stored: &bimodal_proto::NamingDigests,
    copy: &bimodal_proto::NamingDigests,
) -> Option<&'static str> {
    if stored.exported != copy.exported {
        return Some("its load segments or exported symbols differ");
    }
    match (stored.local, copy.local) {
        (Some(a), Some(b)) if a != b => Some("its .symtab differs"),
        (Some(_), None) => Some("the stored executable's .symtab names functions the copy, stripped, cannot confirm"),
        _ => None,
    }
}

/// Hashes the file, checks it is an ELF file of `declared` with symbols, reads its table and
/// naming digests.
#[allow(clippy::type_complexity)]
fn read_checked(
    path: &Path,
    declared: &[u8],
) -> Result<([u8; 32], u64, symtab::SymbolTable, bimodal_proto::NamingDigests), UploadError> {
    let mut hasher = sha2::Sha256::new();
    let mut file = std::fs::File::open(path)?;
    let size = std::io::copy(&mut file, &mut hasher)?;
    let sha256: [u8; 32] = hasher.finalize().into();
    let file = std::fs::File::open(path)?;
    // SAFETY: the file is this server's private temporary copy of the upload; nothing else
    // writes it while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let info = bimodal_proto::inspect_debuginfo(&map).map_err(UploadError::NotElf)?;
    let actual = info.build_id.ok_or(UploadError::NoBuildId)?;
    if actual != declared {
        return Err(UploadError::BuildIdMismatch {
            declared: hex(declared),
            actual: hex(&actual),
        });
    }
    let table = symtab::read(path)?;
    if !info.has_symbols || table.functions.is_empty() {
        return Err(UploadError::NoSymbols);
    }
    let digests = bimodal_proto::naming_digests(&map).map_err(UploadError::NotElf)?;
    Ok((sha256, size, table, digests))
}

#[tonic::async_trait]
impl Debuginfo for DebuginfoService {
    async fn check(&self, request: Request<v1::DebuginfoCheck>) -> Result<Response<v1::DebuginfoStatus>, Status> {
        let reporter = self.allow_write(&request)?;
        let check = request.into_inner();
        if check.build_id.is_empty() || check.build_id.len() > 64 {
            return Err(UploadError::BadBuildId(check.build_id.len()).into());
        }
        // An agent that could not read its copy sends no digests (and agents before them none).
        if !check.exported_digest.is_empty() {
            let digest = |bytes: &[u8], what: &str| {
                <[u8; 32]>::try_from(bytes).map_err(|_| {
                    refused(
                        "bad_digest",
                        Status::invalid_argument(format!("{what} is 32 bytes (SHA-256), not {}", bytes.len())),
                    )
                })
            };
            let copy = bimodal_proto::NamingDigests {
                exported: digest(&check.exported_digest, "exported_digest")?,
                local: match check.local_digest.as_slice() {
                    [] => None,
                    bytes => Some(digest(bytes, "local_digest")?),
                },
            };
            self.compare_copy(&hex(&check.build_id), &copy, &reporter).await?;
        }
        Ok(Response::new(self.status(check.build_id).await?))
    }

    async fn disputes(
        &self,
        request: Request<v1::DebuginfoDisputesRequest>,
    ) -> Result<Response<v1::DebuginfoDisputes>, Status> {
        self.allow_symbols(&request)?;
        let unavailable = |e: StorageError| Status::unavailable(e.to_string());
        let disputes = self.store.disputes().await.map_err(unavailable)?;
        let ids: Vec<String> = disputes.iter().map(|d| d.build_id.clone()).collect();
        let files = self.store.debuginfo_files(&ids).await.map_err(unavailable)?;
        let executable = DebuginfoKind::Executable as u8;
        let file_name = |id: &str| {
            files
                .get(id)
                .and_then(|f| f.iter().find(|f| f.kind == executable))
                .map(|f| f.file_name.clone())
                .unwrap_or_default()
        };
        Ok(Response::new(v1::DebuginfoDisputes {
            disputes: disputes
                .into_iter()
                .map(|d| v1::DebuginfoDispute {
                    build_id: bimodal_proto::unhex(&d.build_id).unwrap_or_default(),
                    file_name: file_name(&d.build_id),
                    reports: d.reports,
                    first: d.first.into(),
                    last: d.last.into(),
                    reporters: d.reporters,
                    reason: d.reason,
                })
                .collect(),
        }))
    }

    async fn resolve(&self, request: Request<v1::DebuginfoResolve>) -> Result<Response<v1::DebuginfoStatus>, Status> {
        self.allow_symbols(&request)?;
        let resolve = request.into_inner();
        if resolve.build_id.is_empty() || resolve.build_id.len() > 64 {
            return Err(UploadError::BadBuildId(resolve.build_id.len()).into());
        }
        let id = hex(&resolve.build_id);
        let unavailable = |e: StorageError| Status::unavailable(e.to_string());
        match v1::DebuginfoResolution::try_from(resolve.resolution) {
            Ok(v1::DebuginfoResolution::Keep) => {
                let Some(stored) = self.store.debuginfo_digests(&id).await.map_err(unavailable)? else {
                    return Err(Status::not_found(format!(
                        "build id {id} has no executable stored with digests to keep"
                    )));
                };
                self.store
                    .store_digests(&id, DebuginfoKind::Executable as u8, &stored.digests, true)
                    .await
                    .map_err(unavailable)?;
                tracing::warn!(build_id = %id, "an operator kept the executable stored for a disputed build id");
            }
            Ok(v1::DebuginfoResolution::Drop) => {
                // Under the build id's lease, so that no upload of it is being decided meanwhile.
                let lease = tokio::time::timeout(LEASE_WAIT, self.store.debuginfo_lease(&id))
                    .await
                    .map_err(|_| Status::from(UploadError::Busy(id.clone())))?
                    .map_err(unavailable)?;
                let dropped = self.store.drop_debuginfo(&id).await;
                lease.release().await;
                dropped.map_err(unavailable)?;
                tracing::warn!(build_id = %id, "an operator dropped the files stored for a build id; the next agent that runs it uploads its copy");
            }
            _ => return Err(Status::invalid_argument("a resolution is keep or drop")),
        }
        self.names.invalidate(&id);
        Ok(Response::new(self.status(resolve.build_id).await?))
    }

    async fn upload(
        &self,
        request: Request<Streaming<v1::DebuginfoChunk>>,
    ) -> Result<Response<v1::DebuginfoStatus>, Status> {
        self.allow_write(&request)?;
        let metadata = request.metadata().clone();
        let peer = request.extensions().get::<Peer>().cloned();
        let mut chunks = request.into_inner();
        let first = chunks.next().await.ok_or_else(|| {
            refused(
                "empty",
                Status::invalid_argument("an upload needs at least one message"),
            )
        })??;
        let kind = DebuginfoKind::try_from(first.kind).unwrap_or(DebuginfoKind::Unspecified);
        if kind == DebuginfoKind::Unspecified {
            return Err(refused(
                "no_kind",
                Status::invalid_argument("the first message must give the kind"),
            ));
        }
        if kind == DebuginfoKind::Debuginfo {
            self.auth
                .allow_grpc(&metadata, peer.as_ref(), crate::auth::Scope::Symbols, None)?;
        }
        if first.size > self.max_bytes {
            return Err(UploadError::TooLarge(self.max_bytes).into());
        }
        validate::file_name(&first.file_name).map_err(UploadError::FileName)?;
        let Ok(_receiving) = self.uploads.clone().try_acquire_owned() else {
            return Err(refused(
                "too_many_uploads",
                Status::resource_exhausted(format!(
                    "the server receives {MAX_UPLOADS_AT_ONCE} uploads at once; retry later"
                )),
            ));
        };
        // Removed when this call ends, also when it is dropped (a client that went away).
        let (file, incoming) = tempfile::Builder::new()
            .prefix(".incoming-")
            .tempfile_in(&self.incoming)
            .map_err(|e| Status::internal(format!("cannot make room for an upload: {e}")))?
            .into_parts();
        let result = async {
            let mut file = file;
            let mut received = 0u64;
            // The first bytes say whether this is an ELF file at all: anything else is refused
            // before the rest of it is received.
            let mut head: Vec<u8> = Vec::with_capacity(ELF_MAGIC.len());
            let mut write = |data: &[u8], received: &mut u64| -> Result<(), Status> {
                *received += data.len() as u64;
                if *received > first.size {
                    return Err(refused(
                        "size_mismatch",
                        Status::invalid_argument(format!(
                            "the upload carried more than the {} bytes it stated",
                            first.size
                        )),
                    ));
                }
                if head.len() < ELF_MAGIC.len() {
                    let take = (ELF_MAGIC.len() - head.len()).min(data.len());
                    head.extend_from_slice(&data[..take]);
                    if !ELF_MAGIC.starts_with(&head) {
                        return Err(UploadError::NotElf("its first bytes are not ELF's magic number".into()).into());
                    }
                }
                file.write_all(data).map_err(|e| Status::internal(e.to_string()))
            };
            write(&first.data, &mut received)?;
            // Its place is held while it arrives, so it must arrive in the time its size may
            // take (as an ingest message must): a client cannot hold a place by stopping.
            let allowed = crate::serve::time_to_receive(usize::try_from(first.size).unwrap_or(usize::MAX));
            let rest = async {
                while let Some(chunk) = chunks.next().await {
                    write(&chunk?.data, &mut received)?;
                }
                Ok::<(), Status>(())
            };
            tokio::time::timeout(allowed, rest).await.map_err(|_| {
                refused(
                    "slow",
                    Status::deadline_exceeded(format!(
                        "the upload of {} bytes did not arrive within {} s",
                        first.size,
                        allowed.as_secs()
                    )),
                )
            })??;
            if received != first.size {
                return Err(UploadError::Truncated {
                    declared: first.size,
                    received,
                }
                .into());
            }
            drop(file);
            self.commit(&first.build_id, kind, &incoming, &first.file_name)
                .await
                .map_err(Status::from)
        }
        .await;
        drop(incoming);
        result?;
        Ok(Response::new(self.status(first.build_id).await?))
    }
}

/// How the `bimodal-server debuginfo` commands reach a running server.
#[derive(Debug)]
pub struct Connection<'a> {
    pub server_url: &'a str,
    pub ca_file: Option<&'a Path>,
    pub identity: Option<bimodal_proto::client::ClientIdentity>,
    pub token: Option<&'a str>,
}

type Client = v1::debuginfo_client::DebuginfoClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, bimodal_proto::client::Bearer>,
>;

impl Connection<'_> {
    async fn client(&self) -> anyhow::Result<Client> {
        let bearer = bimodal_proto::client::Bearer::new(self.token).map_err(|e| anyhow::anyhow!(e))?;
        let channel = bimodal_proto::client::channel(self.server_url, self.ca_file, self.identity.as_ref())
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the server at {}: {e}", self.server_url))?;
        Ok(v1::debuginfo_client::DebuginfoClient::with_interceptor(channel, bearer))
    }
}

/// Uploads `path` to the server (`bimodal-server debuginfo upload`), streaming it in chunks;
/// returns what the server stores for its build id afterwards, in words.
pub async fn upload_file(path: &Path, server: &Connection<'_>) -> anyhow::Result<String> {
    use anyhow::Context;
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    // SAFETY: read-only mapping of a file the user names; a file changed while it is uploaded is
    // refused by the server's checks, not undefined behaviour here.
    let data = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("cannot map {}", path.display()))?;
    let info = bimodal_proto::inspect_debuginfo(&data)
        .map_err(|e| anyhow::anyhow!("{} is not an ELF file: {e}", path.display()))?;
    let kind = info.kind;
    let build_id = info
        .build_id
        .with_context(|| format!("{} has no build id (link with --build-id)", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let chunks = bimodal_proto::debuginfo_chunks(&build_id, kind, &name, &data);
    let status = server
        .client()
        .await?
        .upload(tokio_stream::iter(chunks))
        .await
        .map_err(|s| anyhow::anyhow!("the server refused {}: {}", path.display(), s.message()))?
        .into_inner();
    Ok(format!(
        "stored {} ({} bytes) as {} for build id {}",
        path.display(),
        data.len(),
        kind_name(kind),
        hex(&status.build_id)
    ))
}

/// The disputed build ids, one paragraph each (`bimodal-server debuginfo disputes`).
pub async fn list_disputes(server: &Connection<'_>) -> anyhow::Result<String> {
    let disputes = server
        .client()
        .await?
        .disputes(v1::DebuginfoDisputesRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("the server refused the list of disputes: {}", s.message()))?
        .into_inner()
        .disputes;
    if disputes.is_empty() {
        return Ok("no build id is disputed".to_owned());
    }
    let mut out = format!("{} disputed build id(s); their names are withheld:", disputes.len());
    for d in disputes {
        out += &format!(
            "\n{} ({}): {} report(s) from {} to {} (Unix seconds), by {}; last: {}",
            hex(&d.build_id),
            d.file_name,
            d.reports,
            d.first,
            d.last,
            d.reporters.join(", "),
            d.reason
        );
    }
    out += "\nresolve each with: bimodal-server debuginfo resolve BUILD_ID --keep|--drop";
    Ok(out)
}

/// Keeps (`keep`) or drops a disputed build id's stored files (`bimodal-server debuginfo resolve`).
pub async fn resolve(server: &Connection<'_>, build_id: &str, keep: bool) -> anyhow::Result<String> {
    let raw = bimodal_proto::unhex(build_id)
        .filter(|b| !b.is_empty())
        .ok_or_else(|| anyhow::anyhow!("`{build_id}` is not a build id in hex"))?;
    let resolution = match keep {
        true => v1::DebuginfoResolution::Keep,
        false => v1::DebuginfoResolution::Drop,
    };
    server
        .client()
        .await?
        .resolve(v1::DebuginfoResolve {
            build_id: raw,
            resolution: resolution as i32,
        })
        .await
        .map_err(|s| anyhow::anyhow!("the server refused to resolve {build_id}: {}", s.message()))?;
    Ok(match keep {
        true => format!("build id {build_id}: the stored files are kept, and name its frames again"),
        false => {
            format!("build id {build_id}: the stored files are dropped; the next agent that runs it uploads its copy")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::contradiction;
    use bimodal_proto::NamingDigests;

    fn digests(exported: u8, local: Option<u8>) -> NamingDigests {
        NamingDigests {
            exported: [exported; 32],
            local: local.map(|l| [l; 32]),
        }
    }

    /// A copy contradicts a stored executable when its exports or layout differ, when both have
    /// a `.symtab` and they differ, and when the stored one has a `.symtab` a stripped copy
    /// cannot confirm; a stored stripped executable names only what every copy names alike.
    #[test]
    fn copies_contradict_what_they_cannot_confirm() {
        assert_eq!(contradiction(&digests(1, Some(2)), &digests(1, Some(2))), None);
        assert_eq!(contradiction(&digests(1, None), &digests(1, None)), None);
        assert_eq!(contradiction(&digests(1, None), &digests(1, Some(2))), None);
        assert!(contradiction(&digests(1, None), &digests(3, None)).is_some_and(|r| r.contains("exported")));
        assert!(
            contradiction(&digests(1, Some(2)), &digests(1, Some(4))).is_some_and(|r| r.contains(".symtab differs"))
        );
        assert!(contradiction(&digests(1, Some(2)), &digests(1, None)).is_some_and(|r| r.contains("stripped")));
    }
}
