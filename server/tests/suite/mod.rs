mod common;
mod e2e;
mod ingest;
mod outage;
