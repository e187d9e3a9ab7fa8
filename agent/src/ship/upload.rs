//! Uploads the images behind unnamed frames to the server's debug-info store, once per build id:
//! frames go out as (build id, file offset), and the server names them from these files.
//!
//! Images that carry symbols are sent first. A distribution's debug file for the image, where the
//! standard location has one (`/usr/lib/debug/.build-id/xx/yyyy.debug`, as `-dbg`/`-dbgsym`
//! packages install them), is sent after it: it names local functions the image's exported
//! symbols do not. The server takes a debug file only from a token with the `symbols` scope, and
//! only for an image it knows (its executable, or frames of it); a stripped image's debug file is
//! accepted once the agent's first frames of it are stored, and is tried again 30 s later. A
//! stripped image without one is reported once, and its debug file is uploaded by its owner with
//! `bimodal-server debuginfo upload`.
//!
//! Each check of a build id carries the naming digests of this node's copy: the executable the
//! server stores for it may be another node's upload, maybe a forged one, and a copy that names
//! frames otherwise disputes it (design 040).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bimodal_proto::v1::{self, DebuginfoKind};

use crate::host::debugfile;
use tokio::sync::mpsc;

/// An image some frames of a batch point into.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageRef {
    pub build_id: Vec<u8>,
    /// A process that maps it, to reach its file through /proc/PID/root.
    pub pid: u32,
    /// The path in that process's mount namespace.
    pub path: String,
}

/// The images behind the unnamed user frames of a batch, one per build id.
pub fn unnamed_images(batch: &v1::Batch) -> Vec<ImageRef> {
    let mut seen: HashSet<&[u8]> = HashSet::new();
    let mut out = Vec::new();
    for sample in &batch.samples {
        let Some(stack) = batch.stacks.get(sample.stack_index as usize) else {
            continue;
        };
        for &i in &stack.frame_indices {
            let Some(frame) = batch.frames.get(i as usize) else {
                continue;
            };
            if frame.function.is_empty() && !frame.build_id.is_empty() && seen.insert(&frame.build_id) {
                out.push(ImageRef {
                    build_id: frame.build_id.clone(),
                    pid: sample.pid,
                    path: frame.module.clone(),
                });
            }
        }
    }
    out
}

/// What happened to one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Uploaded,
    /// The server has symbols for it already.
    Present,
    /// The image has no symbols to send.
    NoSymbols,
    /// Larger than the agent sends.
    TooLarge(u64),
    /// Not readable any more (the process exited and the file is gone) or not the same file.
    Unreadable(String),
}

/// A file opened for upload, checked, not read: it is sent in chunks ([`chunks`]).
#[derive(Debug)]
pub struct Opened {
    file: std::fs::File,
    size: u64,
}

/// Opens an image for upload: the file at `path` in `pid`'s mount namespace, or at `path` on the
/// host, carrying `build_id` and symbols. Its headers are read through a mapping, so memory does
/// not grow with the image's size.
pub fn open_image(image: &ImageRef, max_bytes: u64) -> Result<Opened, Outcome> {
    let file = open_file(image)?;
    let size = file.metadata().map_err(|e| Outcome::Unreadable(e.to_string()))?.len();
    if size > max_bytes {
        return Err(Outcome::TooLarge(size));
    }
    let (map, inspected) = map_checked(image, &file)?;
    drop(map);
    if !inspected.has_symbols {
        return Err(Outcome::NoSymbols);
    }
    Ok(Opened { file, size })
}

/// The naming digests of this node's copy of an image, which the server compares with the
/// executable stored for its build id (another node's upload, maybe a hostile one's); `None`
/// when the copy cannot be read. Only its headers and symbol tables are read.
pub fn naming_digests(image: &ImageRef) -> Option<bimodal_proto::NamingDigests> {
    let file = open_file(image).ok()?;
    let (map, _) = map_checked(image, &file).ok()?;
    bimodal_proto::naming_digests(&map).ok()
}

/// The file of an image: at its path in its process's mount namespace, or on the host.
fn open_file(image: &ImageRef) -> Result<std::fs::File, Outcome> {
    let in_process = crate::host::files::in_process(image.pid, &image.path);
    let path = [in_process.as_path(), Path::new(&image.path)]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| Outcome::Unreadable(format!("{} is gone", image.path)))?;
    std::fs::File::open(path).map_err(|e| Outcome::Unreadable(e.to_string()))
}

/// Maps an image's file and checks it still carries the image's build id.
fn map_checked(
    image: &ImageRef,
    file: &std::fs::File,
) -> Result<(memmap2::Mmap, bimodal_proto::DebuginfoFile), Outcome> {
    // SAFETY: read only; the image is mapped by a running process and replaced, not truncated,
    // by package updates.
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| Outcome::Unreadable(e.to_string()))?;
    let inspected = bimodal_proto::inspect_debuginfo(&map).map_err(|e| Outcome::Unreadable(format!("not ELF: {e}")))?;
    if inspected.build_id.as_deref() != Some(image.build_id.as_slice()) {
        return Err(Outcome::Unreadable(format!(
            "{} changed since it was mapped",
            image.path
        )));
    }
    Ok((map, inspected))
}

