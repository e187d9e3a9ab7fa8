//! `bimodal`: the fleet from a terminal, through a server's HTTP API.
//!
//! - `bimodal compare`: which nodes are slow, what differs in their labels, and where in the code
//!   (`GET /api/v1/compare`), as text or JSON;
//! - `bimodal diff`: the differential flame graph of the bands or of two selectors
//!   (`GET /api/v1/diff`), as folded pairs or as two pprof profiles for
//!   `go tool pprof -diff_base=a.pb.gz b.pb.gz`;
//! - `bimodal import DIR...`: batches `bimodal-agent run --output-dir` wrote, sent to the server
//!   through its gRPC ingest, as the agent would have sent them;
//! - `bimodal rules check FILE...`: every mistake of alert rule files, with its line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use serde_json::Value;

#[derive(Parser, Debug)]
#[command(name = "bimodal", version, about = "Find the slow band of a fleet and explain it")]
struct Cli {
    /// The server's HTTP address.
    #[arg(
        long,
        global = true,
        env = "BIMODAL_SERVER_URL",
        default_value = "http://127.0.0.1:7070"
    )]
    server_url: String,
    /// A token, when the server has tokens: the `read` scope for compare and diff, `write` for
    /// import.
    #[arg(long, global = true, env = "BIMODAL_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM certificates of the CA that signed the server's certificate (https:// URLs; default:
    /// the system's roots).
    #[arg(long, global = true, env = "BIMODAL_CA_FILE")]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// The time range of a command: the last `--last`, or `--from`/`--to`.
#[derive(clap::Args, Debug)]
struct Range {
    /// How far back from now (e.g. 15m, 1h).
    #[arg(long, env = "BIMODAL_LAST", default_value = "15m", conflicts_with = "from")]
    last: humantime::Duration,
    /// Start, Unix seconds or RFC 3339.
    #[arg(long, env = "BIMODAL_FROM")]
    from: Option<String>,
    /// End, Unix seconds or RFC 3339 (default now).
    #[arg(long, env = "BIMODAL_TO", requires = "from")]
    to: Option<String>,
}

impl Range {
    fn query(&self) -> Vec<(&'static str, String)> {
        match &self.from {
            Some(from) => {
                let mut q = vec![("from", from.clone())];
                if let Some(to) = &self.to {
                    q.push(("to", to.clone()));
                }
                q
            }
            None => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs();
                let last: Duration = self.last.into();
                vec![
                    ("from", now.saturating_sub(last.as_secs()).to_string()),
                    ("to", (now + 1).to_string()),
                ]
            }
        }
    }
}

