package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultGOGC is the collector's target when the environment sets no GOGC:
// the heap may grow to 5 times the live data between collections instead
// of Go's 2 (GOGC=100). A gateway's live heap is small next to what each
// request allocates, so the collector would otherwise run every few
// thousand requests; README › Performance gives what it costs in memory
// and buys in CPU. GOGC in the environment, GOMEMLIMIT too, work as they
// do for any Go program.
const defaultGOGC = 400

// memoryShare is the part of a cgroup's memory limit that becomes the
// runtime's soft memory limit when the environment sets no GOMEMLIMIT: as
// the heap nears it the collector runs more often, so the raised GOGC
// cannot by itself take a container past its limit. The rest is left for
// what the Go runtime does not count (thread stacks, the binary).
const memoryShare = 0.9

// cgroupLimits are the files that hold a cgroup's memory limit, v2 first.
var cgroupLimits = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// tuneGC applies defaultGOGC unless lookup (os.LookupEnv) finds GOGC in
// the environment, and, unless it finds GOMEMLIMIT, a soft memory limit of
// memoryShare of the cgroup's memory limit, when read (os.ReadFile) finds
// one.
func tuneGC(lookup func(string) (string, bool), read func(string) ([]byte, error)) {
	if _, ok := lookup("GOGC"); !ok {
		debug.SetGCPercent(defaultGOGC)
	}
	if _, ok := lookup("GOMEMLIMIT"); ok {
		return
	}
	if limit, ok := cgroupMemoryLimit(read); ok {
		debug.SetMemoryLimit(int64(float64(limit) * memoryShare))
	}
}

// cgroupMemoryLimit returns the memory limit in bytes of the cgroup the
// process runs in, false when there is none: no file, "max" (v2), or v1's
// page-rounded largest value, which means unlimited.
func cgroupMemoryLimit(read func(string) ([]byte, error)) (int64, bool) {
	for _, path := range cgroupLimits {
		b, err := read(path)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<62 {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// tuneGCFromEnv is tuneGC for the running process.
func tuneGCFromEnv() { tuneGC(os.LookupEnv, os.ReadFile) }
