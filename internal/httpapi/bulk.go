package httpapi

import (
	"context"

	"github.com/gendurable/gendurable/internal/engine"
)

// CancelJobs cancels one bounded batch of the live jobs a filter selects.
func (s *Server) CancelJobs(ctx context.Context, req CancelJobsRequestObject) (CancelJobsResponseObject, error) {
	f, limit := bulkRequest(req.Body)
	r, err := s.eng.CancelJobs(ctx, f, limit)
	if err != nil {
		return nil, err
	}
	return CancelJobs200JSONResponse{Changed: r.Changed, More: r.More}, nil
}

// RetryJobs retries one bounded batch of the failed or cancelled jobs a filter selects.
func (s *Server) RetryJobs(ctx context.Context, req RetryJobsRequestObject) (RetryJobsResponseObject, error) {
	f, limit := bulkRequest(req.Body)
	r, err := s.eng.RetryJobs(ctx, f, limit)
	if err != nil {
		return nil, err
	}
	return RetryJobs200JSONResponse{Changed: r.Changed, More: r.More}, nil
}

// bulkRequest translates a bulk body (limit 0 when absent: the engine's default).
func bulkRequest(b *BulkRequest) (engine.BulkFilter, int) {
	f := engine.BulkFilter{All: b.Filter.All != nil && *b.Filter.All, Handler: b.Filter.Handler,
		Queue: b.Filter.Queue, KeyPrefix: b.Filter.KeyPrefix,
		CreatedAfter: b.Filter.CreatedAfter, CreatedBefore: b.Filter.CreatedBefore}
	if b.Filter.Status != nil {
		f.Statuses = make([]string, len(*b.Filter.Status))
		for i, st := range *b.Filter.Status {
			f.Statuses[i] = string(st)
		}
	}
	limit := 0
	if b.Limit != nil {
		limit = *b.Limit
	}
	return f, limit
}
