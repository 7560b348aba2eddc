import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { EndpointRecord, StackRecord } from './portainer.ts';

/** An API key as stored: the digest only; the raw key is shown once. */
export interface ApiKeyRecord {
  id: number;
  userId: number;
  description: string;
  /** The first 7 characters (`ptr_` and 3 more), as Portainer shows them. */
  prefix: string;
  dateCreated: number;
  lastUsed: number;
  /** base64 of sha256 of the raw key. */
  digest: string;
}

interface StateFile {
  instanceId: string;
  /** HMAC key of this tool's JWTs: a JWT of another sandbox's tool does not verify here. */
  jwtSecret: string;
  adminPasswordHash?: string;
  nextStackId: number;
  nextEndpointId: number;
  nextKeyId: number;
  stacks: StackRecord[];
  endpoints: EndpointRecord[];
  apiKeys: ApiKeyRecord[];
}

/**
 * Everything the tool keeps, in one JSON file in its data volume (written whole, atomically, mode
 * 0600); the stacks' compose files live beside it in compose/<Id>/. One process owns it, and every
 * change goes through `update`, one at a time.
 */
export class ManagerState {
  private writing: Promise<void> = Promise.resolve();

  private constructor(
    private readonly file: string,
    private data: StateFile,
  ) {}

  static async open(dataDir: string): Promise<ManagerState> {
    await fs.promises.mkdir(dataDir, { recursive: true, mode: 0o700 });
    const file = path.join(dataDir, 'manager.json');
    let data: StateFile;
    try {
      data = JSON.parse(await fs.promises.readFile(file, 'utf8')) as StateFile;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`cannot read ${file}: ${(err as Error).message}`);
      data = {
        instanceId: randomUUID(),
        jwtSecret: randomBytes(32).toString('base64'),
        nextStackId: 1,
        nextEndpointId: 2,
        nextKeyId: 1,
        stacks: [],
        // Portainer's first environment is the local engine; clients expect Id 1
        endpoints: [{ Id: 1, Name: 'local' }],
        apiKeys: [],
      };
    }
    const state = new ManagerState(file, data);
    await state.update(() => undefined);
    return state;
  }

  get current(): Readonly<StateFile> {
    return this.data;
  }

  /** Applies `change` to a copy and writes it; the copy becomes current only once it is on disk. */
  update<T>(change: (data: StateFile) => T): Promise<T> {
    const run = this.writing.then(async () => {
      const next = structuredClone(this.data);
      const result = change(next);
      const tmp = `${this.file}.tmp`;
      await fs.promises.writeFile(tmp, JSON.stringify(next, null, 1), { mode: 0o600 });
      await fs.promises.rename(tmp, this.file);
      this.data = next;
      return result;
    });
    this.writing = run.then(() => undefined, () => undefined);
    return run;
  }
}
