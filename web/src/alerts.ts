// bimodal alerts view: alerts firing, pending and resolved in a range, each linked to the compare
// view of its nodes over the window its rule evaluated. Reads /api/v1/alerts; a server that
// evaluates no rules answers 404, which this page shows as "not configured", not as a failure.

import './style.css';
import './compare.css';
import { ApiError, fetchAlerts, type ApiAlert } from './api';
import { formatAgo, formatFigure as figure, formatTime } from './format';
import { DEFAULT_RANGE, fillRangeSelect, isRange, windowSeconds, type RangeKey } from './range';
import { escapeRegex } from './selector';
import { renderNav } from './views';
import { byId as $, el } from './dom';
import { isCancelled, Page } from './page';

interface ViewState {
  range: RangeKey;
  /** Resolved alerts too, or only those firing and pending. */
  show: 'all' | 'active';
}

function readState(p: URLSearchParams): ViewState {
  const range = p.get('range');
  return { range: isRange(range) ? range : '24h', show: p.get('show') === 'active' ? 'active' : 'all' };
}

function writeState(s: ViewState): URLSearchParams {
  const p = new URLSearchParams({ range: s.range });
  if (s.show !== 'all') p.set('show', s.show);
  return p;
}

const ui = {
  range: $('range', HTMLSelectElement),
  show: $('show', HTMLSelectElement),
  refresh: $('refresh', HTMLButtonElement),
  message: $('message', HTMLDivElement),
  section: $('alerts-section', HTMLElement),
  count: $('alert-count', HTMLSpanElement),
  table: $('alerts-table', HTMLTableElement),
};

const page = new Page({ read: readState, write: writeState, message: ui.message });
let state = page.read();

function applyStateToControls(): void {
  fillRangeSelect(ui.range, state.range, null);
  ui.show.value = state.show;
  renderNav('alerts', { range: state.range });
}

/** The compare view of the alert's nodes over the window its rule evaluated. */
function compareHref(a: ApiAlert): string {
  const p = new URLSearchParams({ selector: a.selector });
  const from = Math.floor(Date.parse(a.from) / 1000);
  const to = Math.ceil(Date.parse(a.to) / 1000);
  if (Number.isFinite(from) && Number.isFinite(to) && to > from) {
    p.set('from', String(from));
    p.set('to', String(to));
  } else {
    p.set('range', DEFAULT_RANGE);
  }
  if (a.labels.event) p.set('event', a.labels.event);
  if (a.top_function) p.set('q', `/^${escapeRegex(a.top_function)}$/`);
  return `./compare.html?${p.toString()}`;
}

const STATE_ORDER = { firing: 0, pending: 1, resolved: 2 } as const;

function render(alerts: ApiAlert[]): void {
  const shown = alerts
    .filter((a) => state.show === 'all' || a.state !== 'resolved')
    .sort((x, y) => STATE_ORDER[x.state] - STATE_ORDER[y.state] || Date.parse(y.starts_at) - Date.parse(x.starts_at));
  ui.section.hidden = false;
  ui.count.textContent = `${shown.length} of ${alerts.length}`;
  const head = el('tr');
  for (const h of ['state', 'rule', 'nodes', 'value', 'since', 'ended', 'cause', 'summary', '']) {
    head.append(el('th', undefined, h));
  }
  const rows = shown.map((a) => {
    const tr = el('tr', `alert-${a.state}`);
    const td = (content: string | Node, cls?: string) => {
      const c = el('td', cls);
      c.append(content);
      tr.append(c);
    };
    td(el('span', `alert-state ${a.state}`, a.state));
    td(a.rule, 'mono');
    td(a.selector, 'mono small');
    td(figure(a.value), 'num');
    td(`${formatTime(a.starts_at)} (${formatAgo(a.starts_at)})`, 'small');
    td(a.ends_at ? formatTime(a.ends_at) : '—', 'small');
    // The top differing function, and for bands a node-wide shift no function is to blame for.
    const cause = [a.top_function, a.node_wide && `node-wide: ${a.node_wide}`].filter(Boolean).join('; ');
    td(cause || '—', 'mono small');
    td(a.annotations.summary ?? a.annotations.description ?? '', 'small');
    const link = el('a', 'btn btn-light', 'Compare →');
    link.href = compareHref(a);
    link.title = 'The compare view of these nodes over the window the rule evaluated';
    td(link);
    return tr;
  });
  ui.table.replaceChildren();
  ui.table.createTHead().append(head);
  ui.table.createTBody().append(...rows);
  if (shown.length === 0) {
    page.show(
      'info',
      alerts.length === 0 ? 'No alert in this range.' : 'No alert is firing or pending.',
      'Rules are evaluated on the server; alerts they raise appear here with a link to the comparison of their nodes.',
    );
  } else {
    page.hideMessage();
  }
}

async function load(): Promise<void> {
  const signal = page.request();
  page.show('info', 'Loading alerts…', '');
  const { from, to } = windowSeconds(state.range, null);
  try {
    const alerts = await fetchAlerts(from, to, signal);
    if (signal.aborted) return;
    render(alerts);
  } catch (err) {
    if (isCancelled(err)) return;
    ui.section.hidden = true;
    if (err instanceof ApiError && err.status === 404) {
      page.show(
        'info',
        'Alerting is not configured on this server.',
        'This server evaluates no alert rules (GET /api/v1/alerts answers 404). Once it has rules, alerts on remote-access ' +
          'spikes and on bands appearing show here, firing and resolved, each with a link to the compare view of its nodes and time.',
      );
    } else {
      page.failed(err, 'Loading alerts failed.', 'Press Refresh to try again.');
    }
  }
}

function init(): void {
  applyStateToControls();
  const changed = () => {
    state = { range: isRange(ui.range.value) ? ui.range.value : state.range, show: ui.show.value === 'active' ? 'active' : 'all' };
    page.write(state, true);
    applyStateToControls();
    void load();
  };
  ui.range.addEventListener('change', changed);
  ui.show.addEventListener('change', changed);
  ui.refresh.addEventListener('click', () => void load());
  page.onNavigate((restored) => {
    state = restored;
    applyStateToControls();
    void load();
  });
  void load();
}

init();
