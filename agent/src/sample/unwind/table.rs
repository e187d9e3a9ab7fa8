//! Unwind tables for the kernel: an image's `.eh_frame` compiled into rows sorted by address,
//! each saying how to find the caller's frame from any address up to the next row
//! (`struct unwind_row` in bpf/include/sample.h; docs/design/014).
//!
//! x86-64 only keeps three things per row: where the canonical frame address (CFA) is (`rsp` or
//! `rbp` plus an offset, or the PLT formula), where the caller's `rbp` was saved, and whether
//! the return address is undefined (the outermost frame). Every other rule (a CFA from another
//! register or from an expression, as in signal trampolines) becomes "walk frame pointers here".

use std::ops::Range;

use std::ops::ControlFlow;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EhFrameOffset, EndianSlice, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::{Object, ObjectSection};

use crate::host::elf;

/// How to find the caller's frame (`enum unwind_rule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// No rule the kernel can follow: step with frame pointers.
    FramePointer,
    /// CFA = rsp + offset.
    CfaRsp(i16),
    /// CFA = rbp + offset.
    CfaRbp(i16),
    /// A lazy-binding PLT entry: CFA = rsp + 8, and 8 more once `(ip & 15) >= threshold`.
    Plt(u8),
    /// The outermost frame: the chain ends.
    End,
}

/// One row: `rule` holds from `pc` (an address as the image states it) to the next row's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub pc: u32,
    pub rule: Rule,
    /// The caller's rbp is saved at CFA + this; 0: rbp is unchanged.
    pub rbp_offset: i16,
}

/// An image's rows, and its segments to place a mapping of it.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub rows: Vec<Row>,
    pub segments: Vec<elf::Segment>,
}

impl Table {
    /// The load bias of a mapping at `start` from file offset `offset` of an image with
    /// `segments`: what to add to an address the image states to get the address in the process.
    pub fn bias_of(segments: &[elf::Segment], start: u64, offset: u64) -> Option<u64> {
        Some(start.wrapping_sub(elf::vaddr_of_offset(segments, offset)?))
    }
}

/// The `.plt` CFA expression of GNU ld: `rsp + 8 + ((rip & 15) >= N) << 3`, N = 11 (or 10 with
/// IBT); the DWARF operations around N never change.
fn plt_threshold(expression: &[u8]) -> Option<u8> {
    const BEFORE: [u8; 6] = [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a];
    const AFTER: [u8; 4] = [0x2a, 0x33, 0x24, 0x22];
    let (before, rest) = expression.split_at_checked(BEFORE.len())?;
    let (&lit, after) = rest.split_first()?;
    (before == BEFORE && after == AFTER && (0x30..=0x4f).contains(&lit)).then(|| lit - 0x30)
}

/// The rows of one image, produced in address order without holding them all: a pass over its
/// `.eh_frame` costs memory for the list of functions (16 bytes each), not for the rows, so the
/// table of a 200 MB binary can be counted, refused or written in chunks.
#[derive(Debug)]
pub struct Compiler<'a> {
    eh_frame: EhFrame<EndianSlice<'a, LittleEndian>>,
    bases: BaseAddresses,
    /// PLT sections: their CFA expressions are the lazy-binding formula.
    plt: Vec<Range<u64>>,
    /// Each function's (first address, offset of its FDE in `.eh_frame`), sorted.
    fdes: Vec<(u64, usize)>,
    /// The image's segments, to place a mapping of it.
    pub segments: Vec<elf::Segment>,
}

