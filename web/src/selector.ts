// Selectors in the browser: Prometheus label matchers, `{zone="a",node=~"web-.*"}`, written by
// people and completed from the labels the server knows (GET /api/v1/labels).
//
// The server parses and checks selectors (server/src/selector.rs, one parser for every place that
// takes one) and answers 400 with the position of a mistake; this module only reads enough of a
// selector to know what the caret is on, and writes selectors the server parses back unchanged.

import type { ApiLabel, ApiLabels } from './api';

export type MatchOp = '=' | '!=' | '=~' | '!~';

export interface Matcher {
  name: string;
  op: MatchOp;
  value: string;
}

/** A value as a double-quoted string (backslash and quote escaped). */
export function quoteValue(v: string): string {
  return `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** A string matched literally inside a regular expression. */
export function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export function formatSelector(matchers: readonly Matcher[]): string {
  return `{${matchers.map((m) => `${m.name}${m.op}${quoteValue(m.value)}`).join(',')}}`;
}

/** `selector` with one more matcher (`{}` or an empty text become that matcher alone). */
export function withMatcher(selector: string, m: Matcher): string {
  const text = selector.trim();
  const one = formatSelector([m]);
  if (text === '' || /^\{\s*\}$/.test(text)) return one;
  if (!text.endsWith('}')) return `${text},${one.slice(1)}`;
  return `${text.slice(0, -1).replace(/,\s*$/, '')},${one.slice(1)}`;
}

/** What the caret is on: a label name, a label's value, or nothing to complete. */
export type CompletionContext =
  | {
      kind: 'name';
      /** What is typed of the name before the caret. */
      prefix: string;
      /** The name's place in the text (the whole name, also past the caret). */
      start: number;
      end: number;
      /** The text has no `{` yet: the completion adds the braces. */
      bare: boolean;
      /** Names already matched elsewhere in the selector. */
      used: string[];
    }
  | {
      kind: 'value';
      name: string;
      op: MatchOp;
      prefix: string;
      /** The value's place between its quotes (or where it goes when it has none yet). */
      start: number;
      end: number;
      /** Whether the value has its opening and its closing quote. */
      opened: boolean;
      closed: boolean;
    };

const NAME_CHAR = /[A-Za-z0-9_]/;

/** Reads `text` up to `caret` and says what a completion there would complete. */
export function completionAt(text: string, caret: number): CompletionContext | null {
  let i = 0;
  const skip = () => {
    while (i < text.length && /\s/.test(text[i] ?? '')) i++;
  };
  skip();
  if (text[i] !== '{') {
    if (text.trim() !== '' && !NAME_CHAR.test(text[i] ?? '')) return null;
    // No braces yet: what is typed is the start of a label name.
    let end = i;
    while (end < text.length && NAME_CHAR.test(text[end] ?? '')) end++;
    if (caret < i || caret > end) return null;
    return { kind: 'name', prefix: text.slice(i, caret), start: i, end, bare: true, used: [] };
  }
  i++;
  const used: string[] = [];
  for (;;) {
    skip();
    if (i >= caret) {
      let end = i;
      while (end < text.length && NAME_CHAR.test(text[end] ?? '')) end++;
      return { kind: 'name', prefix: '', start: caret, end: Math.max(caret, end), bare: false, used };
    }
    const nameStart = i;
    while (i < text.length && NAME_CHAR.test(text[i] ?? '')) i++;
    if (i >= caret) {
      return { kind: 'name', prefix: text.slice(nameStart, caret), start: nameStart, end: i, bare: false, used };
    }
    const name = text.slice(nameStart, i);
    if (name === '') return null;
    skip();
    if (i >= caret) return null;
    const op = (['=~', '!~', '!=', '='] as const).find((o) => text.startsWith(o, i));
    if (!op) return null;
    i += op.length;
    skip();
    if (i >= caret) {
      const opened = text[i] === '"';
      if (!opened) return { kind: 'value', name, op, prefix: '', start: caret, end: caret, opened: false, closed: false };
      return null;
    }
    if (text[i] !== '"') return null;
    i++;
    const valueStart = i;
    let value = '';
    while (i < text.length && text[i] !== '"' && i < caret) {
      if (text[i] === '\\' && i + 1 < text.length) {
        value += text.charAt(i + 1);
        i += 2;
      } else {
        value += text.charAt(i);
        i++;
      }
    }
    if (i >= caret) {
      // The caret is inside the value (or just before its closing quote): complete it.
      let end = i;
      while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      end = Math.min(end, text.length);
      return { kind: 'value', name, op, prefix: value, start: valueStart, end, opened: true, closed: text[end] === '"' };
    }
    if (i >= text.length) return null;
    i++; // the closing quote
    used.push(name);
    skip();
    if (i >= caret) return null;
    if (text[i] === ',') {
      i++;
      continue;
    }
    return null;
  }
}

/** One suggestion: what is shown, what is inserted, and a note (scope, nodes with the value). */
export interface Suggestion {
  label: string;
  note: string;
  apply: () => { text: string; caret: number };
}

/** Case-insensitive: items that start with the prefix first, then (from two letters on) those that contain it. */
function byPrefix<T>(items: T[], key: (t: T) => string, prefix: string): T[] {
  const p = prefix.toLowerCase();
  const starts: T[] = [];
  const contains: T[] = [];
  for (const it of items) {
    const k = key(it).toLowerCase();
    if (k.startsWith(p)) starts.push(it);
    else if (p.length >= 2 && k.includes(p)) contains.push(it);
  }
  return [...starts, ...contains];
}

/** The suggestions for `text` with the caret at `caret`, from the labels the server knows. */
export function suggest(text: string, caret: number, labels: readonly ApiLabel[]): Suggestion[] {
  const ctx = completionAt(text, caret);
  if (!ctx) return [];
  if (ctx.kind === 'name') {
    const fresh = labels.filter((l) => !ctx.used.includes(l.name));
    return byPrefix(fresh, (l) => l.name, ctx.prefix).map((l) => ({
      label: l.name,
      note: `${l.scope} · ${l.values.length}${l.truncated ? '+' : ''} value${l.values.length === 1 ? '' : 's'}`,
      apply: () => {
        if (ctx.bare) {
          const inserted = `{${l.name}=""}`;
          return { text: inserted, caret: inserted.length - 2 };
        }
        const rest = text.slice(ctx.end);
        // A name followed by its operator already: replace the name only.
        if (/^\s*(=|!=|=~|!~)/.test(rest)) {
          return { text: text.slice(0, ctx.start) + l.name + rest, caret: ctx.start + l.name.length };
        }
        // The selector's closing brace comes with the first name when it is missing.
        const insert = `${l.name}=""`;
        const close = rest.includes('}') ? '' : '}';
        return { text: text.slice(0, ctx.start) + insert + rest + close, caret: ctx.start + insert.length - 1 };
      },
    }));
  }
  const label = labels.find((l) => l.name === ctx.name);
  if (!label) return [];
  const regex = ctx.op === '=~' || ctx.op === '!~';
  return byPrefix(label.values, (v) => v.value, ctx.prefix).map((v) => ({
    label: v.value === '' ? '""' : v.value,
    note: v.nodes === undefined ? label.scope : `${v.nodes} node${v.nodes === 1 ? '' : 's'}`,
    apply: () => {
      const raw = regex ? escapeRegex(v.value) : v.value;
      const quoted = quoteValue(raw);
      const inner = quoted.slice(1, -1);
      if (!ctx.opened) {
        const t = text.slice(0, ctx.start) + quoted + text.slice(ctx.end);
        return { text: t, caret: ctx.start + quoted.length };
      }
      const rest = text.slice(ctx.closed ? ctx.end + 1 : ctx.end);
      const t = `${text.slice(0, ctx.start)}${inner}"${rest}${rest.includes('}') ? '' : '}'}`;
      return { text: t, caret: ctx.start + inner.length + 1 };
    },
  }));
}

