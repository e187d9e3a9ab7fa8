//! Sending alerts where operators' alerts already go, in the formats their tools read:
//!
//! - **Alertmanager** (`--alertmanager-url`): `POST /api/v2/alerts`, the way Prometheus sends. Every
//!   evaluation sends every firing alert with an end a few intervals ahead (Alertmanager resolves
//!   an alert that stops being sent), and each resolved alert with its end for
//!   [`RESEND_RESOLVED`] after it resolved. Alertmanager groups, deduplicates and routes them.
//! - **Webhooks** (`--webhook-url`): Alertmanager's webhook payload (version 4), one per rule and
//!   status, sent when alerts start firing or resolve. A failed delivery is tried again at the
//!   next evaluations (at most [`MAX_OUTBOX`] payloads wait; the oldest are dropped and counted).
//!
//! Each alert's `generatorURL` opens the compare view of its nodes over the window it judged.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde_json::{json, Value};

use super::state::{Alert, State};
use crate::clock::rfc3339;

/// How long a resolved alert is still sent to Alertmanager.
pub const RESEND_RESOLVED: Duration = Duration::from_secs(15 * 60);
/// Webhook payloads kept for retry at most.
pub const MAX_OUTBOX: usize = 256;
/// Time allowed for one delivery.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where alerts go, and what is waiting to be sent again.
#[derive(Debug)]
pub struct Notifier {
    alertmanagers: Vec<String>,
    webhooks: Vec<String>,
    /// The server's URL as users open it, for links.
    external_url: String,
    /// Webhook payloads not delivered yet: (url, payload).
    outbox: VecDeque<(String, Value)>,
    agent: ureq::Agent,
    /// Webhook payloads dropped because the outbox was full.
    pub dropped: u64,
}

impl Notifier {
    pub fn new(alertmanagers: Vec<String>, webhooks: Vec<String>, external_url: &str) -> Notifier {
        Notifier {
            alertmanagers: alertmanagers
                .into_iter()
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect(),
            webhooks,
            external_url: external_url.trim_end_matches('/').to_owned(),
            outbox: VecDeque::new(),
            agent: ureq::AgentBuilder::new().timeout(TIMEOUT).build(),
            dropped: 0,
        }
    }

