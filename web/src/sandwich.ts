// The sandwich view of one function: who calls it (callers) and what it calls (callees), each
// merged over every place it occurs in the flame graph's tree. Pure functions over the Frame
// tree the page has already loaded (no API call); the trees they answer are Trees for
// FlameGraph.setData. Iterative throughout: stacks can be thousands of frames deep.
//
// Merge rules (for the function named NAME):
// - Occurrences are the frames named exactly NAME, of any kind, except the tree's root. An
//   occurrence is outermost when no frame above it on its stack is named NAME. Only outermost
//   occurrences are merged, so a recursive stack (f → g → f → h) counts once, with its whole
//   value: recursion is counted once per stack.
// - total is the sum of the outermost occurrences' values and self the sum of every occurrence's
//   self, nested ones included: the same figures as the top-functions table
//   (topfunctions.ts's functionStats), here over the whole tree, not the zoomed frame.
// - Callers: a tree rooted at NAME whose value is total. Each outermost occurrence adds its
//   value along its stack read upwards, from its parent to the frame below the tree's root (the
//   root, "all", is left out): the root's children are NAME's direct callers, theirs the callers'
//   callers, up to the processes. A frame's value is the part of NAME's total reached through
//   that path, its self the part whose stack begins there. NAME appears only as the root (an
//   outermost occurrence has no NAME above it). Draw it in the flame orientation so callers grow
//   upwards from NAME.
// - Callees: a tree rooted at NAME whose value is total, into which the subtrees below every
//   outermost occurrence are merged. Nested occurrences of NAME (recursion) stay where they are
//   in those subtrees; their value is already inside the outer occurrence's, so nothing is
//   counted twice. The root's self is the outermost occurrences' self.
// - In both trees siblings with the same name and kind are one frame whose value is the sum of
//   theirs; the frame seen first (depth first, in the source tree's order) gives the module.
//   Siblings are ordered by name, then kind. NAME's own kind and module are those of its
//   outermost occurrence with the largest value (the first one on a tie).
// - Frame ids are 0 … count-1, parents before children, as buildTree numbers them; self is
//   value minus the children's values, never below 0.

import type { FrameKind } from './api';
import type { Frame, Tree } from './flamegraph';

export interface Sandwich {
  readonly name: string;
  readonly kind: FrameKind;
  readonly module: string;
  /** Frames named `name`, nested (recursive) ones included. */
  readonly frames: number;
  /** Outermost occurrences: frames named `name` with no frame of that name above them. */
  readonly outermost: number;
  /** Value in the function itself, summed over every occurrence. */
  readonly self: number;
  /** Value of the stacks through the function, recursion counted once. */
  readonly total: number;
  /** Rooted at the function; its children are its callers (draw in the flame orientation). */
  readonly callers: Tree;
  /** Rooted at the function; its children are what it calls (draw as an icicle). */
  readonly callees: Tree;
}

/** A frame under construction: siblings are merged on (name, kind). */
interface Node {
  readonly name: string;
  readonly kind: FrameKind;
  readonly module: string;
  /** The frames' build id, or `several` when the merged frames differ in it. */
  buildId: string;
  value: number;
  readonly children: Map<string, Node>;
}

function node(name: string, kind: FrameKind, module: string, buildId: string): Node {
  return { name, kind, module, buildId, value: 0, children: new Map() };
}

/** `n` now also stands for a frame of build `buildId`. */
function mergeBuild(n: Node, buildId: string): void {
  if (n.buildId !== buildId) n.buildId = 'several';
}

/** The child of `parent` merging frames named like `f` (same name and kind), made if missing. */
function childLike(parent: Node, f: Frame): Node {
  const key = `${f.kind}\u0000${f.name}`;
  let c = parent.children.get(key);
  if (!c) {
    c = node(f.name, f.kind, f.module, f.buildId);
    parent.children.set(key, c);
  } else {
    mergeBuild(c, f.buildId);
  }
  return c;
}

