package engine

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// defaultOwner names this engine for lease_owner: host:pid:random, unique even when
// several engines share one process (tests, the bench).
func defaultOwner() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return processName() + ":" + hex.EncodeToString(b)
}

// processName names this process: host:pid.
func processName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}