// Parsed once per run: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Split the nodes matching a selector into a fast and a slow band, without being told the
    /// groups, and rank what differs: labels and facts, and functions per event kind. With
    /// `--a` and `--b`, compare those two groups instead.
    Compare {
        /// Nodes to compare (Prometheus label matchers, e.g. '{zone="a"}').
        #[arg(long, env = "BIMODAL_SELECTOR", default_value = "{}")]
        selector: String,
        #[command(flatten)]
        range: Range,
        /// Band the nodes by this metric only (its name, event or counter, e.g. page_fault).
        #[arg(long, env = "BIMODAL_METRIC", conflicts_with = "a")]
        metric: Option<String>,
        /// A group to compare, instead of finding bands: its selector (with `--b`).
        #[arg(long, env = "BIMODAL_A", requires = "b", conflicts_with = "selector")]
        a: Option<String>,
        /// The other group's selector (with `--a`).
        #[arg(long, env = "BIMODAL_B", requires = "a", conflicts_with = "selector")]
        b: Option<String>,
        /// Code differences listed at most.
        #[arg(long, env = "BIMODAL_LIMIT", default_value_t = 10)]
        limit: u32,
        /// Nodes of each band (or group) whose functions and data objects are compared: a
        /// larger band is sampled, the same nodes every time; `all` reads every node
        /// (default: the server's, 100).
        #[arg(long, env = "BIMODAL_EXPLAINED_NODES")]
        explained_nodes: Option<String>,
        /// Print the server's JSON answer instead of text.
        #[arg(long, env = "BIMODAL_JSON")]
        json: bool,
    },
    /// The differential flame graph of the bands (`--groups bands`) or of two selectors
    /// (`--a`, `--b`): each node's samples per CPU-second, averaged over its group.
    Diff {
        /// The event kind (cpu, page_fault, remote_access, cache_miss, ...).
        #[arg(long, env = "BIMODAL_EVENT")]
        event: String,
        /// Its source (default: the one with the most samples).
        #[arg(long, env = "BIMODAL_SOURCE")]
        source: Option<String>,
        /// Compare the bands `bimodal compare` finds among the nodes of `--selector`.
        #[arg(long, env = "BIMODAL_GROUPS", value_parser = ["bands"], conflicts_with_all = ["a", "b"])]
        groups: Option<String>,
        /// The nodes whose bands are compared.
        #[arg(long, env = "BIMODAL_SELECTOR", default_value = "{}", requires = "groups")]
        selector: String,
        /// The metric the bands are found in (default: the one that splits the nodes best).
        #[arg(long, env = "BIMODAL_METRIC", requires = "groups")]
        metric: Option<String>,
        /// The baseline group's selector.
        #[arg(long, env = "BIMODAL_A", requires = "b")]
        a: Option<String>,
        /// The other group's selector.
        #[arg(long, env = "BIMODAL_B", requires = "a")]
        b: Option<String>,
        #[command(flatten)]
        range: Range,
        /// What each node's values are divided by: cpu_second, or work (units of work the agents
        /// count with --work-uprobe or --work-metric).
        #[arg(long, env = "BIMODAL_PER", default_value = "cpu_second", value_parser = ["cpu_second", "work"])]
        per: String,
        /// absolute (per CPU-second or unit of work) or relative (shares of each group's total).
        #[arg(long, env = "BIMODAL_MODE", default_value = "absolute", value_parser = ["absolute", "relative"])]
        mode: String,
        /// folded (`stack a b` lines, difffolded.pl's format) or pprof (a.pb.gz and b.pb.gz).
        #[arg(long, env = "BIMODAL_FORMAT", default_value = "folded", value_parser = ["folded", "pprof"])]
        format: String,
        /// Where to write: a file for folded (default standard output), a directory for pprof
        /// (default the current one).
        #[arg(long, short, env = "BIMODAL_OUTPUT")]
        output: Option<PathBuf>,
    },
    /// Send batches `bimodal-agent run --output-dir` wrote (a node that could not reach the
    /// server, a profile attached to a bug report) through the server's ingest, with the
    /// agent's acks, resends and retry delays. Importing again stores nothing twice.
    Import {
        /// Directories `bimodal-agent run --output-dir` wrote, one per node.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// A file holding the token (instead of --token, which shows in the process list).
        #[arg(long, env = "BIMODAL_TOKEN_FILE", conflicts_with = "token")]
        token_file: Option<PathBuf>,
        /// A client certificate (PEM) for a server that asks for one (it must name the nodes
        /// imported).
        #[arg(long, env = "BIMODAL_CLIENT_CERT", requires = "client_key")]
        client_cert: Option<PathBuf>,
        /// Its private key (PEM).
        #[arg(long, env = "BIMODAL_CLIENT_KEY", requires = "client_cert")]
        client_key: Option<PathBuf>,
    },
    /// Alert rule files (`bimodal-server --rules FILE`).
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
}

