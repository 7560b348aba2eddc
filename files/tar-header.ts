/**
 * The ustar header of one regular file, so an upload can be sent to the engine's archive API as
 * a tar stream (header, the bytes as they come, padding, end blocks) without a tar library.
 */
export function fileHeader(name: string, size: number, mode = 0o600): Buffer {
  if (Buffer.byteLength(name) > 100) throw new Error('tar name longer than 100 bytes');
  const h = Buffer.alloc(512);
  const octal = (value: number, at: number, width: number) => h.write(value.toString(8).padStart(width - 1, '0') + '\0', at, width, 'ascii');
  h.write(name, 0, 100, 'utf8');
  octal(mode, 100, 8);
  octal(0, 108, 8); // uid root
  octal(0, 116, 8); // gid root
  octal(size, 124, 12); // up to 8 GiB
  octal(Math.floor(Date.now() / 1000), 136, 12);
  h.write('        ', 148, 8, 'ascii'); // checksum counts as spaces
  h.write('0', 156, 1, 'ascii');
  h.write('ustar\0', 257, 6, 'ascii');
  h.write('00', 263, 2, 'ascii');
  h.write('root', 265, 32, 'ascii');
  h.write('root', 297, 32, 'ascii');
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii');
  return h;
}

/** Zero padding after `size` bytes of content, then the two end-of-archive blocks. */
export function fileTrailer(size: number): Buffer {
  return Buffer.alloc(((512 - (size % 512)) % 512) + 1024);
}
