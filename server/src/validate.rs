//! What the server accepts from an agent: a Hello that names a node sanely, and batches whose
//! indices, events, sizes and times make sense. Everything is bounded, so no client can make the
//! server or ClickHouse hold more than a batch's worth for a batch; a refusal says what was
//! wrong and is final (resending the same batch will not help).

use bimodal_proto::v1;

use crate::selector::NODE_FACT_LABELS;

/// Longest Hello, encoded: its node name, labels, version and facts are a few KiB; it is read
/// before the stream is admitted anywhere, so it gets no more room than this.
pub const MAX_HELLO_BYTES: usize = 1 << 20;
/// Longest node name: a DNS name (Kubernetes node names are DNS subdomains).
pub const MAX_NODE_BYTES: usize = 253;
/// Most operator labels per node.
pub const MAX_LABELS: usize = 64;
/// Longest label name and value.
pub const MAX_LABEL_NAME_BYTES: usize = 128;
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;
/// Most samples (and data samples) per batch: 16 times what an agent's default maps can hold.
pub const MAX_SAMPLES: usize = 262_144;
/// Most stacks and frames per batch.
pub const MAX_STACKS: usize = 262_144;
pub const MAX_FRAMES: usize = 1 << 20;
/// Deepest stack: kernel (127) plus user frames, with room for unwinders that go deeper.
pub const MAX_STACK_DEPTH: usize = 512;
/// Longest function, module or path string.
pub const MAX_STRING_BYTES: usize = 4096;
/// Most counters, placement mappings and processes per batch.
pub const MAX_COUNTERS: usize = 1024;
pub const MAX_PLACEMENT_MAPPINGS: usize = 65_536;
pub const MAX_PROCESSES: usize = 65_536;
/// How old a batch may be: an agent's spool holds an hour by default; a day leaves room.
pub const MAX_AGE_SECS: i64 = 24 * 3600;
/// How far in the future a batch may start (clock skew between node and server).
pub const MAX_SKEW_SECS: i64 = 5 * 60;
/// Longest interval one batch may cover.
pub const MAX_INTERVAL_SECS: i64 = 3600;
/// The largest sum of a batch's sample counts or values, and the largest counter increase: 2^56,
/// beyond any machine's events in an interval (10^9 events a second on each of 8,192 CPUs for an
/// hour is under 2^55), so that sums over a fleet's history stay far from u64's end.
pub const MAX_BATCH_TOTAL: u64 = 1 << 56;

