/**
 * A job's output files through the gateway (issue 15.3, ADR 0010): listed from the workers' cluster agents
 * (or the scheduler's manifest when an agent is offline), downloaded as a file or a directory's tar stream.
 * Downloads (and the job's tools) are plain links: the browser streams them with the session cookie, no memory in the page.
 */
import { API_BASE, api, buildUrl } from './client';

export interface ListedFile {
  worker: string;
  path: string;
  size: number;
  /** Unix seconds; null where only the scheduler's manifest answered. */
  mtime: number | null;
}

export interface WorkerListing {
  worker: string;
  source: 'agent' | 'manifest' | 'unavailable';
  truncated: boolean;
  reason: string | null;
}

export interface OutputsListing {
  job_id: string;
  files: ListedFile[];
  workers: WorkerListing[];
}

const enc = encodeURIComponent;

export const outputsApi = {
  list: (jobId: string) => api.get<OutputsListing>(`/jobs/${enc(jobId)}/outputs`),
  downloadUrl: (jobId: string, worker: string | undefined, path: string) =>
    buildUrl(`/jobs/${enc(jobId)}/outputs/download`, { worker, path }),
  /**
   * Opens a job's tool (`tensorboard`: its Header's agent starts the server on demand; `ray-dashboard`: while it
   * runs). The gateway answers with a one-time ticket for its tools origin, where the tool is served (ADR 0012).
   */
  toolUrl: (jobId: string, tool: 'tensorboard' | 'ray-dashboard') => `${API_BASE}/jobs/${enc(jobId)}/tools/${tool}/`,
};
