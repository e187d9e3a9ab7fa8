//! Unwind tables for the kernel: an image's `.eh_frame` compiled into rows sorted by address,
//! each saying how to find the caller's frame from any address up to the next row
//! (`struct unwind_row` in bpf/include/sample.h; docs/design/014).
//!
//! x86-64 only keeps three things per row: where the canonical frame address (CFA) is (`rsp` or
//! `rbp` plus an offset, or the PLT formula), where the caller's `rbp` was saved, and whether
//! the return address is undefined (the outermost frame). Every other rule (a CFA from another
//! register or from an expression, as in signal trampolines) becomes "walk frame pointers here".

use std::ops::Range;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ObjectSegment};

use crate::elf;

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

/// Compiles the `.eh_frame` of an ELF image into rows. An image without `.eh_frame` has no rows
/// (frame pointers everywhere); one whose code lies above 4 GiB, or whose table would exceed
/// `max_rows`, is an error (its frames walk frame pointers).
pub fn build(bytes: &[u8], max_rows: usize) -> Result<Table, String> {
    let file = object::File::parse(bytes).map_err(|e| format!("not an ELF image: {e}"))?;
    let segments = file
        .segments()
        .map(|s| {
            let (offset, file_size) = s.file_range();
            elf::Segment {
                vaddr: s.address(),
                offset,
                file_size,
            }
        })
        .collect();
    let Some(section) = file.section_by_name(".eh_frame") else {
        return Ok(Table {
            rows: Vec::new(),
            segments,
        });
    };
    let data = section.data().map_err(|e| format!(".eh_frame: {e}"))?;
    let eh_frame = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
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
    let plt: Vec<Range<u64>> = [".plt", ".plt.sec", ".plt.got"]
        .into_iter()
        .filter_map(|name| file.section_by_name(name))
        .map(|s| s.address()..s.address() + s.size())
        .collect();

    // (pc, ends a function): a function's end is a gap unless another one starts there.
    let mut rows: Vec<(Row, bool)> = Vec::new();
    let mut ctx = UnwindContext::new();
    let mut entries = eh_frame.entries(&bases);
    loop {
        let entry = match entries.next() {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            // A malformed entry ends what can be read; the rows so far stand.
            Err(_) => break,
        };
        let CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(|_, bases, offset| eh_frame.cie_from_offset(bases, offset)) else {
            continue;
        };
        let in_plt = plt.iter().any(|r| r.contains(&fde.initial_address()));
        let Ok(mut table) = fde.rows(&eh_frame, &bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = table.next_row() {
            let rule = match row.cfa() {
                CfaRule::RegisterAndOffset { register, offset } => match i16::try_from(*offset) {
                    Ok(offset) if *register == X86_64::RSP => Rule::CfaRsp(offset),
                    Ok(offset) if *register == X86_64::RBP => Rule::CfaRbp(offset),
                    _ => Rule::FramePointer,
                },
                CfaRule::Expression(expression) if in_plt => expression
                    .get(&eh_frame)
                    .ok()
                    .and_then(|e| plt_threshold(e.0.slice()))
                    .map_or(Rule::FramePointer, Rule::Plt),
                CfaRule::Expression(_) => Rule::FramePointer,
            };
            let rule = match row.register(X86_64::RA) {
                Some(RegisterRule::Undefined) => Rule::End,
                _ => rule,
            };
            let rbp_offset = match row.register(X86_64::RBP) {
                Some(RegisterRule::Offset(offset)) => i16::try_from(offset).unwrap_or(0),
                _ => 0,
            };
            let pc = u32::try_from(row.start_address())
                .map_err(|_| format!("code at {:#x}, above what tables hold", row.start_address()))?;
            rows.push((Row { pc, rule, rbp_offset }, false));
        }
        if let Ok(end) = u32::try_from(fde.end_address()) {
            rows.push((
                Row {
                    pc: end,
                    rule: Rule::FramePointer,
                    rbp_offset: 0,
                },
                true,
            ));
        }
        if rows.len() > 2 * max_rows {
            return Err(format!("more than {max_rows} unwind rows"));
        }
    }
    // At one address, a function's start wins over another's end.
    rows.sort_by_key(|&(row, gap)| (row.pc, !gap));
    rows.dedup_by(|next, kept| {
        let same = next.0.pc == kept.0.pc;
        if same {
            *kept = *next;
        }
        same
    });
    let mut compact: Vec<Row> = Vec::with_capacity(rows.len());
    for (row, _) in rows {
        match compact.last() {
            Some(last) if last.rule == row.rule && last.rbp_offset == row.rbp_offset => {}
            _ => compact.push(row),
        }
    }
    if compact.len() > max_rows {
        return Err(format!("{} unwind rows, more than {max_rows}", compact.len()));
    }
    Ok(Table {
        rows: compact,
        segments,
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
