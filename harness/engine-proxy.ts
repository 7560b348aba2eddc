import fs from 'node:fs';
import net from 'node:net';

/**
 * A unix socket that forwards every connection to an engine's socket, which a test can cut, make
 * silent and restore: a service pointed at it sees its engine vanish (connections cut, then no
 * socket) or stop answering (connections accepted, nothing ever comes back: a host powered off
 * behind a link that stays up) and come back, as with a host that goes away, while the engine
 * itself, shared with other runs, is never touched.
 */
export class EngineProxy {
  private server: net.Server | undefined;
  private readonly open = new Set<net.Socket>();
  private silent = false;

  private constructor(readonly path: string, private readonly target: string) {}

  /** Listens at `path` (a file path), forwarding to the engine at `target` (`unix:///run/…sock`). */
  static async start(path: string, target: string): Promise<EngineProxy> {
    if (!target.startsWith('unix://')) throw new Error(`EngineProxy forwards to a unix socket, not ${target}`);
    const proxy = new EngineProxy(path, target.slice('unix://'.length));
    await proxy.restore();
    return proxy;
  }

  /** The address to give a service as SVC_SANDBOX_DOCKER_HOST. */
  get url(): string {
    return `unix://${this.path}`;
  }

  /** The engine vanishes: open connections are cut (a unix socket has no reset) and the socket goes (connects fail with ENOENT). */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.dropConnections();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    fs.rmSync(this.path, { force: true });
  }

  /** The engine stops answering: open connections are cut, new ones are accepted and never answered. */
  async hang(): Promise<void> {
    await this.listen();
    this.silent = true;
    this.dropConnections();
  }

  /** The engine answers again. */
  async restore(): Promise<void> {
    this.silent = false;
    this.dropConnections(); // the ones held silent
    await this.listen();
  }

  private dropConnections(): void {
    for (const socket of this.open) socket.destroy();
    this.open.clear();
  }

  private track(socket: net.Socket): void {
    this.open.add(socket);
    socket.on('close', () => this.open.delete(socket));
  }

  private async listen(): Promise<void> {
    if (this.server) return;
    fs.rmSync(this.path, { force: true });
    // half-open both ways: an exec's stdin ends while its output still comes (docker's hijacked streams)
    const server = net.createServer({ allowHalfOpen: true }, (client) => {
      this.track(client);
      client.on('error', () => client.destroy());
      if (this.silent) return;
      const engine = net.connect({ path: this.target, allowHalfOpen: true });
      this.track(engine);
      for (const s of [client, engine]) s.on('error', () => { client.destroy(); engine.destroy(); });
      client.pipe(engine);
      engine.pipe(client);
    });
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(this.path, () => resolve()));
    this.server = server;
  }
}
