// The in-process Filesystem cleaner: removes every entry inside a volume's
// mount point (dotfiles included), keeps the mount point itself, and never
// deletes anything that is not on that one mount. It never throws.
//
// Safety rules (docs/cleanup.md, "Safety rules of the Filesystem cleaner"):
// 1. Fresh mount check. The root is opened first (O_NOFOLLOW|O_DIRECTORY),
//    then the mount table is read (a fresh read, no cache). The last entry
//    for the path must exist, its MAJ:MIN must be the path's st_dev and its
//    mount ID that of the opened root. A volume unmounted (or remounted)
//    before the clean fails with nothing removed, instead of the root
//    filesystem's directory under it being cleaned. Holding the root fd keeps
//    the mount (and its ID) alive for the rest of the clean.
// 2. Walk by handle, never by path. Every directory is an open fd; its
//    entries are listed and removed as raw bytes relative to that fd
//    (/proc/self/fd/N/<name>: Node has no openat/unlinkat). A directory
//    swapped for a symlink during the clean is never followed (O_NOFOLLOW:
//    ELOOP/ENOTDIR fail the clean), and names that are not UTF-8 are removed
//    like any other (they are never decoded for an fs call).
// 3. A directory is entered only if the opened fd is the (dev, ino) that lstat
//    saw, on the root's device, and on the root's mount (mnt_id from
//    /proc/self/fdinfo): nested mounts, same-device bind mounts included, are
//    left in place and reported. A file that is a mount point cannot be
//    unlinked (EBUSY): reported too.
// 4. After the walk the root is listed again: anything left fails the clean.
// 5. Bounded fds at any depth: besides the root, only the deepest
//    MAX_OPEN_DIRS directories of the walk keep their fd. Going back up to a
//    directory whose fd was closed re-opens it as `..` of its open child (no
//    name is resolved again, so nothing swapped meanwhile can be followed),
//    and the fd must be the (st_dev, st_ino) recorded on the way down and on
//    the root's mount, or the clean fails.
// 6. Bounded error texts: paths keep their head and tail (MAX_SHOWN_PATH), at
//    most MAX_LISTED errors are kept, the whole text is capped (capText).
// A clean that left anything behind FAILS, so the PV is not handed out again
// with foreign or old data.
//
// The walk is iterative (explicit stack: no recursion limit on deep trees);
// every fd is closed on every path (also on abort and errors).
// The tree is removed with synchronous fs calls in batches, yielding to the
// event loop every OPS_PER_YIELD calls or YIELD_AFTER_MS, whichever comes
// first: a threadpool round trip per file made an async version ~10x slower
// than `find -delete`.
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readFileSync, rmdirSync, unlinkSync, type Stats } from 'node:fs';
import { formatDev, makeDev, readMountTable, toBytePath, type MountEntry } from '../host/mountinfo.ts';
import type { CleanResult } from './clean-result.ts';
import { capText, errorMessage as errMsg } from '../util/errors.ts';

export interface FilesystemCleanOptions {
  /** The mount table, read afresh right before the clean (default /proc/self/mountinfo). */
  readonly mountInfoPath?: string | undefined;
  readonly signal?: AbortSignal | undefined;
}

const OPS_PER_YIELD = 200;
const YIELD_AFTER_MS = 4;
const MAX_LISTED = 10;
/** Directory fds held open at once besides the root's, whatever the depth (the deepest levels of the walk). */
export const MAX_OPEN_DIRS = 16;
/** A path in a message keeps its head and tail within this many bytes (a tree 20,000 levels deep has 40 KB paths). */
const MAX_SHOWN_PATH = 256;
// libuv adds O_CLOEXEC to every open; set it explicitly where Node exposes it.
const O_CLOEXEC = (constants as { O_CLOEXEC?: number }).O_CLOEXEC ?? 0;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | O_CLOEXEC;
const SLASH = Buffer.from('/');
const DOTDOT = Buffer.from('..');

