//! `GET /api/v1/flamegraph?event=&selector=&source=&from=&to=&max_stacks=&format=json|folded|pprof`
//!
//! One event, one source: the source asked for, else the one with the most samples in the
//! range; the answer names it, its unit and the other sources the range had.

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use super::params::Params;
use super::{AppError, AppState, Reader};
use crate::clock::{now_secs as now, rfc3339};
use crate::storage::Scope;

/// Stacks a flame graph holds at most by default (the largest), and at most when asked.
const DEFAULT_MAX_STACKS: u32 = 100_000;
const MAX_STACKS: u32 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Folded,
    Pprof,
}

pub(super) async fn flamegraph(
    State(state): State<AppState>,
    Extension(reader): Extension<Reader>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    let (scope, max_stacks, format) = parse(raw.as_deref().unwrap_or(""), now())?;
    // Held until the answer is built (it is serialized before this returns).
    let _building = state.building.hold(&reader, max_stacks).await?;
    let mut graph = state.store.flame_graph(&scope, max_stacks).await?;
    state.names.name_profile(&mut graph.profile).await?;
    let profile = graph.profile;
    Ok(match format {
        // Serialized straight from the tree: a fleet's graph has 10⁵ nodes, and a JSON value
        // in between costs as much as building the tree.
        Format::Json => Json(FlameAnswer {
            event: scope.event,
            source: &graph.source,
            unit: &profile.unit,
            sources: &graph.sources,
            selector: scope.selector.to_string(),
            from: rfc3339(scope.from),
            to: rfc3339(scope.to),
            total: graph.total_value,
            truncated_stacks: graph.truncated_stacks,
            truncated_samples: graph.truncated_samples,
            truncated_value: graph.truncated_value,
            reach: graph.reach,
            root: profile.to_tree(),
        })
        .into_response(),
        Format::Folded => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            profile.to_folded(),
        )
            .into_response(),
        Format::Pprof => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (header::CONTENT_DISPOSITION, "attachment; filename=\"profile.pb.gz\""),
            ],
            profile.to_pprof(),
        )
            .into_response(),
    })
}

/// The JSON answer.
#[derive(serde::Serialize)]
struct FlameAnswer<'a> {
    event: &'a str,
    source: &'a str,
    unit: &'a str,
    sources: &'a [crate::storage::SourceShare],
    selector: String,
    from: String,
    to: String,
    /// The source's value over the range, the stacks left out included: `root` holds `total -
    /// truncated_value`.
    total: u64,
    /// The stacks left out beyond `max_stacks` (the smallest), exactly, and their samples and
    /// value.
    truncated_stacks: u64,
    truncated_samples: u64,
    truncated_value: u64,
    /// How the nodes were summed: `fleet` (the rollups), `fleet-minus` (the rollups minus the
    /// nodes left out), `matching` or `every-node` (per-node rows), `nothing`.
    reach: &'static str,
    root: bimodal_profile::TreeNode,
}

fn parse(raw: &str, now: u32) -> Result<(Scope, u32, Format), AppError> {
    let p = Params::parse(
        Some(raw),
        &["event", "selector", "source", "from", "to", "max_stacks", "format"],
    )?;
    let event = p.event()?;
    let format = match p.one("format").unwrap_or("json") {
        "json" => Format::Json,
        "folded" => Format::Folded,
        "pprof" => Format::Pprof,
        other => {
            return Err(AppError::BadRequest(format!(
                "unknown format `{other}`; expected json, folded or pprof"
            )))
        }
    };
    let (from, to) = p.time_range(now)?;
    let scope = Scope {
        event: event.name(),
        source: p.one("source").filter(|s| !s.is_empty()).map(str::to_owned),
        selector: p.selector()?,
        from,
        to,
    };
    Ok((scope, p.bounded("max_stacks", DEFAULT_MAX_STACKS, MAX_STACKS)?, format))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters parse into a scope; defaults cover the last 15 minutes.
    #[test]
    fn parses_parameters() {
        let (s, max, f) = parse(
            "event=page_fault&selector=%7Bnode%3D~%22web-.*%22%7D&format=folded&source=page-faults",
            10_000,
        )
        .unwrap();
        assert_eq!(s.event, "page_fault");
        assert_eq!(s.selector.to_string(), r#"{node=~"web-.*"}"#);
        assert_eq!(s.source.as_deref(), Some("page-faults"));
        assert_eq!((s.from, s.to), (10_001 - 900, 10_001));
        assert_eq!((max, f), (DEFAULT_MAX_STACKS, Format::Folded));
        let (s, _, _) = parse("event=cpu&from=2026-11-22T21:00:00Z&to=1795900000", 0).unwrap();
        assert_eq!(s.from, 1_795_381_200);
    }

    /// Bad input is a BadRequest, never a storage query.
    #[test]
    fn rejects_bad_parameters() {
        for raw in [
            "",
            "event=nope",
            "event=cpu&from=yesterday",
            "event=cpu&from=20&to=10",
            "event=cpu&format=svg",
            "event=cpu&x=1",
            "event=cpu&selector=%7Bzone%3D%7D",
            "event=cpu&max_stacks=0",
            "event=cpu&node=a",
        ] {
            assert!(matches!(parse(raw, 100), Err(AppError::BadRequest(_))), "{raw}");
        }
    }
}
