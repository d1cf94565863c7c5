"""Differential testing helpers: run the same command programs on redis-server 7.0, on the
engine and on fakeredis, and compare the raw reply bytes after masking what the clock decides."""
