import { z } from 'zod';

/** A URL or server address in configuration (bounded: configuration is trusted, a runaway value is a mistake). */
export const UrlString = z.string().min(1).max(2048);

/** A port number; 0 lets the operating system choose one. */
export const PortSchema = z.number().int().min(0).max(65_535);

/** A record field named in configuration: never an operator (`$…`) nor a prototype key. */
export const FieldName = z
  .string()
  .min(1)
  .max(256)
  .refine((f) => !f.startsWith('$') && f !== '__proto__' && f !== 'constructor' && f !== 'prototype', {
    message: 'not a valid field name',
  });
