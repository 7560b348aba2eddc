import type { RuntimeApi } from './runtime-api.ts';
import { ENGINE_TABLE, SANDBOX_TUNNELS } from './haproxy-config.ts';
import type { RuntimeWrites } from './runtime-writes.ts';

/**
 * The tunnels Node's edge carries, counted in HAProxy's per-sandbox entry (gpc0 of SANDBOX_TUNNELS,
 * which HAProxy adds to the tunnels it carries itself; shells and TCP twins in gpc1 too, for their
 * share), so a sandbox's tunnel caps hold for both processes together.
 */
export class NodeTunnels {
  /** Carried tunnels Node holds, per sandbox. */
  private readonly all = new Map<string, number>();
  /** Of those, shells and TCP twins. */
  private readonly shells = new Map<string, number>();

  constructor(private readonly writes: RuntimeWrites) {}

  /**
   * A tunnel Node carries from now on (its TLS ended, or dockerd accepted its client): its place is
   * taken in HAProxy's count of the sandbox's tunnels (`shell`: a shell's or TCP twin's, in their share too).
   * Returns the release, or null when the sandbox already has its tunnels (or shells) at the cap.
   */
  async admit(sandbox: string, shell: boolean, caps: { tunnelsPerSandbox: number; shellTunnelsPerSandbox: number }): Promise<(() => void) | null> {
    // taken before HAProxy is asked: two connections admitted at once both see each other
    const add = (counts: Map<string, number>, n: number) => {
      const left = (counts.get(sandbox) ?? 0) + n;
      if (left > 0) counts.set(sandbox, left);
      else counts.delete(sandbox);
    };
    add(this.all, 1);
    if (shell) add(this.shells, 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      add(this.all, -1);
      if (shell) add(this.shells, -1);
      void this.writes.enqueue((api) => this.write(api, sandbox));
    };
    const carried = async (table: string) => (await this.writes.api?.tableEntry(table, sandbox).catch(() => undefined))?.conn_cur ?? 0;
    const shells = await carried(SANDBOX_TUNNELS);
    const all = shells + (await carried(ENGINE_TABLE)) + (this.all.get(sandbox) ?? 0);
    if (all > caps.tunnelsPerSandbox || (shell && shells + (this.shells.get(sandbox) ?? 0) > caps.shellTunnelsPerSandbox)) {
      release();
      return null;
    }
    // in HAProxy's count before the tunnel carries a byte: else a connection HAProxy takes meanwhile
    // (the name just put in its map) would not see this one, and the cap let one more through
    await this.writes.enqueue((api) => this.write(api, sandbox));
    return release;
  }

  /** A (re)started HAProxy: every sandbox's count is written again. */
  async attach(api: RuntimeApi): Promise<void> {
    for (const sandbox of this.all.keys()) await this.write(api, sandbox);
  }

  private async write(api: RuntimeApi, sandbox: string): Promise<void> {
    await api.setTableData(SANDBOX_TUNNELS, sandbox, 'gpc0', this.all.get(sandbox) ?? 0);
    await api.setTableData(SANDBOX_TUNNELS, sandbox, 'gpc1', this.shells.get(sandbox) ?? 0);
  }
}
