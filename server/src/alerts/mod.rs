//! Alerts: rules read from a file ([`rules`]), judged on the per-node metrics of each window
//! ([`evaluate`]), their states kept in ClickHouse so they outlive the server, and sent where
//! operators' alerts already go ([`notify`]): Alertmanager's API and webhooks in its format.

pub mod evaluate;
pub mod judge;
pub mod notify;
pub mod rules;
pub mod state;

pub use evaluate::{spawn, AlertConfig};
