// Client of the JSON API described in docs/design/001-http-api.md.

export type FrameKind = 'root' | 'process' | 'user' | 'kernel' | 'jit' | 'unknown';

export interface ApiFrame {
  name: string;
  kind: FrameKind;
  module?: string;
  value: number;
  children?: ApiFrame[];
}

export interface ApiNode {
  node: string;
  labels?: Record<string, string>;
  last_seen?: string;
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
  total: number;
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

async function getJson(path: string, params: URLSearchParams | null, signal?: AbortSignal): Promise<unknown> {
  const url = API_BASE + path + (params && params.size > 0 ? `?${params.toString()}` : '');
  let resp: Response;
  try {
    resp = await fetch(url, { headers: { Accept: 'application/json' }, ...(signal ? { signal } : {}) });
  } catch (err) {
    if (err instanceof DOMException && err.name === 'AbortError') throw err;
    throw new ApiError(`cannot reach the server (${err instanceof Error ? err.message : String(err)})`, 0);
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

export async function fetchNodes(signal?: AbortSignal): Promise<ApiNode[]> {
  const body = (await getJson('nodes', null, signal)) as { nodes?: ApiNode[] };
  return Array.isArray(body.nodes) ? body.nodes : [];
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
  const quote = (v: string) => `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
  if (nodes.length === 1) return `{node=${quote(nodes[0] ?? '')}}`;
  const escaped = nodes.map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return `{node=~${quote(escaped.join('|'))}}`;
}

export async function fetchFlamegraph(q: FlamegraphQuery, signal?: AbortSignal): Promise<ApiFlamegraph> {
  const params = new URLSearchParams({ event: q.event, from: String(q.from), to: String(q.to), format: 'json' });
  if (q.nodes.length > 0) params.set('selector', nodeSelector(q.nodes));
  const body = (await getJson('flamegraph', params, signal)) as Partial<ApiFlamegraph>;
  if (typeof body.root !== 'object') throw new ApiError('the flame graph answer has no "root"', 200);
  return body as ApiFlamegraph;
}