const errCode = (e: unknown): string | undefined =>
  typeof e === 'object' && e !== null && 'code' in e && typeof e.code === 'string' ? e.code : undefined;
const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const fdPath = (fd: number): string => `/proc/self/fd/${fd}`;

/** The mount ID of an open fd (/proc/self/fdinfo, Linux >= 3.15). */
function mountIdOf(fd: number): number {
  const m = /^mnt_id:\s*(\d+)\s*$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'latin1'));
  if (!m) throw new Error(`no mnt_id in /proc/self/fdinfo/${fd}`);
  return Number(m[1]);
}

/** A name for messages: as is when it is printable UTF-8, otherwise printable ASCII with \xNN escapes. */
export function displayName(raw: Buffer): string {
  const text = raw.toString('utf8');
  // eslint-disable-next-line no-control-regex
  if (Buffer.from(text).equals(raw) && !/[\u0000-\u001f\u007f-\u009f\\]/.test(text)) return text;
  let out = '';
  for (const b of raw) out += b >= 0x20 && b < 0x7f && b !== 0x5c ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`;
  return out;
}

/** One directory of the walk (a frame of its stack). */
interface Dir {
  /** Open fd, or -1 while it is closed to bound the open fds (re-opened through a child's `..`, see walk()). */
  fd: number;
  /** `/proc/self/fd/<fd>/`: child paths are this plus the raw name. */
  prefix: Buffer;
  readonly parent: Dir | undefined;
  /** Name in the parent directory (empty for the root). */
  readonly name: Buffer;
  /** Identity recorded when the directory was entered: a re-opened fd must be this directory again. */
  readonly dev: number;
  readonly ino: number;
  /** Mount points listed below this directory, relative to it, one char per byte (usually empty). */
  readonly nested: ReadonlySet<string>;
  readonly names: Buffer[];
  next: number;
  /** Everything below was removed. */
  complete: boolean;
}

interface Walk {
  readonly mountPath: string;
  readonly rootDev: number;
  readonly rootMnt: number;
  readonly signal: AbortSignal | undefined;
  /** Entries left in place because they are on another mount (one per mount at most). */
  readonly skipped: string[];
  /** The first MAX_LISTED errors (all of them are counted in errorCount). */
  readonly errors: string[];
  errorCount: number;
  removed: number;
  ops: number;
  lastYield: number;
}

const NO_NESTED: ReadonlySet<string> = new Set();

function setFd(dir: Dir, fd: number): void {
  dir.fd = fd;
  dir.prefix = fd < 0 ? Buffer.alloc(0) : Buffer.from(`${fdPath(fd)}/`);
}

function closeDir(dir: Dir): void {
  if (dir.fd < 0) return;
  const fd = dir.fd;
  setFd(dir, -1);
  closeSync(fd);
}

function list(dir: Dir): void {
  dir.names.push(...readdirSync(fdPath(dir.fd), { encoding: 'buffer' }));
}

/** The mount points listed below `parent/name`, relative to it. */
function nestedBelow(parent: Dir, name: Buffer): ReadonlySet<string> {
  if (parent.nested.size === 0) return NO_NESTED;
  const prefix = `${name.toString('latin1')}/`;
  const out = new Set<string>();
  for (const m of parent.nested) if (m.startsWith(prefix)) out.add(m.slice(prefix.length));
  return out.size === 0 ? NO_NESTED : out;
}

/** The path of `name` in `dir` (or of `dir` itself) for messages; a very long one keeps its head and tail. */
function show(w: Walk, dir: Dir, name?: Buffer): string {
  const parts: Buffer[] = name === undefined ? [] : [name];
  for (let d: Dir | undefined = dir; d?.parent !== undefined; d = d.parent) {
    parts.push(d.name);
  }
  if (parts.length === 0) return w.mountPath;
  const rel = displayName(Buffer.concat(parts.reverse().flatMap((p, i) => (i === 0 ? [p] : [SLASH, p]))));
  return capText(`${w.mountPath}/${rel}`, MAX_SHOWN_PATH, MAX_SHOWN_PATH / 2);
}

function listed(items: readonly string[], count: number, what: string): string {
  const more = count > items.length ? ` and ${count - items.length} more` : '';
  return `${count} ${what}: ${items.join(', ')}${more}`;
}

/** Removes everything inside `mountPath` (dotfiles included), never the directory itself, never across mounts. */
export async function cleanFilesystem(mountPath: string, opts: FilesystemCleanOptions = {}): Promise<CleanResult> {
  const start = Date.now();
  const done = (w: Walk | undefined, error?: string): CleanResult => ({
    ok: error === undefined,
    error: error === undefined ? undefined : capText(error),
    durationMs: Date.now() - start,
    skipped: w?.skipped ?? [],
    removed: w?.removed ?? 0,
    stdout: [],
    stderr: [],
  });
  const path = mountPath.length > 1 ? mountPath.replace(/\/+$/, '') : mountPath;
  let st: Stats;
  try {
    st = lstatSync(path);
  } catch (e) {
    return done(undefined, `cannot stat ${path}: ${errMsg(e)}`);
  }
  if (!st.isDirectory()) return done(undefined, `${path} is not a directory`);
  let rootFd: number;
  try {
    rootFd = openSync(path, DIR_FLAGS);
  } catch (e) {
    return done(undefined, `cannot open ${path}: ${errMsg(e)}`);
  }
  try {
    const checked = await checkMount(path, st, rootFd, opts.mountInfoPath);
    if (typeof checked === 'string') return done(undefined, `${checked}; nothing was removed`);
    const root: Dir = {
      fd: rootFd,
      prefix: Buffer.from(`${fdPath(rootFd)}/`),
      parent: undefined,
      name: Buffer.alloc(0),
      dev: st.dev,
      ino: st.ino,
      nested: nestedMounts(path, checked.table),
      names: [],
      next: 0,
      complete: true,
    };
    const w: Walk = {
      mountPath: path,
      rootDev: st.dev,
      rootMnt: checked.id,
      signal: opts.signal,
      skipped: [],
      errors: [],
      errorCount: 0,
      removed: 0,
      ops: 0,
      lastYield: performance.now(),
    };
    if (w.signal?.aborted) return done(w, 'cleanup aborted');
    try {
      list(root);
    } catch (e) {
      return done(w, `cannot list ${path}: ${errMsg(e)}`);
    }
    if (!(await walk(w, root))) return done(w, 'cleanup aborted');
    return done(w, verdict(w, root));
  } finally {
    closeSync(rootFd);
  }
}

/** Rule 1: the mount table entry of `path`, read now, must be the mount `fd` is on. Returns it, or why not. */
async function checkMount(
  path: string,
  st: Stats,
  fd: number,
  mountInfoPath: string | undefined,
): Promise<{ id: number; table: readonly MountEntry[] } | string> {
  let table: readonly MountEntry[];
  let rootMnt: number;
  try {
    const fst = fstatSync(fd);
    if (fst.dev !== st.dev || fst.ino !== st.ino) return `${path} changed while it was opened`;
    rootMnt = mountIdOf(fd);
    table = (await readMountTable(mountInfoPath)).entries;
  } catch (e) {
    return `cannot check that ${path} is still the volume's mount point: ${errMsg(e)}`;
  }
  const bytes = toBytePath(path);
  const entry = table.findLast((m) => m.mountPointBytes === bytes);
  if (!entry) return `${path} is not a mount point any more (unmounted?)`;
  if (makeDev(entry.major, entry.minor) !== st.dev) {
    return `device changed: ${path} is on device ${formatDev(st.dev)}, the mount table lists ${entry.major}:${entry.minor} for it`;
  }
  if (entry.id !== rootMnt) return `${path} is not the mount in the mount table (mount ID ${rootMnt}, listed ${entry.id}): unmounted or remounted`;
  return { id: rootMnt, table };
}