#[derive(clap::Subcommand, Debug)]
enum RulesCommand {
    /// Check rule files: every mistake is printed as FILE:LINE:COLUMN: message.
    Check {
        /// The YAML rule files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bimodal: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The HTTP client for `url`: the system's roots for https://, or only the CA of `ca_file`; a CA
/// file with an http:// URL is refused (the token would go in plain text).
fn http_agent(url: &str, ca_file: Option<&std::path::Path>) -> anyhow::Result<ureq::Agent> {
    bimodal_proto::client::plain_only_without_tls(url, ca_file.is_some()).map_err(|e| anyhow::anyhow!(e))?;
    let builder = ureq::AgentBuilder::new().timeout(Duration::from_secs(300));
    let Some(path) = ca_file else {
        return Ok(builder.build());
    };
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read the CA file {}", path.display()))?
    {
        let cert = cert.with_context(|| format!("{} holds a certificate that cannot be read", path.display()))?;
        roots
            .add(cert)
            .with_context(|| format!("{} holds a certificate rustls refuses", path.display()))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(builder.tls_config(std::sync::Arc::new(config)).build())
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let api = Api {
        base: cli.server_url.trim_end_matches('/').to_owned(),
        agent: http_agent(&cli.server_url, cli.ca_file.as_deref())?,
        bearer: bimodal_proto::client::Bearer::new(cli.token.as_deref()).map_err(|e| anyhow::anyhow!(e))?,
    };
    match &cli.command {
        Command::Rules {
            command: RulesCommand::Check { files },
        } => check_rules(files),
        Command::Import {
            dirs,
            token_file,
            client_cert,
            client_key,
        } => {
            use bimodal_proto::client::{ClientIdentity, ServerAddress, Token};
            let server = ServerAddress::new(cli.server_url.clone(), Token::from_flags(token_file, &cli.token))
                .with_ca_file(cli.ca_file.clone())
                .with_identity(ClientIdentity::from_flags(client_cert, client_key));
            let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
            for dir in dirs {
                let sent = runtime.block_on(bimodal_proto::stream::import(dir, &server))?;
                eprintln!(
                    "bimodal: {}: {sent} batches acknowledged by {}",
                    dir.display(),
                    server.url
                );
            }
            Ok(())
        }
        Command::Compare {
            selector,
            range,
            metric,
            a,
            b,
            limit,
            explained_nodes,
            json,
        } => {
            let mut query = vec![("limit", limit.to_string())];
            if let Some(n) = explained_nodes {
                query.push(("explained_nodes", n.clone()));
            }
            match (a, b) {
                (Some(a), Some(b)) => query.extend([("a", a.clone()), ("b", b.clone())]),
                _ => query.push(("selector", selector.clone())),
            }
            if let Some(m) = metric {
                query.push(("metric", m.clone()));
            }
            query.extend(range.query());
            let answer: Value = serde_json::from_slice(&api.get("/api/v1/compare", &query)?)
                .context("the server's answer is not JSON")?;
            let mut out = std::io::stdout().lock();
            if *json {
                writeln!(out, "{answer:#}")?;
            } else {
                write!(out, "{}", compare_text(&answer))?;
            }
            Ok(())
        }
        Command::Diff {
            event,
            source,
            groups,
            selector,
            metric,
            a,
            b,
            range,
            per,
            mode,
            format,
            output,
        } => {
            let mut query = vec![
                ("event", event.clone()),
                ("per", per.clone()),
                ("mode", mode.clone()),
                ("format", format.clone()),
            ];
            if let Some(s) = source {
                query.push(("source", s.clone()));
            }
            match (groups, a, b) {
                (Some(g), _, _) => {
                    query.extend([("groups", g.clone()), ("selector", selector.clone())]);
                    if let Some(m) = metric {
                        query.push(("metric", m.clone()));
                    }
                }
                (None, Some(a), Some(b)) => query.extend([("a", a.clone()), ("b", b.clone())]),
                _ => bail!("give --groups bands, or both --a and --b"),
            }
            query.extend(range.query());
            if format == "folded" {
                let body = api.get("/api/v1/diff", &query)?;
                match output {
                    Some(path) => {
                        std::fs::write(path, &body).with_context(|| format!("failed to write {}", path.display()))?
                    }
                    None => std::io::stdout().lock().write_all(&body)?,
                }
                return Ok(());
            }
            let dir = output.clone().unwrap_or_else(|| PathBuf::from("."));
            std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
            for side in ["a", "b"] {
                let mut q = query.clone();
                q.push(("side", side.to_owned()));
                let body = api.get("/api/v1/diff", &q)?;
                let path = dir.join(format!("{side}.pb.gz"));
                std::fs::write(&path, body).with_context(|| format!("failed to write {}", path.display()))?;
                eprintln!("bimodal: wrote {}", path.display());
            }
            eprintln!(
                "bimodal: compare with: go tool pprof -diff_base={} {}",
                dir.join("a.pb.gz").display(),
                dir.join("b.pb.gz").display()
            );
            Ok(())
        }
    }
}

struct Api {
    base: String,
    agent: ureq::Agent,
    bearer: bimodal_proto::client::Bearer,
}

impl Api {
    /// GET `path?query`; the body, or the server's error message.
    fn get(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Vec<u8>> {
        let url = format!("{}{path}", self.base);
        let mut request = self.agent.get(&url);
        if let Some(header) = self.bearer.header() {
            request = request.set("Authorization", header);
        }
        for (k, v) in query {
            request = request.query(k, v);
        }
        let response = match request.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let body = r.into_string().unwrap_or_default();
                let message = serde_json::from_str::<Value>(&body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned))
                    .unwrap_or(body);
                bail!("the server answered {code}: {message}");
            }
            Err(e) => bail!("cannot reach the server at {}: {e}", self.base),
        };
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut response.into_reader(), &mut body).context("the server's answer was cut")?;
        Ok(body)
    }
}

