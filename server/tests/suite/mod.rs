mod cli;
mod common;
mod e2e;
mod identity;
mod ingest;
mod outage;
mod symbolize;
