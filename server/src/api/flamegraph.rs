//! `GET /api/v1/flamegraph?event=&from=&to=&node=…&container=…&pod=…&unit=…&namespace=…&pod_name=…&format=json|folded|pprof`
//!
//! Each selector repeats; samples match when they match any value of every selector given.

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bimodal_proto::v1::EventKind;

use super::params::{now, rfc3339, Params};
use super::{AppError, AppState};
use crate::storage::FlameQuery;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Folded,
    Pprof,
}

pub(super) async fn flamegraph(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Result<Response, AppError> {
    let (query, format) = parse(raw.as_deref().unwrap_or(""), now())?;
    let profile = state.store.flame_graph(&query).await?;
    let symbolizer = state.symbolizer.clone();
    let profile = tokio::task::spawn_blocking(move || {
        let mut profile = profile;
        symbolizer.name_profile_frames(&mut profile.frames);
        profile
    })
    .await
    .map_err(|e| AppError::Internal(format!("symbolizing failed: {e}")))?;
    Ok(match format {
        Format::Json => Json(serde_json::json!({
            "event": query.event.name(),
            "unit": query.event.unit(),
            "from": rfc3339(query.from),
            "to": rfc3339(query.to),
            "nodes": query.nodes,
            "total": profile.total(),
            "root": profile.to_tree(),
        }))
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

fn parse(raw: &str, now: u32) -> Result<(FlameQuery, Format), AppError> {
    let p = Params::parse(
        Some(raw),
        &[
            "event",
            "from",
            "to",
            "node",
            "container",
            "pod",
            "unit",
            "namespace",
            "pod_name",
            "format",
        ],
    )?;
    let name = p.required("event")?;
    let event = EventKind::from_name(name)
        .filter(|e| *e != EventKind::Unspecified)
        .ok_or_else(|| AppError::BadRequest(format!("unknown event `{name}`")))?;
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
    Ok((
        FlameQuery {
            event,
            from,
            to,
            nodes: p.all("node"),
            containers: p.all("container"),
            pods: p.all("pod"),
            units: p.all("unit"),
            namespaces: p.all("namespace"),
            pod_names: p.all("pod_name"),
        },
        format,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters parse into a query; defaults cover the last 15 minutes; selectors repeat.
    #[test]
    fn parses_parameters() {
        let (q, f) = parse("event=page_fault&node=a&node=b&format=folded", 10_000).unwrap();
        assert_eq!(q.event, EventKind::PageFault);
        assert_eq!(q.nodes, ["a", "b"]);
        assert_eq!((q.from, q.to), (10_001 - 900, 10_001));
        assert_eq!(f, Format::Folded);
        let (q, _) = parse("event=cpu&from=2026-11-22T21:00:00Z&to=1795900000", 0).unwrap();
        assert_eq!(q.from, 1_795_381_200);
        let (q, _) = parse(
            "event=cpu&namespace=shop&namespace=kube-system&pod_name=checkout-x2k4p",
            0,
        )
        .unwrap();
        assert_eq!(q.namespaces, ["shop", "kube-system"]);
        assert_eq!(q.pod_names, ["checkout-x2k4p"]);
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
        ] {
            assert!(matches!(parse(raw, 100), Err(AppError::BadRequest(_))), "{raw}");
        }
    }
}
