#!/usr/bin/env node
// Checks the merge rules of src/sandwich.ts (see the top of that file) in Node, without a
// browser: the module is transpiled with the project's TypeScript (its imports are types only)
// and loaded from memory. Trees are written as folded stacks ("p;a;f 10", a frame suffixed [k]
// is kernel) and turned into Frames the way flamegraph.ts's buildTree does.
//   node test/sandwich-test.mjs        (npm run test:unit)
// Prints `ok: N checks` and exits 0, or one `FAIL: …` line per failed check and exits 1.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const here = dirname(fileURLToPath(import.meta.url));
const source = readFileSync(join(here, '..', 'src', 'sandwich.ts'), 'utf8');
const { outputText } = ts.transpileModule(source, {
  compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  fileName: 'sandwich.ts',
});
if (/^\s*import\s/m.test(outputText)) {
  console.error('FAIL: src/sandwich.ts imports values; this test can only load a module whose imports are types');
  process.exit(1);
}
const { sandwichOf } = await import(`data:text/javascript;base64,${Buffer.from(outputText).toString('base64')}`);

/** Frames from folded stacks, like the API's tree through buildTree: ids parents first, self = value − children. */
function tree(text) {
  const mk = (name, kind, parent) => ({ name, kind, module: kind === 'kernel' ? '[kernel.kallsyms]' : '', buildId: '', value: 0, children: [], parent });
  const root = mk('all', 'root', null);
  for (const line of text.trim().split('\n')) {
    const at = line.trim().lastIndexOf(' ');
    const names = line.trim().slice(0, at).split(';');
    const value = Number(line.trim().slice(at + 1));
    root.value += value;
    let n = root;
    names.forEach((raw, i) => {
      const kind = i === 0 ? 'process' : raw.endsWith('[k]') ? 'kernel' : 'user';
      const name = raw.replace(/\[k\]$/, '');
      let c = n.children.find((x) => x.name === name && x.kind === kind);
      if (!c) {
        c = mk(name, kind, n);
        n.children.push(c);
      }
      c.value += value;
      n = c;
    });
  }
  let id = 0;
  const stack = [[root, 0]];
  while (stack.length > 0) {
    const [f, depth] = stack.shift();
    f.id = id++;
    f.depth = depth;
    f.self = f.value - f.children.reduce((s, c) => s + c.value, 0);
    for (const c of f.children) stack.push([c, depth + 1]);
  }
  return root;
}

/** A frame tree as a compact string: name=value(self) [children…], children in order. */
function show(f) {
  const self = f.self !== 0 && f.children.length > 0 ? `(${f.self})` : '';
  const kids = f.children.length > 0 ? ` [${f.children.map(show).join(', ')}]` : '';
  return `${f.kind === 'kernel' ? `${f.name}[k]` : f.name}=${f.value}${self}${kids}`;
}

let checks = 0;
const failures = [];
function check(what, got, want) {
  checks++;
  const g = typeof got === 'string' ? got : JSON.stringify(got);
  const w = typeof want === 'string' ? want : JSON.stringify(want);
  if (g !== w) failures.push(`${what}\n    got:  ${g}\n    want: ${w}`);
}

/** Ids 0 … count-1, parents before children, depths, maxDepth and self as the rules say. */
function checkShape(what, t) {
  const seen = new Set();
  let maxDepth = 0;
  let ok = true;
  const stack = [t.root];
  while (stack.length > 0) {
    const f = stack.pop();
    seen.add(f.id);
    maxDepth = Math.max(maxDepth, f.depth);
    const childSum = f.children.reduce((s, c) => s + c.value, 0);
    if (f.self !== Math.max(0, f.value - childSum)) ok = false;
    if (f.parent && (f.parent.id >= f.id || f.depth !== f.parent.depth + 1)) ok = false;
    for (const c of f.children) {
      if (c.parent !== f) ok = false;
      stack.push(c);
    }
  }
  check(`${what}: ids are 0 … count-1, parents first, depths and self consistent`, ok && seen.size === t.count && Math.max(...seen) === t.count - 1, true);
  check(`${what}: maxDepth`, t.maxDepth, maxDepth);
}

