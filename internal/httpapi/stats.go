package httpapi

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// GetStepStats returns a queue's or a handler's throughput, error rate and latency over
// time (the bounds and the validation are the engine's).
func (s *Server) GetStepStats(ctx context.Context, req GetStepStatsRequestObject) (GetStepStatsResponseObject, error) {
	p := req.Params
	var fields []engine.FieldError
	durationParam := func(name string, v *string) time.Duration {
		if v == nil {
			return 0
		}
		d, _ := parseDuration("query/"+name, *v, &fields)
		return d
	}
	q := engine.StepStatsQuery{Queue: p.Queue, Handler: p.Handler,
		Window: durationParam("window", p.Window), Bucket: durationParam("bucket", p.Bucket)}
	if len(fields) > 0 {
		return nil, &engine.ValidationError{Errors: fields}
	}
	series, err := s.eng.StepStats(ctx, q)
	if err != nil {
		return nil, err
	}
	out := StepStats{Queue: series.Queue, Handler: series.Handler, Window: series.Window.String(), Bucket: series.Bucket.String(),
		From: series.From, To: series.To, Points: make([]StepStatsPoint, len(series.Points))}
	for i, pt := range series.Points {
		out.Points[i] = StepStatsPoint{At: pt.At, Ok: pt.OK, Retry: pt.Retry, Failed: pt.Failed, Done: pt.Done, Total: pt.Total}
		if l := pt.Latency; l != nil {
			out.Points[i].LatencyMs = &struct {
				P50 float64 `json:"p50"`
				P95 float64 `json:"p95"`
				P99 float64 `json:"p99"`
			}{l.P50, l.P95, l.P99}
		}
	}
	return GetStepStats200JSONResponse(out), nil
}
