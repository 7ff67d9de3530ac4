package httpapi

import (
	"context"
	"fmt"

	"github.com/gendurable/gendurable/internal/engine"
)

func gateBody(g engine.Gate) Gate {
	return Gate{Key: g.Key, Limit: g.Limit, Shards: g.Shards, Available: g.Available, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt}
}

func rateLimitBody(r engine.RateLimit) RateLimit {
	return RateLimit{Name: r.Name, Rate: r.Rate, Burst: r.Burst, Buckets: r.Buckets,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// missing names what was not found ("no handler named \"x\""); other errors pass through.
func missing(err error, what, name string) error {
	if err == engine.ErrNotFound {
		return fmt.Errorf("%w: no %s named %q", engine.ErrNotFound, what, name)
	}
	return err
}

// ListGates lists every gate.
func (s *Server) ListGates(ctx context.Context, _ ListGatesRequestObject) (ListGatesResponseObject, error) {
	gs, err := s.eng.ListGates(ctx)
	if err != nil {
		return nil, err
	}
	out := GateList{Gates: make([]Gate, len(gs))}
	for i, g := range gs {
		out.Gates[i] = gateBody(g)
	}
	return ListGates200JSONResponse(out), nil
}

// PutGate creates or changes a gate.
func (s *Server) PutGate(ctx context.Context, req PutGateRequestObject) (PutGateResponseObject, error) {
	shards := 1
	if req.Body.Shards != nil {
		shards = *req.Body.Shards
	}
	g, err := s.eng.SetGate(ctx, req.Key, req.Body.Limit, shards)
	if err != nil {
		return nil, err
	}
	return PutGate200JSONResponse(gateBody(g)), nil
}

// GetGate returns one gate.
func (s *Server) GetGate(ctx context.Context, req GetGateRequestObject) (GetGateResponseObject, error) {
	g, err := s.eng.GetGate(ctx, req.Key)
	if err != nil {
		return nil, missing(err, "gate", req.Key)
	}
	return GetGate200JSONResponse(gateBody(g)), nil
}

// DeleteGate removes a gate.
func (s *Server) DeleteGate(ctx context.Context, req DeleteGateRequestObject) (DeleteGateResponseObject, error) {
	if err := s.eng.DeleteGate(ctx, req.Key); err != nil {
		return nil, missing(err, "gate", req.Key)
	}
	return DeleteGate204Response{}, nil
}

// ListRateLimits lists every rate limit.
func (s *Server) ListRateLimits(ctx context.Context, _ ListRateLimitsRequestObject) (ListRateLimitsResponseObject, error) {
	ls, err := s.eng.ListRateLimits(ctx)
	if err != nil {
		return nil, err
	}
	out := RateLimitList{RateLimits: make([]RateLimit, len(ls))}
	for i, l := range ls {
		out.RateLimits[i] = rateLimitBody(l)
	}
	return ListRateLimits200JSONResponse(out), nil
}

// PutRateLimit creates or changes a rate limit.
func (s *Server) PutRateLimit(ctx context.Context, req PutRateLimitRequestObject) (PutRateLimitResponseObject, error) {
	l, err := s.eng.SetRateLimit(ctx, req.Name, req.Body.Rate, req.Body.Burst)
	if err != nil {
		return nil, err
	}
	return PutRateLimit200JSONResponse(rateLimitBody(l)), nil
}

// GetRateLimit returns one rate limit.
func (s *Server) GetRateLimit(ctx context.Context, req GetRateLimitRequestObject) (GetRateLimitResponseObject, error) {
	l, err := s.eng.GetRateLimit(ctx, req.Name)
	if err != nil {
		return nil, missing(err, "rate limit", req.Name)
	}
	return GetRateLimit200JSONResponse(rateLimitBody(l)), nil
}

// DeleteRateLimit removes a rate limit and its buckets.
func (s *Server) DeleteRateLimit(ctx context.Context, req DeleteRateLimitRequestObject) (DeleteRateLimitResponseObject, error) {
	if err := s.eng.DeleteRateLimit(ctx, req.Name); err != nil {
		return nil, missing(err, "rate limit", req.Name)
	}
	return DeleteRateLimit204Response{}, nil
}
