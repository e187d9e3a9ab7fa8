//! Query parameters shared by the API's routes: repeatable keys, time ranges, bound values.

use super::AppError;

/// Default range when `from` is absent: the last 15 minutes.
const DEFAULT_RANGE_SECS: u32 = 15 * 60;

/// The decoded query string of one request.
#[derive(Debug)]
pub(super) struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// Decodes `raw`; a key not in `allowed` is a bad request rather than silently ignored.
    pub(super) fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Params, AppError> {
        let mut pairs = Vec::new();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            if !allowed.contains(&&*k) {
                return Err(AppError::BadRequest(format!(
                    "unknown parameter `{k}`; expected one of: {}",
                    allowed.join(", ")
                )));
            }
            pairs.push((k.into_owned(), v.into_owned()));
        }
        Ok(Params { pairs })
    }

    /// Every non-empty value of a repeatable key.
    pub(super) fn all(&self, key: &str) -> Vec<String> {
        self.pairs
            .iter()
            .filter(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The last value of `key`.
    pub(super) fn one(&self, key: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The value of a required key.
    pub(super) fn required(&self, key: &str) -> Result<&str, AppError> {
        self.one(key)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| AppError::BadRequest(format!("`{key}` is required")))
    }

    /// The `selector` (Prometheus label matchers); every node and process when absent.
    pub(super) fn selector(&self) -> Result<crate::selector::Selector, AppError> {
        crate::selector::Selector::parse(self.one("selector").unwrap_or(""))
            .map_err(|e| AppError::BadRequest(format!("`selector`: {e}")))
    }

    /// The event kind named by the required `event`.
    pub(super) fn event(&self) -> Result<bimodal_proto::v1::EventKind, AppError> {
        let name = self.required("event")?;
        bimodal_proto::v1::EventKind::from_name(name)
            .filter(|e| *e != bimodal_proto::v1::EventKind::Unspecified)
            .ok_or_else(|| {
                let known: Vec<&str> = bimodal_proto::v1::EventKind::ALL.iter().map(|e| e.name()).collect();
                AppError::BadRequest(format!("unknown event `{name}`; expected one of: {}", known.join(", ")))
            })
    }

    /// A positive number no larger than `max`, or `default` when absent.
    pub(super) fn bounded(&self, key: &str, default: u32, max: u32) -> Result<u32, AppError> {
        match self.one(key) {
            None | Some("") => Ok(default),
            Some(v) => v.parse::<u32>().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                AppError::BadRequest(format!("`{key}` must be a whole number from 1 to {max}, not `{v}`"))
            }),
        }
    }

    /// `from` (inclusive) and `to` (exclusive) in Unix seconds; default the last 15 minutes.
    pub(super) fn time_range(&self, now: u32) -> Result<(u32, u32), AppError> {
        let time = |key: &str| -> Result<Option<u32>, AppError> {
            self.one(key)
                .map(|v| parse_time(v).ok_or_else(|| AppError::BadRequest(format!("`{key}` is not a time: `{v}`"))))
                .transpose()
        };
        let to = time("to")?.unwrap_or(now.saturating_add(1));
        let from = time("from")?.unwrap_or(to.saturating_sub(DEFAULT_RANGE_SECS));
        if from >= to {
            return Err(AppError::BadRequest("`from` must be before `to`".into()));
        }
        Ok((from, to))
    }
}

/// Unix seconds or RFC 3339.
fn parse_time(s: &str) -> Option<u32> {
    if let Ok(secs) = s.parse::<u32>() {
        return Some(secs);
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    u32::try_from(t.unix_timestamp()).ok()
}
