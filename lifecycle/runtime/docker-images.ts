import type Docker from 'dockerode';
import { guarded, statusCode } from './engine-client.ts';

/* The images of one engine (DockerRuntime's part): which build an image is, and its `docker save`. */

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