/// The messages of one upload of `opened`, read [`bimodal_proto::DEBUGINFO_CHUNK_BYTES`] at a time
/// on a blocking thread while the stream is sent: at most three chunks are in memory at once,
/// however large the file.
pub fn chunks(
    opened: Opened,
    build_id: &[u8],
    kind: DebuginfoKind,
    file_name: &str,
) -> tokio_stream::wrappers::ReceiverStream<v1::DebuginfoChunk> {
    use std::io::Read;
    let (tx, rx) = mpsc::channel(1);
    let (build_id, file_name) = (build_id.to_vec(), file_name.to_owned());
    tokio::task::spawn_blocking(move || {
        let Opened { mut file, size } = opened;
        let mut sent = 0u64;
        let mut first = true;
        loop {
            let mut data = Vec::with_capacity(bimodal_proto::DEBUGINFO_CHUNK_BYTES);
            // A short or failed read ends the upload; the server refuses a file whose size or
            // build id does not match what the first message said.
            let Ok(n) = (&mut file)
                .take(bimodal_proto::DEBUGINFO_CHUNK_BYTES as u64)
                .read_to_end(&mut data)
            else {
                return;
            };
            sent += n as u64;
            let chunk = if first {
                bimodal_proto::debuginfo_first_chunk(&build_id, kind, &file_name, size, data)
            } else if n == 0 {
                return;
            } else {
                v1::DebuginfoChunk {
                    data,
                    ..Default::default()
                }
            };
            first = false;
            if tx.blocking_send(chunk).is_err() || sent >= size || n == 0 {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Opens the separate debug file installed for an image (by build id or through its
/// `.gnu_debuglink`, in its process's mount namespace or on the host: [`debugfile::find`]);
/// `None` when there is none, or it is larger than `max_bytes`.
pub fn open_debug_file(image: &ImageRef, max_bytes: u64, dirs: &[PathBuf]) -> Option<Opened> {
    let path = debugfile::find(image.pid, &image.path, &image.build_id, dirs)?;
    let file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    (size <= max_bytes).then_some(Opened { file, size })
}

/// A build id that failed for a passing reason is tried again after this long.
const RETRY_AFTER: Duration = Duration::from_secs(300);
/// A debug file refused because the server does not know its image yet (the agent's first frames
/// of it were on their way) is tried again after this long.
const UNKNOWN_IMAGE_RETRY: Duration = Duration::from_secs(30);

/// The images of one batch, and who waits for them to be offered to the server.
#[derive(Debug)]
pub struct Offer {
    pub images: Vec<ImageRef>,
    /// Dropped once each image was uploaded, found stored, or given up on for now.
    pub offered: tokio::sync::oneshot::Sender<()>,
}

/// Uploads images as they are reported, until the sender is dropped; separate debug files are
/// looked for under `debug_dirs` ([`debugfile::find`]).
pub async fn run(
    server: bimodal_proto::client::ServerAddress,
    max_bytes: u64,
    debug_dirs: Vec<PathBuf>,
    mut offers: mpsc::Receiver<Offer>,
) {
    let debug_dirs: std::sync::Arc<[PathBuf]> = debug_dirs.into();
    let mut done: HashSet<Vec<u8>> = HashSet::new();
    // When each build id that failed is tried again.
    let mut failed: HashMap<Vec<u8>, Instant> = HashMap::new();
    let mut client: Option<bimodal_proto::client::Debuginfo> = None;
    while let Some(Offer { images, offered }) = offers.recv().await {
        for image in images {
            if done.contains(&image.build_id) || failed.get(&image.build_id).is_some_and(|&at| Instant::now() < at) {
                continue;
            }
            if client.is_none() {
                match server.debuginfo().await {
                    Ok(c) => client = Some(c),
                    Err(e) => {
                        // Every batch names its images again: they are tried when the server is back.
                        tracing::debug!(error = %e, "debug-info uploads wait for the server");
                        break;
                    }
                }
            }
            let c = client.as_mut().expect("connected above");
            match upload(c, &image, max_bytes, &debug_dirs).await {
                Ok(outcome) => {
                    match &outcome {
                        Outcome::Uploaded => tracing::info!(path = %image.path, "uploaded for symbolization"),
                        Outcome::NoSymbols => tracing::info!(
                            path = %image.path,
                            build_id = %bimodal_profile::hex(&image.build_id),
                            "stripped, and no debug file found by build id or .gnu_debuglink: its frames stay unnamed until one is installed or uploaded (bimodal-server debuginfo upload)"
                        ),
                        Outcome::TooLarge(size) => {
                            tracing::warn!(path = %image.path, size, max_bytes, "too large to upload for symbolization")
                        }
                        Outcome::Present | Outcome::Unreadable(_) => {}
                    }
                    if let Outcome::Unreadable(why) = outcome {
                        tracing::debug!(path = %image.path, %why, "not uploaded");
                        failed.insert(image.build_id.clone(), Instant::now() + RETRY_AFTER);
                    } else {
                        done.insert(image.build_id.clone());
                    }
                }
                Err(status) if status.code() == tonic::Code::Unavailable => {
                    client = None;
                    break;
                }
                // The server checks the client certificate on every call: one that expired on
                // this connection, or a CA replaced since, is refused until the agent connects
                // again (with the certificate as renewed on disk).
                Err(status)
                    if matches!(
                        status.code(),
                        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
                    ) =>
                {
                    tracing::warn!(path = %image.path, error = %status.message(), "debug-info upload refused; connecting again later");
                    failed.insert(image.build_id.clone(), Instant::now() + RETRY_AFTER);
                    client = None;
                    break;
                }
                // The server receives a few uploads at once: this one goes again later.
                Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                    tracing::debug!(path = %image.path, error = %status.message(), "the server is busy with other uploads");
                    failed.insert(image.build_id.clone(), Instant::now() + RETRY_AFTER);
                }
                // Refused for this file's content (not an ELF file, no symbols, a debug file
                // that contradicts the stored executable, another file stored for the build id):
                // sending it again would be refused again, every time.
                Err(status) if matches!(status.code(), tonic::Code::InvalidArgument | tonic::Code::AlreadyExists) => {
                    tracing::warn!(path = %image.path, error = %status.message(), "the server refused this file; it is not sent again");
                    done.insert(image.build_id.clone());
                }
                Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                    tracing::debug!(path = %image.path, error = %status.message(), "the server does not know the image yet");
                    failed.insert(image.build_id.clone(), Instant::now() + UNKNOWN_IMAGE_RETRY);
                }
                Err(status) => {
                    tracing::warn!(path = %image.path, error = %status.message(), "debug-info upload failed");
                    failed.insert(image.build_id.clone(), Instant::now() + RETRY_AFTER);
                }
            }
        }
        drop(offered);
    }
}

async fn upload(
    client: &mut bimodal_proto::client::Debuginfo,
    image: &ImageRef,
    max_bytes: u64,
    debug_dirs: &std::sync::Arc<[PathBuf]>,
) -> Result<Outcome, tonic::Status> {
    // The server compares this node's copy with what it stores for the build id: a copy that
    // names frames otherwise disputes it, and its names are withheld.
    let for_read = image.clone();
    let copy = tokio::task::spawn_blocking(move || naming_digests(&for_read))
        .await
        .ok()
        .flatten();
    let status = client
        .check(v1::DebuginfoCheck {
            build_id: image.build_id.clone(),
            exported_digest: copy.as_ref().map(|d| d.exported.to_vec()).unwrap_or_default(),
            local_digest: copy.and_then(|d| d.local).map(|d| d.to_vec()).unwrap_or_default(),
        })
        .await?
        .into_inner();
    if status.disputed {
        tracing::warn!(
            path = %image.path,
            build_id = %bimodal_profile::hex(&image.build_id),
            "the server withholds this image's names: the executable stored for its build id contradicts a node's copy (bimodal-server debuginfo disputes)"
        );
    }
    let name = Path::new(&image.path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The executable first: the server accepts a debug file only for an image it knows.
    let mut outcome = Outcome::Present;
    if status.wanted {
        let for_read = image.clone();
        outcome = match tokio::task::spawn_blocking(move || open_image(&for_read, max_bytes)).await {
            Ok(Ok(opened)) => {
                client
                    .upload(chunks(opened, &image.build_id, DebuginfoKind::Executable, &name))
                    .await?;
                Outcome::Uploaded
            }
            Ok(Err(outcome)) => outcome,
            Err(e) => Outcome::Unreadable(e.to_string()),
        };
    }
    // Then a distribution's debug file, which names local functions the executable's symbols
    // do not.
    if status.stored.contains(&(DebuginfoKind::Debuginfo as i32)) {
        return Ok(outcome);
    }
    let for_read = image.clone();
    let dirs = debug_dirs.clone();
    let Ok(Some(opened)) = tokio::task::spawn_blocking(move || open_debug_file(&for_read, max_bytes, &dirs)).await
    else {
        return Ok(outcome);
    };
    let name = format!("{name}.debug");
    match client
        .upload(chunks(opened, &image.build_id, DebuginfoKind::Debuginfo, &name))
        .await
    {
        Ok(_) => Ok(Outcome::Uploaded),
        // A token without the `symbols` scope: the executable's symbols name the frames.
        Err(status) if status.code() == tonic::Code::PermissionDenied => {
            tracing::info!(path = %image.path, error = %status.message(), "the debug file is not uploaded: the agent's token may not upload debug files");
            Ok(outcome)
        }
        Err(status) => Err(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, build_id: &[u8], module: &str) -> v1::Frame {
        v1::Frame {
            function: function.into(),
            build_id: build_id.to_vec(),
            module: module.into(),
            ..Default::default()
        }
    }

    /// Each build id of an unnamed frame is reported once, with a process that maps it; named
    /// frames and frames without a build id are not.
    #[test]
    fn unnamed_images_are_reported_once_per_build_id() {
        let batch = v1::Batch {
            frames: vec![
                frame("", b"\x01", "/bin/a"),
                frame("named", b"\x02", "/lib/b.so"),
                frame("", b"", "[anon]"),
                frame("", b"\x03", "/lib/c.so"),
            ],
            stacks: vec![
                v1::Stack {
                    frame_indices: vec![0, 1, 2],
                },
                v1::Stack {
                    frame_indices: vec![3, 0],
                },
            ],
            samples: vec![
                v1::Sample {
                    stack_index: 0,
                    pid: 10,
                    ..Default::default()
                },
                v1::Sample {
                    stack_index: 1,
                    pid: 11,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let images = unnamed_images(&batch);
        assert_eq!(
            images,
            [
                ImageRef {
                    build_id: vec![1],
                    pid: 10,
                    path: "/bin/a".into()
                },
                ImageRef {
                    build_id: vec![3],
                    pid: 11,
                    path: "/lib/c.so".into()
                },
            ]
        );
    }

    /// Images with symbols are opened for upload; one whose build id differs is refused. (Stripped
    /// executables are covered by the server suite's stripped-binary tests.)
    #[test]
    fn only_images_with_symbols_and_the_right_build_id_are_opened() {
        let build_id = |bytes: &[u8]| {
            bimodal_proto::inspect_debuginfo(bytes)
                .unwrap()
                .build_id
                .expect("Debian links with --build-id")
        };
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let me = ImageRef {
            build_id: build_id(&bytes),
            pid: std::process::id(),
            path: exe.to_string_lossy().into_owned(),
        };
        // The test binary has symbols.
        assert!(open_image(&me, u64::MAX).is_ok());
        assert!(matches!(open_image(&me, 10), Err(Outcome::TooLarge(n)) if n == bytes.len() as u64));
        let other = ImageRef {
            build_id: vec![0xab; 20],
            ..me.clone()
        };
        assert!(matches!(open_image(&other, u64::MAX), Err(Outcome::Unreadable(_))));
        let path = "/lib/x86_64-linux-gnu/libc.so.6";
        let libc = ImageRef {
            build_id: build_id(&std::fs::read(path).unwrap()),
            pid: std::process::id(),
            path: path.into(),
        };
        // Stripped, but it names what it exports.
        assert!(open_image(&libc, u64::MAX).is_ok());
        // What the server compares with its stored executable: this copy's digests.
        assert_eq!(naming_digests(&me), bimodal_proto::naming_digests(&bytes).ok());
        assert_eq!(naming_digests(&other), None, "not the image's file");
    }

    /// An opened file goes out as chunks of at most DEBUGINFO_CHUNK_BYTES that add up to it, the
    /// first naming it; the test binary is tens of MiB, so several chunks.
    #[tokio::test]
    async fn an_opened_file_is_streamed_in_chunks_that_add_up_to_it() {
        use tokio_stream::StreamExt;
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let me = ImageRef {
            build_id: bimodal_proto::inspect_debuginfo(&bytes).unwrap().build_id.unwrap(),
            pid: std::process::id(),
            path: exe.to_string_lossy().into_owned(),
        };
        let opened = open_image(&me, u64::MAX).unwrap();
        let sent: Vec<v1::DebuginfoChunk> = chunks(opened, &me.build_id, DebuginfoKind::Executable, "me")
            .collect()
            .await;
        assert!(sent.len() > 1, "{} chunks", sent.len());
        assert!(sent
            .iter()
            .all(|c| c.data.len() <= bimodal_proto::DEBUGINFO_CHUNK_BYTES));
        assert_eq!(
            (sent[0].build_id.as_slice(), sent[0].file_name.as_str(), sent[0].size),
            (me.build_id.as_slice(), "me", bytes.len() as u64)
        );
        assert!(sent[1..].iter().all(|c| c.build_id.is_empty() && c.size == 0));
        let joined: Vec<u8> = sent.into_iter().flat_map(|c| c.data).collect();
        assert!(joined == bytes, "the chunks are the file");
    }
}