function nestedMounts(path: string, table: readonly MountEntry[]): ReadonlySet<string> {
  const prefix = toBytePath(path === '/' ? '/' : `${path}/`);
  const out = new Set<string>();
  for (const m of table) if (m.mountPointBytes.startsWith(prefix)) out.add(m.mountPointBytes.slice(prefix.length));
  return out.size === 0 ? NO_NESTED : out;
}

/** Rule 4 and the summary: undefined when the clean succeeded. */
function verdict(w: Walk, root: Dir): string | undefined {
  const problems: string[] = [];
  if (w.skipped.length > 0) problems.push(listed(w.skipped.slice(0, MAX_LISTED), w.skipped.length, 'entries are on another mount and were not removed (unmount them)'));
  if (w.errorCount === 1) problems.push(w.errors[0] as string);
  else if (w.errorCount > 1) problems.push(listed(w.errors, w.errorCount, 'errors'));
  if (problems.length > 0) return problems.join('; ');
  let left: Buffer[];
  try {
    left = readdirSync(fdPath(root.fd), { encoding: 'buffer' });
  } catch (e) {
    return `cannot list ${w.mountPath} after the clean: ${errMsg(e)}`;
  }
  if (left.length === 0) return undefined;
  const shown = left.slice(0, MAX_LISTED).map((n) => JSON.stringify(displayName(n)));
  return listed(shown, left.length, `entries are still in ${w.mountPath} after the clean`);
}

