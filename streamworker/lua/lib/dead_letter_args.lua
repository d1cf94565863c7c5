-- lib/dead_letter_args.lua: the XADD of a dead letter, its fields and their provenance (included
-- by dead_letter.lua and dead_letter_backfill.lua, so that a live worker's dead letters and a
-- backfill's carry the same provenance: `streamworker dlq` and replay_dead_letter.lua read it).
--
-- dead_letter_args(dlq, entry, first, stream, id, group, consumer, deliveries, err, handler,
-- at_ms) returns the arguments of redis.call('XADD', unpack(args)) that adds the dead letter to
-- the stream dlq with a generated id: the entry's own fields and values, entry[first…#entry],
-- then the provenance, in this order: dlq_stream (the stream the entry is from), dlq_id (its id
-- there), dlq_group, dlq_consumer, dlq_deliveries, dlq_error ("<type>: <message>"), dlq_handler
-- and dlq_at_ms. The caller appends its optional fields (dlq_traceback, dlq_body_missing) after.

local function dead_letter_args(dlq, entry, first, stream, id, group, consumer, deliveries, err,
                                handler, at_ms)
  local args = {dlq, '*'}
  for i = first, #entry do
    args[#args + 1] = entry[i]
  end
  local provenance = {
    'dlq_stream', stream,
    'dlq_id', id,
    'dlq_group', group,
    'dlq_consumer', consumer,
    'dlq_deliveries', deliveries,
    'dlq_error', err,
    'dlq_handler', handler,
    'dlq_at_ms', at_ms,
  }
  for i = 1, #provenance do
    args[#args + 1] = provenance[i]
  end
  return args
end
