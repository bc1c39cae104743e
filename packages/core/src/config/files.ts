import { z } from 'zod';

/** `dataDir`: this host's LMDB caches (the api-servers read the same directory). */
export const DataDirConfigSchema = z.string().min(1).default('./.sluice');

/** `files`: where transfer requests may read and write files. */
export const FilesConfigSchema = z
  .strictObject({ roots: z.array(z.string().min(1)).default([]) })
  .prefault({});
export type FilesConfig = z.output<typeof FilesConfigSchema>;
