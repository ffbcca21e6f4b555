/**
 * IPv4 CIDR syntax for the network-domain form. Overlaps and policy (private ranges, clusters'
 * pod/service CIDRs, other domains) are the server's call through `POST /domains:check`; this only
 * says whether the text is worth sending.
 */

export type CidrCheck =
  | { kind: 'empty' }
  | { kind: 'syntax' }
  | { kind: 'host_bits'; network: string }
  | { kind: 'ok'; addresses: number };

function toInt(parts: number[]): number {
  return ((parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]) >>> 0;
}

function toDotted(value: number): string {
  return [24, 16, 8, 0].map((shift) => (value >>> shift) & 255).join('.');
}

export function checkCidr(input: string): CidrCheck {
  const text = input.trim();
  if (!text) return { kind: 'empty' };
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text);
  if (!match) return { kind: 'syntax' };
  const parts = match.slice(1, 5).map(Number);
  const prefix = Number(match[5]);
  if (parts.some((p) => p > 255) || prefix > 32 || match.slice(1, 5).some((p) => p.length > 1 && p.startsWith('0'))) {
    return { kind: 'syntax' };
  }
  const value = toInt(parts);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  if ((value & mask) >>> 0 !== value) return { kind: 'host_bits', network: `${toDotted((value & mask) >>> 0)}/${prefix}` };
  return { kind: 'ok', addresses: 2 ** (32 - prefix) };
}
