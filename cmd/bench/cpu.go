package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat (100 on Linux).
const clockTicks = 100

// procTimes reads a process's utime+stime and cutime+cstime (its reaped children) from
// /proc/<pid>/stat, in clock ticks, and its parent's pid.
func procTimes(pid int) (self, children int64, ppid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name is in parentheses and may hold spaces: fields count from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	n := func(field int) int64 { v, _ := strconv.ParseInt(f[field-3], 10, 64); return v }
	return n(14) + n(15), n(16) + n(17), int(n(4)), nil
}

// processCPU is a process's own CPU so far, in clock ticks (0 when it is gone).
func processCPU(pid int) int64 {
	self, _, _, err := procTimes(pid)
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
	self, reaped, _, err := procTimes(postmaster)
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
		if s, _, ppid, err := procTimes(pid); err == nil && ppid == postmaster {
			total += s
		}
	}
	return total
}

// postmasterOf is the parent of a backend: the cluster's postmaster (0 when /proc does
// not show it, e.g. a remote database).
func postmasterOf(backend int) int {
	_, _, ppid, err := procTimes(backend)
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
	return float64(ticks) * 1e6 / clockTicks / float64(steps)
}
