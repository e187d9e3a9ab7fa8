mod cli;
mod golden;
mod probe;
mod record;
mod refused;
