//! Node facts, counters and placement as the server receives them: conversions from what
//! `topology`, `counters`, `placement` and `probe` read to the wire types.

use std::path::Path;

use bimodal_proto::v1;

use crate::node::counters::CounterDelta;
use crate::node::placement::Placement;
use crate::node::topology::{NumaBalancing, Topology};
use crate::sample::probe::ProbeReport;

/// What the node is, with the source chosen for each event kind.
pub fn node_facts(t: &Topology, probe: &ProbeReport) -> v1::NodeFacts {
    v1::NodeFacts {
        kernel_release: t.kernel_release.clone(),
        cpu_vendor: t.cpu_model.vendor.clone().unwrap_or_default(),
        cpu_model_name: t.cpu_model.model_name.clone().unwrap_or_default(),
        cpu_family: t.cpu_model.family.unwrap_or(0),
        cpu_model: t.cpu_model.model.unwrap_or(0),
        cpu_stepping: t.cpu_model.stepping.unwrap_or(0),
        online_cpus: t.online_cpus.clone(),
        sockets: t.sockets.len() as u32,
        cores: t.cores.len() as u32,
        threads_per_core: t.cores.iter().map(|c| c.cpus.len() as u32).max().unwrap_or(1),
        numa_nodes: t
            .numa_nodes
            .iter()
            .map(|n| v1::NumaNode {
                id: n.id,
                cpus: n.cpus.clone(),
                memory_bytes: n.mem_total_bytes.unwrap_or(0),
                distances: n.distances.clone(),
            })
            .collect(),
        l3_domains: t
            .l3_domains
            .iter()
            .map(|d| v1::CpuSet { cpus: d.cpus.clone() })
            .collect(),
        nics: t
            .nics
            .iter()
            .map(|n| v1::Nic {
                name: n.name.clone(),
                numa_node: n.numa_node.map_or(-1, |x| x as i32),
            })
            .collect(),
        numa_balancing: match t.numa_balancing {
            None => String::new(),
            Some(NumaBalancing::Off) => "disabled".into(),
            Some(NumaBalancing::Normal) => "normal".into(),
            Some(NumaBalancing::MemoryTiering) => "memory_tiering".into(),
            Some(NumaBalancing::NormalAndMemoryTiering) => "normal,memory_tiering".into(),
            Some(NumaBalancing::Other(v)) => v.to_string(),
        },
        transparent_hugepages: t.thp_enabled.clone().unwrap_or_default(),
        event_sources: probe
            .events
            .iter()
            .map(|e| v1::EventSourceReport {
                event: v1::EventKind::from_name(e.event).unwrap_or_default() as i32,
                source: e.chosen.as_ref().map(|c| c.source.clone()).unwrap_or_default(),
                encoding: e.chosen.as_ref().map(|c| c.encoding.clone()).unwrap_or_default(),
                attach: e.chosen.as_ref().map(|c| c.attach.to_owned()).unwrap_or_default(),
                data_address: e.chosen.as_ref().is_some_and(|c| c.data_address),
                rejected: e
                    .rejected
                    .iter()
                    .map(|r| format!("{}: {}", r.candidate, r.reason))
                    .collect(),
                unwinding: e
                    .unwinding
                    .as_ref()
                    .map(|u| u.method.name().to_owned())
                    .unwrap_or_default(),
                unwinding_reduced: e.unwinding.as_ref().and_then(|u| u.reduced.clone()).unwrap_or_default(),
            })
            .collect(),
        hardware_pmu: probe.hardware_pmu.clone().unwrap_or_default(),
    }
}

/// The node counters' increase over an interval, by their one name; counters the kernel lacks
/// or that were reset are left out rather than sent as zero.
pub fn counters(d: &CounterDelta) -> Vec<v1::Counter> {
    let mut out: Vec<v1::Counter> = d
        .vmstat
        .iter()
        .filter_map(|(name, v)| {
            v.map(|value| v1::Counter {
                name: name.clone(),
                value,
            })
        })
        .collect();
    let mut push = |name: &str, value: Option<u64>| {
        if let Some(value) = value {
            out.push(v1::Counter {
                name: name.into(),
                value,
            });
        }
    };
    push("context_switches", d.context_switches);
    push("forks", d.forks);
    push("cpu_busy_ns", d.cpu.as_ref().map(|c| c.busy_ns()));
    push("cpu_total_ns", d.cpu.as_ref().map(|c| c.total_ns()));
    push("interval_ns", d.interval_ns);
    out
}

/// One process's placement on the wire.
pub fn placement(p: &Placement, root: &Path) -> v1::Placement {
    let mut threads_per_node = std::collections::HashMap::new();
    for t in &p.threads {
        if let Some(node) = t.node {
            *threads_per_node.entry(node).or_insert(0u32) += 1;
        }
    }
    let executable = std::fs::read_link(root.join("proc").join(p.pid.to_string()).join("exe"))
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    v1::Placement {
        pid: p.pid,
        comm: p.comm.clone().unwrap_or_default(),
        executable,
        threads_per_node,
        mappings: p
            .mappings
            .iter()
            .filter(|m| m.resident_pages() > 0)
            .map(|m| v1::MappingPlacement {
                kind: m.class.as_str().into(),
                path: m.image.clone().or_else(|| m.path.clone()).unwrap_or_default(),
                start: m.start,
                end: m.end,
                permissions: m.perms.clone(),
                pages_per_node: m.pages_per_node.iter().map(|(&n, &p)| (n, p)).collect(),
                page_size: m.page_size_bytes.unwrap_or(4096),
            })
            .collect(),
    }
}

/// A placement as JSON for `bimodal-agent placement`, with the remote-memory findings.
pub fn placement_json(p: &Placement, root: &Path) -> serde_json::Value {
    let wire = placement(p, root);
    let findings: Vec<_> = p
        .remote_mappings()
        .iter()
        .map(|f| {
            serde_json::json!({
                "kind": f.class.as_str(),
                "image": f.image,
                "path": f.path,
                "node": f.node,
                "thread_nodes": f.thread_nodes,
                "remote_pages": f.remote_pages,
                "total_pages": f.total_pages,
                "text": f.to_string(),
            })
        })
        .collect();
    serde_json::json!({
        "pid": wire.pid,
        "comm": wire.comm,
        "executable": wire.executable,
        "threads_per_node": wire.threads_per_node,
        "mappings": wire.mappings.iter().map(|m| serde_json::json!({
            "kind": m.kind,
            "path": m.path,
            "start": m.start,
            "end": m.end,
            "permissions": m.permissions,
            "pages_per_node": m.pages_per_node,
            "page_size": m.page_size,
        })).collect::<Vec<_>>(),
        "findings": findings,
    })
}