/// A number as people read it: thousands separated, two decimals below 100.
fn number(v: f64) -> String {
    if v.abs() >= 100.0 {
        let digits = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if v < 0.0 {
            out.insert(0, '-');
        }
        out
    } else if v.abs() >= 0.01 || v == 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.2e}")
    }
}

fn names(v: &Value) -> String {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The compare answer as text: the verdict, the bands, labels, code, then every metric.
fn compare_text(a: &Value) -> String {
    let mut s = String::new();
    let mut line = |text: String| {
        s.push_str(&text);
        s.push('\n');
    };
    let given = &a["groups"];
    if given.is_object() {
        for key in ["a", "b"] {
            line(format!(
                "group {key}, {}: {}",
                given[key]["selector"].as_str().unwrap_or(""),
                names(&given[key]["nodes"])
            ));
        }
        line(format!(
            "from {} to {}",
            a["from"].as_str().unwrap_or(""),
            a["to"].as_str().unwrap_or("")
        ));
    } else {
        line(format!(
            "{} nodes matching {} from {} to {}",
            a["nodes"].as_array().map_or(0, Vec::len),
            a["selector"].as_str().unwrap_or(""),
            a["from"].as_str().unwrap_or(""),
            a["to"].as_str().unwrap_or("")
        ));
    }
    line(a["verdict"].as_str().unwrap_or("").to_owned());
    let bands = &a["bands"];
    if !bands.is_null() {
        let slow = bands["slow"].as_str();
        for band in ["high", "low"] {
            let tag = match slow {
                Some(s) if s == band => " (slow)",
                Some(_) => " (fast)",
                None => "",
            };
            line(format!(
                "  {band} band{tag}, median {} {}: {}",
                number(bands[format!("{band}_median")].as_f64().unwrap_or(0.0)),
                bands["unit"].as_str().unwrap_or(""),
                names(&bands[band])
            ));
        }
        line(format!(
            "  separation {:.1} robust SDs, p = {:.4} (each metric held to {:.4}){}",
            bands["separation"].as_f64().unwrap_or(0.0),
            bands["p_value"].as_f64().unwrap_or(1.0),
            a["alpha_per_metric"].as_f64().unwrap_or(0.0),
            match bands["null"].as_str() {
                Some("own_shape") =>
                    ", against fleets drawn from this fleet's own shape smoothed to one mode".to_string(),
                Some(tail) if tail != "normal" =>
                    format!(", against one-band fleets with {tail} tails, as heavy as this fleet's"),
                _ => String::new(),
            }
        ));
        let previous = &bands["previous_window"];
        let changed = previous["changed"].as_array().cloned().unwrap_or_default();
        if previous["found"] == true {
            if changed.is_empty() {
                line("  no node changed band since the previous window".into());
            }
            for c in changed {
                line(format!(
                    "  {} moved to the {} band (was {})",
                    c["node"].as_str().unwrap_or(""),
                    c["now"].as_str().unwrap_or(""),
                    c["before"].as_str().unwrap_or("in none")
                ));
            }
        } else {
            line(format!(
                "  previous window: no bands ({})",
                previous["reason"].as_str().unwrap_or("no data")
            ));
        }
        let within = &bands["within_window"];
        for m in within["moved"].as_array().cloned().unwrap_or_default() {
            line(format!(
                "  {} changed band half-way through: {} band in the first half ({}), {} band in the second ({})",
                m["node"].as_str().unwrap_or(""),
                m["first_band"].as_str().unwrap_or(""),
                number(m["first"].as_f64().unwrap_or(0.0)),
                m["second_band"].as_str().unwrap_or(""),
                number(m["second"].as_f64().unwrap_or(0.0)),
            ));
        }
        if let Some(reason) = within["reason"].as_str() {
            line(format!("  within the window: {reason}"));
        }
    }
    if !a["explanation"].is_null() {
        // Band names, or the given groups' (the API's `low` is `a`, `high` is `b`).
        let (low, high, between) = if given.is_object() {
            ("group a", "group b", "the groups")
        } else {
            ("low-band", "high-band", "the bands")
        };
        let labels = a["explanation"]["labels"].as_array().cloned().unwrap_or_default();
        if !labels.is_empty() {
            line(String::new());
            line(format!("labels and facts that split {between} (Fisher's exact test):"));
        }
        for l in labels.iter().take(5) {
            line(format!(
                "  {}=\"{}\": {} of {} {high} nodes, {} of {} {low} nodes, p = {:.4}",
                l["label"].as_str().unwrap_or(""),
                l["value"].as_str().unwrap_or(""),
                l["high_with"],
                l["high_nodes"],
                l["low_with"],
                l["low_nodes"],
                l["p_value"].as_f64().unwrap_or(1.0)
            ));
        }
        let placement = a["explanation"]["placement"].as_array().cloned().unwrap_or_default();
        if !placement.is_empty() {
            line(String::new());
            line(format!("memory placement that splits {between}:"));
        }
        for f in placement.iter().take(5) {
            line(format!(
                "  {}: {} of {} {high} nodes, {} of {} {low} nodes, p = {:.4}",
                f["finding"].as_str().unwrap_or(""),
                f["high_with"],
                f["high_nodes"],
                f["low_with"],
                f["low_nodes"],
                f["p_value"].as_f64().unwrap_or(1.0)
            ));
            line(format!("    e.g. {}", f["example"].as_str().unwrap_or("")));
        }
        // Functions and data objects are read over a sample of a band larger than the server
        // reads whole.
        let read = &a["explanation"]["nodes"];
        let count = |v: &Value| v.as_array().map_or(0, Vec::len);
        let groups = match given.is_object() {
            true => [&given["a"]["nodes"], &given["b"]["nodes"]],
            false => [&bands["low"], &bands["high"]],
        };
        let said: Vec<String> = [(low, &read["low"], groups[0]), (high, &read["high"], groups[1])]
            .into_iter()
            .filter(|(_, read, of)| count(read) < count(of))
            .map(|(name, read, of)| format!("{} of the {} {name} nodes", count(read), count(of)))
            .collect();
        if !said.is_empty() {
            line(String::new());
            line(format!(
                "functions and data objects are compared over {} (the same nodes every time)",
                said.join(" and ")
            ));
        }
        let data = a["explanation"]["data"].as_array().cloned().unwrap_or_default();
        if !data.is_empty() {
            line(String::new());
            line("data objects that differ, per node (where sampled data addresses fell):".into());
        }
        for d in &data {
            line(format!(
                "  {:<12} {}: {} → {} {}, effect {:+.2}, p = {:.4}",
                d["event"].as_str().unwrap_or(""),
                d["object"].as_str().unwrap_or(""),
                number(d["low_median"].as_f64().unwrap_or(0.0)),
                number(d["high_median"].as_f64().unwrap_or(0.0)),
                d["unit"].as_str().unwrap_or(""),
                d["effect"].as_f64().unwrap_or(0.0),
                d["p_value"].as_f64().unwrap_or(1.0)
            ));
        }
        let code = a["explanation"]["code"].as_array().cloned().unwrap_or_default();
        line(String::new());
        if code.is_empty() {
            line(format!("no function differs consistently between {between}"));
        } else {
            let medians = if given.is_object() { "a → b" } else { "low → high" };
            line(format!(
                "functions that differ, per node (medians {medians}; effect: rank-biserial over nodes):"
            ));
            let held = &a["explanation"]["held_out"];
            if let Some(event) = held["event"].as_str() {
                let summary = &held["summary"];
                line(format!(
                    "  {event} made the values the bands were cut on: its functions are tested again on the half of \
                     the window that did not cut them ({} of {} confirmed held out)",
                    summary["confirmed"], summary["tested"]
                ));
            }
        }
        for c in &code {
            let held_out = &c["held_out"];
            let held = match (held_out["p_value"].as_f64(), held_out["q_value"].as_f64()) {
                (Some(p), Some(q)) if held_out["confirmed"] == true => format!(", held out p = {p:.4}, q = {q:.4}"),
                (Some(p), Some(q)) => format!(", held out p = {p:.4}, q = {q:.4}: not confirmed"),
                _ => String::new(),
            };
            line(format!(
                "  {:<12} {} ({}): {} → {} {}, effect {:+.2}, p = {:.4}, q = {:.4}{held}",
                c["event"].as_str().unwrap_or(""),
                c["function"].as_str().unwrap_or(""),
                if c["measure"] == "self_value" { "self" } else { "total" },
                number(c["low_median"].as_f64().unwrap_or(0.0)),
                number(c["high_median"].as_f64().unwrap_or(0.0)),
                c["unit"].as_str().unwrap_or(""),
                c["effect"].as_f64().unwrap_or(0.0),
                c["p_value"].as_f64().unwrap_or(1.0),
                c["q_value"].as_f64().unwrap_or(1.0)
            ));
        }
    }
    line(String::new());
    line("metrics:".into());
    for m in a["metrics"].as_array().cloned().unwrap_or_default() {
        let verdict = if given.is_object() {
            format!(
                "{} in a → {} in b ({} and {} nodes), effect {:+.2}, p = {:.4}",
                number(m["low_median"].as_f64().unwrap_or(0.0)),
                number(m["high_median"].as_f64().unwrap_or(0.0)),
                m["low_nodes"],
                m["high_nodes"],
                m["effect"].as_f64().unwrap_or(0.0),
                m["p_value"].as_f64().unwrap_or(1.0)
            )
        } else {
            let b = &m["bands"];
            if b["found"] == true {
                format!(
                    "two bands, {} and {} nodes, p = {:.4}",
                    b["low"].as_array().map_or(0, Vec::len),
                    b["high"].as_array().map_or(0, Vec::len),
                    b["p_value"].as_f64().unwrap_or(1.0)
                )
            } else {
                format!("no bands: {}", b["reason"].as_str().unwrap_or(""))
            }
        };
        line(format!(
            "  {} ({}): {verdict}",
            m["name"].as_str().unwrap_or(""),
            m["unit"].as_str().unwrap_or("")
        ));
    }
    s
}

/// Checks each rule file, printing a summary of the good ones and every mistake of the others.
fn check_rules(files: &[PathBuf]) -> anyhow::Result<()> {
    let mut bad = 0;
    for file in files {
        match bimodal_server::alerts::rules::load(file) {
            Ok(rules) => println!(
                "{}: {} rules, evaluated every {}",
                file.display(),
                rules.rules.len(),
                humantime::format_duration(rules.evaluation_interval)
            ),
            Err(mistakes) => {
                eprintln!("{mistakes}");
                bad += 1;
            }
        }
    }
    match bad {
        0 => Ok(()),
        n => bail!("{n} of {} rule files have mistakes", files.len()),
    }
}
