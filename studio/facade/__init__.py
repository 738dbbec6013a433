"""The facade's rooms: one module per capability, each defining the facade functions of its room.

Front ends import ``studio.api`` only; it names every function here and imports a room on first use
(docs/architecture.md section 1)."""
