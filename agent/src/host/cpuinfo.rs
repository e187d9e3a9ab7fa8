//! `/proc/cpuinfo`, read once for everyone who needs it: the CPU's identity for the PMU table
//! (`sample::events::pmu`) and the CPU model among the node's facts (`node::topology`).

/// Where the kernel shows it.
pub const PROC_CPUINFO: &str = "/proc/cpuinfo";

/// The `key : value` pairs of the first processor block (up to the first blank line after it).
/// Only the first: heterogeneous machines (big.LITTLE, P/E cores) differ per CPU, but the first
/// is what names the machine.
pub fn first_block(cpuinfo: &str) -> Vec<(&str, &str)> {
    let mut fields = Vec::new();
    for line in cpuinfo.lines() {
        if line.trim().is_empty() {
            if fields.is_empty() {
                continue;
            }
            break;
        }
        if let Some((key, value)) = line.split_once(':') {
            fields.push((key.trim(), value.trim()));
        }
    }
    fields
}

/// A cpuinfo number: x86 prints decimal, Arm prints `0x`-prefixed hex.
pub fn parse_number(text: &str) -> Option<u32> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_block_only() {
        let text = "\nprocessor : 0\nvendor_id : GenuineIntel\nmodel : 85\n\nprocessor : 1\nmodel : 99\n";
        assert_eq!(
            first_block(text),
            [("processor", "0"), ("vendor_id", "GenuineIntel"), ("model", "85")]
        );
        assert_eq!(parse_number("0x41"), Some(0x41));
        assert_eq!(parse_number(" 85 "), Some(85));
        assert_eq!(parse_number("unknown"), None);
    }
}