impl<'a> Compiler<'a> {
    /// Reads an ELF image's `.eh_frame` and lists its functions by address.
    pub fn new(bytes: &'a [u8]) -> Result<Self, String> {
        let file = object::File::parse(bytes).map_err(|e| format!("not an ELF image: {e}"))?;
        let segments = elf::segments_of(&file);
        let (data, address) = match file.section_by_name(".eh_frame") {
            Some(section) => (
                section.data().map_err(|e| format!(".eh_frame: {e}"))?,
                section.address(),
            ),
            None => (&[][..], 0),
        };
        let eh_frame = EhFrame::new(data, LittleEndian);
        let mut bases = BaseAddresses::default().set_eh_frame(address);
        for (name, set) in [
            (
                ".text",
                BaseAddresses::set_text as fn(BaseAddresses, u64) -> BaseAddresses,
            ),
            (".got", BaseAddresses::set_got),
        ] {
            if let Some(s) = file.section_by_name(name) {
                bases = set(bases, s.address());
            }
        }
        let plt = [".plt", ".plt.sec", ".plt.got"]
            .into_iter()
            .filter_map(|name| file.section_by_name(name))
            .map(|s| s.address()..s.address() + s.size())
            .collect();
        let mut fdes = Vec::new();
        let mut entries = eh_frame.entries(&bases);
        // A malformed entry ends what can be read; the functions before it stand.
        while let Ok(Some(entry)) = entries.next() {
            let CieOrFde::Fde(partial) = entry else { continue };
            let offset = partial.offset();
            if let Ok(fde) = partial.parse(|_, bases, o| eh_frame.cie_from_offset(bases, o)) {
                fdes.push((fde.initial_address(), offset));
            }
        }
        fdes.sort_unstable();
        Ok(Compiler {
            eh_frame,
            bases,
            plt,
            fdes,
            segments,
        })
    }

    /// Calls `emit` with every row in address order, no two neighbours alike, until it breaks.
    /// An error when code lies above 4 GiB (rows hold 32-bit addresses).
    pub fn rows(&self, mut emit: impl FnMut(Row) -> ControlFlow<()>) -> Result<(), String> {
        let mut compact = Compact::default();
        let mut ctx = UnwindContext::new();
        for &(_, offset) in &self.fdes {
            let Ok(fde) = self
                .eh_frame
                .fde_from_offset(&self.bases, EhFrameOffset(offset), |_, bases, o| {
                    self.eh_frame.cie_from_offset(bases, o)
                })
            else {
                continue;
            };
            let in_plt = self.plt.iter().any(|r| r.contains(&fde.initial_address()));
            let Ok(mut table) = fde.rows(&self.eh_frame, &self.bases, &mut ctx) else {
                continue;
            };
            while let Ok(Some(row)) = table.next_row() {
                let pc = u32::try_from(row.start_address())
                    .map_err(|_| format!("code at {:#x}, above what tables hold", row.start_address()))?;
                if compact
                    .push(
                        Row {
                            pc,
                            rule: self.rule(row, in_plt),
                            rbp_offset: match row.register(X86_64::RBP) {
                                Some(RegisterRule::Offset(offset)) => i16::try_from(offset).unwrap_or(0),
                                _ => 0,
                            },
                        },
                        &mut emit,
                    )
                    .is_break()
                {
                    return Ok(());
                }
            }
            // The function's end is a gap, unless the next one starts there (then its row wins).
            if let Ok(end) = u32::try_from(fde.end_address()) {
                let gap = Row {
                    pc: end,
                    rule: Rule::FramePointer,
                    rbp_offset: 0,
                };
                if compact.push(gap, &mut emit).is_break() {
                    return Ok(());
                }
            }
        }
        let _ = compact.finish(&mut emit);
        Ok(())
    }