/// Why a Hello or batch was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    #[error("Hello.node must name the node")]
    NoNode,
    #[error("Hello.node is {0} bytes; at most {MAX_NODE_BYTES}")]
    NodeTooLong(usize),
    #[error("{what} contains a control, format or space character, which a {what} may not")]
    BadCharacter { what: &'static str },
    #[error("{what} contains a control character")]
    Unprintable { what: &'static str },
    #[error("Hello carries {0} labels; at most {MAX_LABELS}")]
    TooManyLabels(usize),
    #[error("label name `{0}` is not [a-zA-Z_][a-zA-Z0-9_]* of at most {MAX_LABEL_NAME_BYTES} bytes")]
    LabelName(String),
    #[error(
        "the value of label `{0}` is longer than {MAX_LABEL_VALUE_BYTES} bytes or holds a control or format character"
    )]
    LabelValue(String),
    #[error("the batch's {what} sum past {MAX_BATCH_TOTAL} (2^56): no interval of a machine counts that many")]
    Total { what: &'static str },
    #[error("counter `{name}` rose by {value}, past {MAX_BATCH_TOTAL} (2^56) in one interval")]
    CounterValue { name: String, value: u64 },
    #[error("the node fact `{what}` {why}")]
    Fact { what: &'static str, why: String },
    #[error("batch_id must be 16 bytes, got {0}")]
    BatchId(usize),
    #[error("the batch has {count} {what}; at most {max}")]
    TooMany {
        what: &'static str,
        count: usize,
        max: usize,
    },
    #[error("sample {sample} has event {event}, which is not a known event kind")]
    Event { sample: usize, event: i32 },
    #[error("sample {sample} of event {event} has no source: the batch names none for that event")]
    NoSource { sample: usize, event: &'static str },
    #[error("the batch names {count} sources for event {event}; samples must have exactly one")]
    TwoSources { event: &'static str, count: usize },
    #[error("sample {sample} points at stack {stack}, but the batch has {stacks} stacks")]
    Stack { sample: usize, stack: u32, stacks: usize },
    #[error("stack {stack} points at frame {frame}, but the batch has {frames} frames")]
    Frame { stack: usize, frame: u32, frames: usize },
    #[error("stack {stack} has {depth} frames; at most {MAX_STACK_DEPTH}")]
    TooDeep { stack: usize, depth: usize },
    #[error("a {what} string is {len} bytes; at most {MAX_STRING_BYTES}")]
    LongString { what: &'static str, len: usize },
    #[error("the batch covers {start}..{end} (Unix seconds), outside [now - {MAX_AGE_SECS}s, now + {MAX_SKEW_SECS}s] or longer than {MAX_INTERVAL_SECS}s")]
    Time { start: i64, end: i64 },
}

/// Whether `s` holds no control character and no invisible format character (right-to-left
/// overrides, zero-width spaces and joiners, word joiners, byte order marks, line and paragraph
/// separators): text that is stored, shown and used as a label reads as what it is, and one node
/// name cannot be made to look like another.
fn printable(s: &str) -> bool {
    !s.chars().any(|c| c.is_control() || invisible(c))
}

/// Unicode's format characters (general category Cf) and the line and paragraph separators.
fn invisible(c: char) -> bool {
    matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F)
}

/// The sum of `values`, or `None` past u64.
fn checked_sum(mut values: impl Iterator<Item = u64>) -> Option<u64> {
    values.try_fold(0u64, u64::checked_add)
}

/// Most CPUs a node's facts may list (Linux's largest `NR_CPUS`).
pub const MAX_CPUS: usize = 8192;
/// Most NUMA nodes (Linux's largest `MAX_NUMNODES`).
pub const MAX_NUMA_NODES: usize = 1024;
/// Most network interfaces and event sources a node's facts may list.
pub const MAX_NICS: usize = 1024;
pub const MAX_EVENT_SOURCES: usize = 64;
/// Longest text fact (a CPU model name, a kernel release, a reason a source was rejected).
pub const MAX_FACT_BYTES: usize = 256;

/// Checks a node's facts as strictly as its name and labels: text short and printable (facts
/// become labels and are shown), lists and numbers within what a machine can have.
fn facts(f: &v1::NodeFacts) -> Result<(), Invalid> {
    let text = |what: &'static str, s: &str| match s.len() <= MAX_FACT_BYTES && printable(s) {
        true => Ok(()),
        false => Err(Invalid::Fact {
            what,
            why: format!(
                "is {} bytes or holds a control or format character (at most {MAX_FACT_BYTES} printable bytes)",
                s.len()
            ),
        }),
    };
    let most = |what: &'static str, count: usize, max: usize| match count <= max {
        true => Ok(()),
        false => Err(Invalid::Fact {
            what,
            why: format!("lists {count}; at most {max}"),
        }),
    };
    let cpu = |what: &'static str, cpu: u32| match (cpu as usize) < MAX_CPUS {
        true => Ok(()),
        false => Err(Invalid::Fact {
            what,
            why: format!("names CPU {cpu}; CPUs are numbered below {MAX_CPUS}"),
        }),
    };
    for (what, s) in [
        ("kernel_release", &f.kernel_release),
        ("cpu_vendor", &f.cpu_vendor),
        ("cpu_model_name", &f.cpu_model_name),
        ("numa_balancing", &f.numa_balancing),
        ("transparent_hugepages", &f.transparent_hugepages),
        ("hardware_pmu", &f.hardware_pmu),
    ] {
        text(what, s)?;
    }
    most("online_cpus", f.online_cpus.len(), MAX_CPUS)?;
    for &c in &f.online_cpus {
        cpu("online_cpus", c)?;
    }
    for (what, n) in [
        ("sockets", f.sockets),
        ("cores", f.cores),
        ("threads_per_core", f.threads_per_core),
    ] {
        most(what, n as usize, MAX_CPUS)?;
    }
    most("numa_nodes", f.numa_nodes.len(), MAX_NUMA_NODES)?;
    for node in &f.numa_nodes {
        most("numa_nodes", node.id as usize, MAX_NUMA_NODES - 1)?;
        most("numa_nodes.cpus", node.cpus.len(), MAX_CPUS)?;
        most("numa_nodes.distances", node.distances.len(), MAX_NUMA_NODES)?;
        for &c in &node.cpus {
            cpu("numa_nodes.cpus", c)?;
        }
    }
    most("l3_domains", f.l3_domains.len(), MAX_CPUS)?;
    for domain in &f.l3_domains {
        most("l3_domains.cpus", domain.cpus.len(), MAX_CPUS)?;
        for &c in &domain.cpus {
            cpu("l3_domains.cpus", c)?;
        }
    }
    most("nics", f.nics.len(), MAX_NICS)?;
    for nic in &f.nics {
        text("nics.name", &nic.name)?;
    }
    most("event_sources", f.event_sources.len(), MAX_EVENT_SOURCES)?;
    for source in &f.event_sources {
        for (what, s) in [
            ("event_sources.source", &source.source),
            ("event_sources.encoding", &source.encoding),
            ("event_sources.attach", &source.attach),
            ("event_sources.unwinding", &source.unwinding),
            ("event_sources.unwinding_reduced", &source.unwinding_reduced),
        ] {
            text(what, s)?;
        }
        most("event_sources.rejected", source.rejected.len(), MAX_EVENT_SOURCES)?;
        for reason in &source.rejected {
            text("event_sources.rejected", reason)?;
        }
    }
    Ok(())
}

