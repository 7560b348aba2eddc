import { Type, type Static } from '@sinclair/typebox';

export const ErrorBody = Type.Object(
  { error: Type.Object({ code: Type.String(), message: Type.String() }) },
  { $id: 'Error', description: 'Every error: a stable code and a message saying what to do next.' },
);
export type ErrorBody = Static<typeof ErrorBody>;

export const SandboxParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 64 }) });

/** Error responses a route can give, keyed by status, for the OpenAPI document. */
export function errorResponses(...codes: number[]) {
  return Object.fromEntries(codes.map((c) => [c, Type.Ref('Error')]));
}
