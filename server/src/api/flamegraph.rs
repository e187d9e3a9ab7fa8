//! `GET /api/v1/flamegraph?event=&from=&to=&node=…&format=json|folded|pprof`

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bimodal_proto::v1::EventKind;

use super::{AppError, AppState};
use crate::storage::FlameQuery;

/// Default range when `from` is absent: the last 15 minutes.
const DEFAULT_RANGE_SECS: u32 = 15 * 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Folded,
    Pprof,
}

pub(super) async fn flamegraph(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Result<Response, AppError> {
    let (query, format) = parse(raw.as_deref().unwrap_or(""), now())?;
    let profile = state.store.flame_graph(&query).await?;
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

fn now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

fn parse(raw: &str, now: u32) -> Result<(FlameQuery, Format), AppError> {
    let bad = |m: String| AppError::BadRequest(m);
    let (mut event, mut from, mut to, mut format) = (None, None, None, Format::Json);
    let mut nodes = Vec::new();
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        match &*k {
            "event" => {
                event = Some(
                    EventKind::from_name(&v)
                        .filter(|e| *e != EventKind::Unspecified)
                        .ok_or_else(|| bad(format!("unknown event `{v}`")))?,
                )
            }
            "from" => from = Some(parse_time(&v).ok_or_else(|| bad(format!("`from` is not a time: `{v}`")))?),
            "to" => to = Some(parse_time(&v).ok_or_else(|| bad(format!("`to` is not a time: `{v}`")))?),
            "node" if !v.is_empty() => nodes.push(v.into_owned()),
            "node" => {}
            "format" => {
                format = match &*v {
                    "json" => Format::Json,
                    "folded" => Format::Folded,
                    "pprof" => Format::Pprof,
                    other => return Err(bad(format!("unknown format `{other}`; expected json, folded or pprof"))),
                }
            }
            other => return Err(bad(format!("unknown parameter `{other}`"))),
        }
    }
    let event = event.ok_or_else(|| bad("`event` is required".into()))?;
    let to = to.unwrap_or(now.saturating_add(1));
    let from = from.unwrap_or(to.saturating_sub(DEFAULT_RANGE_SECS));
    if from >= to {
        return Err(bad("`from` must be before `to`".into()));
    }
    Ok((FlameQuery { event, from, to, nodes }, format))
}

/// Unix seconds or RFC 3339.
fn parse_time(s: &str) -> Option<u32> {
    if let Ok(secs) = s.parse::<u32>() {
        return Some(secs);
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    u32::try_from(t.unix_timestamp()).ok()
}

/// Unix seconds as RFC 3339 in UTC.
pub(super) fn rfc3339(secs: u32) -> String {
    time::OffsetDateTime::from_unix_timestamp(i64::from(secs))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters parse into a query; defaults cover the last 15 minutes; nodes repeat.
    #[test]
    fn parses_parameters() {
        let (q, f) = parse("event=page_fault&node=a&node=b&format=folded", 10_000).unwrap();
        assert_eq!(q.event, EventKind::PageFault);
        assert_eq!(q.nodes, ["a", "b"]);
        assert_eq!((q.from, q.to), (10_001 - 900, 10_001));
        assert_eq!(f, Format::Folded);
        let (q, _) = parse("event=cpu&from=2026-11-22T21:00:00Z&to=1795900000", 0).unwrap();
        assert_eq!(q.from, 1_795_381_200);
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
