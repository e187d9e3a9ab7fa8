//! Every read query of the server, built in one place with its parameters bound, so that
//! `bimodal-server sql` can print them for checking against other ClickHouse versions.

use clickhouse::query::Query;
use clickhouse::Client;

use super::FlameQuery;

/// The samples a flame graph covers: event and time range, then each selector that is given
/// (`has(?, column)`), its values bound in the same order by [`bind_flame`].
fn flame_filter(q: &FlameQuery) -> String {
    let mut sql = String::from("event = ? AND time >= toDateTime(?) AND time < toDateTime(?)");
    for (values, column) in selectors(q) {
        if !values.is_empty() {
            sql.push_str(&format!(" AND has(?, {column})"));
        }
    }
    sql
}

fn selectors(q: &FlameQuery) -> [(&Vec<String>, &'static str); 6] {
    [
        (&q.nodes, "node"),
        (&q.containers, "container_id"),
        (&q.pods, "pod_uid"),
        (&q.units, "systemd_unit"),
        (&q.namespaces, "pod_namespace"),
        (&q.pod_names, "pod_name"),
    ]
}

fn bind_flame(query: Query, q: &FlameQuery) -> Query {
    let mut query = query.bind(q.event.name()).bind(q.from).bind(q.to);
    for (values, _) in selectors(q) {
        if !values.is_empty() {
            query = query.bind(values.clone());
        }
    }
    query
}

/// Sample totals per (stack, comm) of a flame graph.
pub(super) fn flame_samples(client: &Client, q: &FlameQuery) -> Query {
    let sql = format!(
        "SELECT stack_id, comm, sum(count) AS samples, sum(value) AS total FROM samples WHERE {} \
         GROUP BY stack_id, comm",
        flame_filter(q)
    );
    bind_flame(client.query(&sql), q)
}

/// The stacks those samples reference.
pub(super) fn flame_stacks(client: &Client, q: &FlameQuery) -> Query {
    let sql = format!(
        "SELECT stack_id, kinds, functions, modules, build_ids, addresses, file_offsets, elf_addresses FROM stacks \
         WHERE stack_id IN (SELECT stack_id FROM samples WHERE {})",
        flame_filter(q)
    );
    bind_flame(client.query(&sql), q)
}

/// Every node with its newest labels and last batch time.
pub(super) fn nodes(client: &Client) -> Query {
    client.query(
        "SELECT node, argMax(label_keys, received) AS last_label_keys, \
         argMax(label_values, received) AS last_label_values, toUInt32(max(received)) AS last_seen \
         FROM batches GROUP BY node ORDER BY node",
    )
}

/// The newest facts of every node.
pub(super) fn node_facts(client: &Client) -> Query {
    client.query("SELECT node, argMax(facts, received) AS facts FROM node_facts GROUP BY node")
}

/// Rows of `table` that belong to a batch (the resend check).
pub(super) fn batch_rows(client: &Client, table: &'static str, batch_id_hex: String) -> Query {
    client
        .query(&format!("SELECT count() AS n FROM {table} WHERE batch_id = unhex(?)"))
        .bind(batch_id_hex)
}

/// Placement rows of a node in a time range, oldest first.
pub(super) fn placements(client: &Client, node: &str, from: u32, to: u32) -> Query {
    client
        .query(
            "SELECT toUInt32(time) AS time, node, pid, comm, executable, thread_nodes, thread_counts, kind, \
             path, start, end, permissions, page_nodes, page_counts, page_size, batch_id FROM placements \
             WHERE node = ? AND time >= toDateTime(?) AND time < toDateTime(?) ORDER BY pid, time, start",
        )
        .bind(node)
        .bind(from)
        .bind(to)
}

/// Counter increases per interval of a node; `names` empty means all.
pub(super) fn counters(client: &Client, node: &str, names: &[String], from: u32, to: u32) -> Query {
    let filter = if names.is_empty() { "" } else { " AND has(?, name)" };
    let q = client
        .query(&format!(
            "SELECT toUInt32(time) AS time, name, sum(value) AS value FROM counters \
             WHERE node = ? AND time >= toDateTime(?) AND time < toDateTime(?){filter} \
             GROUP BY time, name ORDER BY name, time"
        ))
        .bind(node)
        .bind(from)
        .bind(to);
    if names.is_empty() {
        q
    } else {
        q.bind(names.to_vec())
    }
}

/// Every query above with example parameters, as the SQL the server would send.
pub fn examples(client: &Client) -> Vec<String> {
    let all = FlameQuery {
        event: bimodal_proto::v1::EventKind::PageFault,
        from: 1_795_000_000,
        to: 1_795_000_900,
        ..Default::default()
    };
    let with_nodes = FlameQuery {
        nodes: vec!["web-1".into(), "web-'2".into()],
        containers: vec!["3f4b".repeat(16)],
        pods: vec!["0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d".into()],
        units: vec!["nginx.service".into()],
        namespaces: vec!["shop".into(), "kube-'system".into()],
        pod_names: vec!["checkout-7d9f8b6c5-x2k4p".into()],
        ..all.clone()
    };
    [
        flame_samples(client, &with_nodes),
        flame_samples(client, &all),
        flame_stacks(client, &with_nodes),
        nodes(client),
        node_facts(client),
        batch_rows(client, "samples", "00".repeat(16)),
        placements(client, "web-1", 1_795_000_000, 1_795_000_900),
        counters(client, "web-1", &["pgfault".into()], 1_795_000_000, 1_795_000_900),
        counters(client, "web-1", &[], 1_795_000_000, 1_795_000_900),
    ]
    .iter()
    .map(|q| q.sql_display().to_string())
    .collect()
}
