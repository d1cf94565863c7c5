"""Pure data structures of the engine (no RESP, no command parsing)."""
