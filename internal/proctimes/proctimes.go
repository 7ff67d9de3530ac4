// Package proctimes reads a process's CPU times from /proc (Linux), for the benchmarks
// that report CPU per step by process.
package proctimes

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat (100 on Linux).
const ClockTicks = 100

// Read returns a process's utime+stime and cutime+cstime (its reaped children) from
// /proc/<pid>/stat, in clock ticks, and its parent's pid.
func Read(pid int) (self, children int64, ppid int, err error) {
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
