//! Which tables serve a read, and in which pieces: the range planner. Per-minute tables for
//! short ranges and the edges of long ones, per-10-minute tables for whole buckets inside a range
//! of [`COARSE_FROM_SECS`] or more, the fleet rollups for every node or most of them, tables
//! keyed by node or by hour or by function as the read's shape makes cheaper. Decisions only:
//! the SQL is built by [`queries`](super::queries).

use super::NodesRead;

/// Ranges at least this long read whole 10-minute buckets from the coarse tables.
pub const COARSE_FROM_SECS: u32 = 30 * 60;
pub(super) const MINUTE: u32 = 60;
pub(super) const TEN_MINUTES: u32 = 600;
pub(super) const HOUR: u32 = 3600;

/// Which nodes' samples a read sums, and from which tables. Node lists are sent as literal
/// lists (`select::Nodes`): ClickHouse 18.16 uses the primary key for
/// `node IN (…)` but not for `IN (SELECT …)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Every node, from the fleet rollups.
    Fleet,
    /// Every node, from the per-node tables (a range the rollups do not wholly hold).
    EveryNode,
    /// These nodes (those the selector matches), from the per-node tables.
    Matching(Vec<String>),
    /// The fleet rollups minus these nodes (those the selector does not match): cheaper than
    /// [`Reach::Matching`] when the selector matches most of the fleet.
    FleetMinus(Vec<String>),
    /// No node matches.
    Nothing,
}

impl Reach {
    /// The cheapest way to read the nodes a selector matches, given every known node with
    /// whether it matches (`None`: the selector has no node matchers) and whether the fleet
    /// rollups hold the whole range.
    pub fn choose(nodes: Option<Vec<(String, bool)>>, rollups_hold_range: bool) -> Reach {
        let Some(nodes) = nodes else {
            return match rollups_hold_range {
                true => Reach::Fleet,
                false => Reach::EveryNode,
            };
        };
        let (matching, rest): (Vec<_>, Vec<_>) = nodes.into_iter().partition(|(_, m)| *m);
        let names = |v: Vec<(String, bool)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        match (matching.len(), rest.len(), rollups_hold_range) {
            (0, _, _) => Reach::Nothing,
            (_, 0, true) => Reach::Fleet,
            (_, 0, false) => Reach::EveryNode,
            (m, r, true) if r < m => Reach::FleetMinus(names(rest)),
            _ => Reach::Matching(names(matching)),
        }
    }

    /// How answers name it.
    pub fn name(&self) -> &'static str {
        match self {
            Reach::Fleet => "fleet",
            Reach::EveryNode => "every-node",
            Reach::Matching(_) => "matching",
            Reach::FleetMinus(_) => "fleet-minus",
            Reach::Nothing => "nothing",
        }
    }
}

/// The first second a read of a range starting at `from` covers: a minute bucket holds samples
/// taken in [time, time + 60), and reads take whole minutes. A rollup that is complete from some
/// time on may serve a range only if this is not before that time.
pub(super) fn first_read(from: u32) -> u32 {
    from / MINUTE * MINUTE
}

/// The pieces of [from, to) to read: (table suffix, from, to), per-minute buckets at the edges
/// and 10-minute buckets inside when the range is long.
pub(super) fn pieces(from: u32, to: u32) -> Vec<(&'static str, u32, u32)> {
    let from = first_read(from);
    let coarse_from = from.div_ceil(TEN_MINUTES) * TEN_MINUTES;
    let coarse_to = to / TEN_MINUTES * TEN_MINUTES;
    if to - from < COARSE_FROM_SECS || coarse_to <= coarse_from {
        return vec![("", from, to)];
    }
    let mut out = Vec::new();
    if from < coarse_from {
        out.push(("", from, coarse_from));
    }
    out.push(("_10m", coarse_from, coarse_to));
    if coarse_to < to {
        out.push(("", coarse_to, to));
    }
    out
}

