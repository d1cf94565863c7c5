"""The worker runtime: consume loops, shutdown, and the Redis access they share."""
