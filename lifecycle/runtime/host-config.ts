// Create options for a sandbox container on the host engine: one container per sandbox, running its own
// dockerd and sshd (sandbox-image/). Only the container's shape lives here; lifecycle/ decides when.
import path from 'node:path';
import type Docker from 'dockerode';
import type { SandboxRuntimeMode } from '../../core/config.ts';

/**
 * Where a sandbox sees its transfer folder: a host folder of the service, mounted read-only, in
 * which the file routes put a named pipe per upload or download (files/transfer-pipes.ts). The
 * bytes then pass between the service and a `cat` in the sandbox without the engine in between.
 */
export const TRANSFER_MOUNT = '/run/svc-transfer';

/** The host folder behind a sandbox's TRANSFER_MOUNT, below the service's transfer root. */
export function transferFolder(root: string, sandbox: string): string {
  return path.join(root, sandbox);
}

export interface SandboxContainerSpec {
  name: string;
  image: string;
  /** host network the sandbox is attached to (its own, so sandboxes cannot reach each other) */
  network: string;
  /** host volume names (or absolute host paths) backing the sandbox's persistent folders */
  volumes: { root: string; home: string; srv: string; opt: string; docker: string };
  /** host folder mounted read-only at TRANSFER_MOUNT; none for a bare container (a bench's) */
  transferFolder?: string;
  env: string[];
  labels: Record<string, string>;
  /** see SandboxRuntimeMode: how the container is isolated from the host */
  runtime: SandboxRuntimeMode;
  limits: { memoryMb: number; cpus: number; pids: number };
}

// CgroupnsMode exists since API 1.41 (Docker 20.10) but @types/dockerode does not list it yet.
type HostConfig = Docker.HostConfig & { CgroupnsMode?: 'private' | 'host' };

export function sandboxContainerOptions(spec: SandboxContainerSpec): Docker.ContainerCreateOptions {
  const { volumes } = spec;
  const hostConfig: HostConfig = {
    NetworkMode: spec.network,
    // /var/lib/docker must not be on the container's overlayfs: dockerd's overlay2 cannot stack on it.
    Binds: [
      `${volumes.root}:/root`,
      `${volumes.home}:/home`,
      `${volumes.srv}:/srv`,
      `${volumes.opt}:/opt`,
      `${volumes.docker}:/var/lib/docker`,
      ...(spec.transferFolder ? [`${spec.transferFolder}:${TRANSFER_MOUNT}:ro`] : []),
    ],
    // After a host engine restart the engine brings back sandboxes that were running and leaves those
    // that lifecycle/ stopped (asleep) alone: a stop through the API counts as "manually stopped".
    RestartPolicy: { Name: 'unless-stopped' },
    // Private: the entrypoint's fresh cgroup mounts then show the sandbox's own cgroup as the root,
    // so the inner dockerd nests its containers below it instead of seeing the host's tree.
    CgroupnsMode: 'private',
    // The inner dockerd logs to stdout; a sandbox may run for months.
    LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '2' } },
    // One sandbox's fork bomb or memory hog must leave the others and the service alone. Inner
    // containers live in cgroups below the sandbox's, so these bound the whole sandbox.
    Memory: spec.limits.memoryMb * 1024 * 1024,
    MemorySwap: spec.limits.memoryMb * 1024 * 1024,
    NanoCpus: Math.round(spec.limits.cpus * 1e9),
    PidsLimit: spec.limits.pids,
  };

  if (spec.runtime === 'sysbox-runc') {
    // Sysbox gives the container a user namespace, writable cgroups and a safe /proc and /sys itself:
    // none of the unconfined flags below are needed, which is the point of using it.
    hostConfig.Runtime = 'sysbox-runc';
  } else {
    Object.assign(hostConfig, {
      // --privileged fails on our hosts: CAP_SYS_RESOURCE is missing from the bounding set, and
      // privileged asks for every capability. Everything else that dockerd needs is granted here.
      // In `userns` mode the sandbox engine runs the container in a user namespace (--userns-remap):
      // these capabilities then hold only over the sandbox's own namespaces, not over the host
      // (no mknod, no kernel knobs, no clock, no modules).
      CapAdd: ['ALL'],
      CapDrop: ['SYS_RESOURCE'],
      // dockerd makes mounts, namespaces and iptables rules, all of which the default profiles block.
      SecurityOpt: ['seccomp=unconfined', 'apparmor=unconfined'],
      // `--security-opt systempaths=unconfined` is a CLI flag that the CLI turns into these two empty
      // lists; the API wants them directly. The inner dockerd writes /proc/sys (ip_forward, bridge).
      MaskedPaths: [],
      ReadonlyPaths: [],
    } satisfies HostConfig);
    // Without a user namespace, runc inside makes device nodes (mknod) and inner containers need them.
    // With one, runc inside bind-mounts the sandbox's own few devices instead, and a device node that
    // reached a volume somehow must stay unusable: the engine's default device rules apply.
    if (spec.runtime === 'unisolated') hostConfig.DeviceCgroupRules = ['a *:* rwm'];
  }

  return {
    name: spec.name,
    Image: spec.image,
    Hostname: spec.name,
    Env: spec.env,
    Labels: spec.labels,
    // tini forwards SIGTERM to the inner dockerd, which gives its containers up to 10 s (their default)
    // and itself 15 s (--shutdown-timeout); past 20 s the host engine kills the sandbox.
    StopSignal: 'SIGTERM',
    StopTimeout: 20,
    HostConfig: hostConfig,
  };
}

/** The transfer folder a container has mounted, with where the sandbox sees it; nothing when it has none. */
export function transferOf(folder: string | undefined): { transferFolder?: string; transferMount?: string } {
  return folder ? { transferFolder: folder, transferMount: TRANSFER_MOUNT } : {};
}
