/**
 * The one base class of every error this project throws on purpose. A `code` from a closed
 * catalog is what callers and tests branch on; the message is for people and says what to do.
 */
export class CodedError<Code extends string = string> extends Error {
  readonly code: Code;

  constructor(code: Code, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}
