import { ValidationError } from '@sluice/core';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';

/**
 * A `preValidation` hook refusing a JSON body of `null` with `400 VALIDATION_FAILED` ("the body must be a JSON
 * object"). fastify validates an absent body as `null` and stores the validator's value back, so after validation
 * a route cannot tell `null` from no body at all, and a schema that allows no body (`.nullish()`) took a `null` as
 * none. Before validation the two still differ (`null` parsed; `undefined` when nothing was sent), which is where
 * this hook looks. Register it on an instance whose routes all take JSON objects or nothing.
 *
 * @example
 * ```ts
 * app.addHook('preValidation', refuseNullBody);
 * ```
 */
export function refuseNullBody(
  request: FastifyRequest,
  _reply: FastifyReply,
  done: HookHandlerDoneFunction,
): void {
  // A callback hook, not an async one: it runs on every request, and an async hook costs a promise each time.
  if (request.body === null)
    done(
      new ValidationError('Invalid body: the body must be a JSON object', [
        { path: '(root)', message: 'expected an object, received null' },
      ]),
    );
  else done();
}
