package engine

import (
	"context"

	"github.com/gendurable/gendurable/internal/pg"
)

// enrich loads what the claimed steps are shown: their inboxes and, after a join, their
// children: one statement each for the whole batch, and none when no claimed step has
// unconsumed signals or has just been woken by its children.
func (e *Engine) enrich(ctx context.Context, steps []Step) error {
	var windows []pg.InboxWindow
	var parents []int64
	index := make(map[int64]int, len(steps))
	for i := range steps {
		s := &steps[i]
		index[s.ID] = i
		if s.ClaimInboxSeq > s.ConsumedSeq {
			windows = append(windows, pg.InboxWindow{JobID: s.ID, After: s.ConsumedSeq, Upto: s.ClaimInboxSeq})
		}
		s.SignalsMore = int(s.InboxSeq - s.ClaimInboxSeq)
		if s.Wake != nil && *s.Wake == "children" {
			parents = append(parents, s.ID)
		}
	}
	if len(windows) > 0 {
		signals, err := e.db.SignalLoadInboxes(ctx, windows)
		if err != nil {
			return err
		}
		for _, sig := range signals {
			s := &steps[index[sig.JobID]]
			s.Signals = append(s.Signals, sig)
		}
	}
	if len(parents) > 0 {
		children, totals, err := e.db.ChildLoadForJoin(ctx, parents, e.cfg.ChildrenCap)
		if err != nil {
			return err
		}
		for _, c := range children {
			s := &steps[index[c.ParentID]]
			s.Children = append(s.Children, c)
		}
		for id, total := range totals {
			s := &steps[index[id]]
			s.ChildrenMore = total - len(s.Children)
		}
	}
	return nil
}
