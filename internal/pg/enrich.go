package pg

import (
	"encoding/json"
	"time"
)

// Signal is one delivered signal of a job's inbox.
type Signal struct {
	ID        int64
	JobID     int64
	Seq       int64
	Name      string
	Payload   json.RawMessage
	CreatedAt time.Time
	// TraceContext is the sender's trace context (jobs.trace_context's form; nil: none).
	TraceContext *string
}

// Child is one child job as its parent's step sees it.
type Child struct {
	ID       int64
	ParentID int64
	Handler  string
	Key      *string
	Status   string
	Result   json.RawMessage
	Error    json.RawMessage
}
