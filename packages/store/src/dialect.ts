/** The two SQL dialects the store runs on. */
export const StoreDialect = { sqlite: 'sqlite', postgres: 'postgres' } as const;
export type StoreDialect = (typeof StoreDialect)[keyof typeof StoreDialect];
