"""The audit log: one append-only row per action that changes something (docs/audit.md)."""
