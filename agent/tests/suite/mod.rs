mod cli;
mod probe;
mod record;
