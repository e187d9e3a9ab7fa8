// Client of the JSON API described in docs/design/001-http-api.md.

import { escapeRegex, formatSelector } from './selector';

export type FrameKind = 'root' | 'process' | 'user' | 'kernel' | 'jit' | 'unknown';

export interface ApiFrame {
  name: string;
  kind: FrameKind;
  module?: string;
  /** Hex build id of the module; `several` when the frame merges builds of it. */
  build_id?: string;
  value: number;
  children?: ApiFrame[];
}

export interface ApiNode {
  node: string;
  labels?: Record<string, string>;
  last_seen?: string;
  first_seen?: string;
  agent_version?: string;
  /** What the node's agent read of its hardware and kernel (proto NodeFacts); null when unknown. */
  facts?: ApiFacts | null;
}

/** One NUMA node of `ApiFacts`. */
export interface ApiNumaNode {
  id: number;
  cpus: number[];
  memory_bytes: number;
  /** Distances to every node, in node id order (the kernel's `distance` row). */
  distances: number[];
}

/** The source an agent chose for one event kind, and why better candidates were rejected. */
export interface ApiEventSource {
  /** Empty when no source works on the node. */
  source: string;
  encoding: string;
  /** "perf_event", "fentry", "kprobe", "raw_tracepoint". */
  attach: string;
  data_address: boolean;
  /** "candidate: reason" for every better candidate rejected. */
  rejected: string[];
  /**
   * How the source's user stacks are unwound: "kernel_tables", "stack_copies", "frame_pointers"
   * (callers of code built without frame pointers are lost); empty from agents that do not say.
   */
  unwinding: string;
  /** Why the unwinding is less than the agent was asked for; empty when it is not. */
  unwinding_reduced: string;
}

/** A node's facts as `/api/v1/nodes` answers them (proto/bimodal/v1/facts.proto). */
export interface ApiFacts {
  kernel_release: string;
  cpu: { vendor: string; model_name: string; family: number; model: number };
  online_cpus: number;
  sockets: number;
  cores: number;
  threads_per_core: number;
  numa_nodes: ApiNumaNode[];
  /** The CPUs sharing each L3 cache. */
  l3_domains: number[][];
  /** `numa_node` -1: no NUMA affinity. */
  nics: { name: string; numa_node: number }[];
  /** "disabled", "normal", "memory_tiering", or empty when the kernel has no NUMA balancing. */
  numa_balancing: string;
  transparent_hugepages: string;
  /** Empty when the kernel exposes no hardware PMU. */
  hardware_pmu: string;
  /** By event kind (`cpu`, `page_fault`, …). */
  event_sources: Record<string, ApiEventSource>;
  /** The weakest unwinding of the node's event kinds (its `unwinding` label); null: not said. */
  unwinding: string | null;
  /** Event kinds whose unwinding is less than asked for, with why. */
  unwinding_reduced: Record<string, string>;
}

export interface ApiEvent {
  name: string;
  unit: string;
}

export interface ApiFlamegraph {
  event: string;
  /** The one source shown (samples of different sources are never added), and the others. */
  source: string;
  sources: { source: string; samples: number; value: number }[];
  unit: string;
  /** The selector the graph covers, in Prometheus matcher syntax; `{}` is every node. */
  selector: string;
  from: string;
  to: string;
  /** The source's value over the range, the stacks left out included. */
  total: number;
  /** The smallest stacks left out beyond `max_stacks`, exactly, with their samples and value
   * (`root` holds `total - truncated_value`). Absent in profiles not from the server. */
  truncated_stacks?: number;
  truncated_samples?: number;
  truncated_value?: number;
  root: ApiFrame;
}

/** An error answered by the server (`{"error": "…"}`) or a failure to reach it. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

// Relative to the page so the UI also works when served under a path prefix.
const API_BASE = 'api/v1/';

/** Where this browser keeps the API token of a server that has tokens (`--token-file`). */
const TOKEN_KEY = 'bimodal.token';

