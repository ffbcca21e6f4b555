import { describe, expect, it } from 'vitest';
import { ApiError } from '../api/client';
import { staleKeysFor } from '../api/live';
import { clusterTotals, normalizeCluster, normalizeNode } from '../api/normalize';
import { formFieldFor } from '../components/ApiErrorAlert';
import { checkCidr } from '../lib/cidr';
import { parseTerm, selectorQuery } from '../lib/selector';
import { checkPublicKey, looksLikePrivateKey } from '../lib/sshKey';
import { linesOf, textLines } from '../pages/jobs/LogViewer';
import { PRIVATE_KEY, PUBLIC_KEY } from './helpers';

describe('ssh key check', () => {
  it('recognises private keys in every common armour', () => {
    expect(looksLikePrivateKey(PRIVATE_KEY)).toBe(true);
    expect(looksLikePrivateKey('-----BEGIN RSA PRIVATE KEY-----\nMIIE...')).toBe(true);
    expect(looksLikePrivateKey('PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none')).toBe(true);
    expect(looksLikePrivateKey(PUBLIC_KEY)).toBe(false);
  });

  it('accepts a real public key and refuses a type that does not match its data', () => {
    expect(checkPublicKey(PUBLIC_KEY)).toMatchObject({ kind: 'ok', type: 'ssh-ed25519', comment: 'alice@laptop' });
    expect(checkPublicKey(PUBLIC_KEY.replace('ssh-ed25519', 'ssh-rsa'))).toMatchObject({ kind: 'type_mismatch', embedded: 'ssh-ed25519' });
    expect(checkPublicKey('ssh-ed25519 AAAA!!!')).toEqual({ kind: 'bad_base64' });
    expect(checkPublicKey(`${PUBLIC_KEY}\n${PUBLIC_KEY}`)).toEqual({ kind: 'multiple_lines' });
  });
});

describe('cidr syntax', () => {
  it('accepts networks and points out host bits', () => {
    expect(checkCidr('10.100.0.0/16')).toEqual({ kind: 'ok', addresses: 65536 });
    expect(checkCidr('10.100.1.0/16')).toEqual({ kind: 'host_bits', network: '10.100.0.0/16' });
    expect(checkCidr('10.100.0/16').kind).toBe('syntax');
    expect(checkCidr('300.1.1.0/24').kind).toBe('syntax');
    expect(checkCidr('10.0.0.0/33').kind).toBe('syntax');
  });
});

describe('selectors', () => {
  it('parses label terms and drops invalid ones from queries', () => {
    expect(parseTerm('rlark.io/gpu-model=A100')).toEqual({ key: 'rlark.io/gpu-model', value: 'A100' });
    expect(parseTerm('no-equals')).toBeNull();
    expect(parseTerm('bad key=x')).toBeNull();
    expect(selectorQuery(['a=1', 'oops', 'b=2'])).toBe('a=1,b=2');
  });
});

describe('api error fields', () => {
  it('maps indexed and nested API field paths to form fields', () => {
    expect(formFieldFor('pod_cidrs[1]', ['name', 'pod_cidrs'])).toBe('pod_cidrs');
    expect(formFieldFor('name', ['name', 'pod_cidrs'])).toBe('name');
    expect(formFieldFor('labels.zone', ['labels'])).toBe('labels');
    expect(formFieldFor('other', ['name'])).toBeNull();
  });

  it('lists the main field first and detail fields after it, without repeats', () => {
    const error = new ApiError(422, 'invalid_request', 'name: too long', 'name', [
      { field: 'name', message: 'name: too long' },
      { field: 'public_key', message: 'not a key' },
    ]);
    expect(error.fieldErrors().map(({ field, message }) => ({ field, message }))).toEqual([
      { field: 'name', message: 'name: too long' },
      { field: 'public_key', message: 'not a key' },
    ]);
    // Each keeps what the server said, to be rendered in the user's language (ADR 0011).
    expect(error.fieldErrors()[0].said).toMatchObject({ code: 'invalid_request', message: 'name: too long' });
  });
});

describe('live events', () => {
  it('marks the queries an event affects as stale', () => {
    expect(staleKeysFor({ type: 'scheduler.job.status_changed.v1', data: { job_id: 'j1' } })).toContainEqual(['job', 'j1']);
    expect(staleKeysFor({ type: 'inventory.node.updated.v1' })).toContainEqual(['nodes']);
    expect(staleKeysFor({ type: 'keys.key.added.v1' })).toEqual([['keys']]);
    expect(staleKeysFor({ type: 'unrelated.thing.v1' })).toEqual([]);
  });
});

describe('tolerant readers', () => {
  it('reads a cluster summary nested or flat', () => {
    const flat = normalizeCluster({ name: 'a', online: true, nodes_total: 4, nodes_online: 3, gpus_total: 8, gpus_free: 2 } as never);
    expect(flat.summary).toMatchObject({ nodes_total: 4, nodes_online: 3, nodes_offline: 1, online_rate: 0.75, gpus_free: 2 });
  });

  it('reads allocatable GPUs of a summary, from the capacity when an older gateway leaves them out', () => {
    const old = normalizeCluster({ name: 'a', online: true, summary: { gpus_total: 8, gpus_free: 8 } } as never);
    expect(old.summary).toMatchObject({ gpus_allocatable: 8, gpus_allocated: 0, gpus_allocated_foreign: 0 });
  });

  it('takes the overview from the API totals, else sums the listed clusters', () => {
    const a = normalizeCluster({ name: 'a', online: true, summary: { nodes_total: 2, nodes_online: 2, gpus_total: 16, gpus_allocatable: 16, gpus_allocated: 8, gpus_free: 8, running_jobs: 1 } } as never);
    const b = normalizeCluster({ name: 'b', online: false, summary: { nodes_total: 1, nodes_online: 0, gpus_total: 4, gpus_allocatable: 4, gpus_allocated: 4, gpus_allocated_foreign: 4, gpus_free: 0 } } as never);
    expect(clusterTotals({ items: [a, b] })).toMatchObject({
      clusters: 2, clusters_online: 1, nodes_total: 3, gpus_allocatable: 20, gpus_allocated: 12, gpus_allocated_foreign: 4, gpus_free: 8,
    });
    const fromApi = clusterTotals({ items: [a], totals: { ...b.summary, gpus_allocated: 3, clusters: 9, clusters_online: 5 } });
    expect(fromApi).toMatchObject({ clusters: 9, clusters_online: 5, gpus_allocated: 3 });
  });

  it('derives node status and free GPUs', () => {
    const node = normalizeNode({ cluster: 'a', name: 'n', ready: true, schedulable: false, gpu_count: 8, gpu_allocatable: 8, gpu_allocated: 3, labels: {} } as never);
    expect(node.status).toBe('cordoned');
    expect(node.gpu_free).toBe(5);
  });
});

describe('log lines', () => {
  it('reads SSE payloads and stored logs as JSON or text', () => {
    expect(linesOf('{"line":"ray head up"}')).toEqual(['ray head up']);
    expect(linesOf('{"lines":["a","b"]}')).toEqual(['a', 'b']);
    expect(linesOf('plain text')).toEqual(['plain text']);
    expect(textLines('{"seq":1,"line":"x"}\nraw\n')).toEqual(['x', 'raw']);
  });
});
