package engine

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// defaultOwner names this process for lease_owner: host:pid:random, unique even when
// several engines share one process (tests, the bench).
func defaultOwner() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
}