    /// The compare view of an alert's nodes over the window it judged, focused on its function.
    pub fn link(&self, a: &Alert) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("selector", &a.selector)
            .append_pair("from", &a.from.to_string())
            .append_pair("to", &a.to.max(a.from + 1).to_string());
        if let Some(event) = a.labels.get("event") {
            q.append_pair("event", event);
        }
        if !a.top_function.is_empty() {
            // The compare view's search, as a whole-name regular expression (as the UI links).
            q.append_pair("q", &format!("/^{}$/", regex::escape(&a.top_function)));
        }
        format!("{}/compare.html?{}", self.external_url, q.finish())
    }

    /// An alert as Alertmanager's API and webhooks carry it. `ends` is the end to announce for
    /// an alert still firing.
    fn alert_json(&self, a: &Alert, ends: u32) -> Value {
        let mut annotations = a.annotations.clone();
        if !a.top_function.is_empty() {
            annotations.insert("top_function".into(), a.top_function.clone());
        }
        if !a.node_wide.is_empty() {
            annotations.insert("node_wide".into(), a.node_wide.clone());
        }
        let ends_at = match a.state {
            State::Resolved | State::Inactive => rfc3339(a.resolved_at),
            State::Firing | State::Pending => rfc3339(ends),
        };
        json!({
            "labels": a.labels,
            "annotations": annotations,
            "startsAt": rfc3339(a.active_since),
            "endsAt": ends_at,
            "generatorURL": self.link(a),
        })
    }

    /// One evaluation's sending: `alerts` are every alert the evaluator knows, `changed` those
    /// whose state changed in this evaluation; `interval` is the evaluation interval.
    pub async fn send(
        &mut self,
        alerts: &[Alert],
        changed: &[Alert],
        now: u32,
        interval: Duration,
    ) -> Result<(), String> {
        let mut failures = Vec::new();
        if !self.alertmanagers.is_empty() {
            // Ahead by several intervals (at least three minutes), as Prometheus does: a server
            // that stops sending lets the alerts resolve by themselves.
            let ends = now + (4 * interval.as_secs()).max(180) as u32;
            let resend_from = now.saturating_sub(RESEND_RESOLVED.as_secs() as u32);
            let body: Vec<Value> = alerts
                .iter()
                .filter(|a| a.state == State::Firing || (a.state == State::Resolved && a.resolved_at >= resend_from))
                .map(|a| self.alert_json(a, ends))
                .collect();
            if !body.is_empty() {
                let body = Value::Array(body);
                for am in self.alertmanagers.clone() {
                    let sent = self.post(format!("{am}/api/v2/alerts"), body.clone()).await;
                    count("alertmanager", sent.is_ok());
                    if let Err(e) = sent {
                        failures.push(format!("Alertmanager {am}: {e}"));
                    }
                }
            }
        }
        if !self.webhooks.is_empty() {
            for payload in self.webhook_payloads(changed) {
                for url in &self.webhooks {
                    if self.outbox.len() == MAX_OUTBOX {
                        self.outbox.pop_front();
                        self.dropped += 1;
                    }
                    self.outbox.push_back((url.clone(), payload.clone()));
                }
            }
            // Oldest first; a receiver that fails keeps its payloads for the next evaluation.
            let mut kept = VecDeque::new();
            let mut down: Vec<String> = Vec::new();
            while let Some((url, payload)) = self.outbox.pop_front() {
                if down.contains(&url) {
                    kept.push_back((url, payload));
                    continue;
                }
                let sent = self.post(url.clone(), payload.clone()).await;
                count("webhook", sent.is_ok());
                if let Err(e) = sent {
                    failures.push(format!("webhook {url}: {e}"));
                    down.push(url.clone());
                    kept.push_back((url, payload));
                }
            }
            self.outbox = kept;
        }
        match failures.is_empty() {
            true => Ok(()),
            false => Err(failures.join("; ")),
        }
    }

    /// Alertmanager's webhook payloads for alerts that started firing or resolved: one per rule
    /// and status.
    pub fn webhook_payloads(&self, changed: &[Alert]) -> Vec<Value> {
        let mut groups: BTreeMap<(&str, &str), Vec<&Alert>> = BTreeMap::new();
        for a in changed {
            let status = match a.state {
                State::Firing => "firing",
                State::Resolved => "resolved",
                State::Pending | State::Inactive => continue,
            };
            groups.entry((a.rule.as_str(), status)).or_default().push(a);
        }
        groups
            .into_iter()
            .map(|((rule, status), alerts)| {
                let common = |get: fn(&Alert) -> &BTreeMap<String, String>| -> BTreeMap<String, String> {
                    let mut common = get(alerts[0]).clone();
                    common.retain(|k, v| alerts.iter().all(|a| get(a).get(k) == Some(v)));
                    common
                };
                json!({
                    "version": "4",
                    "groupKey": format!("{{}}:{{alertname=\"{rule}\"}}"),
                    "truncatedAlerts": 0,
                    "status": status,
                    "receiver": "bimodal",
                    "groupLabels": {"alertname": rule},
                    "commonLabels": common(|a| &a.labels),
                    "commonAnnotations": common(|a| &a.annotations),
                    "externalURL": self.external_url,
                    "alerts": alerts.iter().map(|a| {
                        let mut v = self.alert_json(a, 0);
                        v["status"] = json!(status);
                        v["fingerprint"] = json!(format!("{:016x}", a.fingerprint));
                        if a.state == State::Firing {
                            // Alertmanager's zero time: no end yet.
                            v["endsAt"] = json!("0001-01-01T00:00:00Z");
                        }
                        v
                    }).collect::<Vec<_>>(),
                })
            })
            .collect()
    }

    async fn post(&self, url: String, body: Value) -> Result<(), String> {
        let agent = self.agent.clone();
        tokio::task::spawn_blocking(move || {
            match agent
                .post(&url)
                .set("Content-Type", "application/json")
                .send_string(&body.to_string())
            {
                Ok(_) => Ok(()),
                Err(ureq::Error::Status(code, r)) => Err(format!(
                    "HTTP {code}: {}",
                    r.into_string()
                        .unwrap_or_default()
                        .chars()
                        .take(300)
                        .collect::<String>()
                )),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
        .map_err(|e| format!("the delivery failed: {e}"))?
    }
}

fn count(receiver: &str, sent: bool) {
    crate::metrics::metrics()
        .alert_notifications
        .get_or_create(&[
            ("receiver", receiver.to_owned()),
            ("result", if sent { "sent" } else { "failed" }.to_owned()),
        ])
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(node: &str, state: State) -> Alert {
        Alert {
            rule: "RemoteAccessSpike".into(),
            fingerprint: 0xabc,
            state,
            labels: [
                ("alertname".to_owned(), "RemoteAccessSpike".to_owned()),
                ("node".to_owned(), node.to_owned()),
                ("severity".to_owned(), "page".to_owned()),
            ]
            .into(),
            annotations: [("summary".to_owned(), format!("{node} is hot"))].into(),
            value: 42.0,
            active_since: 1_700_000_000,
            fired_at: 1_700_000_060,
            resolved_at: if state == State::Resolved { 1_700_000_600 } else { 0 },
            selector: format!("{{node=\"{node}\"}}"),
            from: 1_699_999_700,
            to: 1_700_000_060,
            top_function: "touch_pages".into(),
            node_wide: String::new(),
        }
    }

    #[test]
    fn links_open_the_compare_view_of_the_alert() {
        let n = Notifier::new(vec![], vec![], "http://bimodal:7070/");
        assert_eq!(
            n.link(&alert("web-1", State::Firing)),
            "http://bimodal:7070/compare.html?selector=%7Bnode%3D%22web-1%22%7D&from=1699999700&to=1700000060&q=%2F%5Etouch_pages%24%2F"
        );
    }

    #[test]
    fn webhook_payloads_are_alertmanagers_format() {
        let n = Notifier::new(vec![], vec!["http://x".into()], "http://bimodal:7070");
        let payloads = n.webhook_payloads(&[
            alert("a", State::Firing),
            alert("b", State::Firing),
            alert("c", State::Resolved),
            alert("d", State::Pending),
        ]);
        assert_eq!(payloads.len(), 2, "{payloads:#?}");
        let firing = &payloads[0];
        assert_eq!(firing["version"], "4");
        assert_eq!(firing["status"], "firing");
        assert_eq!(firing["groupLabels"]["alertname"], "RemoteAccessSpike");
        assert_eq!(firing["commonLabels"]["severity"], "page");
        assert!(firing["commonLabels"].get("node").is_none());
        assert_eq!(firing["alerts"].as_array().unwrap().len(), 2);
        let a = &firing["alerts"][0];
        assert_eq!(a["status"], "firing");
        assert_eq!(a["labels"]["node"], "a");
        assert_eq!(a["startsAt"], "2023-11-14T22:13:20Z");
        assert_eq!(a["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(a["annotations"]["top_function"], "touch_pages");
        assert!(a["generatorURL"].as_str().unwrap().contains("/compare.html?"));
        assert_eq!(a["fingerprint"], "0000000000000abc");
        let resolved = &payloads[1];
        assert_eq!(resolved["status"], "resolved");
        assert_eq!(resolved["alerts"][0]["endsAt"], "2023-11-14T22:23:20Z");
    }
}
