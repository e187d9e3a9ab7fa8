//! The debug-info store: agents send user frames as (build id, file offset, ELF address) without
//! names, and upload images with symbols once per build id; operators upload separate debug
//! files. Uploads become function tables in ClickHouse (`symtab`, `service`), shared by every
//! server, and frames are named from them when read (`names`).

pub mod names;
pub mod service;
pub mod symtab;

pub use names::Names;
pub use service::DebuginfoService;