// 1. Callers and callees merged across occurrences; self and total as the top-functions table.
{
  const root = tree(`
    p;a;f;g 10
    p;b;f;h 5
    p;b;f 1
    p;f 2
    q;a;f;g 3
    q;a;x 7
  `);
  const sw = sandwichOf(root, 'f');
  check('total sums the occurrences', sw.total, 21);
  check('self sums every occurrence’s self', sw.self, 3);
  check('frames and outermost', [sw.frames, sw.outermost], [4, 4]);
  check('kind and module: the largest occurrence’s', [sw.kind, sw.module], ['user', '']);
  check('callers: rooted at f, callers merged by name up to the processes', show(sw.callers.root), 'f=21 [a=13 [p=10, q=3], b=6 [p=6], p=2]');
  check('callees: the subtrees under every f merged', show(sw.callees.root), 'f=21(3) [g=13, h=5]');
  check('callers stop below the root "all"', show(sw.callers.root).includes('all='), false);
  checkShape('callers', sw.callers);
  checkShape('callees', sw.callees);
  check('the tree given is left alone', show(root.children[0]), 'p=18 [a=10 [f=10 [g=10]], b=6 [f=6(1) [h=5]], f=2]');
}

// 2. Recursion is counted once per stack.
{
  const root = tree(`
    p;f;g;f;h 4
    p;f 1
    p;f;f 2
    p;k;f;f;f 3
  `);
  const sw = sandwichOf(root, 'f');
  check('recursion: total counts each stack once', sw.total, 10);
  check('recursion: self includes nested occurrences', sw.self, 1 + 2 + 3);
  check('recursion: frames, outermost', [sw.frames, sw.outermost], [6, 2]);
  check('recursion: callers only of the outermost occurrences (no f among them)', show(sw.callers.root), 'f=10 [k=3 [p=3], p=7]');
  check('recursion: nested occurrences stay inside the callees', show(sw.callees.root), 'f=10(1) [f=5(2) [f=3], g=4 [f=4 [h=4]]]');
  checkShape('recursion callers', sw.callers);
  checkShape('recursion callees', sw.callees);
}

// 3. Siblings merge on name and kind; unknown names and the root answer null.
{
  const root = tree(`
    p;f;x 1
    p;f;x[k] 2
    q;x[k];f 4
  `);
  const sw = sandwichOf(root, 'f');
  check('kinds: a user and a kernel x stay apart', show(sw.callees.root), 'f=7(4) [x[k]=2, x=1]');
  check('kinds: callers', show(sw.callers.root), 'f=7 [p=3, x[k]=4 [q=4]]');
  const x = sandwichOf(root, 'x');
  check('a name of two kinds: one sandwich, the kind of its largest occurrence', [x.total, x.kind, x.module], [7, 'kernel', '[kernel.kallsyms]']);
  check('x callers', show(x.callers.root), 'x[k]=7 [f=3 [p=3], q=4]');
  check('a name that does not occur', sandwichOf(root, 'nope'), null);
  check('the root itself is not a function', sandwichOf(root, 'all'), null);
  const p = sandwichOf(root, 'p');
  check('a process: no callers, the whole process below', [show(p.callers.root), p.callees.root.value], ['p=3', 3]);
}

// 4. Deep stacks: no recursion limit, recursion still counted once.
{
  const depth = 20000;
  const root = tree(`p;${Array.from({ length: depth }, () => 'r').join(';')};leaf 5\np;other 1`);
  const sw = sandwichOf(root, 'r');
  check('deep: total once', [sw.total, sw.frames, sw.outermost], [5, depth, 1]);
  check('deep: callees depth', sw.callees.maxDepth, depth);
  check('deep: callers', show(sw.callers.root), 'r=5 [p=5]');
}

if (failures.length > 0) {
  for (const f of failures) console.error(`FAIL: ${f}`);
  console.error(`${failures.length} of ${checks} checks failed`);
  process.exit(1);
}
console.log(`ok: src/sandwich.ts: ${checks} checks passed`);
