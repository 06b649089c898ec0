/**
 * The one base class of every error this project throws on purpose. A `code` from a closed
 * catalog is what callers and tests branch on; the message is for people and says what to do.
 *
 * Branded, as undici brands its errors: `instanceof` fails when a host application loads two
 * copies of this package (each has its own classes), so an error carries the names of its class
 * and of every class it extends under a registry symbol, and isCodedError reads those.
 */
const BRAND = Symbol.for('dev.capybara.coded-error');

export class CodedError<Code extends string = string> extends Error {
  readonly code: Code;

  constructor(code: Code, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    const names: string[] = [];
    for (let c: unknown = new.target; typeof c === 'function' && c !== Error; c = Object.getPrototypeOf(c)) names.push((c as { name: string }).name);
    Object.defineProperty(this, BRAND, { value: Object.freeze(names) });
  }
}

/**
 * True when `err` is an error of the class named `className` or of one that extends it, made by
 * this package or by another copy of it.
 */
export function isCodedError(err: unknown, className: string): err is CodedError {
  if (typeof err !== 'object' || err === null) return false;
  const names = (err as { [BRAND]?: unknown })[BRAND];
  return Array.isArray(names) && names.includes(className) && typeof (err as { code?: unknown }).code === 'string';
}
