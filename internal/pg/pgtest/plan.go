package pgtest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// PlanNode is one node of an EXPLAIN (ANALYZE, FORMAT JSON) plan.
type PlanNode struct {
	NodeType          string     `json:"Node Type"`
	RelationName      string     `json:"Relation Name"`
	IndexName         string     `json:"Index Name"`
	CTEName           string     `json:"CTE Name"`
	ActualRows        float64    `json:"Actual Rows"`
	ActualLoops       float64    `json:"Actual Loops"`
	RowsRemovedFilter float64    `json:"Rows Removed by Filter"`
	SharedHitBlocks   float64    `json:"Shared Hit Blocks"`
	SharedReadBlocks  float64    `json:"Shared Read Blocks"`
	Plans             []PlanNode `json:"Plans"`
}

// ParsePlan reads the JSON output of EXPLAIN (FORMAT JSON).
func ParsePlan(b []byte) (PlanNode, error) {
	var top []struct {
		Plan PlanNode `json:"Plan"`
	}
	if err := json.Unmarshal(b, &top); err != nil || len(top) == 0 {
		return PlanNode{}, fmt.Errorf("pgtest: bad plan: %v", err)
	}
	return top[0].Plan, nil
}

// Walk calls fn on every node, depth first.
func (n PlanNode) Walk(fn func(PlanNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.Walk(fn)
	}
}

// MaxRowsRead is the largest number of rows any single scan node read from relation:
// rows it returned plus rows its filter removed, over all its loops (the measure of
// "rows read" that does not depend on which plan Postgres picks).
func (n PlanNode) MaxRowsRead(relation string) float64 {
	var most float64
	n.Walk(func(p PlanNode) {
		if p.RelationName != relation || !strings.Contains(p.NodeType, "Scan") {
			return
		}
		loops := max(p.ActualLoops, 1)
		if read := (p.ActualRows + p.RowsRemovedFilter) * loops; read > most {
			most = read
		}
	})
	return most
}

// LargestRead is the most rows any single node read over all its loops (rows it
// returned plus rows its filter removed), whatever its relation or CTE, and which node:
// the measure that catches a nested loop rescanning a CTE once per outer row.
func (n PlanNode) LargestRead() (most float64, where string) {
	n.Walk(func(p PlanNode) {
		if read := (p.ActualRows + p.RowsRemovedFilter) * max(p.ActualLoops, 1); read > most {
			most, where = read, strings.TrimSpace(p.NodeType+" "+p.RelationName+p.CTEName)
		}
	})
	return most, where
}

// IndexBlocks is the number of buffers the scans of index touched (with BUFFERS): the
// measure that also counts entries an index condition skipped inside the index, which
// no row count shows.
func (n PlanNode) IndexBlocks(index string) float64 {
	var blocks float64
	n.Walk(func(p PlanNode) {
		if p.IndexName == index {
			blocks += p.SharedHitBlocks + p.SharedReadBlocks
		}
	})
	return blocks
}

// Uses reports whether some node scans index.
func (n PlanNode) Uses(index string) bool {
	found := false
	n.Walk(func(p PlanNode) { found = found || p.IndexName == index })
	return found
}

// HasSeqScan reports whether some node sequentially scans relation.
func (n PlanNode) HasSeqScan(relation string) bool {
	found := false
	n.Walk(func(p PlanNode) { found = found || (p.NodeType == "Seq Scan" && p.RelationName == relation) })
	return found
}

// NeverExecuted reports whether every node that scans relation ran zero times (EXPLAIN's
// "never executed"), and that at least one such node exists in the plan. (A
// data-modifying CTE's own ModifyTable node always runs; what matters is its scan.)
func (n PlanNode) NeverExecuted(relation string) bool {
	seen, ran := false, false
	n.Walk(func(p PlanNode) {
		if p.RelationName == relation && strings.Contains(p.NodeType, "Scan") {
			seen = true
			ran = ran || p.ActualLoops > 0
		}
	})
	return seen && !ran
}