function byNameThenKind(a: Node, b: Node): number {
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  return a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0;
}

/** Freezes a Node tree into a Tree: ids parents-first, self = value minus the children's. */
function toTree(top: Node): Tree {
  let count = 0;
  let maxDepth = 0;
  const make = (n: Node, parent: Frame | null): Frame => {
    const depth = parent ? parent.depth + 1 : 0;
    if (depth > maxDepth) maxDepth = depth;
    let childSum = 0;
    for (const c of n.children.values()) childSum += c.value;
    return {
      id: count++,
      name: n.name,
      kind: n.kind,
      module: n.module,
      buildId: n.buildId,
      value: n.value,
      self: Math.max(0, n.value - childSum),
      depth,
      parent,
      children: [],
    };
  };
  const root = make(top, null);
  const stack: [Node, Frame][] = [[top, root]];
  for (let item = stack.pop(); item; item = stack.pop()) {
    const [n, frame] = item;
    for (const c of [...n.children.values()].sort(byNameThenKind)) {
      const child = make(c, frame);
      frame.children.push(child);
      stack.push([c, child]);
    }
  }
  return { root, count, maxDepth };
}

interface Occurrences {
  /** In the tree's depth-first order. */
  readonly outermost: Frame[];
  readonly frames: number;
  readonly self: number;
}

/** The frames named `name` below `root`: the outermost ones, and the count and self of all. */
export function occurrencesOf(root: Frame, name: string): Occurrences {
  const outermost: Frame[] = [];
  let frames = 0;
  let self = 0;
  // [frame, a frame named `name` is above it]
  const stack: [Frame, boolean][] = [];
  const pushChildren = (f: Frame, inside: boolean): void => {
    for (let i = f.children.length - 1; i >= 0; i--) {
      const c = f.children[i];
      if (c) stack.push([c, inside]);
    }
  };
  pushChildren(root, false);
  for (let item = stack.pop(); item; item = stack.pop()) {
    const [f, inside] = item;
    const hit = f.name === name;
    if (hit) {
      frames++;
      self += f.self;
      if (!inside) outermost.push(f);
    }
    pushChildren(f, inside || hit);
  }
  return { outermost, frames, self };
}

/** The callers tree of the outermost occurrences `outer` (see the rules above). */
export function callersTree(outer: readonly Frame[], top: Frame): Tree {
  const root = node(top.name, top.kind, top.module, top.buildId);
  for (const o of outer) {
    root.value += o.value;
    mergeBuild(root, o.buildId);
    let n = root;
    for (let a = o.parent; a?.parent; a = a.parent) {
      n = childLike(n, a);
      n.value += o.value;
    }
  }
  return toTree(root);
}

/** The callees tree of the outermost occurrences `outer` (see the rules above). */
export function calleesTree(outer: readonly Frame[], top: Frame): Tree {
  const root = node(top.name, top.kind, top.module, top.buildId);
  const stack: [Frame, Node][] = [];
  for (const o of outer) {
    root.value += o.value;
    mergeBuild(root, o.buildId);
    stack.push([o, root]);
    for (let item = stack.pop(); item; item = stack.pop()) {
      const [f, into] = item;
      for (const c of f.children) {
        const n = childLike(into, c);
        n.value += c.value;
        stack.push([c, n]);
      }
    }
  }
  return toTree(root);
}

/** The sandwich of the function `name` in the tree under `root`, or null where it does not occur. */
export function sandwichOf(root: Frame, name: string): Sandwich | null {
  const occ = occurrencesOf(root, name);
  let top: Frame | undefined;
  let total = 0;
  for (const o of occ.outermost) {
    total += o.value;
    if (!top || o.value > top.value) top = o;
  }
  if (!top) return null;
  return {
    name,
    kind: top.kind,
    module: top.module,
    frames: occ.frames,
    outermost: occ.outermost.length,
    self: occ.self,
    total,
    callers: callersTree(occ.outermost, top),
    callees: calleesTree(occ.outermost, top),
  };
}
