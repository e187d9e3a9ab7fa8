// What every page does with the DOM and its URL, one definition for all of them.

/** The page's element `#id`, of `type`; a page without it is a programming error. */
export function byId<T extends HTMLElement>(id: string, type: new () => T): T {
  const e = document.getElementById(id);
  if (!(e instanceof type)) throw new Error(`${location.pathname} lacks a <${type.name}> #${id}`);
  return e;
}

export function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** Shows a message (loading, empty, error, unreachable) in `box`: a title and a detail. */
export function showMessageIn(box: HTMLElement, kind: 'info' | 'error', title: string, detail: string): void {
  box.hidden = false;
  box.className = `message ${kind}`;
  box.replaceChildren(el('div', 'message-title', title), el('div', 'message-detail', detail));
}

/** Puts a view's state in the address bar: a new history entry when `push`, else in place. */
export function setUrl(url: string, push: boolean): void {
  if (url === `${location.pathname}${location.search}${location.hash}`) return;
  if (push) history.pushState(null, '', url);
  else history.replaceState(null, '', url);
}