const MAX_SHOWN = 60;

/**
 * Completion of label names and values under a selector input, as a listbox: ↑/↓ choose,
 * Enter or Tab accepts (Enter with nothing chosen submits the form), Esc closes. Labels come
 * from `load`, once per `reset()` (a new time range).
 */
export class SelectorCompletion {
  private readonly list: HTMLUListElement;
  private labels: ApiLabel[] | null = null;
  private loading: Promise<void> | null = null;
  private shown: Suggestion[] = [];
  private active = -1;
  private controller: AbortController | null = null;

  constructor(
    private readonly input: HTMLInputElement,
    private readonly load: (signal: AbortSignal) => Promise<ApiLabels>,
  ) {
    const list = document.createElement('ul');
    list.className = 'completions';
    list.id = `${input.id || 'selector'}-completions`;
    list.setAttribute('role', 'listbox');
    list.hidden = true;
    input.insertAdjacentElement('afterend', list);
    input.parentElement?.classList.add('has-completions');
    input.setAttribute('role', 'combobox');
    input.setAttribute('aria-autocomplete', 'list');
    input.setAttribute('aria-controls', list.id);
    input.setAttribute('aria-expanded', 'false');
    input.removeAttribute('list');
    this.list = list;
    input.addEventListener('focus', () => { this.update(); });
    input.addEventListener('input', () => { this.update(); });
    input.addEventListener('click', () => { this.update(); });
    input.addEventListener('blur', () => { this.close(); });
    input.addEventListener('keydown', (e) => { this.onKey(e); });
    // mousedown, not click: the input keeps its focus.
    list.addEventListener('mousedown', (e) => {
      const item = (e.target as HTMLElement).closest('li');
      const i = item ? Number(item.dataset.index) : -1;
      if (i >= 0) {
        e.preventDefault();
        this.accept(i);
      }
    });
  }

