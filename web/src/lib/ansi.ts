/**
 * ANSI escape sequences in worker logs: colours and bold/italic/underline become styled runs (read
 * by anser), every other control sequence — cursor moves, erase-line, window titles — is dropped, so
 * the log viewer never shows escape bytes.
 */
import Anser from 'anser';
import type { CSSProperties } from 'react';

export interface AnsiRun {
  text: string;
  style?: CSSProperties;
}

// Sequences anser leaves in the text: OSC (title, hyperlink) ended by BEL or ST, then any other
// escape (a CSI with its parameters, or a two-byte one), then a stray ESC.
const LEFTOVER = /\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|\x1b/g;

/** The text without any escape sequence. */
export function stripAnsi(text: string): string {
  return Anser.ansiToText(text).replace(LEFTOVER, '');
}

function styleOf(entry: Anser.AnserJsonEntry): CSSProperties | undefined {
  const style: CSSProperties = {};
  const reverse = entry.decorations.includes('reverse');
  const fg = entry.fg ? `rgb(${entry.fg})` : undefined;
  const bg = entry.bg ? `rgb(${entry.bg})` : undefined;
  const [color, background] = reverse ? [bg ?? '#0b1021', fg ?? '#d6deeb'] : [fg, bg];
  if (color) style.color = color;
  if (background) style.backgroundColor = background;
  if (entry.decorations.includes('bold')) style.fontWeight = 'bold';
  if (entry.decorations.includes('dim')) style.opacity = 0.7;
  if (entry.decorations.includes('italic')) style.fontStyle = 'italic';
  const lines = [entry.decorations.includes('underline') && 'underline', entry.decorations.includes('strikethrough') && 'line-through'].filter(Boolean);
  if (lines.length) style.textDecoration = lines.join(' ');
  if (entry.decorations.includes('hidden')) style.visibility = 'hidden';
  return Object.keys(style).length ? style : undefined;
}

/** One log line as runs of text, each with the style its SGR codes set (none for plain text). */
export function ansiRuns(line: string): AnsiRun[] {
  if (!line.includes('\x1b')) return [{ text: line }];
  return Anser.ansiToJson(line, { remove_empty: true })
    .map((entry) => ({ text: entry.content.replace(LEFTOVER, ''), style: styleOf(entry) }))
    .filter((run) => run.text.length > 0);
}
