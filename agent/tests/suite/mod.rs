mod cli;
mod record;
