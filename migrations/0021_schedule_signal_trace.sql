-- 0021: W3C trace context kept with a schedule and with a signal (docs/observability.md,
-- "Schedules" and "Signals").
--
-- schedules.trace_context is the trace context of the request that created or last
-- changed the schedule (jobs.trace_context's form: the traceparent, then a space and the
-- tracestate when there is one; NULL when the request came without one and tracing is
-- off). A tick does not continue it: with tracing on each tick is a new trace whose root
-- span links to it; with tracing off a tick's job has no trace context.
--
-- signals.trace_context is the sender's trace context (the same form). The step a signal
-- is shown to (SignalLoadInboxes, which the dispatcher runs for such steps already) links
-- its attempt span to it: no statement is added to the step path.
--
-- Nullable columns without a default are catalog changes (no rewrite); on Citus the
-- coordinator propagates them to the reference table (schedules) and to every shard of
-- signals, so there is no Citus step.
ALTER TABLE schedules ADD COLUMN trace_context text;
ALTER TABLE signals ADD COLUMN trace_context text;
