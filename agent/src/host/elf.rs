//! The little of an ELF file's headers the agent reads itself: whether it is position
//! independent, and where its loaded segments put each file offset.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// A PT_LOAD program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub file_size: u64,
}

/// The virtual address (as the file states it) that file offset `offset` is loaded at. A mapping
/// starts at the page holding its segment's first byte, so offsets down to that page count.
pub fn vaddr_of_offset(segments: &[Segment], offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| (s.offset & !0xfff) <= offset && offset < s.offset + s.file_size.max(1))
        .map(|s| s.vaddr.wrapping_sub(s.offset).wrapping_add(offset))
}

/// The segments of a parsed ELF file (PT_LOAD and the rest: only loaded ones place offsets).
pub fn segments_of(file: &object::File<'_>) -> Vec<Segment> {
    use object::{Object, ObjectSegment};
    file.segments()
        .map(|s| {
            let (offset, file_size) = s.file_range();
            Segment {
                vaddr: s.address(),
                offset,
                file_size,
            }
        })
        .collect()
}

/// An ELF file's header facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// ET_DYN: its virtual addresses are relative to where it was loaded.
    pub position_independent: bool,
    pub segments: Vec<Segment>,
}

/// Reads the ELF header and PT_LOAD program headers of a 64-bit little-endian file.
pub fn read_header(path: &Path) -> Option<Header> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut header = [0u8; 64];
    file.read_exact(&mut header).ok()?;
    // ELF magic, ELFCLASS64, ELFDATA2LSB
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    const ET_DYN: u16 = 3;
    const PT_LOAD: u32 = 1;
    let (phoff, phentsize, phnum) = (u64_at(&header, 32), u16_at(&header, 54), u16_at(&header, 56));
    if phentsize < 56 || phnum > 512 {
        return None;
    }
    let mut table = vec![0u8; usize::from(phentsize) * usize::from(phnum)];
    file.seek(SeekFrom::Start(phoff)).ok()?;
    file.read_exact(&mut table).ok()?;
    Some(Header {
        position_independent: u16_at(&header, 16) == ET_DYN,
        segments: table
            .chunks_exact(usize::from(phentsize))
            .filter(|ph| u32::from_le_bytes(ph[..4].try_into().expect("4 bytes")) == PT_LOAD)
            .map(|ph| Segment {
                vaddr: u64_at(ph, 16),
                offset: u64_at(ph, 8),
                file_size: u64_at(ph, 32),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary itself: a PIE whose first loaded byte is file offset 0 at address 0.
    #[test]
    fn reads_the_running_executable() {
        let header = read_header(Path::new("/proc/self/exe")).expect("an ELF executable");
        assert!(header.position_independent);
        assert!(header.segments.len() >= 2);
        assert_eq!(vaddr_of_offset(&header.segments, 0), Some(header.segments[0].vaddr));
    }

    #[test]
    fn offsets_map_through_their_segment() {
        // a PIE: text at vaddr 0x1000 from offset 0x1000, data at 0x3df0 from 0x2df0
        let segments = [
            Segment {
                vaddr: 0,
                offset: 0,
                file_size: 0x600,
            },
            Segment {
                vaddr: 0x1000,
                offset: 0x1000,
                file_size: 0x1b5,
            },
            Segment {
                vaddr: 0x3df0,
                offset: 0x2df0,
                file_size: 0x248,
            },
        ];
        assert_eq!(vaddr_of_offset(&segments, 0x1100), Some(0x1100));
        // the mapping of data starts at the page holding 0x2df0
        assert_eq!(vaddr_of_offset(&segments, 0x2000), Some(0x3000));
        assert_eq!(vaddr_of_offset(&segments, 0x9000), None);
    }
}
