//go:build !race

package dispatch

// raceEnabled: the race detector is on (its runtime allocates on its own, so allocation
// counts are not compared).
const raceEnabled = false