/// Checks a Hello; returns the operator's labels sorted, with names that clash with the fact
/// labels renamed `exported_<name>` (as Prometheus does with target labels).
pub fn hello(h: &v1::Hello) -> Result<Vec<(String, String)>, Invalid> {
    if h.node.is_empty() {
        return Err(Invalid::NoNode);
    }
    if h.node.len() > MAX_NODE_BYTES {
        return Err(Invalid::NodeTooLong(h.node.len()));
    }
    if h.node
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || invisible(c))
    {
        return Err(Invalid::BadCharacter { what: "node name" });
    }
    if h.labels.len() > MAX_LABELS {
        return Err(Invalid::TooManyLabels(h.labels.len()));
    }
    let mut labels = Vec::with_capacity(h.labels.len());
    for (k, v) in &h.labels {
        let name_ok = k.len() <= MAX_LABEL_NAME_BYTES
            && k.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(Invalid::LabelName(k.chars().take(MAX_LABEL_NAME_BYTES).collect()));
        }
        if v.len() > MAX_LABEL_VALUE_BYTES || !printable(v) {
            return Err(Invalid::LabelValue(k.clone()));
        }
        let name = if NODE_FACT_LABELS.contains(&k.as_str()) {
            format!("exported_{k}")
        } else {
            k.clone()
        };
        labels.push((name, v.clone()));
    }
    labels.sort();
    if h.agent_version.len() > MAX_LABEL_VALUE_BYTES || !printable(&h.agent_version) {
        return Err(Invalid::LabelValue("agent_version".into()));
    }
    if let Some(f) = &h.facts {
        facts(f)?;
    }
    Ok(labels)
}

/// Checks the name an upload gives its file (it is stored and logged): at most
/// [`MAX_STRING_BYTES`], no control characters.
pub fn file_name(name: &str) -> Result<(), Invalid> {
    short("file name", name)?;
    if !printable(name) {
        return Err(Invalid::Unprintable { what: "file name" });
    }
    Ok(())
}

fn at_most(what: &'static str, count: usize, max: usize) -> Result<(), Invalid> {
    if count > max {
        return Err(Invalid::TooMany { what, count, max });
    }
    Ok(())
}

fn short(what: &'static str, s: &str) -> Result<(), Invalid> {
    if s.len() > MAX_STRING_BYTES {
        return Err(Invalid::LongString { what, len: s.len() });
    }
    Ok(())
}

fn known_event(event: i32) -> Option<v1::EventKind> {
    v1::EventKind::try_from(event)
        .ok()
        .filter(|e| *e != v1::EventKind::Unspecified)
}

