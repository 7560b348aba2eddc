import { Transform, type Readable } from 'node:stream';
import type { Logger } from '../../core/logger.ts';
import { SingleFlight } from '../../core/keyed-lock.ts';
import type { DockerRuntime } from './docker-runtime.ts';

/** What the copy did: nothing to do, copied, or nothing to copy (this machine lacks the image). */
export type ImageSyncResult = 'in-step' | 'copied' | 'missing-here';

/**
 * Keeps a runner host's sandbox image the same build as this machine's (docs/scale-out.md, "Images
 * on runners"): the two image ids are compared, and a host with another build (or none) gets this
 * machine's by `docker save` → `docker load` over its engine's mutual TLS. Asked before every
 * sandbox made on a runner and before a move's copy to one (not at `svc hosts add`: the runner's
 * engine takes the service's connections only once its certificates are installed, after the add),
 * so a service whose image was rebuilt (an update, `npm run setup`) makes new sandboxes from the new
 * build on every host, as on its own machine. Sandboxes already made keep the build they were made
 * from, on every host alike.
 */
/** A copy that takes longer is given up (the create waiting for it fails; the next one tries again). */
const COPY_DEADLINE_MS = 15 * 60_000;

export class ImageSync {
  private readonly copies = new SingleFlight<ImageSyncResult>();

  constructor(private readonly local: DockerRuntime, private readonly logger: Logger) {}

  /** Copies the sandbox image to `host` unless it has the same build; one copy per host at a time. */
  async ensure(host: string, remote: DockerRuntime): Promise<ImageSyncResult> {
    const image = this.local.sandboxImage;
    const [here, there] = await Promise.all([this.local.imageId(image), remote.imageId(image)]);
    if (here === undefined) return 'missing-here';
    if (here === there) return 'in-step';
    return this.copies.do(host, async () => {
      if ((await remote.imageId(image)) === here) return 'in-step'; // a copy that just finished
      const started = Date.now();
      this.logger.info({ host, image, from: here, was: there ?? null }, 'copying the sandbox image to a host (its build differs from this machine\'s)');
      let bytes = 0;
      const counted = new Transform({
        transform(chunk: Buffer, _encoding, done) {
          bytes += chunk.length;
          done(null, chunk);
        },
      });
      const save = (await this.local.saveImage(image)) as Readable;
      save.on('error', (err) => counted.destroy(err)); // the load then fails with it
      save.pipe(counted);
      try {
        await remote.loadImage(counted, AbortSignal.timeout(COPY_DEADLINE_MS));
      } finally {
        // a load that failed early leaves the save unread: its response from this machine's engine goes
        save.destroy();
        counted.destroy();
      }
      const now = await remote.imageId(image);
      if (now !== here) throw new Error(`the sandbox image copied to host "${host}" is ${now ?? 'missing'}, not ${here}: check that host's engine (docker load)`);
      this.logger.info({ host, image, bytes, ms: Date.now() - started }, 'sandbox image copied to the host');
      return 'copied';
    });
  }
}