/**
 * Removes the tree below `root`; false when aborted. Closes every fd it opened.
 *
 * Bounded fds at any depth: besides the root, only the deepest MAX_OPEN_DIRS directories of the stack keep their
 * fd (always the top ones: entering a directory closes the shallowest open one beyond that). Going back up to a
 * directory whose fd was closed re-opens it as `..` of the child still open (O_NOFOLLOW|O_DIRECTORY), never by
 * name: no name is resolved again, so a directory swapped for a symlink meanwhile cannot be followed. The
 * re-opened fd must be the (st_dev, st_ino) recorded on the way down and on the root's mount; otherwise the tree
 * was moved or replaced under the clean and the walk stops there: the clean fails and is retried from the root.
 */
async function walk(w: Walk, root: Dir): Promise<boolean> {
  const stack: Dir[] = [root];
  let open = 0; // directories of the stack besides the root with an open fd: always the top `open` ones
  try {
    for (;;) {
      if (w.signal?.aborted) return false;
      if (++w.ops >= OPS_PER_YIELD || performance.now() - w.lastYield >= YIELD_AFTER_MS) {
        await yieldToLoop();
        w.ops = 0;
        w.lastYield = performance.now();
        if (w.signal?.aborted) return false;
      }
      const top = stack.at(-1) as Dir;
      const name = top.names[top.next++];
      if (name !== undefined) {
        const sub = visit(w, top, name);
        if (sub) {
          stack.push(sub);
          if (++open > MAX_OPEN_DIRS) {
            closeDir(stack[stack.length - open] as Dir);
            open--;
          }
        }
        continue;
      }
      if (top === root) return true;
      const parent = top.parent as Dir;
      if (parent.fd < 0) {
        if (!reopen(w, parent, top)) return true; // reported; nothing above can be removed by handle any more
        open++;
      }
      stack.pop();
      closeDir(top);
      open--;
      if (top.complete) remove(w, parent, top.name, true);
      else parent.complete = false;
    }
  } finally {
    for (const d of stack) if (d !== root) closeDir(d);
  }
}

