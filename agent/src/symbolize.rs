//! Turns instruction pointers into frames: module, build id and file offset always (blazesym's
//! normalizer), function names where the binary has symbols (blazesym's symbolizer).

use std::path::Path;

use bimodal_proto::v1;
use blazesym::normalize::{Normalizer, UserMeta};
use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::Pid;

/// One symbolizer per agent: blazesym caches parsed ELF files and kallsyms across calls.
pub struct Frames {
    symbolizer: Symbolizer,
    normalizer: Normalizer,
}

impl std::fmt::Debug for Frames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Frames")
    }
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            symbolizer: Symbolizer::new(),
            normalizer: Normalizer::builder().enable_build_ids(true).build(),
        }
    }
}

/// An address to resolve: callers' return addresses point after the call instruction, so they
/// are looked up one byte earlier to land inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ip {
    pub address: u64,
    pub leaf: bool,
}

impl Ip {
    fn lookup_address(self) -> u64 {
        if self.leaf {
            self.address
        } else {
            self.address.saturating_sub(1)
        }
    }
}

fn unsymbolized(kind: v1::FrameKind, address: u64, reason: String) -> v1::Frame {
    v1::Frame {
        kind: kind as i32,
        address,
        unsymbolized_reason: reason,
        ..Default::default()
    }
}

impl Frames {
    /// Frames for user-space addresses of process `tgid`. A process that exited, or an address
    /// outside any file mapping, gives frames with a reason instead of a name.
    pub fn user(&self, tgid: u32, ips: &[Ip]) -> Vec<v1::Frame> {
        let addrs: Vec<u64> = ips.iter().map(|ip| ip.lookup_address()).collect();
        let mut frames: Vec<v1::Frame> = ips
            .iter()
            .map(|ip| unsymbolized(v1::FrameKind::User, ip.address, String::new()))
            .collect();

        match self.normalizer.normalize_user_addrs(Pid::from(tgid), &addrs) {
            Ok(normalized) => {
                for (frame, (offset, meta_index)) in frames.iter_mut().zip(&normalized.outputs) {
                    match normalized.meta.get(*meta_index) {
                        Some(UserMeta::Elf(elf)) => {
                            frame.module = elf.path.to_string_lossy().into_owned();
                            frame.build_id = elf.build_id.as_deref().map(<[u8]>::to_vec).unwrap_or_default();
                            frame.file_offset = *offset;
                        }
                        Some(UserMeta::Unknown(unknown)) => {
                            frame.unsymbolized_reason = format!("{:?}", unknown.reason);
                        }
                        Some(other) => {
                            frame.unsymbolized_reason = format!("unsupported mapping {other:?}");
                        }
                        None => {}
                    }
                }
            }
            Err(e) => {
                for frame in &mut frames {
                    frame.unsymbolized_reason = format!("process {tgid} not readable: {e}");
                }
                return frames;
            }
        }

        let mut process = Process::new(Pid::from(tgid));
        // JIT runtimes publish symbols in /tmp/perf-PID.map.
        process.perf_map = true;
        let source = Source::Process(process);
        match self.symbolizer.symbolize(&source, Input::AbsAddr(&addrs)) {
            Ok(symbolized) => {
                for (frame, sym) in frames.iter_mut().zip(symbolized) {
                    fill(frame, sym);
                }
            }
            Err(e) => {
                for frame in frames.iter_mut().filter(|f| f.unsymbolized_reason.is_empty()) {
                    frame.unsymbolized_reason = format!("symbolization failed: {e}");
                }
            }
        }
        frames
    }

    /// Frames for kernel addresses, named from /proc/kallsyms.
    pub fn kernel(&self, ips: &[Ip]) -> Vec<v1::Frame> {
        let addrs: Vec<u64> = ips.iter().map(|ip| ip.lookup_address()).collect();
        let mut frames: Vec<v1::Frame> = ips
            .iter()
            .map(|ip| v1::Frame {
                module: "vmlinux".into(),
                ..unsymbolized(v1::FrameKind::Kernel, ip.address, String::new())
            })
            .collect();
        // kallsyms names every kernel function; searching the disk for vmlinux images is slow.
        let kernel = Kernel {
            vmlinux: blazesym::MaybeDefault::None,
            ..Default::default()
        };
        let source = Source::Kernel(kernel);
        match self.symbolizer.symbolize(&source, Input::AbsAddr(&addrs)) {
            Ok(symbolized) => {
                for (frame, sym) in frames.iter_mut().zip(symbolized) {
                    fill(frame, sym);
                }
            }
            Err(e) => {
                for frame in &mut frames {
                    frame.unsymbolized_reason = format!("kallsyms unreadable: {e}");
                }
            }
        }
        frames
    }
}

fn fill(frame: &mut v1::Frame, sym: Symbolized<'_>) {
    match sym {
        Symbolized::Sym(sym) => {
            frame.function = sym.name.into_owned();
            if frame.module.is_empty() {
                if let Some(module) = &sym.module {
                    frame.module = Path::new(module).to_string_lossy().into_owned();
                }
            }
            if let Some(info) = &sym.code_info {
                frame.file = info.to_path().to_string_lossy().into_owned();
                frame.line = info.line.unwrap_or(0);
            }
            frame.unsymbolized_reason.clear();
        }
        Symbolized::Unknown(reason) => {
            if frame.unsymbolized_reason.is_empty() {
                frame.unsymbolized_reason = reason.to_string();
            }
        }
    }
}
