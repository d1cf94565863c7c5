"""Idempotency strategies: how a batch's effects become durable and how it is acked."""
