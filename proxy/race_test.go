//go:build race

package proxy

// raceSlack is how many allocations per request the race detector adds:
// it makes sync.Pool drop a share of what is put back.
const raceSlack = 8
