/** What the proxy may hold and how fast: its limits, the memory budget and plan, the descriptor plan, token buckets. */
export * from './fd-budget.js';
export * from './limits.js';
export * from './memory-budget.js';
export * from './memory-plan.js';
export * from './rate-limit.js';
