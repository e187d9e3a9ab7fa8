//! Reading the machine: what several stages need from its files, kept apart from the features
//! that use it. ELF images and their build ids (`elf`), debug files found by build id or debug
//! link (`debugfile`), text files of /proc and /sys (`files`), and `/proc/cpuinfo` (`cpuinfo`).

pub mod cpuinfo;
pub mod debugfile;
pub mod elf;
pub mod files;
pub mod maps;
pub mod memory;