/// Checks a batch against the limits above, at `now` (Unix seconds).
pub fn batch(b: &v1::Batch, now: i64) -> Result<(), Invalid> {
    if b.batch_id.len() != 16 {
        return Err(Invalid::BatchId(b.batch_id.len()));
    }
    at_most("samples", b.samples.len(), MAX_SAMPLES)?;
    at_most("data samples", b.data_samples.len(), MAX_SAMPLES)?;
    at_most("stacks", b.stacks.len(), MAX_STACKS)?;
    at_most("frames", b.frames.len(), MAX_FRAMES)?;
    at_most("counters", b.counters.len(), MAX_COUNTERS)?;
    at_most("processes", b.processes.len(), MAX_PROCESSES)?;
    at_most("sources", b.sources.len(), v1::EventKind::ALL.len())?;
    let mappings: usize = b.placements.iter().map(|p| p.mappings.len()).sum();
    at_most("placement mappings", mappings, MAX_PLACEMENT_MAPPINGS)?;

    let (start, end) = (b.start_unix_nanos / 1_000_000_000, b.end_unix_nanos / 1_000_000_000);
    if start < now - MAX_AGE_SECS || start > now + MAX_SKEW_SECS || end < start || end - start > MAX_INTERVAL_SECS {
        return Err(Invalid::Time { start, end });
    }

    for s in &b.sources {
        let Some(event) = known_event(s.event) else {
            return Err(Invalid::Event {
                sample: 0,
                event: s.event,
            });
        };
        let count = b.sources.iter().filter(|o| o.event == s.event).count();
        if count > 1 {
            return Err(Invalid::TwoSources {
                event: event.name(),
                count,
            });
        }
        short("source", &s.name)?;
        short("source", &s.description)?;
        short("unit", &s.unit)?;
    }
    let has_source = |event: i32| b.sources.iter().any(|s| s.event == event);
    for (i, s) in b.samples.iter().enumerate() {
        let Some(event) = known_event(s.event) else {
            return Err(Invalid::Event {
                sample: i,
                event: s.event,
            });
        };
        if !has_source(s.event) {
            return Err(Invalid::NoSource {
                sample: i,
                event: event.name(),
            });
        }
        if s.stack_index as usize >= b.stacks.len() {
            return Err(Invalid::Stack {
                sample: i,
                stack: s.stack_index,
                stacks: b.stacks.len(),
            });
        }
        short("comm", &s.comm)?;
    }
    for (i, d) in b.data_samples.iter().enumerate() {
        let Some(event) = known_event(d.event) else {
            return Err(Invalid::Event {
                sample: i,
                event: d.event,
            });
        };
        if !has_source(d.event) {
            return Err(Invalid::NoSource {
                sample: i,
                event: event.name(),
            });
        }
        if d.stack_index as usize >= b.stacks.len() {
            return Err(Invalid::Stack {
                sample: i,
                stack: d.stack_index,
                stacks: b.stacks.len(),
            });
        }
        for (what, s) in [
            ("comm", &d.comm),
            ("mapping kind", &d.mapping_kind),
            ("mapping path", &d.mapping_path),
            ("symbol", &d.symbol),
        ] {
            short(what, s)?;
        }
    }
    // Sums of counts and values, checked: a batch whose sums pass the bound (or u64) can never
    // be stored, and is refused as that rather than retried for ever.
    let totals = [
        ("sample counts", checked_sum(b.samples.iter().map(|s| s.count))),
        ("sample values", checked_sum(b.samples.iter().map(|s| s.value))),
        (
            "data sample counts",
            checked_sum(b.data_samples.iter().map(|d| d.count)),
        ),
        (
            "data sample values",
            checked_sum(b.data_samples.iter().map(|d| d.value)),
        ),
    ];
    for (what, total) in totals {
        if total.is_none_or(|t| t > MAX_BATCH_TOTAL) {
            return Err(Invalid::Total { what });
        }
    }
    if let Some(c) = b.counters.iter().find(|c| c.value > MAX_BATCH_TOTAL) {
        return Err(Invalid::CounterValue {
            name: c.name.chars().take(64).collect(),
            value: c.value,
        });
    }
    for (i, st) in b.stacks.iter().enumerate() {
        if st.frame_indices.len() > MAX_STACK_DEPTH {
            return Err(Invalid::TooDeep {
                stack: i,
                depth: st.frame_indices.len(),
            });
        }
        if let Some(&f) = st.frame_indices.iter().find(|&&f| f as usize >= b.frames.len()) {
            return Err(Invalid::Frame {
                stack: i,
                frame: f,
                frames: b.frames.len(),
            });
        }
    }
    for f in &b.frames {
        short("function", &f.function)?;
        short("module", &f.module)?;
        if f.build_id.len() > 64 {
            return Err(Invalid::LongString {
                what: "build id",
                len: f.build_id.len(),
            });
        }
    }
    for p in &b.processes {
        for s in [
            &p.executable,
            &p.cgroup,
            &p.container_id,
            &p.container_runtime,
            &p.pod_uid,
            &p.systemd_unit,
            &p.pod_name,
            &p.pod_namespace,
            &p.container_name,
        ] {
            short("process identity", s)?;
        }
    }
    for c in &b.counters {
        short("counter name", &c.name)?;
    }
    for p in &b.placements {
        short("executable", &p.executable)?;
        for m in &p.mappings {
            short("mapping path", &m.path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000;

    fn good() -> v1::Batch {
        v1::Batch {
            batch_id: vec![7; 16],
            start_unix_nanos: (NOW - 10) * 1_000_000_000,
            end_unix_nanos: NOW * 1_000_000_000,
            frames: vec![v1::Frame {
                function: "main".into(),
                ..Default::default()
            }],
            stacks: vec![v1::Stack { frame_indices: vec![0] }],
            samples: vec![v1::Sample {
                event: v1::EventKind::Cpu as i32,
                stack_index: 0,
                count: 1,
                value: 1,
                ..Default::default()
            }],
            sources: vec![v1::EventSource {
                event: v1::EventKind::Cpu as i32,
                name: "cpu-clock".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// Indices outside the batch, unknown events, missing sources, bad times and oversized
    /// parts are refused with their kind.
    #[test]
    fn malformed_batches_are_refused() {
        assert_eq!(batch(&good(), NOW), Ok(()));
        let check = |f: &dyn Fn(&mut v1::Batch)| {
            let mut b = good();
            f(&mut b);
            batch(&b, NOW).unwrap_err()
        };
        assert!(matches!(
            check(&|b| b.samples[0].stack_index = 3),
            Invalid::Stack { stack: 3, .. }
        ));
        assert!(matches!(
            check(&|b| b.stacks[0].frame_indices.push(9)),
            Invalid::Frame { frame: 9, .. }
        ));
        assert!(matches!(
            check(&|b| b.samples[0].event = 99),
            Invalid::Event { event: 99, .. }
        ));
        assert!(matches!(check(&|b| b.sources.clear()), Invalid::NoSource { .. }));
        assert!(matches!(
            check(&|b| b.batch_id.pop().map(drop).unwrap_or(())),
            Invalid::BatchId(15)
        ));
        assert!(matches!(check(&|b| b.start_unix_nanos = 0), Invalid::Time { .. }));
        assert!(matches!(
            check(&|b| b.start_unix_nanos = (NOW + 3600) * 1_000_000_000),
            Invalid::Time { .. }
        ));
        assert!(matches!(
            check(&|b| b.frames[0].function = "x".repeat(5000)),
            Invalid::LongString { .. }
        ));
        assert!(matches!(
            check(&|b| b.stacks[0].frame_indices = vec![0; 600]),
            Invalid::TooDeep { .. }
        ));
        assert!(matches!(
            check(&|b| b.samples = vec![b.samples[0].clone(); MAX_SAMPLES + 1]),
            Invalid::TooMany { what: "samples", .. }
        ));
        // Counts whose sum passes u64 (two of 2^63): refused, not summed to a panic (debug) or
        // wrapped to 0 (release), as on 8f9f740 (issue 49).
        let huge = |b: &mut v1::Batch| {
            b.samples[0].count = 1 << 63;
            b.samples.push(b.samples[0].clone());
        };
        assert_eq!(check(&huge), Invalid::Total { what: "sample counts" });
        assert_eq!(
            check(&|b| b.samples[0].value = MAX_BATCH_TOTAL + 1),
            Invalid::Total { what: "sample values" }
        );
        assert!(matches!(
            check(&|b| b.counters.push(v1::Counter {
                name: "pgfault".into(),
                value: u64::MAX
            })),
            Invalid::CounterValue { .. }
        ));
    }

    /// Node names and labels are bounded and printable; labels named like facts are exported.
    #[test]
    fn hellos_are_checked() {
        let hello = |node: &str, labels: &[(&str, &str)]| v1::Hello {
            node: node.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        };
        assert_eq!(
            super::hello(&hello("web-1", &[("zone", "a"), ("kernel", "x")])).unwrap(),
            [
                ("exported_kernel".to_owned(), "x".to_owned()),
                ("zone".into(), "a".into())
            ]
        );
        assert_eq!(super::hello(&hello("", &[])), Err(Invalid::NoNode));
        assert_eq!(
            super::hello(&hello(&"n".repeat(300), &[])),
            Err(Invalid::NodeTooLong(300))
        );
        assert!(matches!(
            super::hello(&hello("web\n1", &[])),
            Err(Invalid::BadCharacter { .. })
        ));
        assert!(matches!(
            super::hello(&hello("w", &[("1a", "x")])),
            Err(Invalid::LabelName(_))
        ));
        assert!(matches!(
            super::hello(&hello("w", &[("a", "x\u{7}")])),
            Err(Invalid::LabelValue(_))
        ));
        // A right-to-left override or a zero-width space would make one node look like another
        // in the UI (issue 49: accepted on 8f9f740).
        for name in ["web-1\u{202E}2", "web\u{200B}-1", "\u{FEFF}web-1"] {
            assert!(
                matches!(super::hello(&hello(name, &[])), Err(Invalid::BadCharacter { .. })),
                "{name:?}"
            );
        }
        assert!(matches!(
            super::hello(&hello("w", &[("zone", "a\u{2066}b")])),
            Err(Invalid::LabelValue(_))
        ));
        // Non-Latin names are names.
        assert!(super::hello(&hello("узел-1", &[("zone", "東京")])).is_ok());
    }

    /// Facts are checked as names and labels are (issue 49: a 900 KB CPU model, NUL, ESC and
    /// newlines in the kernel release and 250,000 CPUs were stored on 8f9f740, and became labels).
    #[test]
    fn facts_are_checked() {
        let with = |f: v1::NodeFacts| v1::Hello {
            node: "n".into(),
            facts: Some(f),
            ..Default::default()
        };
        let real = v1::NodeFacts {
            kernel_release: "6.18.44-amd64".into(),
            cpu_model_name: "AMD EPYC 7B13 64-Core Processor".into(),
            online_cpus: (0..256).collect(),
            sockets: 2,
            numa_nodes: (0..8)
                .map(|id| v1::NumaNode {
                    id,
                    cpus: (id * 32..id * 32 + 32).collect(),
                    memory_bytes: 1 << 36,
                    distances: vec![10; 8],
                })
                .collect(),
            ..Default::default()
        };
        assert!(super::hello(&with(real.clone())).is_ok());
        let refused = |f: v1::NodeFacts| match super::hello(&with(f)) {
            Err(Invalid::Fact { what, .. }) => what,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(v1::NodeFacts {
                cpu_model_name: "x".repeat(900_000),
                ..real.clone()
            }),
            "cpu_model_name"
        );
        for bad in ["6.1\0", "6.1\u{1b}[31m", "6.1\nkernel"] {
            assert_eq!(
                refused(v1::NodeFacts {
                    kernel_release: bad.into(),
                    ..real.clone()
                }),
                "kernel_release"
            );
        }
        assert_eq!(
            refused(v1::NodeFacts {
                online_cpus: (0..250_000).collect(),
                ..real.clone()
            }),
            "online_cpus"
        );
        assert_eq!(
            refused(v1::NodeFacts {
                sockets: 250_000,
                ..real.clone()
            }),
            "sockets"
        );
        let message = super::hello(&with(v1::NodeFacts {
            online_cpus: vec![9000],
            ..real
        }))
        .unwrap_err()
        .to_string();
        assert_eq!(
            message,
            "the node fact `online_cpus` names CPU 9000; CPUs are numbered below 8192"
        );
    }
}
