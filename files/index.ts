export { SandboxFiles, MAX_TEXT_BYTES, type FileEntry, type Download } from './sandbox-files.ts';
export { parseSandboxPath, FOLDERS, DEFAULT_FOLDER, VOLUMES_DIR, type SandboxPath } from './paths.ts';
export { listVolumes, type VolumeInfo } from './volumes.ts';
export { TransferPipes } from './transfer-pipes.ts';
