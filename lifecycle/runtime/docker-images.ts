import type Docker from 'dockerode';
import { guarded, statusCode } from './engine-client.ts';

/* The images of one engine (DockerRuntime's part): which build an image is, and moving images between engines. */

/** The svc.inputs label of an image on the engine that runs sandboxes (which build it is); undefined if it is missing. */
export function imageInputs(docker: Docker, image: string): Promise<string | undefined> {
  return guarded(async () => {
    try {
      return (await docker.getImage(image).inspect()).Config.Labels?.['svc.inputs'] ?? '';
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
  });
}

/** `docker save` of an image of the engine that runs sandboxes, to load into a sandbox's own engine. */
export function saveImage(docker: Docker, image: string): Promise<NodeJS.ReadableStream> {
  return guarded(() => docker.getImage(image).get());
}

/** The id of an image on this engine (which build it is, exactly); undefined if it is missing. */
export function imageId(docker: Docker, image: string): Promise<string | undefined> {
  return guarded(async () => {
    try {
      return (await docker.getImage(image).inspect()).Id;
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
  });
}

/** `docker load` of a `docker save` stream: its images, with their tags, onto this engine; `signal` ends it. */
export function loadImage(docker: Docker, tar: NodeJS.ReadableStream, signal?: AbortSignal): Promise<void> {
  return guarded(async () => {
    const progress = await docker.loadImage(tar, { quiet: true, ...(signal ? { abortSignal: signal } : {}) });
    await new Promise<void>((resolve, reject) => {
      docker.modem.followProgress(progress, (err: Error | null, events: Array<{ error?: string }>) => {
        const failed = err ?? events.find((e) => e.error);
        if (failed) reject(failed instanceof Error ? failed : new Error(`docker load failed: ${failed.error}`));
        else resolve();
      });
    });
  });
}