function storedToken(): string | null {
  try {
    return localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** One question for every request refused at once. */
let asking: Promise<string | null> | null = null;

/**
 * Asks for a token with the `read` scope (the server refused `rejected`, or had none); keeps it in
 * this browser for the next pages. `null` when the user declines.
 */
function askToken(why: string): Promise<string | null> {
  asking ??= new Promise<string | null>((resolve) => {
    const answer = window.prompt(`${why}\n\nPaste a token with the read scope (kept in this browser):`);
    const token = answer?.trim() ?? '';
    if (token) {
      try {
        localStorage.setItem(TOKEN_KEY, token);
      } catch {
        // Storage refused: the token serves this page only.
      }
    }
    resolve(token || null);
  }).finally(() => {
    setTimeout(() => (asking = null), 0);
  });
  return asking;
}

async function fetchWithToken(url: string, token: string | null, signal?: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    return await fetch(url, { headers, ...(signal ? { signal } : {}) });
  } catch (err) {
    if (err instanceof DOMException && err.name === 'AbortError') throw err;
    throw new ApiError(`cannot reach the server (${err instanceof Error ? err.message : String(err)})`, 0);
  }
}

/** Times a request refused for the moment (429: beyond this reader's rate; 503: the server is busy) is asked again. */
const RETRIES = 3;
/** The longest wait for a retry, whatever the server's Retry-After says. */
const MAX_RETRY_WAIT_S = 30;

/** Resolves after `seconds`, or rejects with the abort when `signal` aborts first. */
function sleep(seconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, seconds * 1000);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** `url` with the stored token; a request the server refused for the moment is asked again after its Retry-After. */
async function fetchRetrying(url: string, token: string | null, signal?: AbortSignal): Promise<Response> {
  let resp = await fetchWithToken(url, token, signal);
  for (let retry = 0; retry < RETRIES && (resp.status === 429 || resp.status === 503); retry++) {
    const after = Number(resp.headers.get('Retry-After'));
    if (!Number.isFinite(after) || after <= 0 || after > MAX_RETRY_WAIT_S) break;
    await sleep(after, signal);
    resp = await fetchWithToken(url, token, signal);
  }
  return resp;
}

async function getJson(path: string, params: URLSearchParams | null, signal?: AbortSignal): Promise<unknown> {
  const url = API_BASE + path + (params && params.size > 0 ? `?${params.toString()}` : '');
  let resp = await fetchRetrying(url, storedToken(), signal);
  // A server with tokens: ask once for one that may read, then try again.
  if (resp.status === 401 || resp.status === 403) {
    const why = resp.status === 401 ? 'This bimodal server needs a token.' : 'This token may not read from this server.';
    const token = await askToken(why);
    if (token) resp = await fetchRetrying(url, token, signal);
  }
  const text = await resp.text();
  let body: unknown = undefined;
  try {
    body = text === '' ? undefined : JSON.parse(text);
  } catch {
    // Not JSON: fall through with the raw text.
  }
  if (!resp.ok) {
    const serverError =
      typeof body === 'object' && body !== null && typeof (body as { error?: unknown }).error === 'string'
        ? (body as { error: string }).error
        : text.trim().slice(0, 300) || resp.statusText;
    throw new ApiError(serverError, resp.status);
  }
  if (body === undefined) throw new ApiError(`GET ${url}: the answer is not JSON`, resp.status);
  return body;
}

/** The first page of `/api/v1/nodes` (the server's page: 5,000 nodes by name) and how many
 *  nodes match in all. */
export interface ApiNodePage {
  nodes: ApiNode[];
  total: number;
}

function nodePage(body: unknown): ApiNodePage {
  const b = body as { nodes?: ApiNode[]; total?: number };
  const nodes = Array.isArray(b.nodes) ? b.nodes : [];
  return { nodes, total: typeof b.total === 'number' ? b.total : nodes.length };
}

/** Nodes seen in the last day (`selector`: those it matches). */
export async function fetchNodes(signal?: AbortSignal, selector?: string): Promise<ApiNodePage> {
  const params = selector === undefined ? null : new URLSearchParams({ selector });
  return nodePage(await getJson('nodes', params, signal));
}

/** `page` with `node` in it when it is not (a node named in a link, past the first page). */
export async function withNode(page: Promise<ApiNodePage>, node: string, signal?: AbortSignal): Promise<ApiNodePage> {
  const first = await page;
  if (node === '' || first.nodes.some((n) => n.node === node)) return first;
  const one = await fetchNodes(signal, nodeSelector([node]));
  return { nodes: [...first.nodes, ...one.nodes], total: first.total };
}

/** A disabled option saying how many nodes a picker does not list (none when it lists all). */
export function moreNodesOption(listed: number, total: number): HTMLOptionElement[] {
  if (total <= listed) return [];
  const o = new Option(`… ${total - listed} more nodes, not listed`, '');
  o.disabled = true;
  return [o];
}

/** Nodes matching `selector` that reported in [from, to), with their labels and facts. */
export async function fetchNodesIn(selector: string, from: number, to: number, signal?: AbortSignal): Promise<ApiNodePage> {
  const params = new URLSearchParams({ selector, from: String(from), to: String(to) });
  return nodePage(await getJson('nodes', params, signal));
}

export async function fetchEvents(signal?: AbortSignal): Promise<ApiEvent[]> {
  const body = (await getJson('events', null, signal)) as { events?: ApiEvent[] };
  return Array.isArray(body.events) ? body.events : [];
}

export interface FlamegraphQuery {
  event: string;
  /** Unix seconds. */
  from: number;
  /** Unix seconds. */
  to: number;
  /** Empty means every node. */
  nodes: string[];
}

/** A selector (Prometheus label matchers) for exactly these nodes. */
export function nodeSelector(nodes: string[]): string {
  if (nodes.length === 1) return formatSelector([{ name: 'node', op: '=', value: nodes[0] ?? '' }]);
  return formatSelector([{ name: 'node', op: '=~', value: nodes.map(escapeRegex).join('|') }]);
}

export async function fetchFlamegraph(q: FlamegraphQuery, signal?: AbortSignal): Promise<ApiFlamegraph> {
  const params = new URLSearchParams({ event: q.event, from: String(q.from), to: String(q.to), format: 'json' });
  if (q.nodes.length > 0) params.set('selector', nodeSelector(q.nodes));
  const body = (await getJson('flamegraph', params, signal)) as Partial<ApiFlamegraph>;
  if (typeof body.root !== 'object') throw new ApiError('the flame graph answer has no "root"', 200);
  return body as ApiFlamegraph;
}

/** One metric of a comparison: a value per node (aligned with `ApiCompare.nodes`). */
export interface ApiMetric {
  kind: string;
  name: string;
  unit: string;
  direction: 'higher_is_slower' | 'lower_is_slower' | 'neither';
  event?: string;
  source?: string;
  values: (number | null)[];
  bands: {
    found: boolean;
    reason?: string;
    low?: string[];
    high?: string[];
    threshold?: number;
    p_value?: number;
    /** The split tested when none was found: its sides counted, not named. */
    best?: { low_nodes: number; high_nodes: number; threshold: number; p_value: number } | null;
    /** Nodes whose value rests on too little (a few events over a few milliseconds of CPU):
     * neither tested nor deciding the test. */
    set_aside?: string[];
    /** The levels of a split, lowest first (two or more groups of nodes). */
    levels?: string[][];
    /** Nodes far out on their own, in no band. */
    outliers?: string[];
  };
}

/** How a yes/no property of nodes goes with the bands (Fisher's exact test). */
export interface ApiAssociation {
  high_with: number;
  high_nodes: number;
  low_with: number;
  low_nodes: number;
  p_value: number;
}

export interface ApiDifference {
  event: string;
  source: string;
  unit: string;
  low: number[];
  high: number[];
  low_median: number;
  high_median: number;
  weight: number;
  effect: number;
  p_value: number;
  q_value: number;
}

export interface ApiCompare {
  selector: string;
  from: string;
  to: string;
  nodes: string[];
  alpha: number;
  alpha_per_metric: number;
  verdict: string;
  metrics: ApiMetric[];
  bands: {
    metric: string;
    unit: string;
    slow: 'high' | 'low' | null;
    low: string[];
    high: string[];
    low_median: number;
    high_median: number;
    threshold: number;
    separation: number | null;
    p_value: number;
    /** What the split was tested against: "own_shape" (fleets drawn from the fleet's own shape
     * smoothed to one mode), or for fleets under 50 nodes "normal" or "student_t(DF)" (one-band
     * fleets with tails as heavy as the fleet's). */
    null: string;
    /** Every level of the metric, lowest first: more than two when the slow band is the slowest
     * of several levels (`low`/`high` are then the slowest level and every other node). */
    levels: { nodes: string[]; median: number }[];
    /** Nodes far out on their own, in no band. */
    outliers: string[];
    /** Where the split over every node lies among the hardware classes (cpu_model, sockets,
     * numa_nodes): "classes" when the bands are the classes themselves. */
    classes: 'one_class' | 'classes' | 'across';
    /** The hardware class the bands were found in, when they lie within one. */
    within: { labels: Record<string, string>; nodes: string[] } | null;
    previous_window: {
      found: boolean;
      reason?: string | null;
      from: string;
      to: string;
      changed: { node: string; now: string; before: string | null }[];
    };
    /** The band metric in each half of the window: nodes that ran clearly in one band in the
     * first half and in the other in the second (`halves` null when the window is one bucket). */
    within_window: {
      halves: [[string, string], [string, string]] | null;
      reason: string | null;
      moved: {
        node: string;
        first: number;
        second: number;
        first_band: 'high' | 'low';
        second_band: 'high' | 'low';
        /** Where the metric counts events: p of "one rate throughout" from the halves' counts. */
        p_value: number | null;
      }[];
    };
  } | null;
  explanation: {
    labels: (ApiAssociation & { label: string; value: string })[];
    placement: (ApiAssociation & { finding: string; example: string })[];
    /** Events whose whole per node differs between the bands: a node-wide shift. */
    node_wide?: {
      event: string;
      source: string;
      unit: string;
      low_median: number;
      high_median: number;
      factor: number;
      effect: number;
      p_value: number;
      functions: number;
    }[];
    /** When the bands were cut on one event's rate: that event's functions tested again on the
     * half of the window that did not cut them (`event`, `summary`), or why not (`reason`). */
    held_out?: {
      event?: string;
      source?: string;
      reason: string | null;
      summary?: { tested: number; confirmed: number; untested: number };
    };
    /** `with_whole`: the function's value only followed its event's whole (its share did not move).
     * `held_out`: for a function of the event the bands were cut on, its difference on the other half. */
    code: (ApiDifference & {
      function: string;
      module: string;
      measure: 'self_value' | 'total_value';
      with_whole?: boolean;
      held_out?: { p_value: number; q_value: number; confirmed: boolean } | null;
    })[];
    /** Why no function can be listed, when the groups are too small for the rank test. */
    code_note?: string | null;
    data: (ApiDifference & { object: string; kind: string })[];
    /** The nodes the code and data differences were read over (each difference's values are
     * theirs, in this order): every node of a band, or a sample of `per_group` (null: all). */
    nodes: { per_group: number | null; low: string[]; high: string[] };
  } | null;
}

export interface CompareQuery {
  selector: string;
  from: number;
  to: number;
  /** Band by this metric only; empty: every metric. */
  metric: string;
}

export async function fetchCompare(q: CompareQuery, signal?: AbortSignal): Promise<ApiCompare> {
  const params = new URLSearchParams({ selector: q.selector, from: String(q.from), to: String(q.to) });
  if (q.metric) params.set('metric', q.metric);
  const body = (await getJson('compare', params, signal)) as Partial<ApiCompare>;
  if (!Array.isArray(body.nodes) || !Array.isArray(body.metrics)) {
    throw new ApiError('the compare answer has no "nodes" or "metrics"', 200);
  }
  return body as ApiCompare;
}

/** A frame of a differential flame graph: `a` the fast band's value, `b` the slow band's. */
export interface ApiDiffFrame {
  name: string;
  kind: FrameKind;
  module?: string;
  a: number;
  b: number;
  children?: ApiDiffFrame[];
}

export interface ApiDiff {
  event: string;
  source: string;
  unit: string;
  mode: 'absolute' | 'relative';
  normalization: string;
  bands_metric?: string;
  a: { label: string; nodes: string[]; total: number };
  b: { label: string; nodes: string[]; total: number };
  root: ApiDiffFrame;
}

export interface DiffQuery {
  selector: string;
  from: number;
  to: number;
  metric: string;
  event: string;
  mode: 'absolute' | 'relative';
}

/** The differential flame graph of the bands of `selector` (`a` fast, `b` slow). */
export async function fetchDiff(q: DiffQuery, signal?: AbortSignal): Promise<ApiDiff> {
  const params = new URLSearchParams({
    groups: 'bands',
    selector: q.selector,
    from: String(q.from),
    to: String(q.to),
    event: q.event,
    mode: q.mode,
  });
  if (q.metric) params.set('metric', q.metric);
  const body = (await getJson('diff', params, signal)) as Partial<ApiDiff>;
  if (typeof body.root !== 'object') throw new ApiError('the diff answer has no "root"', 200);
  return body as ApiDiff;
}

/** One mapping of a process and its resident pages per NUMA node (keys: node ids). */
export interface ApiMapping {
  /** "text", "data", "bss", "rodata", "heap", "stack", "anon", "file", "shm", "other". */
  kind: string;
  path: string;
  start: number;
  end: number;
  permissions: string;
  pages_per_node: Record<string, number>;
  page_size: number;
}

/** A process's newest placement snapshot in the range (`time`: Unix seconds). */
export interface ApiProcessPlacement {
  time: number;
  pid: number;
  comm: string;
  executable: string;
  /** Threads per NUMA node they last ran on (keys: node ids). */
  threads_per_node: Record<string, number>;
  mappings: ApiMapping[];
}

/** Memory held mostly (≥ 80%) on NUMA nodes none of the process's threads ran on. */
export interface ApiRemoteMemory {
  pid: number;
  comm: string;
  kind: string;
  path: string;
  /** The node holding most of the mapping's pages. */
  node: number;
  thread_nodes: number[];
  remote_pages: number;
  total_pages: number;
  text: string;
}

export interface ApiPlacement {
  node: string;
  from: string;
  to: string;
  processes: ApiProcessPlacement[];
  findings: ApiRemoteMemory[];
}

/** The newest memory placement of every process of `node` read in [from, to). */
export async function fetchPlacement(node: string, from: number, to: number, signal?: AbortSignal): Promise<ApiPlacement> {
  const params = new URLSearchParams({ node, from: String(from), to: String(to) });
  const body = (await getJson('placement', params, signal)) as Partial<ApiPlacement>;
  if (!Array.isArray(body.processes)) throw new ApiError('the placement answer has no "processes"', 200);
  return { node, from: '', to: '', findings: [], ...body } as ApiPlacement;
}

/** A counter's increase over one agent interval; `time` (RFC 3339) is the interval's start. */
export interface ApiCounterPoint {
  time: string;
  value: number;
}

export interface ApiCounters {
  node: string;
  from: string;
  to: string;
  /** By counter name, oldest first. */
  counters: Record<string, ApiCounterPoint[]>;
}

/** Per-interval increases of `node`'s counters in [from, to); `names` empty: every counter. */
export async function fetchCounters(
  node: string,
  from: number,
  to: number,
  names: string[] = [],
  signal?: AbortSignal,
): Promise<ApiCounters> {
  const params = new URLSearchParams({ node, from: String(from), to: String(to) });
  for (const n of names) params.append('name', n);
  const body = (await getJson('counters', params, signal)) as Partial<ApiCounters>;
  if (typeof body.counters !== 'object') throw new ApiError('the counters answer has no "counters"', 200);
  return body as ApiCounters;
}

/** One value of a label, and for node labels how many of the selected nodes have it. */
export interface ApiLabelValue {
  value: string;
  /** Node labels only: nodes with this value among those the selector matches. */
  nodes?: number;
}

/** A label a selector can match: a node's (`node`, operator labels, facts) or a process's. */
export interface ApiLabel {
  name: string;
  scope: 'node' | 'process';
  /** At most 200 per label, sorted; `truncated` when there are more. */
  values: ApiLabelValue[];
  truncated: boolean;
}

export interface ApiLabels {
  selector: string;
  labels: ApiLabel[];
}

/** Label names and values for completing a selector: node labels of the nodes `selector` matches. */
export async function fetchLabels(selector: string, from: number, to: number, signal?: AbortSignal): Promise<ApiLabels> {
  const params = new URLSearchParams({ selector, from: String(from), to: String(to) });
  const body = (await getJson('labels', params, signal)) as Partial<ApiLabels>;
  if (!Array.isArray(body.labels)) throw new ApiError('the labels answer has no "labels"', 200);
  return { selector: body.selector ?? selector, labels: body.labels };
}

/** One alert of `/api/v1/alerts`: a rule that fired (or may fire) on a selector's nodes. */
export interface ApiAlert {
  rule: string;
  state: 'firing' | 'pending' | 'resolved';
  labels: Record<string, string>;
  annotations: Record<string, string>;
  /** RFC 3339. */
  starts_at: string;
  /** RFC 3339; null while it fires. */
  ends_at: string | null;
  value: number;
  /** The nodes the alert is about, as a selector. */
  selector: string;
  /** The window the rule evaluated (RFC 3339): what the compare view should show. */
  from: string;
  to: string;
  top_function: string | null;
  /** For bands: the node-wide shifts they differ by, which no function is to blame for. */
  node_wide: string | null;
}

/**
 * Alerts active or resolved in [from, to). A server without alerting rules answers 404
 * (an `ApiError` with status 404).
 */
export async function fetchAlerts(from: number, to: number, signal?: AbortSignal): Promise<ApiAlert[]> {
  const params = new URLSearchParams({ from: String(from), to: String(to) });
  const body = (await getJson('alerts', params, signal)) as { alerts?: unknown };
  if (!Array.isArray(body.alerts)) throw new ApiError('the alerts answer has no "alerts"', 200);
  return body.alerts as ApiAlert[];
}
