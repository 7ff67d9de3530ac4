package httpapi

import (
	"context"

	"github.com/gendurable/gendurable/internal/engine"
)

// ListFairnessKeys lists a page of a queue's fairness keys with their counts.
func (s *Server) ListFairnessKeys(ctx context.Context, req ListFairnessKeysRequestObject) (ListFairnessKeysResponseObject, error) {
	p := engine.FairnessKeyPage{Queue: req.Name, After: req.Params.After, Limit: 50,
		ByRunnable: req.Params.Order != nil && *req.Params.Order == ListFairnessKeysParamsOrderRunnable}
	if req.Params.Prefix != nil {
		p.Prefix = *req.Params.Prefix
	}
	if req.Params.Limit != nil {
		p.Limit = *req.Params.Limit
	}
	keys, next, err := s.eng.ListFairnessKeys(ctx, p)
	if err != nil {
		return nil, missing(err, "queue", req.Name)
	}
	out := FairnessKeyList{Keys: make([]FairnessKeySettings, len(keys)), NextAfter: next}
	for i := range keys {
		out.Keys[i] = fairnessKeyBody(keys[i])
	}
	return ListFairnessKeys200JSONResponse(out), nil
}

// PutFairnessKey sets a key's weight and cap in a queue.
func (s *Server) PutFairnessKey(ctx context.Context, req PutFairnessKeyRequestObject) (PutFairnessKeyResponseObject, error) {
	k, err := s.eng.SetFairnessKey(ctx, req.Name, req.Key, req.Body.Weight, req.Body.MaxInFlight)
	if err != nil {
		return nil, missing(err, "queue", req.Name)
	}
	return PutFairnessKey200JSONResponse(fairnessKeyBody(k)), nil
}

// GetFairnessKey answers one key of a queue with its settings and counts.
func (s *Server) GetFairnessKey(ctx context.Context, req GetFairnessKeyRequestObject) (GetFairnessKeyResponseObject, error) {
	k, err := s.eng.GetFairnessKey(ctx, req.Name, req.Key)
	if err != nil {
		return nil, missing(err, "queue", req.Name)
	}
	return GetFairnessKey200JSONResponse(fairnessKeyBody(k)), nil
}

// DeleteFairnessKey drops a key's settings.
func (s *Server) DeleteFairnessKey(ctx context.Context, req DeleteFairnessKeyRequestObject) (DeleteFairnessKeyResponseObject, error) {
	if err := s.eng.DeleteFairnessKey(ctx, req.Name, req.Key); err != nil {
		return nil, missing(err, "fairness key with settings", req.Key)
	}
	return DeleteFairnessKey204Response{}, nil
}

func fairnessKeyBody(k engine.FairnessKey) FairnessKeySettings {
	return FairnessKeySettings{Queue: k.Queue, Key: k.Key, Weight: k.Weight, MaxInFlight: k.MaxInFlight,
		Declared: k.Declared, Runnable: k.Runnable, InFlight: k.InFlight, UpdatedAt: k.UpdatedAt}
}