  /** Forgets the labels (the range changed); they are loaded again on the next completion. */
  reset(): void {
    this.controller?.abort();
    this.labels = null;
    this.loading = null;
  }

  private fetchLabels(): void {
    if (this.labels !== null || this.loading !== null) return;
    const controller = new AbortController();
    this.controller = controller;
    this.loading = this.load(controller.signal)
      .then((l) => {
        this.labels = l.labels;
      })
      .catch(() => {
        // No completion without labels; the selector still works as typed.
        this.labels = [];
      })
      .finally(() => {
        this.loading = null;
        if (document.activeElement === this.input) this.update();
      });
  }

  private update(): void {
    if (this.labels === null) {
      this.fetchLabels();
      this.render([], 'Loading labels…');
      return;
    }
    const caret = this.input.selectionStart ?? this.input.value.length;
    this.shown = suggest(this.input.value, caret, this.labels);
    this.active = -1;
    this.render(this.shown.slice(0, MAX_SHOWN), '');
  }

  private render(items: Suggestion[], status: string): void {
    const rows: HTMLLIElement[] = items.map((s, i) => {
      const li = document.createElement('li');
      li.id = `${this.list.id}-${i}`;
      li.dataset.index = String(i);
      li.setAttribute('role', 'option');
      const name = document.createElement('span');
      name.className = 'completion-label';
      name.textContent = s.label;
      const note = document.createElement('span');
      note.className = 'completion-note';
      note.textContent = s.note;
      li.append(name, note);
      return li;
    });
    if (status) {
      const li = document.createElement('li');
      li.className = 'completion-status';
      li.textContent = status;
      rows.push(li);
    } else if (this.shown.length > MAX_SHOWN) {
      const li = document.createElement('li');
      li.className = 'completion-status';
      li.textContent = `${this.shown.length - MAX_SHOWN} more: type to narrow`;
      rows.push(li);
    }
    this.list.replaceChildren(...rows);
    const open = rows.length > 0 && document.activeElement === this.input;
    this.list.hidden = !open;
    this.input.setAttribute('aria-expanded', String(open));
    this.highlight();
  }

  private highlight(): void {
    for (const li of this.list.querySelectorAll('li[role="option"]')) {
      li.setAttribute('aria-selected', String(li.id === `${this.list.id}-${this.active}`));
    }
    if (this.active >= 0) {
      this.input.setAttribute('aria-activedescendant', `${this.list.id}-${this.active}`);
      document.getElementById(`${this.list.id}-${this.active}`)?.scrollIntoView({ block: 'nearest' });
    } else {
      this.input.removeAttribute('aria-activedescendant');
    }
  }

  private close(): void {
    this.list.hidden = true;
    this.active = -1;
    this.input.setAttribute('aria-expanded', 'false');
    this.input.removeAttribute('aria-activedescendant');
  }

  private accept(i: number): void {
    const s = this.shown[i];
    if (!s) return;
    const { text, caret } = s.apply();
    this.input.value = text;
    this.input.setSelectionRange(caret, caret);
    this.input.dispatchEvent(new Event('input', { bubbles: true }));
  }

  private onKey(e: KeyboardEvent): void {
    const open = !this.list.hidden && this.shown.length > 0;
    const count = Math.min(this.shown.length, MAX_SHOWN);
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      if (!open) {
        this.update();
        e.preventDefault();
        return;
      }
      this.active = e.key === 'ArrowDown' ? (this.active + 1) % count : (this.active - 1 + count) % count;
      this.highlight();
      e.preventDefault();
    } else if ((e.key === 'Enter' || e.key === 'Tab') && open && this.active >= 0) {
      e.preventDefault();
      this.accept(this.active);
    } else if (e.key === 'Tab' && open && count === 1) {
      e.preventDefault();
      this.accept(0);
    } else if (e.key === 'Escape' && !this.list.hidden) {
      e.preventDefault();
      e.stopPropagation();
      this.close();
    } else if (e.key === 'Enter') {
      this.close();
    }
  }
}