/// [from, to) widened to the buckets its reads use: whole 10-minute buckets for a range of
/// [`COARSE_FROM_SECS`] or more, whole minutes below. A read over many nodes then never reads
/// the per-minute tables at its edges, where every function of every node is a row.
pub fn whole_buckets(from: u32, to: u32) -> (u32, u32) {
    let step = bucket_of(to.saturating_sub(from));
    (from / step * step, to.div_ceil(step).saturating_mul(step))
}

/// The bucket a read of `span` seconds takes whole: 10 minutes from [`COARSE_FROM_SECS`], a
/// minute below.
fn bucket_of(span: u32) -> u32 {
    match span >= COARSE_FROM_SECS {
        true => TEN_MINUTES,
        false => MINUTE,
    }
}

/// Where a window of whole buckets ([`whole_buckets`]) divides into two halves of whole
/// buckets each: the last bucket boundary at or before its middle, each half read as whole buckets of its
/// own length (a half of [`COARSE_FROM_SECS`] or more in 10-minute buckets). `None` when the
/// window is one bucket.
pub fn half_way(from: u32, to: u32) -> Option<u32> {
    let half = to.saturating_sub(from) / 2;
    let step = bucket_of(half);
    let mid = (from + half) / step * step;
    (mid > from && mid < to).then_some(mid)
}

/// Whether per-node totals over [from, to) are best read from `node_totals_by_hour` (keyed by
/// the hour, then the node) rather than `node_totals` (keyed by the node): every node's minutes
/// of an hour lie together in the first, a node's minutes of a day in the second. A few nodes
/// over many hours are read from the second, everything else from the first.
pub(super) fn totals_by_hour(reach: &Reach, from: u32, to: u32) -> bool {
    match reach {
        Reach::Matching(nodes) => {
            let hours = to.div_ceil(HOUR).saturating_sub(from / HOUR);
            nodes.len() as u64 >= u64::from(hours)
        }
        _ => true,
    }
}

/// How many times its rows of a fleet's largest functions (in `function_nodes_by_id_10m`,
/// ordered by function and time) a node's rows of every function (in `function_samples_10m`,
/// ordered by node) are, about: 21 K against 1.4 K per node and hour at 1,000 nodes and 200
/// functions (design 029). Rows of the first also cost less each (numbers, not names).
const NODE_ORDERED_RATIO: usize = 15;

/// Whether a per-node function read of `read` over `reach` reads `function_nodes_by_id_10m`
/// (every node's rows of the functions read) rather than `function_samples_10m` (every
/// function's rows of the nodes read), given that the first holds the range: a few nodes' rows
/// lie together in the second; a fleet's, or a sample of more than a fifteenth of it, cost
/// less in the first.
pub(super) fn read_by_function(reach: &Reach, read: NodesRead) -> bool {
    match (reach, read) {
        (Reach::Matching(_) | Reach::Nothing, _) => false,
        (_, NodesRead::Every) => true,
        (_, NodesRead::Sample { nodes, of }) => nodes.len() * NODE_ORDERED_RATIO >= of,
    }
}

/// The first second the sources of a range starting at `from` are read from: batches that
/// started up to 10 minutes before it may cover it. `node_sources` holds whole 10-minute
/// buckets: its read takes the bucket before `from`'s, up to 10 minutes more than the ledger's.
pub(super) fn sources_from(from: u32, rolled_up: bool) -> u32 {
    match rolled_up {
        true => (from / TEN_MINUTES * TEN_MINUTES).saturating_sub(TEN_MINUTES),
        false => from.saturating_sub(TEN_MINUTES),
    }
}

/// Which tables hold the node counters of a range, by where the range starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CounterTables {
    /// `counters` alone, per agent interval: before its per-minute rollups held every counter.
    Intervals,
    /// `counters` and its rollups `counters_1m`, `counters_10m`, which lose zeros as parts
    /// merge.
    Rollups,
    /// `counter_reports` and its rollups `counter_reports_1m`, `counter_reports_10m`, which
    /// keep them (migration 017).
    Reports,
}

impl CounterTables {
    /// The table of every agent interval's counters.
    pub(super) fn per_interval(self) -> &'static str {
        match self {
            CounterTables::Reports => "counter_reports",
            _ => "counters",
        }
    }
}