    /// How many rows there are; an error past `max`.
    pub fn count(&self, max: usize) -> Result<usize, String> {
        let mut n = 0;
        self.rows(|_| {
            n += 1;
            if n > max {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        if n > max {
            return Err(format!("more than {max} unwind rows"));
        }
        Ok(n)
    }

    fn rule(&self, row: &gimli::UnwindTableRow<usize>, in_plt: bool) -> Rule {
        if let Some(RegisterRule::Undefined) = row.register(X86_64::RA) {
            return Rule::End;
        }
        match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => match i16::try_from(*offset) {
                Ok(offset) if *register == X86_64::RSP => Rule::CfaRsp(offset),
                Ok(offset) if *register == X86_64::RBP => Rule::CfaRbp(offset),
                _ => Rule::FramePointer,
            },
            CfaRule::Expression(expression) if in_plt => expression
                .get(&self.eh_frame)
                .ok()
                .and_then(|e| plt_threshold(e.0.slice()))
                .map_or(Rule::FramePointer, Rule::Plt),
            CfaRule::Expression(_) => Rule::FramePointer,
        }
    }
}

/// Rows in address order made compact as they come: of rows at one address the last wins (a
/// function's start over the previous one's end), a row that says what the one before said is
/// dropped, and a row below the last (overlapping functions) is ignored.
#[derive(Default)]
struct Compact {
    pending: Option<Row>,
    emitted: Option<Row>,
}

impl Compact {
    fn push(&mut self, row: Row, emit: &mut impl FnMut(Row) -> ControlFlow<()>) -> ControlFlow<()> {
        match self.pending {
            Some(p) if row.pc < p.pc => ControlFlow::Continue(()),
            Some(p) if row.pc == p.pc => {
                self.pending = Some(row);
                ControlFlow::Continue(())
            }
            _ => {
                let flushed = self.finish(emit);
                self.pending = Some(row);
                flushed
            }
        }
    }

    fn finish(&mut self, emit: &mut impl FnMut(Row) -> ControlFlow<()>) -> ControlFlow<()> {
        let Some(p) = self.pending.take() else {
            return ControlFlow::Continue(());
        };
        if self
            .emitted
            .is_some_and(|e| (e.rule, e.rbp_offset) == (p.rule, p.rbp_offset))
        {
            return ControlFlow::Continue(());
        }
        self.emitted = Some(p);
        emit(p)
    }
}

/// Compiles the `.eh_frame` of an ELF image into rows, held in memory. An image without
/// `.eh_frame` has no rows (frame pointers everywhere); one whose code lies above 4 GiB, or
/// whose table would exceed `max_rows`, is an error (its frames walk frame pointers).
pub fn build(bytes: &[u8], max_rows: usize) -> Result<Table, String> {
    let compiler = Compiler::new(bytes)?;
    let mut rows = Vec::with_capacity(compiler.count(max_rows)?);
    compiler.rows(|row| {
        rows.push(row);
        ControlFlow::Continue(())
    })?;
    Ok(Table {
        rows,
        segments: compiler.segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc() -> Vec<u8> {
        let path = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("a glibc system");
        std::fs::read(path).unwrap()
    }

    #[test]
    fn the_plt_expression_of_gnu_ld_is_recognized() {
        // DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge;
        // DW_OP_lit3; DW_OP_shl; DW_OP_plus
        let expression = [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22];
        assert_eq!(plt_threshold(&expression), Some(11));
        assert_eq!(plt_threshold(&expression[..10]), None);
        assert_eq!(plt_threshold(&[0x77, 0x08]), None);
    }

    /// libc: sorted rows, no two neighbours alike, memset (no frame pointer) at rsp + 8 on entry,
    /// and the outermost frames (`clone3`'s child, `_start` in executables) marked as ends.
    #[test]
    fn libc_compiles_into_sorted_compact_rows() {
        let table = build(&libc(), 1 << 24).expect("libc's .eh_frame");
        let rows = &table.rows;
        assert!(rows.len() > 1000, "{} rows", rows.len());
        assert!(
            rows.windows(2).all(|w| w[0].pc < w[1].pc),
            "sorted, one row per address"
        );
        assert!(
            rows.windows(2)
                .all(|w| (w[0].rule, w[0].rbp_offset) != (w[1].rule, w[1].rbp_offset)),
            "neighbours differ"
        );
        assert!(rows.iter().any(|r| r.rule == Rule::End), "clone3's child ends chains");
        let entries = rows.iter().filter(|r| r.rule == Rule::CfaRsp(8)).count();
        assert!(
            entries * 10 > rows.len(),
            "function entries at rsp + 8: {entries} of {}",
            rows.len()
        );
        assert!(build(&libc(), 100).is_err(), "a bound below libc's rows is refused");
    }

    #[test]
    fn frame_pointer_code_defines_its_frame_from_rbp() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("f.c");
        std::fs::write(
            &src,
            "__attribute__((noinline)) int f(volatile int *p) { volatile int b[64]; b[*p] = 1; return b[3]; }\n\
             int main(void) { int x = 3; return f(&x); }\n",
        )
        .unwrap();
        let out = dir.path().join("f");
        let status = std::process::Command::new("cc")
            .args(["-O2", "-fno-omit-frame-pointer", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(status.success());
        let table = build(&std::fs::read(&out).unwrap(), 1 << 20).unwrap();
        assert!(
            table
                .rows
                .iter()
                .any(|r| r.rule == Rule::CfaRbp(16) && r.rbp_offset == -16),
            "a frame at rbp + 16 with rbp saved below it: {:?}",
            table.rows
        );
    }
}
