/**
 * Where a field lives in a YAML text. The server names fields by path — `spec.tasks[1].nodeSelector`,
 * `spec.env["MY-VAR"]` — and this finds the line of that field's key (or item) in the text the
 * user sees, or of its nearest ancestor present there when the field itself is missing.
 */
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Node as YamlNode } from 'yaml';

/** The path's segments: names and list indexes; null when it is not a path the server writes. */
export function pathSegments(path: string): Array<string | number> | null {
  const out: Array<string | number> = [];
  const token = /(?:^|\.)([A-Za-z_$][\w$-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]/y;
  let at = 0;
  while (at < path.length) {
    token.lastIndex = at;
    const m = token.exec(path);
    if (!m) return null;
    if (m[1] !== undefined) out.push(m[1]);
    else if (m[2] !== undefined) out.push(Number(m[2]));
    else out.push(JSON.parse(m[3]) as string);
    at = token.lastIndex;
  }
  return out;
}

/** 1-based line of `field` in `text`; null when the text is not YAML or the path is unreadable. */
export function lineOfField(text: string, field: string): number | null {
  const segments = pathSegments(field);
  if (!text || segments === null) return null;
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter });
  if (doc.errors.length || !doc.contents) return null;
  const lineAt = (offset: number) => counter.linePos(offset).line;
  let node: unknown = doc.contents;
  let line = lineAt((doc.contents as YamlNode).range?.[0] ?? 0);
  for (const segment of segments) {
    if (isMap(node)) {
      const pair = node.items.find((p) => (isScalar(p.key) ? String(p.key.value) : p.key) === String(segment));
      if (!pair) break;
      const key = pair.key as YamlNode;
      if (key.range) line = lineAt(key.range[0]);
      node = pair.value;
    } else if (isSeq(node) && typeof segment === 'number') {
      const item = node.items[segment] as YamlNode | undefined;
      if (!item) break;
      if (item.range) line = lineAt(item.range[0]);
      node = item;
    } else {
      break;
    }
  }
  return line;
}
