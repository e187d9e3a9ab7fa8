#!/usr/bin/env node
// Checks src/selector.ts in Node, without a browser: what the caret is on in a half-typed
// selector, and what accepting a suggestion writes. The module is transpiled with the project's
// TypeScript (its imports are types only) and loaded from memory.
//   node test/selector-test.mjs        (npm run test:unit)
// Prints `ok: N checks` and exits 0, or one `FAIL: …` line per failed check and exits 1.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const here = dirname(fileURLToPath(import.meta.url));
const source = readFileSync(join(here, '..', 'src', 'selector.ts'), 'utf8');
const { outputText } = ts.transpileModule(source, {
  compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true },
  fileName: 'selector.ts',
});
if (/^\s*import\s/m.test(outputText)) {
  console.error('FAIL: src/selector.ts imports values; this test can only load a module whose imports are types');
  process.exit(1);
}
const sel = await import(`data:text/javascript;base64,${Buffer.from(outputText).toString('base64')}`);

let checks = 0;
const failures = [];
function check(what, got, want) {
  checks++;
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) failures.push(`${what}: got ${g}, want ${w}`);
}

/** `|` marks the caret. */
function at(textWithCaret) {
  const caret = textWithCaret.indexOf('|');
  return { text: textWithCaret.replace('|', ''), caret };
}
function ctx(textWithCaret) {
  const { text, caret } = at(textWithCaret);
  const c = sel.completionAt(text, caret);
  if (!c) return null;
  return c.kind === 'name' ? ['name', c.prefix, c.used] : ['value', c.name, c.op, c.prefix];
}

const labels = [
  { name: 'node', scope: 'node', truncated: false, values: [{ value: 'web-1', nodes: 1 }, { value: 'web-2', nodes: 1 }, { value: 'db.1', nodes: 1 }] },
  { name: 'zone', scope: 'node', truncated: false, values: [{ value: 'a', nodes: 2 }, { value: 'b "x"', nodes: 1 }] },
  { name: 'numa_nodes', scope: 'node', truncated: false, values: [{ value: '2', nodes: 3 }] },
  { name: 'comm', scope: 'process', truncated: false, values: [{ value: 'workload' }] },
];
/** Accepts the suggestion labelled `pick` and returns the text with `|` at the new caret. */
function accept(textWithCaret, pick) {
  const { text, caret } = at(textWithCaret);
  const s = sel.suggest(text, caret, labels).find((x) => x.label === pick);
  if (!s) return `no suggestion ${pick}`;
  const r = s.apply();
  return `${r.text.slice(0, r.caret)}|${r.text.slice(r.caret)}`;
}
function labelsOf(textWithCaret) {
  const { text, caret } = at(textWithCaret);
  return sel.suggest(text, caret, labels).map((s) => s.label);
}

// 1. What the caret is on.
check('empty', ctx('|'), ['name', '', []]);
check('bare name', ctx('no|'), ['name', 'no', []]);
check('after the brace', ctx('{|}'), ['name', '', []]);
check('a name', ctx('{zo|}'), ['name', 'zo', []]);
check('the middle of a name', ctx('{zo|ne="a"}'), ['name', 'zo', []]);
check('after a comma', ctx('{zone="a",|}'), ['name', '', ['zone']]);
check('after a comma and a space', ctx('{zone="a", nu|}'), ['name', 'nu', ['zone']]);
check('the operator', ctx('{zone=|}'), ['value', 'zone', '=', '']);
check('an empty value', ctx('{zone="|"}'), ['value', 'zone', '=', '']);
check('a value', ctx('{node=~"we|"}'), ['value', 'node', '=~', 'we']);
check('an unclosed value', ctx('{node!="we|'), ['value', 'node', '!=', 'we']);
check('an escaped quote', ctx('{zone="b \\"|"}'), ['value', 'zone', '=', 'b "']);
check('after a value', ctx('{zone="a"|}'), null);
check('after the selector', ctx('{zone="a"}|'), null);
check('between name and operator', ctx('{zone |="a"}'), null);
check('not a selector', ctx('(|'), null);

// 2. What is suggested.
check('names by prefix', labelsOf('{n|}'), ['node', 'numa_nodes']);
check('names containing, from two letters on', labelsOf('{od|}'), ['node', 'numa_nodes']);
check('names used once are not offered again', labelsOf('{zone="a",|}'), ['node', 'numa_nodes', 'comm']);
check('values by prefix', labelsOf('{node="w|"}'), ['web-1', 'web-2']);
check('values of an unknown label', labelsOf('{rack="|"}'), []);

// 3. What accepting writes.
check('a bare name gets braces', accept('no|', 'node'), '{node="|"}');
check('a name gets its operator and quotes', accept('{zo|}', 'zone'), '{zone="|"}');
check('a name before its operator is replaced alone', accept('{zo|ne="a"}', 'zone'), '{zone|="a"}');
check('a value is quoted and the caret leaves it', accept('{node="w|"}', 'web-2'), '{node="web-2"|}');
check('a value replaces the whole value', accept('{node="w|eb-9"}', 'web-1'), '{node="web-1"|}');
check('a value closes an unclosed quote and the selector', accept('{node="w|', 'web-1'), '{node="web-1"|}');
check('a name closes the selector', accept('{no|', 'node'), '{node="|"}');
check('a value after a bare operator gets quotes', accept('{node=|}', 'web-1'), '{node="web-1"|}');
check('a regex value is escaped', accept('{node=~"d|"}', 'db.1'), '{node=~"db\\\\.1"|}');
check('quotes in a value are escaped', accept('{zone="|"}', 'b "x"'), '{zone="b \\"x\\""|}');

// 4. Formatting.
check('format', sel.formatSelector([{ name: 'node', op: '=~', value: 'a|b' }, { name: 'zone', op: '!=', value: 'x"y' }]), '{node=~"a|b",zone!="x\\"y"}');
check('format nothing', sel.formatSelector([]), '{}');
check('a matcher added to nothing', sel.withMatcher(' {} ', { name: 'zone', op: '=', value: 'a' }), '{zone="a"}');
check('a matcher added', sel.withMatcher('{node=~"web-.*"}', { name: 'zone', op: '=', value: 'a' }), '{node=~"web-.*",zone="a"}');
check('a matcher added after a trailing comma', sel.withMatcher('{node="x",}', { name: 'zone', op: '!=', value: 'a' }), '{node="x",zone!="a"}');
check('escape a regex', sel.escapeRegex('web-1.example(2)'), 'web-1\\.example\\(2\\)');

if (failures.length > 0) {
  for (const f of failures) console.error(`FAIL: ${f}`);
  console.error(`${failures.length} of ${checks} checks failed`);
  process.exit(1);
}
console.log(`ok: src/selector.ts: ${checks} checks passed`);
