package pg

import (
	"strings"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// The SQL of every statement lives in sql/*.sql, one file per table (or per family of
// statements on the jobs table), and is compiled by sqlc into dbsqlc: a Params and a Row
// struct and a method per statement (make generate; CI fails when dbsqlc is stale).

// statements maps each statement name ("-- name: X" in sql/*.sql) to the SQL sqlc
// generated for it: what CheckStatements prepares and the plan tests EXPLAIN.
// TestEveryStatementIsListed holds it complete.
var statements = map[string]string{
	"APIKeyAuthenticate":        dbsqlc.APIKeyAuthenticate,
	"APIKeyInsert":              dbsqlc.APIKeyInsert,
	"APIKeyList":                dbsqlc.APIKeyList,
	"APIKeyRevoke":              dbsqlc.APIKeyRevoke,
	"ChildLoadForJoin":          dbsqlc.ChildLoadForJoin,
	"DatabaseNow":               dbsqlc.DatabaseNow,
	"FairnessKeyDelete":         dbsqlc.FairnessKeyDelete,
	"FairnessKeyList":           dbsqlc.FairnessKeyList,
	"FairnessKeyTop":            dbsqlc.FairnessKeyTop,
	"FairnessKeyUpsert":         dbsqlc.FairnessKeyUpsert,
	"GateDelete":                dbsqlc.GateDelete,
	"GateList":                  dbsqlc.GateList,
	"GateSlotsLock":             dbsqlc.GateSlotsLock,
	"GateSlotsReconcile":        dbsqlc.GateSlotsReconcile,
	"GateSlotsShape":            dbsqlc.GateSlotsShape,
	"GateUpsert":                dbsqlc.GateUpsert,
	"HandlerBreakerProbe":       dbsqlc.HandlerBreakerProbe,
	"HandlerBreakerProbeResult": dbsqlc.HandlerBreakerProbeResult,
	"HandlerBreakerRecord":      dbsqlc.HandlerBreakerRecord,
	"HandlerBreakerResume":      dbsqlc.HandlerBreakerResume,
	"HandlerDelete":             dbsqlc.HandlerDelete,
	"HandlerGet":                dbsqlc.HandlerGet,
	"HandlerList":               dbsqlc.HandlerList,
	"HandlerRotateSecret":       dbsqlc.HandlerRotateSecret,
	"HandlerUpsert":             dbsqlc.HandlerUpsert,
	"JobApplyOutcomes":          dbsqlc.JobApplyOutcomes,
	"JobApplyOutcomesCrediting": dbsqlc.JobApplyOutcomesCrediting,
	"JobApplyPlainOutcomes":     dbsqlc.JobApplyPlainOutcomes,
	"JobCancel":                 dbsqlc.JobCancel,
	"JobCancelMany":             dbsqlc.JobCancelMany,
	"JobClaimBatch":             dbsqlc.JobClaimBatch,
	"JobClaimFair":              dbsqlc.JobClaimFair,
	"JobClaimPlain":             dbsqlc.JobClaimPlain,
	"JobFairnessKeyBackfill":    dbsqlc.JobFairnessKeyBackfill,
	"JobFirstFrom":              dbsqlc.JobFirstFrom,
	"JobFlowList":               dbsqlc.JobFlowList,
	"JobGCDelete":               dbsqlc.JobGCDelete,
	"JobGCSelect":               dbsqlc.JobGCSelect,
	"JobGet":                    dbsqlc.JobGet,
	"JobGetByIdempotencyKey":    dbsqlc.JobGetByIdempotencyKey,
	"JobGetLiveByKey":           dbsqlc.JobGetLiveByKey,
	"JobGetMany":                dbsqlc.JobGetMany,
	"JobIDBounds":               dbsqlc.JobIDBounds,
	"JobInsertMany":             dbsqlc.JobInsertMany,
	"JobInsertPlain":            dbsqlc.JobInsertPlain,
	"JobInsertProblems":         dbsqlc.JobInsertProblems,
	"JobList":                   dbsqlc.JobList,
	"JobListExpiredLeases":      dbsqlc.JobListExpiredLeases,
	"JobReadyExists":            dbsqlc.JobReadyExists,
	"JobReapExpiredLeases":      dbsqlc.JobReapExpiredLeases,
	"JobReplay":                 dbsqlc.JobReplay,
	"JobRerun":                  dbsqlc.JobRerun,
	"JobRetry":                  dbsqlc.JobRetry,
	"JobRetryMany":              dbsqlc.JobRetryMany,
	"JobTablePages":             dbsqlc.JobTablePages,
	"JobWakeExpiredAwaits":      dbsqlc.JobWakeExpiredAwaits,
	"JobWakeParked":             dbsqlc.JobWakeParked,
	"LeaseExtendMany":           dbsqlc.LeaseExtendMany,
	"LeaseGetBackoffs":          dbsqlc.LeaseGetBackoffs,
	"LeaseParkMany":             dbsqlc.LeaseParkMany,
	"LeaseReleaseMany":          dbsqlc.LeaseReleaseMany,
	"QueueCounts":               dbsqlc.QueueCounts,
	"QueueEnsureMany":           dbsqlc.QueueEnsureMany,
	"QueueList":                 dbsqlc.QueueList,
	"QueueLockFair":             dbsqlc.QueueLockFair,
	"QueueUpsert":               dbsqlc.QueueUpsert,
	"RateLimitDelete":           dbsqlc.RateLimitDelete,
	"RateLimitList":             dbsqlc.RateLimitList,
	"RateLimitUpsert":           dbsqlc.RateLimitUpsert,
	"ScheduleDelete":            dbsqlc.ScheduleDelete,
	"ScheduleFire":              dbsqlc.ScheduleFire,
	"ScheduleGet":               dbsqlc.ScheduleGet,
	"ScheduleList":              dbsqlc.ScheduleList,
	"ScheduleListDue":           dbsqlc.ScheduleListDue,
	"ScheduleUpsert":            dbsqlc.ScheduleUpsert,
	"SignalDeliver":             dbsqlc.SignalDeliver,
	"SignalList":                dbsqlc.SignalList,
	"SignalLoadInboxes":         dbsqlc.SignalLoadInboxes,
	"StepList":                  dbsqlc.StepList,
	"StepPartitionList":         dbsqlc.StepPartitionList,
	"StepRollupAppend":          dbsqlc.StepRollupAppend,
	"StepRollupTrim":            dbsqlc.StepRollupTrim,
	"StepStats":                 dbsqlc.StepStats,
	"StepWindowOfQueue":         dbsqlc.StepWindowOfQueue,
}

// Statement returns the SQL text of a named statement, for tests that EXPLAIN it; it
// panics on a name no sql file defines.
func Statement(name string) string {
	s, ok := statements[name]
	if !ok {
		panic("pg: no statement named " + name)
	}
	return s
}

// statementName is the name sqlc's "-- name: X :kind" first line gives a statement, or
// "other" for SQL that is not one of ours.
func statementName(sql string) string {
	rest, ok := strings.CutPrefix(sql, "-- name: ")
	if !ok {
		return "other"
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}
