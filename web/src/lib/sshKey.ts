/**
 * Client-side check of a pasted SSH key, for immediate feedback before anything is sent.
 *
 * The server is the authority (type, size, duplicates); this only catches what must never leave
 * the browser — a private key — and the obvious mistakes (wrong format, several lines, a type that
 * does not match the key blob). A private key is recognised by its armour lines or PuTTY header.
 */

export const PUBLIC_KEY_TYPES = [
  'ssh-ed25519',
  'ssh-rsa',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'sk-ssh-ed25519@openssh.com',
  'sk-ecdsa-sha2-nistp256@openssh.com',
] as const;

export type KeyCheck =
  | { kind: 'empty' }
  | { kind: 'private_key' }
  | { kind: 'multiple_lines' }
  | { kind: 'unknown_type'; type: string }
  | { kind: 'bad_base64' }
  | { kind: 'type_mismatch'; declared: string; embedded: string }
  | { kind: 'ok'; type: string; comment: string; blob: Uint8Array };

const PRIVATE_MARKERS = [
  /-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----/,
  /PuTTY-User-Key-File-\d+:/,
  /-----BEGIN SSH2 ENCRYPTED PRIVATE KEY-----/,
];

export function looksLikePrivateKey(text: string): boolean {
  return PRIVATE_MARKERS.some((marker) => marker.test(text));
}

function decodeBase64(text: string): Uint8Array | null {
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text) || text.length % 4 !== 0) return null;
  try {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
    return bytes;
  } catch {
    return null;
  }
}

/** The key type written inside an OpenSSH public key blob (a length-prefixed string). */
function embeddedType(blob: Uint8Array): string | null {
  if (blob.length < 4) return null;
  const length = ((blob[0] << 24) | (blob[1] << 16) | (blob[2] << 8) | blob[3]) >>> 0;
  if (length === 0 || length > 64 || 4 + length > blob.length) return null;
  return String.fromCharCode(...blob.slice(4, 4 + length));
}

export function checkPublicKey(input: string): KeyCheck {
  const text = input.trim();
  if (!text) return { kind: 'empty' };
  if (looksLikePrivateKey(text)) return { kind: 'private_key' };
  if (text.split(/\r?\n/).filter((line) => line.trim()).length > 1) return { kind: 'multiple_lines' };
  const [type, data = '', ...rest] = text.split(/\s+/);
  if (!(PUBLIC_KEY_TYPES as readonly string[]).includes(type)) return { kind: 'unknown_type', type };
  const blob = decodeBase64(data);
  if (!blob) return { kind: 'bad_base64' };
  const embedded = embeddedType(blob);
  if (embedded !== type) return { kind: 'type_mismatch', declared: type, embedded: embedded ?? '?' };
  return { kind: 'ok', type, comment: rest.join(' '), blob };
}

/** `SHA256:...` as `ssh-keygen -l` prints it, or null where WebCrypto is unavailable (http). */
export async function fingerprintOf(blob: Uint8Array): Promise<string | null> {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) return null;
  const digest = new Uint8Array(await subtle.digest('SHA-256', blob as BufferSource));
  let binary = '';
  for (const byte of digest) binary += String.fromCharCode(byte);
  return `SHA256:${btoa(binary).replace(/=+$/, '')}`;
}
