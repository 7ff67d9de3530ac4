package main

import (
	"path/filepath"
	"strconv"

	"github.com/gendurable/gendurable/internal/proctimes"
)

// processCPU is a process's own CPU so far, in clock ticks (0 when it is gone).
func processCPU(pid int) int64 {
	self, _, _, err := proctimes.Read(pid)
	if err != nil {
		return 0
	}
	return self
}

// postgresCPU is the CPU of a PostgreSQL cluster so far, in clock ticks: every child of
// the postmaster (backends, autovacuum, WAL writer, checkpointer...) plus the postmaster
// itself and the children it has reaped, so a backend that exits inside a measured window
// is still counted. Backends in exclude (the bench's own probes) are left out.
func postgresCPU(postmaster int, exclude map[int]bool) int64 {
	self, reaped, _, err := proctimes.Read(postmaster)
	if err != nil {
		return 0
	}
	total := self + reaped
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || exclude[pid] {
			continue
		}
		if s, _, ppid, err := proctimes.Read(pid); err == nil && ppid == postmaster {
			total += s
		}
	}
	return total
}

// postmasterOf is the parent of a backend: the cluster's postmaster (0 when /proc does
// not show it, e.g. a remote database).
func postmasterOf(backend int) int {
	_, _, ppid, err := proctimes.Read(backend)
	if err != nil {
		return 0
	}
	return ppid
}

// ticksToMicros turns clock ticks into microseconds per step.
func ticksToMicros(ticks int64, steps int) float64 {
	if steps == 0 {
		return 0
	}
	return float64(ticks) * 1e6 / proctimes.ClockTicks / float64(steps)
}
