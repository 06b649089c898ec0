/**
 * Reads a file named by configuration without letting what the name turns out to be hang the
 * process or fill its memory: readFileSync of /dev/zero never ends, of a FIFO blocks until a writer
 * comes, and of a multi-gigabyte file takes all the heap. The file is opened without blocking
 * (O_NONBLOCK: a FIFO's open returns at once), must be a regular file by fstat of the opened
 * descriptor (what is checked is what is read, even if the name is swapped), and at most
 * `maxBytes` + 1 bytes are read, so a file that grows after fstat is refused all the same.
 * `noFollow` refuses a symbolic link as the last part of the name (O_NOFOLLOW: open fails with
 * ELOOP), and `check` sees the descriptor's fstat before a byte is read (an owner or mode rule).
 */
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import { CodedError } from './coded-error.js';

export class RegularFileError extends CodedError<'not_regular_file' | 'file_too_large'> {}

/**
 * The file's bytes; `maxBytes` is the most it may hold (a larger one is refused, never clipped).
 * Throws the open's own error (ENOENT, ELOOP, ...), what `check` throws, or a RegularFileError
 * whose message says what the file is.
 */
export function readRegularFile(path: string, options: { readonly maxBytes: number; readonly noFollow?: boolean; readonly check?: (stat: Stats) => void }): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | (options.noFollow === true ? constants.O_NOFOLLOW : 0));
  try {
    const stat = fstatSync(fd);
    options.check?.(stat);
    if (!stat.isFile()) throw new RegularFileError('not_regular_file', 'not a regular file (a directory, device or FIFO)');
    const tooLarge = (): RegularFileError => new RegularFileError('file_too_large', `larger than ${options.maxBytes} bytes`);
    if (stat.size > options.maxBytes) throw tooLarge();
    // Read to the end, not to stat.size: a file of /proc says 0 and holds more, and a file may grow.
    // Not zero-filled (a reload would clear the whole cap each time); only the bytes read are kept.
    const buf = Buffer.allocUnsafe(options.maxBytes + 1);
    let got = 0;
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, null);
      if (n === 0) break;
      got += n;
    }
    if (got > options.maxBytes) throw tooLarge();
    return Buffer.from(buf.subarray(0, got));
  } finally {
    closeSync(fd);
  }
}