/** Re-opens `dir` (fd closed) as `..` of its open child `from`; false, with the error reported, when it changed. */
function reopen(w: Walk, dir: Dir, from: Dir): boolean {
  let fd: number;
  try {
    fd = openSync(Buffer.concat([from.prefix, DOTDOT]), DIR_FLAGS);
  } catch (e) {
    fail(w, dir, undefined, `cannot go back up to it: ${errCode(e) ?? errMsg(e)}; the tree was moved during the clean`);
    return false;
  }
  let why: string | undefined;
  try {
    const fst = fstatSync(fd);
    if (fst.dev !== dir.dev || fst.ino !== dir.ino) why = 'was moved or replaced during the clean; not re-entered';
    else if (mountIdOf(fd) !== w.rootMnt) why = 'is on another mount now; not re-entered';
  } catch (e) {
    why = `cannot check it when going back up: ${errMsg(e)}`;
  }
  if (why !== undefined) {
    closeSync(fd);
    fail(w, dir, undefined, why);
    return false;
  }
  setFd(dir, fd);
  return true;
}

/** Records an error (only the first MAX_LISTED texts are made and kept); `dir` is then not complete. */
function report(w: Walk, dir: Dir, text: () => string): undefined {
  dir.complete = false;
  if (w.errors.length < MAX_LISTED) w.errors.push(text());
  w.errorCount++;
  return undefined;
}

/** Records an error about `name` in `dir` (or about `dir` itself). */
const fail = (w: Walk, dir: Dir, name: Buffer | undefined, why: string): undefined => report(w, dir, () => `${show(w, dir, name)}: ${why}`);

function skip(w: Walk, dir: Dir, name: Buffer): undefined {
  dir.complete = false;
  w.skipped.push(show(w, dir, name));
  return undefined;
}

/** Unlinks or rmdirs `name` in `parent`; counts or reports the outcome. */
function remove(w: Walk, parent: Dir, name: Buffer, dir: boolean): void {
  try {
    const p = Buffer.concat([parent.prefix, name]);
    if (dir) rmdirSync(p);
    else unlinkSync(p);
    w.removed++;
  } catch (e) {
    const code = errCode(e);
    if (code === 'ENOENT') return;
    if (code === 'EBUSY') skip(w, parent, name);
    else report(w, parent, () => `remove ${show(w, parent, name)}: ${code ?? errMsg(e)}`);
  }
}

/** Handles one entry of `parent`: removes a non-directory, or returns the opened directory to descend into. */
function visit(w: Walk, parent: Dir, name: Buffer): Dir | undefined {
  const path = Buffer.concat([parent.prefix, name]);
  let st: Stats | undefined;
  try {
    st = lstatSync(path, { throwIfNoEntry: false });
  } catch (e) {
    return fail(w, parent, name, `cannot stat: ${errCode(e) ?? errMsg(e)}`);
  }
  if (!st) return undefined; // gone meanwhile
  if (st.dev !== w.rootDev || (parent.nested.size > 0 && parent.nested.has(name.toString('latin1')))) return skip(w, parent, name);
  if (!st.isDirectory()) {
    remove(w, parent, name, false);
    return undefined;
  }
  let fd: number;
  try {
    fd = openSync(path, DIR_FLAGS);
  } catch (e) {
    const code = errCode(e);
    if (code === 'ENOENT') return undefined;
    if (code === 'ELOOP' || code === 'ENOTDIR') return fail(w, parent, name, 'was replaced by a symlink or a non-directory during the clean; not followed');
    return fail(w, parent, name, `cannot open: ${code ?? errMsg(e)}`);
  }
  try {
    const fst = fstatSync(fd);
    if (fst.dev !== st.dev || fst.ino !== st.ino) throw new Error('was replaced by another directory during the clean; not entered');
    if (mountIdOf(fd) !== w.rootMnt) {
      closeSync(fd);
      return skip(w, parent, name);
    }
    const dir: Dir = {
      fd,
      prefix: Buffer.from(`${fdPath(fd)}/`),
      parent,
      name,
      dev: fst.dev,
      ino: fst.ino,
      nested: nestedBelow(parent, name),
      names: [],
      next: 0,
      complete: true,
    };
    list(dir);
    return dir;
  } catch (e) {
    closeSync(fd);
    return fail(w, parent, name, errMsg(e));
  }
}
