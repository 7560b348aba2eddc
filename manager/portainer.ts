/**
 * Portainer's outward forms (portainer/portainer 2.23.0, api/portainer.go and pkg/libhttp): error
 * bodies, stack and environment JSON, stack name normalisation. Real clients decode these, so the
 * field names and numbers follow Portainer exactly.
 */

export const PORTAINER_VERSION = '2.23.0';

/** An error a client sees as Portainer's `{ message, details }` with Portainer's status code. */
export class PortainerError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
    readonly details: string = message,
    /** Seconds, sent as Retry-After (429). */
    readonly retryAfter?: number,
  ) {
    super(message);
  }
}

/** Portainer's NormalizeStackName (api/exec/common.go): lowercase, then drop all but `-_a-z0-9`. */
export function normaliseStackName(name: string): string {
  return name.toLowerCase().replace(/[^-_a-z0-9]+/g, '');
}

export interface EnvPair {
  name: string;
  value: string;
}

/** A stack the tool deployed and can update (spec 2.6). */
export interface StackRecord {
  Id: number;
  Name: string;
  EndpointId: number;
  Env: EnvPair[];
  /** 1 active, 2 inactive. */
  Status: 1 | 2;
  CreationDate: number;
  CreatedBy: string;
  UpdateDate: number;
  UpdatedBy: string;
}

export interface EndpointRecord {
  Id: number;
  Name: string;
}

export const ENTRY_POINT = 'docker-compose.yml';
export const LOCAL_ENGINE_URL = 'unix:///var/run/docker.sock';

/** The Stack JSON of Portainer 2.23 for a standalone compose stack. */
export function stackJson(stack: StackRecord, projectPath: string) {
  return {
    Id: stack.Id,
    Name: stack.Name,
    Type: 2,
    EndpointId: stack.EndpointId,
    SwarmId: '',
    EntryPoint: ENTRY_POINT,
    Env: stack.Env,
    ResourceControl: null,
    Status: stack.Status,
    ProjectPath: projectPath,
    CreationDate: stack.CreationDate,
    CreatedBy: stack.CreatedBy,
    UpdateDate: stack.UpdateDate,
    UpdatedBy: stack.UpdatedBy,
    AdditionalFiles: null,
    AutoUpdate: null,
    Option: null,
    GitConfig: null,
    FromAppTemplate: false,
    Namespace: '',
    IsComposeFormat: true,
  };
}

/**
 * A compose project deployed outside the tool (the sandbox's own `manager` project, a user's
 * `docker compose up`): listed so clients see the name is taken, but it has no Id the tool could
 * update it by (spec 4.5: shown, not editable).
 */
export function externalStackJson(name: string, endpointId: number, running: boolean) {
  return {
    ...stackJson({ Id: 0, Name: name, EndpointId: endpointId, Env: [], Status: running ? 1 : 2, CreationDate: 0, CreatedBy: '', UpdateDate: 0, UpdatedBy: '' }, ''),
    EntryPoint: '',
    External: true,
  };
}

/** The Endpoint (environment) JSON: always the sandbox's own engine, reached over its socket. */
export function endpointJson(endpoint: EndpointRecord) {
  return {
    Id: endpoint.Id,
    Name: endpoint.Name,
    Type: 1,
    URL: LOCAL_ENGINE_URL,
    GroupId: 1,
    PublicURL: '',
    Status: 1,
    Snapshots: [],
    TagIds: [],
    TLSConfig: { TLS: false, TLSSkipVerify: false },
    ContainerEngine: 'docker',
    UserAccessPolicies: {},
    TeamAccessPolicies: {},
    Gpus: [],
    EdgeID: '',
    EdgeCheckinInterval: 0,
    Kubernetes: null,
  };
}

/** Request keys are case-insensitive in Portainer (its decoder matches them so): lowercase them here. */
export function lowercaseKeys(body: unknown): unknown {
  if (!isPlainObject(body)) return body;
  return Object.fromEntries(
    Object.entries(body).map(([k, v]) => [k.toLowerCase(), Array.isArray(v) ? v.map((item) => (isPlainObject(item) ? lowercaseKeys(item) : item)) : v]),
  );
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
