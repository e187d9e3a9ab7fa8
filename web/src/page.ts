// What every page of the UI does around its own content, one definition for all of them: its
// state in the URL (read, written, brought back by Back and Forward), its requests (a new one
// cancels the one it replaces, so an answer that arrives late is never shown) and its message box
// (loading, nothing found, the errors a request can end in, each said the same way everywhere).

import { ApiError } from './api';
import { setUrl, showMessageIn } from './dom';

export interface PageOptions<S> {
  /** The page's state from its URL's query. */
  read: (query: URLSearchParams) => S;
  /** The state as a query (what a shared link restores). */
  write: (state: S) => URLSearchParams | string;
  /** The box messages are shown in. */
  message: HTMLElement;
  /** Called when the message box is shown or hidden (a page that hides its content meanwhile). */
  messageShown?: (shown: boolean) => void;
}

/** Whether `err` is a request cancelled by a newer one (nothing to show). */
export function isCancelled(err: unknown): boolean {
  return err instanceof DOMException && err.name === 'AbortError';
}

/** A failed request in words: the title and detail of its message. */
export function failure(err: unknown, what: string, retry: string): { title: string; detail: string } {
  if (err instanceof ApiError && err.status === 0) return { title: 'The server is unreachable.', detail: `${err.message}. ${retry}` };
  if (err instanceof ApiError && err.status === 400) return { title: 'The server refused the question.', detail: err.message };
  const status = err instanceof ApiError && err.status > 0 ? ` (HTTP ${err.status})` : '';
  return { title: what, detail: `${err instanceof Error ? err.message : String(err)}${status}` };
}

export class Page<S> {
  private readonly inflight = new Map<string, AbortController>();

  constructor(private readonly options: PageOptions<S>) {}

  /** The state the address bar holds now. */
  read(): S {
    return this.options.read(new URLSearchParams(location.search));
  }

  /** Puts `state` in the address bar: a new history entry when `push` (Back returns to the one
   * before), else in place (typing in a filter). */
  write(state: S, push: boolean): void {
    const query = String(this.options.write(state));
    setUrl(`${location.pathname}${query ? `?${query}` : ''}${location.hash}`, push);
  }

  /** Calls `restore` with the state Back or Forward brought into the address bar. */
  onNavigate(restore: (state: S) => void): void {
    window.addEventListener('popstate', () => {
      restore(this.read());
    });
  }

  /** Starts a request of `kind` (a page may have several at once: an answer and a flame graph):
   * cancels the one of that kind still in flight, and returns the new one's signal. */
  request(kind = 'main'): AbortSignal {
    this.inflight.get(kind)?.abort();
    const controller = new AbortController();
    this.inflight.set(kind, controller);
    return controller.signal;
  }

  show(kind: 'info' | 'error', title: string, detail: string): void {
    showMessageIn(this.options.message, kind, title, detail);
    this.options.messageShown?.(true);
  }

  hideMessage(): void {
    this.options.message.hidden = true;
    this.options.messageShown?.(false);
  }

  /** Shows why a request failed, `what` failed in general and `retry` saying how to try again
   * when the server is unreachable; false, showing nothing, for a request a newer one cancelled. */
  failed(err: unknown, what: string, retry: string): boolean {
    if (isCancelled(err)) return false;
    const { title, detail } = failure(err, what, retry);
    this.show('error', title, detail);
    return true;
  }
}