/// The tables and ranges a sum of counters over [from, to) reads: the 10-minute rollup for
/// whole 10-minute buckets and the per-minute one for the minutes at the edges once `tables`
/// has rollups (whole minutes, as the sample reads: from the minute `from` lies in to the end of
/// the one `to` lies in), else the per-interval table over exactly [from, to).
pub(super) fn counter_pieces(from: u32, to: u32, tables: CounterTables) -> Vec<(&'static str, u32, u32)> {
    let (minutes, ten_minutes) = match tables {
        CounterTables::Intervals => return vec![("counters", from, to)],
        CounterTables::Rollups => ("counters_1m", "counters_10m"),
        CounterTables::Reports => ("counter_reports_1m", "counter_reports_10m"),
    };
    pieces(from, to)
        .into_iter()
        .map(|(suffix, from, to)| match suffix {
            "" => (minutes, from, to),
            _ => (ten_minutes, from, to),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every node reads the rollups; most of them the rollups minus the rest; a few of them, or
    /// a range the rollups do not hold, the per-node tables.
    #[test]
    fn reach_picks_the_smaller_read() {
        let fleet = |matching: usize| -> Option<Vec<(String, bool)>> {
            Some((0..10).map(|i| (format!("n{i}"), i < matching)).collect())
        };
        let names = |r: std::ops::Range<usize>| r.map(|i| format!("n{i}")).collect::<Vec<_>>();
        assert_eq!(Reach::choose(None, true), Reach::Fleet);
        assert_eq!(Reach::choose(None, false), Reach::EveryNode);
        assert_eq!(Reach::choose(fleet(0), true), Reach::Nothing);
        assert_eq!(Reach::choose(fleet(10), true), Reach::Fleet);
        assert_eq!(Reach::choose(fleet(10), false), Reach::EveryNode);
        assert_eq!(Reach::choose(fleet(9), true), Reach::FleetMinus(names(9..10)));
        assert_eq!(Reach::choose(fleet(9), false), Reach::Matching(names(0..9)));
        assert_eq!(Reach::choose(fleet(5), true), Reach::Matching(names(0..5)));
        assert_eq!(Reach::choose(fleet(1), true), Reach::Matching(names(0..1)));
    }

    /// A window splits at the last bucket boundary before its middle, each half of whole buckets of
    /// its own length; one bucket does not split.
    #[test]
    fn a_window_splits_into_halves_of_whole_buckets() {
        assert_eq!(half_way(600, 720), Some(660));
        assert_eq!(
            half_way(600, 780),
            Some(660),
            "three minutes: the last minute before the middle"
        );
        assert_eq!(half_way(600, 660), None);
        // An hour: two halves of 30 minutes, in 10-minute buckets.
        assert_eq!(half_way(3600, 7200), Some(5400));
        assert_eq!(half_way(5400 / 600 * 600, 5400 / 600 * 600 + 2 * 3600), Some(9000));
    }

    /// An hour or more widens to whole 10-minute buckets and then reads no per-minute table;
    /// shorter ranges widen to whole minutes.
    #[test]
    fn whole_buckets_leave_no_minute_edges() {
        let (from, to) = whole_buckets(1_795_000_123, 1_795_003_723);
        assert_eq!((from, to), (1_794_999_600, 1_795_003_800));
        assert_eq!(pieces(from, to), vec![("_10m", from, to)]);
        assert_eq!(
            whole_buckets(1_794_999_600, 1_795_003_200),
            (1_794_999_600, 1_795_003_200)
        );
        assert_eq!(
            whole_buckets(1_795_000_059, 1_795_000_301),
            (1_795_000_020, 1_795_000_320)
        );
    }

    /// Counters: whole 10-minute buckets from the 10-minute rollup, the edges' whole minutes
    /// from the per-minute one; before the rollups, exactly the range from the per-interval
    /// table.
    #[test]
    fn counters_are_read_in_the_pieces_of_the_sample_reads() {
        assert_eq!(
            counter_pieces(1_795_000_030, 1_795_003_630, CounterTables::Rollups),
            vec![
                ("counters_1m", 1_795_000_020, 1_795_000_200),
                ("counters_10m", 1_795_000_200, 1_795_003_200),
                ("counters_1m", 1_795_003_200, 1_795_003_630),
            ]
        );
        assert_eq!(
            counter_pieces(1_795_000_030, 1_795_000_330, CounterTables::Rollups),
            vec![("counters_1m", 1_795_000_020, 1_795_000_330)]
        );
        assert_eq!(
            counter_pieces(1_795_000_030, 1_795_003_630, CounterTables::Intervals),
            vec![("counters", 1_795_000_030, 1_795_003_630)]
        );
        assert_eq!(
            counter_pieces(1_795_000_030, 1_795_003_630, CounterTables::Reports),
            vec![
                ("counter_reports_1m", 1_795_000_020, 1_795_000_200),
                ("counter_reports_10m", 1_795_000_200, 1_795_003_200),
                ("counter_reports_1m", 1_795_003_200, 1_795_003_630),
            ]
        );
    }

    /// Sources: from the 10-minute bucket before `from`'s (the ledger: 10 minutes before it).
    #[test]
    fn sources_are_read_from_ten_minutes_before_the_range() {
        assert_eq!(sources_from(1_795_000_030, true), 1_794_999_000);
        assert_eq!(sources_from(1_794_999_600, true), 1_794_999_000);
        assert_eq!(sources_from(1_795_000_030, false), 1_794_999_430);
        assert_eq!(sources_from(30, true), 0);
    }

    /// Short ranges read minutes only; long ones whole 10-minute buckets in the middle.
    #[test]
    fn ranges_split_into_minute_edges_and_coarse_middles() {
        assert_eq!(pieces(1_000_030, 1_000_900), [("", 1_000_020, 1_000_900)]);
        let p = pieces(1_795_000_030, 1_795_003_630);
        assert_eq!(
            p,
            [
                ("", 1_795_000_020, 1_795_000_200),
                ("_10m", 1_795_000_200, 1_795_003_200),
                ("", 1_795_003_200, 1_795_003_630)
            ]
        );
        let aligned = pieces(1_795_000_200, 1_795_003_800);
        assert_eq!(aligned, [("_10m", 1_795_000_200, 1_795_003_800)]);
    }

    /// A few nodes over many hours read the table keyed by node; the rest the one keyed by hour.
    #[test]
    fn totals_of_few_nodes_over_long_ranges_are_read_by_node() {
        let nodes = |n: usize| Reach::Matching((0..n).map(|i| format!("n{i}")).collect());
        let hour = 1_795_000_000 / HOUR * HOUR;
        assert!(totals_by_hour(&Reach::Fleet, hour, hour + 7 * 24 * HOUR));
        assert!(totals_by_hour(
            &Reach::FleetMinus(vec!["n1".into()]),
            hour,
            hour + 7 * 24 * HOUR
        ));
        assert!(totals_by_hour(&nodes(1), hour, hour + HOUR));
        assert!(!totals_by_hour(&nodes(1), hour + 1, hour + HOUR + 1), "spans two hours");
        assert!(totals_by_hour(&nodes(100), hour, hour + 24 * HOUR));
        assert!(!totals_by_hour(&nodes(10), hour, hour + 24 * HOUR));
    }

    /// A fleet's per-node function values, or a sample of more than a fifteenth of it, are read
    /// from the table ordered by function; a few nodes' from the one ordered by node.
    #[test]
    fn samples_of_a_fleet_are_read_by_function() {
        let names: Vec<String> = (0..200).map(|i| format!("web-{i}")).collect();
        let sampled = |n: usize, of: usize| NodesRead::Sample { nodes: &names[..n], of };
        assert!(read_by_function(&Reach::Fleet, NodesRead::Every));
        assert!(read_by_function(&Reach::Fleet, sampled(200, 1_000)));
        assert!(read_by_function(&Reach::FleetMinus(vec![]), sampled(200, 3_000)));
        assert!(!read_by_function(&Reach::Fleet, sampled(200, 3_001)));
        assert!(!read_by_function(&Reach::EveryNode, sampled(200, 10_000)));
        assert!(!read_by_function(&Reach::Matching(vec![]), NodesRead::Every));
    }
}
